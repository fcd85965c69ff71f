//! The static executable: scripts/build-static builds it (release, crt-static), checks
//! that `file` calls it statically linked and that it runs. Part of `cargo test` so
//! that CI, which runs only the README's test command, builds and checks it too; the
//! first build takes about 5 minutes on 2 cores, later ones only rebuild bmo itself.

// Tests and benchmarks may panic on what they set up themselves.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

#[test]
fn static_binary_builds_is_statically_linked_and_runs() {
    let out = Command::new(format!("{ROOT}/scripts/build-static"))
        .current_dir(ROOT)
        // A coverage run (cargo llvm-cov) instruments through these; the shipped
        // binary must not be.
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .env_remove("LLVM_PROFILE_FILE")
        .env_remove("RUSTC_WRAPPER")
        .output()
        .expect("run scripts/build-static");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "scripts/build-static failed:\n{stdout}\n{stderr}"
    );
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
