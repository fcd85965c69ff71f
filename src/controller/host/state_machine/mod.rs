//! The host lifecycle as pure functions: no I/O, no clock, no randomness.
//!
//! [`next`] looks at a host and what the reconciler learned about it so far
//! ([`Facts`]) and names the one thing to do now ([`Step`]): a spec error, the
//! registration check every registered host gets, what that check leads to, and then
//! the state's own step ([`plan`]). When a step asks the provisioner, the reconciler
//! makes the call and either adds its answer to the facts and asks again (the
//! registration check, re-adoption) or hands the result to [`after`], which says how
//! the status changes ([`Update`]). The reconciler only loads, calls and saves.

mod after;
mod apply;
mod checks;
mod next;
pub mod servicing;

use std::time::Duration;

pub use crate::api::firmware_pending::PendingSettings;
pub use crate::api::firmware_pending::PendingUpdates;
use crate::api::{
    BareMetalHost, BareMetalHostStatus, CustomDeploy, ErrorType, Image, OperationalStatus,
    ProvisioningState as State,
};

pub use after::after;
pub use apply::apply;
pub use checks::{
    Gate, gate, moved_away, observed_power, reboot_request, release, restart_on_failure, spec_error,
};
pub use next::{RegistrationCheck, next};
pub use servicing::{ServicingAllowed, servicing_under_way, wants_servicing_facts};

/// How often a host in a stable state is looked at (power, changes).
pub const STEADY_POLL: Duration = Duration::from_secs(60);
/// How often an unmanaged or detached host is looked at.
pub const SLOW_POLL: Duration = Duration::from_secs(600);
/// How long preparing waits for HostFirmwareSettings conditions that describe the
/// current spec.
pub const FIRMWARE_WAIT: Duration = Duration::from_secs(10);
/// After this many failures, deletion gives up on deprovisioning / power-off.
pub const DELETE_RETRY_LIMIT: i64 = 3;

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
    /// address, an unknown hardware profile); `None` when it does.
    pub spec_problem: Option<String>,
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

fn status(host: &BareMetalHost) -> BareMetalHostStatus {
    host.status.clone().unwrap_or_default()
}

fn annotation<'a>(host: &'a BareMetalHost, key: &str) -> Option<&'a str> {
    host.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .map(String::as_str)
}

/// The image URL, when one is set and not empty.
fn image_url(image: Option<&Image>) -> Option<&str> {
    image.map(|i| i.url.as_str()).filter(|u| !u.is_empty())
}

/// The custom deploy method, when one is set (it may be empty).
fn deploy_method(custom_deploy: Option<&CustomDeploy>) -> Option<&str> {
    custom_deploy.map(|c| c.method.as_str())
}

/// The host should be provisioned with an image or custom deploy it does not have.
pub fn needs_provisioning(host: &BareMetalHost) -> bool {
    let st = status(host);
    if !host.spec.online {
        return false;
    }
    if let Some(method) = deploy_method(host.spec.custom_deploy.as_ref()).filter(|m| !m.is_empty())
    {
        return deploy_method(st.provisioning.custom_deploy.as_ref()) != Some(method);
    }
    image_url(host.spec.image.as_ref()).is_some()
        && image_url(st.provisioning.image.as_ref()).is_none()
}

/// The image or custom deploy in the spec no longer matches what was provisioned.
pub fn provisioning_cancelled(host: &BareMetalHost) -> bool {
    let st = status(host);
    let spec_url = image_url(host.spec.image.as_ref());
    let status_url = image_url(st.provisioning.image.as_ref());
    if let Some(method) = deploy_method(host.spec.custom_deploy.as_ref()).filter(|m| !m.is_empty())
    {
        let status_method = deploy_method(st.provisioning.custom_deploy.as_ref());
        return (status_method.is_some() && status_method != Some(method))
            || (status_url.is_some() && spec_url != status_url);
    }
    if st.provisioning.custom_deploy.is_some() {
        return true;
    }
    match spec_url {
        None => true,
        Some(url) => status_url.is_some_and(|s| s != url),
    }
}

fn detached(host: &BareMetalHost) -> bool {
    annotation(host, crate::api::host::DETACHED_ANNOTATION).is_some()
}

/// The `deleteAction` of the detached annotation is `delay`.
pub fn delete_delayed_by_detach(host: &BareMetalHost) -> bool {
    annotation(host, crate::api::host::DETACHED_ANNOTATION)
        .and_then(|v| serde_json::from_str::<serde_json::Value>(v).ok())
        .and_then(|v| {
            v.get("deleteAction")
                .and_then(|a| a.as_str())
                .map(str::to_owned)
        })
        .is_some_and(|a| a == "delay")
}

/// Whether the provisioner must (re-)register the host before the state's own work.
pub fn needs_registration(host: &BareMetalHost) -> bool {
    let state = host.provisioning_state();
    let st = status(host);
    !matches!(state, State::None | State::Unmanaged | State::Deleting)
        && st.operational_status != OperationalStatus::Detached
        && host.metadata.deletion_timestamp.is_none()
}

fn transition(to: State, reason: &str, message: String) -> Step {
    Step::Transition(Update {
        state: Some(to),
        event: Some((reason.to_owned(), message, false)),
        ..Default::default()
    })
}

/// Decides the one thing to do for `host` now.
pub fn plan(host: &BareMetalHost, facts: &Facts) -> Step {
    let state = host.provisioning_state();
    let st = status(host);

    if host.metadata.deletion_timestamp.is_some() {
        return plan_delete(host, &st, state);
    }

    // Detached: Ironic forgets the host; the object stays as it is.
    if detached(host) {
        if st.operational_status == OperationalStatus::Detached {
            return Step::Wait(SLOW_POLL);
        }
        if matches!(
            state,
            State::Provisioned | State::ExternallyProvisioned | State::Ready | State::Available
        ) {
            return Step::Call(Operation::Detach);
        }
        return Step::Wait(STEADY_POLL);
    } else if st.operational_status == OperationalStatus::Detached {
        // Annotation removed: re-attach through registration.
        return Step::Transition(Update {
            operational_status: Some(OperationalStatus::Ok),
            event: Some((
                "Reattached".into(),
                "detached annotation removed; managing the host again".into(),
                false,
            )),
            ..Default::default()
        });
    }

    let step = plan_state(host, &st, facts, state);
    let waiting_for_slot = st.operational_status == OperationalStatus::Delayed
        && facts.has_capacity
        && matches!(
            state,
            State::Available
                | State::Provisioned
                | State::Provisioning
                | State::Inspecting
                | State::Deprovisioning
                | State::Registering
                | State::Preparing
        );
    if !waiting_for_slot {
        return step;
    }
    // The slot came: a step into another state says the host no longer waits, in
    // its own write (clearing the wait as a step of its own would: error fields
    // too); any other step clears the wait on its own first.
    match step {
        Step::Transition(update)
            if update.state.is_some() && !matches!(update.error, ErrorChange::Set(..)) =>
        {
            Step::Transition(Update {
                error: ErrorChange::Clear,
                ..update
            })
        }
        _ => Step::Transition(Update {
            error: ErrorChange::Clear,
            ..Default::default()
        }),
    }
}

/// The state's own step.
fn plan_state(host: &BareMetalHost, st: &BareMetalHostStatus, facts: &Facts, state: State) -> Step {
    match state {
        State::None | State::Unmanaged => plan_unregistered(host, state),
        State::Registering => {
            if let Some(step) = credentials_problem(facts) {
                return step;
            }
            Step::Call(Operation::Register)
        }
        State::Inspecting | State::MatchProfile => plan_inspecting(host, state),
        // BIOS settings bmo cannot apply fail preparing until the spec changes.
        State::Preparing if matches!(facts.firmware, PendingSettings::Refused(_)) => {
            refuse_settings(st, &facts.firmware)
        }
        // Wait until the firmware controller judged the current spec (upstream).
        State::Preparing
            if facts.firmware == PendingSettings::NotReady
                || facts.firmware_updates == PendingUpdates::NotReady =>
        {
            Step::Wait(FIRMWARE_WAIT)
        }
        State::Preparing => Step::Call(Operation::Prepare),
        State::Available | State::Ready => plan_available(host, st, facts),
        State::Provisioning => {
            if provisioning_cancelled(host) {
                return transition(
                    State::Deprovisioning,
                    "ProvisioningCancelled",
                    "image or custom deploy changed or removed; deprovisioning".into(),
                );
            }
            Step::Call(Operation::Provision)
        }
        State::Provisioned => {
            if provisioning_cancelled(host) {
                return with_capacity(
                    host,
                    facts,
                    transition(
                        State::Deprovisioning,
                        "DeprovisioningStarted",
                        "image or custom deploy removed or changed; deprovisioning".into(),
                    ),
                );
            }
            plan_power(host, st, facts)
        }
        State::ExternallyProvisioned => plan_externally_provisioned(host, st, facts),
        State::Deprovisioning => Step::Call(Operation::Deprovision),
        State::PoweringOffBeforeDelete | State::Deleting => {
            // Only reachable with a deletion timestamp; otherwise a stale state.
            Step::Wait(STEADY_POLL)
        }
    }
}

/// A host with no state yet or unmanaged: registered once it has BMC details.
fn plan_unregistered(host: &BareMetalHost, state: State) -> Step {
    if host.has_bmc_details() {
        let message = if state == State::None {
            "registering the host with the provisioner"
        } else {
            "BMC details added; registering the host"
        };
        return transition(State::Registering, "Registering", message.into());
    }
    if state == State::Unmanaged {
        return Step::Wait(SLOW_POLL);
    }
    Step::Transition(Update {
        state: Some(State::Unmanaged),
        operational_status: Some(OperationalStatus::Discovered),
        event: Some((
            "Discovered".into(),
            "no BMC details: the host is unmanaged until spec.bmc is set".into(),
            false,
        )),
        ..Default::default()
    })
}

/// Inspection, unless it is disabled; the legacy `match profile` state always
/// moves on to preparing, as upstream's does.
fn plan_inspecting(host: &BareMetalHost, state: State) -> Step {
    if state == State::MatchProfile || host.inspection_disabled() {
        return Step::Transition(Update {
            state: Some(State::Preparing),
            error: ErrorChange::Clear,
            event: Some((
                "InspectionSkipped".into(),
                "inspection disabled; hardware details not gathered".into(),
                false,
            )),
            ..Default::default()
        });
    }
    Step::Call(Operation::Inspect {
        refresh: annotation(host, crate::api::host::INSPECT_ANNOTATION).is_some(),
    })
}

/// Power only; once `externallyProvisioned` is cleared the host counts as
/// provisioned by bmo, as upstream's does.
fn plan_externally_provisioned(
    host: &BareMetalHost,
    st: &BareMetalHostStatus,
    facts: &Facts,
) -> Step {
    if !host.spec.externally_provisioned {
        return Step::Transition(Update {
            state: Some(State::Provisioned),
            record_provisioned: Some(true),
            event: Some((
                "Provisioned".into(),
                "externallyProvisioned cleared; the host counts as provisioned by bmo".into(),
                false,
            )),
            ..Default::default()
        });
    }
    plan_power(host, st, facts)
}

/// A preparation error for BIOS settings that cannot be applied, said once: the host
/// waits for its spec or its HostFirmwareSettings to change.
fn refuse_settings(st: &BareMetalHostStatus, firmware: &PendingSettings) -> Step {
    let PendingSettings::Refused(message) = firmware else {
        return Step::Wait(FIRMWARE_WAIT);
    };
    let said = st.error_type == Some(ErrorType::Preparation) && st.error_message == *message;
    Step::Transition(Update {
        error: if said {
            ErrorChange::Keep
        } else {
            ErrorChange::Set(ErrorType::Preparation, message.clone())
        },
        event: (!said).then(|| ("PreparationError".to_owned(), message.clone(), true)),
        requeue: Requeue::OnChange,
        ..Default::default()
    })
}

fn credentials_problem(facts: &Facts) -> Option<Step> {
    let (message, requeue) = match &facts.credentials {
        CredentialsCheck::Valid => return None,
        // The Secret's creation wakes the host (the watch maps it by name); until
        // then the host is looked at once per backoff step.
        CredentialsCheck::Missing(m) => (m.clone(), Requeue::Backoff),
        CredentialsCheck::Invalid(m) => (m.clone(), Requeue::OnChange),
    };
    Some(Step::Transition(Update {
        error: ErrorChange::Set(ErrorType::Registration, message.clone()),
        event: Some(("BMCCredentialError".into(), message, true)),
        requeue,
        ..Default::default()
    }))
}

/// `step` when a provisioning slot is free; else the host waits for one. The event
/// says so once, when the host starts waiting, not at each of its looks while it
/// waits (at 1000 hosts and 20 slots, 8 events per host).
fn with_capacity(host: &BareMetalHost, facts: &Facts, step: Step) -> Step {
    if facts.has_capacity {
        return step;
    }
    let waiting = host
        .status
        .as_ref()
        .is_some_and(|s| s.operational_status == OperationalStatus::Delayed);
    Step::Transition(Update {
        operational_status: Some(OperationalStatus::Delayed),
        event: (!waiting).then(|| {
            (
                "Delayed".into(),
                "waiting for a provisioning slot (PROVISIONING_LIMIT)".into(),
                false,
            )
        }),
        requeue: Requeue::After(Duration::from_secs(60)),
        ..Default::default()
    })
}

fn plan_available(host: &BareMetalHost, st: &BareMetalHostStatus, facts: &Facts) -> Step {
    if host.spec.externally_provisioned {
        return transition(
            State::ExternallyProvisioned,
            "ExternallyProvisioned",
            "host marked externally provisioned; only power is managed".into(),
        );
    }
    if annotation(host, crate::api::host::INSPECT_ANNOTATION).is_some_and(|v| v != "disabled") {
        return with_capacity(
            host,
            facts,
            transition(
                State::Inspecting,
                "InspectionRequested",
                "inspect annotation set; inspecting again".into(),
            ),
        );
    }
    if host.spec.raid != st.provisioning.raid && host.spec.raid.is_some() {
        return transition(
            State::Preparing,
            "Preparing",
            "RAID settings changed; preparing again".into(),
        );
    }
    if matches!(facts.firmware, PendingSettings::Apply(_)) {
        return transition(
            State::Preparing,
            "Preparing",
            "BIOS settings changed; preparing again".into(),
        );
    }
    // As RAID: what preparing applied is recorded, and a different wish prepares again
    // (the vendor's names are worked out there).
    if host.spec.firmware != st.provisioning.firmware {
        return transition(
            State::Preparing,
            "Preparing",
            "spec.firmware changed; preparing again".into(),
        );
    }
    if matches!(facts.firmware_updates, PendingUpdates::Apply { .. }) {
        return transition(
            State::Preparing,
            "Preparing",
            "firmware updates requested; preparing again".into(),
        );
    }
    if needs_provisioning(host) {
        // Out of attempts at this image; a different image starts over (apply resets
        // the count when provisioning starts with it).
        if st.error_type == Some(ErrorType::Provisioning)
            && st.provisioning_fail_count >= crate::controller::host::MAX_PROVISIONING_RETRIES
            && st.last_attempted_image == host.spec.image
        {
            return Step::Wait(SLOW_POLL);
        }
        return with_capacity(
            host,
            facts,
            Step::Transition(Update {
                state: Some(State::Provisioning),
                error: ErrorChange::Clear,
                event: Some((
                    "ProvisioningStarted".into(),
                    "provisioning the image".into(),
                    false,
                )),
                ..Default::default()
            }),
        );
    }
    plan_power(host, st, facts)
}

/// Keeps power as `spec.online` (and reboot annotations) ask, in stable states.
fn plan_power(host: &BareMetalHost, st: &BareMetalHostStatus, facts: &Facts) -> Step {
    // Unknown power (a BMC that has not said yet) counts as what was last recorded,
    // so a host that should be on is still powered on.
    let observed = facts.power.unwrap_or(st.powered_on);
    if observed != st.powered_on {
        return Step::Transition(Update {
            powered_on: Some(observed),
            ..Default::default()
        });
    }
    if let Some(reboot) = facts.reboot
        && !observed
        && reboot.one_shot
    {
        // The one-shot reboot has done its power-off; power comes back below.
        return Step::Transition(Update {
            clear_reboot: true,
            event: Some((
                "RebootRequested".into(),
                "host powered off for the requested reboot; powering on".into(),
                false,
            )),
            ..Default::default()
        });
    }
    let wanted = host.spec.online && facts.reboot.is_none();
    let provisioned = matches!(
        st.provisioning.state,
        State::Provisioned | State::ExternallyProvisioned
    );
    if provisioned && let Some(step) = servicing::plan(st, facts, !observed && wanted) {
        return step;
    }
    match (observed, wanted) {
        // Upstream attaches DataImages only here: a provisioned host powering on.
        (false, true)
            if !facts.data_image_checked
                && matches!(
                    st.provisioning.state,
                    State::Provisioned | State::ExternallyProvisioned
                ) =>
        {
            Step::PrepareDataImage
        }
        (false, true) => Step::Call(Operation::PowerOn),
        (true, false) if !host.spec.disable_power_off || facts.reboot.is_some() => {
            let hard = facts.reboot.is_some_and(|r| r.hard)
                || st.error_type == Some(ErrorType::PowerManagement);
            Step::Call(Operation::PowerOff { hard })
        }
        _ => {
            if st.error_type == Some(ErrorType::PowerManagement) {
                return Step::Transition(Update {
                    error: ErrorChange::Clear,
                    requeue: Requeue::After(STEADY_POLL),
                    ..Default::default()
                });
            }
            Step::Wait(STEADY_POLL)
        }
    }
}

fn plan_delete(host: &BareMetalHost, st: &BareMetalHostStatus, state: State) -> Step {
    let is_detached = st.operational_status == OperationalStatus::Detached || detached(host);
    if is_detached && state != State::Deleting {
        if delete_delayed_by_detach(host) {
            return Step::Wait(SLOW_POLL);
        }
        return transition(
            State::Deleting,
            "Deleting",
            "deleting a detached host".into(),
        );
    }
    let gave_up = st.error_count > DELETE_RETRY_LIMIT;
    match state {
        State::None | State::Unmanaged | State::Registering => {
            transition(State::Deleting, "Deleting", "deleting the host".into())
        }
        State::Provisioning | State::Provisioned => transition(
            State::Deprovisioning,
            "DeprovisioningStarted",
            "host deleted; deprovisioning first".into(),
        ),
        State::Deprovisioning => {
            if gave_up {
                return transition(
                    State::PoweringOffBeforeDelete,
                    "DeprovisioningSkipped",
                    format!(
                        "deprovisioning failed {} times; deleting without it",
                        st.error_count
                    ),
                );
            }
            Step::Call(Operation::Deprovision)
        }
        State::PoweringOffBeforeDelete => {
            if gave_up || host.spec.disable_power_off {
                return transition(State::Deleting, "Deleting", "deleting the host".into());
            }
            Step::Call(Operation::PowerOff { hard: true })
        }
        // Deleting a node that is already gone (detached) succeeds at once.
        State::Deleting => Step::Call(Operation::Delete),
        _ => transition(
            State::PoweringOffBeforeDelete,
            "PowerOff",
            "host deleted; powering it off first".into(),
        ),
    }
}

/// `update` with the power the BMC reported in this reconcile when the update moves
/// the host into a stable state and the power differs from the status: the write
/// that says `provisioned` then also says `poweredOn`, rather than a second write at
/// the next look.
pub fn with_reported_power(host: &BareMetalHost, facts: &Facts, mut update: Update) -> Update {
    let into_stable = matches!(
        update.state,
        Some(State::Available | State::Ready | State::Provisioned | State::ExternallyProvisioned)
    );
    if into_stable && update.powered_on.is_none() {
        update.powered_on = facts
            .reported_power
            .filter(|on| *on != status(host).powered_on);
    }
    update
}

#[cfg(test)]
mod tests;
