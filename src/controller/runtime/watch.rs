//! Watching the API server: which namespaces, the backoff of a failed watch, its
//! log line, a watch kept in a cache, and how a controller stops at shutdown.

use std::fmt::Debug;
use std::time::Duration;

use futures::{FutureExt, Stream, TryStreamExt};
use kube::core::NamespaceResourceScope;
use kube::runtime::utils::Backoff;
use kube::runtime::{WatchStreamExt, reflector, watcher};
use kube::{Api, Resource};
use serde::de::DeserializeOwned;

use super::store::managed_fields;

/// The objects of `namespace` (WATCH_NAMESPACE), or of every namespace.
pub fn api_in<K>(client: &kube::Client, namespace: Option<&str>) -> Api<K>
where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope>,
{
    match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

/// A watch of `api`'s objects (those `config` selects) kept in the returned cache,
/// without their managed fields: its events, once cached. A failed watch is logged
/// as one of `kind` ([`watch_failed`]) and tried again on [`WatchBackoff`].
pub fn cached<K>(
    api: Api<K>,
    config: watcher::Config,
    kind: &'static str,
) -> (
    reflector::Store<K>,
    impl Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + use<K>,
)
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    let (cache, writer) = reflector::store();
    let events = watcher(api, config)
        .backoff(WatchBackoff::default())
        .modify(managed_fields::trim)
        .reflect(writer)
        .inspect_err(move |e| watch_failed(kind, e));
    (cache, events)
}

/// How the controllers stop: `reconciling` runs until it ends, or until `shutdown`
/// resolves and then reconciles in flight get `grace` to finish. Before `listed` had
/// its first list (the CRD not installed yet, the API server away or refusing) none
/// can be in flight and the controller would wait for that list forever, so it stops
/// at once. Says which way it stopped.
pub async fn run_until_shutdown<K>(
    reconciling: impl std::future::Future<Output = ()>,
    shutdown: impl std::future::Future<Output = ()>,
    listed: &reflector::Store<K>,
    grace: Duration,
) -> Stopped
where
    K: kube::Resource + Clone + 'static,
    K::DynamicType: std::hash::Hash + Eq + Clone,
{
    let grace = async {
        shutdown.await;
        // Not ready, or never to be: the shared watch dropped the cache's writer
        // at shutdown before its first list.
        if !matches!(listed.wait_until_ready().now_or_never(), Some(Ok(()))) {
            return Stopped::BeforeFirstList;
        }
        tokio::time::sleep(grace).await;
        Stopped::GraceRanOut
    };
    // The grace first: a controller stopped before its first list also ends its
    // reconciling at shutdown (the shared watch drops the cache's writer, which
    // fails the readiness gate), and that must not count as finished.
    tokio::select! {
        biased;
        stopped = grace => stopped,
        () = reconciling => Stopped::Finished,
    }
}

/// How [`run_until_shutdown`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stopped {
    /// Every reconcile in flight finished.
    Finished,
    /// Before the first list: nothing was in flight.
    BeforeFirstList,
    /// Reconciles were still in flight when the grace ran out.
    GraceRanOut,
}

/// The first pause before a failed watch (or list) of the API server is tried again.
const WATCH_RETRY_MIN: Duration = Duration::from_millis(500);
/// The longest such pause: the watches come back within this long of the API
/// server's return. (kube-runtime's default grows to 30 s plus up to as much jitter,
/// so bmo could stay blind for up to a minute after the API server came back.)
pub const WATCH_RETRY_MAX: Duration = Duration::from_secs(4);

/// Pauses between attempts to watch again: doubling from [`WATCH_RETRY_MIN`] up to
/// [`WATCH_RETRY_MAX`], back to the start after a watch event arrives.
#[derive(Debug, Clone)]
pub struct WatchBackoff {
    next: Duration,
}

impl Default for WatchBackoff {
    fn default() -> Self {
        Self {
            next: WATCH_RETRY_MIN,
        }
    }
}

impl Iterator for WatchBackoff {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        let pause = self.next;
        self.next = (pause * 2).min(WATCH_RETRY_MAX);
        Some(pause)
    }
}

impl Backoff for WatchBackoff {
    fn reset(&mut self) {
        self.next = WATCH_RETRY_MIN;
    }
}

/// Logs that the watch (or list) of `kind` (plural: "Secrets") failed: the API server
/// is away, or refuses; [`WatchBackoff`] tries it again within [`WATCH_RETRY_MAX`].
pub fn watch_failed(kind: &str, error: &watcher::Error) {
    tracing::warn!(
        error = %crate::telemetry::with_causes(error),
        "watch of {kind} failed; trying again in at most {} s",
        WATCH_RETRY_MAX.as_secs()
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn watch_retries_double_to_a_few_seconds_and_start_over_after_an_event() {
        let mut backoff = WatchBackoff::default();
        let secs: Vec<f64> = backoff.by_ref().take(6).map(|d| d.as_secs_f64()).collect();
        assert_eq!(secs, [0.5, 1.0, 2.0, 4.0, 4.0, 4.0]);
        backoff.reset();
        assert_eq!(backoff.next(), Some(WATCH_RETRY_MIN));
    }
}
