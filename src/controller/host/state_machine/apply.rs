//! Writing an [`Update`] into a host's status.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::queries::{hardware_profile, root_device_hints};
use super::step::{ErrorChange, Update};
use crate::api::{
    BareMetalHost, BareMetalHostStatus, OperationalStatus, ProvisioningState as State,
};

/// The status fields an [`Update`] changes.
pub fn apply(host: &BareMetalHost, status: &mut BareMetalHostStatus, update: &Update, now: &Time) {
    let old_state = status.provisioning.state;
    match &update.error {
        ErrorChange::Keep => {}
        ErrorChange::Clear => {
            status.error_type = None;
            status.error_message.clear();
            status.error_count = 0;
            status.operational_status = OperationalStatus::Ok;
        }
        ErrorChange::Set(kind, message) => {
            status.error_type = Some(*kind);
            status.error_message = message.clone();
            status.error_count += 1;
            status.operational_status = OperationalStatus::Error;
        }
    }
    if let Some(op) = update.operational_status {
        status.operational_status = op;
    }
    if status.operational_status == OperationalStatus::None {
        status.operational_status = OperationalStatus::Ok;
    }
    if let Some(on) = update.powered_on {
        status.powered_on = on;
    }
    if update.provisioning_failed {
        status.provisioning_fail_count += 1;
        status.last_attempted_image = host.spec.image.clone();
    }
    match update.record_provisioned {
        Some(true) => {
            status.provisioning.image = host.spec.image.clone();
            status.provisioning.custom_deploy = host.spec.custom_deploy.clone();
            status.provisioning.root_device_hints = root_device_hints(host);
            status.provisioning_fail_count = 0;
        }
        Some(false) => {
            status.provisioning.image = None;
            status.provisioning.custom_deploy = None;
        }
        None => {}
    }
    match update.record_prepared {
        Some(true) => {
            status.provisioning.raid = host.spec.raid.clone();
            status.provisioning.firmware = host.spec.firmware.clone();
        }
        Some(false) => {
            status.provisioning.raid = None;
            status.provisioning.firmware = None;
        }
        None => {}
    }
    if let Some(next) = update.state {
        // A new image gets its own attempts.
        if next == State::Provisioning && status.last_attempted_image != host.spec.image {
            status.provisioning_fail_count = 0;
        }
        status.provisioning.state = next;
        // Recorded once registered, as upstream's profile matching does.
        if status.hardware_profile.is_none()
            && !matches!(next, State::None | State::Unmanaged | State::Registering)
        {
            status.hardware_profile = Some(hardware_profile(host));
        }
        if matches!(
            next,
            State::Registering | State::Inspecting | State::Provisioning
        ) {
            status.provisioning.boot_mode = Some(host.boot_mode());
        }
        if next == State::Available && old_state == State::Preparing {
            status.provisioning.raid = host.spec.raid.clone();
            status.provisioning.firmware = host.spec.firmware.clone();
        }
        record_history(status, old_state, next, now);
    }
}

/// Start and end times of register / inspect / provision / deprovision.
fn record_history(status: &mut BareMetalHostStatus, from: State, to: State, now: &Time) {
    fn slot(
        h: &mut crate::api::OperationHistory,
        s: State,
    ) -> Option<&mut Option<crate::api::OperationMetric>> {
        match s {
            State::Registering => Some(&mut h.register),
            State::Inspecting => Some(&mut h.inspect),
            State::Provisioning => Some(&mut h.provision),
            State::Deprovisioning => Some(&mut h.deprovision),
            _ => None,
        }
    }
    let history = status
        .operation_history
        .get_or_insert_with(Default::default);
    if let Some(metric) = slot(history, from) {
        metric.get_or_insert_with(Default::default).end = Some(now.clone());
    }
    if let Some(metric) = slot(history, to) {
        *metric = Some(crate::api::OperationMetric {
            start: Some(now.clone()),
            end: None,
        });
    }
}
