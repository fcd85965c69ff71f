//! Switch kinds: `BareMetalSwitch` (a top-of-rack switch Ironic's networking
//! configures) and `HostNetworkAttachment` (the switch-port settings a BareMetalHost's
//! NIC references in `spec.networkInterfaces`). Switches have a controller
//! (`controller::switches`, with IRONIC_NETWORKING_ENABLED); attachments one that
//! records which hosts use them (`controller::switches::attachments`).

use k8s_openapi::api::core::v1::SecretReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::api::MAC_ADDRESS_PATTERN;

/// Annotation bmo keeps on each HostNetworkAttachment: the BareMetalHost interfaces
/// that reference it (`namespace/host[interface]`, comma-separated), empty or absent
/// when none. The admission policy `bmo-hostnetworkattachment-in-use` refuses changing
/// the spec of, or deleting, an attachment while it is set.
pub const IN_USE_ANNOTATION: &str = "hostnetworkattachment.metal3.io/in-use-by";

/// Condition type: the switch's spec and credentials are usable.
pub const SWITCH_VALID: &str = "Valid";

/// Driver that configures a switch.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
pub enum SwitchDriver {
    /// networking-generic-switch.
    #[default]
    #[serde(rename = "generic-switch")]
    GenericSwitch,
}

super::metal3_kind! {
    /// A switch that Ironic's networking configures for the hosts cabled to it.
    #[kube(
        kind = "BareMetalSwitch", plural = "baremetalswitches", singular = "baremetalswitch",
        status = "BareMetalSwitchStatus", shortname = "bms",
        doc = "A switch configured for the BareMetalHosts cabled to it.",
        printcolumn(name = "Driver", type_ = "string", json_path = ".spec.driver", description = "Driver that configures the switch"),
        printcolumn(name = "Device Type", type_ = "string", json_path = ".spec.deviceType", description = "Kind of switch, as the driver names it"),
        printcolumn(name = "Address", type_ = "string", json_path = ".spec.address", description = "Management address"),
        printcolumn(name = "Valid", type_ = "string", json_path = ".status.conditions[?(@.type==\"Valid\")].status", description = "Whether the switch is usable")
    )]
    pub struct BareMetalSwitchSpec {
        /// Management address (host name or IP).
        pub address: String,

        /// MAC address of the management interface; matches the switch ID that LLDP and
        /// `spec.networkInterfaces[].switchPort.switchID` report.
        #[schemars(regex(pattern = MAC_ADDRESS_PATTERN))]
        pub mac_address: String,

        /// Driver that configures the switch.
        #[serde(default)]
        pub driver: SwitchDriver,

        /// Kind of switch as the driver names it (e.g. netmiko_cisco_ios).
        pub device_type: String,

        /// Secret with the credentials for the switch.
        pub credentials: Option<SecretReference>,

        /// Management port (SSH) when not the default.
        #[schemars(range(min = 1, max = 65535))]
        pub port: Option<i32>,

        /// Accept any TLS certificate from the switch. Insecure.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        pub disable_certificate_verification: bool,
    }
}

/// What bmo found about the switch.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct BareMetalSwitchStatus {
    /// `Valid`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// Switch-port mode.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum SwitchPortMode {
    /// Untagged traffic on the native VLAN only.
    #[default]
    Access,
    /// Tagged traffic on the allowed VLANs, untagged on the native one.
    Trunk,
    /// Like trunk, as the switch's hybrid mode.
    Hybrid,
}

super::metal3_kind! {
    /// Switch-port settings that BareMetalHost NICs reference.
    #[kube(
        kind = "HostNetworkAttachment", plural = "hostnetworkattachments", singular = "hostnetworkattachment",
        doc = "Switch-port settings (mode, VLANs, MTU) for the BareMetalHost NICs that reference it.",
        printcolumn(name = "Mode", type_ = "string", json_path = ".spec.mode", description = "Switch-port mode"),
        printcolumn(name = "Native VLAN", type_ = "integer", json_path = ".spec.nativeVLAN", description = "Untagged VLAN"),
        printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp", description = "Time since the attachment was created")
    )]
    pub struct HostNetworkAttachmentSpec {
        /// Switch-port mode.
        #[serde(default)]
        pub mode: SwitchPortMode,

        /// Untagged VLAN.
        #[serde(rename = "nativeVLAN")]
        #[schemars(range(min = 1, max = 4094))]
        pub native_vlan: i64,

        /// Tagged VLANs (trunk and hybrid modes): IDs (`100`) or ranges (`200-210`).
        #[serde(
            default,
            rename = "allowedVLANs",
            skip_serializing_if = "Vec::is_empty"
        )]
        #[schemars(inner(regex(pattern = r"^\d+(-\d+)?$")))]
        pub allowed_vlans: Vec<String>,

        /// MTU of the port.
        #[schemars(range(min = 68, max = 9216))]
        pub mtu: Option<i64>,
    }
}
