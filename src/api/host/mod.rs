//! `BareMetalHost`: one physical server, its BMC, what to put on it, and what bmo saw.
//!
//! Field doc comments become the CRD's descriptions (`kubectl explain bmh.spec`).
//! Validation beyond types, enums and patterns lives in [`crate::api::crd`].
//!
//! This module holds the resource and its spec; `spec` the spec's parts, `status` the
//! status, `queries` the questions controllers ask of a host. All are re-exported here.

use k8s_openapi::api::core::v1::{ObjectReference, SecretReference, Taint};

use crate::api::MAC_ADDRESS_PATTERN;

mod queries;
mod spec;
mod status;
#[cfg(test)]
mod tests;

pub use spec::{
    AutomatedCleaningMode, BmcDetails, BootMode, ChecksumType, CustomDeploy, FirmwareConfig,
    HardwareRaidLevel, HardwareRaidVolume, HostNetworkAttachmentRef, Image, ImageFormat,
    InlineUserData, InspectionMode, NetworkInterface, RaidConfig, RootDeviceHints,
    SoftwareRaidLevel, SoftwareRaidVolume, SwitchPortIdentifier,
};
pub use status::{
    BareMetalHostStatus, CredentialsStatus, CurrentStep, ErrorType, OperationHistory,
    OperationMetric, OperationalStatus, ProvisionStatus, ProvisioningState, StepKind,
};

/// Finalizer bmo keeps on every host until Ironic has forgotten it.
pub const FINALIZER: &str = "baremetalhost.metal3.io";
/// Upstream's hardware profile names (`spec.hardwareProfile`, deprecated: they only
/// choose default root device hints).
pub const HARDWARE_PROFILES: &[&str] = &[
    "unknown",
    "libvirt",
    "dell",
    "dell-raid",
    "openstack",
    "empty",
];

/// Any value stops reconciliation of the host.
pub const PAUSED_ANNOTATION: &str = "baremetalhost.metal3.io/paused";
/// Removes the host from Ironic but keeps the object; "" or JSON `{"deleteAction": ...}`.
pub const DETACHED_ANNOTATION: &str = "baremetalhost.metal3.io/detached";
/// A JSON copy of the status, used to restore it after a move between clusters.
pub const STATUS_ANNOTATION: &str = "baremetalhost.metal3.io/status";
/// Set by `clusterctl move` on the source object just before it deletes it: the host
/// lives on elsewhere, so its deletion here leaves the provisioner's node as it is.
pub const DELETE_FOR_MOVE_ANNOTATION: &str = "clusterctl.cluster.x-k8s.io/delete-for-move";
/// `disabled` turns inspection off (legacy form of `spec.inspectionMode: disabled`);
/// any other value on an available host asks for a new inspection.
pub const INSPECT_ANNOTATION: &str = "inspect.metal3.io";
/// JSON `HardwareDetails` supplied by the user instead of inspection.
pub const HARDWARE_DETAILS_ANNOTATION: &str = "inspect.metal3.io/hardwaredetails";
/// `reboot.metal3.io` (one-shot reboot) or `reboot.metal3.io/<key>` (hold powered off).
pub const REBOOT_ANNOTATION_PREFIX: &str = "reboot.metal3.io";
/// bmo addition: with value `"true"`, a host whose `spec.consumerRef` is set may be
/// deleted (the admission policy in deploy/admission refuses that otherwise).
pub const ALLOW_DELETE_WHILE_CONSUMED_ANNOTATION: &str =
    "baremetalhost.metal3.io/allow-delete-while-consumed";

super::metal3_kind! {
    /// Desired state of a bare-metal host.
    #[kube(
        kind = "BareMetalHost", plural = "baremetalhosts", singular = "baremetalhost",
        status = "BareMetalHostStatus", shortname = "bmh", shortname = "bmhost",
        doc = "A physical server managed through its BMC: how to reach it, what to deploy on it, and what bmo observed.",
        printcolumn(name = "Status", type_ = "string", json_path = ".status.operationalStatus", description = "Operational status", priority = 1),
        printcolumn(name = "State", type_ = "string", json_path = ".status.provisioning.state", description = "Provisioning state"),
        printcolumn(name = "Consumer", type_ = "string", json_path = ".spec.consumerRef.name", description = "Object using this host"),
        printcolumn(name = "BMC", type_ = "string", json_path = ".spec.bmc.address", description = "BMC address", priority = 1),
        printcolumn(name = "Online", type_ = "string", json_path = ".spec.online", description = "Whether the host should be powered on"),
        printcolumn(name = "Error", type_ = "string", json_path = ".status.errorType", description = "Kind of the last error"),
        printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp", description = "Time since the host was created")
    )]
    pub struct BareMetalHostSpec {
        /// Deprecated and never implemented: taints meant for the Machine using this host.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        pub taints: Vec<Taint>,

        /// How to reach the host's baseboard management controller.
        pub bmc: Option<BmcDetails>,

        /// RAID layout to build while preparing the host. Absent: the current layout is
        /// left alone. Hardware and software volumes are mutually exclusive.
        pub raid: Option<RaidConfig>,

        /// Deprecated BIOS switches, applied while preparing under the vendor's own
        /// setting names (Dell, HPE); prefer a HostFirmwareSettings resource.
        pub firmware: Option<FirmwareConfig>,

        /// Deprecated hardware profile name (unknown, libvirt, dell, dell-raid, openstack,
        /// empty); only chooses default root device hints. Prefer rootDeviceHints.
        pub hardware_profile: Option<String>,

        /// Which disk receives the image. Without hints the profile's default is used.
        pub root_device_hints: Option<RootDeviceHints>,

        /// Firmware boot mode; UEFI when unset.
        pub boot_mode: Option<BootMode>,

        /// MAC address of the NIC the host network-boots from (never the BMC's own MAC).
        /// Cannot change once set.
        #[serde(rename = "bootMACAddress")]
        #[schemars(regex(pattern = MAC_ADDRESS_PATTERN), length(max = 17))]
        pub boot_mac_address: Option<String>,

        /// Desired power state. In stable states bmo keeps the host's power matching it.
        pub online: bool,

        /// The object using this host (for example a Cluster API Metal3Machine). While it is
        /// set the host counts as in use and cannot be deleted without the override.
        pub consumer_ref: Option<ObjectReference>,

        /// Image to deploy. Setting it while online starts provisioning.
        pub image: Option<Image>,

        /// Secret (in the host's namespace) holding cloud-init or Ignition user data for
        /// the config drive.
        pub user_data: Option<SecretReference>,

        /// bmo addition: user data given inline instead of through a Secret. Mutually
        /// exclusive with userData.
        pub inline_user_data: Option<InlineUserData>,

        /// Secret (in the host's namespace) with network data for the deploy ramdisk; also
        /// used for the config drive when networkData is unset.
        pub preprovisioning_network_data_name: Option<String>,

        /// Secret (in the host's namespace) with OpenStack network_data.json for the
        /// config drive.
        pub network_data: Option<SecretReference>,

        /// Secret (in the host's namespace) with extra keys merged into the config
        /// drive's generated meta_data.
        pub meta_data: Option<SecretReference>,

        /// Free text for people.
        pub description: Option<String>,

        /// The host already runs an operating system that bmo did not install; bmo only
        /// manages its power. Can be turned on at creation or while the host is available.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        pub externally_provisioned: bool,

        /// Whether disks are cleaned (partition tables and metadata) before provisioning
        /// and after deprovisioning.
        #[serde(default)]
        pub automated_cleaning_mode: AutomatedCleaningMode,

        /// Run a deploy step of a custom deploy ramdisk instead of writing an image.
        /// Setting it starts provisioning.
        pub custom_deploy: Option<CustomDeploy>,

        /// CPU architecture (x86_64, aarch64, ...). Filled in from inspection when empty.
        pub architecture: Option<String>,

        /// Never power the host off; reboots replace power cycles. Not allowed with
        /// online: false.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        pub disable_power_off: bool,

        /// How hardware inspection runs: disabled, agent (boot the inspection ramdisk) or
        /// fast (ask the BMC only).
        pub inspection_mode: Option<InspectionMode>,

        /// Switch-port configuration per NIC, each NIC chosen by name or by MAC address.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        #[schemars(length(max = 128))]
        pub network_interfaces: Vec<NetworkInterface>,
    }
}
