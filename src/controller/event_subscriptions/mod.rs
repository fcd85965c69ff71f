//! The BMCEventSubscription controller: once the named host has an Ironic node, it
//! creates a Redfish event subscription on the host's BMC through Ironic (headers
//! from the `httpHeadersRef` Secret), records its id in `status.subscriptionID`, and
//! deletes it from the BMC before the object goes (finalizer
//! `bmceventsubscription.metal3.io`). A refusal is `status.error` and a warning
//! event naming the host, the BMC and the fix; header values never leave the
//! request (Ironic's messages repeat them: they are masked).
//!
//! The same shape as the host controller: [`state_machine`] decides (pure), the
//! provisioner acts ([`EventSubscriber`]), [`store`] reads and writes, and
//! [`reconcile`] only loops over them.

mod run;
pub mod state_machine;
pub mod store;

use std::time::Duration;

use kube::ResourceExt;

pub use run::run;
use state_machine::{Facts, Step};
pub use store::{KubeSubscriptionStore, MemorySubscriptionStore, SubscriptionStore};

use crate::api::{BMCEventSubscription, BMCEventSubscriptionStatus};
use crate::controller::runtime::Next;
use crate::controller::runtime::store::{HostEvent, ObjectError, StoreError, name_of};
use crate::credentials::SecretString;
use crate::provisioner::{EventSubscriber, HostId, NodeRef, SubscriptionRequest};

/// Look again this soon after the provisioner could not answer.
pub const PROVISIONER_RETRY: Duration = Duration::from_secs(30);

/// Steps one reconcile takes at most.
const MAX_STEPS: usize = 10;

/// What the BMCEventSubscription controller needs.
pub struct SubscriptionContext<P, S = KubeSubscriptionStore> {
    pub provisioner: P,
    pub store: S,
    /// `WATCH_NAMESPACE`: only subscriptions in this namespace; all when `None`.
    pub namespace: Option<String>,
}

/// Why a reconcile could not finish; retried after [`PROVISIONER_RETRY`].
pub type SubscriptionError = ObjectError;

/// One reconcile of `subscription`.
pub async fn reconcile<P: EventSubscriber, S: SubscriptionStore>(
    subscription: &BMCEventSubscription,
    ctx: &SubscriptionContext<P, S>,
) -> Result<Next, SubscriptionError> {
    let namespace = subscription.namespace().unwrap_or_default();
    let object = format!("BMCEventSubscription {}", name_of(subscription));
    let store_err = ObjectError::store(&object);
    let host_name = subscription.spec.host_name.clone().unwrap_or_default();
    let mut facts = Facts::new(subscription.clone());
    for _ in 0..MAX_STEPS {
        let step = state_machine::next(&facts);
        tracing::debug!(step = step_name(&step), "event subscription step");
        let node = || {
            let host = facts.host.clone().flatten();
            NodeRef {
                id: HostId::new(&namespace, &host_name),
                provisioning_id: host.as_ref().and_then(state_machine::node_id),
            }
        };
        match step {
            Step::Idle => return Ok(Next::OnChange),
            Step::LoadHost => {
                let host = ctx
                    .store
                    .host(&namespace, &host_name)
                    .await
                    .map_err(store_err)?;
                facts.host = Some(host);
            }
            Step::AddFinalizer => {
                ctx.store
                    .add_finalizer(subscription)
                    .await
                    .map_err(store_err)?;
                // The finalizer write wakes the next reconcile.
                return Ok(Next::OnChange);
            }
            Step::ReadHeaders => {
                let request = request(subscription, &ctx.store).await.map_err(store_err)?;
                facts.request = Some(request);
            }
            Step::Create => {
                let Some(Ok(request)) = &facts.request else {
                    return Ok(Next::After(PROVISIONER_RETRY));
                };
                let answer = ctx
                    .provisioner
                    .create_subscription(&node(), request)
                    .await?;
                facts.created = Some(answer);
            }
            Step::Delete(id) => {
                let answer = ctx.provisioner.delete_subscription(&node(), &id).await?;
                if answer == crate::provisioner::SubscriptionAnswer::Done(()) {
                    tracing::info!(subscription = %id, "deleted the event subscription on the BMC");
                }
                facts.deleted = Some(answer);
            }
            Step::RemoveFinalizer => {
                ctx.store
                    .remove_finalizer(subscription)
                    .await
                    .map_err(store_err)?;
                return Ok(Next::OnChange);
            }
            Step::Save {
                status,
                event,
                retry,
            } => {
                save(subscription, &ctx.store, &status, event)
                    .await
                    .map_err(store_err)?;
                return Ok(retry.map_or(Next::OnChange, Next::After));
            }
        }
    }
    Ok(Next::After(Duration::from_secs(1)))
}

/// Saves `status`, and publishes `event` (reason, message, warning) if any.
async fn save<S: SubscriptionStore>(
    subscription: &BMCEventSubscription,
    store: &S,
    status: &BMCEventSubscriptionStatus,
    event: Option<(String, String, bool)>,
) -> Result<(), StoreError> {
    store.apply_status(subscription, status).await?;
    let Some((reason, message, warning)) = event else {
        return Ok(());
    };
    match (&status.subscription_id, &status.error) {
        (_, Some(error)) => tracing::warn!(%error, "event subscription refused"),
        (Some(id), None) => tracing::info!(subscription = %id, "created the event subscription"),
        (None, None) => {}
    }
    let event = HostEvent {
        reason,
        message,
        warning,
    };
    store.publish(subscription, &event).await;
    Ok(())
}

/// The step's name for the debug log (a step's fields may hold a request).
fn step_name(step: &Step) -> &'static str {
    match step {
        Step::Idle => "Idle",
        Step::LoadHost => "LoadHost",
        Step::AddFinalizer => "AddFinalizer",
        Step::ReadHeaders => "ReadHeaders",
        Step::Create => "Create",
        Step::Delete(_) => "Delete",
        Step::RemoveFinalizer => "RemoveFinalizer",
        Step::Save { .. } => "Save",
    }
}

/// The request to send: destination, context and one header per key of the
/// `httpHeadersRef` Secret (its namespace is the subscription's), or why there is
/// none. Only key names appear in the reason, never values.
async fn request<S: SubscriptionStore>(
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
    let Some(secret) = store.secret(&namespace, &name).await? else {
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
