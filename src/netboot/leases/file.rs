//! The lease file: loading the table from it, and the background writer that keeps it
//! up to date (temp file + rename, at most once per [`WRITE_INTERVAL`]).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::record::Lease;
use super::{Inner, LeaseTable};
use crate::netboot::hostname::is_valid as is_host_name;

/// Why the lease file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    #[error(
        "cannot read the lease file {path}: {source}; fix its permissions or set BMO_LEASE_FILE"
    )]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "the lease file {path} is not valid JSON ({source}); move it away to start with no leases"
    )]
    Parse {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    #[error("cannot write the lease file {path}: {source}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

#[derive(Serialize, Deserialize)]
struct LeaseFile {
    version: u32,
    leases: Vec<Lease>,
}

/// Shortest time between two writes of the lease file by the background writer.
const WRITE_INTERVAL: std::time::Duration = std::time::Duration::from_secs(1);

impl LeaseTable {
    /// Loads the table from `path` (a missing file is an empty table) and persists
    /// every change there. Call [`LeaseTable::spawn_writer`] on a runtime to write.
    pub fn open(path: &Path) -> Result<Self, LeaseError> {
        let mut inner = Inner::default();
        match std::fs::read(path) {
            Ok(bytes) => {
                let file: LeaseFile =
                    serde_json::from_slice(&bytes).map_err(|source| LeaseError::Parse {
                        path: path.to_owned(),
                        source,
                    })?;
                for mut lease in file.leases {
                    // Written before invalid host names were dropped (issue 36).
                    lease.hostname_raw = lease.hostname_raw.filter(|h| is_host_name(h));
                    if let Some(ip) = lease.ip {
                        inner.by_ip.insert(ip, lease.mac);
                    }
                    inner.index_v6(&lease);
                    inner.leases.insert(lease.mac, lease);
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(source) => {
                return Err(LeaseError::Read {
                    path: path.to_owned(),
                    source,
                });
            }
        }
        Ok(Self::new(Some(path.to_owned()), inner))
    }

    /// Starts the background writer on the current runtime (no-op in memory).
    pub fn spawn_writer(&self) {
        if self.shared.path.is_none() {
            return;
        }
        let table = self.clone();
        tokio::spawn(async move {
            loop {
                table.shared.dirty.notified().await;
                if let Err(e) = table.flush().await {
                    tracing::warn!(error = %e, "lease table not persisted; will retry on the next change");
                }
                if Arc::strong_count(&table.shared) == 1 {
                    return;
                }
                // At most one write per interval: under a flood of DHCP requests the
                // file is rewritten once a second, not once per packet.
                tokio::time::sleep(WRITE_INTERVAL).await;
            }
        });
    }

    /// Writes the table now if it changed since the last write.
    pub async fn flush(&self) -> Result<(), LeaseError> {
        let Some(path) = self.shared.path.clone() else {
            return Ok(());
        };
        let _guard = self.shared.write_lock.lock().await;
        let (generation, file) = {
            let inner = self.lock();
            let written = *self
                .shared
                .written
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            if inner.generation == written && path.exists() {
                return Ok(());
            }
            let file = LeaseFile {
                version: 1,
                leases: inner.leases.values().cloned().collect(),
            };
            (inner.generation, file)
        };
        // Serialized outside the table's lock: DHCP does not wait for it.
        let bytes = serde_json::to_vec_pretty(&file).map_err(|e| LeaseError::Write {
            path: path.clone(),
            source: std::io::Error::other(e),
        })?;
        let target = path.clone();
        tokio::task::spawn_blocking(move || write_atomically(&target, &bytes))
            .await
            .map_err(|e| LeaseError::Write {
                path: path.clone(),
                source: std::io::Error::other(e),
            })?
            .map_err(|source| LeaseError::Write { path, source })?;
        *self
            .shared
            .written
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = generation;
        Ok(())
    }
}

fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    let tmp = path.with_extension("json.tmp");
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)
}
