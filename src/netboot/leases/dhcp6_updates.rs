//! The changes the DHCPv6 server makes to the table: clients seen (with their DUID),
//! IA_NA addresses chosen and bound. Records stay keyed by MAC, as for DHCPv4.

use std::net::Ipv6Addr;

use super::family::V6;
use super::record::{LeaseState, Sighting};
use super::{LeaseTable, now_unix};
use crate::netboot::mac::MacAddr;

/// Longest DUID kept (RFC 8415 caps a DUID at 128 bytes plus its type).
pub const MAX_DUID_LEN: usize = 130;

/// An IPv6 pool as the table sees it: `size` addresses from `start` (the DHCP
/// server's `Range6`, kept apart so that the table does not depend on it).
#[derive(Debug, Clone, Copy)]
pub struct Pool6 {
    pub start: Ipv6Addr,
    pub size: u64,
}

impl Pool6 {
    fn nth(&self, n: u64) -> Ipv6Addr {
        Ipv6Addr::from(u128::from(self.start) + u128::from(n))
    }

    fn contains(&self, ip: Ipv6Addr) -> bool {
        u128::from(ip)
            .checked_sub(u128::from(self.start))
            .is_some_and(|off| off < u128::from(self.size))
    }
}

impl LeaseTable {
    /// Records that a DHCPv6 client with `duid` was seen on `mac` (see
    /// [`LeaseTable::see`]). False when the table is full of live leases.
    pub(crate) fn see6(&self, mac: MacAddr, duid: &[u8], sighting: Sighting, proxy: bool) -> bool {
        if !self.see(mac, sighting, proxy) {
            return false;
        }
        let mut inner = self.lock();
        let Some(lease) = inner.leases.get_mut(&mac) else {
            return true;
        };
        if lease.duid.as_deref() == Some(duid) {
            return true;
        }
        let old = lease.duid.replace(duid.to_vec());
        if let Some(old) = old
            && inner.by_duid.get(&old) == Some(&mac)
        {
            inner.by_duid.remove(&old);
        }
        // A DUID seen on another MAC before (a NIC moved, a cloned VM) now maps here.
        if let Some(previous) = inner.by_duid.insert(duid.to_vec(), mac)
            && previous != mac
            && let Some(l) = inner.leases.get_mut(&previous)
        {
            l.duid = None;
        }
        inner.generation += 1;
        drop(inner);
        self.shared.dirty.notify_one();
        true
    }

    /// Picks an IPv6 address for `mac` in `range`: its current one, one it asked
    /// for, the next free one, or (range full) the oldest mere offer to another
    /// client. Scans at most as many addresses as the table holds, plus one.
    pub(crate) fn allocate6(
        &self,
        mac: MacAddr,
        requested: &[Ipv6Addr],
        range: Pool6,
    ) -> Option<Ipv6Addr> {
        let now = now_unix();
        let mut inner = self.lock();
        let current = inner.leases.get(&mac).and_then(|l| l.ip6);
        if let Some(ip) = current
            .into_iter()
            .chain(requested.iter().copied())
            .find(|ip| range.contains(*ip) && inner.free::<V6>(mac, *ip, now))
        {
            return Some(ip);
        }
        let size = range.size.max(1);
        let tries = size.min(inner.by_ip6.len() as u64 + 1);
        let start = inner.cursor6 % size;
        let found = (0..tries)
            .map(|i| range.nth((start + i) % size))
            .find(|ip| inner.free::<V6>(mac, *ip, now))
            .or_else(|| inner.oldest_offer::<V6>(mac, |ip| range.contains(ip)));
        if let Some(ip) = found {
            let offset = u128::from(ip) - u128::from(range.start);
            inner.cursor6 = u64::try_from(offset).unwrap_or(0).wrapping_add(1);
        }
        found
    }

    /// Whether `ip` may be bound to `mac`: no other client's live lease holds it (a
    /// mere offer to another client gives way).
    pub(crate) fn may_bind6(&self, mac: MacAddr, ip: Ipv6Addr) -> bool {
        self.lock().may_bind::<V6>(mac, ip, now_unix())
    }

    /// Sets `mac`'s IPv6 address and lease state, valid for `secs`.
    pub(crate) fn assign6(&self, mac: MacAddr, ip: Ipv6Addr, state: LeaseState, secs: u64) {
        self.assign_in::<V6>(mac, ip, state, secs);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netboot::leases::LeaseEvent;

    fn mac(n: u8) -> MacAddr {
        MacAddr([2, 0, 0, 0, 0, n])
    }

    #[test]
    fn duids_map_to_macs_and_addresses_come_from_the_range() {
        let t = LeaseTable::in_memory();
        let range = Pool6 {
            start: "fd00::10".parse().unwrap(),
            size: 3,
        };
        assert!(t.see6(mac(1), b"duid-a", Sighting::default(), false));
        assert!(t.see6(mac(2), b"duid-b", Sighting::default(), false));
        assert_eq!(t.mac_of_duid(b"duid-a"), Some(mac(1)));
        let mut events = t.subscribe();
        let a = t.allocate6(mac(1), &[], range).unwrap();
        t.assign6(mac(1), a, LeaseState::Bound, 600);
        assert_eq!(events.try_recv(), Ok(LeaseEvent::Bound(mac(1), a.into())));
        let b = t.allocate6(mac(2), &[a], range).unwrap();
        assert_ne!(a, b, "a bound address is not given twice");
        assert!(!t.may_bind6(mac(2), a));
        t.assign6(mac(2), b, LeaseState::Offered, 30);
        assert_eq!(t.mac_of_v6(b), Some(mac(2)));
        // The same DUID on another MAC moves.
        assert!(t.see6(mac(3), b"duid-a", Sighting::default(), false));
        assert_eq!(t.mac_of_duid(b"duid-a"), Some(mac(3)));
        assert_eq!(t.get(&mac(1)).unwrap().duid, None);
        let c = t.allocate6(mac(3), &[], range).unwrap();
        t.assign6(mac(3), c, LeaseState::Offered, 30);
        // Full: mac 4 takes the oldest offer, never the bound address.
        assert!(t.see6(mac(4), b"duid-d", Sighting::default(), false));
        let d = t.allocate6(mac(4), &[], range).unwrap();
        assert_ne!(d, a);
    }
}
