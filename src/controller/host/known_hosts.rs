//! BareMetalHosts as the DHCP server's known hosts: the controller's side of
//! [`netboot::hosts::KnownHosts`](crate::netboot::hosts::KnownHosts).
//!
//! A host is known by its `spec.bootMACAddress` and by the MACs of the NICs
//! inspection found (`status.hardware.nics[].mac`). It has no fixed address:
//! upstream's BareMetalHost has no field that would give one (fixed addresses come
//! from `DHCP_HOSTS`). The same index tells the controller which hosts a DHCP
//! exchange wakes.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use kube::runtime::reflector::{ObjectRef, Store};
use tokio::sync::watch;

use crate::api::BareMetalHost;
use crate::netboot::hosts::{KnownHost, KnownHosts};
use crate::netboot::mac::MacAddr;

type ByMac = HashMap<MacAddr, Vec<ObjectRef<BareMetalHost>>>;

/// The hosts of the controller's reflector, indexed by MAC. The index is rebuilt
/// on the first lookup after a watch event changed the store, so that a lookup
/// per DHCP request (a flood of made-up MACs included) costs one hash lookup.
pub struct ClusterHosts {
    hosts: Store<BareMetalHost>,
    /// Moves with every watch event applied to the store.
    changes: watch::Receiver<u64>,
    /// The index and the count of changes it was built at.
    index: RwLock<(Option<u64>, Arc<ByMac>)>,
}

impl ClusterHosts {
    pub fn new(hosts: Store<BareMetalHost>, changes: watch::Receiver<u64>) -> Self {
        Self {
            hosts,
            changes,
            index: RwLock::default(),
        }
    }

    /// The hosts that boot from `mac` or have a NIC with it.
    pub fn hosts_with(&self, mac: &MacAddr) -> Vec<ObjectRef<BareMetalHost>> {
        self.index().get(mac).cloned().unwrap_or_default()
    }

    fn index(&self) -> Arc<ByMac> {
        let seen = *self.changes.borrow();
        {
            // A panic while holding the lock leaves a whole index (one assignment).
            let index = self.index.read().unwrap_or_else(|p| p.into_inner());
            if index.0 == Some(seen) {
                return index.1.clone();
            }
        }
        let fresh = Arc::new(index_by_mac(&self.hosts.state()));
        *self.index.write().unwrap_or_else(|p| p.into_inner()) = (Some(seen), fresh.clone());
        fresh
    }
}

impl KnownHosts for ClusterHosts {
    fn lookup(&self, mac: &MacAddr) -> Option<KnownHost> {
        let index = self.index();
        let host = index.get(mac)?.first()?;
        Some(KnownHost {
            name: match &host.namespace {
                Some(ns) => format!("{ns}/{}", host.name),
                None => host.name.clone(),
            },
            fixed_ip: None,
        })
    }
}

/// Each MAC of `hosts` (boot MAC, inspected NICs; compared as addresses, so case
/// and separators do not matter) with the hosts that have it.
pub(super) fn index_by_mac(hosts: &[Arc<BareMetalHost>]) -> ByMac {
    let mut by_mac = ByMac::new();
    for host in hosts {
        let nics = host
            .status
            .as_ref()
            .and_then(|s| s.hardware.as_ref())
            .into_iter()
            .flat_map(|hw| hw.nics.iter().filter_map(|n| n.mac.as_deref()));
        let mut macs: Vec<MacAddr> = host
            .spec
            .boot_mac_address
            .as_deref()
            .into_iter()
            .chain(nics)
            .filter_map(|m| m.parse().ok())
            .collect();
        macs.sort_unstable();
        macs.dedup();
        for mac in macs {
            by_mac
                .entry(mac)
                .or_default()
                .push(ObjectRef::from_obj(host.as_ref()));
        }
    }
    by_mac
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::runtime::watcher;

    fn host(name: &str, boot_mac: &str, nic_macs: &[&str]) -> BareMetalHost {
        let mut host: BareMetalHost = serde_json::from_value(serde_json::json!({
            "apiVersion": "metal3.io/v1alpha1",
            "kind": "BareMetalHost",
            "metadata": {"name": name, "namespace": "ns"},
            "spec": {"online": false, "bootMACAddress": boot_mac},
        }))
        .expect("host");
        if !nic_macs.is_empty() {
            let details = crate::api::HardwareDetails {
                nics: nic_macs
                    .iter()
                    .map(|m| crate::api::Nic {
                        mac: Some((*m).into()),
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            };
            host.status = Some(crate::api::BareMetalHostStatus {
                hardware: Some(details),
                ..Default::default()
            });
        }
        host
    }

    #[test]
    fn a_host_is_known_by_its_boot_mac_and_inspected_nics_once_its_event_counted() {
        let (reader, mut writer) = kube::runtime::reflector::store();
        let (events, counted) = tokio::sync::watch::channel(0u64);
        let cluster = ClusterHosts::new(reader, counted);
        let mac = |s: &str| s.parse::<MacAddr>().expect("MAC");
        assert_eq!(cluster.lookup(&mac("52:54:00:aa:00:01")), None);

        writer.apply_watcher_event(&watcher::Event::Apply(host(
            "a",
            "52:54:00:AA:00:01",
            &["52-54-00-aa-00-02", "52:54:00:aa:00:01"],
        )));
        assert_eq!(
            cluster.lookup(&mac("52:54:00:aa:00:02")),
            None,
            "the index is rebuilt only after a change is counted"
        );
        events.send_modify(|n| *n += 1);
        for m in ["52:54:00:aa:00:01", "52:54:00:aa:00:02"] {
            assert_eq!(
                cluster.lookup(&mac(m)),
                Some(KnownHost {
                    name: "ns/a".into(),
                    fixed_ip: None
                }),
                "{m}"
            );
        }
        assert_eq!(
            cluster.hosts_with(&mac("52:54:00:aa:00:01")).len(),
            1,
            "a MAC on the boot NIC and in the details counts once"
        );

        writer.apply_watcher_event(&watcher::Event::Delete(host("a", "52:54:00:aa:00:01", &[])));
        events.send_modify(|n| *n += 1);
        assert_eq!(cluster.lookup(&mac("52:54:00:aa:00:01")), None, "deleted");
    }
}
