//! Discovery (`BMO_DISCOVERY`): a DHCP client whose MAC no BareMetalHost knows becomes
//! a BareMetalHost with only `spec.bootMACAddress`, which the controller then marks
//! unmanaged with operationalStatus `discovered` until someone adds BMC details.
//!
//! Once per MAC: the host is named after the MAC (`discovered-525400aabbcc`), so a
//! second attempt meets "already exists", and the lease table records that the MAC was
//! handled (`discovered_unix`, persisted with the lease), so a deleted discovered host
//! is not made again, also not after a restart.

use std::collections::{HashSet, VecDeque};
use std::time::{Duration, Instant};

use kube::api::{ListParams, PostParams};
use kube::{Api, ResourceExt};
use tokio::sync::broadcast::error::RecvError;

use crate::api::{BareMetalHost, BareMetalHostSpec};
use crate::netboot::leases::{LeaseEvent, LeaseTable};
use crate::netboot::mac::MacAddr;

/// Where discovery puts hosts and where it looks for known ones.
#[derive(Debug, Clone)]
pub struct DiscoverySettings {
    /// `BMO_DISCOVERY_NAMESPACE`: namespace of the hosts discovery creates.
    pub namespace: String,
    /// `WATCH_NAMESPACE`: hosts whose MACs count as known; all namespaces when `None`.
    pub watch_namespace: Option<String>,
    /// How many hosts discovery may create.
    pub limits: DiscoveryLimits,
}

/// Caps on the hosts discovery creates, so spoofed MACs cannot flood the cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DiscoveryLimits {
    /// `BMO_DISCOVERY_BURST`: hosts per 10-second window.
    pub per_window: u32,
    /// `BMO_DISCOVERY_PER_MINUTE`: hosts per minute.
    pub per_minute: u32,
    /// `BMO_DISCOVERY_MAX_HOSTS`: hosts in total while bmo runs.
    pub total: u32,
}

impl Default for DiscoveryLimits {
    fn default() -> Self {
        Self {
            per_window: 5,
            per_minute: 20,
            total: 200,
        }
    }
}

/// Length of the burst window of [`DiscoveryLimits::per_window`].
pub const DISCOVERY_WINDOW: Duration = Duration::from_secs(10);

/// What discovery created recently, against its limits.
#[derive(Debug)]
struct Budget {
    limits: DiscoveryLimits,
    /// Creation times within the last minute.
    recent: VecDeque<Instant>,
    total: u32,
    /// When a refusal was last logged (once per window, not once per MAC).
    warned: Option<Instant>,
}

impl Budget {
    fn new(limits: DiscoveryLimits) -> Self {
        Self {
            limits,
            recent: VecDeque::new(),
            total: 0,
            warned: None,
        }
    }

    /// Takes one creation from the budget, or names the limit that is reached.
    fn take(&mut self, now: Instant) -> Result<(), &'static str> {
        self.check(now)?;
        self.recent.push_back(now);
        self.total += 1;
        Ok(())
    }

    /// Whether one more creation fits now, or which limit is reached.
    fn check(&mut self, now: Instant) -> Result<(), &'static str> {
        let minute = Duration::from_secs(60);
        while self
            .recent
            .front()
            .is_some_and(|t| now.duration_since(*t) >= minute)
        {
            self.recent.pop_front();
        }
        let in_window = self
            .recent
            .iter()
            .filter(|t| now.duration_since(**t) < DISCOVERY_WINDOW)
            .count();
        if self.total >= self.limits.total {
            return Err("BMO_DISCOVERY_MAX_HOSTS");
        }
        if self.recent.len() >= self.limits.per_minute as usize {
            return Err("BMO_DISCOVERY_PER_MINUTE");
        }
        if in_window >= self.limits.per_window as usize {
            return Err("BMO_DISCOVERY_BURST");
        }
        Ok(())
    }

    /// Logs, at most once per window, that `limit` stopped discovery of `mac`.
    fn refused(&mut self, now: Instant, mac: &MacAddr, limit: &'static str) {
        if self.should_warn(now) {
            tracing::warn!(%mac, limit, "discovery limit reached; unknown MACs are not made into hosts for now (tried again on their next DHCP request)");
        }
    }

    /// Whether a refusal should be logged now.
    fn should_warn(&mut self, now: Instant) -> bool {
        let due = self
            .warned
            .is_none_or(|t| now.duration_since(t) >= DISCOVERY_WINDOW);
        if due {
            self.warned = Some(now);
        }
        due
    }
}

/// Why one MAC could not be handled now (it is tried again on its next DHCP request).
#[derive(Debug, thiserror::Error)]
pub enum DiscoveryError {
    #[error("cannot list BareMetalHosts to find known MACs: {0}")]
    List(#[source] kube::Error),
    #[error("cannot create BareMetalHost {namespace}/{name}: {source}")]
    Create {
        namespace: String,
        name: String,
        #[source]
        source: kube::Error,
    },
}

/// The name discovery gives the host of `mac`: `discovered-` and the 12 hex digits.
pub fn host_name(mac: &MacAddr) -> String {
    let hex: String = mac.0.iter().map(|b| format!("{b:02x}")).collect();
    format!("discovered-{hex}")
}

/// Every MAC the hosts in `hosts` have: their boot MACs and inspected NICs (a known
/// host's second NIC asking for an address is not a new machine).
pub fn known_macs(hosts: &[BareMetalHost]) -> HashSet<MacAddr> {
    hosts
        .iter()
        .flat_map(|h| {
            let boot = h.spec.boot_mac_address.clone();
            let nics = h
                .status
                .as_ref()
                .and_then(|s| s.hardware.as_ref())
                .map(|hw| hw.nics.iter().filter_map(|n| n.mac.clone()).collect())
                .unwrap_or_else(Vec::new);
            boot.into_iter().chain(nics)
        })
        .filter_map(|m| m.parse().ok())
        .collect()
}

/// Runs discovery until its task is aborted: MACs already in the table are looked at
/// once at start, then each new client and each bound lease.
pub async fn run(client: kube::Client, leases: LeaseTable, settings: DiscoverySettings) {
    let mut events = leases.subscribe();
    let mut discovery = Discovery {
        client,
        leases,
        budget: Budget::new(settings.limits),
        settings,
        decided: HashSet::new(),
    };
    tracing::info!(namespace = %discovery.settings.namespace, "discovery of unknown DHCP clients on");
    discovery.scan().await;
    loop {
        match events.recv().await {
            Ok(LeaseEvent::NewClient(mac) | LeaseEvent::Bound(mac, _)) => {
                discovery.handle(&[mac]).await;
            }
            Err(RecvError::Lagged(missed)) => {
                tracing::warn!(missed, "discovery fell behind the lease table; rescanning");
                discovery.scan().await;
            }
            Err(RecvError::Closed) => return,
        }
    }
}

struct Discovery {
    client: kube::Client,
    leases: LeaseTable,
    settings: DiscoverySettings,
    budget: Budget,
    /// MACs settled in this run (known host or discovered); not looked up again.
    decided: HashSet<MacAddr>,
}

impl Discovery {
    async fn scan(&mut self) {
        let macs: Vec<MacAddr> = self.leases.list().into_iter().map(|l| l.mac).collect();
        self.handle(&macs).await;
    }

    async fn handle(&mut self, macs: &[MacAddr]) {
        let open: Vec<MacAddr> = macs
            .iter()
            .copied()
            .filter(|m| !self.decided.contains(m))
            .filter(|m| {
                self.leases
                    .get(m)
                    .is_some_and(|l| l.discovered_unix.is_none())
            })
            .collect();
        let Some(first) = open.first() else {
            return;
        };
        // Over the limit, not even the list of hosts is fetched: a flood of new MACs
        // costs the kube-apiserver nothing.
        let now = Instant::now();
        if let Err(limit) = self.budget.check(now) {
            self.budget.refused(now, first, limit);
            return;
        }
        if let Err(e) = self.discover(&open).await {
            tracing::warn!(error = %e, "discovery failed; trying again on the next DHCP request");
        }
    }

    async fn discover(&mut self, macs: &[MacAddr]) -> Result<(), DiscoveryError> {
        let scope: Api<BareMetalHost> = match &self.settings.watch_namespace {
            Some(ns) => Api::namespaced(self.client.clone(), ns),
            None => Api::all(self.client.clone()),
        };
        let mut hosts = scope
            .list(&ListParams::default())
            .await
            .map_err(DiscoveryError::List)?
            .items;
        if self.settings.watch_namespace.as_deref() != Some(self.settings.namespace.as_str())
            && self.settings.watch_namespace.is_some()
        {
            let own: Api<BareMetalHost> =
                Api::namespaced(self.client.clone(), &self.settings.namespace);
            hosts.extend(
                own.list(&ListParams::default())
                    .await
                    .map_err(DiscoveryError::List)?
                    .items,
            );
        }
        let known = known_macs(&hosts);
        for mac in macs {
            if known.contains(mac) {
                self.decided.insert(*mac);
                continue;
            }
            let now = Instant::now();
            if let Err(limit) = self.budget.take(now) {
                self.budget.refused(now, mac, limit);
                continue;
            }
            match self.create(mac).await {
                Ok(()) => {
                    self.leases.mark_discovered(mac);
                    self.decided.insert(*mac);
                }
                // The other MACs of a scan still get their turn.
                Err(e) => {
                    tracing::warn!(error = %e, %mac, "discovery failed; trying again on the MAC's next DHCP request")
                }
            }
        }
        Ok(())
    }

    async fn create(&self, mac: &MacAddr) -> Result<(), DiscoveryError> {
        let ns = &self.settings.namespace;
        let name = host_name(mac);
        let api: Api<BareMetalHost> = Api::namespaced(self.client.clone(), ns);
        let host = BareMetalHost::new(
            &name,
            BareMetalHostSpec {
                boot_mac_address: Some(mac.to_string()),
                ..Default::default()
            },
        );
        match api.create(&PostParams::default(), &host).await {
            Ok(created) => {
                tracing::info!(host = %format!("{ns}/{}", created.name_any()), %mac, "discovered a new host");
                Ok(())
            }
            Err(kube::Error::Api(status)) if status.is_already_exists() => {
                tracing::debug!(host = %format!("{ns}/{name}"), %mac, "discovered host exists already");
                Ok(())
            }
            Err(source) => Err(DiscoveryError::Create {
                namespace: ns.clone(),
                name,
                source,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{BareMetalHostStatus, HardwareDetails, Nic};

    #[test]
    fn the_budget_caps_bursts_minutes_and_the_total() {
        let mut budget = Budget::new(DiscoveryLimits {
            per_window: 2,
            per_minute: 3,
            total: 4,
        });
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        assert!(budget.take(at(0)).is_ok());
        assert!(budget.take(at(0)).is_ok());
        assert_eq!(budget.take(at(1)), Err("BMO_DISCOVERY_BURST"));
        assert!(budget.take(at(10)).is_ok());
        assert_eq!(budget.take(at(20)), Err("BMO_DISCOVERY_PER_MINUTE"));
        assert!(budget.take(at(60)).is_ok());
        assert_eq!(budget.take(at(200)), Err("BMO_DISCOVERY_MAX_HOSTS"));
        assert!(budget.should_warn(at(200)));
        assert!(!budget.should_warn(at(201)));
    }

    #[test]
    fn names_follow_the_mac() {
        let mac: MacAddr = "52:54:00:AA:bb:0C".parse().unwrap();
        assert_eq!(host_name(&mac), "discovered-525400aabb0c");
    }

    #[test]
    fn boot_macs_and_inspected_nics_are_known_in_any_case() {
        let mut a = BareMetalHost::new(
            "a",
            BareMetalHostSpec {
                boot_mac_address: Some("52:54:00:AA:00:01".into()),
                ..Default::default()
            },
        );
        a.status = Some(BareMetalHostStatus {
            hardware: Some(HardwareDetails {
                nics: vec![Nic {
                    mac: Some("52:54:00:aa:00:02".into()),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            ..Default::default()
        });
        let b = BareMetalHost::new("b", BareMetalHostSpec::default());
        let known = known_macs(&[a, b]);
        let mac = |s: &str| s.parse::<MacAddr>().unwrap();
        assert!(known.contains(&mac("52:54:00:aa:00:01")));
        assert!(known.contains(&mac("52:54:00:aa:00:02")));
        assert!(!known.contains(&mac("52:54:00:aa:00:03")));
        assert_eq!(known.len(), 2);
    }
}
