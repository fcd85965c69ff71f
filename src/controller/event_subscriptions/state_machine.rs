//! What a BMCEventSubscription needs next, from what the reconcile found so far.
//! Pure: no I/O, no clock.

use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;

use crate::api::events::BMC_EVENT_SUBSCRIPTION_FINALIZER as FINALIZER;
use crate::api::{BMCEventSubscription, BMCEventSubscriptionStatus as Status, BareMetalHost};
use crate::controller::runtime::node_of;
use crate::controller::runtime::store::{HostEvent, has_finalizer};
use crate::credentials::SecretString;
use crate::provisioner::{NodeRef, SubscriptionAnswer as Answer, SubscriptionRequest};

/// Look again this long after a refusal (a missing host or Secret, a BMC that said
/// no): the spec cannot change, but the BMC, the host or the Secret can.
pub const RETRY: Duration = Duration::from_secs(300);

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
    /// Nothing until the subscription or its host changes.
    Idle,
    /// Read the host of this name.
    LoadHost(String),
    /// Add (`true`) or remove the finalizer.
    SetFinalizer(bool),
    /// Read the header Secret of this name and build the request with it.
    ReadHeaders(String),
    Create(NodeRef, SubscriptionRequest),
    Delete(NodeRef, String),
    /// `retry`: look again after it; `None` when only a change can help.
    Save {
        status: Status,
        event: Option<HostEvent>,
        retry: Option<Duration>,
    },
}

/// The next step for `subscription`, from `facts`.
pub fn next(subscription: &BMCEventSubscription, facts: &Facts) -> Step {
    let finalized = has_finalizer(subscription, FINALIZER);
    let deleting = subscription.metadata.deletion_timestamp.is_some();
    let status = subscription.status.clone().unwrap_or_default();
    let id = status.subscription_id.clone().filter(|id| !id.is_empty());
    if deleting && !finalized {
        return Step::Idle;
    }
    let Some(host) = &facts.host else {
        return Step::LoadHost(subscription.spec.host_name.clone().unwrap_or_default());
    };
    if deleting {
        return deletion(subscription, facts, id, host.as_ref());
    }
    let Some(host) = host else {
        let what = format!("BareMetalHost {}", host_key(subscription));
        let message = format!("{what} not found: create it, or delete this BMCEventSubscription");
        return refused(status, message, None);
    };
    if !finalized {
        return Step::SetFinalizer(true);
    }
    // Made through the host's node; the host's status write recording it wakes this.
    let node = node_of(host);
    if id.is_some() || node.provisioning_id.is_none() {
        return Step::Idle;
    }
    let request = match (&facts.request, &subscription.spec.http_headers_ref) {
        (Some(request), _) => request.clone(),
        (None, Some(secret)) => return Step::ReadHeaders(secret.name.clone().unwrap_or_default()),
        (None, None) => request(subscription, None),
    };
    let request = match request {
        Ok(request) => request,
        Err(why) => return refused(status, why, Some(RETRY)),
    };
    match &facts.created {
        None => Step::Create(node, request),
        Some(Answer::Done(id)) => Step::Save {
            status: Status {
                subscription_id: Some(id.clone()),
                error: None,
            },
            event: Some(HostEvent::normal(
                "SubscriptionCreated",
                &format!(
                    "{} sends its events to {} (subscription {id})",
                    bmc_of(subscription, host),
                    request.destination
                ),
            )),
            retry: None,
        },
        Some(Answer::Refused(why)) => refused(
            status,
            refusal_message(subscription, host, why),
            Some(RETRY),
        ),
        // The node went away: the host controller registers it again.
        Some(Answer::NoNode) => Step::Idle,
    }
}

fn deletion(
    subscription: &BMCEventSubscription,
    facts: &Facts,
    id: Option<String>,
    host: Option<&BareMetalHost>,
) -> Step {
    // Without a host there is no node to ask: nothing bmo can delete.
    let (Some(id), Some(host)) = (id, host) else {
        return Step::SetFinalizer(false);
    };
    match &facts.deleted {
        None => Step::Delete(node_of(host), id),
        Some(Answer::Refused(why)) => {
            let message = format!(
                "{} did not delete event subscription {id}: {why}. \
                 bmo tries again; to give up on it, remove the finalizer {FINALIZER}",
                bmc_of(subscription, host),
            );
            let status = subscription.status.clone().unwrap_or_default();
            refused(status, message, Some(RETRY))
        }
        Some(Answer::Done(())) | Some(Answer::NoNode) => Step::SetFinalizer(false),
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
    let namespace = subscription.namespace().unwrap_or_default();
    let name = format!(
        "{namespace}/{}",
        reference.name.as_deref().unwrap_or_default()
    );
    let why = "failed to retrieve HTTP headers secret";
    let Some(secret) = secret else {
        return Err(format!(
            "{why}: Secret {name} (spec.httpHeadersRef) does not exist; \
             create it, bmo tries again every 5 minutes"
        ));
    };
    for (key, value) in secret.data.clone().unwrap_or_default() {
        let Ok(value) = String::from_utf8(value.0) else {
            return Err(format!(
                "{why}: key {key} of Secret {name} is not UTF-8 text, \
                 so it cannot be an HTTP header value"
            ));
        };
        request.http_headers.push((key, SecretString::new(value)));
    }
    Ok(request)
}

/// Saves `message` as the error (with a warning event), unless it is already there.
fn refused(mut status: Status, message: String, retry: Option<Duration>) -> Step {
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
        "{} refused the event subscription to {}: {why}. Fix: {fix}",
        bmc_of(subscription, host),
        subscription.spec.destination.as_deref().unwrap_or_default(),
    )
}

/// `namespace/hostName`.
fn host_key(subscription: &BMCEventSubscription) -> String {
    let namespace = subscription.namespace().unwrap_or_default();
    format!(
        "{namespace}/{}",
        subscription.spec.host_name.as_deref().unwrap_or_default()
    )
}

/// "BMC address of BareMetalHost namespace/name", the address without the
/// credentials a user may have put in it (the address guard's rule).
fn bmc_of(subscription: &BMCEventSubscription, host: &BareMetalHost) -> String {
    let address = host.spec.bmc.as_ref().map_or("", |b| b.address.as_str());
    let address = crate::bmc::redact_userinfo(address);
    format!("BMC {address} of BareMetalHost {}", host_key(subscription))
}
