//! The state machine's tests, by topic; the hosts and facts they start from.

use super::*;
use std::time::Duration;

use crate::api::{
    BareMetalHost, BareMetalHostStatus, ErrorType, OperationalStatus, ProvisioningState as State,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::json;

mod deletion;
mod errors;
mod firmware;
mod lifecycle;
mod power;
mod registration;
mod servicing;

fn host(spec: serde_json::Value, state: &str, extra_status: serde_json::Value) -> BareMetalHost {
    let mut status = json!({
        "operationalStatus": "OK", "errorMessage": "", "poweredOn": false,
        "errorCount": 0, "provisioningFailCount": 0,
        "provisioning": {"state": state, "ID": "node-1"}
    });
    if let (Some(s), Some(extra)) = (status.as_object_mut(), extra_status.as_object()) {
        for (k, v) in extra {
            s.insert(k.clone(), v.clone());
        }
    }
    let mut base =
        json!({"online": true, "bmc": {"address": "fake://h", "credentialsName": "h-bmc"}});
    if let (Some(b), Some(extra)) = (base.as_object_mut(), spec.as_object()) {
        for (k, v) in extra {
            b.insert(k.clone(), v.clone());
        }
    }
    serde_json::from_value(json!({
        "apiVersion": "metal3.io/v1alpha1", "kind": "BareMetalHost",
        "metadata": {"name": "h", "namespace": "ns"},
        "spec": base, "status": status
    }))
    .expect("valid host")
}

fn with_annotation(mut h: BareMetalHost, key: &str, value: &str) -> BareMetalHost {
    h.metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(key.into(), value.into());
    h
}

fn deleting(mut h: BareMetalHost) -> BareMetalHost {
    h.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
    h
}

fn facts() -> Facts {
    Facts {
        credentials: CredentialsCheck::Valid,
        power: Some(false),
        reported_power: None,
        has_capacity: true,
        reboot: None,
        spec_problem: None,
        lease_details_changed: false,
        registration: None,
        adoption: None,
        firmware: PendingSettings::None,
        firmware_updates: PendingUpdates::None,
        servicing_allowed: ServicingAllowed::default(),
        firmware_spec_set: false,
        data_image_checked: true,
    }
}

fn image() -> serde_json::Value {
    json!({"url": "http://example.test/os.qcow2", "checksum": "abc", "checksumType": "sha256"})
}

/// The host's status once `update` is applied.
fn applied(h: &BareMetalHost, update: &Update) -> BareMetalHostStatus {
    let mut status = h.status.clone().unwrap_or_default();
    apply(
        h,
        &mut status,
        update,
        &Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH),
    );
    status
}

/// Once `op` is done, the host moves to `to`.
fn assert_done_leads_to(h: &BareMetalHost, op: Operation, to: State) {
    assert_eq!(after(h, op, &CallResult::Done).state, Some(to), "{op:?}");
}

/// The host calls `op` now, and moves to `to` once it is done.
fn assert_calls_then(h: &BareMetalHost, op: Operation, to: State) {
    assert_eq!(plan(h, &facts()), Step::Call(op));
    assert_done_leads_to(h, op, to);
}

fn next_state(step: &Step) -> Option<State> {
    match step {
        Step::Transition(u) => u.state,
        _ => None,
    }
}
