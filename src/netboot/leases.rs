//! The lease table: what bmo's DHCP server learned about each MAC address.
//!
//! It is the seam to the host controller: a cheap-to-clone handle created at start-up
//! and passed to both sides. Keyed by MAC (not client-id), persisted as one JSON file
//! written atomically (temp file + rename) by a background task, so DHCP never waits
//! on the disk and bursts of changes coalesce into one write.

use std::collections::{BTreeMap, HashMap};
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use tokio::sync::{Notify, broadcast};

use super::hostname::is_valid as is_host_name;
use super::mac::MacAddr;

/// Where a lease stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LeaseState {
    /// Offered, not yet requested; expires quickly.
    Offered,
    /// Acknowledged.
    Bound,
    /// Given back by the client.
    Released,
    /// Seen in proxyDHCP mode: boot options only, no address from bmo.
    Proxy,
}

/// One client, as the DHCP server saw it last.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lease {
    pub mac: MacAddr,
    pub ip: Option<Ipv4Addr>,
    pub state: LeaseState,
    /// Unix seconds at which the address may be given to someone else.
    pub expires_unix: u64,
    /// Option 12 exactly as the client sent it (it need not be UTF-8), as hex.
    #[serde(with = "hex_bytes", default, skip_serializing_if = "Option::is_none")]
    pub hostname_raw: Option<Vec<u8>>,
    /// Option 12 for display: invalid UTF-8 replaced by U+FFFD. Derived, not read back.
    #[serde(default, skip_deserializing, skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
    /// Client system architecture (option 93): 0 BIOS, 7/9 x86-64 UEFI, 11 arm64 UEFI…
    pub arch: Option<u16>,
    /// Vendor class identifier (option 60), e.g. `PXEClient:Arch:00007:UNDI:003016`.
    pub vendor_class: Option<String>,
    /// Whether the last request came from iPXE (option 175 or user class `iPXE`).
    pub ipxe: bool,
    pub first_seen_unix: u64,
    pub last_seen_unix: u64,
    /// Unix seconds at which discovery made (or found) a BareMetalHost for this MAC;
    /// discovery never acts on the MAC again, even if that host is deleted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub discovered_unix: Option<u64>,
}

impl Lease {
    /// Whether the lease holds its address now (bound and not expired).
    fn is_live(&self, now: u64) -> bool {
        self.state == LeaseState::Bound && self.expires_unix > now
    }

    /// The hostname the client sent, lossily decoded for display.
    pub fn hostname_lossy(&self) -> Option<String> {
        self.hostname_raw
            .as_deref()
            .map(|b| String::from_utf8_lossy(b).into_owned())
    }

    fn with_display(mut self) -> Self {
        self.hostname = self.hostname_lossy();
        self
    }
}

/// What a DHCP exchange tells the table about a client.
#[derive(Debug, Clone, Default)]
pub struct Sighting {
    pub hostname_raw: Option<Vec<u8>>,
    pub arch: Option<u16>,
    pub vendor_class: Option<String>,
    pub ipxe: bool,
}

/// A change the controller may react to (e.g. discovery of unknown MACs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaseEvent {
    /// A MAC the table had never seen.
    NewClient(MacAddr),
    /// A lease was acknowledged or renewed.
    Bound(MacAddr, Ipv4Addr),
}

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
    /// Bumped on each change; the writer compares it with what it wrote.
    generation: u64,
    /// Where the next scan for a free address starts.
    cursor: u32,
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
            if let Some(lease) = self.leases.remove(mac)
                && let Some(ip) = lease.ip
                && self.by_ip.get(&ip) == Some(mac)
            {
                self.by_ip.remove(&ip);
            }
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

/// Shortest time between two writes of the lease file by the background writer.
const WRITE_INTERVAL: std::time::Duration = std::time::Duration::from_secs(1);

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

    // ------------------------------------------------------- used by DHCP only

    /// Records that `mac` was seen, with what it said about itself. False when `mac`
    /// is new and the table is full of live leases: the client is not answered.
    pub(crate) fn see(&self, mac: MacAddr, sighting: Sighting, proxy: bool) -> bool {
        let now = now_unix();
        let mut inner = self.lock();
        let new = !inner.leases.contains_key(&mac);
        if new && inner.leases.len() >= inner.limits.max_leases {
            inner.make_room(now);
            if inner.leases.len() >= inner.limits.max_leases {
                return false;
            }
        }
        let lease = inner.leases.entry(mac).or_insert_with(|| Lease {
            mac,
            ip: None,
            state: if proxy {
                LeaseState::Proxy
            } else {
                LeaseState::Offered
            },
            expires_unix: 0,
            hostname_raw: None,
            hostname: None,
            arch: None,
            vendor_class: None,
            ipxe: false,
            first_seen_unix: now,
            last_seen_unix: now,
            discovered_unix: None,
        });
        lease.last_seen_unix = now;
        if let Some(name) = sighting.hostname_raw.filter(|h| is_host_name(h)) {
            lease.hostname_raw = Some(name);
        }
        if sighting.arch.is_some() {
            lease.arch = sighting.arch;
        }
        if sighting.vendor_class.is_some() {
            lease.vendor_class = sighting.vendor_class;
        }
        lease.ipxe = sighting.ipxe;
        inner.generation += 1;
        drop(inner);
        if new {
            let _ = self.shared.events.send(LeaseEvent::NewClient(mac));
        }
        self.shared.dirty.notify_one();
        true
    }

    /// Picks the address for `mac` in `start..=end`: its fixed address, its current
    /// address, the address it asked for, or the lowest free one. `reserved_for`
    /// names the MAC an address is fixed for (the DHCP server's known hosts), which
    /// no other client is given.
    pub(crate) fn allocate(
        &self,
        mac: MacAddr,
        fixed: Option<Ipv4Addr>,
        requested: Option<Ipv4Addr>,
        (start, end): (Ipv4Addr, Ipv4Addr),
        reserved_for: &dyn Fn(Ipv4Addr) -> Option<MacAddr>,
    ) -> Option<Ipv4Addr> {
        if fixed.is_some() {
            return fixed;
        }
        let now = now_unix();
        let inner = self.lock();
        let in_range = |ip: Ipv4Addr| (u32::from(start)..=u32::from(end)).contains(&u32::from(ip));
        let reserved_by_other = |ip: Ipv4Addr| reserved_for(ip).is_some_and(|m| m != mac);
        let free = |ip: Ipv4Addr| {
            !reserved_by_other(ip)
                && match inner.by_ip.get(&ip) {
                    None => true,
                    Some(holder) if *holder == mac => true,
                    Some(holder) => inner
                        .leases
                        .get(holder)
                        .is_none_or(|l| l.ip != Some(ip) || l.expires_unix <= now),
                }
        };
        if let Some(ip) = inner.leases.get(&mac).and_then(|l| l.ip)
            && in_range(ip)
            && free(ip)
        {
            return Some(ip);
        }
        if let Some(ip) = requested
            && in_range(ip)
            && free(ip)
        {
            return Some(ip);
        }
        // Scan from where the last allocation stopped, so a large range stays cheap.
        let (lo, hi) = (u32::from(start), u32::from(end));
        let cursor = inner.cursor.clamp(lo, hi.max(lo));
        let found = (cursor..=hi)
            .chain(lo..cursor)
            .map(Ipv4Addr::from)
            .find(|ip| free(*ip))
            .or_else(|| {
                // Range full: an address merely offered (never requested) to another
                // client goes to this one, the oldest offer first. A flood of
                // DISCOVERs thus cannot keep a real client without an offer.
                inner
                    .by_ip
                    .iter()
                    .filter(|(ip, holder)| {
                        in_range(**ip) && **holder != mac && !reserved_by_other(**ip)
                    })
                    .filter_map(|(ip, holder)| {
                        let lease = inner.leases.get(holder)?;
                        (lease.state == LeaseState::Offered && lease.ip == Some(*ip))
                            .then_some((lease.expires_unix, *ip))
                    })
                    .min()
                    .map(|(_, ip)| ip)
            });
        drop(inner);
        if let Some(ip) = found {
            self.lock().cursor = u32::from(ip).saturating_add(1);
        }
        found
    }

    /// Whether `ip` may be acknowledged to `mac`: not fixed for another MAC
    /// (`reserved_for`, as in [`LeaseTable::allocate`]) and not held by another live
    /// lease.
    pub(crate) fn may_bind(
        &self,
        mac: MacAddr,
        ip: Ipv4Addr,
        reserved_for: &dyn Fn(Ipv4Addr) -> Option<MacAddr>,
    ) -> bool {
        if reserved_for(ip).is_some_and(|m| m != mac) {
            return false;
        }
        let now = now_unix();
        let inner = self.lock();
        // A REQUEST wins over another client's mere offer.
        match inner.by_ip.get(&ip) {
            Some(holder) if *holder != mac => inner.leases.get(holder).is_none_or(|l| {
                l.ip != Some(ip) || l.expires_unix <= now || l.state == LeaseState::Offered
            }),
            _ => true,
        }
    }

    /// Sets the address and state of `mac`'s lease, valid for `secs`.
    pub(crate) fn assign(&self, mac: MacAddr, ip: Ipv4Addr, state: LeaseState, secs: u64) {
        let now = now_unix();
        let mut inner = self.lock();
        let Some(lease) = inner.leases.get_mut(&mac) else {
            return;
        };
        let old = lease.ip.replace(ip);
        lease.state = state;
        lease.expires_unix = now + secs;
        if let Some(old) = old
            && old != ip
            && inner.by_ip.get(&old) == Some(&mac)
        {
            inner.by_ip.remove(&old);
        }
        // The previous holder (an offer given away, an expired lease) loses the address.
        if let Some(previous) = inner.by_ip.insert(ip, mac)
            && previous != mac
            && let Some(lease) = inner.leases.get_mut(&previous)
            && lease.ip == Some(ip)
        {
            lease.ip = None;
            lease.state = LeaseState::Released;
            lease.expires_unix = 0;
        }
        inner.generation += 1;
        drop(inner);
        if state == LeaseState::Bound {
            let _ = self.shared.events.send(LeaseEvent::Bound(mac, ip));
        }
        self.shared.dirty.notify_one();
    }

    /// The client gave its address back (RELEASE) or found it in use (DECLINE).
    pub(crate) fn release(&self, mac: MacAddr) {
        let mut inner = self.lock();
        if let Some(lease) = inner.leases.get_mut(&mac) {
            lease.state = LeaseState::Released;
            lease.expires_unix = 0;
            inner.generation += 1;
        }
        drop(inner);
        self.shared.dirty.notify_one();
    }

    // ----------------------------------------------------------- persistence

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

mod hex_bytes {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &Option<Vec<u8>>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            Some(b) => s.serialize_str(&b.iter().map(|x| format!("{x:02x}")).collect::<String>()),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<u8>>, D::Error> {
        let Some(s) = Option::<String>::deserialize(d)? else {
            return Ok(None);
        };
        if s.len() % 2 != 0 {
            return Err(serde::de::Error::custom("odd number of hex digits"));
        }
        (0..s.len())
            .step_by(2)
            .map(|i| {
                s.get(i..i + 2)
                    .and_then(|h| u8::from_str_radix(h, 16).ok())
                    .ok_or_else(|| serde::de::Error::custom("not hex"))
            })
            .collect::<Result<Vec<u8>, _>>()
            .map(Some)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mac(n: u8) -> MacAddr {
        MacAddr([0x52, 0x54, 0, 0, 0, n])
    }

    /// No address is fixed for anyone.
    fn none_fixed(_: Ipv4Addr) -> Option<MacAddr> {
        None
    }

    #[test]
    fn allocation_skips_live_leases_and_reservations() {
        let t = LeaseTable::in_memory();
        let (start, end) = ("10.0.0.10".parse().unwrap(), "10.0.0.12".parse().unwrap());
        let fixed: Ipv4Addr = "10.0.0.10".parse().unwrap();
        let reserved_for = |ip: Ipv4Addr| (ip == fixed).then_some(mac(9));
        t.see(mac(1), Sighting::default(), false);
        let a = t
            .allocate(mac(1), None, None, (start, end), &reserved_for)
            .unwrap();
        assert_eq!(a.to_string(), "10.0.0.11");
        t.assign(mac(1), a, LeaseState::Bound, 60);
        t.see(mac(2), Sighting::default(), false);
        assert_eq!(
            t.allocate(mac(2), None, Some(a), (start, end), &reserved_for)
                .unwrap()
                .to_string(),
            "10.0.0.12"
        );
        assert_eq!(
            t.allocate(mac(1), None, None, (start, end), &reserved_for),
            Some(a),
            "a client keeps its address"
        );
        assert_eq!(
            t.allocate(mac(9), Some(fixed), None, (start, end), &reserved_for)
                .unwrap()
                .to_string(),
            "10.0.0.10"
        );
        t.assign(mac(2), "10.0.0.12".parse().unwrap(), LeaseState::Bound, 60);
        t.see(mac(3), Sighting::default(), false);
        assert_eq!(
            t.allocate(mac(3), None, None, (start, end), &reserved_for),
            None,
            "range exhausted"
        );
        assert!(
            !t.may_bind(mac(3), fixed, &reserved_for),
            "a fixed address is never bound to another MAC"
        );
        t.release(mac(2));
        assert_eq!(
            t.allocate(mac(3), None, None, (start, end), &reserved_for)
                .unwrap()
                .to_string(),
            "10.0.0.12"
        );
    }

    #[test]
    fn a_full_range_of_mere_offers_still_serves_a_new_client() {
        let t = LeaseTable::in_memory();
        let (start, end) = ("10.0.0.10".parse().unwrap(), "10.0.0.11".parse().unwrap());
        // Two flooding MACs hold every address with offers they never request.
        for n in 1..=2 {
            t.see(mac(n), Sighting::default(), false);
            let ip = t
                .allocate(mac(n), None, None, (start, end), &none_fixed)
                .unwrap();
            t.assign(mac(n), ip, LeaseState::Offered, 30);
        }
        // A real client still gets an offer, and its REQUEST beats the offer.
        t.see(mac(7), Sighting::default(), false);
        let ip = t
            .allocate(mac(7), None, None, (start, end), &none_fixed)
            .expect("an offer");
        assert!(t.may_bind(mac(7), ip, &none_fixed));
        t.assign(mac(7), ip, LeaseState::Bound, 60);
        let loser = (1..=2)
            .map(|n| t.get(&mac(n)).unwrap())
            .find(|l| l.state == LeaseState::Released)
            .expect("the offer given away");
        assert_eq!(loser.ip, None);
        // A bound lease is never taken by a later client.
        t.see(mac(8), Sighting::default(), false);
        assert_ne!(
            t.allocate(mac(8), None, None, (start, end), &none_fixed),
            Some(ip)
        );
        assert!(!t.may_bind(mac(8), ip, &none_fixed));
    }

    #[test]
    fn a_full_table_makes_room_from_records_without_live_leases_only() {
        let t = LeaseTable::in_memory();
        t.set_limits(LeaseLimits {
            max_leases: 20,
            retention_secs: 3600,
        });
        let ip = |n: u8| Ipv4Addr::new(10, 0, 0, n);
        for n in 0..20 {
            assert!(t.see(mac(n), Sighting::default(), false));
            t.assign(mac(n), ip(n), LeaseState::Bound, 600);
        }
        assert!(
            !t.see(mac(100), Sighting::default(), false),
            "a table full of live leases takes no new client"
        );
        t.release(mac(3));
        assert!(t.see(mac(100), Sighting::default(), false));
        assert!(t.get(&mac(3)).is_none(), "the released record made room");
        assert_eq!(t.len(), 20);
    }

    #[tokio::test]
    async fn persists_across_reopen() {
        let dir = std::env::temp_dir().join(format!("bmo-leases-{}", std::process::id()));
        let path = dir.join("leases.json");
        let _ = std::fs::remove_file(&path);
        let t = LeaseTable::open(&path).unwrap();
        t.see(
            mac(1),
            Sighting {
                arch: Some(7),
                ..Default::default()
            },
            false,
        );
        t.assign(mac(1), "10.0.0.5".parse().unwrap(), LeaseState::Bound, 600);
        assert!(t.mark_discovered(&mac(1)));
        assert!(!t.mark_discovered(&mac(2)), "an unknown MAC is not marked");
        t.flush().await.unwrap();
        let again = LeaseTable::open(&path).unwrap();
        let l = again.get(&mac(1)).unwrap();
        assert_eq!(
            (l.ip, l.arch, l.state),
            (
                Some("10.0.0.5".parse().unwrap()),
                Some(7),
                LeaseState::Bound
            )
        );
        assert!(l.discovered_unix.is_some(), "discovery's record survives");
        let _ = std::fs::remove_dir_all(dir);
    }
}
