//! The BMCEventSubscription controller: once the named host has an Ironic node, it
//! creates a Redfish event subscription on the host's BMC through Ironic (headers
//! from the `httpHeadersRef` Secret), records its id in `status.subscriptionID`, and
//! deletes it from the BMC before the object goes (finalizer
//! `bmceventsubscription.metal3.io`). A refusal is `status.error` and a warning
//! event naming the host, the BMC and the fix; header values never leave the
//! request (Ironic's messages repeat them: they are masked).
//!
//! The same shape as the host controller: [`state_machine`] decides (pure), the
//! provisioner acts ([`EventSubscriber`]), the runtime's [`ObjectStore`] reads and
//! writes, and [`reconcile`] only loops over them.

mod run;
pub mod state_machine;

use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;

pub use run::run;
use state_machine::{Facts, Step};

use crate::api::BMCEventSubscription;
use crate::api::events::BMC_EVENT_SUBSCRIPTION_FINALIZER;
use crate::controller::runtime::Next;
use crate::controller::runtime::store::{Kind, KubeClient, ObjectError, ObjectStore, StoreError};
use crate::credentials::SecretString;
use crate::provisioner::{EventSubscriber, SubscriptionAnswer, SubscriptionRequest};

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
    let store_err = ObjectError::about(subscription);
    let mut facts = Facts::default();
    for _ in 0..MAX_STEPS {
        let step = state_machine::next(subscription, &facts);
        tracing::debug!(?step, "event subscription step");
        match step {
            Step::Idle => return Ok(Next::OnChange),
            Step::LoadHost => {
                let namespace = subscription.namespace().unwrap_or_default();
                let name = subscription.spec.host_name.as_deref().unwrap_or_default();
                let host = ctx.store.get(&namespace, name).await;
                facts.host = Some(host.map_err(&store_err)?);
            }
            Step::SetFinalizer(present) => {
                let finalizer = BMC_EVENT_SUBSCRIPTION_FINALIZER;
                let set = ctx.store.set_finalizer(subscription, finalizer, present);
                set.await.map_err(&store_err)?;
                // The finalizer write wakes the next reconcile.
                return Ok(Next::OnChange);
            }
            Step::ReadHeaders => {
                let request = request(subscription, &ctx.store).await;
                facts.request = Some(request.map_err(&store_err)?);
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
                let saved = ctx.store.save(subscription, &status, event.as_slice());
                saved.await.map_err(&store_err)?;
                return Ok(retry.map_or(Next::OnChange, Next::After));
            }
        }
    }
    Ok(Next::After(Duration::from_secs(1)))
}

/// The request to send: destination, context and one header per key of the
/// `httpHeadersRef` Secret (its namespace is the subscription's), or why there is
/// none. Only key names appear in the reason, never values.
async fn request<S: ObjectStore>(
    subscription: &BMCEventSubscription,
    store: &S,
) -> Result<Result<SubscriptionRequest, String>, StoreError> {
    let namespace = subscription.namespace().unwrap_or_default();
    let mut request = SubscriptionRequest {
        destination: subscription.spec.destination.clone().unwrap_or_default(),
        context: subscription.spec.context.clone(),
        http_headers: Vec::new(),
    };
    let Some(reference) = &subscription.spec.http_headers_ref else {
        return Ok(Ok(request));
    };
    let name = reference.name.clone().unwrap_or_default();
    let Some(secret) = store.get::<Secret>(&namespace, &name).await? else {
        return Ok(Err(format!(
            "failed to retrieve HTTP headers secret: Secret {namespace}/{name} (spec.httpHeadersRef) \
             does not exist; create it, bmo tries again every 5 minutes"
        )));
    };
    for (key, value) in secret.data.unwrap_or_default() {
        match String::from_utf8(value.0) {
            Ok(value) => request.http_headers.push((key, SecretString::new(value))),
            Err(_) => {
                return Ok(Err(format!(
                    "failed to retrieve HTTP headers secret: key {key} of Secret {namespace}/{name} \
                     is not UTF-8 text, so it cannot be an HTTP header value"
                )));
            }
        }
    }
    Ok(Ok(request))
}

#[cfg(test)]
mod tests;
