//! What bmo reports about a BareMetalHost: its status and the state, error and step
//! types in it.

use std::fmt;

use k8s_openapi::api::core::v1::SecretReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::spec::{BootMode, CustomDeploy, FirmwareConfig, Image, RaidConfig, RootDeviceHints};
use crate::api::hardware::HardwareDetails;

/// What bmo observed about the host.
#[serde_with::skip_serializing_none]
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BareMetalHostStatus {
    /// Overall health of bmo's management of the host.
    pub operational_status: OperationalStatus,

    /// Kind of the last failure, set while operationalStatus is error.
    pub error_type: Option<ErrorType>,

    /// When bmo last wrote this status.
    pub last_updated: Option<Time>,

    /// Deprecated: the hardware profile bmo chose.
    pub hardware_profile: Option<String>,

    /// Inspection results (deprecated copy; the HardwareData resource of the same name
    /// holds the canonical one).
    pub hardware: Option<HardwareDetails>,

    /// The provisioning backend's view of the host.
    pub provisioning: ProvisionStatus,

    /// The BMC credentials that last worked.
    pub good_credentials: Option<CredentialsStatus>,

    /// The BMC credentials last sent to Ironic.
    pub tried_credentials: Option<CredentialsStatus>,

    /// The last error, empty when there is none.
    pub error_message: String,

    /// Last observed power state.
    pub powered_on: bool,

    /// Start and end times of the main operations.
    pub operation_history: Option<OperationHistory>,

    /// Errors since the last success; drives the retry backoff.
    #[schemars(extend("default" = 0))]
    pub error_count: i64,

    /// Consecutive provisioning failures for the current image.
    #[schemars(extend("default" = 0))]
    pub provisioning_fail_count: i64,

    /// spec.image as it was at the last provisioning attempt; a different image resets
    /// provisioningFailCount.
    pub last_attempted_image: Option<Image>,

    /// Standard conditions: Manageable, AvailableForProvisioning, Provisioned, Ready,
    /// Progressing, Healthy.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}

/// Overall health of bmo's management of a host.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
pub enum OperationalStatus {
    /// Not yet known ("").
    #[default]
    #[serde(rename = "")]
    None,
    /// Configured and manageable.
    #[serde(rename = "OK")]
    Ok,
    /// Only partly configured (for example no BMC credentials yet).
    #[serde(rename = "discovered")]
    Discovered,
    /// Something failed; see errorType and errorMessage.
    #[serde(rename = "error")]
    Error,
    /// Waiting for a provisioning slot (provisioning limit).
    #[serde(rename = "delayed")]
    Delayed,
    /// Removed from Ironic through the detached annotation.
    #[serde(rename = "detached")]
    Detached,
    /// Firmware changes are being applied to a provisioned host.
    #[serde(rename = "servicing")]
    Servicing,
}

/// Kind of failure.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum ErrorType {
    /// Re-registering an already provisioned host failed.
    #[serde(rename = "provisioned registration error")]
    ProvisionedRegistration,
    /// The BMC could not be reached or the credentials were refused.
    #[serde(rename = "registration error")]
    Registration,
    /// Hardware inspection failed.
    #[serde(rename = "inspection error")]
    Inspection,
    /// Cleaning, RAID or firmware steps failed.
    #[serde(rename = "preparation error")]
    Preparation,
    /// Provisioning or deprovisioning failed.
    #[serde(rename = "provisioning error")]
    Provisioning,
    /// Changing the power state failed.
    #[serde(rename = "power management error")]
    PowerManagement,
    /// Detaching the host from Ironic failed (missing from upstream's CRD enum).
    #[serde(rename = "detach error")]
    Detach,
    /// Servicing (firmware changes on a provisioned host) failed.
    #[serde(rename = "servicing error")]
    Servicing,
}

/// Where the host is in its lifecycle.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
pub enum ProvisioningState {
    /// Not yet handled ("").
    #[default]
    #[serde(rename = "")]
    None,
    /// Not enough information to register the host (no BMC details).
    #[serde(rename = "unmanaged")]
    Unmanaged,
    /// Being registered with Ironic and its BMC checked.
    #[serde(rename = "registering")]
    Registering,
    /// Legacy state, no longer entered.
    #[serde(rename = "match profile")]
    MatchProfile,
    /// Cleaning, RAID and firmware settings are being applied.
    #[serde(rename = "preparing")]
    Preparing,
    /// Legacy name of available.
    #[serde(rename = "ready")]
    Ready,
    /// Ready to be provisioned.
    #[serde(rename = "available")]
    Available,
    /// The image is being written.
    #[serde(rename = "provisioning")]
    Provisioning,
    /// The image was written and the host booted it.
    #[serde(rename = "provisioned")]
    Provisioned,
    /// Runs an OS bmo did not install; only power is managed.
    #[serde(rename = "externally provisioned")]
    ExternallyProvisioned,
    /// The image is being removed and the disks cleaned.
    #[serde(rename = "deprovisioning")]
    Deprovisioning,
    /// Hardware is being inspected.
    #[serde(rename = "inspecting")]
    Inspecting,
    /// Being powered off before the host is deleted.
    #[serde(rename = "powering off before delete")]
    PoweringOffBeforeDelete,
    /// Being removed from Ironic before the object goes away.
    #[serde(rename = "deleting")]
    Deleting,
}

/// The provisioning backend's view of a host.
#[serde_with::skip_serializing_none]
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProvisionStatus {
    /// Lifecycle state.
    pub state: ProvisioningState,

    /// The Ironic node UUID (the JSON key is literally `ID`).
    #[serde(rename = "ID")]
    pub id: String,

    /// The image last provisioned successfully.
    pub image: Option<Image>,

    /// The root device hints in effect.
    pub root_device_hints: Option<RootDeviceHints>,

    /// The boot mode in effect.
    pub boot_mode: Option<BootMode>,

    /// The RAID layout applied.
    pub raid: Option<RaidConfig>,

    /// The spec.firmware the last preparing applied.
    pub firmware: Option<FirmwareConfig>,

    /// The custom deploy step applied.
    pub custom_deploy: Option<CustomDeploy>,

    /// The clean, deploy or service step Ironic is running now (bmo's addition).
    pub current_step: Option<CurrentStep>,
}

/// A step Ironic is running for the host.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
pub struct CurrentStep {
    /// What the step belongs to.
    #[serde(rename = "type")]
    pub kind: StepKind,
    /// The step as Ironic names it, `interface.step` (e.g. `deploy.erase_devices_metadata`).
    pub name: String,
}

/// What a running step belongs to.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum StepKind {
    Clean,
    Deploy,
    Service,
}

impl std::fmt::Display for StepKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            StepKind::Clean => "clean",
            StepKind::Deploy => "deploy",
            StepKind::Service => "service",
        })
    }
}

/// A BMC credentials Secret at a given resourceVersion.
#[serde_with::skip_serializing_none]
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CredentialsStatus {
    /// The Secret.
    pub credentials: Option<SecretReference>,
    /// Its resourceVersion at the time.
    pub credentials_version: Option<String>,
}

/// Start and end of the main operations.
#[serde_with::skip_serializing_none]
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct OperationHistory {
    /// Registration.
    pub register: Option<OperationMetric>,
    /// Inspection.
    pub inspect: Option<OperationMetric>,
    /// Provisioning.
    pub provision: Option<OperationMetric>,
    /// Deprovisioning.
    pub deprovision: Option<OperationMetric>,
}

/// When one operation started and ended.
#[serde_with::skip_serializing_none]
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct OperationMetric {
    /// Start time; null or absent when it has not started.
    pub start: Option<Time>,
    /// End time; null or absent while it runs.
    pub end: Option<Time>,
}

impl ProvisioningState {
    /// The JSON value, e.g. `"externally provisioned"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::None => "",
            Self::Unmanaged => "unmanaged",
            Self::Registering => "registering",
            Self::MatchProfile => "match profile",
            Self::Preparing => "preparing",
            Self::Ready => "ready",
            Self::Available => "available",
            Self::Provisioning => "provisioning",
            Self::Provisioned => "provisioned",
            Self::ExternallyProvisioned => "externally provisioned",
            Self::Deprovisioning => "deprovisioning",
            Self::Inspecting => "inspecting",
            Self::PoweringOffBeforeDelete => "powering off before delete",
            Self::Deleting => "deleting",
        }
    }
}

impl ErrorType {
    /// The JSON value, e.g. `"registration error"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ProvisionedRegistration => "provisioned registration error",
            Self::Registration => "registration error",
            Self::Inspection => "inspection error",
            Self::Preparation => "preparation error",
            Self::Provisioning => "provisioning error",
            Self::PowerManagement => "power management error",
            Self::Detach => "detach error",
            Self::Servicing => "servicing error",
        }
    }
}

impl OperationalStatus {
    /// The JSON value, e.g. `"OK"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::None => "",
            Self::Ok => "OK",
            Self::Discovered => "discovered",
            Self::Error => "error",
            Self::Delayed => "delayed",
            Self::Detached => "detached",
            Self::Servicing => "servicing",
        }
    }
}

/// `Display` as the JSON value (`as_str`), for enums that have one.
macro_rules! display_as_json_value {
    ($($kind:ty),+) => {$(
        impl fmt::Display for $kind {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }
    )+};
}

display_as_json_value!(ProvisioningState, ErrorType, OperationalStatus);
