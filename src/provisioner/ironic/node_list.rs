//! One list of all nodes, kept current by lists of what changed, shared by every
//! host's look at its node.
//!
//! Ironic has no watch; bmo polls. Rather than one `GET /v1/nodes/{id}` per host and
//! look, every look is answered from one view of all nodes:
//! - a full list (`GET /v1/nodes?fields=…`, paged) fills it, and is taken again once
//!   it is [`FULL_MAX_AGE`] old (longer when listing takes long), so that every change
//!   (power, maintenance, errors, nodes gone) shows within seconds;
//! - in between, a list of the nodes whose provision state changed since the view
//!   last caught up (`sort_key=provision_updated_at`, newest first, paged only while
//!   the changes are newer than the newest change listed before, less what that
//!   list took and [`CHANGES_OVERLAP`]) brings the view up to date every
//!   [`CHANGES_MAX_AGE`] (or four times what the last list of changes took, if
//!   longer). It costs Ironic what the nodes that moved cost, not what all nodes
//!   do, so a node finishing a step is seen within about half a second at N = 1000
//!   as at N = 10.
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

/// How far before [`View::changes_seen_until`] a list of changes reaches back.
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
    /// A list asked for at `at` and in hand now.
    fn since(at: Instant) -> Self {
        Self {
            at,
            took: at.elapsed(),
        }
    }
}

/// Whether a list is due again when the view it keeps up to date was asked for at
/// `at`: at least `floor` old and `factor` times what the last list of its kind took
/// (`took`, up to [`MAX_AGE_CAP`]), or asked for no later than `after`.
fn due(at: Instant, took: Duration, floor: Duration, factor: u32, after: Option<Instant>) -> bool {
    let max_age = (took * factor).clamp(floor, MAX_AGE_CAP);
    at.elapsed() >= max_age || after.is_some_and(|after| at <= after)
}

/// Which list a look needs first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ListKind {
    Full,
    Changes,
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
    /// The latest list of changes: its time paces the next one. A full list's time
    /// does not, as that would hold lists of changes back to the full list's pace.
    changes: Option<Taken>,
    /// When the latest list of either kind was asked for.
    fresh_at: Option<Instant>,
    /// Every change Ironic stamped before this (less [`CHANGES_OVERLAP`]) is in the
    /// view, so a list of changes reaches back to it.
    changes_seen_until: Option<Timestamp>,
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

    /// Takes the list [`View::next_list`] says is due, if any.
    async fn refresh(
        &mut self,
        client: &IronicClient,
        after: Option<Instant>,
    ) -> Result<(), IronicError> {
        match self.next_list(after) {
            Some(ListKind::Full) => self.take_full(client).await,
            Some(ListKind::Changes) => self.take_changes(client).await,
            None => Ok(()),
        }
    }

    /// A full list when the last is due, else a list of changes when the view is;
    /// `after` (a write's instant) makes the one a look at the written node needs
    /// due: full with few nodes, changes otherwise.
    fn next_list(&self, after: Option<Instant>) -> Option<ListKind> {
        let small = self.by_uuid.len() <= SMALL_LIST;
        let full_due = self.full.is_none_or(|full| {
            due(
                full.at,
                full.took,
                FULL_MAX_AGE,
                FULL_LIST_TIME_FACTOR,
                after.filter(|_| small),
            )
        });
        if full_due {
            return Some(ListKind::Full);
        }
        let changes_took = self.changes.map_or(Duration::ZERO, |changes| changes.took);
        let changes_due = self.fresh_at.is_none_or(|at| {
            due(
                at,
                changes_took,
                CHANGES_MAX_AGE,
                CHANGES_LIST_TIME_FACTOR,
                after,
            )
        });
        changes_due.then_some(ListKind::Changes)
    }

    async fn take_full(&mut self, client: &IronicClient) -> Result<(), IronicError> {
        let at = Instant::now();
        let nodes = client.list_node_fields(FIELDS).await?;
        self.by_uuid.clear();
        self.uuid_by_name.clear();
        // Counted afresh from what Ironic holds now, so a stamp once seen ahead of
        // Ironic's clock (a clock stepped back, conductors whose clocks disagree)
        // cannot hide changes for longer than until the next full list.
        self.changes_seen_until = None;
        self.add(nodes, at);
        self.full = Some(Taken::since(at));
        self.fresh_at = Some(at);
        Ok(())
    }

    async fn take_changes(&mut self, client: &IronicClient) -> Result<(), IronicError> {
        let at = Instant::now();
        let since = self
            .changes_seen_until
            .and_then(|seen| seen.checked_sub(CHANGES_OVERLAP).ok());
        let nodes = client
            .list_nodes_by_provision_change(FIELDS, |node| {
                // A node whose provision state never changed comes last (no
                // stamp): it is in the full list as it is.
                changed_at(node).is_some_and(|changed| since.is_none_or(|since| changed >= since))
            })
            .await?;
        self.add(nodes, at);
        self.changes = Some(Taken::since(at));
        self.fresh_at = Some(at);
        Ok(())
    }

    /// Puts `nodes`, listed by a list asked for at `as_of`, into the view.
    ///
    /// A list in pages shows each page as it was when that page was read: a node
    /// that changed after its page was read, but before a later page was, is in the
    /// view as it was. Its change was stamped after the list began, and the newest
    /// stamp listed is at most the list's whole time after that, so
    /// [`View::changes_seen_until`] moves to the newest stamp less that time.
    fn add(&mut self, nodes: Vec<Node>, as_of: Instant) {
        let mut newest = None;
        for node in nodes {
            newest = newest.max(changed_at(&node));
            if let Some(name) = &node.name {
                self.uuid_by_name.insert(name.clone(), node.uuid.clone());
            }
            self.by_uuid
                .insert(node.uuid.clone(), Listed { node, as_of });
        }
        let took = SignedDuration::try_from(as_of.elapsed()).unwrap_or(SignedDuration::MAX);
        let seen_until = newest.and_then(|newest| newest.checked_sub(took).ok());
        self.changes_seen_until = self.changes_seen_until.max(seen_until);
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
    use serde_json::json;

    use super::*;

    fn node(json: serde_json::Value) -> Node {
        serde_json::from_value(json).unwrap()
    }

    fn taken(ago: Duration, took: Duration) -> Option<Taken> {
        Some(Taken {
            at: Instant::now() - ago,
            took,
        })
    }

    #[test]
    fn a_slow_full_list_does_not_hold_back_the_lists_of_changes_after_it() {
        // At N = 1000 a full list takes about 0.4 s; the list of changes after it is
        // paced by what lists of changes take, not by four times that.
        let view = View {
            full: taken(Duration::from_millis(600), Duration::from_millis(400)),
            changes: taken(Duration::from_secs(2), Duration::from_millis(20)),
            fresh_at: Some(Instant::now() - Duration::from_millis(600)),
            ..View::default()
        };
        assert_eq!(view.next_list(None), Some(ListKind::Changes));
        // Just listed (a moment ahead, so that a slow test machine cannot make it
        // due before the next line asks).
        let fresh = View {
            fresh_at: Some(Instant::now() + Duration::from_secs(60)),
            ..view
        };
        assert_eq!(fresh.next_list(None), None);
        // A look at a node written since: a full list while there are few nodes,
        // a list of changes when there are many.
        let written = Instant::now() + Duration::from_secs(120);
        assert_eq!(fresh.next_list(Some(written)), Some(ListKind::Full));
        let mut many = fresh;
        let nodes = (0..=SMALL_LIST)
            .map(|i| node(json!({"uuid": format!("u{i}"), "driver": "fake-hardware"})))
            .collect();
        many.add(nodes, Instant::now());
        assert_eq!(many.next_list(Some(written)), Some(ListKind::Changes));
    }

    #[test]
    fn a_list_in_pages_reaches_back_by_what_it_took() {
        // A node on the first page may change after that page is read and before
        // the last page is: the next list of changes must reach back to before the
        // list began, not only to the newest change on its last page.
        let mut view = View::default();
        let began = Instant::now() - Duration::from_secs(3);
        view.add(
            vec![node(json!({
                "uuid": "u1", "driver": "fake-hardware", "provision_state": "active",
                "provision_updated_at": "2026-12-03T22:00:10Z",
            }))],
            began,
        );
        let newest: Timestamp = "2026-12-03T22:00:10Z".parse().unwrap();
        let seen_until = view.changes_seen_until.unwrap();
        assert!(seen_until <= newest.checked_sub(SignedDuration::from_secs(3)).unwrap());
        assert!(seen_until > newest.checked_sub(SignedDuration::from_secs(60)).unwrap());
        // An older list does not move it back.
        view.add(
            vec![node(json!({
                "uuid": "u2", "driver": "fake-hardware", "provision_state": "active",
                "provision_updated_at": "2026-12-03T21:00:00Z",
            }))],
            Instant::now(),
        );
        assert_eq!(view.changes_seen_until, Some(seen_until));
    }

    #[test]
    fn the_state_digest_moves_with_power_and_state_but_not_with_timestamps_or_locks() {
        let base = json!({
            "uuid": "u1", "driver": "fake-hardware", "provision_state": "active",
            "power_state": "power on", "maintenance": false,
        });
        let digest = |patch: &serde_json::Value| {
            let mut json = base.clone();
            json.as_object_mut()
                .unwrap()
                .extend(patch.as_object().unwrap().clone());
            state_digest(&node(json))
        };
        let resting = digest(&json!({}));
        for unseen in [
            json!({"reservation": "conductor-1"}),
            json!({"provision_updated_at": "2026-12-03T22:00:00Z"}),
        ] {
            assert_eq!(digest(&unseen), resting, "{unseen}");
        }
        for seen in [
            json!({"power_state": "power off"}),
            json!({"maintenance": true}),
            json!({"last_error": "BMC unreachable"}),
            json!({"provision_state": "deploy failed"}),
            json!({"driver_info": {"redfish_address": "x"}}),
        ] {
            assert_ne!(digest(&seen), resting, "{seen}");
        }
    }
}
