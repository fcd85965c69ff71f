//! The BMCEventSubscription controller: once the named host has an Ironic node, it
//! subscribes the host's BMC to Redfish events through Ironic (headers from the
//! `httpHeadersRef` Secret, never in a message), records the id in
//! `status.subscriptionID`, and deletes the subscription before the object goes.
//! [`state_machine`] decides, [`EventSubscriber`] acts, [`ObjectStore`] stores.

pub mod state_machine;

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use kube::runtime::controller::Action;

use state_machine::{Facts, Step};

use crate::api::events::BMC_EVENT_SUBSCRIPTION_FINALIZER as FINALIZER;
use crate::api::{BMCEventSubscription, BareMetalHost};
use crate::controller::runtime::Next;
use crate::controller::runtime::controller::{self as runtime, Reconciler, fingerprint};
use crate::controller::runtime::shared_watch::Subscription;
use crate::controller::runtime::steps::{self, MAX_STEPS, OUT_OF_STEPS, PROVISIONER_RETRY};
use crate::controller::runtime::store::{Kind, KubeClient, ObjectError, ObjectStore};
use crate::controller::runtime::watch::api_in;
use crate::provisioner::{EventSubscriber, SubscriptionAnswer};

/// Its status is applied as it is, its events posted as upstream's controller.
impl Kind for BMCEventSubscription {}

/// What the BMCEventSubscription controller needs.
pub struct SubscriptionContext<P, S = KubeClient> {
    pub provisioner: P,
    pub store: S,
    /// `WATCH_NAMESPACE`: only subscriptions in this namespace; all when `None`.
    pub namespace: Option<String>,
}

/// Why a reconcile could not finish; retried after [`PROVISIONER_RETRY`].
pub type SubscriptionError = ObjectError;

/// One reconcile of `subscription`.
pub async fn reconcile<P: EventSubscriber, S: ObjectStore>(
    subscription: &BMCEventSubscription,
    ctx: &SubscriptionContext<P, S>,
) -> Result<Next, SubscriptionError> {
    let (store, store_err) = (&ctx.store, ObjectError::about(subscription));
    let namespace = subscription.namespace().unwrap_or_default();
    let mut facts = Facts::default();
    for _ in 0..MAX_STEPS {
        let step = state_machine::next(subscription, &facts);
        tracing::debug!(?step, "event subscription step");
        match step {
            Step::LoadHost(name) => {
                facts.host = Some(store.get(&namespace, &name).await.map_err(&store_err)?);
            }
            Step::ReadHeaders(name) => {
                let secret = store.get::<Secret>(&namespace, &name).await;
                let secret = secret.map_err(&store_err)?;
                facts.request = Some(state_machine::request(subscription, secret.as_ref()));
            }
            Step::Create(node, request) => {
                let answer = ctx.provisioner.create_subscription(&node, &request);
                facts.created = Some(answer.await?);
            }
            Step::Delete(node, id) => {
                let answer = ctx.provisioner.delete_subscription(&node, &id).await?;
                if answer == SubscriptionAnswer::Done(()) {
                    tracing::info!(subscription = %id, "deleted the event subscription on the BMC");
                }
                facts.deleted = Some(answer);
            }
            Step::End(outcome) => {
                let finished = steps::finish(store, subscription, FINALIZER, outcome).await;
                return finished.map_err(store_err);
            }
        }
    }
    Ok(OUT_OF_STEPS)
}

/// What of a host matters here: which object it is, its node, and its state (a BMC
/// that refused while the host was registering may accept once it is registered).
fn host_node(host: &BareMetalHost) -> Option<u64> {
    let node = host.status.as_ref().map(|s| &s.provisioning);
    fingerprint((&host.metadata.uid, node.map(|p| (&p.id, p.state))))
}

/// Runs the controller until `shutdown` resolves: a subscription wakes on its spec,
/// annotations and finalizers (not on bmo's status writes, as upstream), and on its
/// host's changes in `hosts`, the shared watch.
pub async fn run<P: EventSubscriber + 'static>(
    ctx: Arc<SubscriptionContext<P, KubeClient>>,
    hosts: Subscription<BareMetalHost>,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let own = runtime::own_spec_watch(api_in(ctx.store.client(), ctx.namespace.as_deref()));
    let names =
        |s: &BMCEventSubscription, _: &str, host: &str| s.spec.host_name.as_deref() == Some(host);
    let controller = runtime::wake_naming_shared(own, hosts, host_node, names);
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

    async fn reconcile(&self, s: &BMCEventSubscription) -> Result<Action, SubscriptionError> {
        reconcile(s, self).await.map(Action::from)
    }
}

#[cfg(test)]
mod tests;
