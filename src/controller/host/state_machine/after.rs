//! The status change a provisioner call's result leads to.

use super::checks::release;
use super::queries::status;
use super::servicing;
use super::step::{CallResult, ErrorChange, Operation, Requeue, Update};
use crate::api::{BareMetalHost, ErrorType, OperationalStatus, ProvisioningState as State};

/// The status change after `op`, in the host's state, reported `result`.
pub fn after(host: &BareMetalHost, op: Operation, result: &CallResult) -> Update {
    let state = host.provisioning_state();
    let deleting = host.metadata.deletion_timestamp.is_some();
    match result {
        CallResult::InProgress { after, .. } => Update {
            requeue: Requeue::After(*after),
            ..Default::default()
        },
        CallResult::Started { after } if op == Operation::Service => servicing::started(*after),
        CallResult::Started { after } if op == Operation::Prepare => Update {
            requeue: Requeue::After(*after),
            record_prepared: Some(true),
            ..Default::default()
        },
        CallResult::Started { after } => Update {
            requeue: Requeue::After(*after),
            event: op
                .start_reason()
                .map(|(reason, message)| (reason.to_owned(), message.to_owned(), false)),
            // The inspect annotation asked for this inspection: once it started,
            // keeping the annotation would ask for the next one.
            clear_inspect_annotation: matches!(op, Operation::Inspect { .. }),
            ..Default::default()
        },
        CallResult::Failed(message) => {
            let mut update = Update {
                error: ErrorChange::Set(op.error_type(state), message.clone()),
                event: Some((op.failure_reason(state).to_owned(), message.clone(), true)),
                requeue: Requeue::Backoff,
                ..Default::default()
            };
            if op == Operation::Prepare {
                update.record_prepared = Some(false);
            }
            if op == Operation::Provision && state == State::Provisioning {
                // Clean up before the next attempt.
                update.state = Some(State::Deprovisioning);
                update.provisioning_failed = true;
            }
            update
        }
        CallResult::Done => after_done(host, op, state, deleting),
    }
}

fn after_done(host: &BareMetalHost, op: Operation, state: State, deleting: bool) -> Update {
    match op {
        Operation::Register => after_registered(host, state),
        Operation::Inspect { .. } => {
            let mut u = moved(
                State::Preparing,
                "InspectionComplete",
                "hardware inspection complete".into(),
            );
            u.clear_inspect_annotation = true;
            u
        }
        Operation::Prepare => moved(
            State::Available,
            "Available",
            "host prepared and available for provisioning".into(),
        ),
        Operation::Provision => {
            let mut u = moved(
                State::Provisioned,
                "ProvisioningComplete",
                "image provisioned".into(),
            );
            u.record_provisioned = Some(true);
            u.clear_reboot = true;
            u
        }
        Operation::Deprovision => after_deprovisioned(host, deleting),
        Operation::Adopt => Update {
            error: if status(host).error_type == Some(ErrorType::ProvisionedRegistration) {
                ErrorChange::Clear
            } else {
                ErrorChange::Keep
            },
            ..Default::default()
        },
        Operation::PowerOn => Update {
            powered_on: Some(true),
            error: ErrorChange::Clear,
            event: Some(("PowerOn".into(), "host powered on".into(), false)),
            ..Default::default()
        },
        Operation::PowerOff { .. } => after_powered_off(state),
        Operation::Detach => Update {
            operational_status: Some(OperationalStatus::Detached),
            event: Some((
                "Detached".into(),
                "host removed from the provisioner; the object stays".into(),
                false,
            )),
            ..Default::default()
        },
        Operation::Delete => release(),
        Operation::Service => servicing::finished(),
    }
}

/// The host moves on to `to`, its error cleared, and says so.
fn moved(to: State, reason: &str, message: String) -> Update {
    Update {
        state: Some(to),
        error: ErrorChange::Clear,
        event: Some((reason.to_owned(), message, false)),
        ..Default::default()
    }
}

/// Registration done: a registering host goes on to inspection (or past it); a host
/// registered again in a later state carries on with that state, its registration
/// error (if any) cleared.
fn after_registered(host: &BareMetalHost, state: State) -> Update {
    if state != State::Registering {
        return Update {
            error: if status(host).error_type == Some(ErrorType::Registration) {
                ErrorChange::Clear
            } else {
                ErrorChange::Keep
            },
            ..Default::default()
        };
    }
    let name = host.namespaced_name();
    if host.spec.externally_provisioned {
        moved(
            State::ExternallyProvisioned,
            "ExternallyProvisioned",
            format!("{name} registered; externally provisioned, only power is managed"),
        )
    } else if host.inspection_disabled() {
        moved(
            State::Preparing,
            "Registered",
            format!("{name} registered; inspection disabled"),
        )
    } else {
        moved(
            State::Inspecting,
            "Registered",
            format!("{name} registered; inspecting hardware"),
        )
    }
}

/// The image is off: the host is available again, or powers off on its way out.
fn after_deprovisioned(host: &BareMetalHost, deleting: bool) -> Update {
    let to = if deleting {
        State::PoweringOffBeforeDelete
    } else {
        State::Available
    };
    let mut u = moved(
        to,
        "DeprovisioningComplete",
        "image removed and disks cleaned".into(),
    );
    u.record_provisioned = Some(false);
    u.clear_reboot = true;
    // A failed provisioning attempt keeps its error visible until the retry.
    if status(host).error_type == Some(ErrorType::Provisioning) && !deleting {
        u.error = ErrorChange::Keep;
    }
    u
}

/// Powered off: a host on its way out is deleted next.
fn after_powered_off(state: State) -> Update {
    if state == State::PoweringOffBeforeDelete {
        let mut u = moved(
            State::Deleting,
            "PowerOff",
            "host powered off; deleting".into(),
        );
        u.powered_on = Some(false);
        return u;
    }
    Update {
        powered_on: Some(false),
        error: ErrorChange::Clear,
        event: Some(("PowerOff".into(), "host powered off".into(), false)),
        ..Default::default()
    }
}
