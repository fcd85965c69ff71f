//! Which BareMetalHost owns an Ironic node: the controller's side of
//! [`NodeOwners`](crate::provisioner::NodeOwners), answered from the hosts it watches.
//!
//! A host owns the node named after it (`namespace~name`) and the node its status
//! records (`status.provisioning.ID`). A node that another existing host owns is never
//! taken over, whatever the asking host's status says: a status restored from
//! upstream's status annotation is written by whoever can create hosts.

use kube::runtime::reflector::{ObjectRef, Store};

use crate::api::BareMetalHost;
use crate::provisioner::{HostId, NodeOwners};

/// The hosts of the controller's reflector as node owners.
#[derive(Clone)]
pub struct HostsOwningNodes {
    hosts: Store<BareMetalHost>,
}

impl std::fmt::Debug for HostsOwningNodes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostsOwningNodes").finish_non_exhaustive()
    }
}

impl HostsOwningNodes {
    pub fn new(hosts: Store<BareMetalHost>) -> Self {
        Self { hosts }
    }
}

/// The node UUID `host`'s status records, if any.
pub fn recorded_node(host: &BareMetalHost) -> Option<&str> {
    host.status
        .as_ref()
        .map(|s| s.provisioning.id.as_str())
        .filter(|id| !id.is_empty())
}

/// When `host` was created, as a sortable key; a host without one sorts last.
fn created_at(host: &BareMetalHost) -> (bool, Option<k8s_openapi::jiff::Timestamp>) {
    let created = host.metadata.creation_timestamp.as_ref().map(|t| t.0);
    (created.is_none(), created)
}

fn id_of(host: &BareMetalHost) -> HostId {
    HostId::new(
        host.metadata.namespace.clone().unwrap_or_default(),
        host.metadata.name.clone().unwrap_or_default(),
    )
}

impl NodeOwners for HostsOwningNodes {
    fn other_owner(&self, host: &HostId, uuid: &str, name: Option<&str>) -> Option<HostId> {
        // Named after another host that exists: its node. The store answers by key,
        // so the common case costs no scan.
        if let Some((namespace, named)) = name.and_then(|n| n.split_once('~')) {
            let owner = HostId::new(namespace, named);
            if owner != *host
                && self
                    .hosts
                    .get(&ObjectRef::new(named).within(namespace))
                    .is_some()
            {
                return Some(owner);
            }
        }
        // Recorded by another host. Asked only for nodes not named after the asking
        // host, which is rare: one pass over the cache. When several others record
        // it (a tenant may write any status), the oldest is named: the host that had
        // the node first, not the latest claimant.
        self.hosts
            .state()
            .iter()
            .map(|h| (id_of(h), h))
            .filter(|(id, h)| id != host && recorded_node(h) == Some(uuid))
            .min_by_key(|(id, h)| (created_at(h), id.to_string()))
            .map(|(id, _)| id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::runtime::watcher;

    fn host(namespace: &str, name: &str, node: &str) -> BareMetalHost {
        let mut host = BareMetalHost::new(name, Default::default());
        host.metadata.namespace = Some(namespace.into());
        let mut status = crate::api::BareMetalHostStatus::default();
        status.provisioning.id = node.into();
        host.status = Some(status);
        host
    }

    #[test]
    fn a_node_named_after_or_recorded_by_another_existing_host_is_that_hosts() {
        let (reader, mut writer) = kube::runtime::reflector::store();
        writer.apply_watcher_event(&watcher::Event::Apply(host("victims", "db-0", "uuid-v")));
        writer.apply_watcher_event(&watcher::Event::Apply(host("tenant", "x", "")));
        let owners = HostsOwningNodes::new(reader);
        let attacker = HostId::new("tenant", "x");
        let victim = HostId::new("victims", "db-0");

        assert_eq!(
            owners.other_owner(&attacker, "uuid-v", Some("victims~db-0")),
            Some(victim.clone()),
            "named after the victim"
        );
        assert_eq!(
            owners.other_owner(&attacker, "uuid-v", Some("renamed")),
            Some(victim.clone()),
            "recorded by the victim"
        );
        assert_eq!(
            owners.other_owner(&victim, "uuid-v", Some("victims~db-0")),
            None,
            "the owner asking"
        );
        assert_eq!(
            owners.other_owner(&attacker, "uuid-gone", Some("moved~away")),
            None,
            "a node whose host no longer exists here (moved by clusterctl, renamed on adoption)"
        );
        assert_eq!(owners.other_owner(&attacker, "uuid-new", None), None);
    }

    #[test]
    fn of_several_hosts_recording_a_node_the_oldest_is_its_owner() {
        let created = |host: &mut BareMetalHost, seconds: i64| {
            let at = k8s_openapi::jiff::Timestamp::from_second(seconds).expect("a time");
            host.metadata.creation_timestamp =
                Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(at));
        };
        let mut victim = host("site", "victim", "uuid-v");
        created(&mut victim, 1_000);
        // Later, and first in name order: a copycat that wrote the node into its status.
        let mut copycat = host("site", "a-copycat", "uuid-v");
        created(&mut copycat, 2_000);
        let (reader, mut writer) = kube::runtime::reflector::store();
        writer.apply_watcher_event(&watcher::Event::Apply(copycat));
        writer.apply_watcher_event(&watcher::Event::Apply(victim));
        let owners = HostsOwningNodes::new(reader);

        assert_eq!(
            owners.other_owner(&HostId::new("site", "intruder"), "uuid-v", None),
            Some(HostId::new("site", "victim"))
        );
        assert_eq!(
            owners.other_owner(&HostId::new("site", "victim"), "uuid-v", None),
            Some(HostId::new("site", "a-copycat")),
            "the owner itself is told of the other claimant"
        );
    }
}
