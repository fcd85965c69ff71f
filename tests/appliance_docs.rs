//! The user docs cover what the code offers: every flag and variable of `bmo run` with
//! its default in docs/configuration.md, every errorType in docs/troubleshooting.md.

// Tests and benchmarks may panic on what they set up themselves.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn read(path: &str) -> String {
    std::fs::read_to_string(Path::new(ROOT).join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

#[test]
fn configuration_reference_lists_every_flag_variable_and_default() {
    let doc = read("docs/configuration.md");
    let command = <bmo::config::Config as clap::Args>::augment_args(clap::Command::new("run"));
    for arg in command.get_arguments() {
        let Some(long) = arg.get_long() else { continue };
        // The row of this flag: | `--flag` | `VAR` | default | meaning |
        let row = doc
            .lines()
            .find(|l| l.starts_with(&format!("| `--{long}` |")))
            .unwrap_or_else(|| panic!("docs/configuration.md has no row for --{long}"));
        if let Some(env) = arg.get_env() {
            let env = env.to_string_lossy();
            assert!(
                row.contains(&format!("`{env}`")),
                "row of --{long} lacks {env}: {row}"
            );
        }
        for default in arg.get_default_values() {
            let default = default.to_string_lossy();
            assert!(
                row.contains(&format!("`{default}`")),
                "row of --{long} lacks its default {default}: {row}"
            );
        }
    }
}

#[test]
fn troubleshooting_has_one_entry_per_error_type() {
    let doc = read("docs/troubleshooting.md");
    // The errorType enum, as the CRD lists it.
    let crd = read("deploy/crds/metal3.io_baremetalhosts.yaml");
    let values: Vec<&str> = crd
        .lines()
        .skip_while(|l| l.trim() != "errorType:")
        .skip_while(|l| l.trim() != "enum:")
        .skip(1)
        .take_while(|l| l.trim_start().starts_with("- "))
        .map(|l| l.trim_start().trim_start_matches("- "))
        .collect();
    assert_eq!(values.len(), 8, "errorType enum of the CRD: {values:?}");
    for value in values {
        let heading = format!("## `{value}`");
        assert_eq!(
            doc.lines().filter(|l| *l == heading).count(),
            1,
            "docs/troubleshooting.md needs exactly one {heading}"
        );
    }
}
