//! `BMCEventSubscription`: a Redfish event subscription on a host's BMC, created
//! through Ironic by `controller::event_subscriptions`.

use k8s_openapi::api::core::v1::SecretReference;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Finalizer upstream's controller keeps until the subscription is deleted on the BMC.
pub const BMC_EVENT_SUBSCRIPTION_FINALIZER: &str = "bmceventsubscription.metal3.io";

super::metal3_kind! {
    /// Redfish events of one host's BMC, sent to a URL.
    #[kube(
        kind = "BMCEventSubscription", plural = "bmceventsubscriptions", singular = "bmceventsubscription",
        status = "BMCEventSubscriptionStatus", shortname = "bes", shortname = "bmcevent",
        doc = "A subscription to the Redfish events of a BareMetalHost's BMC. Cannot be changed once created.",
        printcolumn(name = "Error", type_ = "string", json_path = ".status.error", description = "The last error"),
        printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp", description = "Time since the subscription was created")
    )]
    pub struct BMCEventSubscriptionSpec {
        /// The BareMetalHost (same namespace) whose BMC sends the events.
        pub host_name: Option<String>,

        /// URL the BMC posts events to; needs a path (at least `/`).
        pub destination: Option<String>,

        /// Opaque string the BMC sends back with every event.
        pub context: Option<String>,

        /// Secret (same namespace) whose keys and values are sent as HTTP headers with
        /// each event, e.g. for authentication.
        #[serde(rename = "httpHeadersRef")]
        pub http_headers_ref: Option<SecretReference>,
    }
}

/// The subscription on the BMC.
#[serde_with::skip_serializing_none]
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BMCEventSubscriptionStatus {
    /// Id of the subscription on the BMC.
    #[serde(rename = "subscriptionID")]
    pub subscription_id: Option<String>,
    /// The last error.
    pub error: Option<String>,
}
