//! What every reconcile decides before the state's own step: whether to touch the host
//! at all (paused, finalizer), spec errors, which reboot the annotations ask for, and
//! what the every-reconcile registration check leads to.

use std::time::Duration;

use kube::ResourceExt;

use super::{
    CallResult, ErrorChange, Operation, RebootRequest, Requeue, Step, Update, after, status,
};
use crate::api::host::{FINALIZER, PAUSED_ANNOTATION, REBOOT_ANNOTATION_PREFIX};
use crate::api::{BareMetalHost, ErrorType, ProvisioningState as State};
use crate::provisioner::PowerState;

/// Whether the reconcile goes on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gate {
    /// Go on with the lifecycle.
    Proceed,
    /// The paused annotation is set: leave the host alone until it changes.
    Paused,
    /// bmo's finalizer is missing on a live host: add it first.
    AddFinalizer,
    /// Deleted and no longer holding bmo's finalizer: nothing left to do.
    Released,
}

pub fn gate(host: &BareMetalHost) -> Gate {
    let ours = host.finalizers().iter().any(|f| f == FINALIZER);
    let deleting = host.metadata.deletion_timestamp.is_some();
    if host.annotations().contains_key(PAUSED_ANNOTATION) {
        Gate::Paused
    } else if !ours && deleting {
        Gate::Released
    } else if !ours {
        Gate::AddFinalizer
    } else {
        Gate::Proceed
    }
}

/// A spec problem only the user can fix (bad BMC address, unknown hardware profile):
/// one registration error and no retries until the spec changes. `None` where it does
/// not matter (deletion, hosts not yet managed); the host then goes on without a
/// provisioner view.
pub fn spec_error(host: &BareMetalHost, message: String) -> Option<Update> {
    let state = host.provisioning_state();
    let deleting = host.metadata.deletion_timestamp.is_some();
    if deleting || matches!(state, State::None | State::Unmanaged) {
        return None;
    }
    Some(Update {
        error: ErrorChange::Set(ErrorType::Registration, message.clone()),
        event: Some(("RegistrationError".into(), message, true)),
        requeue: Requeue::OnChange,
        ..Default::default()
    })
}

/// The reboot annotations, combined: hard if any asks for hard, one-shot only if all
/// are the suffix-less one. Outside provisioned states only forced reboots count.
pub fn reboot_request(host: &BareMetalHost) -> Option<RebootRequest> {
    let state = host.provisioning_state();
    let provisioned = matches!(state, State::Provisioned | State::ExternallyProvisioned);
    let mut found: Option<RebootRequest> = None;
    for (key, value) in host.annotations() {
        let one_shot = key == REBOOT_ANNOTATION_PREFIX;
        if !one_shot && !key.starts_with(&format!("{REBOOT_ANNOTATION_PREFIX}/")) {
            continue;
        }
        let parsed: serde_json::Value =
            serde_json::from_str(value).unwrap_or(serde_json::Value::Null);
        let hard = parsed.get("mode").and_then(|m| m.as_str()) == Some("hard");
        let force = parsed
            .get("force")
            .and_then(|f| f.as_bool())
            .unwrap_or(false);
        if !provisioned && !force {
            continue;
        }
        let prev = found.unwrap_or(RebootRequest {
            hard: false,
            one_shot: true,
        });
        found = Some(RebootRequest {
            hard: prev.hard || hard,
            one_shot: prev.one_shot && one_shot,
        });
    }
    found
}

/// Where the every-reconcile registration check leads.
#[derive(Debug, Clone, PartialEq)]
pub enum AfterRegistration {
    /// Save this update (with the credentials as tried) and stop here.
    Save(Update),
    /// The host counts as provisioned but its record is not deployed (it vanished and
    /// was re-created): adopt it, then go on.
    Adopt,
    /// Registered and in order: go on with the state's own step.
    Proceed,
}

pub fn after_registration(
    host: &BareMetalHost,
    result: &CallResult,
    deployed: bool,
) -> AfterRegistration {
    let state = host.provisioning_state();
    if *result != CallResult::Done || state == State::Registering {
        return AfterRegistration::Save(after(host, Operation::Register, result));
    }
    // A registration error (credentials, BMC access) is over once registration works.
    if status(host).error_type == Some(ErrorType::Registration) {
        return AfterRegistration::Save(after(host, Operation::Register, &CallResult::Done));
    }
    if matches!(state, State::Provisioned | State::ExternallyProvisioned) && !deployed {
        return AfterRegistration::Adopt;
    }
    AfterRegistration::Proceed
}

/// The adoption started by [`AfterRegistration::Adopt`] reported `result`: `Some`
/// update to save while it is not done.
pub fn after_adoption(host: &BareMetalHost, result: &CallResult) -> Option<Update> {
    (*result != CallResult::Done).then(|| after(host, Operation::Adopt, result))
}

/// The power a registration saw, as a fact for planning: only stable states manage
/// power.
pub fn observed_power(host: &BareMetalHost, power: PowerState) -> Option<bool> {
    let stable = matches!(
        host.provisioning_state(),
        State::Available | State::Ready | State::Provisioned | State::ExternallyProvisioned
    );
    match power {
        _ if !stable => None,
        PowerState::On => Some(true),
        PowerState::Off => Some(false),
        PowerState::Unknown => None,
    }
}

/// The step instead of `op` when the host's spec gives no provisioner view (no usable
/// BMC details): deletion has nothing to remove in the provisioner and lets the host
/// go; anything else waits for the spec to be fixed.
pub fn without_provisioner(op: Operation) -> Step {
    match op {
        Operation::Delete | Operation::PowerOff { .. } => Step::Transition(release()),
        _ => Step::Wait(Duration::from_secs(60)),
    }
}

/// Lets a deleted host go: bmo's finalizer is removed.
pub fn release() -> Update {
    Update {
        release: true,
        event: Some((
            "Deleted".into(),
            "host removed from the provisioner; releasing it".into(),
            false,
        )),
        requeue: Requeue::OnChange,
        ..Default::default()
    }
}

/// Whether `op` should restart a failed provisioner operation: the host's error is the
/// one this operation produces, so the user had the backoff to fix its cause.
pub fn restart_on_failure(host: &BareMetalHost, op: Operation) -> bool {
    status(host).error_type == Some(op.error_type(host.provisioning_state()))
}
