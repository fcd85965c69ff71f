//! Claim kinds: `HostClaim` (a tenant's request for a BareMetalHost, possibly in
//! another namespace) and `HostDeployPolicy` (which namespaces may claim the hosts of
//! the namespace it lives in). `controller::claims` acts on them with `--hostclaims`.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ObjectReference, SecretReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::host::{CustomDeploy, Image};

/// Finalizer upstream's controller keeps until the claimed host is released.
pub const HOST_CLAIM_FINALIZER: &str = "metal3.io/hostclaim";
/// Condition type: the claim is bound to a host.
pub const ASSOCIATED_CONDITION: &str = "Associated";
/// Condition type: the claim's settings were copied to the host.
pub const SYNCHRONIZED_CONDITION: &str = "Synchronized";

super::metal3_kind! {
    /// A request for a BareMetalHost that a tenant namespace makes; the host it binds is
    /// then driven through the claim.
    #[kube(
        kind = "HostClaim", plural = "hostclaims", singular = "hostclaim",
        status = "HostClaimStatus",
        doc = "A claim on a BareMetalHost (possibly in another namespace) and what to deploy on it."
    )]
    pub struct HostClaimSpec {
        /// Wanted power state of the claimed host.
        pub powered_on: bool,

        /// Image to deploy on the host.
        pub image: Option<Image>,

        /// Secret (claim's namespace) with the user data; copied to the host's namespace.
        pub user_data: Option<SecretReference>,

        /// Secret (claim's namespace) with the network data.
        pub network_data: Option<SecretReference>,

        /// Secret (claim's namespace) with extra meta data.
        pub meta_data: Option<SecretReference>,

        /// Deploy step of a custom deploy ramdisk instead of an image.
        pub custom_deploy: Option<CustomDeploy>,

        /// Which hosts may be bound.
        pub host_selector: Option<HostSelector>,

        /// The object using this claim (for example a Cluster API machine).
        pub consumer_ref: Option<ObjectReference>,

        /// Failure domain the host must belong to.
        pub failure_domain: Option<String>,
    }
}

/// Criteria a host must meet to be bound.
#[serde_with::skip_serializing_none]
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HostSelector {
    /// Labels the host must carry, with these values.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub match_labels: BTreeMap<String, String>,

    /// Label requirements the host must meet.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub match_expressions: Vec<HostSelectorRequirement>,

    /// Namespace the host must be in.
    pub in_namespace: Option<String>,
}

/// One label requirement, in the syntax of Kubernetes label selectors.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct HostSelectorRequirement {
    /// Label key.
    pub key: String,
    /// `in`, `notin`, `=`, `==`, `!=`, `exists` or `!` (does not exist).
    pub operator: String,
    /// Values for `in`, `notin` (one or more) and `=`, `==`, `!=` (exactly one).
    pub values: Vec<String>,
}

/// The bound host as the claim sees it.
#[serde_with::skip_serializing_none]
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HostClaimStatus {
    /// When the status was last copied from the host.
    pub last_updated: Option<Time>,

    /// `Associated`, `Synchronized`, `Provisioned` and their summary `Ready`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,

    /// The bound host.
    pub bare_metal_host: Option<NamespacedName>,

    /// The bound host's HardwareData.
    pub hardware_data: Option<NamespacedName>,

    /// Power state of the bound host.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub powered_on: bool,
}

/// Namespace and name of an object.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct NamespacedName {
    pub namespace: String,
    pub name: String,
}

super::metal3_kind! {
    /// Which namespaces may claim the BareMetalHosts of the namespace the policy is in.
    #[kube(
        kind = "HostDeployPolicy", plural = "hostdeploypolicies", singular = "hostdeploypolicy",
        status = "HostDeployPolicyStatus",
        doc = "Admits HostClaims from other namespaces to the BareMetalHosts of this namespace."
    )]
    pub struct HostDeployPolicySpec {
        /// Namespaces whose claims are admitted; a namespace must meet every criterion
        /// given (absent: nothing is admitted).
        pub host_claim_namespaces: Option<HostClaimNamespaces>,
    }
}

/// Ways to name the admitted namespaces.
#[serde_with::skip_serializing_none]
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HostClaimNamespaces {
    /// Namespace names.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub names: Vec<String>,
    /// Regular expression a namespace name must match.
    pub name_matches: Option<String>,
    /// Labels the namespace must carry (a label without value: any value).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub has_labels: Vec<NameValuePair>,
}

/// A label name and optional value.
#[serde_with::skip_serializing_none]
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct NameValuePair {
    pub name: String,
    pub value: Option<String>,
}

/// HostDeployPolicy has no status fields; the subresource exists as upstream's.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct HostDeployPolicyStatus {}
