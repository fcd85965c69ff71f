//! The words of the state machine: the provisioner [`Operation`]s, the one [`Step`]
//! a reconcile takes, what a call reported ([`CallResult`]), how the status changes
//! ([`Update`]), and the polls and limits the steps use.

use std::time::Duration;

use crate::api::{ErrorType, OperationalStatus, ProvisioningState as State};

/// How often a host in a stable state is looked at (power, changes).
pub const STEADY_POLL: Duration = Duration::from_secs(60);
/// How often an unmanaged or detached host is looked at.
pub const SLOW_POLL: Duration = Duration::from_secs(600);
/// How long preparing waits for HostFirmwareSettings conditions that describe the
/// current spec.
pub const FIRMWARE_WAIT: Duration = Duration::from_secs(10);
/// After this many failures, deletion gives up on deprovisioning / power-off.
pub const DELETE_RETRY_LIMIT: i64 = 3;
/// Provisioning attempts for one image before bmo stops retrying.
pub const MAX_PROVISIONING_RETRIES: i64 = 5;

/// A provisioner operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    Register,
    Inspect { refresh: bool },
    Prepare,
    Provision,
    Deprovision,
    Adopt,
    PowerOn,
    PowerOff { hard: bool },
    Detach,
    Delete,
    Service,
}

impl Operation {
    /// Whether the operation can destroy what is on the machine or stop it: writing
    /// an image (and the cleaning before it), cleaning, deprovisioning, flashing
    /// firmware, powering off, deleting. These act only on a host read at its newest
    /// resourceVersion (docs/architecture.md, "Crash safety and node ownership").
    pub fn is_destructive(self) -> bool {
        matches!(
            self,
            Self::Provision
                | Self::Prepare
                | Self::Deprovision
                | Self::Service
                | Self::PowerOff { .. }
                | Self::Delete
        )
    }

    /// The error type a failure of this operation sets.
    pub fn error_type(self, state: State) -> ErrorType {
        match self {
            Self::Register => ErrorType::Registration,
            Self::Inspect { .. } => ErrorType::Inspection,
            Self::Prepare => ErrorType::Preparation,
            Self::Provision | Self::Deprovision => ErrorType::Provisioning,
            Self::Adopt => ErrorType::ProvisionedRegistration,
            Self::PowerOn | Self::PowerOff { .. } => ErrorType::PowerManagement,
            Self::Detach => ErrorType::Detach,
            Self::Service => ErrorType::Servicing,
            Self::Delete => match state {
                State::Deleting => ErrorType::Registration,
                _ => ErrorType::Detach,
            },
        }
    }

    /// The event announcing that this operation started, where upstream posts one
    /// (the ends are announced by the transitions that follow them).
    pub fn start_reason(self) -> Option<(&'static str, &'static str)> {
        match self {
            Operation::Inspect { .. } => Some(("InspectionStarted", "Hardware inspection started")),
            _ => None,
        }
    }

    /// The event reason of a failure of this operation.
    pub fn failure_reason(self, state: State) -> &'static str {
        match self.error_type(state) {
            ErrorType::Registration => "RegistrationError",
            ErrorType::ProvisionedRegistration => "ProvisionedRegistrationError",
            ErrorType::Inspection => "InspectionError",
            ErrorType::Preparation => "PreparationError",
            ErrorType::Provisioning => "ProvisioningError",
            ErrorType::PowerManagement => "PowerManagementError",
            ErrorType::Detach => "DetachError",
            ErrorType::Servicing => "ServicingError",
        }
    }
}

/// The one thing to do now.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// Store the hardware details with the lease table's NIC details, and say so.
    SaveLeaseDetails,
    /// Check the host's registration with the provisioner (it re-creates a vanished
    /// record and sends changed credentials), then ask again.
    CheckRegistration,
    /// Save what the registration check found, with the credentials as tried.
    SaveRegistration(Update),
    /// The host counts as provisioned but its record is not deployed (it vanished and
    /// was re-created): adopt it with its image, then ask again.
    Readopt,
    /// Change the status only (no hardware involved), then look again at once.
    Transition(Update),
    /// Attach, change or eject the host's DataImage before powering it on
    /// (`controller::dataimage::prepare_power_on`), then ask again.
    PrepareDataImage,
    /// Ask the provisioner.
    Call(Operation),
    /// Nothing to do; look again after this long.
    Wait(Duration),
}

/// What a provisioner call reported.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallResult {
    /// The operation reached its end.
    Done,
    /// Still running; look again after this long. `changed` when the call started
    /// something.
    InProgress { after: Duration, changed: bool },
    /// The call started the operation itself (not a step on the way to it); look
    /// again after this long.
    Started { after: Duration },
    /// Failed, with one human sentence.
    Failed(String),
}

/// How the status changes.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Update {
    pub state: Option<State>,
    pub error: ErrorChange,
    pub powered_on: Option<bool>,
    /// `provisioningFailCount` goes up by one.
    pub provisioning_failed: bool,
    /// The spec's image / custom deploy become the provisioned ones (or are cleared).
    pub record_provisioned: Option<bool>,
    /// The spec's RAID and `spec.firmware` become the prepared ones (`true`: the clean
    /// carrying them started, so that it is not started again once Ironic is back in
    /// `manageable`, as upstream) or are forgotten (`false`: preparing failed, so the
    /// next attempt applies them again).
    pub record_prepared: Option<bool>,
    pub operational_status: Option<OperationalStatus>,
    /// An event for the host: (reason, message, is a warning).
    pub event: Option<(String, String, bool)>,
    /// Remove the one-shot reboot annotation.
    pub clear_reboot: bool,
    /// Remove the inspect (re-inspection) annotation.
    pub clear_inspect_annotation: bool,
    /// The host is gone from the provisioner: remove bmo's finalizer (no status write).
    pub release: bool,
    pub requeue: Requeue,
}

/// When to look at the host again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Requeue {
    /// At once (something changed).
    #[default]
    Now,
    After(Duration),
    /// After the error backoff for the new error count.
    Backoff,
    /// Not until something about the host changes (watch event).
    OnChange,
}

/// Error fields.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum ErrorChange {
    #[default]
    Keep,
    /// Success: operationalStatus OK, errorType, errorMessage and errorCount cleared.
    Clear,
    /// A failure: errorCount goes up by one.
    Set(ErrorType, String),
}
