//! Inspection results: `HardwareDetails` (in `BareMetalHost.status.hardware`) and the
//! `HardwareData` resource that holds the canonical copy.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// What `dhcpHostname` may hold: labels of 1 to 63 letters, digits and hyphens (not
/// first or last) joined by dots; at most 253 bytes (`maxLength`). bmo's DHCP server
/// drops any other name a client sends (`crate::netboot::hostname`).
pub const DHCP_HOSTNAME_PATTERN: &str = r"^[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$";

/// Finalizer bmo keeps on a HardwareData while its host exists.
pub const HARDWARE_DATA_FINALIZER: &str = "baremetalhost.metal3.io/hardwareData";

/// Inspection results of one host; same name and namespace as the host.
// Not `metal3_kind!`: reading a HardwareData needs its spec (no `spec_may_be_absent`),
// and the kind derives `Default`. kube's printcolumn(...) entries repeat keys such as
// type_ by design.
#[allow(clippy::duplicated_attributes)]
#[serde_with::skip_serializing_none]
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "metal3.io",
    version = "v1alpha1",
    kind = "HardwareData",
    plural = "hardwaredata",
    singular = "hardwaredata",
    namespaced,
    derive = "PartialEq",
    derive = "Default",
    shortname = "hd",
    doc = "Hardware found by inspecting the BareMetalHost of the same name.",
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp",
        description = "Time since the inspection data was stored"
    )
)]
pub struct HardwareDataSpec {
    /// What inspection found.
    pub hardware: Option<HardwareDetails>,
}

/// Hardware found by inspection.
#[serde_with::skip_serializing_none]
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HardwareDetails {
    /// Maker, product and serial number of the machine.
    pub system_vendor: Option<HardwareSystemVendor>,

    /// System firmware.
    pub firmware: Option<Firmware>,

    /// Memory in MiB.
    pub ram_mebibytes: Option<i64>,

    /// Network interfaces; a NIC with both IPv4 and IPv6 addresses appears once per
    /// address family.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nics: Vec<Nic>,

    /// Disks.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub storage: Vec<Storage>,

    /// Processors.
    pub cpu: Option<Cpu>,

    /// Hostname the operating system of the inspection ramdisk reported.
    pub hostname: Option<String>,
}

/// Who made the machine.
#[serde_with::skip_serializing_none]
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HardwareSystemVendor {
    /// Manufacturer.
    pub manufacturer: Option<String>,
    /// Product name.
    pub product_name: Option<String>,
    /// Serial number.
    pub serial_number: Option<String>,
}

/// System firmware.
#[serde_with::skip_serializing_none]
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct Firmware {
    /// The BIOS or UEFI firmware.
    pub bios: Option<Bios>,
}

/// BIOS or UEFI firmware release.
#[serde_with::skip_serializing_none]
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct Bios {
    /// Release date.
    pub date: Option<String>,
    /// Vendor.
    pub vendor: Option<String>,
    /// Version.
    pub version: Option<String>,
}

/// One network interface.
#[serde_with::skip_serializing_none]
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Nic {
    /// Interface name, e.g. eno1.
    pub name: Option<String>,

    /// PCI vendor and product IDs, e.g. "0x8086 0x1572".
    pub model: Option<String>,

    /// MAC address.
    #[schemars(regex(pattern = r"[0-9a-fA-F]{2}(:[0-9a-fA-F]{2}){5}"))]
    pub mac: Option<String>,

    /// One IP address (IPv4 or IPv6) seen on the interface.
    pub ip: Option<String>,

    /// Link speed in Gbit/s. Absent when the speed is unknown (bmo never reports a
    /// made-up 0).
    pub speed_gbps: Option<i64>,

    /// VLANs seen on the interface.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub vlans: Vec<Vlan>,

    /// Untagged VLAN ID.
    #[schemars(range(min = 0, max = 4094))]
    pub vlan_id: Option<i32>,

    /// The interface can network-boot.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub pxe: bool,

    /// What the neighbouring switch announced over LLDP.
    pub lldp: Option<Lldp>,

    /// PCI address, e.g. 0000:3b:00.0.
    pub pci_address: Option<String>,

    /// bmo addition: the hostname this NIC's DHCP client sent (option 12) when it asked
    /// bmo's DHCP server for an address, kept only if it is a valid host name. Kept
    /// apart from hardware.hostname, which is what the operating system reported.
    #[schemars(regex(pattern = DHCP_HOSTNAME_PATTERN), length(max = 253))]
    pub dhcp_hostname: Option<String>,
}

/// A VLAN on a NIC.
#[serde_with::skip_serializing_none]
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct Vlan {
    /// 802.1Q VLAN ID.
    #[schemars(range(min = 0, max = 4094))]
    pub id: Option<i32>,
    /// VLAN name.
    pub name: Option<String>,
}

/// LLDP data received on a NIC.
#[serde_with::skip_serializing_none]
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct Lldp {
    /// Switch chassis ID.
    #[serde(rename = "switchID")]
    pub switch_id: Option<String>,
    /// Switch port ID.
    #[serde(rename = "portID")]
    pub port_id: Option<String>,
    /// Switch system name.
    #[serde(rename = "switchSystemName")]
    pub switch_system_name: Option<String>,
}

/// Kind of disk.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
pub enum DiskType {
    /// Spinning disk.
    #[default]
    #[serde(rename = "HDD")]
    Hdd,
    /// Solid-state disk (SATA/SAS).
    #[serde(rename = "SSD")]
    Ssd,
    /// NVMe device.
    #[serde(rename = "NVME")]
    Nvme,
}

/// One disk.
#[serde_with::skip_serializing_none]
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Storage {
    /// Device name, a stable by-path link when there is one.
    pub name: Option<String>,

    /// Other names of the same device, e.g. /dev/sda (not stable across boots).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub alternate_names: Vec<String>,

    /// Spinning media (prefer type).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub rotational: bool,

    /// HDD, SSD or NVME.
    #[serde(rename = "type")]
    pub disk_type: Option<DiskType>,

    /// Size in bytes.
    pub size_bytes: Option<i64>,

    /// Vendor.
    pub vendor: Option<String>,

    /// Model.
    pub model: Option<String>,

    /// Serial number.
    pub serial_number: Option<String>,

    /// World Wide Name.
    pub wwn: Option<String>,

    /// Vendor extension of the World Wide Name.
    pub wwn_vendor_extension: Option<String>,

    /// World Wide Name with the vendor extension.
    pub wwn_with_extension: Option<String>,

    /// SCSI address host:channel:target:lun.
    pub hctl: Option<String>,
}

/// Processors.
#[serde_with::skip_serializing_none]
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Cpu {
    /// Architecture, e.g. x86_64.
    pub arch: Option<String>,
    /// Model name.
    pub model: Option<String>,
    /// Clock speed in MHz.
    pub clock_megahertz: Option<f64>,
    /// CPU feature flags, sorted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub flags: Vec<String>,
    /// Number of logical CPUs.
    pub count: Option<i64>,
}

impl HardwareData {
    /// `namespace/name`, for logs and messages.
    pub fn namespaced_name(&self) -> String {
        crate::api::namespaced_name(&self.metadata)
    }
}
