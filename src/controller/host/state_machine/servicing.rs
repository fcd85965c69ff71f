//! Servicing: firmware settings and updates applied to a provisioned host through
//! Ironic's servicing, as its HostUpdatePolicy allows, while the host powers on (a
//! reboot). As upstream, servicing shows in `operationalStatus: servicing`; the
//! provisioning state stays `provisioned`, and a failure is a `servicing error`.

use super::facts::{Facts, PendingSettings, PendingUpdates};
use super::step::{ErrorChange, FIRMWARE_WAIT, Operation, Requeue, Step, Update};
use crate::api::{
    BareMetalHost, BareMetalHostStatus, ErrorType, OperationalStatus, ProvisioningState as State,
};

/// Whether the reconciler should read the host's HostUpdatePolicy and firmware
/// objects: a provisioned host about to power on, or one being serviced or whose
/// servicing failed.
pub fn wants_servicing_facts(host: &BareMetalHost) -> bool {
    let st = host.status.clone().unwrap_or_default();
    let provisioned = matches!(
        st.provisioning.state,
        State::Provisioned | State::ExternallyProvisioned
    );
    provisioned
        && host.metadata.deletion_timestamp.is_none()
        && ((host.spec.online && !st.powered_on) || in_servicing(&st))
}

/// The host is being serviced, or its servicing failed and is not settled yet.
pub fn servicing_under_way(host: &BareMetalHost) -> bool {
    host.status.as_ref().is_some_and(in_servicing)
}

/// Servicing runs or failed and is not settled yet.
fn in_servicing(st: &BareMetalHostStatus) -> bool {
    st.operational_status == OperationalStatus::Servicing
        || st.error_type == Some(ErrorType::Servicing)
}

/// What servicing would apply now, as the policy allows.
pub fn allowed_changes(facts: &Facts) -> (PendingSettings, PendingUpdates) {
    let settings = if facts.servicing_allowed.settings {
        facts.firmware.clone()
    } else {
        PendingSettings::None
    };
    let updates = if facts.servicing_allowed.updates {
        facts.firmware_updates.clone()
    } else {
        PendingUpdates::None
    };
    (settings, updates)
}

/// The servicing step of a provisioned host, if it has one: `powering_on` when the
/// host is off and is to be on (upstream services only then).
pub fn plan(st: &BareMetalHostStatus, facts: &Facts, powering_on: bool) -> Option<Step> {
    let running = in_servicing(st);
    if !powering_on && !running {
        return None;
    }
    let (settings, updates) = allowed_changes(facts);
    if settings == PendingSettings::NotReady || updates == PendingUpdates::NotReady {
        // The firmware controller has not judged the latest spec yet: it may hold a
        // change for this power-on, or withdraw the one being applied.
        return Some(Step::Wait(FIRMWARE_WAIT));
    }
    if running {
        // Also with nothing left to apply: the provisioner then finishes or aborts
        // what Ironic still holds, so the host gets back to service.
        return Some(Step::Call(Operation::Service));
    }
    let changed = matches!(settings, PendingSettings::Apply(_))
        || matches!(updates, PendingUpdates::Apply { .. });
    changed.then(|| {
        Step::Transition(Update {
            operational_status: Some(OperationalStatus::Servicing),
            event: Some((
                "ServicingStarted".into(),
                "firmware settings or updates changed; servicing the host before it powers on"
                    .into(),
                false,
            )),
            ..Default::default()
        })
    })
}

/// The status change once servicing started (again): the host is being serviced,
/// and a servicing error it had is over.
pub fn started(after: std::time::Duration) -> Update {
    Update {
        operational_status: Some(OperationalStatus::Servicing),
        error: ErrorChange::Clear,
        requeue: Requeue::After(after),
        ..Default::default()
    }
}

/// The status change once servicing is over (done, or aborted after the change was
/// withdrawn): back to `OK`, and the host powers on as its spec says. The next look
/// comes after the firmware controller has had time to read the new values (its
/// conditions changing wakes the host sooner): until then the objects still show
/// the change, which would start servicing again, only to find nothing to apply.
pub fn finished() -> Update {
    Update {
        error: ErrorChange::Clear,
        requeue: Requeue::After(FIRMWARE_WAIT),
        event: Some((
            "ServicingComplete".into(),
            "servicing finished; the host is back in service".into(),
            false,
        )),
        ..Default::default()
    }
}
