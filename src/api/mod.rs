//! The `metal3.io/v1alpha1` API that bmo serves: `BareMetalHost` and `HardwareData`.
//!
//! The types are wire-compatible with upstream metal3 (same JSON names, enums, defaults
//! and required fields), so existing manifests and tools keep working. bmo's additions
//! are optional fields, marked as such in docs/api.md.
//!
//! - [`host`]: `BareMetalHost` (spec, status and every nested type).
//! - [`hardware`]: `HardwareDetails` (inspection results) and the `HardwareData` resource.
//! - [`crd`]: the CustomResourceDefinitions with their CEL validation rules, and the
//!   ValidatingAdmissionPolicies for what a CRD cannot check; `bmo crds` prints them.
//! - [`install`]: applying those to a cluster (server-side apply, idempotent).
//!
//! Install the CRDs from [`crd::baremetalhost_crd`] / [`crd::hardwaredata_crd`] (or
//! [`install::install`]), not from kube's derived `BareMetalHost::crd()`, which lacks
//! the validation rules and upstream's nullable and atomic markers.

pub mod admission;
pub mod crd;
pub mod hardware;
pub mod host;
pub mod install;

pub use hardware::{
    Bios, Cpu, DiskType, Firmware, HardwareData, HardwareDataSpec, HardwareDetails,
    HardwareSystemVendor, Lldp, Nic, Storage, Vlan,
};
pub use host::{
    AutomatedCleaningMode, BareMetalHost, BareMetalHostSpec, BareMetalHostStatus, BmcDetails,
    BootMode, ChecksumType, CredentialsStatus, CustomDeploy, ErrorType, FirmwareConfig,
    HardwareRaidLevel, HardwareRaidVolume, HostNetworkAttachmentRef, Image, ImageFormat,
    InlineUserData, InspectionMode, NetworkInterface, OperationHistory, OperationMetric,
    OperationalStatus, ProvisionStatus, ProvisioningState, RaidConfig, RootDeviceHints,
    SoftwareRaidLevel, SoftwareRaidVolume, SwitchPortIdentifier,
};

/// API group of every bmo resource.
pub const GROUP: &str = "metal3.io";
/// API version of every bmo resource.
pub const VERSION: &str = "v1alpha1";
