//! Redfish event subscriptions through the redfish driver's vendor passthru
//! (`create_subscription`, `delete_subscription`).

use reqwest::Method;
use serde_json::{Value, json};

use super::IronicProvisioner;
use crate::ironic::IronicError;
use crate::provisioner::{NodeRef, ProvisionerError, SubscriptionAnswer, SubscriptionRequest};

/// Redfish's default protocol, as Ironic would fill it in.
const PROTOCOL: &str = "Redfish";

impl IronicProvisioner {
    pub(in crate::provisioner) async fn create_event_subscription(
        &self,
        node: &NodeRef,
        request: &SubscriptionRequest,
    ) -> Result<SubscriptionAnswer<String>, ProvisionerError> {
        let headers: Vec<Value> = request
            .http_headers
            .iter()
            .map(|(name, value)| json!({ name.as_str(): value.expose() }))
            .collect();
        let mut body = json!({
            "Destination": request.destination,
            "Context": request.context.clone().unwrap_or_default(),
            "Protocol": PROTOCOL,
        });
        if !headers.is_empty() {
            body["HttpHeaders"] = Value::Array(headers);
        }
        let answer = self
            .client
            .vendor_passthru(&ident(node), Method::POST, "create_subscription", &body)
            .await;
        match answer {
            Ok(created) => {
                let id = created
                    .as_ref()
                    .and_then(|v| v.get("Id"))
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                if id.is_empty() {
                    return Ok(SubscriptionAnswer::Refused(
                        "the BMC created a subscription but did not name its Id".into(),
                    ));
                }
                Ok(SubscriptionAnswer::Done(id.to_owned()))
            }
            Err(e) if e.is_not_found() => Ok(SubscriptionAnswer::NoNode),
            Err(e) => refusal(node, e, request),
        }
    }

    pub(in crate::provisioner) async fn delete_event_subscription(
        &self,
        node: &NodeRef,
        id: &str,
    ) -> Result<SubscriptionAnswer<()>, ProvisionerError> {
        let answer = self
            .client
            .vendor_passthru(
                &ident(node),
                Method::DELETE,
                "delete_subscription",
                &json!({ "id": id }),
            )
            .await;
        match answer {
            Ok(_) => Ok(SubscriptionAnswer::Done(())),
            // No node, or (Ironic answers 404 for this too) no such subscription on
            // the BMC: either way it is gone.
            Err(e) if e.is_not_found() => Ok(SubscriptionAnswer::Done(())),
            Err(e) => refusal(node, e, &SubscriptionRequest::default()),
        }
    }
}

/// The node as Ironic knows it: its UUID when recorded, else its name.
fn ident(node: &NodeRef) -> String {
    match node.provisioning_id.as_deref().filter(|id| !id.is_empty()) {
        Some(id) => id.to_owned(),
        None => node.id.node_name(),
    }
}

/// Ironic's answer as a refusal, or the error when Ironic did not answer at all.
/// Ironic's message repeats the payload it sent, header values included: they are
/// masked before the message goes anywhere.
fn refusal<T>(
    node: &NodeRef,
    error: IronicError,
    request: &SubscriptionRequest,
) -> Result<SubscriptionAnswer<T>, ProvisionerError> {
    match error {
        IronicError::Api { message, .. } => Ok(SubscriptionAnswer::Refused(
            request.mask_header_values(&message),
        )),
        source => Err(ProvisionerError::Ironic {
            host: node.id.to_string(),
            source,
        }),
    }
}
