//! The user docs cover what the code offers: every flag and variable of `bmo run` with
//! its default in docs/configuration.md, every errorType in docs/troubleshooting.md,
//! and a test for every command block of docs/install.md.

use std::path::Path;

use crate::support::appliance;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn read(path: &str) -> String {
    std::fs::read_to_string(Path::new(ROOT).join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

#[test]
fn configuration_reference_lists_every_flag_variable_and_default() {
    let _shared = crate::support::shared();
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
    let _shared = crate::support::shared();
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

/// docs/install.md's promise: each `sh` block is named, and a test reads it by that
/// name (through support::appliance's doc_script or run_build_block) and runs it; a
/// block no test can run says why in its marker.
#[test]
fn install_guide_blocks_are_each_run_by_a_test() {
    let _shared = crate::support::shared();
    let blocks = appliance::doc_blocks();
    assert!(blocks.len() >= 10, "{} blocks", blocks.len());
    // The test modules tests/AREA/*.rs and the support module tests/support/*.rs.
    let tests: Vec<String> = std::fs::read_dir(Path::new(ROOT).join("tests"))
        .expect("tests/")
        .flatten()
        .map(|e| e.path())
        .filter(|dir| dir.is_dir())
        .flat_map(|dir| {
            std::fs::read_dir(dir)
                .expect("a tests/ directory")
                .flatten()
        })
        .map(|e| e.path())
        .filter(|p| p.is_file() && p.extension().is_some_and(|e| e == "rs"))
        .filter(|p| !p.ends_with("appliance_docs.rs"))
        .map(|p| std::fs::read_to_string(p).expect("test source"))
        .collect();
    assert!(tests.len() > 30, "{} test sources", tests.len());
    let mut names = std::collections::BTreeSet::new();
    for block in &blocks {
        assert!(
            !block.name.is_empty(),
            "a sh block of docs/install.md has no `<!-- commands: NAME -->`:\n{}",
            block.script
        );
        assert!(names.insert(&block.name), "two blocks named {}", block.name);
        if let Some(why) = &block.not_run {
            assert!(
                !why.is_empty(),
                "block {} says `not run:` without why",
                block.name
            );
            continue;
        }
        let quoted = format!("\"{}\"", block.name);
        assert!(
            tests.iter().any(|t| t.contains(&quoted)
                && (t.contains("doc_script(") || t.contains("run_build_block("))),
            "no test reads the block {} of docs/install.md",
            block.name
        );
    }
}

/// How the tests move docs/install.md's paths under their own root: host paths
/// only, whole components only.
#[test]
fn install_guide_paths_move_under_a_test_root() {
    let _shared = crate::support::shared();
    let got = appliance::under_root(
        "install -D -m 0755 bin/bmo /usr/local/bin/bmo\n\
         podman run -v /etc/bmo:/etc/bmo:ro --env-file /etc/bmo/bmo.env\n\
         KUBECONFIG=/etc/bmo/kubeconfig /etc/bmod",
        Path::new("/tmp/r"),
        appliance::INSTALL_PATHS,
    );
    assert_eq!(
        got,
        "install -D -m 0755 bin/bmo /tmp/r/usr/local/bin/bmo\n\
         podman run -v /tmp/r/etc/bmo:/etc/bmo:ro --env-file /tmp/r/etc/bmo/bmo.env\n\
         KUBECONFIG=/tmp/r/etc/bmo/kubeconfig /etc/bmod"
    );
}
