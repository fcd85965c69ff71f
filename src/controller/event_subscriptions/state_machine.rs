//! What a BMCEventSubscription needs next, from what the reconcile found so far.
//! Pure: no I/O, no clock.

use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;

use crate::api::events::BMC_EVENT_SUBSCRIPTION_FINALIZER as FINALIZER;
use crate::api::{BMCEventSubscription, BMCEventSubscriptionStatus as Status, BareMetalHost};
use crate::controller::runtime::steps::HasError;
use crate::controller::runtime::steps::Outcome::{self, Finalizer, Idle};
use crate::controller::runtime::store::{HostEvent, has_finalizer};
use crate::controller::runtime::{bmc_of, node_of};
use crate::credentials::secret_values;
use crate::provisioner::{NodeRef, SubscriptionAnswer as Answer, SubscriptionRequest};

/// Look again this long after a refusal (a missing host or Secret, a BMC that said
/// no): the spec cannot change, but the BMC, the host or the Secret can.
pub const RETRY: Duration = Duration::from_secs(300);
/// The reason of a refusal's warning event.
const FAILED: &str = "SubscriptionFailed";

/// What the reconcile found so far; `None` is "not looked at yet".
#[derive(Debug, Clone, Default)]
pub struct Facts {
    /// The host `spec.hostName` names (`Some(None)`: there is none).
    pub host: Option<Option<BareMetalHost>>,
    /// The request with the Secret's headers, or why it cannot be made.
    pub request: Option<Result<SubscriptionRequest, String>>,
    pub created: Option<Answer<String>>,
    pub deleted: Option<Answer<()>>,
}

/// The next thing to do (header values print as `***`).
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// Read the host of this name.
    LoadHost(String),
    /// Read the header Secret of this name and build the request with it.
    ReadHeaders(String),
    Create(NodeRef, SubscriptionRequest),
    Delete(NodeRef, String),
    End(Outcome<Status>),
}

impl HasError for Status {
    fn error_mut(&mut self) -> &mut Option<String> {
        &mut self.error
    }
}

/// The next step for `subscription`, from `facts`.
pub fn next(subscription: &BMCEventSubscription, facts: &Facts) -> Step {
    let finalized = has_finalizer(subscription, FINALIZER);
    let deleting = subscription.metadata.deletion_timestamp.is_some();
    let mut status = subscription.status.clone().unwrap_or_default();
    let id = status.subscription_id.clone().filter(|id| !id.is_empty());
    let host_name = subscription.spec.host_name.clone().unwrap_or_default();
    if deleting && !finalized {
        return Step::End(Idle);
    }
    let Some(host) = &facts.host else {
        return Step::LoadHost(host_name);
    };
    if deleting {
        return deletion(facts, status, host.as_ref());
    }
    let Some(host) = host else {
        let namespace = subscription.namespace().unwrap_or_default();
        let message = format!(
            "BareMetalHost {namespace}/{host_name} not found: create it, or delete this BMCEventSubscription"
        );
        return Step::End(Outcome::failed(status, FAILED, message, None));
    };
    if !finalized {
        return Step::End(Finalizer(true));
    }
    // Made through the host's node; the host's status write recording it wakes this.
    let node = node_of(host);
    if id.is_some() || node.provisioning_id.is_none() {
        return Step::End(Idle);
    }
    let request = match (&facts.request, &subscription.spec.http_headers_ref) {
        (Some(request), _) => request.clone(),
        (None, Some(secret)) => return Step::ReadHeaders(secret.name.clone().unwrap_or_default()),
        (None, None) => request(subscription, None),
    };
    let request = match request {
        Ok(request) => request,
        Err(why) => return Step::End(Outcome::failed(status, FAILED, why, Some(RETRY))),
    };
    let created = match &facts.created {
        None => return Step::Create(node, request),
        Some(Answer::Done(id)) => id,
        Some(Answer::Refused(why)) => {
            let message = refusal_message(subscription, host, why);
            return Step::End(Outcome::failed(status, FAILED, message, Some(RETRY)));
        }
        // The node went away: the host controller registers it again.
        Some(Answer::NoNode) => return Step::End(Idle),
    };
    let (bmc, to) = (bmc_of(host), request.destination);
    let message = format!("{bmc} sends its events to {to} (subscription {created})");
    let event = HostEvent::normal("SubscriptionCreated", &message);
    status.subscription_id = Some(created.clone());
    status.error = None;
    Step::End(Outcome::saved(status, event))
}

fn deletion(facts: &Facts, status: Status, host: Option<&BareMetalHost>) -> Step {
    let id = status.subscription_id.clone().filter(|id| !id.is_empty());
    // Without a host there is no node to ask: nothing bmo can delete.
    let (Some(id), Some(host)) = (id, host) else {
        return Step::End(Finalizer(false));
    };
    match &facts.deleted {
        None => Step::Delete(node_of(host), id),
        Some(Answer::Refused(why)) => {
            let message = format!(
                "{} did not delete event subscription {id}: {why}. \
                 bmo tries again; to give up on it, remove the finalizer {FINALIZER}",
                bmc_of(host),
            );
            Step::End(Outcome::failed(status, FAILED, message, Some(RETRY)))
        }
        Some(Answer::Done(())) | Some(Answer::NoNode) => Step::End(Finalizer(false)),
    }
}

/// The request to send, with one header per key of the `httpHeadersRef` Secret
/// (`None`: there is none), or why there is none: key names only, never values.
pub fn request(
    subscription: &BMCEventSubscription,
    secret: Option<&Secret>,
) -> Result<SubscriptionRequest, String> {
    let mut request = SubscriptionRequest {
        destination: subscription.spec.destination.clone().unwrap_or_default(),
        context: subscription.spec.context.clone(),
        http_headers: Vec::new(),
    };
    let Some(reference) = &subscription.spec.http_headers_ref else {
        return Ok(request);
    };
    let name = reference.name.as_deref().unwrap_or_default();
    let name = format!("{}/{name}", subscription.namespace().unwrap_or_default());
    let why = "failed to retrieve HTTP headers secret";
    let Some(secret) = secret else {
        return Err(format!(
            "{why}: Secret {name} (spec.httpHeadersRef) does not exist; \
             create it, bmo tries again every 5 minutes"
        ));
    };
    request.http_headers = secret_values(secret).map_err(|key| {
        format!("{why}: key {key} of Secret {name} is not UTF-8 text, so it cannot be an HTTP header value")
    })?;
    Ok(request)
}

/// What the user reads when the BMC (or Ironic for it) said no, and what to do.
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
        "{} refused the event subscription to {}: {why}. Fix: {fix}",
        bmc_of(host),
        subscription.spec.destination.as_deref().unwrap_or_default(),
    )
}
