//! What every reconcile decides before the state's own step: whether to touch the host
//! at all (paused, finalizer), spec errors, which reboot the annotations ask for, and
//! which power a registration check saw.

use kube::ResourceExt;

use super::facts::{RebootRequest, SpecProblem};
use super::queries::status;
use super::step::{ErrorChange, Operation, Requeue, Update};
use crate::api::host::{
    DELETE_FOR_MOVE_ANNOTATION, FINALIZER, PAUSED_ANNOTATION, REBOOT_ANNOTATION_PREFIX,
};
use crate::api::{BareMetalHost, ErrorType, ProvisioningState as State};
use crate::controller::runtime::store::has_finalizer;
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
    /// Deleted by `clusterctl move` (the delete-for-move annotation): the host was
    /// re-created elsewhere and takes the provisioner's node over there, so this copy
    /// only lets go (no deprovisioning, no power-off, the node stays).
    MovedAway,
}

pub fn gate(host: &BareMetalHost) -> Gate {
    let ours = has_finalizer(host, FINALIZER);
    let deleting = host.metadata.deletion_timestamp.is_some();
    if host.annotations().contains_key(PAUSED_ANNOTATION) {
        Gate::Paused
    } else if !ours && deleting {
        Gate::Released
    } else if deleting && host.annotations().contains_key(DELETE_FOR_MOVE_ANNOTATION) {
        Gate::MovedAway
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
pub fn spec_error(host: &BareMetalHost, problem: &SpecProblem) -> Option<Update> {
    let state = host.provisioning_state();
    let deleting = host.metadata.deletion_timestamp.is_some();
    if deleting || matches!(state, State::None | State::Unmanaged) {
        return None;
    }
    let message = problem.message.clone();
    Some(Update {
        error: ErrorChange::Set(ErrorType::Registration, message.clone()),
        event: Some(("RegistrationError".into(), message, true)),
        requeue: if problem.in_secret {
            Requeue::Backoff
        } else {
            Requeue::OnChange
        },
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

/// The power a registration saw, as a fact for planning: only stable states manage
/// power.
pub fn observed_power(host: &BareMetalHost, power: PowerState) -> Option<bool> {
    let stable = matches!(
        host.provisioning_state(),
        State::Available | State::Ready | State::Provisioned | State::ExternallyProvisioned
    );
    power.known().filter(|_| stable)
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

/// Letting go of a host `clusterctl move` deleted: bmo's finalizers go, the
/// provisioner's node is left to the moved copy.
pub fn moved_away() -> Update {
    Update {
        release: true,
        event: Some((
            "DeletedForMove".into(),
            format!(
                "host deleted by clusterctl move ({DELETE_FOR_MOVE_ANNOTATION}); \
                 the provisioner's node is kept for the moved host"
            ),
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
