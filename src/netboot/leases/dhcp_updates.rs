//! The changes the DHCP server makes to the table: clients seen, addresses chosen,
//! bound and released.

use std::net::Ipv4Addr;

use super::family::V4;
use super::record::{Lease, LeaseEvent, LeaseState, Sighting};
use super::{LeaseTable, now_unix};
use crate::netboot::hostname::is_valid as is_host_name;
use crate::netboot::mac::MacAddr;

impl LeaseTable {
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
        let state = if proxy {
            LeaseState::Proxy
        } else {
            LeaseState::Offered
        };
        let lease = inner
            .leases
            .entry(mac)
            .or_insert_with(|| Lease::new(mac, state, now));
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
        let free = |ip: Ipv4Addr| !reserved_by_other(ip) && inner.free::<V4>(mac, ip, now);
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
            .or_else(|| inner.oldest_offer::<V4>(mac, |ip| in_range(ip) && !reserved_by_other(ip)));
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
        self.lock().may_bind::<V4>(mac, ip, now_unix())
    }

    /// Sets the address and state of `mac`'s lease, valid for `secs`.
    pub(crate) fn assign(&self, mac: MacAddr, ip: Ipv4Addr, state: LeaseState, secs: u64) {
        self.assign_in::<V4>(mac, ip, state, secs);
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
}
