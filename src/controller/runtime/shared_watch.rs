//! One watch of a kind for every controller that reads it: one list, one watch
//! connection and one cached copy of each object, however many controllers
//! subscribe. The host, firmware, DataImage and HostNetworkAttachment controllers
//! all read BareMetalHosts; with a watch each, a thousand hosts were cached three
//! times and listed four times.
//!
//! Each subscriber gets its own unbounded queue of the objects the watch applied, so
//! a controller that is slow to take its wakes never holds the others' back (a
//! bounded shared channel, as kube-runtime's `store_shared` has, would). What is
//! queued is the cached `Arc`, not a copy.

use std::collections::HashMap;
use std::sync::Arc;

use futures::{FutureExt, Stream, StreamExt};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{Predicate, WatchStreamExt, watcher};
use kube::{Api, Resource};
use serde::de::DeserializeOwned;
use tokio::sync::{mpsc, watch};

use super::store::managed_fields;
use super::watch::{WatchBackoff, api_in, watch_failed};
use crate::api::BareMetalHost;
use crate::api::firmware::{HostFirmwareComponents, HostFirmwareSettings};

/// A watch not yet started: subscribe first, then [`SharedWatch::run`] it.
pub struct SharedWatch<K: Resource<DynamicType = ()> + Clone + 'static> {
    api: Api<K>,
    /// Plural, for the log: "BareMetalHosts".
    kind: &'static str,
    /// Applied to each object before it is cached (dropping managed fields).
    trim: fn(&mut K),
    writer: reflector::store::Writer<K>,
    cache: Store<K>,
    subscribers: Vec<mpsc::UnboundedSender<Arc<K>>>,
    events: watch::Sender<u64>,
}

/// One controller's share of a [`SharedWatch`].
pub struct Subscription<K: Resource<DynamicType = ()> + Clone + 'static> {
    cache: Store<K>,
    applied: mpsc::UnboundedReceiver<Arc<K>>,
}

impl<K> SharedWatch<K>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync,
{
    pub fn new(api: Api<K>, kind: &'static str, trim: fn(&mut K)) -> Self {
        let (cache, writer) = reflector::store();
        Self {
            api,
            kind,
            trim,
            writer,
            cache,
            subscribers: Vec::new(),
            events: watch::Sender::new(0),
        }
    }

    /// Every object the watch applies from now on (and, at the end of each list,
    /// every object listed), as cached.
    pub fn subscribe(&mut self) -> Subscription<K> {
        let (sender, applied) = mpsc::unbounded_channel();
        self.subscribers.push(sender);
        Subscription {
            cache: self.cache.clone(),
            applied,
        }
    }

    /// The cache, whole.
    pub fn cache(&self) -> Store<K> {
        self.cache.clone()
    }

    /// A count of the watch events that reached the cache (deletions and whole lists
    /// included), for readers that rebuild something from it when it moves.
    pub fn events(&self) -> watch::Receiver<u64> {
        self.events.subscribe()
    }

    /// Watches until `shutdown` resolves; a failed watch is tried again within
    /// [`super::watch::WATCH_RETRY_MAX`].
    pub async fn run(self, shutdown: impl std::future::Future<Output = ()>) {
        let Self {
            api,
            kind,
            trim,
            writer,
            cache,
            mut subscribers,
            events,
        } = self;
        let mut changes = std::pin::pin!(
            watcher(api, watcher::Config::default())
                .backoff(WatchBackoff::default())
                .modify(trim)
                .reflect(writer)
        );
        let mut shutdown = std::pin::pin!(shutdown);
        loop {
            let event = tokio::select! {
                () = &mut shutdown => return,
                event = changes.next() => match event {
                    Some(event) => event,
                    None => return,
                },
            };
            let applied: Vec<Arc<K>> = match event {
                Ok(watcher::Event::Apply(object)) => cache
                    .get(&ObjectRef::from_obj(&object))
                    .into_iter()
                    .collect(),
                Ok(watcher::Event::InitDone) => cache.state(),
                Ok(watcher::Event::Delete(_)) => Vec::new(),
                Ok(watcher::Event::Init | watcher::Event::InitApply(_)) => continue,
                Err(e) => {
                    watch_failed(kind, &e);
                    continue;
                }
            };
            events.send_modify(|n| *n += 1);
            // A subscriber that has stopped is dropped from the list.
            subscribers.retain(|s| applied.iter().all(|o| s.send(o.clone()).is_ok()));
        }
    }
}

impl<K> Subscription<K>
where
    K: Resource<DynamicType = ()> + Clone + Send + Sync + 'static,
{
    /// The shared cache.
    pub fn cache(&self) -> Store<K> {
        self.cache.clone()
    }

    /// Every applied object.
    pub fn applied(self) -> impl Stream<Item = Arc<K>> + Send + 'static {
        futures::stream::unfold(self.applied, |mut applied| async {
            let object = applied.recv().await?;
            Some((object, applied))
        })
    }

    /// The applied objects whose `predicate` hash differs from the last one seen of
    /// the same object (by uid: one recreated under its old name counts as new), as
    /// kube-runtime's `predicate_filter` does for a watch of one's own. An object
    /// without a hash always passes.
    pub fn changed(
        self,
        predicate: impl Predicate<K> + Send + 'static,
    ) -> impl Stream<Item = Arc<K>> + Send + 'static {
        let cache = self.cache.clone();
        let mut seen: HashMap<String, u64> = HashMap::new();
        self.applied().filter(move |object| {
            let passes = match (predicate.hash_property(object), object.meta().uid.clone()) {
                (Some(hash), Some(uid)) => {
                    // Forget deleted objects once they outnumber the cached ones.
                    if seen.len() > 2 * cache.len() + 64 {
                        let live: std::collections::HashSet<String> = cache
                            .state()
                            .iter()
                            .filter_map(|o| o.meta().uid.clone())
                            .collect();
                        seen.retain(|uid, _| live.contains(uid));
                    }
                    seen.insert(uid, hash) != Some(hash)
                }
                _ => true,
            };
            std::future::ready(passes)
        })
    }
}

/// The watches bmo's host-facing controllers share: BareMetalHosts, and the
/// HostFirmwareSettings and HostFirmwareComponents that both the host controller
/// (their conditions ask a host to prepare) and the firmware controller read.
pub struct Watches {
    pub hosts: SharedWatch<BareMetalHost>,
    pub settings: SharedWatch<HostFirmwareSettings>,
    pub components: SharedWatch<HostFirmwareComponents>,
}

/// What the host and firmware controllers each take from [`Watches`].
pub struct Feeds {
    pub hosts: Subscription<BareMetalHost>,
    /// Moves with every host watch event.
    pub host_events: watch::Receiver<u64>,
    pub settings: Subscription<HostFirmwareSettings>,
    pub components: Subscription<HostFirmwareComponents>,
}

impl Watches {
    /// Watches of `namespace`, or of all namespaces.
    pub fn new(client: &kube::Client, namespace: Option<&str>) -> Self {
        Self {
            hosts: SharedWatch::new(
                api_in(client, namespace),
                "BareMetalHosts",
                managed_fields::trim,
            ),
            settings: SharedWatch::new(
                api_in(client, namespace),
                "HostFirmwareSettings",
                managed_fields::trim,
            ),
            components: SharedWatch::new(
                api_in(client, namespace),
                "HostFirmwareComponents",
                managed_fields::trim,
            ),
        }
    }

    /// A controller's share of all three.
    pub fn subscribe(&mut self) -> Feeds {
        Feeds {
            hosts: self.hosts.subscribe(),
            host_events: self.hosts.events(),
            settings: self.settings.subscribe(),
            components: self.components.subscribe(),
        }
    }

    /// Watches until `shutdown` resolves.
    pub async fn run(self, shutdown: impl std::future::Future<Output = ()> + Send + 'static) {
        let shutdown = shutdown.shared();
        futures::join!(
            self.hosts.run(shutdown.clone()),
            self.settings.run(shutdown.clone()),
            self.components.run(shutdown),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::FutureExt;
    use kube::runtime::predicates;

    fn host(uid: &str, generation: i64) -> Arc<BareMetalHost> {
        let host = serde_json::json!({
            "apiVersion": "metal3.io/v1alpha1",
            "kind": "BareMetalHost",
            "metadata": {"name": "a", "namespace": "ns", "uid": uid, "generation": generation},
            "spec": {"online": true},
        });
        Arc::new(serde_json::from_value(host).unwrap())
    }

    #[test]
    fn a_subscriber_sees_an_object_again_only_when_its_predicate_changed_or_it_was_made_anew() {
        let (cache, _writer) = reflector::store();
        let (sender, applied) = mpsc::unbounded_channel();
        let mut changed = Box::pin(Subscription { cache, applied }.changed(predicates::generation));
        for (object, passes) in [
            (host("u1", 1), true),
            (host("u1", 1), false),
            (host("u1", 2), true),
            (host("u2", 2), true),
        ] {
            let (uid, generation) = (object.metadata.uid.clone(), object.metadata.generation);
            sender.send(object).expect("the subscriber listens");
            let seen = changed.next().now_or_never().flatten();
            assert_eq!(seen.is_some(), passes, "{uid:?} generation {generation:?}");
        }
    }
}
