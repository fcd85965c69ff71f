//! The state's own step: what a host in each provisioning state does next once the
//! checks every reconcile makes are passed.

use std::time::Duration;

use super::facts::{CredentialsCheck, Facts, PendingSettings, PendingUpdates};
use super::queries::{
    annotation, delete_delayed_by_detach, detach_forced, detached, needs_provisioning,
    provisioning_cancelled, status,
};
use super::servicing;
use super::step::{
    DELETE_RETRY_LIMIT, ErrorChange, FIRMWARE_WAIT, MAX_PROVISIONING_RETRIES, Operation, Requeue,
    SLOW_POLL, STEADY_POLL, Step, Update,
};
use crate::api::{
    BareMetalHost, BareMetalHostStatus, ErrorType, OperationalStatus, ProvisioningState as State,
};

fn transition(to: State, reason: &str, message: String) -> Step {
    Step::Transition(moving_to(to, reason, message))
}

/// The update that moves the host to `to`, announced by a normal event.
fn moving_to(to: State, reason: &str, message: String) -> Update {
    Update {
        state: Some(to),
        event: Some((reason.to_owned(), message, false)),
        ..Default::default()
    }
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
        let stable = matches!(
            state,
            State::Provisioned | State::ExternallyProvisioned | State::Ready | State::Available
        );
        // Forced, the provisioner aborts what the node is doing; the provisioning
        // state stays, and deleting the host then skips deprovisioning.
        if stable || detach_forced(host) {
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

/// The first state of a host just created (no status at all), decided from its spec
/// alone, so that the write that shows it needs nothing read first. `None` when the
/// host needs the whole reconcile (a status, deletion, a detached annotation).
pub fn first_state(host: &BareMetalHost) -> Option<Update> {
    let fresh =
        host.status.is_none() && host.metadata.deletion_timestamp.is_none() && !detached(host);
    match plan_unregistered(host, State::None) {
        Step::Transition(update) if fresh => Some(update),
        _ => None,
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
            error: ErrorChange::Clear,
            ..moving_to(
                State::Preparing,
                "InspectionSkipped",
                "inspection disabled; hardware details not gathered".into(),
            )
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
            record_provisioned: Some(true),
            ..moving_to(
                State::Provisioned,
                "Provisioned",
                "externallyProvisioned cleared; the host counts as provisioned by bmo".into(),
            )
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
            && st.provisioning_fail_count >= MAX_PROVISIONING_RETRIES
            && st.last_attempted_image == host.spec.image
        {
            return Step::Wait(SLOW_POLL);
        }
        return with_capacity(
            host,
            facts,
            Step::Transition(Update {
                error: ErrorChange::Clear,
                ..moving_to(
                    State::Provisioning,
                    "ProvisioningStarted",
                    "provisioning the image".into(),
                )
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
