//! The kube-runtime side of the BMCEventSubscription controller: what wakes a
//! subscription.
//!
//! A subscription wakes on its generation (creation, deletion), annotations and
//! finalizers (not on bmo's status writes, as upstream), and when the host it names
//! appears, is replaced, gets its node (`status.provisioning.ID`) or changes state.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Arc;
use std::time::Duration;

use kube::ResourceExt;
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{Predicate, WatchStreamExt, predicates, watcher};

use super::{
    KubeSubscriptionStore, PROVISIONER_RETRY, SubscriptionContext, SubscriptionError,
    SubscriptionStore,
};
use crate::api::{BMCEventSubscription, BareMetalHost};
use crate::controller::runtime::controller::{self, Reconciler, own_watch};
use crate::controller::runtime::store::StoreError;
use crate::controller::runtime::watch::{WatchBackoff, api_in};
use crate::provisioner::EventSubscriber;

/// How long reconciles in flight may take to finish after the shutdown signal.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(3);
/// Pause after a lost write race.
const CONFLICT_RETRY: Duration = Duration::from_secs(1);

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
    let client = ctx.store.client();
    let namespace = ctx.namespace.as_deref();
    let controller = own_watch(
        api_in(client, namespace),
        |_| (),
        subscription_change_predicate(),
    );
    let host_changes = watcher(api_in(client, namespace), watcher::Config::default())
        .backoff(WatchBackoff::default())
        .applied_objects()
        .predicate_filter(host_node, Default::default());
    let by_host = controller.store();
    let controller = controller.watches_stream(host_changes, move |host: BareMetalHost| {
        let namespace = host.namespace();
        let name = host.name_any();
        by_host
            .state()
            .iter()
            .filter(|s| s.namespace() == namespace && s.spec.host_name.as_deref() == Some(&name))
            .map(|s| ObjectRef::from_obj(s.as_ref()))
            .collect::<Vec<_>>()
    });
    controller::run(controller, ctx, shutdown).await;
}

impl<P: EventSubscriber + 'static, S: SubscriptionStore + 'static> Reconciler
    for SubscriptionContext<P, S>
{
    type Object = BMCEventSubscription;
    type Error = SubscriptionError;
    const KIND: &'static str = "BMCEventSubscription";
    const SHUTDOWN_GRACE: Option<Duration> = Some(SHUTDOWN_GRACE);

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

    fn retry(&self, subscription: &BMCEventSubscription, error: &SubscriptionError) -> Action {
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
}
