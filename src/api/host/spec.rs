//! The parts of a BareMetalHost's spec: BMC, images, RAID, firmware, network
//! interfaces and root device hints. The spec itself is in the parent module.

use std::fmt;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::api::MAC_ADDRESS_PATTERN;

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
#[serde_with::skip_serializing_none]
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RootDeviceHints {
    /// Linux device name (/dev/sda) or by-path link (/dev/disk/by-path/...); exact match.
    #[schemars(length(max = 1024))]
    pub device_name: Option<String>,

    /// SCSI address host:channel:target:lun, e.g. 0:0:0:0; exact match.
    pub hctl: Option<String>,

    /// Vendor-specific model; substring match.
    pub model: Option<String>,

    /// Vendor or manufacturer; substring match.
    pub vendor: Option<String>,

    /// Serial number; exact match.
    pub serial_number: Option<String>,

    /// Smallest acceptable size in gigabytes.
    #[schemars(range(min = 0))]
    pub min_size_gigabytes: Option<i64>,

    /// World Wide Name; exact match.
    pub wwn: Option<String>,

    /// World Wide Name with the vendor extension appended; exact match.
    pub wwn_with_extension: Option<String>,

    /// Vendor extension of the World Wide Name; exact match.
    pub wwn_vendor_extension: Option<String>,

    /// true: spinning disks only; false: solid-state only.
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
#[serde_with::skip_serializing_none]
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Image {
    /// Where the image is: http, https, ftp, gopher or oci URL.
    #[schemars(length(max = 4096))]
    pub url: String,

    /// The image's checksum, or a URL of a checksum file. Required unless the format is
    /// live-iso or the URL is oci:// (which must have none).
    #[schemars(length(max = 4096))]
    pub checksum: Option<String>,

    /// Checksum algorithm; absent or auto lets Ironic detect it.
    pub checksum_type: Option<ChecksumType>,

    /// Disk format; live-iso boots the ISO instead of writing a disk.
    pub format: Option<ImageFormat>,

    /// Secret (same namespace, type kubernetes.io/dockerconfigjson or dockercfg) with
    /// registry credentials; only used for oci:// images.
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
#[serde_with::skip_serializing_none]
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct RaidConfig {
    /// Hardware RAID volumes; the first is the root volume unless rootDeviceHints are
    /// given. An empty list deletes all hardware volumes.
    #[serde(rename = "hardwareRAIDVolumes")]
    #[schemars(length(max = 64))]
    pub hardware_raid_volumes: Option<Vec<HardwareRaidVolume>>,

    /// Software RAID volumes (one or two); the first must be RAID 1 and holds the OS.
    /// Software RAID is always rebuilt from scratch.
    #[serde(rename = "softwareRAIDVolumes")]
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
#[serde_with::skip_serializing_none]
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HardwareRaidVolume {
    /// Size in GiB; absent or 0 uses all the space.
    #[schemars(range(min = 0))]
    pub size_gibibytes: Option<i64>,

    /// RAID level (drivers may support only some).
    pub level: HardwareRaidLevel,

    /// Volume name, unique on the host; generated when absent.
    #[schemars(length(max = 64))]
    pub name: Option<String>,

    /// true: spinning disks only; false: solid-state only; absent: any.
    pub rotational: Option<bool>,

    /// How many disks to use; the level's minimum when absent. Must equal the number
    /// of physicalDisks when both are given.
    #[schemars(range(min = 1))]
    pub number_of_physical_disks: Option<i64>,

    /// RAID controller to use; required with physicalDisks.
    pub controller: Option<String>,

    /// Controller-specific names of the disks to use.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 256))]
    pub physical_disks: Vec<String>,
}

/// One software RAID volume.
#[serde_with::skip_serializing_none]
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SoftwareRaidVolume {
    /// Install the OS on this volume (at most one; it must be RAID 1, and rules out
    /// spec.rootDeviceHints).
    #[serde(default)]
    pub root_volume: bool,

    /// Size in GiB; absent or 0 uses all the space.
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
#[serde_with::skip_serializing_none]
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FirmwareConfig {
    /// Hardware virtualization support.
    pub virtualization_enabled: Option<bool>,
    /// Simultaneous multithreading (hyper-threading).
    pub simultaneous_multithreading_enabled: Option<bool>,
    /// SR-IOV.
    pub sriov_enabled: Option<bool>,
}

/// Switch-port configuration for one NIC, chosen by name or by MAC (exactly one).
#[serde_with::skip_serializing_none]
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NetworkInterface {
    /// NIC name as inspection reports it (eth0, ens1f0).
    #[schemars(regex(pattern = r"^[a-zA-Z0-9._-]+$"), length(max = 64))]
    pub name: Option<String>,

    /// NIC MAC address as inspection reports it.
    #[schemars(regex(pattern = MAC_ADDRESS_PATTERN), length(max = 17))]
    pub mac_address: Option<String>,

    /// The HostNetworkAttachment describing the port configuration.
    pub host_network_attachment: HostNetworkAttachmentRef,

    /// The switch port the NIC is cabled to; overrides what LLDP reported.
    pub switch_port: Option<SwitchPortIdentifier>,
}

/// Reference to a HostNetworkAttachment.
#[serde_with::skip_serializing_none]
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct HostNetworkAttachmentRef {
    /// Name of the HostNetworkAttachment.
    #[schemars(length(max = 253))]
    pub name: String,
    /// Its namespace; the host's own when absent.
    #[schemars(length(max = 63))]
    pub namespace: Option<String>,
}

/// A switch port.
#[serde_with::skip_serializing_none]
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct SwitchPortIdentifier {
    /// Management MAC address of the switch.
    #[serde(rename = "switchID")]
    #[schemars(regex(pattern = MAC_ADDRESS_PATTERN))]
    pub switch_id: String,
    /// Port name in the switch's configuration.
    #[serde(rename = "portID")]
    pub port_id: String,
    /// The switch's system name.
    #[serde(rename = "switchSystemName")]
    pub switch_system_name: Option<String>,
}
