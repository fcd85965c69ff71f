//! The kube-runtime side of the BMCEventSubscription controller: what wakes a
//! subscription.
//!
//! A subscription wakes on its generation (creation, deletion), annotations and
//! finalizers (not on bmo's status writes, as upstream), and when the host it names
//! appears, is replaced, gets its node (`status.provisioning.ID`) or changes state.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Arc;

use futures::{FutureExt, StreamExt};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::{Predicate, WatchStreamExt, predicates, watcher};
use kube::{Api, ResourceExt};
use tracing::Instrument;

use super::{
    KubeSubscriptionStore, PROVISIONER_RETRY, SubscriptionContext, SubscriptionError,
    SubscriptionStore,
};
use crate::api::{BMCEventSubscription, BareMetalHost};
use crate::controller::runtime::store::StoreError;
use crate::controller::runtime::watch::WatchBackoff;
use crate::provisioner::EventSubscriber;

/// How long reconciles in flight may take to finish after the shutdown signal.
const SHUTDOWN_GRACE: std::time::Duration = std::time::Duration::from_secs(3);
/// Pause after a lost write race.
const CONFLICT_RETRY: std::time::Duration = std::time::Duration::from_secs(1);

/// What of a host matters here: which object it is, its node, and its state (a BMC
/// that refused while the host was registering may accept once it is registered).
fn host_node(host: &BareMetalHost) -> Option<u64> {
    let mut hasher = DefaultHasher::new();
    host.metadata.uid.hash(&mut hasher);
    host.status
        .as_ref()
        .map(|s| (s.provisioning.id.as_str(), s.provisioning.state))
        .hash(&mut hasher);
    Some(hasher.finish())
}

fn subscription_change_predicate() -> impl Predicate<BMCEventSubscription> + Send + Sync + 'static {
    predicates::generation
        .combine(predicates::annotations)
        .combine(predicates::finalizers)
}

/// Runs the BMCEventSubscription controller until `shutdown` resolves.
pub async fn run<P: EventSubscriber + 'static>(
    ctx: Arc<SubscriptionContext<P, KubeSubscriptionStore>>,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let client = ctx.store.client().clone();
    let (subscriptions, hosts): (Api<BMCEventSubscription>, Api<BareMetalHost>) =
        match &ctx.namespace {
            Some(ns) => (
                Api::namespaced(client.clone(), ns),
                Api::namespaced(client.clone(), ns),
            ),
            None => (Api::all(client.clone()), Api::all(client)),
        };
    let (reader, writer) = reflector::store();
    let changes = watcher(subscriptions, watcher::Config::default())
        .backoff(WatchBackoff::default())
        .reflect(writer)
        .applied_objects()
        .predicate_filter(subscription_change_predicate(), Default::default());
    let host_changes = watcher(hosts, watcher::Config::default())
        .backoff(WatchBackoff::default())
        .applied_objects()
        .predicate_filter(host_node, Default::default());
    let by_host = reader.clone();
    let listed = reader.clone();
    let shutdown = shutdown.shared();
    let reconciling = Controller::for_stream(changes, reader)
        .watches_stream(host_changes, move |host| {
            let namespace = host.namespace();
            let name = host.name_any();
            by_host
                .state()
                .iter()
                .filter(|s| {
                    s.namespace() == namespace && s.spec.host_name.as_deref() == Some(&name)
                })
                .map(|s| ObjectRef::from_obj(s.as_ref()))
                .collect::<Vec<_>>()
        })
        .trigger_backoff(WatchBackoff::default())
        .graceful_shutdown_on(shutdown.clone())
        .run(reconcile, error_policy, ctx)
        .for_each(|result| async move {
            if let Err(e) = result {
                tracing::debug!(error = %e, "BMCEventSubscription reconcile did not finish");
            }
        });
    crate::controller::runtime::watch::run_until_shutdown(
        reconciling,
        shutdown,
        &listed,
        SHUTDOWN_GRACE,
    )
    .await;
}

async fn reconcile<P: EventSubscriber, S: SubscriptionStore>(
    subscription: Arc<BMCEventSubscription>,
    ctx: Arc<SubscriptionContext<P, S>>,
) -> Result<Action, SubscriptionError> {
    let span = tracing::info_span!(
        "bmceventsubscription",
        namespace = %subscription.namespace().unwrap_or_default(),
        name = %subscription.name_any()
    );
    super::reconcile(&subscription, &ctx)
        .instrument(span)
        .await
        .map(Action::from)
}

fn error_policy<P: EventSubscriber, S: SubscriptionStore>(
    subscription: Arc<BMCEventSubscription>,
    error: &SubscriptionError,
    _ctx: Arc<SubscriptionContext<P, S>>,
) -> Action {
    if let SubscriptionError::Store {
        source: StoreError::Conflict,
        ..
    } = error
    {
        return Action::requeue(CONFLICT_RETRY);
    }
    tracing::warn!(
        subscription = %subscription.namespace().unwrap_or_default(),
        name = %subscription.name_any(),
        %error,
        "BMCEventSubscription reconcile failed; retrying"
    );
    Action::requeue(PROVISIONER_RETRY)
}
