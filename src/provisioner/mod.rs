//! The one door between the host controller and the hardware world.
//!
//! [`Provisioner`] turns lifecycle steps (register, inspect, prepare, provision,
//! deprovision, power, adopt, detach, delete) into work on the hardware. Every call is
//! idempotent and non-blocking: it looks at where the host is, does at most the next
//! step, and returns an [`Outcome`]: whether something changed, when to look again,
//! and, on failure, one human sentence. [`IronicProvisioner`] is the real
//! implementation; [`FixtureProvisioner`] is an in-memory one for state-machine tests.
//!
//! The provisioner speaks the API's data types (`crate::api`): inspection returns the
//! CRD's `HardwareDetails`, and requests carry the spec's image, root device hints and
//! RAID as they are. The controller assembles [`Host`], [`ProvisionRequest`] and
//! [`PrepareRequest`] from a BareMetalHost; nothing here reads Kubernetes objects.

mod configdrive;
mod fixture;
mod hardware;
mod ironic;
mod types;

use std::collections::{BTreeMap, HashMap};
use std::future::Future;

pub use fixture::{FixtureHost, FixtureOperation, FixtureProvisioner, FixtureState};
pub use ironic::{IronicProvisioner, ProvisionerSettings};
pub use types::{
    AutomatedCleaningMode, BootMode, DeployRamdisk, Host, HostId, InspectStatus, InspectionMode,
    Outcome, PowerMode, PowerState, PrepareRequest, PrepareStatus, Progress, ProvisionRequest,
    Registration, SOFT_POWER_OFF_TIMEOUT,
};

use crate::api::firmware::SettingSchema;
use crate::ironic::IronicError;

/// A provisioner call that could not be carried out at all (as opposed to an
/// [`Outcome`] with an error, which is the hardware's answer). The controller retries
/// these with backoff.
#[derive(Debug, thiserror::Error)]
pub enum ProvisionerError {
    #[error("host {host}: {source}")]
    Ironic {
        host: String,
        #[source]
        source: IronicError,
    },
    #[error("host {host} is not registered with the provisioner; register it first")]
    NeedsRegistration { host: String },
}

impl ProvisionerError {
    /// The Ironic error, when Ironic could not be reached at all.
    pub fn unreachable(&self) -> Option<&IronicError> {
        match self {
            Self::Ironic { source, .. } if source.is_unreachable() => Some(source),
            _ => None,
        }
    }
}

pub type ProvisionerResult<T> = Result<Outcome<T>, ProvisionerError>;

/// Lifecycle operations on one host. Implementations keep no per-host state that the
/// controller could not rebuild: everything needed is in [`Host`] and the hardware.
pub trait Provisioner: Send + Sync {
    /// Creates or updates the host's record (node, boot port, BMC access) and checks
    /// the credentials; `value.credentials_valid` once the BMC answered.
    fn register(&self, host: &Host)
    -> impl Future<Output = ProvisionerResult<Registration>> + Send;

    /// Starts inspection (or again when `refresh`), waits for it, and returns the
    /// hardware details.
    fn inspect(
        &self,
        host: &Host,
        refresh: bool,
    ) -> impl Future<Output = ProvisionerResult<InspectStatus>> + Send;

    /// Applies RAID, BIOS settings and the optional full disk wipe as manual cleaning.
    fn prepare(
        &self,
        host: &Host,
        request: &PrepareRequest,
    ) -> impl Future<Output = ProvisionerResult<PrepareStatus>> + Send;

    /// Writes the image (or boots the live ISO / runs the custom deploy step).
    fn provision(
        &self,
        host: &Host,
        request: &ProvisionRequest,
    ) -> impl Future<Output = ProvisionerResult<Progress>> + Send;

    /// Removes the instance and runs automated cleaning; done when available again.
    fn deprovision(&self, host: &Host) -> impl Future<Output = ProvisionerResult<Progress>> + Send;

    /// Takes over a host that already runs its OS (externally provisioned, or whose
    /// record vanished) as provisioned, without deploying anything.
    fn adopt(
        &self,
        host: &Host,
        request: &ProvisionRequest,
    ) -> impl Future<Output = ProvisionerResult<Progress>> + Send;

    /// Done when the host is on.
    fn power_on(&self, host: &Host) -> impl Future<Output = ProvisionerResult<PowerState>> + Send;

    /// Done when the host is off. Soft asks the OS first and falls back to hard
    /// power off when the BMC cannot do soft power off.
    fn power_off(
        &self,
        host: &Host,
        mode: PowerMode,
    ) -> impl Future<Output = ProvisionerResult<PowerState>> + Send;

    /// Forgets the host in the provisioner without touching the machine (the
    /// BareMetalHost stays).
    fn detach(&self, host: &Host) -> impl Future<Output = ProvisionerResult<()>> + Send;

    /// Removes the host's record from any state; done when it is gone.
    fn delete(&self, host: &Host) -> impl Future<Output = ProvisionerResult<()>> + Send;

    /// Every node's state digest (as [`Registration::node_state`] gives it), by
    /// provisioning ID, from one list: how hosts at rest are watched for changes made
    /// behind bmo's back.
    fn node_states(
        &self,
    ) -> impl Future<Output = Result<HashMap<String, u64>, ProvisionerError>> + Send;
}

/// Which node a read is about: the host, and the node UUID from
/// `status.provisioning.ID` when recorded (reads need no BMC access).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeRef {
    pub id: HostId,
    pub provisioning_id: Option<String>,
}

/// A node's BIOS settings as its BMC reports them, and what each accepts.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BiosSettings {
    /// Name → current value.
    pub settings: BTreeMap<String, String>,
    /// Name → type, allowed values, limits, read-only flag.
    pub schema: BTreeMap<String, SettingSchema>,
}

/// Firmware reads for the firmware controllers.
pub trait FirmwareReader: Send + Sync {
    /// The node's BIOS settings; `None` when the provisioner has no such node.
    fn bios_settings(
        &self,
        node: &NodeRef,
    ) -> impl Future<Output = Result<Option<BiosSettings>, ProvisionerError>> + Send;
}

impl FirmwareReader for IronicProvisioner {
    async fn bios_settings(
        &self,
        node: &NodeRef,
    ) -> Result<Option<BiosSettings>, ProvisionerError> {
        self.read_bios(node).await
    }
}
