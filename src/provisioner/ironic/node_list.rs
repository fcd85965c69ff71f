//! One list of all nodes, kept current by lists of what changed, shared by every
//! host's look at its node.
//!
//! Ironic has no watch; bmo polls. Rather than one `GET /v1/nodes/{id}` per host and
//! look, every look is answered from one view of all nodes:
//! - a full list (`GET /v1/nodes?fields=…`, paged) fills it, and is taken again once
//!   it is [`FULL_MAX_AGE`] old (longer when listing takes long), so that every change
//!   (power, maintenance, errors, nodes gone) shows within seconds;
//! - in between, a list of the nodes whose provision state changed since the newest
//!   change already seen (`sort_key=provision_updated_at`, newest first, paged only
//!   while the changes are newer) brings the view up to date every
//!   [`CHANGES_MAX_AGE`]. It costs Ironic what the nodes that moved cost, not what
//!   all nodes do, so a node finishing a step is seen within about half a second at
//!   N = 1000 as at N = 10.
//!
//! A node bmo wrote to after the list that showed it was taken is not answered from
//! it: the look waits for a list taken after the write (shared with every other
//! look) and, when that list does not show the node, reads it on its own.
//!
//! The same view watches hosts at rest: [`NodeList::states`] gives a digest of what
//! bmo acts on in each node ([`state_digest`]), which the host controller compares
//! with what each host's last reconcile saw.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::time::{Duration, Instant};

use k8s_openapi::jiff::{SignedDuration, Timestamp};

use crate::ironic::{IronicClient, IronicError, Node};

/// How old the full list may get (at least): a change that is not a provision state's
/// (power, maintenance, an error) shows within this.
const FULL_MAX_AGE: Duration = Duration::from_secs(1);

/// How old the view of provision states may get (at least) when a host looks: about
/// the time Ironic takes for its quickest steps.
pub const CHANGES_MAX_AGE: Duration = Duration::from_millis(500);

/// With many nodes a full list costs Ironic (one process, the bottleneck) real time:
/// it is taken at most once per this many times as long as the last one took, so
/// full lists keep to about a tenth of Ironic's time however many nodes there are.
const FULL_LIST_TIME_FACTOR: u32 = 10;

/// The same for lists of changes, which cost what the nodes that moved cost.
const CHANGES_LIST_TIME_FACTOR: u32 = 4;

/// The oldest either list may get however long listing takes.
const MAX_AGE_CAP: Duration = Duration::from_secs(10);

/// How far before the newest change already seen a list of changes reaches back.
/// Ironic stamps a change before its transaction commits, so a change stamped
/// earlier than one a list showed can commit after that list.
const CHANGES_OVERLAP: SignedDuration = SignedDuration::from_secs(2);

/// Up to this many nodes, a look at a node bmo wrote to is answered from a new full
/// list rather than a list of changes: at N = 10 a list costs Ironic about what one
/// node's read does, and it also shows writes that change no provision state.
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

/// When a list was asked for, and how long it took.
#[derive(Debug, Clone, Copy)]
struct Taken {
    at: Instant,
    took: Duration,
}

impl Taken {
    /// Whether a list taken like this one is due again: it is at least `floor` old
    /// and `factor` times what it took (up to [`MAX_AGE_CAP`]), or no later than
    /// `after`.
    fn due(&self, floor: Duration, factor: u32, after: Option<Instant>) -> bool {
        let max_age = (self.took * factor).clamp(floor, MAX_AGE_CAP);
        self.at.elapsed() >= max_age || after.is_some_and(|after| self.at <= after)
    }
}

/// A node as a list showed it.
#[derive(Debug)]
struct Listed {
    node: Node,
    /// When that list was asked for.
    as_of: Instant,
}

/// What a look finds of one node.
enum Found<'a> {
    Node(&'a Node),
    /// bmo wrote to it (at this instant) after the list that shows it was taken.
    Written(Instant),
    /// In no list.
    Missing,
}

/// Every node, as the latest full list and the lists of changes since show it.
#[derive(Debug, Default)]
struct View {
    by_uuid: HashMap<String, Listed>,
    uuid_by_name: HashMap<String, String>,
    full: Option<Taken>,
    /// The latest list of either kind.
    latest: Option<Taken>,
    /// The newest `provision_updated_at` a list showed.
    newest_change: Option<Timestamp>,
}

impl View {
    fn lookup(&self, client: &IronicClient, id: Option<&str>, name: &str) -> Found<'_> {
        let uuid = id
            .filter(|id| self.by_uuid.contains_key(*id))
            .or_else(|| self.uuid_by_name.get(name).map(String::as_str));
        let Some(listed) = uuid.and_then(|uuid| self.by_uuid.get(uuid)) else {
            return Found::Missing;
        };
        let node = &listed.node;
        let last_write = [Some(node.uuid.as_str()), node.name.as_deref()]
            .into_iter()
            .flatten()
            .filter_map(|ident| client.last_write(ident))
            .max();
        match last_write {
            Some(at) if at >= listed.as_of => Found::Written(at),
            _ => Found::Node(node),
        }
    }

    /// Takes a full list when the last is due, else a list of changes when the
    /// latest list is; `after` (a write's instant) makes the one a look at the
    /// written node needs due: full with few nodes, changes otherwise.
    async fn refresh(
        &mut self,
        client: &IronicClient,
        after: Option<Instant>,
    ) -> Result<(), IronicError> {
        let small = self.by_uuid.len() <= SMALL_LIST;
        let full_due = self.full.is_none_or(|full| {
            full.due(FULL_MAX_AGE, FULL_LIST_TIME_FACTOR, after.filter(|_| small))
        });
        if full_due {
            return self.take_full(client).await;
        }
        if self
            .latest
            .is_none_or(|latest| latest.due(CHANGES_MAX_AGE, CHANGES_LIST_TIME_FACTOR, after))
        {
            return self.take_changes(client).await;
        }
        Ok(())
    }

    async fn take_full(&mut self, client: &IronicClient) -> Result<(), IronicError> {
        let at = Instant::now();
        let nodes = client.list_node_fields(FIELDS).await?;
        self.by_uuid.clear();
        self.uuid_by_name.clear();
        self.newest_change = None;
        self.add(nodes, at);
        let taken = Taken {
            at,
            took: at.elapsed(),
        };
        self.full = Some(taken);
        self.latest = Some(taken);
        Ok(())
    }

    async fn take_changes(&mut self, client: &IronicClient) -> Result<(), IronicError> {
        let at = Instant::now();
        let since = self
            .newest_change
            .and_then(|newest| newest.checked_sub(CHANGES_OVERLAP).ok());
        let nodes = client
            .list_nodes_by_provision_change(FIELDS, |node| {
                // A node whose provision state never changed comes last (no
                // stamp): it is in the full list as it is.
                changed_at(node).is_some_and(|changed| since.is_none_or(|since| changed >= since))
            })
            .await?;
        self.add(nodes, at);
        self.latest = Some(Taken {
            at,
            took: at.elapsed(),
        });
        Ok(())
    }

    /// Puts `nodes`, listed by a list asked for at `as_of`, into the view.
    fn add(&mut self, nodes: Vec<Node>, as_of: Instant) {
        for node in nodes {
            if let Some(changed) = changed_at(&node) {
                self.newest_change = self.newest_change.max(Some(changed));
            }
            if let Some(name) = &node.name {
                self.uuid_by_name.insert(name.clone(), node.uuid.clone());
            }
            self.by_uuid
                .insert(node.uuid.clone(), Listed { node, as_of });
        }
    }
}

/// When the node's provision state last changed, by Ironic's clock.
fn changed_at(node: &Node) -> Option<Timestamp> {
    node.provision_updated_at.as_deref()?.parse().ok()
}

/// The shared view of all nodes.
#[derive(Debug, Default)]
pub struct NodeList {
    /// Looks that arrive while a list is under way wait for it and share it.
    view: tokio::sync::Mutex<View>,
}

impl NodeList {
    /// The node with UUID `id` (else named `name`) as the view shows it, brought up
    /// to date first; `None` when no list holds it, or bmo wrote to it since the
    /// list that shows it and a list taken after the write does not show it.
    pub async fn node(
        &self,
        client: &IronicClient,
        id: Option<&str>,
        name: &str,
    ) -> Result<Option<Node>, IronicError> {
        let mut view = self.view.lock().await;
        view.refresh(client, None).await?;
        let node = match view.lookup(client, id, name) {
            Found::Node(node) => Some(node.clone()),
            Found::Missing => None,
            Found::Written(at) => {
                view.refresh(client, Some(at)).await?;
                match view.lookup(client, id, name) {
                    Found::Node(node) => Some(node.clone()),
                    Found::Written(_) | Found::Missing => None,
                }
            }
        };
        Ok(node)
    }

    /// [`state_digest`] of every node, by UUID, from a full list no older than
    /// [`FULL_MAX_AGE`] (so a node gone from Ironic is gone from it too).
    pub async fn states(&self, client: &IronicClient) -> Result<HashMap<String, u64>, IronicError> {
        let mut view = self.view.lock().await;
        if view
            .full
            .is_none_or(|full| full.at.elapsed() >= FULL_MAX_AGE)
        {
            view.take_full(client).await?;
        }
        Ok(view
            .by_uuid
            .iter()
            .map(|(uuid, listed)| (uuid.clone(), state_digest(&listed.node)))
            .collect())
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
