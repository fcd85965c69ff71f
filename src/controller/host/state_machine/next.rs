//! The steps every reconcile takes before the state's own: lease details, spec errors,
//! the registration check and what it leads to.

use std::time::Duration;

use super::after::after;
use super::checks::{release, spec_error};
use super::facts::{CredentialsCheck, Facts, RegistrationCheck};
use super::plan::plan;
use super::queries::{needs_registration, status, with_reported_power};
use super::step::{CallResult, Operation, Requeue, Step, Update};
use crate::api::{BareMetalHost, ErrorType, ProvisioningState as State};
use crate::controller::host::conditions;

/// Decides the one thing to do for `host` now, given what this reconcile has learned
/// so far. The reconciler adds each provisioner answer to `facts` and asks again, so
/// one reconcile is a short sequence of these steps ending in a save or a wait.
pub fn next(host: &BareMetalHost, facts: &Facts) -> Step {
    let deleting = host.metadata.deletion_timestamp.is_some();
    // A DHCP exchange after inspection (a renewal, the provisioned OS) reaches the
    // stored hardware details; nothing else changes in that reconcile.
    if facts.lease_details_changed && !deleting {
        return Step::SaveLeaseDetails;
    }
    if let Some(problem) = &facts.spec_problem
        && let Some(update) = spec_error(host, problem)
    {
        return Step::Transition(update);
    }
    let registrable = facts.spec_problem.is_none()
        && needs_registration(host)
        && facts.credentials == CredentialsCheck::Valid;
    if registrable {
        match &facts.registration {
            None => return Step::CheckRegistration,
            Some(check) => {
                if let Some(step) = after_registration(host, check, facts.adoption.as_ref()) {
                    return step;
                }
            }
        }
    }
    match plan(host, facts) {
        // No usable BMC details: deletion has nothing to remove in the provisioner
        // and lets the host go; anything else waits for the spec to be fixed.
        Step::Call(op) if facts.spec_problem.is_some() => match op {
            Operation::Delete | Operation::PowerOff { .. } => Step::Transition(release()),
            _ => Step::Wait(Duration::from_secs(60)),
        },
        // The provisioner answers again: say so, though nothing else changed.
        Step::Wait(after)
            if facts.registration.is_some()
                && host
                    .status
                    .as_ref()
                    .is_some_and(|s| conditions::unreachable(s).is_some()) =>
        {
            Step::Transition(Update {
                requeue: Requeue::After(after),
                ..Default::default()
            })
        }
        Step::Transition(update) => Step::Transition(with_reported_power(host, facts, update)),
        step => step,
    }
}

/// Where a registration check leads: `None` to go on with the state's own step.
fn after_registration(
    host: &BareMetalHost,
    check: &RegistrationCheck,
    adoption: Option<&CallResult>,
) -> Option<Step> {
    let state = host.provisioning_state();
    if check.result != CallResult::Done || state == State::Registering {
        return Some(Step::SaveRegistration(after(
            host,
            Operation::Register,
            &check.result,
        )));
    }
    // A registration error (credentials, BMC access) is over once registration works.
    if status(host).error_type == Some(ErrorType::Registration) {
        return Some(Step::SaveRegistration(after(
            host,
            Operation::Register,
            &CallResult::Done,
        )));
    }
    if matches!(state, State::Provisioned | State::ExternallyProvisioned) && !check.deployed {
        return match adoption {
            None => Some(Step::Readopt),
            Some(CallResult::Done) => None,
            Some(result) => Some(Step::Transition(after(host, Operation::Adopt, result))),
        };
    }
    None
}
