//! What HTTP and TFTP serve: embedded iPXE loaders and directories, behind one
//! traversal-safe path resolver.

use std::borrow::Cow;
use std::path::{Component, Path, PathBuf};

use rust_embed::RustEmbed;

/// iPXE loaders copied from the Debian `ipxe` package at build time (see build.rs);
/// empty when the package was not installed on the build machine.
#[derive(RustEmbed)]
#[folder = "$OUT_DIR/ipxe-embed"]
struct EmbeddedLoaders;

/// Names under which loaders are served, over TFTP at `/NAME` and HTTP at `/ipxe/NAME`.
pub const LOADER_NAMES: &[&str] = &[
    "undionly.kpxe",
    "snponly-x86_64.efi",
    "ipxe-x86_64.efi",
    "snponly-arm64.efi",
    "ipxe-arm64.efi",
];

/// Where a request's bytes come from.
#[derive(Debug)]
pub enum Source {
    Embedded {
        data: Cow<'static, [u8]>,
        /// Hex of the content's SHA-256 prefix, for ETags.
        hash: String,
    },
    File(PathBuf),
}

/// Why a path was not served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// `..`, a NUL, a backslash, or a symlink leading outside the served directory.
    Outside,
    NotFound,
}

/// The loaders: an override directory first, then the embedded copies.
#[derive(Debug, Clone)]
pub struct Loaders {
    pub dir: PathBuf,
}

impl Loaders {
    pub fn get(&self, name: &str) -> Option<Source> {
        if !LOADER_NAMES.contains(&name) {
            return None;
        }
        let on_disk = self.dir.join(name);
        if on_disk.is_file() {
            return Some(Source::File(on_disk));
        }
        EmbeddedLoaders::get(name).map(|f| Source::Embedded {
            hash: f.metadata.sha256_hash()[..8]
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect(),
            data: f.data,
        })
    }

    /// Loader names available (embedded or on disk).
    pub fn available(&self) -> Vec<&'static str> {
        LOADER_NAMES
            .iter()
            .copied()
            .filter(|n| self.get(n).is_some())
            .collect()
    }
}

/// Splits a request path into safe components. Leading slashes and `.` are
/// dropped; `..`, NULs, backslashes and absolute Windows-style prefixes refuse it.
pub fn clean(path: &str) -> Result<Vec<&str>, Refusal> {
    if path.contains('\0') || path.contains('\\') {
        return Err(Refusal::Outside);
    }
    let mut parts = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => return Err(Refusal::Outside),
            p => {
                if Path::new(p)
                    .components()
                    .any(|c| !matches!(c, Component::Normal(_)))
                {
                    return Err(Refusal::Outside);
                }
                parts.push(p);
            }
        }
    }
    Ok(parts)
}

/// Resolves `parts` below `root`, refusing symlinks that lead outside it.
pub fn resolve_in(root: &Path, parts: &[&str]) -> Result<PathBuf, Refusal> {
    let mut path = root.to_path_buf();
    for p in parts {
        path.push(p);
    }
    let real = path.canonicalize().map_err(|_| Refusal::NotFound)?;
    let real_root = root.canonicalize().map_err(|_| Refusal::NotFound)?;
    if !real.starts_with(&real_root) {
        return Err(Refusal::Outside);
    }
    if !real.is_file() {
        return Err(Refusal::NotFound);
    }
    Ok(real)
}

/// The TFTP namespace: loaders at the top, `/images/…` from the images directory,
/// everything else from Ironic's `[pxe] tftp_root`.
#[derive(Debug, Clone)]
pub struct TftpFiles {
    pub loaders: Loaders,
    pub images_dir: PathBuf,
    pub tftp_root: PathBuf,
}

impl TftpFiles {
    pub fn resolve(&self, path: &str) -> Result<Source, Refusal> {
        let parts = clean(path)?;
        match parts.as_slice() {
            [] => Err(Refusal::NotFound),
            [name] => {
                if let Some(src) = self.loaders.get(name) {
                    return Ok(src);
                }
                resolve_in(&self.tftp_root, &parts).map(Source::File)
            }
            ["images", rest @ ..] => resolve_in(&self.images_dir, rest).map(Source::File),
            _ => resolve_in(&self.tftp_root, &parts).map(Source::File),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clean_refuses_traversal() {
        assert_eq!(clean("/a/./b//c").unwrap(), vec!["a", "b", "c"]);
        assert_eq!(clean("../etc/passwd"), Err(Refusal::Outside));
        assert_eq!(clean("a/../../etc/passwd"), Err(Refusal::Outside));
        assert_eq!(clean("a\\..\\b"), Err(Refusal::Outside));
        assert_eq!(clean("a\0b"), Err(Refusal::Outside));
    }

    #[test]
    fn symlink_out_of_root_is_refused() {
        let dir = std::env::temp_dir().join(format!("bmo-files-{}", std::process::id()));
        let root = dir.join("root");
        std::fs::create_dir_all(&root).unwrap();
        std::fs::write(dir.join("secret"), b"x").unwrap();
        std::fs::write(root.join("ok"), b"y").unwrap();
        let _ = std::fs::remove_file(root.join("link"));
        std::os::unix::fs::symlink(dir.join("secret"), root.join("link")).unwrap();
        assert!(resolve_in(&root, &["ok"]).is_ok());
        assert_eq!(resolve_in(&root, &["link"]), Err(Refusal::Outside));
        assert_eq!(resolve_in(&root, &["missing"]), Err(Refusal::NotFound));
        let _ = std::fs::remove_dir_all(dir);
    }
}
