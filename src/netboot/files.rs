//! What HTTP and TFTP serve: embedded iPXE loaders and directories, behind one
//! traversal-safe path resolver.

use std::borrow::Cow;
use std::fs::{File, Metadata, OpenOptions};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::io::AsRawFd;
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
    File(OpenedFile),
}

/// A regular file opened below a served directory. Checked on the open descriptor,
/// so swapping a directory for a symlink after the check changes nothing.
#[derive(Debug)]
pub struct OpenedFile {
    pub file: File,
    /// `fstat` of `file`.
    pub metadata: Metadata,
    /// Where `file` really is (for content types and logs).
    pub path: PathBuf,
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
        if let Ok(on_disk) = resolve_in(&self.dir, &[name]) {
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

/// Opens `parts` below `root`, refusing anything that is not, once opened, a regular
/// file inside `root` (a symlink leading outside, say).
///
/// The file is opened once and the check is made on the open descriptor (its path
/// from `/proc/self/fd`, its `fstat`), so no swap of a directory for a symlink between
/// a check and the open can serve outside content.
pub fn resolve_in(root: &Path, parts: &[&str]) -> Result<OpenedFile, Refusal> {
    let mut path = root.to_path_buf();
    for p in parts {
        path.push(p);
    }
    // O_NONBLOCK: opening a FIFO must not wait for a writer; reads of regular files
    // ignore it.
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(&path)
        .map_err(|_| Refusal::NotFound)?;
    let real = std::fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd()))
        .map_err(|_| Refusal::NotFound)?;
    let real_root = root.canonicalize().map_err(|_| Refusal::NotFound)?;
    if !real.starts_with(&real_root) {
        return Err(Refusal::Outside);
    }
    let metadata = file.metadata().map_err(|_| Refusal::NotFound)?;
    if !metadata.is_file() {
        return Err(Refusal::NotFound);
    }
    Ok(OpenedFile {
        file,
        metadata,
        path: real,
    })
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
        assert_eq!(resolve_in(&root, &["link"]).err(), Some(Refusal::Outside));
        assert_eq!(
            resolve_in(&root, &["missing"]).err(),
            Some(Refusal::NotFound)
        );
        let _ = std::fs::remove_dir_all(dir);
    }

    /// A directory inside the root swapped, atomically and over and over, with a
    /// symlink to a directory outside: no open ever yields the outside file.
    #[test]
    fn swapping_a_directory_for_a_symlink_never_serves_outside_content() {
        use std::ffi::CString;
        use std::io::Read;
        use std::os::unix::ffi::OsStrExt;
        use std::sync::Arc;
        use std::sync::atomic::{AtomicBool, Ordering};

        let dir = std::env::temp_dir().join(format!("bmo-swap-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let root = dir.join("root");
        std::fs::create_dir_all(root.join("d")).unwrap();
        std::fs::create_dir_all(dir.join("outside")).unwrap();
        std::fs::write(root.join("d/f"), b"inside").unwrap();
        std::fs::write(dir.join("outside/f"), b"outside").unwrap();
        std::os::unix::fs::symlink(dir.join("outside"), dir.join("spare")).unwrap();

        let stop = Arc::new(AtomicBool::new(false));
        let swapper = {
            let stop = stop.clone();
            let a = CString::new(root.join("d").as_os_str().as_bytes()).unwrap();
            let b = CString::new(dir.join("spare").as_os_str().as_bytes()).unwrap();
            std::thread::spawn(move || {
                let mut swaps = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    // SAFETY: two valid NUL-terminated paths; RENAME_EXCHANGE swaps them.
                    let rc = unsafe {
                        libc::renameat2(
                            libc::AT_FDCWD,
                            a.as_ptr(),
                            libc::AT_FDCWD,
                            b.as_ptr(),
                            libc::RENAME_EXCHANGE,
                        )
                    };
                    assert_eq!(rc, 0, "{}", std::io::Error::last_os_error());
                    swaps += 1;
                }
                swaps
            })
        };
        let (mut inside, mut refused) = (0u32, 0u32);
        for _ in 0..20_000 {
            match resolve_in(&root, &["d", "f"]) {
                Ok(mut opened) => {
                    let mut content = String::new();
                    opened.file.read_to_string(&mut content).unwrap();
                    assert_eq!(content, "inside", "served {:?}", opened.path);
                    inside += 1;
                }
                Err(_) => refused += 1,
            }
        }
        stop.store(true, Ordering::Relaxed);
        let swaps = swapper.join().unwrap();
        assert!(swaps > 100, "only {swaps} swaps");
        assert!(inside > 0, "nothing served ({refused} refused)");
        let _ = std::fs::remove_dir_all(dir);
    }
}
