//! What bmo reports about a BareMetalHost: its status and the state, error and step
//! types in it.

use std::fmt;

use k8s_openapi::api::core::v1::SecretReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::spec::{BootMode, CustomDeploy, FirmwareConfig, Image, RaidConfig, RootDeviceHints};
use crate::api::hardware::HardwareDetails;

/// An enum of JSON strings, each written once: it is the variant's serde name, what
/// `as_str` returns and what `Display` prints. `ALL` lists the variants.
macro_rules! json_enum {
    (
        $(#[$attr:meta])*
        pub enum $name:ident {
            $($(#[$variant_attr:meta])* $variant:ident = $json:literal,)+
        }
    ) => {
        $(#[$attr])*
        pub enum $name {
            $($(#[$variant_attr])* #[serde(rename = $json)] $variant,)+
        }

        impl $name {
            /// Every variant, in declaration order.
            pub const ALL: &[Self] = &[$(Self::$variant),+];

            /// The JSON value.
            pub fn as_str(self) -> &'static str {
                match self {
                    $(Self::$variant => $json,)+
                }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

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

json_enum! {
    /// Overall health of bmo's management of a host.
    #[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
    pub enum OperationalStatus {
        /// Not yet known ("").
        #[default]
        None = "",
        /// Configured and manageable.
        Ok = "OK",
        /// Only partly configured (for example no BMC credentials yet).
        Discovered = "discovered",
        /// Something failed; see errorType and errorMessage.
        Error = "error",
        /// Waiting for a provisioning slot (provisioning limit).
        Delayed = "delayed",
        /// Removed from Ironic through the detached annotation.
        Detached = "detached",
        /// Firmware changes are being applied to a provisioned host.
        Servicing = "servicing",
    }
}

json_enum! {
    /// Kind of failure.
    #[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
    pub enum ErrorType {
        /// Re-registering an already provisioned host failed.
        ProvisionedRegistration = "provisioned registration error",
        /// The BMC could not be reached or the credentials were refused.
        Registration = "registration error",
        /// Hardware inspection failed.
        Inspection = "inspection error",
        /// Cleaning, RAID or firmware steps failed.
        Preparation = "preparation error",
        /// Provisioning or deprovisioning failed.
        Provisioning = "provisioning error",
        /// Changing the power state failed.
        PowerManagement = "power management error",
        /// Detaching the host from Ironic failed (missing from upstream's CRD enum).
        Detach = "detach error",
        /// Servicing (firmware changes on a provisioned host) failed.
        Servicing = "servicing error",
    }
}

json_enum! {
    /// Where the host is in its lifecycle.
    #[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
    pub enum ProvisioningState {
        /// Not yet handled ("").
        #[default]
        None = "",
        /// Not enough information to register the host (no BMC details).
        Unmanaged = "unmanaged",
        /// Being registered with Ironic and its BMC checked.
        Registering = "registering",
        /// Legacy state, no longer entered.
        MatchProfile = "match profile",
        /// Cleaning, RAID and firmware settings are being applied.
        Preparing = "preparing",
        /// Legacy name of available.
        Ready = "ready",
        /// Ready to be provisioned.
        Available = "available",
        /// The image is being written.
        Provisioning = "provisioning",
        /// The image was written and the host booted it.
        Provisioned = "provisioned",
        /// Runs an OS bmo did not install; only power is managed.
        ExternallyProvisioned = "externally provisioned",
        /// The image is being removed and the disks cleaned.
        Deprovisioning = "deprovisioning",
        /// Hardware is being inspected.
        Inspecting = "inspecting",
        /// Being powered off before the host is deleted.
        PoweringOffBeforeDelete = "powering off before delete",
        /// Being removed from Ironic before the object goes away.
        Deleting = "deleting",
    }
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

json_enum! {
    /// What a running step belongs to.
    #[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
    pub enum StepKind {
        Clean = "clean",
        Deploy = "deploy",
        Service = "service",
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
