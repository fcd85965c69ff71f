//! Per-host IPA ramdisks: the IPA ramdisk bmo serves with a small cpio archive of the
//! host's own files appended, for the PreprovisioningImages bmo builds itself
//! (`controller::preprov_image`).
//!
//! Only the appended archives are kept (in memory, a few KiB each); the HTTP server
//! sends the ramdisk file from `BMO_IMAGES_DIR` and then the archive, so a hundred
//! hosts cost no copy of a 70 MiB ramdisk. Each archive is served under the version
//! it was built from (the network data Secret's resourceVersion), so a changed Secret
//! gives a new URL and Ironic does not boot a copy it cached.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, PoisonError, RwLock};

use super::deploy_images::{DEFAULT_RAMDISK, DeployImages};

/// First path segment of the per-host ramdisks on the HTTP server.
pub const PATH_PREFIX: &str = "preprovisioning";

/// The appended archives, by host (`namespace/name`); cloned handles share them.
#[derive(Debug, Clone, Default)]
pub struct HostRamdisks {
    archives: Arc<RwLock<HashMap<String, Appended>>>,
}

/// A host's archive and the version it was built from.
#[derive(Debug, Clone)]
struct Appended {
    version: String,
    archive: Arc<Vec<u8>>,
}

fn key(namespace: &str, name: &str) -> String {
    format!("{namespace}/{name}")
}

impl HostRamdisks {
    pub fn new() -> Self {
        Self::default()
    }

    /// Serves `archive` after the IPA ramdisk for host `namespace/name` at version
    /// `version` (replacing the one it had).
    pub fn set(&self, namespace: &str, name: &str, version: &str, archive: Vec<u8>) {
        let mut archives = self
            .archives
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        archives.insert(
            key(namespace, name),
            Appended {
                version: version.to_owned(),
                archive: Arc::new(archive),
            },
        );
    }

    /// Stops serving host `namespace/name`'s ramdisk.
    pub fn remove(&self, namespace: &str, name: &str) {
        self.archives
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&key(namespace, name));
    }

    /// Keeps only the hosts for which `keep(namespace, name)` holds.
    pub fn retain(&self, mut keep: impl FnMut(&str, &str) -> bool) {
        self.archives
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|k, _| {
                let (namespace, name) = k.split_once('/').unwrap_or(("", k));
                keep(namespace, name)
            });
    }

    /// The archive of host `namespace/name` at `version`, if that is the one served.
    pub fn get(&self, namespace: &str, name: &str, version: &str) -> Option<Arc<Vec<u8>>> {
        let archives = self.archives.read().unwrap_or_else(PoisonError::into_inner);
        archives
            .get(&key(namespace, name))
            .filter(|a| a.version == version)
            .map(|a| a.archive.clone())
    }

    /// How many hosts have a ramdisk.
    pub fn len(&self) -> usize {
        self.archives
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// What building a host's ramdisk needs from the HTTP server: where the archives
/// go, the URLs they get, and the IPA ramdisk they follow.
#[derive(Debug, Clone)]
pub struct RamdiskServer {
    pub ramdisks: HostRamdisks,
    /// bmo's IPA kernel and ramdisk URLs (they follow the provisioning IP).
    pub images: DeployImages,
    /// `BMO_IMAGES_DIR`, where the IPA ramdisk is.
    pub images_dir: PathBuf,
}

impl RamdiskServer {
    /// The URL of host `namespace/name`'s ramdisk at `version`, as of now.
    pub fn ramdisk_url(&self, namespace: &str, name: &str, version: &str) -> String {
        self.images.http_url(&path(namespace, name, version))
    }

    /// Where the IPA ramdisk the host ramdisks start with is.
    pub fn base_ramdisk(&self) -> PathBuf {
        self.images_dir.join(DEFAULT_RAMDISK)
    }
}

/// The path (after the HTTP base) of host `namespace/name`'s ramdisk at `version`.
pub fn path(namespace: &str, name: &str, version: &str) -> String {
    format!("/{PATH_PREFIX}/{namespace}/{name}/{version}/{DEFAULT_RAMDISK}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_current_version_is_served() {
        let ramdisks = HostRamdisks::new();
        ramdisks.set("ns", "h", "7", vec![1, 2]);
        assert_eq!(ramdisks.get("ns", "h", "7").as_deref(), Some(&vec![1, 2]));
        ramdisks.set("ns", "h", "8", vec![3]);
        assert!(ramdisks.get("ns", "h", "7").is_none());
        assert_eq!(ramdisks.get("ns", "h", "8").as_deref(), Some(&vec![3]));
        ramdisks.set("ns", "g", "1", vec![]);
        ramdisks.retain(|_, name| name == "g");
        assert!(ramdisks.get("ns", "h", "8").is_none());
        assert_eq!(ramdisks.len(), 1);
        ramdisks.remove("ns", "g");
        assert!(ramdisks.is_empty());
        assert_eq!(
            path("ns", "h", "8"),
            "/preprovisioning/ns/h/8/ironic-python-agent.initramfs"
        );
    }
}
