//! What the reconciler found out before planning ([`Facts`]), and the parts of it
//! that are types of their own.

use super::step::CallResult;
use crate::api::firmware::{HostUpdatePolicy, UpdatePolicy};
pub use crate::api::firmware_pending::{PendingSettings, PendingUpdates};

/// What the reconciler found out before planning.
#[derive(Debug, Clone, PartialEq)]
pub struct Facts {
    pub credentials: CredentialsCheck,
    /// The power the BMC reports, for hosts in a stable state; `None` when unknown.
    pub power: Option<bool>,
    /// The power the BMC reports in any state; `None` when unknown. A step into a
    /// stable state records it with the state, so that one write says both.
    pub reported_power: Option<bool>,
    /// A provisioning slot is free (`PROVISIONING_LIMIT`).
    pub has_capacity: bool,
    /// A reboot is asked for by annotation: `Some(hard)` while one is present.
    pub reboot: Option<RebootRequest>,
    /// Why the spec gives the provisioner no usable view of the host (a bad BMC
    /// address, an unknown hardware profile, a missing network data Secret); `None`
    /// when it does.
    pub spec_problem: Option<SpecProblem>,
    /// NICs' DHCP hostnames or leased addresses (bmo's lease table) changed the
    /// stored hardware details.
    pub lease_details_changed: bool,
    /// What the registration check reported, once it was made in this reconcile.
    pub registration: Option<RegistrationCheck>,
    /// What re-adopting the host reported, once it was made in this reconcile.
    pub adoption: Option<CallResult>,
    /// BIOS settings the host's HostFirmwareSettings and, while preparing, its
    /// `spec.firmware` ask for (read for available and preparing hosts, and for
    /// provisioned ones whose HostUpdatePolicy lets servicing change them).
    pub firmware: PendingSettings,
    /// Firmware updates the host's HostFirmwareComponents asks for (read as
    /// `firmware`).
    pub firmware_updates: PendingUpdates,
    /// What the host's HostUpdatePolicy lets servicing apply (read for provisioned
    /// hosts when [`wants_servicing_facts`]).
    pub servicing_allowed: ServicingAllowed,
    /// The HostFirmwareSettings / HostFirmwareComponents servicing may apply ask
    /// for something at all (upstream's "has firmware spec"); without it, servicing
    /// that waits or failed is aborted.
    pub firmware_spec_set: bool,
    /// The DataImage of a provisioned host about to be powered on was seen to (it
    /// is attached, changed or ejected first, as upstream does).
    pub data_image_checked: bool,
}

/// Why the spec gives the provisioner no usable view of the host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpecProblem {
    pub message: String,
    /// A Secret the spec names is missing or unusable: it can be fixed without the
    /// host changing, so the host looks again on the error backoff.
    pub in_secret: bool,
}

impl SpecProblem {
    /// A problem only a change of the host's spec fixes.
    pub fn in_spec(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            in_secret: false,
        }
    }
}

/// A `reboot.metal3.io[/suffix]` annotation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RebootRequest {
    pub hard: bool,
    /// Suffix-less annotations are one-shot: removed once the host is off.
    pub one_shot: bool,
}

/// The BMC credentials Secret, as the reconciler found it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CredentialsCheck {
    Valid,
    /// The Secret does not exist (yet).
    Missing(String),
    /// It exists but cannot be used (empty username, bad address, …).
    Invalid(String),
}

/// What the registration check reported.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegistrationCheck {
    pub result: CallResult,
    /// The provisioner's record of the host is deployed (holds an image).
    pub deployed: bool,
}

/// What a host's HostUpdatePolicy lets servicing apply.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ServicingAllowed {
    /// HostFirmwareSettings changes (`firmwareSettings: onReboot`).
    pub settings: bool,
    /// HostFirmwareComponents updates (`firmwareUpdates: onReboot`).
    pub updates: bool,
}

impl ServicingAllowed {
    /// No policy allows nothing, as upstream: servicing is opt-in.
    pub fn from_policy(policy: Option<&HostUpdatePolicy>) -> Self {
        let on_reboot = |p: Option<UpdatePolicy>| p == Some(UpdatePolicy::OnReboot);
        policy.map_or_else(Self::default, |p| Self {
            settings: on_reboot(p.spec.firmware_settings),
            updates: on_reboot(p.spec.firmware_updates),
        })
    }
}
