//! One list of all nodes per poll cycle, shared by every host's look at its node.
//!
//! Ironic has no watch; bmo polls. Rather than one `GET /v1/nodes/{id}` per host and
//! look, the first look after the list is [`MAX_AGE`] old fetches every node in one
//! paged `GET /v1/nodes?fields=…`, and every look until then is answered from it. A
//! node bmo wrote to after the list was taken is read on its own (the list shows it
//! as it was before the write), as is one the list does not hold.
//!
//! The same list watches hosts at rest: [`NodeList::states`] gives a digest of what
//! bmo acts on in each node ([`state_digest`]), which the host controller compares
//! with what each host's last reconcile saw.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::ironic::{IronicClient, IronicError, Node};

/// How old the shared list may be when a host looks at its node: about the shortest
/// interval between two looks at a node in a transient state.
pub const MAX_AGE: Duration = Duration::from_secs(1);

/// With many nodes a list costs Ironic (one process, the bottleneck) real time: it is
/// taken at most once per this many times as long as the last one took, so listing
/// keeps to about a quarter of Ironic's time however many nodes there are.
const LIST_TIME_FACTOR: u32 = 4;

/// The oldest the list may get however long listing takes: a node in a transient
/// state is not looked at less often than this.
const MAX_AGE_CAP: Duration = Duration::from_secs(10);

/// Up to this many nodes, a node bmo wrote to since the list was taken is looked at
/// in a new list rather than read on its own: at N = 10 a list cost Ironic about
/// what one node's read does (one request either way) and answers every host
/// looking then. At N = 1000 a list of 500 took 190 ms, a node's read 20 ms.
const SMALL_LIST: usize = 50;

/// The node fields bmo reads (every field of [`Node`]).
const FIELDS: &[&str] = &[
    "uuid",
    "name",
    "driver",
    "provision_state",
    "target_provision_state",
    "power_state",
    "target_power_state",
    "last_error",
    "maintenance",
    "maintenance_reason",
    "reservation",
    "properties",
    "instance_info",
    "extra",
    "driver_info",
    "instance_uuid",
    "automated_clean",
    "fault",
    "provision_updated_at",
    "inspection_started_at",
    "inspection_finished_at",
    "clean_step",
    "deploy_step",
    "service_step",
    "boot_interface",
    "deploy_interface",
    "inspect_interface",
    "raid_interface",
    "power_interface",
    "disable_power_off",
    "network_data",
];

/// Every node as one list saw them.
#[derive(Debug)]
struct Snapshot {
    /// When the list was asked for.
    taken: Instant,
    /// How long it took.
    took: Duration,
    by_uuid: HashMap<String, Node>,
    uuid_by_name: HashMap<String, String>,
}

/// What a list says of one node.
enum Found<'a> {
    Node(&'a Node),
    /// bmo wrote to it after the list was taken.
    Written,
    /// Not in the list.
    Missing,
}

impl Snapshot {
    fn lookup(&self, client: &IronicClient, id: Option<&str>, name: &str) -> Found<'_> {
        let uuid = id
            .filter(|id| self.by_uuid.contains_key(*id))
            .or_else(|| self.uuid_by_name.get(name).map(String::as_str));
        let Some(node) = uuid.and_then(|uuid| self.by_uuid.get(uuid)) else {
            return Found::Missing;
        };
        let written = |ident: Option<&str>| {
            ident.is_some_and(|ident| client.written_since(ident, self.taken))
        };
        if written(Some(&node.uuid)) || written(node.name.as_deref()) {
            Found::Written
        } else {
            Found::Node(node)
        }
    }
}

/// The shared list of nodes.
#[derive(Debug, Default)]
pub struct NodeList {
    latest: tokio::sync::Mutex<Option<Arc<Snapshot>>>,
    /// How many nodes the latest list held.
    listed: AtomicUsize,
}

impl NodeList {
    /// The node with UUID `id` (else named `name`) as the latest list shows it,
    /// listing again first when that list is older than [`MAX_AGE`]; `None` when the
    /// list does not hold it or bmo wrote to it since. With few nodes a list costs
    /// Ironic about what one node's read does, so then a list older than bmo's last
    /// write to the node is taken again instead, and shared with every other look.
    pub async fn node(
        &self,
        client: &IronicClient,
        id: Option<&str>,
        name: &str,
    ) -> Result<Option<Node>, IronicError> {
        let snapshot = self.fresh(client, None).await?;
        match snapshot.lookup(client, id, name) {
            Found::Written if snapshot.by_uuid.len() <= SMALL_LIST => {
                let snapshot = self.fresh(client, Some(snapshot.taken)).await?;
                Ok(match snapshot.lookup(client, id, name) {
                    Found::Node(node) => Some(node.clone()),
                    Found::Written | Found::Missing => None,
                })
            }
            Found::Node(node) => Ok(Some(node.clone())),
            Found::Written | Found::Missing => Ok(None),
        }
    }

    /// Whether the latest list held at most [`SMALL_LIST`] nodes (true before the
    /// first).
    pub fn is_small(&self) -> bool {
        self.listed.load(Ordering::Relaxed) <= SMALL_LIST
    }

    /// [`state_digest`] of every node, by UUID, from the latest list (taken again
    /// when it is older than [`MAX_AGE`]).
    pub async fn states(&self, client: &IronicClient) -> Result<HashMap<String, u64>, IronicError> {
        let snapshot = self.fresh(client, None).await?;
        Ok(snapshot
            .by_uuid
            .iter()
            .map(|(uuid, node)| (uuid.clone(), state_digest(node)))
            .collect())
    }

    /// The latest list, taken again when it is older than [`MAX_AGE`] (or
    /// [`LIST_TIME_FACTOR`] times what it took, up to [`MAX_AGE_CAP`]), or when it
    /// was taken no later than `after`. Lookers that arrive while a list is under way
    /// wait for it and share it.
    async fn fresh(
        &self,
        client: &IronicClient,
        after: Option<Instant>,
    ) -> Result<Arc<Snapshot>, IronicError> {
        let mut latest = self.latest.lock().await;
        if let Some(snapshot) = latest.as_ref().filter(|s| {
            let max_age = (s.took * LIST_TIME_FACTOR).clamp(MAX_AGE, MAX_AGE_CAP);
            s.taken.elapsed() < max_age && after.is_none_or(|after| s.taken > after)
        }) {
            return Ok(snapshot.clone());
        }
        let taken = Instant::now();
        let nodes = client.list_node_fields(FIELDS).await?;
        let uuid_by_name = nodes
            .iter()
            .filter_map(|n| Some((n.name.clone()?, n.uuid.clone())))
            .collect();
        let by_uuid = nodes.into_iter().map(|n| (n.uuid.clone(), n)).collect();
        let snapshot = Arc::new(Snapshot {
            taken,
            took: taken.elapsed(),
            by_uuid,
            uuid_by_name,
        });
        self.listed.store(snapshot.by_uuid.len(), Ordering::Relaxed);
        *latest = Some(snapshot.clone());
        Ok(snapshot)
    }
}

/// A digest of what bmo acts on in `node` (its states, power, maintenance, errors and
/// the fields registration keeps up to date), leaving out what moves while nothing
/// happens to the host (timestamps, the conductor's lock, step progress).
pub fn state_digest(node: &Node) -> u64 {
    let mut hasher = std::hash::DefaultHasher::new();
    (
        &node.name,
        &node.driver,
        &node.provision_state,
        &node.target_provision_state,
        &node.power_state,
        &node.target_power_state,
    )
        .hash(&mut hasher);
    (
        &node.last_error,
        node.maintenance,
        &node.maintenance_reason,
        &node.fault,
        &node.instance_uuid,
        node.automated_clean,
        &node.inspect_interface,
    )
        .hash(&mut hasher);
    // JSON values have no Hash; their text is stable for one Ironic.
    for value in [&node.driver_info, &node.extra] {
        serde_json::to_string(value)
            .unwrap_or_default()
            .hash(&mut hasher);
    }
    node.network_data
        .as_ref()
        .map(ToString::to_string)
        .hash(&mut hasher);
    hasher.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(json: serde_json::Value) -> Node {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn the_state_digest_moves_with_power_and_state_but_not_with_timestamps_or_locks() {
        let base = serde_json::json!({
            "uuid": "u1", "driver": "fake-hardware", "provision_state": "active",
            "power_state": "power on", "maintenance": false,
        });
        let digest = |patch: serde_json::Value| {
            let mut json = base.clone();
            json.as_object_mut()
                .unwrap()
                .extend(patch.as_object().unwrap().clone());
            state_digest(&node(json))
        };
        let resting = digest(serde_json::json!({}));
        assert_eq!(
            resting,
            digest(serde_json::json!({"reservation": "conductor-1"}))
        );
        assert_eq!(
            resting,
            digest(serde_json::json!({"provision_updated_at": "2026-12-03T22:00:00Z"}))
        );
        assert_ne!(
            resting,
            digest(serde_json::json!({"power_state": "power off"}))
        );
        assert_ne!(resting, digest(serde_json::json!({"maintenance": true})));
        assert_ne!(
            resting,
            digest(serde_json::json!({"last_error": "BMC unreachable"}))
        );
        assert_ne!(
            resting,
            digest(serde_json::json!({"provision_state": "deploy failed"}))
        );
        assert_ne!(
            resting,
            digest(serde_json::json!({"driver_info": {"redfish_address": "x"}}))
        );
    }
}
