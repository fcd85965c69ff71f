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

pub use configdrive::parse_document;
pub use fixture::{FixtureHost, FixtureOperation, FixtureProvisioner, FixtureState};
pub use ironic::{IronicProvisioner, ProvisionerSettings};
pub use types::{
    AutomatedCleaningMode, BootMode, DeployRamdisk, Host, HostId, InspectStatus, InspectionMode,
    NodeOwners, Outcome, PowerMode, PowerState, PrepareRequest, PrepareStatus, Progress,
    ProvisionRequest, Registration, SOFT_POWER_OFF_TIMEOUT, ServiceRequest,
};

use crate::api::firmware::{FirmwareComponentStatus, SettingSchema};
use crate::credentials::SecretString;
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
    /// The Ironic error, when Ironic could not be reached at all, or answered that it
    /// could not reach the conductor handling the node (one that died, until another
    /// takes its nodes over).
    pub fn unreachable(&self) -> Option<&IronicError> {
        match self {
            Self::Ironic { source, .. }
                if source.is_unreachable() || source.is_conductor_unreachable() =>
            {
                Some(source)
            }
            _ => None,
        }
    }
}

pub type ProvisionerResult<T> = Result<Outcome<T>, ProvisionerError>;

/// Lifecycle operations on one host. Implementations keep no per-host state that the
/// controller could not rebuild: everything needed is in [`Host`] and the hardware.
pub trait Provisioner: DataImageProvisioner {
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

    /// Applies BIOS settings and firmware updates to a provisioned host as Ironic's
    /// servicing; done when the host is back in service. Servicing that failed is
    /// aborted once nothing is left to apply, and servicing that waits once the
    /// change is withdrawn.
    fn service(
        &self,
        host: &Host,
        request: &ServiceRequest,
    ) -> impl Future<Output = ProvisionerResult<Progress>> + Send;

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

    /// Tells the provisioner who owns which node (the controller's hosts), once they
    /// are watched. Until then, and in implementations without shared records, a
    /// node found by a host's recorded ID or boot MAC is taken as the host's.
    fn attach_node_owners(&self, owners: std::sync::Arc<dyn NodeOwners>) {
        let _ = owners;
    }

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

    /// The node's firmware components (`bios`, `bmc`, `nic:…`) with their versions;
    /// `None` when the provisioner has no such node.
    fn firmware_components(
        &self,
        node: &NodeRef,
    ) -> impl Future<Output = Result<Option<Vec<FirmwareComponentStatus>>, ProvisionerError>> + Send;
}

/// A node's virtual CD, as far as DataImages need it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VirtualCd {
    /// An image is inserted.
    pub inserted: bool,
    /// An operation on the node (an attach or detach running) holds it; ask again
    /// shortly.
    pub busy: bool,
    /// Why the last attach or detach failed, when it did.
    pub failure: Option<String>,
}

/// Virtual media for DataImages. Attaching and detaching only start the work: the
/// next [`Self::virtual_cd`] tells how it went.
pub trait DataImageProvisioner: Send + Sync {
    /// The node's virtual CD; `None` when the provisioner has no such node.
    fn virtual_cd(
        &self,
        node: &NodeRef,
    ) -> impl Future<Output = Result<Option<VirtualCd>, ProvisionerError>> + Send;

    /// Starts inserting the image at `url`; `Some(reason)` when refused.
    fn attach_virtual_cd(
        &self,
        node: &NodeRef,
        url: &str,
    ) -> impl Future<Output = Result<Option<String>, ProvisionerError>> + Send;

    /// Starts ejecting the virtual CD; `Some(reason)` when refused.
    fn detach_virtual_cd(
        &self,
        node: &NodeRef,
    ) -> impl Future<Output = Result<Option<String>, ProvisionerError>> + Send;
}

/// A Redfish event subscription to create on a node's BMC.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SubscriptionRequest {
    /// Where the BMC posts events.
    pub destination: String,
    /// Sent back with every event.
    pub context: Option<String>,
    /// Header name → value, sent with every event (values are secret).
    pub http_headers: Vec<(String, SecretString)>,
}

impl SubscriptionRequest {
    /// `text` with every header value replaced by `***` (an answer that repeats
    /// the request, such as Ironic's error messages, must not show them).
    pub fn mask_header_values(&self, text: &str) -> String {
        let mut masked = text.to_owned();
        for (_, value) in &self.http_headers {
            if !value.is_empty() {
                masked = masked.replace(value.expose(), "***");
            }
        }
        masked
    }
}

/// What a BMC said to a subscription call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SubscriptionAnswer<T> {
    /// Done; for a creation, the subscription's id on the BMC.
    Done(T),
    /// Ironic or the BMC refused; the message says why (header values masked).
    Refused(String),
    /// The provisioner has no such node.
    NoNode,
}

/// Redfish event subscriptions, for the BMCEventSubscription controller.
pub trait EventSubscriber: Send + Sync {
    /// Creates a subscription on the node's BMC.
    fn create_subscription(
        &self,
        node: &NodeRef,
        request: &SubscriptionRequest,
    ) -> impl Future<Output = Result<SubscriptionAnswer<String>, ProvisionerError>> + Send;

    /// Deletes the subscription `id`; one that is already gone is done.
    fn delete_subscription(
        &self,
        node: &NodeRef,
        id: &str,
    ) -> impl Future<Output = Result<SubscriptionAnswer<()>, ProvisionerError>> + Send;
}

#[cfg(test)]
mod subscription_tests {
    use super::*;

    #[test]
    fn header_values_are_masked_in_answers() {
        let request = SubscriptionRequest {
            destination: "http://events.example/".into(),
            context: None,
            http_headers: vec![
                ("Authorization".into(), SecretString::new("Bearer s3cr3t")),
                ("X-Empty".into(), SecretString::new("")),
            ],
        };
        let answer = "payload: {'HttpHeaders': [{'Authorization': 'Bearer s3cr3t'}]}";
        let masked = request.mask_header_values(answer);
        assert_eq!(
            masked,
            "payload: {'HttpHeaders': [{'Authorization': '***'}]}"
        );
        assert!(!format!("{request:?}").contains("s3cr3t"));
    }
}
