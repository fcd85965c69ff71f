//! The kube-runtime side of the BMCEventSubscription controller: what wakes a
//! subscription.
//!
//! A subscription wakes on its generation (creation, deletion), annotations and
//! finalizers (not on bmo's status writes, as upstream), and when the host it names
//! appears, is replaced, gets its node (`status.provisioning.ID`) or changes state.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Arc;
use std::time::Duration;

use kube::runtime::controller::Action;
use kube::runtime::{WatchStreamExt, watcher};

use super::{PROVISIONER_RETRY, SubscriptionContext, SubscriptionError};
use crate::api::{BMCEventSubscription, BareMetalHost};
use crate::controller::runtime::controller::{self as runtime, Reconciler};
use crate::controller::runtime::store::{KubeClient, ObjectStore};
use crate::controller::runtime::watch::{WatchBackoff, api_in};
use crate::provisioner::EventSubscriber;

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

/// Runs the BMCEventSubscription controller until `shutdown` resolves.
pub async fn run<P: EventSubscriber + 'static>(
    ctx: Arc<SubscriptionContext<P, KubeClient>>,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let (client, namespace) = (ctx.store.client(), ctx.namespace.as_deref());
    let subscriptions = api_in(client, namespace);
    let own = runtime::own_watch(
        subscriptions,
        |_| (),
        runtime::spec_annotations_finalizers(),
    );
    let host_changes = watcher(api_in(client, namespace), watcher::Config::default())
        .backoff(WatchBackoff::default())
        .applied_objects()
        .predicate_filter(host_node, Default::default());
    let controller =
        runtime::wake_naming(own, host_changes, |s: &BMCEventSubscription, _, host| {
            s.spec.host_name.as_deref() == Some(host)
        });
    runtime::run(controller, ctx, shutdown).await;
}

impl<P: EventSubscriber + 'static, S: ObjectStore + 'static> Reconciler
    for SubscriptionContext<P, S>
{
    type Object = BMCEventSubscription;
    type Error = SubscriptionError;
    const ERROR_RETRY: Duration = PROVISIONER_RETRY;

    fn span(namespace: &str, name: &str) -> tracing::Span {
        tracing::info_span!("bmceventsubscription", %namespace, %name)
    }

    async fn reconcile(
        self: Arc<Self>,
        subscription: Arc<BMCEventSubscription>,
    ) -> Result<Action, SubscriptionError> {
        super::reconcile(&subscription, &self)
            .await
            .map(Action::from)
    }
}
