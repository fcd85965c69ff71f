//! Ironic API objects, with only the fields bmo reads or writes.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// An Ironic API microversion such as `1.89`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Microversion {
    pub major: u32,
    pub minor: u32,
}

impl Microversion {
    pub const fn new(major: u32, minor: u32) -> Self {
        Self { major, minor }
    }
}

impl fmt::Display for Microversion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

impl FromStr for Microversion {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        s.split_once('.')
            .and_then(|(major, minor)| Some(Self::new(major.parse().ok()?, minor.parse().ok()?)))
            .ok_or_else(|| format!("microversion {s:?} is not MAJOR.MINOR"))
    }
}

/// A node as Ironic returns it.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
pub struct Node {
    pub uuid: String,
    #[serde(default)]
    pub name: Option<String>,
    pub driver: String,
    #[serde(default)]
    pub provision_state: Option<String>,
    #[serde(default)]
    pub target_provision_state: Option<String>,
    #[serde(default)]
    pub power_state: Option<String>,
    #[serde(default)]
    pub target_power_state: Option<String>,
    #[serde(default)]
    pub last_error: Option<String>,
    #[serde(default)]
    pub maintenance: bool,
    #[serde(default)]
    pub maintenance_reason: Option<String>,
    #[serde(default)]
    pub reservation: Option<String>,
    #[serde(default)]
    pub properties: Map<String, Value>,
    #[serde(default)]
    pub instance_info: Map<String, Value>,
    #[serde(default)]
    pub extra: Map<String, Value>,
    /// Ironic masks passwords in what it returns (`******`).
    #[serde(default)]
    pub driver_info: Map<String, Value>,
    #[serde(default)]
    pub instance_uuid: Option<String>,
    #[serde(default)]
    pub automated_clean: Option<bool>,
    #[serde(default)]
    pub fault: Option<String>,
    /// When the provision state last changed (RFC 3339).
    #[serde(default)]
    pub provision_updated_at: Option<String>,
    #[serde(default)]
    pub inspection_started_at: Option<String>,
    #[serde(default)]
    pub inspection_finished_at: Option<String>,
    /// The clean step running now: `{interface, step, ...}` or `{}`.
    #[serde(default)]
    pub clean_step: Option<Value>,
    #[serde(default)]
    pub deploy_step: Option<Value>,
    /// The service step running now (API 1.87), like `clean_step`.
    #[serde(default)]
    pub service_step: Option<Value>,
    #[serde(default)]
    pub boot_interface: Option<String>,
    #[serde(default)]
    pub deploy_interface: Option<String>,
    #[serde(default)]
    pub inspect_interface: Option<String>,
    #[serde(default)]
    pub raid_interface: Option<String>,
    #[serde(default)]
    pub power_interface: Option<String>,
    #[serde(default)]
    pub disable_power_off: bool,
    #[serde(default)]
    pub network_data: Option<Value>,
}

impl Node {
    /// The provision state, `enroll` when Ironic left it empty.
    pub fn provision_state(&self) -> &str {
        self.provision_state.as_deref().unwrap_or("enroll")
    }

    /// The provision state, typed.
    pub fn state(&self) -> ProvisionState {
        ProvisionState::parse(self.provision_state())
    }
}

/// Ironic's provision states (`provision_state` of a node) that bmo acts on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProvisionState {
    Enroll,
    Verifying,
    Manageable,
    Available,
    Active,
    Deploying,
    WaitCallBack,
    DeployFailed,
    Cleaning,
    CleanWait,
    CleanFailed,
    Inspecting,
    InspectWait,
    InspectFailed,
    Deleting,
    Error,
    Adopting,
    AdoptFailed,
    Servicing,
    ServiceWait,
    ServiceFailed,
    Rescuing,
    Unrescuing,
    /// A state bmo has no rule for (rescue, service hold, …); see the node's string.
    Other,
}

impl ProvisionState {
    /// Ironic's spelling of each state, with the typed value.
    const NAMES: &[(&str, ProvisionState)] = &[
        ("enroll", Self::Enroll),
        ("verifying", Self::Verifying),
        ("manageable", Self::Manageable),
        ("available", Self::Available),
        ("active", Self::Active),
        ("deploying", Self::Deploying),
        ("wait call-back", Self::WaitCallBack),
        ("deploy failed", Self::DeployFailed),
        ("cleaning", Self::Cleaning),
        ("clean wait", Self::CleanWait),
        ("clean failed", Self::CleanFailed),
        ("inspecting", Self::Inspecting),
        ("inspect wait", Self::InspectWait),
        ("inspect failed", Self::InspectFailed),
        ("deleting", Self::Deleting),
        ("error", Self::Error),
        ("adopting", Self::Adopting),
        ("adopt failed", Self::AdoptFailed),
        ("servicing", Self::Servicing),
        ("service wait", Self::ServiceWait),
        ("service failed", Self::ServiceFailed),
        ("rescuing", Self::Rescuing),
        ("unrescuing", Self::Unrescuing),
    ];

    pub fn parse(name: &str) -> Self {
        Self::NAMES
            .iter()
            .find(|(n, _)| *n == name)
            .map_or(Self::Other, |(_, state)| *state)
    }

    /// Whether the conductor is working on the node (it refuses most changes then).
    pub fn is_busy(self) -> bool {
        matches!(
            self,
            Self::Verifying
                | Self::Deploying
                | Self::Cleaning
                | Self::Inspecting
                | Self::Deleting
                | Self::Adopting
                | Self::Servicing
                | Self::Rescuing
                | Self::Unrescuing
        )
    }
}

/// The body of `POST /v1/nodes`. Interfaces left `None` take Ironic's defaults.
#[derive(Debug, Clone, Default, Serialize)]
pub struct NodeCreate {
    /// Empty means an unnamed node.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub name: String,
    pub driver: String,
    /// Contains credentials: never log this struct's `driver_info`.
    #[serde(skip_serializing_if = "Map::is_empty")]
    pub driver_info: Map<String, Value>,
    #[serde(skip_serializing_if = "Map::is_empty")]
    pub properties: Map<String, Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub boot_interface: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deploy_interface: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inspect_interface: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub management_interface: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub power_interface: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub raid_interface: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vendor_interface: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bios_interface: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub firmware_interface: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub automated_clean: Option<bool>,
    /// API 1.95: Ironic never powers the node off (reboots instead).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disable_power_off: Option<bool>,
    /// Network configuration for the ramdisk (API 1.66).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub network_data: Option<Value>,
}

/// One operation of a JSON patch (RFC 6902) as Ironic's `PATCH` takes it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PatchOp {
    pub op: &'static str,
    pub path: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value: Option<Value>,
}

impl PatchOp {
    /// Sets `path` (JSON patch `add` replaces an existing member).
    pub fn set(path: impl Into<String>, value: impl Into<Value>) -> Self {
        Self {
            op: "add",
            path: path.into(),
            value: Some(value.into()),
        }
    }

    /// Removes `path`; Ironic refuses to remove what is not there.
    pub fn remove(path: impl Into<String>) -> Self {
        Self {
            op: "remove",
            path: path.into(),
            value: None,
        }
    }
}

/// The body of `PUT /v1/nodes/{id}/states/provision`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ProvisionRequest {
    pub target: ProvisionTarget,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub clean_steps: Option<Vec<Value>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deploy_steps: Option<Vec<Value>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub service_steps: Option<Vec<Value>>,
    /// Contains user data: never log it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub configdrive: Option<Value>,
}

impl ProvisionRequest {
    pub fn new(target: ProvisionTarget) -> Self {
        Self {
            target,
            clean_steps: None,
            deploy_steps: None,
            service_steps: None,
            configdrive: None,
        }
    }
}

/// A port (NIC) of a node.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
pub struct Port {
    pub uuid: String,
    pub address: String,
    pub node_uuid: String,
    #[serde(default)]
    pub pxe_enabled: Option<bool>,
}

/// One virtual media device of a node (`GET /v1/nodes/{id}/vmedia`).
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq, Eq)]
pub struct VirtualMedia {
    /// Redfish media types the device takes (`CD`, `DVD`, `USBStick`, …).
    #[serde(default)]
    pub media_types: Vec<String>,
    #[serde(default)]
    pub inserted: bool,
    /// What the BMC has inserted: Ironic's own copy of the image, not the URL it
    /// was given.
    #[serde(default)]
    pub image: Option<String>,
}

/// One BIOS setting of a node as Ironic caches it from the BMC
/// (`GET /v1/nodes/{id}/bios?detail=True`), with its registry entry when the BMC
/// publishes one.
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
pub struct BiosSetting {
    pub name: String,
    #[serde(default)]
    pub value: Option<String>,
    #[serde(default)]
    pub attribute_type: Option<String>,
    #[serde(default)]
    pub allowable_values: Option<Vec<String>>,
    #[serde(default)]
    pub lower_bound: Option<i64>,
    #[serde(default)]
    pub upper_bound: Option<i64>,
    #[serde(default)]
    pub min_length: Option<i64>,
    #[serde(default)]
    pub max_length: Option<i64>,
    #[serde(default)]
    pub read_only: Option<bool>,
    #[serde(default)]
    pub reset_required: Option<bool>,
    #[serde(default)]
    pub unique: Option<bool>,
}

/// One firmware component of a node (`GET /v1/nodes/{id}/firmware`).
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
pub struct FirmwareComponent {
    /// `bios`, `bmc` or `nic:<id>`.
    pub component: String,
    #[serde(default)]
    pub initial_version: Option<String>,
    #[serde(default)]
    pub current_version: Option<String>,
    #[serde(default)]
    pub last_version_flashed: Option<String>,
    /// When Ironic last changed the record (RFC 3339).
    #[serde(default)]
    pub updated_at: Option<String>,
}

/// Targets of `PUT /v1/nodes/{id}/states/provision`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ProvisionTarget {
    Manage,
    Provide,
    Inspect,
    Active,
    Deleted,
    Rebuild,
    Clean,
    Abort,
    Adopt,
    /// Runs service steps on an active node (API 1.87).
    Service,
}

/// Targets of `PUT /v1/nodes/{id}/states/power`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum PowerTarget {
    #[serde(rename = "power on")]
    On,
    #[serde(rename = "power off")]
    Off,
    #[serde(rename = "rebooting")]
    Reboot,
    #[serde(rename = "soft power off")]
    SoftOff,
    #[serde(rename = "soft rebooting")]
    SoftReboot,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn provision_states_parse_from_ironic_spelling() {
        assert_eq!(
            ProvisionState::parse("wait call-back"),
            ProvisionState::WaitCallBack
        );
        assert_eq!(
            ProvisionState::parse("clean failed"),
            ProvisionState::CleanFailed
        );
        assert_eq!(ProvisionState::parse("rescue wait"), ProvisionState::Other);
        for (name, state) in ProvisionState::NAMES {
            assert_eq!(ProvisionState::parse(name), *state);
        }
    }

    #[test]
    fn microversion_parses_and_orders_numerically() {
        let a: Microversion = "1.9".parse().unwrap();
        let b: Microversion = "1.89".parse().unwrap();
        assert!(a < b);
        assert_eq!(b.to_string(), "1.89");
        assert!("1".parse::<Microversion>().is_err());
        assert!("1.x".parse::<Microversion>().is_err());
    }

    #[test]
    fn power_targets_use_ironic_spelling() {
        assert_eq!(
            serde_json::to_value(PowerTarget::SoftReboot).unwrap(),
            "soft rebooting"
        );
        assert_eq!(
            serde_json::to_value(ProvisionTarget::Manage).unwrap(),
            "manage"
        );
    }
}
