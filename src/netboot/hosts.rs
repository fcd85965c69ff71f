//! The machines the DHCP server knows: the backend it asks, per request, whether a
//! MAC belongs to a known host and whether that host has a fixed address.
//!
//! netboot defines the trait and its static source (`DHCP_HOSTS`); the host
//! controller implements it from BareMetalHosts (`controller::known_hosts`) and
//! attaches that source to the running server, so netboot itself knows nothing of
//! Kubernetes. A host is "known" as dnsmasq means it for `DHCP_IGNORE=tag:!known`:
//! it has an entry somewhere, with or without an address.

use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::sync::{Arc, RwLock};

use super::config::DhcpHosts;
use super::mac::MacAddr;

/// A source of known hosts. Called for every DHCP request, so a lookup must be cheap
/// (no I/O, no scan of every host).
pub trait KnownHosts: Send + Sync {
    /// The host `mac` belongs to, if this source knows it.
    fn lookup(&self, mac: &MacAddr) -> Option<KnownHost>;

    /// The MAC a fixed address of this source is kept for, so that no other client
    /// is given it. Sources without fixed addresses keep the default.
    fn reserved_for(&self, _ip: Ipv4Addr) -> Option<MacAddr> {
        None
    }
}

/// What a source knows of one MAC.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KnownHost {
    /// Who the MAC belongs to, for logs: `DHCP_HOSTS`, or a BareMetalHost's
    /// `namespace/name`.
    pub name: String,
    /// Its fixed address, given in full mode whatever `DHCP_RANGE` says.
    pub fixed_ip: Option<Ipv4Addr>,
}

/// `DHCP_HOSTS`: fixed addresses from the settings.
#[derive(Debug, Clone, Default)]
pub struct StaticHosts {
    by_mac: HashMap<MacAddr, Ipv4Addr>,
    by_ip: HashMap<Ipv4Addr, MacAddr>,
}

impl StaticHosts {
    /// The entries of `DHCP_HOSTS`; for a MAC or an address given twice, the last
    /// entry counts.
    pub fn new(hosts: Option<&DhcpHosts>) -> Self {
        let mut this = Self::default();
        for (mac, ip) in hosts.iter().flat_map(|h| &h.0) {
            if let Some(old) = this.by_mac.insert(*mac, *ip) {
                this.by_ip.remove(&old);
            }
            if let Some(old) = this.by_ip.insert(*ip, *mac) {
                this.by_mac.remove(&old);
            }
        }
        this
    }
}

impl KnownHosts for StaticHosts {
    fn lookup(&self, mac: &MacAddr) -> Option<KnownHost> {
        self.by_mac.get(mac).map(|ip| KnownHost {
            name: "DHCP_HOSTS".into(),
            fixed_ip: Some(*ip),
        })
    }

    fn reserved_for(&self, ip: Ipv4Addr) -> Option<MacAddr> {
        self.by_ip.get(&ip).copied()
    }
}

/// Every source the DHCP server asks: `DHCP_HOSTS` first, then the cluster's hosts
/// once the host controller has attached them. A cheap-to-clone handle: `bmo run`
/// gives one clone to the DHCP server and one to the controller.
#[derive(Clone, Default)]
pub struct HostDirectory {
    fixed: Arc<StaticHosts>,
    cluster: Arc<RwLock<Option<Arc<dyn KnownHosts>>>>,
}

impl std::fmt::Debug for HostDirectory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostDirectory")
            .field("fixed", &self.fixed.by_mac.len())
            .field("cluster", &self.cluster_source().is_some())
            .finish()
    }
}

impl HostDirectory {
    pub fn new(fixed: StaticHosts) -> Self {
        Self {
            fixed: Arc::new(fixed),
            cluster: Arc::default(),
        }
    }

    /// Adds the cluster's hosts (from the host controller), in place of any source
    /// attached before.
    pub fn attach(&self, source: Arc<dyn KnownHosts>) {
        *self.cluster.write().unwrap_or_else(|p| p.into_inner()) = Some(source);
    }

    fn cluster_source(&self) -> Option<Arc<dyn KnownHosts>> {
        // A panic while holding the lock leaves nothing half-written (one pointer).
        self.cluster
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

impl KnownHosts for HostDirectory {
    fn lookup(&self, mac: &MacAddr) -> Option<KnownHost> {
        self.fixed
            .lookup(mac)
            .or_else(|| self.cluster_source()?.lookup(mac))
    }

    fn reserved_for(&self, ip: Ipv4Addr) -> Option<MacAddr> {
        self.fixed
            .reserved_for(ip)
            .or_else(|| self.cluster_source()?.reserved_for(ip))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Cluster(MacAddr);

    impl KnownHosts for Cluster {
        fn lookup(&self, mac: &MacAddr) -> Option<KnownHost> {
            (*mac == self.0).then(|| KnownHost {
                name: "ns/host".into(),
                fixed_ip: None,
            })
        }
    }

    fn mac(last: u8) -> MacAddr {
        MacAddr([0x52, 0x54, 0, 0, 0, last])
    }

    #[test]
    fn dhcp_hosts_come_first_then_the_attached_cluster_hosts() {
        let hosts: DhcpHosts = "52:54:00:00:00:01,10.0.0.5".parse().expect("valid");
        let directory = HostDirectory::new(StaticHosts::new(Some(&hosts)));
        assert_eq!(
            directory.lookup(&mac(1)),
            Some(KnownHost {
                name: "DHCP_HOSTS".into(),
                fixed_ip: Some(Ipv4Addr::new(10, 0, 0, 5))
            })
        );
        assert_eq!(directory.lookup(&mac(2)), None, "nothing attached yet");

        let handle = directory.clone();
        handle.attach(Arc::new(Cluster(mac(2))));
        assert_eq!(
            directory.lookup(&mac(2)).map(|h| (h.name, h.fixed_ip)),
            Some(("ns/host".to_owned(), None)),
            "a clone attaches for every clone"
        );
        assert_eq!(directory.lookup(&mac(3)), None);
        assert_eq!(
            directory.reserved_for(Ipv4Addr::new(10, 0, 0, 5)),
            Some(mac(1))
        );
        assert_eq!(directory.reserved_for(Ipv4Addr::new(10, 0, 0, 6)), None);
    }

    #[test]
    fn a_mac_or_address_given_twice_keeps_only_its_last_entry() {
        let hosts: DhcpHosts =
            "52:54:00:00:00:01,10.0.0.5;52:54:00:00:00:01,10.0.0.6;52:54:00:00:00:02,10.0.0.6"
                .parse()
                .expect("valid");
        let fixed = StaticHosts::new(Some(&hosts));
        assert_eq!(fixed.lookup(&mac(1)), None, "its address went to :02");
        assert_eq!(
            fixed.lookup(&mac(2)).and_then(|h| h.fixed_ip),
            Some(Ipv4Addr::new(10, 0, 0, 6))
        );
        assert_eq!(fixed.reserved_for(Ipv4Addr::new(10, 0, 0, 5)), None);
    }
}
