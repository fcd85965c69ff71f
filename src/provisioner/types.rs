//! The provisioner's own inputs and results: only what the API has no type for. The
//! spec's image, root device hints, RAID and the inspected hardware are the API's own
//! types (`crate::api`); the host controller assembles these structs around them.

use std::fmt;
use std::time::Duration;

use crate::api::{HardwareDetails, Image, RaidConfig, RootDeviceHints};
use crate::bmc::BmcAddress;
use crate::credentials::Credentials;

/// A host's identity: its namespace and name, and the Ironic node UUID recorded in
/// `status.provisioning.ID` once known.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct HostId {
    pub namespace: String,
    pub name: String,
}

impl HostId {
    pub fn new(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        Self {
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    /// The Ironic node name: `<namespace>~<name>`.
    pub fn node_name(&self) -> String {
        format!("{}~{}", self.namespace, self.name)
    }
}

impl fmt::Display for HostId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// Which host owns an Ironic node, as the controller knows from the hosts it watches.
/// The provisioner asks before it acts on a node that is not named after the host
/// asking (found by a recorded `status.provisioning.ID`, or by the boot MAC), so that
/// no host takes over a node another host holds, whatever its status says.
pub trait NodeOwners: Send + Sync + fmt::Debug {
    /// An existing host other than `host` that holds the node `uuid` named `name`:
    /// the node is named after it (`namespace~name`), or its status records `uuid`.
    fn other_owner(&self, host: &HostId, uuid: &str, name: Option<&str>) -> Option<HostId>;
}

/// The API's modes, used as they are.
pub use crate::api::{AutomatedCleaningMode, BootMode, CurrentStep, InspectionMode, StepKind};

/// IPA kernel/ramdisk or ISO URLs for the deploy and inspection ramdisk.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeployRamdisk {
    pub kernel_url: Option<String>,
    pub ramdisk_url: Option<String>,
    pub iso_url: Option<String>,
    /// Appended to Ironic's `%default%` kernel parameters.
    pub extra_kernel_params: Option<String>,
}

/// What the provisioner needs to know about a host on every call.
#[derive(Debug, Clone)]
pub struct Host {
    pub id: HostId,
    /// The Ironic node UUID from `status.provisioning.ID`, if recorded.
    pub provisioning_id: Option<String>,
    pub bmc: BmcAddress,
    pub credentials: Credentials,
    /// Set by the controller when the credentials secret changed since they were
    /// last sent (Ironic never shows the password back, so bmo cannot compare it).
    /// The `register` call that sends them returns `changed`; the controller then
    /// records them as tried and clears this flag.
    pub credentials_changed: bool,
    pub disable_certificate_verification: bool,
    /// Normalised (lower case, colons); see [`crate::bmc::parse_mac`].
    pub boot_mac: Option<String>,
    pub boot_mode: BootMode,
    /// `spec.inspectionMode` as in effect: `Agent` when unset, `Disabled` also when
    /// the `inspect.metal3.io` annotation says so.
    pub inspection_mode: InspectionMode,
    pub cleaning_mode: AutomatedCleaningMode,
    pub architecture: Option<String>,
    pub externally_provisioned: bool,
    pub disable_power_off: bool,
    pub deploy_ramdisk: DeployRamdisk,
    /// `preprovisioningNetworkDataName`'s network data (JSON or YAML) for the
    /// ramdisk; Ironic keeps it as the node's `network_data`.
    pub preprovisioning_network_data: Option<Vec<u8>>,
    /// The last failure was of the kind this call would produce: start over rather
    /// than reporting it again.
    pub restart_on_failure: bool,
}

/// Everything `provision` (and `adopt`) needs.
#[derive(Debug, Clone, Default)]
pub struct ProvisionRequest {
    /// `spec.image`.
    pub image: Option<Image>,
    /// `spec.customDeploy.method`: a deploy step of a custom ramdisk.
    pub custom_deploy: Option<String>,
    /// `spec.rootDeviceHints`.
    pub root_device_hints: Option<RootDeviceHints>,
    /// The BareMetalHost's `metadata.uid`: Ironic's `instance_uuid`.
    pub instance_uuid: String,
    pub user_data: Option<Vec<u8>>,
    /// OpenStack `network_data.json` (JSON or YAML). Without it a default brings
    /// every inspected NIC up with DHCP.
    pub network_data: Option<Vec<u8>>,
    /// Extra meta data (JSON or YAML) merged over the generated one.
    pub meta_data: Option<Vec<u8>>,
    /// Inspected hardware, for the default network data.
    pub hardware: Option<HardwareDetails>,
}

/// What `prepare` should do (manual cleaning before the host becomes available).
#[derive(Debug, Clone, Default)]
pub struct PrepareRequest {
    /// `spec.raid`: an absent list leaves that kind of RAID as it is; an empty one
    /// deletes it.
    pub raid: Option<RaidConfig>,
    /// BIOS settings to apply, name → value.
    pub bios_settings: Vec<(String, serde_json::Value)>,
    /// Firmware images to flash (component and URL), with Ironic's firmware
    /// interface's `update` clean step.
    pub firmware_updates: Vec<crate::api::firmware::FirmwareUpdate>,
    /// Opt-in: erase every disk completely (slow), not only its metadata.
    pub full_disk_wipe: bool,
    /// The wanted settings differ from what was last applied.
    pub unprepared: bool,
}

/// Input for servicing a provisioned host: the BIOS settings and firmware updates
/// still to apply.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ServiceRequest {
    /// BIOS settings to apply, name → value.
    pub bios_settings: Vec<(String, serde_json::Value)>,
    /// Firmware images to flash (component and URL).
    pub firmware_updates: Vec<crate::api::firmware::FirmwareUpdate>,
    /// The host's firmware objects ask for nothing any more: servicing that waits or
    /// failed is aborted, so the host returns to service as it was.
    pub withdrawn: bool,
}

impl ServiceRequest {
    /// Nothing to apply.
    pub fn is_empty(&self) -> bool {
        self.bios_settings.is_empty() && self.firmware_updates.is_empty()
    }
}

/// Power-off and reboot style.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PowerMode {
    /// Ask the OS to shut down (ACPI), giving up after the timeout.
    Soft,
    Hard,
}

/// Soft power off / reboot waits this long before Ironic reports failure.
pub const SOFT_POWER_OFF_TIMEOUT: Duration = Duration::from_secs(180);

/// What one provisioner call did. Every call says whether it changed something,
/// when to look again, and, on failure, one human sentence (every time the failure
/// is seen, not only the first time).
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome<T> {
    /// The call changed something in Ironic (the host's status may need saving).
    pub changed: bool,
    /// Look again after this long; `None` means the operation reached its end.
    pub requeue_after: Option<Duration>,
    /// Ironic's reason as one sentence, when the operation failed.
    pub error: Option<String>,
    pub value: T,
}

impl<T> Outcome<T> {
    /// Finished, nothing more to wait for.
    pub fn done(value: T) -> Self {
        Self {
            changed: false,
            requeue_after: None,
            error: None,
            value,
        }
    }

    /// Something was changed; look again after `after`.
    pub fn changed(value: T, after: Duration) -> Self {
        Self {
            changed: true,
            requeue_after: Some(after),
            error: None,
            value,
        }
    }

    /// Nothing changed yet; look again after `after`.
    pub fn wait(value: T, after: Duration) -> Self {
        Self {
            changed: false,
            requeue_after: Some(after),
            error: None,
            value,
        }
    }

    /// Failed with a human-readable reason.
    pub fn failed(value: T, error: impl Into<String>) -> Self {
        Self {
            changed: true,
            requeue_after: None,
            error: Some(error.into()),
            value,
        }
    }

    pub fn is_done(&self) -> bool {
        self.requeue_after.is_none() && self.error.is_none()
    }

    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> Outcome<U> {
        Outcome {
            changed: self.changed,
            requeue_after: self.requeue_after,
            error: self.error,
            value: f(self.value),
        }
    }
}

/// Result of `register`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Registration {
    /// The Ironic node UUID (for `status.provisioning.ID`).
    pub provisioning_id: Option<String>,
    /// Ironic reached the BMC with these credentials (the node got to `manageable`
    /// or further).
    pub credentials_valid: bool,
    /// The node's power as read while registering, so a settled host costs one
    /// read of its node per reconcile.
    pub power: PowerState,
    /// The node already runs its deployment (Ironic `active`, not in maintenance):
    /// a provisioned host needs no adoption.
    pub deployed: bool,
    /// Changed credentials could not be sent yet (the provisioner is busy with the
    /// host): they are still untried, and go out at a later registration.
    pub credentials_pending: bool,
    /// A digest of what bmo acts on in the node as this registration saw it (the
    /// same digest [`super::Provisioner::node_states`] lists), so a host at rest is
    /// looked at again only when it changes; `None` when the provisioner cannot list.
    pub node_state: Option<u64>,
}

/// Result of `inspect`.
#[derive(Debug, Clone, PartialEq)]
pub enum InspectStatus {
    /// Inspection was started by this call.
    Started,
    InProgress,
    Complete(Box<HardwareDetails>),
}

/// Result of `prepare` (manual cleaning): the same as any other long operation's.
pub type PrepareStatus = Progress;

/// Result of `prepare` / `provision` / `deprovision` / `adopt`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Progress {
    /// The operation was started by this call.
    pub started: bool,
    /// The step Ironic is running (e.g. clean step `raid.create_configuration`),
    /// when it says.
    pub current_step: Option<CurrentStep>,
}

impl Progress {
    /// The operation was started by this call.
    pub fn started() -> Self {
        Self {
            started: true,
            current_step: None,
        }
    }

    /// The operation runs, at step `name` of `kind` when the provisioner says.
    pub fn running(kind: StepKind, name: Option<String>) -> Self {
        Self {
            started: false,
            current_step: name.map(|name| CurrentStep { kind, name }),
        }
    }
}

/// Observed power.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum PowerState {
    On,
    Off,
    #[default]
    Unknown,
}

impl PowerState {
    /// On as `true`, off as `false`; `None` when unknown.
    pub fn known(self) -> Option<bool> {
        match self {
            PowerState::On => Some(true),
            PowerState::Off => Some(false),
            PowerState::Unknown => None,
        }
    }
}
