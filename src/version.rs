//! Build facts embedded by `build.rs`.

use std::fmt;

/// What `bmo version` prints and `bmo run` logs at start-up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct BuildInfo {
    pub version: &'static str,
    pub git_commit: &'static str,
    pub build_date: &'static str,
    pub rustc: &'static str,
}

/// The build facts of this binary.
pub const BUILD: BuildInfo = BuildInfo {
    version: env!("CARGO_PKG_VERSION"),
    git_commit: env!("BMO_GIT_COMMIT"),
    build_date: env!("BMO_BUILD_DATE"),
    rustc: env!("BMO_RUSTC_VERSION"),
};

impl fmt::Display for BuildInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "bmo {} (commit {}, built {}, {})",
            self.version, self.git_commit, self.build_date, self.rustc
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_line_names_all_four_facts() {
        let line = BUILD.to_string();
        assert!(line.starts_with(&format!("bmo {}", env!("CARGO_PKG_VERSION"))));
        assert!(line.contains("commit "));
        assert!(line.contains("rustc "), "{line}");
        // Build date is RFC 3339 UTC: 2026-12-02T10:47:10Z
        let date = BUILD.build_date;
        assert_eq!(date.len(), 20, "{date}");
        assert!(date.ends_with('Z') && date.as_bytes()[10] == b'T', "{date}");
    }
}
