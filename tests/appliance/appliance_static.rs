//! The static executable, built as docs/install.md's "build-static" block says:
//! scripts/build-static builds it (release, crt-static), checks that `file` calls it
//! statically linked and that it runs. Part of `cargo test` so that CI, which runs
//! only the README's test command, builds and checks it too; the first build takes
//! about 5 minutes on 2 cores, later ones only rebuild bmo itself.

use crate::support::appliance;

#[test]
fn static_binary_builds_is_statically_linked_and_runs() {
    let _shared = crate::support::shared();
    let stdout = appliance::run_build_block("build-static");
    let file_line = stdout
        .lines()
        .find(|l| l.starts_with("file: "))
        .expect("build-static prints `file`'s verdict");
    assert!(
        file_line.contains("statically linked") || file_line.contains("static-pie linked"),
        "{file_line}"
    );
    assert!(!file_line.contains("dynamically linked"), "{file_line}");
    // `bmo version` ran and printed this crate's version.
    assert!(
        stdout.contains(&format!("bmo {}", env!("CARGO_PKG_VERSION"))),
        "bmo version did not run:\n{stdout}"
    );
    let size_line = stdout
        .lines()
        .find(|l| l.starts_with("size: "))
        .expect("size");
    // Shown with --nocapture; the report quotes it.
    println!("{file_line}\n{size_line}");
}
