//! What wakes a BMCEventSubscription: its generation, annotations and finalizers
//! (not bmo's status writes, as upstream), and its host's changes below.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use kube::runtime::controller::Action;
use kube::runtime::watcher;

use super::{PROVISIONER_RETRY, SubscriptionContext, SubscriptionError};
use crate::api::{BMCEventSubscription, BareMetalHost};
use crate::controller::runtime::controller::{self as runtime, Reconciler, fingerprint};
use crate::controller::runtime::shared_watch::Subscription;
use crate::controller::runtime::store::{KubeClient, ObjectStore};
use crate::controller::runtime::watch::api_in;
use crate::provisioner::EventSubscriber;

/// What of a host matters here: which object it is, its node, and its state (a BMC
/// that refused while the host was registering may accept once it is registered).
fn host_node(host: &BareMetalHost) -> Option<u64> {
    let node = host
        .status
        .as_ref()
        .map(|s| (s.provisioning.id.as_str(), s.provisioning.state));
    fingerprint((&host.metadata.uid, node))
}

/// Runs the BMCEventSubscription controller until `shutdown` resolves; `hosts` is
/// the shared watch of BareMetalHosts.
pub async fn run<P: EventSubscriber + 'static>(
    ctx: Arc<SubscriptionContext<P, KubeClient>>,
    hosts: Subscription<BareMetalHost>,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let subscriptions = api_in(ctx.store.client(), ctx.namespace.as_deref());
    let own = runtime::own_watch(
        subscriptions,
        |_| (),
        runtime::spec_annotations_finalizers(),
    );
    let host_changes = hosts
        .changed(host_node)
        .map(|host| Ok::<_, watcher::Error>(Arc::unwrap_or_clone(host)));
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
