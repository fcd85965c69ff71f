//! What DHCPv4 and DHCPv6 allocation share. A record holds one address of each
//! family, and the table indexes each family by address; the rules for who may have
//! an address, who loses it, and which offer gives way when a range is full are the
//! same for both.

use std::collections::HashMap;
use std::hash::Hash;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use super::record::{Lease, LeaseEvent, LeaseState};
use super::{Inner, LeaseTable, now_unix};
use crate::netboot::mac::MacAddr;

/// An address family: its field in a record and its index in the table.
pub(super) trait Family {
    type Addr: Copy + Eq + Ord + Hash + Into<IpAddr>;
    fn held(lease: &Lease) -> Option<Self::Addr>;
    fn held_mut(lease: &mut Lease) -> &mut Option<Self::Addr>;
    fn index(inner: &Inner) -> &HashMap<Self::Addr, MacAddr>;
    fn index_mut(inner: &mut Inner) -> &mut HashMap<Self::Addr, MacAddr>;
}

/// Implements [`Family`] for `$family`, whose addresses are `$addr`, held in the
/// record's `$field` and indexed by the table's `$index`.
macro_rules! family {
    ($(#[$doc:meta])* $family:ident, $addr:ty, $field:ident, $index:ident) => {
        $(#[$doc])*
        pub(super) enum $family {}

        impl Family for $family {
            type Addr = $addr;
            fn held(lease: &Lease) -> Option<$addr> {
                lease.$field
            }
            fn held_mut(lease: &mut Lease) -> &mut Option<$addr> {
                &mut lease.$field
            }
            fn index(inner: &Inner) -> &HashMap<$addr, MacAddr> {
                &inner.$index
            }
            fn index_mut(inner: &mut Inner) -> &mut HashMap<$addr, MacAddr> {
                &mut inner.$index
            }
        }
    };
}

family!(
    /// DHCPv4's addresses.
    V4, Ipv4Addr, ip, by_ip
);
family!(
    /// DHCPv6's IA_NA addresses.
    V6, Ipv6Addr, ip6, by_ip6
);

impl Inner {
    /// The other client whose record holds `ip`, with that record, if any.
    fn other_holder<F: Family>(&self, mac: MacAddr, ip: F::Addr) -> Option<Option<&Lease>> {
        match F::index(self).get(&ip) {
            Some(holder) if *holder != mac => {
                Some(self.leases.get(holder).filter(|l| F::held(l) == Some(ip)))
            }
            _ => None,
        }
    }

    /// Whether `ip` may be offered to `mac`: no other client's unexpired lease or
    /// offer holds it.
    pub(super) fn free<F: Family>(&self, mac: MacAddr, ip: F::Addr, now: u64) -> bool {
        self.other_holder::<F>(mac, ip)
            .flatten()
            .is_none_or(|l| l.expires_unix <= now)
    }

    /// Whether `ip` may be bound to `mac`: a REQUEST wins over another client's mere
    /// offer, never over its live lease.
    pub(super) fn may_bind<F: Family>(&self, mac: MacAddr, ip: F::Addr, now: u64) -> bool {
        self.other_holder::<F>(mac, ip)
            .flatten()
            .is_none_or(|l| l.expires_unix <= now || l.state == LeaseState::Offered)
    }

    /// With the range full: the address merely offered (never requested) to another
    /// client longest ago, among those `eligible`. A flood of DISCOVERs thus cannot
    /// keep a real client without an offer.
    pub(super) fn oldest_offer<F: Family>(
        &self,
        mac: MacAddr,
        eligible: impl Fn(F::Addr) -> bool,
    ) -> Option<F::Addr> {
        F::index(self)
            .iter()
            .filter(|(ip, holder)| **holder != mac && eligible(**ip))
            .filter_map(|(ip, holder)| {
                let lease = self.leases.get(holder)?;
                (lease.state == LeaseState::Offered && F::held(lease) == Some(*ip))
                    .then_some((lease.expires_unix, *ip))
            })
            .min()
            .map(|(_, ip)| ip)
    }
}

impl LeaseTable {
    /// Sets `mac`'s address of family `F` and its lease state, valid for `secs`; the
    /// previous holder (an offer given away, an expired lease) loses the address.
    pub(super) fn assign_in<F: Family>(
        &self,
        mac: MacAddr,
        ip: F::Addr,
        state: LeaseState,
        secs: u64,
    ) {
        let now = now_unix();
        let mut inner = self.lock();
        let Some(lease) = inner.leases.get_mut(&mac) else {
            return;
        };
        let old = F::held_mut(lease).replace(ip);
        lease.state = state;
        lease.expires_unix = now + secs;
        let index = F::index_mut(&mut inner);
        if let Some(old) = old
            && old != ip
            && index.get(&old) == Some(&mac)
        {
            index.remove(&old);
        }
        if let Some(previous) = index.insert(ip, mac)
            && previous != mac
            && let Some(lease) = inner.leases.get_mut(&previous)
            && F::held(lease) == Some(ip)
        {
            *F::held_mut(lease) = None;
            lease.state = LeaseState::Released;
            lease.expires_unix = 0;
        }
        inner.generation += 1;
        drop(inner);
        if state == LeaseState::Bound {
            let _ = self.shared.events.send(LeaseEvent::Bound(mac, ip.into()));
        }
        self.shared.dirty.notify_one();
    }
}
