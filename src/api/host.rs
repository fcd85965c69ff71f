//! `BareMetalHost`: one physical server, its BMC, what to put on it, and what bmo saw.
//!
//! Field doc comments become the CRD's descriptions (`kubectl explain bmh.spec`).
//! Validation beyond types, enums and patterns lives in [`crate::api::crd`].

use std::fmt;

use k8s_openapi::api::core::v1::{ObjectReference, SecretReference, Taint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::hardware::HardwareDetails;

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

/// Desired state of a bare-metal host.
// kube's printcolumn(...) entries repeat keys such as type_ by design.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "metal3.io",
    version = "v1alpha1",
    kind = "BareMetalHost",
    plural = "baremetalhosts",
    singular = "baremetalhost",
    namespaced,
    status = "BareMetalHostStatus",
    derive = "PartialEq",
    shortname = "bmh",
    shortname = "bmhost",
    doc = "A physical server managed through its BMC: how to reach it, what to deploy on it, and what bmo observed.",
    printcolumn(
        name = "Status",
        type_ = "string",
        json_path = ".status.operationalStatus",
        description = "Operational status",
        priority = 1
    ),
    printcolumn(
        name = "State",
        type_ = "string",
        json_path = ".status.provisioning.state",
        description = "Provisioning state"
    ),
    printcolumn(
        name = "Consumer",
        type_ = "string",
        json_path = ".spec.consumerRef.name",
        description = "Object using this host"
    ),
    printcolumn(
        name = "BMC",
        type_ = "string",
        json_path = ".spec.bmc.address",
        description = "BMC address",
        priority = 1
    ),
    printcolumn(
        name = "Online",
        type_ = "string",
        json_path = ".spec.online",
        description = "Whether the host should be powered on"
    ),
    printcolumn(
        name = "Error",
        type_ = "string",
        json_path = ".status.errorType",
        description = "Kind of the last error"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp",
        description = "Time since the host was created"
    )
)]
// `remote = "Self"` turns the derived (de)serializers into inherent functions, so the
// trait impls below can accept a missing `spec` (upstream's `demo-discovered`).
#[serde(rename_all = "camelCase", remote = "Self")]
pub struct BareMetalHostSpec {
    /// Deprecated and never implemented: taints meant for the Machine using this host.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub taints: Vec<Taint>,

    /// How to reach the host's baseboard management controller.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bmc: Option<BmcDetails>,

    /// RAID layout to build while preparing the host. Absent: the current layout is
    /// left alone. Hardware and software volumes are mutually exclusive.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raid: Option<RaidConfig>,

    /// Deprecated BIOS switches, applied while preparing under the vendor's own
    /// setting names (Dell, HPE); prefer a HostFirmwareSettings resource.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub firmware: Option<FirmwareConfig>,

    /// Deprecated hardware profile name (unknown, libvirt, dell, dell-raid, openstack,
    /// empty); only chooses default root device hints. Prefer rootDeviceHints.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hardware_profile: Option<String>,

    /// Which disk receives the image. Without hints the profile's default is used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root_device_hints: Option<RootDeviceHints>,

    /// Firmware boot mode; UEFI when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boot_mode: Option<BootMode>,

    /// MAC address of the NIC the host network-boots from (never the BMC's own MAC).
    /// Cannot change once set.
    #[serde(
        default,
        rename = "bootMACAddress",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(
        regex(pattern = r"^[0-9a-fA-F]{2}(:[0-9a-fA-F]{2}){5}$"),
        length(max = 17)
    )]
    pub boot_mac_address: Option<String>,

    /// Desired power state. In stable states bmo keeps the host's power matching it.
    pub online: bool,

    /// The object using this host (for example a Cluster API Metal3Machine). While it is
    /// set the host counts as in use and cannot be deleted without the override.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consumer_ref: Option<ObjectReference>,

    /// Image to deploy. Setting it while online starts provisioning.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<Image>,

    /// Secret (in the host's namespace) holding cloud-init or Ignition user data for
    /// the config drive.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_data: Option<SecretReference>,

    /// bmo addition: user data given inline instead of through a Secret. Mutually
    /// exclusive with userData.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inline_user_data: Option<InlineUserData>,

    /// Secret (in the host's namespace) with network data for the deploy ramdisk; also
    /// used for the config drive when networkData is unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preprovisioning_network_data_name: Option<String>,

    /// Secret (in the host's namespace) with OpenStack network_data.json for the
    /// config drive.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network_data: Option<SecretReference>,

    /// Secret (in the host's namespace) with extra keys merged into the config
    /// drive's generated meta_data.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub meta_data: Option<SecretReference>,

    /// Free text for people.
    #[serde(default, skip_serializing_if = "Option::is_none")]
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
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub custom_deploy: Option<CustomDeploy>,

    /// CPU architecture (x86_64, aarch64, ...). Filled in from inspection when empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub architecture: Option<String>,

    /// Never power the host off; reboots replace power cycles. Not allowed with
    /// online: false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub disable_power_off: bool,

    /// How hardware inspection runs: disabled, agent (boot the inspection ramdisk) or
    /// fast (ask the BMC only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inspection_mode: Option<InspectionMode>,

    /// Switch-port configuration per NIC, each NIC chosen by name or by MAC address.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 128))]
    pub network_interfaces: Vec<NetworkInterface>,
}

// A host without `spec` (or with `spec: null`) reads as the default spec, as in
// upstream, where `spec` is not required.
super::spec_may_be_absent!(BareMetalHostSpec);

/// User data written inline in the spec. `Debug` prints `***`: user data may carry
/// passwords and keys, and must never reach logs.
#[derive(Serialize, Deserialize, Clone, Default, PartialEq, Eq, JsonSchema)]
#[serde(transparent)]
#[schemars(transparent)]
pub struct InlineUserData(#[schemars(length(max = 1048576))] String);

impl InlineUserData {
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// The user data, for the one place that builds the config drive.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for InlineUserData {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

/// How to reach the BMC.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BmcDetails {
    /// BMC URL; the scheme picks the driver (ipmi://, redfish://, redfish-virtualmedia://,
    /// idrac-redfish://, ...). A bare host or host:port means IPMI.
    #[schemars(length(max = 2048))]
    pub address: String,

    /// Secret in the host's namespace with keys `username` and `password`.
    pub credentials_name: String,

    /// Accept any TLS certificate from the BMC (self-signed ones). Insecure.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub disable_certificate_verification: bool,
}

/// Hints that pick one disk; every hint given must match.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RootDeviceHints {
    /// Linux device name (/dev/sda) or by-path link (/dev/disk/by-path/...); exact match.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024))]
    pub device_name: Option<String>,

    /// SCSI address host:channel:target:lun, e.g. 0:0:0:0; exact match.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hctl: Option<String>,

    /// Vendor-specific model; substring match.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,

    /// Vendor or manufacturer; substring match.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vendor: Option<String>,

    /// Serial number; exact match.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serial_number: Option<String>,

    /// Smallest acceptable size in gigabytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub min_size_gigabytes: Option<i64>,

    /// World Wide Name; exact match.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wwn: Option<String>,

    /// World Wide Name with the vendor extension appended; exact match.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wwn_with_extension: Option<String>,

    /// Vendor extension of the World Wide Name; exact match.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wwn_vendor_extension: Option<String>,

    /// true: spinning disks only; false: solid-state only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rotational: Option<bool>,
}

/// Firmware boot mode.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
pub enum BootMode {
    #[default]
    #[serde(rename = "UEFI")]
    Uefi,
    #[serde(rename = "UEFISecureBoot")]
    UefiSecureBoot,
    #[serde(rename = "legacy")]
    Legacy,
}

/// Automated disk cleaning.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum AutomatedCleaningMode {
    /// Wipe partition tables and filesystem metadata.
    #[default]
    Metadata,
    /// No cleaning.
    Disabled,
    /// bmo's extension: like `metadata`, and at deprovisioning every disk is erased
    /// completely (Ironic's `deploy.erase_devices` clean step: ATA / NVMe secure erase,
    /// else overwriting). Slow: hours on large disks.
    Full,
}

/// Hardware inspection mode.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum InspectionMode {
    Disabled,
    Agent,
    Fast,
}

/// Image checksum algorithm.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ChecksumType {
    Md5,
    Sha256,
    Sha512,
    /// Let Ironic work it out from the checksum's length.
    Auto,
}

/// Image disk format.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ImageFormat {
    Raw,
    Qcow2,
    Vdi,
    Vmdk,
    /// An ISO booted through virtual media, never written to disk.
    #[serde(rename = "live-iso")]
    LiveIso,
}

/// An image to deploy, or one that was deployed.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Image {
    /// Where the image is: http, https, ftp, gopher or oci URL.
    #[schemars(length(max = 4096))]
    pub url: String,

    /// The image's checksum, or a URL of a checksum file. Required unless the format is
    /// live-iso or the URL is oci:// (which must have none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 4096))]
    pub checksum: Option<String>,

    /// Checksum algorithm; absent or auto lets Ironic detect it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checksum_type: Option<ChecksumType>,

    /// Disk format; live-iso boots the ISO instead of writing a disk.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub format: Option<ImageFormat>,

    /// Secret (same namespace, type kubernetes.io/dockerconfigjson or dockercfg) with
    /// registry credentials; only used for oci:// images.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oci_auth_secret_name: Option<String>,
}

impl Image {
    /// Booted from virtual media rather than written to disk.
    pub fn is_live_iso(&self) -> bool {
        self.format == Some(ImageFormat::LiveIso)
    }

    /// Pulled from an OCI registry (`oci://`), whose digest replaces the checksum.
    pub fn is_oci(&self) -> bool {
        self.url
            .get(..6)
            .is_some_and(|scheme| scheme.eq_ignore_ascii_case("oci://"))
    }
}

/// A custom deploy step instead of an image.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct CustomDeploy {
    /// Name of the deploy step the custom ramdisk provides.
    pub method: String,
}

/// RAID layout. Hardware and software volumes are mutually exclusive.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct RaidConfig {
    /// Hardware RAID volumes; the first is the root volume unless rootDeviceHints are
    /// given. An empty list deletes all hardware volumes.
    #[serde(
        default,
        rename = "hardwareRAIDVolumes",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(length(max = 64))]
    pub hardware_raid_volumes: Option<Vec<HardwareRaidVolume>>,

    /// Software RAID volumes (one or two); the first must be RAID 1 and holds the OS.
    /// Software RAID is always rebuilt from scratch.
    #[serde(
        default,
        rename = "softwareRAIDVolumes",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(length(max = 2))]
    pub software_raid_volumes: Option<Vec<SoftwareRaidVolume>>,
}

/// RAID level of a hardware volume.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum HardwareRaidLevel {
    #[serde(rename = "0")]
    Raid0,
    #[serde(rename = "1")]
    Raid1,
    #[serde(rename = "2")]
    Raid2,
    #[serde(rename = "5")]
    Raid5,
    #[serde(rename = "6")]
    Raid6,
    #[serde(rename = "1+0")]
    Raid10,
    #[serde(rename = "5+0")]
    Raid50,
    #[serde(rename = "6+0")]
    Raid60,
}

/// RAID level of a software volume.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum SoftwareRaidLevel {
    #[serde(rename = "0")]
    Raid0,
    #[serde(rename = "1")]
    Raid1,
    #[serde(rename = "1+0")]
    Raid10,
}

/// One hardware RAID volume.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HardwareRaidVolume {
    /// Size in GiB; absent or 0 uses all the space.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub size_gibibytes: Option<i64>,

    /// RAID level (drivers may support only some).
    pub level: HardwareRaidLevel,

    /// Volume name, unique on the host; generated when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64))]
    pub name: Option<String>,

    /// true: spinning disks only; false: solid-state only; absent: any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rotational: Option<bool>,

    /// How many disks to use; the level's minimum when absent. Must equal the number
    /// of physicalDisks when both are given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub number_of_physical_disks: Option<i64>,

    /// RAID controller to use; required with physicalDisks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub controller: Option<String>,

    /// Controller-specific names of the disks to use.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 256))]
    pub physical_disks: Vec<String>,
}

/// One software RAID volume.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SoftwareRaidVolume {
    /// Install the OS on this volume (at most one; it must be RAID 1, and rules out
    /// spec.rootDeviceHints).
    #[serde(default)]
    pub root_volume: bool,

    /// Size in GiB; absent or 0 uses all the space.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub size_gibibytes: Option<i64>,

    /// RAID level.
    pub level: SoftwareRaidLevel,

    /// Hints choosing the member disks, at least two.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(min = 2, max = 64))]
    pub physical_disks: Vec<RootDeviceHints>,
}

/// Deprecated BIOS switches; bmo maps them to the vendor's BIOS setting names
/// (Dell, HPE) and applies them while preparing.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FirmwareConfig {
    /// Hardware virtualization support.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub virtualization_enabled: Option<bool>,
    /// Simultaneous multithreading (hyper-threading).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub simultaneous_multithreading_enabled: Option<bool>,
    /// SR-IOV.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sriov_enabled: Option<bool>,
}

/// Switch-port configuration for one NIC, chosen by name or by MAC (exactly one).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NetworkInterface {
    /// NIC name as inspection reports it (eth0, ens1f0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[a-zA-Z0-9._-]+$"), length(max = 64))]
    pub name: Option<String>,

    /// NIC MAC address as inspection reports it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        regex(pattern = r"^[0-9a-fA-F]{2}(:[0-9a-fA-F]{2}){5}$"),
        length(max = 17)
    )]
    pub mac_address: Option<String>,

    /// The HostNetworkAttachment describing the port configuration.
    pub host_network_attachment: HostNetworkAttachmentRef,

    /// The switch port the NIC is cabled to; overrides what LLDP reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub switch_port: Option<SwitchPortIdentifier>,
}

/// Reference to a HostNetworkAttachment.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct HostNetworkAttachmentRef {
    /// Name of the HostNetworkAttachment.
    #[schemars(length(max = 253))]
    pub name: String,
    /// Its namespace; the host's own when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 63))]
    pub namespace: Option<String>,
}

/// A switch port.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct SwitchPortIdentifier {
    /// Management MAC address of the switch.
    #[serde(rename = "switchID")]
    #[schemars(regex(pattern = r"^[0-9a-fA-F]{2}(:[0-9a-fA-F]{2}){5}$"))]
    pub switch_id: String,
    /// Port name in the switch's configuration.
    #[serde(rename = "portID")]
    pub port_id: String,
    /// The switch's system name.
    #[serde(
        default,
        rename = "switchSystemName",
        skip_serializing_if = "Option::is_none"
    )]
    pub switch_system_name: Option<String>,
}

/// What bmo observed about the host.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BareMetalHostStatus {
    /// Overall health of bmo's management of the host.
    pub operational_status: OperationalStatus,

    /// Kind of the last failure, set while operationalStatus is error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_type: Option<ErrorType>,

    /// When bmo last wrote this status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_updated: Option<Time>,

    /// Deprecated: the hardware profile bmo chose.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hardware_profile: Option<String>,

    /// Inspection results (deprecated copy; the HardwareData resource of the same name
    /// holds the canonical one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hardware: Option<HardwareDetails>,

    /// The provisioning backend's view of the host.
    pub provisioning: ProvisionStatus,

    /// The BMC credentials that last worked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub good_credentials: Option<CredentialsStatus>,

    /// The BMC credentials last sent to Ironic.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tried_credentials: Option<CredentialsStatus>,

    /// The last error, empty when there is none.
    pub error_message: String,

    /// Last observed power state.
    pub powered_on: bool,

    /// Start and end times of the main operations.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operation_history: Option<OperationHistory>,

    /// Errors since the last success; drives the retry backoff.
    #[schemars(extend("default" = 0))]
    pub error_count: i64,

    /// Consecutive provisioning failures for the current image.
    #[schemars(extend("default" = 0))]
    pub provisioning_fail_count: i64,

    /// spec.image as it was at the last provisioning attempt; a different image resets
    /// provisioningFailCount.
    #[serde(default, skip_serializing_if = "Option::is_none")]
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
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProvisionStatus {
    /// Lifecycle state.
    pub state: ProvisioningState,

    /// The Ironic node UUID (the JSON key is literally `ID`).
    #[serde(rename = "ID")]
    pub id: String,

    /// The image last provisioned successfully.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<Image>,

    /// The root device hints in effect.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root_device_hints: Option<RootDeviceHints>,

    /// The boot mode in effect.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boot_mode: Option<BootMode>,

    /// The RAID layout applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raid: Option<RaidConfig>,

    /// The spec.firmware the last preparing applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub firmware: Option<FirmwareConfig>,

    /// The custom deploy step applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub custom_deploy: Option<CustomDeploy>,

    /// The clean, deploy or service step Ironic is running now (bmo's addition).
    #[serde(default, skip_serializing_if = "Option::is_none")]
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
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CredentialsStatus {
    /// The Secret.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials: Option<SecretReference>,
    /// Its resourceVersion at the time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials_version: Option<String>,
}

/// Start and end of the main operations.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct OperationHistory {
    /// Registration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub register: Option<OperationMetric>,
    /// Inspection.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inspect: Option<OperationMetric>,
    /// Provisioning.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provision: Option<OperationMetric>,
    /// Deprovisioning.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deprovision: Option<OperationMetric>,
}

/// When one operation started and ended.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct OperationMetric {
    /// Start time; null or absent when it has not started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start: Option<Time>,
    /// End time; null or absent while it runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end: Option<Time>,
}

impl BareMetalHost {
    /// `namespace/name`, for logs and messages.
    pub fn namespaced_name(&self) -> String {
        format!(
            "{}/{}",
            self.metadata.namespace.as_deref().unwrap_or_default(),
            self.metadata.name.as_deref().unwrap_or_default()
        )
    }

    /// Boot mode to use: spec.bootMode, UEFI when unset.
    pub fn boot_mode(&self) -> BootMode {
        self.spec.boot_mode.unwrap_or_default()
    }

    /// BMC address or credentials given (upstream `HasBMCDetails`).
    pub fn has_bmc_details(&self) -> bool {
        self.spec
            .bmc
            .as_ref()
            .is_some_and(|bmc| !bmc.address.is_empty() || !bmc.credentials_name.is_empty())
    }

    /// Inspection turned off, by spec.inspectionMode or the legacy annotation.
    pub fn inspection_disabled(&self) -> bool {
        self.spec.inspection_mode == Some(InspectionMode::Disabled)
            || self
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(INSPECT_ANNOTATION))
                .is_some_and(|v| v == "disabled")
    }

    /// An image or custom deploy step is wanted that has not been provisioned yet
    /// (upstream `NeedsProvisioning`); only while the host should be online.
    pub fn needs_provisioning(&self) -> bool {
        if !self.spec.online {
            return false;
        }
        let provisioned = self.status.as_ref().map(|s| &s.provisioning);
        let new_image = self.spec.image.as_ref().is_some_and(|i| !i.url.is_empty())
            && provisioned
                .and_then(|p| p.image.as_ref())
                .is_none_or(|i| i.url.is_empty());
        let new_custom_deploy = self
            .spec
            .custom_deploy
            .as_ref()
            .filter(|c| !c.method.is_empty())
            .is_some_and(|wanted| {
                provisioned
                    .and_then(|p| p.custom_deploy.as_ref())
                    .is_none_or(|done| done.method != wanted.method)
            });
        new_image || new_custom_deploy
    }

    /// bmo (not someone else) put an image or custom deploy on the host (upstream
    /// `WasProvisioned`).
    pub fn was_provisioned(&self) -> bool {
        if self.spec.externally_provisioned {
            return false;
        }
        self.status.as_ref().is_some_and(|s| {
            s.provisioning
                .image
                .as_ref()
                .is_some_and(|i| !i.url.is_empty())
                || s.provisioning.custom_deploy.is_some()
        })
    }

    /// The provisioning state, `None` ("") when there is no status yet.
    pub fn provisioning_state(&self) -> ProvisioningState {
        self.status
            .as_ref()
            .map(|s| s.provisioning.state)
            .unwrap_or_default()
    }
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

impl fmt::Display for ProvisioningState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
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

impl fmt::Display for ErrorType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
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

impl fmt::Display for OperationalStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn enum_strings_match_their_json() {
        for state in [
            ProvisioningState::None,
            ProvisioningState::Unmanaged,
            ProvisioningState::Registering,
            ProvisioningState::MatchProfile,
            ProvisioningState::Preparing,
            ProvisioningState::Ready,
            ProvisioningState::Available,
            ProvisioningState::Provisioning,
            ProvisioningState::Provisioned,
            ProvisioningState::ExternallyProvisioned,
            ProvisioningState::Deprovisioning,
            ProvisioningState::Inspecting,
            ProvisioningState::PoweringOffBeforeDelete,
            ProvisioningState::Deleting,
        ] {
            assert_eq!(
                serde_json::to_value(state).unwrap(),
                serde_json::json!(state.as_str())
            );
        }
        for error in [
            ErrorType::ProvisionedRegistration,
            ErrorType::Registration,
            ErrorType::Inspection,
            ErrorType::Preparation,
            ErrorType::Provisioning,
            ErrorType::PowerManagement,
            ErrorType::Detach,
            ErrorType::Servicing,
        ] {
            assert_eq!(
                serde_json::to_value(error).unwrap(),
                serde_json::json!(error.as_str())
            );
        }
        for status in [
            OperationalStatus::None,
            OperationalStatus::Ok,
            OperationalStatus::Discovered,
            OperationalStatus::Error,
            OperationalStatus::Delayed,
            OperationalStatus::Detached,
            OperationalStatus::Servicing,
        ] {
            assert_eq!(
                serde_json::to_value(status).unwrap(),
                serde_json::json!(status.as_str())
            );
        }
    }

    #[test]
    fn a_host_without_spec_reads_as_the_default_spec() {
        for text in [
            r#"{"apiVersion":"metal3.io/v1alpha1","kind":"BareMetalHost","metadata":{"name":"demo-discovered"}}"#,
            r#"{"apiVersion":"metal3.io/v1alpha1","kind":"BareMetalHost","metadata":{"name":"demo-discovered"},"spec":null}"#,
        ] {
            let host: BareMetalHost = serde_json::from_str(text).expect(text);
            assert_eq!(host.spec, BareMetalHostSpec::default());
        }
        let host: BareMetalHost = serde_json::from_str(
            r#"{"apiVersion":"metal3.io/v1alpha1","kind":"BareMetalHost","metadata":{"name":"h"},"spec":{"online":true}}"#,
        )
        .expect("a host with spec");
        assert!(host.spec.online);
        let written = serde_json::to_value(&host.spec).expect("serialize");
        assert_eq!(written["online"], serde_json::json!(true));
    }

    #[test]
    fn inline_user_data_is_hidden_from_debug() {
        let spec = BareMetalHostSpec {
            inline_user_data: Some(InlineUserData::new("#cloud-config\npassword: hunter2")),
            ..Default::default()
        };
        let printed = format!("{spec:?}");
        assert!(!printed.contains("hunter2"), "{printed}");
        assert!(printed.contains("***"));
    }

    #[test]
    fn provisioning_predicates_follow_spec_and_status() {
        let image = Image {
            url: "http://images.example/os.qcow2".into(),
            checksum: Some("abc".into()),
            ..Default::default()
        };
        let mut host = BareMetalHost::new(
            "h",
            BareMetalHostSpec {
                online: true,
                image: Some(image.clone()),
                ..Default::default()
            },
        );
        assert!(host.needs_provisioning() && !host.was_provisioned());
        host.spec.online = false;
        assert!(!host.needs_provisioning());
        host.spec.online = true;
        host.status = Some(BareMetalHostStatus {
            provisioning: ProvisionStatus {
                image: Some(image),
                ..Default::default()
            },
            ..Default::default()
        });
        assert!(!host.needs_provisioning() && host.was_provisioned());
        host.spec.custom_deploy = Some(CustomDeploy {
            method: "install_coreos".into(),
        });
        assert!(host.needs_provisioning());
        host.spec.externally_provisioned = true;
        assert!(!host.was_provisioned());
    }

    #[test]
    fn oci_and_live_iso_are_recognised() {
        let oci = Image {
            url: "OCI://registry.example/os:1".into(),
            ..Default::default()
        };
        assert!(oci.is_oci());
        let iso = Image {
            url: "https://example/boot.iso".into(),
            format: Some(ImageFormat::LiveIso),
            ..Default::default()
        };
        assert!(iso.is_live_iso() && !iso.is_oci());
    }
}
