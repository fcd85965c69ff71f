//! The lease table: what bmo's DHCP server learned about each MAC address.
//!
//! It is the seam to the host controller: a cheap-to-clone handle created at start-up
//! and passed to both sides. Keyed by MAC (not client-id), persisted as one JSON file
//! written atomically (temp file + rename) by a background task, so DHCP never waits
//! on the disk and bursts of changes coalesce into one write.
//!
//! `record` holds the data, `dhcp_updates` and `dhcp6_updates` the DHCP servers'
//! changes (over `family`, what both address families share), `file` the lease file
//! and its writer.

mod dhcp6_updates;
mod dhcp_updates;
mod family;
mod file;
mod record;

use std::collections::{BTreeMap, HashMap};
use std::net::{Ipv4Addr, Ipv6Addr};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{SystemTime, UNIX_EPOCH};

use tokio::sync::{Notify, broadcast};

use crate::netboot::mac::MacAddr;

pub use dhcp6_updates::{MAX_DUID_LEN, Pool6};
pub use file::LeaseError;
pub use record::{Lease, LeaseEvent, LeaseState, Sighting};

/// Bounds of the lease table, so a flood of made-up MACs cannot grow it (or the lease
/// file) without end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseLimits {
    /// Records kept at most. When full, records holding no live lease make room,
    /// longest unseen first; a new client finding none is not answered.
    pub max_leases: usize,
    /// A record holding no live lease and not seen for this many seconds is removed.
    pub retention_secs: u64,
}

/// An offer that was never followed by a REQUEST is forgotten after this many seconds
/// without a word from its client (a few DHCP retry rounds).
pub const OFFERED_RETENTION_SECS: u64 = 300;

impl Default for LeaseLimits {
    fn default() -> Self {
        Self {
            max_leases: 4096,
            retention_secs: 7 * 24 * 3600,
        }
    }
}

#[derive(Default)]
struct Inner {
    limits: LeaseLimits,
    leases: BTreeMap<MacAddr, Lease>,
    /// Address → holder, for allocation.
    by_ip: HashMap<Ipv4Addr, MacAddr>,
    /// IPv6 address → holder, for DHCPv6 allocation.
    by_ip6: HashMap<Ipv6Addr, MacAddr>,
    /// DUID → the MAC its packets came from (one DUID per record, so this is
    /// bounded by the table).
    by_duid: HashMap<Vec<u8>, MacAddr>,
    /// Bumped on each change; the writer compares it with what it wrote.
    generation: u64,
    /// Where the next scan for a free address starts.
    cursor: u32,
    /// Where the next scan for a free IPv6 address starts (offset in the range).
    cursor6: u64,
}

impl Inner {
    /// Drops about a tenth of the table (at least one record): the longest-unseen
    /// records that hold no live lease. In batches, so a
    /// flood of new MACs costs one scan per batch, not one per packet.
    fn make_room(&mut self, now: u64) {
        let mut candidates: Vec<(u64, MacAddr)> = self
            .leases
            .values()
            .filter(|l| !l.is_live(now))
            .map(|l| (l.last_seen_unix, l.mac))
            .collect();
        let batch = (self.limits.max_leases / 10).max(1).min(candidates.len());
        if batch == 0 {
            return;
        }
        candidates.select_nth_unstable(batch - 1);
        let gone: Vec<MacAddr> = candidates[..batch].iter().map(|(_, m)| *m).collect();
        self.remove_all(&gone);
        self.generation += 1;
    }

    fn remove_all(&mut self, macs: &[MacAddr]) {
        for mac in macs {
            let Some(lease) = self.leases.remove(mac) else {
                continue;
            };
            if let Some(ip) = lease.ip
                && self.by_ip.get(&ip) == Some(mac)
            {
                self.by_ip.remove(&ip);
            }
            self.unindex_v6(&lease);
        }
    }

    /// Indexes a record's IPv6 address and DUID.
    fn index_v6(&mut self, lease: &Lease) {
        if let Some(ip) = lease.ip6 {
            self.by_ip6.insert(ip, lease.mac);
        }
        if let Some(duid) = &lease.duid {
            self.by_duid.insert(duid.clone(), lease.mac);
        }
    }

    fn unindex_v6(&mut self, lease: &Lease) {
        if let Some(ip) = lease.ip6
            && self.by_ip6.get(&ip) == Some(&lease.mac)
        {
            self.by_ip6.remove(&ip);
        }
        if let Some(duid) = &lease.duid
            && self.by_duid.get(duid) == Some(&lease.mac)
        {
            self.by_duid.remove(duid);
        }
    }
}

struct Shared {
    inner: Mutex<Inner>,
    path: Option<PathBuf>,
    dirty: Notify,
    written: Mutex<u64>,
    write_lock: tokio::sync::Mutex<()>,
    events: broadcast::Sender<LeaseEvent>,
}

/// Shared handle to the lease table. Clones share one table.
#[derive(Clone)]
pub struct LeaseTable {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for LeaseTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaseTable")
            .field("path", &self.shared.path)
            .field("leases", &self.lock().leases.len())
            .finish()
    }
}

pub fn now_unix() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

impl LeaseTable {
    /// A table that lives in memory only.
    pub fn in_memory() -> Self {
        Self::new(None, Inner::default())
    }

    fn new(path: Option<PathBuf>, inner: Inner) -> Self {
        let (events, _) = broadcast::channel(1024);
        LeaseTable {
            shared: Arc::new(Shared {
                inner: Mutex::new(inner),
                path,
                dirty: Notify::new(),
                written: Mutex::new(0),
                write_lock: tokio::sync::Mutex::new(()),
                events,
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock leaves consistent data (every update is
        // a few map inserts), so poisoning is ignored.
        self.shared.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    // ------------------------------------------------------------------ read API

    /// The lease of `mac`, if the table has seen it.
    pub fn get(&self, mac: &MacAddr) -> Option<Lease> {
        self.lock()
            .leases
            .get(mac)
            .cloned()
            .map(Lease::with_display)
    }

    /// Every lease, ordered by MAC.
    pub fn list(&self) -> Vec<Lease> {
        self.lock()
            .leases
            .values()
            .cloned()
            .map(Lease::with_display)
            .collect()
    }

    /// The MAC that holds (or was last offered) `ip`.
    pub fn mac_of(&self, ip: Ipv4Addr) -> Option<MacAddr> {
        self.lock().by_ip.get(&ip).copied()
    }

    /// The MAC that holds (or was last offered) the IPv6 address `ip`.
    pub fn mac_of_v6(&self, ip: Ipv6Addr) -> Option<MacAddr> {
        self.lock().by_ip6.get(&ip).copied()
    }

    /// The MAC whose DHCPv6 client last sent `duid`.
    pub fn mac_of_duid(&self, duid: &[u8]) -> Option<MacAddr> {
        self.lock().by_duid.get(duid).copied()
    }

    /// Changes as they happen (new MACs, bound leases).
    pub fn subscribe(&self) -> broadcast::Receiver<LeaseEvent> {
        self.shared.events.subscribe()
    }

    /// Records that discovery handled `mac` (persisted with its lease). False when
    /// the table does not know the MAC.
    pub fn mark_discovered(&self, mac: &MacAddr) -> bool {
        let mut inner = self.lock();
        let Some(lease) = inner.leases.get_mut(mac) else {
            return false;
        };
        if lease.discovered_unix.is_none() {
            lease.discovered_unix = Some(now_unix());
            inner.generation += 1;
            drop(inner);
            self.shared.dirty.notify_one();
        }
        true
    }

    /// Number of records.
    pub fn len(&self) -> usize {
        self.lock().leases.len()
    }

    pub fn is_empty(&self) -> bool {
        self.lock().leases.is_empty()
    }

    /// Sets the bounds and applies them at once (a table reloaded from a file written
    /// with other bounds is trimmed).
    pub fn set_limits(&self, limits: LeaseLimits) {
        self.lock().limits = limits;
        self.prune();
    }

    /// Removes records past their retention, then, above the cap, the longest-unseen
    /// records without a live lease. Returns how many went.
    pub fn prune(&self) -> usize {
        let now = now_unix();
        let mut inner = self.lock();
        let before = inner.leases.len();
        let retention = inner.limits.retention_secs;
        let gone: Vec<MacAddr> = inner
            .leases
            .values()
            .filter(|l| {
                let unseen = now.saturating_sub(l.last_seen_unix);
                let never_bound_offer =
                    l.state == LeaseState::Offered && l.discovered_unix.is_none();
                !l.is_live(now)
                    && (unseen >= retention
                        || (never_bound_offer && unseen >= OFFERED_RETENTION_SECS))
            })
            .map(|l| l.mac)
            .collect();
        inner.remove_all(&gone);
        while inner.leases.len() > inner.limits.max_leases {
            let len = inner.leases.len();
            inner.make_room(now);
            if inner.leases.len() == len {
                break;
            }
        }
        let removed = before - inner.leases.len();
        if removed > 0 {
            inner.generation += 1;
            drop(inner);
            self.shared.dirty.notify_one();
        }
        removed
    }
}

#[cfg(test)]
mod tests;
