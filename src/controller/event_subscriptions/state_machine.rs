//! What a BMCEventSubscription needs next, from what the reconciler found so far.
//! Pure: no I/O, no clock.

use std::time::Duration;

use kube::ResourceExt;

use crate::api::events::BMC_EVENT_SUBSCRIPTION_FINALIZER;
use crate::api::{BMCEventSubscription, BMCEventSubscriptionStatus, BareMetalHost};
use crate::controller::runtime::node_of;
use crate::controller::runtime::store::HostEvent;
use crate::provisioner::{NodeRef, SubscriptionAnswer, SubscriptionRequest};

/// Look again this long after a refusal (a missing host or Secret, a BMC that said
/// no): the spec cannot change, but the BMC, the host or the Secret can.
pub const RETRY: Duration = Duration::from_secs(300);

/// What the reconciler found so far; `None` is "not looked at yet".
#[derive(Debug, Clone, Default)]
pub struct Facts {
    /// The host `spec.hostName` names (`Some(None)`: there is none).
    pub host: Option<Option<BareMetalHost>>,
    /// The request with the headers from the Secret, or why it cannot be made.
    pub request: Option<Result<SubscriptionRequest, String>>,
    /// The BMC's answer to the creation.
    pub created: Option<SubscriptionAnswer<String>>,
    /// The BMC's answer to the deletion.
    pub deleted: Option<SubscriptionAnswer<()>>,
}

/// The next thing to do (header values print as `***`).
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// Nothing until the subscription or its host changes.
    Idle,
    LoadHost,
    /// Add (`true`) or remove the finalizer.
    SetFinalizer(bool),
    /// Read the header Secret and build the request.
    ReadHeaders,
    Create(NodeRef, SubscriptionRequest),
    Delete(NodeRef, String),
    Save {
        status: BMCEventSubscriptionStatus,
        event: Option<HostEvent>,
        /// Look again after this long; `None` when only a change can help.
        retry: Option<Duration>,
    },
}

/// The next step for `subscription`, from `facts`.
pub fn next(subscription: &BMCEventSubscription, facts: &Facts) -> Step {
    let has_finalizer = subscription
        .finalizers()
        .iter()
        .any(|f| f == BMC_EVENT_SUBSCRIPTION_FINALIZER);
    let deleting = subscription.metadata.deletion_timestamp.is_some();
    let status = subscription.status.clone().unwrap_or_default();
    let id = status.subscription_id.clone().filter(|id| !id.is_empty());
    let Some(host) = &facts.host else {
        return if deleting && !has_finalizer {
            Step::Idle
        } else {
            Step::LoadHost
        };
    };
    if deleting {
        return deletion(subscription, facts, has_finalizer, id, host.as_ref());
    }
    let Some(host) = host else {
        let message = format!(
            "BareMetalHost {} not found: create it, or delete this BMCEventSubscription",
            host_key(subscription)
        );
        return refused(status, message, None);
    };
    if !has_finalizer {
        return Step::SetFinalizer(true);
    }
    // The subscription is made through the host's node; the host's status write
    // that records the node wakes this one.
    let node = node_of(host);
    if id.is_some() || node.provisioning_id.is_none() {
        return Step::Idle;
    }
    let request = match &facts.request {
        None => return Step::ReadHeaders,
        Some(Err(why)) => return refused(status, why.clone(), Some(RETRY)),
        Some(Ok(request)) => request,
    };
    match &facts.created {
        None => Step::Create(node, request.clone()),
        Some(SubscriptionAnswer::Done(id)) => {
            let message = format!(
                "BMC {} of BareMetalHost {} sends its events to {} (subscription {id})",
                bmc_address(host),
                host_key(subscription),
                request.destination
            );
            Step::Save {
                status: BMCEventSubscriptionStatus {
                    subscription_id: Some(id.clone()),
                    error: None,
                },
                event: Some(HostEvent::normal("SubscriptionCreated", &message)),
                retry: None,
            }
        }
        Some(SubscriptionAnswer::Refused(why)) => refused(
            status,
            refusal_message(subscription, host, why),
            Some(RETRY),
        ),
        // The node went away: the host controller registers it again.
        Some(SubscriptionAnswer::NoNode) => Step::Idle,
    }
}

fn deletion(
    subscription: &BMCEventSubscription,
    facts: &Facts,
    has_finalizer: bool,
    id: Option<String>,
    host: Option<&BareMetalHost>,
) -> Step {
    if !has_finalizer {
        return Step::Idle;
    }
    // Without a host there is no node to ask: nothing bmo can delete.
    let (Some(id), Some(host)) = (id, host) else {
        return Step::SetFinalizer(false);
    };
    match &facts.deleted {
        None => Step::Delete(node_of(host), id),
        Some(SubscriptionAnswer::Refused(why)) => {
            let message = format!(
                "BMC {} of BareMetalHost {} did not delete event subscription {id}: {why}. \
                 bmo tries again; to give up on it, remove the finalizer {}",
                bmc_address(host),
                host_key(subscription),
                BMC_EVENT_SUBSCRIPTION_FINALIZER
            );
            let status = subscription.status.clone().unwrap_or_default();
            refused(status, message, Some(RETRY))
        }
        Some(SubscriptionAnswer::Done(())) | Some(SubscriptionAnswer::NoNode) => {
            Step::SetFinalizer(false)
        }
    }
}

/// Saves `message` as the error (with a warning event), unless it is already there.
fn refused(
    mut status: BMCEventSubscriptionStatus,
    message: String,
    retry: Option<Duration>,
) -> Step {
    let event = (status.error.as_ref() != Some(&message))
        .then(|| HostEvent::warning("SubscriptionFailed", &message));
    if event.is_none() && retry.is_none() {
        return Step::Idle;
    }
    status.error = Some(message);
    Step::Save {
        status,
        event,
        retry,
    }
}

/// What the user reads when the BMC (or Ironic for it) said no: who refused, what,
/// and what to do about it.
fn refusal_message(subscription: &BMCEventSubscription, host: &BareMetalHost, why: &str) -> String {
    let fix = if why.contains("EventService") {
        "this BMC offers no Redfish EventService, so it cannot send events; \
         delete this BMCEventSubscription, or upgrade the BMC to one that has an EventService"
    } else if why.contains("nsupported") || why.contains("not supported") {
        "event subscriptions need a Redfish BMC (a redfish:// or idrac-redfish:// address); \
         delete this BMCEventSubscription"
    } else {
        "check the destination and that the BMC accepts event subscriptions; bmo tries again every 5 minutes"
    };
    format!(
        "BMC {} of BareMetalHost {} refused the event subscription to {}: {why}. Fix: {fix}",
        bmc_address(host),
        host_key(subscription),
        subscription.spec.destination.as_deref().unwrap_or_default(),
    )
}

/// `namespace/hostName`.
fn host_key(subscription: &BMCEventSubscription) -> String {
    format!(
        "{}/{}",
        subscription.namespace().unwrap_or_default(),
        subscription.spec.host_name.as_deref().unwrap_or_default()
    )
}

/// The host's BMC address as messages show it: without the credentials a user may
/// have put in it (`crate::bmc::redact_userinfo`, the address guard's rule).
fn bmc_address(host: &BareMetalHost) -> String {
    let address = host.spec.bmc.as_ref().map_or("", |b| b.address.as_str());
    crate::bmc::redact_userinfo(address)
}
