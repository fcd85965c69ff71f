//! The `metal3.io/v1alpha1` API that bmo serves: `BareMetalHost` and `HardwareData`,
//! and upstream's eleven other kinds (served, without controllers yet).
//!
//! The types are wire-compatible with upstream metal3 (same JSON names, enums, defaults
//! and required fields), so existing manifests and tools keep working. bmo's additions
//! are optional fields, marked as such in docs/api.md. An `Option` field is left out of
//! the JSON when `None` (`#[serde_with::skip_serializing_none]` on its struct, upstream's
//! `omitempty`), and a missing one reads as `None`.
//!
//! - [`host`]: `BareMetalHost` (spec, status and every nested type).
//! - [`hardware`]: `HardwareDetails` (inspection results) and the `HardwareData` resource.
//! - [`firmware`], [`images`], [`events`], [`claims`], [`network`]: the other kinds.
//! - [`crd`]: the CustomResourceDefinitions with their CEL validation rules, and the
//!   ValidatingAdmissionPolicies for what a CRD cannot check; `bmo crds` prints them.
//! - [`kinds`]: the CRDs of the eleven other kinds, with their CEL rules.
//! - [`install`]: applying those to a cluster (server-side apply, idempotent).
//!
//! Install the CRDs from [`crd::baremetalhost_crd`] / [`crd::hardwaredata_crd`] (or
//! [`install::install`]), not from kube's derived `BareMetalHost::crd()`, which lacks
//! the validation rules and upstream's nullable and atomic markers.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// Lets a spec type read an object without `spec` (or with `spec: null`) as the default
/// spec, as upstream's Go types do (`spec,omitempty`). The type must derive its serde
/// impls with `#[serde(remote = "Self")]`, which turns them into inherent functions.
macro_rules! spec_may_be_absent {
    ($($spec:ty),+ $(,)?) => {$(
        impl serde::Serialize for $spec {
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                <$spec>::serialize(self, serializer)
            }
        }

        impl<'de> serde::Deserialize<'de> for $spec {
            fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                struct Present($spec);
                impl<'de> serde::Deserialize<'de> for Present {
                    fn deserialize<D: serde::Deserializer<'de>>(
                        deserializer: D,
                    ) -> Result<Self, D::Error> {
                        <$spec>::deserialize(deserializer).map(Present)
                    }
                }
                Ok(Option::<Present>::deserialize(deserializer)?
                    .map(|present| present.0)
                    .unwrap_or_default())
            }
        }
    )+};
}
use spec_may_be_absent;

/// Declares the spec of a `metal3.io/v1alpha1` kind around the `#[kube(...)]` entries
/// that differ (kind, names, status, columns). What every kind shares is here:
/// namespaced, `PartialEq`, camelCase JSON names, `None` fields left out, and a spec
/// that may be absent (`remote = "Self"` for `spec_may_be_absent!`).
macro_rules! metal3_kind {
    (
        $(#[doc = $doc:literal])*
        #[kube($($kube:tt)*)]
        pub struct $spec:ident { $($fields:tt)* }
    ) => {
        $(#[doc = $doc])*
        // kube's printcolumn(...) entries repeat keys such as type_ by design.
        #[allow(clippy::duplicated_attributes)]
        #[serde_with::skip_serializing_none]
        #[derive(
            kube::CustomResource,
            serde::Serialize,
            serde::Deserialize,
            Clone,
            Debug,
            Default,
            PartialEq,
            schemars::JsonSchema
        )]
        #[kube(group = "metal3.io", version = "v1alpha1", namespaced, derive = "PartialEq", $($kube)*)]
        #[serde(rename_all = "camelCase", remote = "Self")]
        pub struct $spec { $($fields)* }

        $crate::api::spec_may_be_absent!($spec);
    };
}
use metal3_kind;

pub mod admission;
pub mod claims;
pub mod crd;
pub mod events;
pub mod firmware;
pub mod firmware_pending;
pub mod hardware;
pub mod host;
pub mod images;
pub mod install;
pub mod network;

/// The other kinds' CRDs live with the CRD code (`crd/kinds.rs`); the path
/// `api::kinds` stays.
pub use crd::kinds;

pub use claims::{
    HostClaim, HostClaimSpec, HostClaimStatus, HostDeployPolicy, HostDeployPolicySpec,
};
pub use events::{BMCEventSubscription, BMCEventSubscriptionSpec, BMCEventSubscriptionStatus};
pub use firmware::{
    FirmwareSchema, FirmwareSchemaSpec, HostFirmwareComponents, HostFirmwareComponentsSpec,
    HostFirmwareComponentsStatus, HostFirmwareSettings, HostFirmwareSettingsSpec,
    HostFirmwareSettingsStatus, HostUpdatePolicy, HostUpdatePolicySpec,
};
pub use hardware::{
    Bios, Cpu, DiskType, Firmware, HardwareData, HardwareDataSpec, HardwareDetails,
    HardwareSystemVendor, Lldp, Nic, Storage, Vlan,
};
pub use host::{
    AutomatedCleaningMode, BareMetalHost, BareMetalHostSpec, BareMetalHostStatus, BmcDetails,
    BootMode, ChecksumType, CredentialsStatus, CurrentStep, CustomDeploy, ErrorType,
    FirmwareConfig, HardwareRaidLevel, HardwareRaidVolume, HostNetworkAttachmentRef, Image,
    ImageFormat, InlineUserData, InspectionMode, NetworkInterface, OperationHistory,
    OperationMetric, OperationalStatus, ProvisionStatus, ProvisioningState, RaidConfig,
    RootDeviceHints, SoftwareRaidLevel, SoftwareRaidVolume, StepKind, SwitchPortIdentifier,
};
pub use images::{
    DataImage, DataImageSpec, DataImageStatus, PreprovisioningImage, PreprovisioningImageFormat,
    PreprovisioningImageSpec, PreprovisioningImageStatus,
};
pub use network::{
    BareMetalSwitch, BareMetalSwitchSpec, BareMetalSwitchStatus, HostNetworkAttachment,
    HostNetworkAttachmentSpec,
};

/// A MAC address, six hex pairs joined by colons: the schema pattern of the MAC fields
/// of specs. (`status.hardware`'s NIC MAC keeps upstream's unanchored pattern.)
pub const MAC_ADDRESS_PATTERN: &str = r"^[0-9a-fA-F]{2}(:[0-9a-fA-F]{2}){5}$";

/// API group of every bmo resource.
pub const GROUP: &str = "metal3.io";
/// API version of every bmo resource.
pub const VERSION: &str = "v1alpha1";

/// `namespace/name` of an object, for logs and messages.
pub fn namespaced_name(metadata: &ObjectMeta) -> String {
    format!(
        "{}/{}",
        metadata.namespace.as_deref().unwrap_or_default(),
        metadata.name.as_deref().unwrap_or_default()
    )
}
