//! The BMCEventSubscription controller: once the named host has an Ironic node, it
//! subscribes the host's BMC to Redfish events through Ironic (headers from the
//! `httpHeadersRef` Secret; their values never reach a message), records the id in
//! `status.subscriptionID`, and deletes the subscription before the object goes.
//! [`state_machine`] decides, [`EventSubscriber`] acts, [`ObjectStore`] stores.

mod run;
pub mod state_machine;

use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;

pub use run::run;
use state_machine::{Facts, Step};

use crate::api::BMCEventSubscription;
use crate::api::events::BMC_EVENT_SUBSCRIPTION_FINALIZER as FINALIZER;
use crate::controller::runtime::Next;
use crate::controller::runtime::store::{Kind, KubeClient, ObjectError, ObjectStore};
use crate::provisioner::{EventSubscriber, SubscriptionAnswer};

/// Look again this soon after the provisioner could not answer.
pub const PROVISIONER_RETRY: Duration = Duration::from_secs(30);

/// Steps one reconcile takes at most.
const MAX_STEPS: usize = 10;

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
            Step::Idle => return Ok(Next::OnChange),
            Step::LoadHost(name) => {
                facts.host = Some(store.get(&namespace, &name).await.map_err(&store_err)?);
            }
            // The finalizer write wakes the next reconcile.
            Step::SetFinalizer(present) => {
                let set = store.set_finalizer(subscription, FINALIZER, present).await;
                return set.map(|()| Next::OnChange).map_err(store_err);
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
            Step::Save {
                status,
                event,
                retry,
            } => {
                let saved = store.save(subscription, &status, event.as_slice()).await;
                saved.map_err(store_err)?;
                return Ok(retry.map_or(Next::OnChange, Next::After));
            }
        }
    }
    Ok(Next::After(Duration::from_secs(1)))
}

#[cfg(test)]
mod tests;
