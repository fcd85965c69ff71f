//! Firmware kinds: `HostFirmwareSettings` (BIOS settings wanted and found),
//! `FirmwareSchema` (what settings a model has, shared by identical hosts),
//! `HostFirmwareComponents` (firmware versions and updates) and `HostUpdatePolicy`
//! (whether changes may run on a provisioned host, through servicing).
//!
//! Each is named after its BareMetalHost and lives in the host's namespace. bmo serves
//! them; `controller::firmware` manages HostFirmwareSettings, FirmwareSchema and
//! HostFirmwareComponents, and adds each host to its HostUpdatePolicy's owners; the
//! host controller reads the policy when it services.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Condition type: `spec.settings` differs from what the host has.
pub const SETTINGS_CHANGE_DETECTED: &str = "ChangeDetected";
/// Condition type: `spec.settings` fits the FirmwareSchema.
pub const SETTINGS_VALID: &str = "Valid";

/// Condition type: `spec.updates` differs from `status.updates` (the updates applied).
pub const COMPONENTS_CHANGE_DETECTED: &str = "ChangeDetected";
/// Condition type: every component named in `spec.updates` is one bmo can update.
pub const COMPONENTS_VALID: &str = "Valid";
/// Components named `nic:<id>` are network cards (upstream's prefix).
pub const NIC_COMPONENT_PREFIX: &str = "nic:";

super::metal3_kind! {
    /// BIOS settings of one host: `spec` holds the wanted values, `status` what the BMC reports.
    #[kube(
        kind = "HostFirmwareSettings", plural = "hostfirmwaresettings", singular = "hostfirmwaresettings",
        status = "HostFirmwareSettingsStatus", shortname = "hfs",
        doc = "BIOS settings of the BareMetalHost of the same name: wanted (spec) and current (status)."
    )]
    pub struct HostFirmwareSettingsSpec {
        /// Setting name to wanted value (a string or an integer).
        pub settings: BTreeMap<String, IntOrString>,
    }
}

/// What the BMC reports for the host's BIOS.
#[serde_with::skip_serializing_none]
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HostFirmwareSettingsStatus {
    /// The FirmwareSchema that describes these settings.
    #[serde(rename = "schema")]
    pub firmware_schema: Option<SchemaReference>,

    /// Setting name to current value.
    pub settings: BTreeMap<String, String>,

    /// When the settings were last read.
    pub last_updated: Option<Time>,

    /// `Valid` and `ChangeDetected`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// Name and namespace of a FirmwareSchema.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct SchemaReference {
    pub namespace: String,
    pub name: String,
}

super::metal3_kind! {
    /// The settings a hardware model offers, with types and limits. Hosts whose schemas
    /// are identical share one.
    #[kube(
        kind = "FirmwareSchema", plural = "firmwareschemas", singular = "firmwareschema",
        doc = "The BIOS settings of a hardware model: type, allowed values, limits, read-only flag."
    )]
    pub struct FirmwareSchemaSpec {
        /// Vendor of the hardware the schema was read from.
        pub hardware_vendor: Option<String>,

        /// Model of the hardware the schema was read from.
        pub hardware_model: Option<String>,

        /// Setting name to its description.
        pub schema: BTreeMap<String, SettingSchema>,
    }
}

/// Type of a BIOS setting.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum SettingType {
    Enumeration,
    String,
    Integer,
    Boolean,
    Password,
}

/// What one BIOS setting accepts. Ironic's own field names (snake case), as upstream.
#[serde_with::skip_serializing_none]
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub struct SettingSchema {
    /// Value type.
    pub attribute_type: Option<SettingType>,

    /// The values an Enumeration setting takes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allowable_values: Vec<String>,

    /// Smallest value of an Integer setting.
    pub lower_bound: Option<i64>,

    /// Largest value of an Integer setting.
    pub upper_bound: Option<i64>,

    /// Shortest value of a String setting.
    pub min_length: Option<i64>,

    /// Longest value of a String setting.
    pub max_length: Option<i64>,

    /// The setting cannot be changed.
    pub read_only: Option<bool>,

    /// The value must be unique among hosts.
    pub unique: Option<bool>,
}

super::metal3_kind! {
    /// Firmware versions of one host, and the updates to apply.
    #[kube(
        kind = "HostFirmwareComponents", plural = "hostfirmwarecomponents", singular = "hostfirmwarecomponents",
        status = "HostFirmwareComponentsStatus",
        doc = "Firmware components of the BareMetalHost of the same name: updates to apply (spec) and versions found (status)."
    )]
    pub struct HostFirmwareComponentsSpec {
        /// Firmware images to flash.
        pub updates: Vec<FirmwareUpdate>,
    }
}

/// One firmware image for one component.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct FirmwareUpdate {
    /// `bios`, `bmc` or `nic:<id>`.
    pub component: String,
    /// Where Ironic downloads the image from.
    pub url: String,
}

/// Firmware state of the host.
#[serde_with::skip_serializing_none]
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HostFirmwareComponentsStatus {
    /// The updates last applied.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub updates: Vec<FirmwareUpdate>,

    /// Versions of each component.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub components: Vec<FirmwareComponentStatus>,

    /// When the components were last read.
    pub last_updated: Option<Time>,

    /// `Valid` and `ChangeDetected`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// Versions of one firmware component.
#[serde_with::skip_serializing_none]
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FirmwareComponentStatus {
    /// `bios`, `bmc` or `nic:<id>`.
    pub component: String,
    /// Version found when the host was first seen.
    pub initial_version: String,
    /// Version running now.
    pub current_version: Option<String>,
    /// Version of the last image flashed.
    pub last_version_flashed: Option<String>,
    /// When the component was last flashed.
    pub updated_at: Option<Time>,
}

/// When firmware changes may run.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum UpdatePolicy {
    /// Only while the host is being prepared (before provisioning).
    #[serde(rename = "onPreparing")]
    OnPreparing,
    /// Also on a provisioned host, through Ironic's servicing, during a reboot.
    #[serde(rename = "onReboot")]
    OnReboot,
}

super::metal3_kind! {
    /// Whether firmware changes may be applied to the provisioned BareMetalHost of the
    /// same name.
    #[kube(
        kind = "HostUpdatePolicy", plural = "hostupdatepolicies", singular = "hostupdatepolicy",
        doc = "Whether changed firmware settings and updates run on the provisioned BareMetalHost of the same name."
    )]
    pub struct HostUpdatePolicySpec {
        /// When HostFirmwareSettings changes are applied.
        pub firmware_settings: Option<UpdatePolicy>,
        /// When HostFirmwareComponents updates are applied.
        pub firmware_updates: Option<UpdatePolicy>,
    }
}
