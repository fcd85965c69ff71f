//! The watch side of the BareMetalSwitch controller: which namespaces to write again.
//!
//! Not a kube-runtime `Controller`: its unit is a namespace, and a deleted switch must
//! trigger a write too (its section leaves the file), which a controller keyed by the
//! switch does not see. A namespace whose last switch went while bmo was stopped keeps
//! its last file until a switch there changes.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use futures::stream::BoxStream;
use futures::{StreamExt, stream};
use k8s_openapi::api::core::v1::Secret;
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::store::Writer;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, ResourceExt};
use tokio::time::Instant;
use tracing::Instrument;

use super::{KubeSwitchStore, MISSING_SECRET_RETRY, SwitchTargets, credentials_ref};
use crate::api::BareMetalSwitch;
use crate::controller::runtime::watch::{WatchBackoff, api_in};

/// Pause before a namespace whose write failed is written again.
const ERROR_RETRY: Duration = Duration::from_secs(5);

/// Runs the BareMetalSwitch controller until `shutdown` resolves. With `namespace`
/// (WATCH_NAMESPACE) only that namespace's switches are configured.
pub async fn run(
    store: KubeSwitchStore,
    targets: SwitchTargets,
    namespace: Option<String>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) {
    let (client, namespace) = (store.client(), namespace.as_deref());
    let (reader, writer) = reflector::store();
    let mut changes = changes(api_in(client, namespace), api_in(client, namespace), writer);
    let mut shutdown = std::pin::pin!(shutdown);
    // Namespaces to write again, and when.
    let mut due: BTreeMap<String, Instant> = BTreeMap::new();
    loop {
        let next = due.values().min().copied();
        let sleep = async {
            match next {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = &mut shutdown => return,
            change = changes.next() => match change {
                Some(change) => {
                    for ns in affected(&reader, change) {
                        due.insert(ns, Instant::now());
                    }
                }
                None => return,
            },
            () = sleep => {}
        }
        write_due(&store, &targets, &reader, &mut due).await;
    }
}

/// What may change a namespace's configuration: its switches, and Secrets.
fn changes(
    switches: Api<BareMetalSwitch>,
    secrets: Api<PartialObjectMeta<Secret>>,
    writer: Writer<BareMetalSwitch>,
) -> BoxStream<'static, Change> {
    // Raw events, not touched objects: the reflector fills its store only at the end
    // of a (re)list, so the whole list is one change, seen once the store holds it.
    let switch_changes = watcher(switches, watcher::Config::default())
        .backoff(WatchBackoff::default())
        .reflect(writer)
        .filter_map(|event| async move {
            match event.ok()? {
                watcher::Event::Apply(s) | watcher::Event::Delete(s) => {
                    Some(Change::Namespace(s.namespace()))
                }
                watcher::Event::InitDone => Some(Change::Listed),
                watcher::Event::Init | watcher::Event::InitApply(_) => None,
            }
        });
    let secret_changes = watcher(secrets, watcher::Config::default())
        .backoff(WatchBackoff::default())
        .touched_objects()
        .filter_map(|event| async move {
            event
                .ok()
                .map(|s| Change::Secret(s.namespace().unwrap_or_default(), s.name_any()))
        });
    stream::select(switch_changes, secret_changes).boxed()
}

/// Writes the configuration of the namespaces `due` by now; one whose write failed,
/// or that misses a Secret, is due again later.
async fn write_due(
    store: &KubeSwitchStore,
    targets: &SwitchTargets,
    reader: &Store<BareMetalSwitch>,
    due: &mut BTreeMap<String, Instant>,
) {
    let now = Instant::now();
    let ready: BTreeSet<String> = due
        .iter()
        .filter(|(_, at)| **at <= now)
        .map(|(ns, _)| ns.clone())
        .collect();
    for ns in ready {
        due.remove(&ns);
        let state = reader.state();
        let members: Vec<&BareMetalSwitch> = state
            .iter()
            .map(AsRef::as_ref)
            .filter(|s| s.namespace().as_deref() == Some(ns.as_str()))
            .collect();
        let span = tracing::info_span!("switches", namespace = %ns);
        match super::reconcile_namespace(store, targets, &ns, &members)
            .instrument(span)
            .await
        {
            Ok(true) => {
                due.insert(ns, Instant::now() + MISSING_SECRET_RETRY);
            }
            Ok(false) => {}
            Err(e) => {
                tracing::warn!(namespace = %ns, error = %e, "cannot write the switch configuration; retrying");
                due.insert(ns, Instant::now() + ERROR_RETRY);
            }
        }
    }
}

enum Change {
    /// A switch of this namespace changed, appeared or went.
    Namespace(Option<String>),
    /// The switches were listed (at start, and after a watch was lost).
    Listed,
    /// Secret `namespace/name` changed, appeared or went.
    Secret(String, String),
}

/// The namespaces whose configuration `change` affects.
fn affected(reader: &Store<BareMetalSwitch>, change: Change) -> Vec<String> {
    match change {
        Change::Namespace(ns) => ns.into_iter().collect(),
        Change::Listed => reader
            .state()
            .iter()
            .filter_map(|s| s.namespace())
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect(),
        Change::Secret(ns, name) => reader
            .state()
            .iter()
            .filter(|s| credentials_ref(s) == Some((ns.clone(), name.clone())))
            .filter_map(|s| s.namespace())
            .collect(),
    }
}
