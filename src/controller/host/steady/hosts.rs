//! The hosts at rest and what their last reconcile saw of their node.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;

use crate::api::BareMetalHost;

/// What a host's last reconcile saw of its node.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Seen {
    node: String,
    state: u64,
}

/// The hosts at rest, by `(namespace, name)`.
#[derive(Debug, Default)]
pub struct SteadyHosts {
    watched: Mutex<HashMap<(String, String), Seen>>,
}

fn key(host: &BareMetalHost) -> (String, String) {
    (host.namespace().unwrap_or_default(), host.name_any())
}

impl SteadyHosts {
    /// `host` rests with its node `node` in state `state`.
    pub fn watch(&self, host: &BareMetalHost, node: String, state: u64) {
        self.lock().insert(key(host), Seen { node, state });
    }

    /// `host` is being reconciled: it is watched again only if that reconcile ends
    /// at rest.
    pub fn forget(&self, host: &BareMetalHost) {
        self.lock().remove(&key(host));
    }

    pub fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }

    /// The hosts whose node is not in `states` or is in another state than their
    /// last reconcile saw; they are no longer watched (their reconcile decides).
    pub fn changed(&self, states: &HashMap<String, u64>) -> Vec<ObjectRef<BareMetalHost>> {
        let mut watched = self.lock();
        let moved: Vec<(String, String)> = watched
            .iter()
            .filter(|(_, seen)| states.get(&seen.node) != Some(&seen.state))
            .map(|(key, _)| key.clone())
            .collect();
        moved
            .into_iter()
            .map(|key| {
                watched.remove(&key);
                ObjectRef::new(&key.1).within(&key.0)
            })
            .collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), Seen>> {
        self.watched.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(name: &str) -> BareMetalHost {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "metal3.io/v1alpha1", "kind": "BareMetalHost",
            "metadata": {"name": name, "namespace": "ns"}, "spec": {"online": false},
        }))
        .unwrap()
    }

    #[test]
    fn wakes_hosts_whose_node_changed_or_vanished_and_only_once() {
        let steady = SteadyHosts::default();
        steady.watch(&host("same"), "n1".into(), 1);
        steady.watch(&host("moved"), "n2".into(), 2);
        steady.watch(&host("gone"), "n3".into(), 3);
        let states = HashMap::from([("n1".to_owned(), 1), ("n2".to_owned(), 20)]);
        let mut woken: Vec<String> = steady
            .changed(&states)
            .iter()
            .map(|r| r.name.clone())
            .collect();
        woken.sort();
        assert_eq!(woken, ["gone", "moved"]);
        assert!(steady.changed(&states).is_empty());
        steady.forget(&host("same"));
        assert!(steady.is_empty());
    }
}
