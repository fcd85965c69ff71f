//! Embeds the facts `bmo version` prints: git commit, build date and rustc version.

use std::process::Command;

fn main() {
    let commit = std::env::var("BMO_GIT_COMMIT")
        .ok()
        .or_else(|| command_output("git", &["rev-parse", "--short=12", "HEAD"]))
        .unwrap_or_else(|| "unknown".to_owned());
    let dirty = command_output(
        "git",
        // No index refresh: a rewritten index would rerun this script next build.
        &[
            "--no-optional-locks",
            "status",
            "--porcelain",
            "--untracked-files=no",
        ],
    )
    .is_some_and(|s| !s.is_empty());
    let commit = if dirty && commit != "unknown" {
        format!("{commit}-dirty")
    } else {
        commit
    };

    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".to_owned());
    let rustc_version =
        command_output(&rustc, &["--version"]).unwrap_or_else(|| "unknown".to_owned());

    // SOURCE_DATE_EPOCH makes reproducible builds print a fixed date.
    let epoch = std::env::var("SOURCE_DATE_EPOCH")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0)
        });

    println!("cargo:rustc-env=BMO_GIT_COMMIT={commit}");
    println!("cargo:rustc-env=BMO_BUILD_DATE={}", utc_date(epoch));
    println!("cargo:rustc-env=BMO_RUSTC_VERSION={rustc_version}");
    println!("cargo:rerun-if-env-changed=BMO_GIT_COMMIT");
    println!("cargo:rerun-if-env-changed=SOURCE_DATE_EPOCH");
    // The real git directory's HEAD and index: in a worktree `.git` is a file, and a
    // watched path that does not exist reruns this script (and rebuilds bmo) every
    // time.
    let git_dir = command_output("git", &["rev-parse", "--absolute-git-dir"]);
    for file in ["HEAD", "index"] {
        let path = git_dir.as_ref().map(|d| std::path::Path::new(d).join(file));
        if let Some(path) = path.filter(|p| p.exists()) {
            println!("cargo:rerun-if-changed={}", path.display());
        }
    }
    embed_ipxe_loaders();
}

/// Copies Debian's iPXE loaders (package `ipxe`) into OUT_DIR for rust-embed, under
/// the names bmo serves them by. A missing x86 loader fails the build, so that no
/// image or binary ships without them by accident; `BMO_ALLOW_NO_LOADERS=1` builds
/// without (bmo then reads loaders from BMO_IPXE_DIR at run time). Debian ships no
/// arm64 loaders, so those are embedded only when present.
fn embed_ipxe_loaders() {
    let out =
        std::path::Path::new(&std::env::var("OUT_DIR").unwrap_or_default()).join("ipxe-embed");
    let _ = std::fs::create_dir_all(&out);
    let source =
        std::env::var("BMO_IPXE_SOURCE_DIR").unwrap_or_else(|_| "/usr/lib/ipxe".to_owned());
    let allow_missing = std::env::var("BMO_ALLOW_NO_LOADERS").is_ok_and(|v| v == "1");
    println!("cargo:rerun-if-env-changed=BMO_IPXE_SOURCE_DIR");
    println!("cargo:rerun-if-env-changed=BMO_ALLOW_NO_LOADERS");
    if std::path::Path::new(&source).is_dir() {
        println!("cargo:rerun-if-changed={source}");
    }
    let mut missing = Vec::new();
    for (from, to, required) in [
        ("undionly.kpxe", "undionly.kpxe", true),
        ("snponly.efi", "snponly-x86_64.efi", true),
        ("ipxe.efi", "ipxe-x86_64.efi", true),
        ("arm64-efi/snponly.efi", "snponly-arm64.efi", false),
        ("arm64-efi/ipxe.efi", "ipxe-arm64.efi", false),
    ] {
        let src = std::path::Path::new(&source).join(from);
        if src.is_file() && std::fs::copy(&src, out.join(to)).is_ok() {
            continue;
        }
        let _ = std::fs::remove_file(out.join(to));
        if required {
            missing.push(src.display().to_string());
        }
    }
    if !missing.is_empty() {
        if allow_missing {
            println!(
                "cargo:warning=building without iPXE loaders ({}): BMO_ALLOW_NO_LOADERS=1",
                missing.join(", ")
            );
        } else {
            eprintln!(
                "error: iPXE loaders missing: {}\n\
                 Install Debian's `ipxe` package (apt-get install ipxe), point \
                 BMO_IPXE_SOURCE_DIR at a directory with them, or set \
                 BMO_ALLOW_NO_LOADERS=1 to build a bmo that reads them from BMO_IPXE_DIR.",
                missing.join(", ")
            );
            std::process::exit(1);
        }
    }
}

fn command_output(program: &str, args: &[&str]) -> Option<String> {
    let out = Command::new(program).args(args).output().ok()?;
    if !out.status.success() {
        return None;
    }
    Some(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// Formats seconds since the Unix epoch as an RFC 3339 UTC timestamp.
fn utc_date(epoch: u64) -> String {
    let days = (epoch / 86_400) as i64;
    let secs = epoch % 86_400;
    // Civil-from-days (proleptic Gregorian calendar).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        secs / 3600,
        (secs / 60) % 60,
        secs % 60
    )
}
