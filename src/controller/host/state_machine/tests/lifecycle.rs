//! From a new host to provisioned and back: registration, inspection, preparing,
//! provisioning, the provisioning limit and failed provisioning.

use super::*;
use serde_json::json;

#[test]
fn new_host_registers_or_is_unmanaged_without_bmc() {
    let h = host(json!({}), "", json!({}));
    assert_eq!(next_state(&plan(&h, &facts())), Some(State::Registering));
    let mut h = host(json!({}), "", json!({}));
    h.spec.bmc = None;
    match plan(&h, &facts()) {
        Step::Transition(u) => {
            assert_eq!(u.state, Some(State::Unmanaged));
            assert_eq!(u.operational_status, Some(OperationalStatus::Discovered));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn missing_secret_is_retried_with_backoff_and_invalid_secret_waits_for_a_change() {
    let h = host(json!({}), "registering", json!({}));
    let mut f = facts();
    f.credentials = CredentialsCheck::Missing("Secret ns/h-bmc not found".into());
    match plan(&h, &f) {
        Step::Transition(u) => {
            assert!(
                matches!(u.error, ErrorChange::Set(ErrorType::Registration, ref m) if m.contains("not found"))
            );
            assert_eq!(u.requeue, Requeue::Backoff);
        }
        other => panic!("{other:?}"),
    }
    f.credentials = CredentialsCheck::Invalid("no password".into());
    match plan(&h, &f) {
        Step::Transition(u) => assert_eq!(u.requeue, Requeue::OnChange),
        other => panic!("{other:?}"),
    }
    f.credentials = CredentialsCheck::Valid;
    assert_eq!(plan(&h, &f), Step::Call(Operation::Register));
}

#[test]
fn registration_leads_to_inspection_preparation_or_external_provisioning() {
    let h = host(json!({}), "registering", json!({}));
    assert_done_leads_to(&h, Operation::Register, State::Inspecting);
    let h = host(
        json!({"inspectionMode": "disabled"}),
        "registering",
        json!({}),
    );
    assert_done_leads_to(&h, Operation::Register, State::Preparing);
    let h = host(
        json!({"externallyProvisioned": true}),
        "registering",
        json!({}),
    );
    assert_done_leads_to(&h, Operation::Register, State::ExternallyProvisioned);
}

#[test]
fn the_happy_path_walks_inspecting_preparing_available_provisioning_provisioned() {
    let h = host(json!({"image": image()}), "inspecting", json!({}));
    assert_calls_then(&h, Operation::Inspect { refresh: false }, State::Preparing);
    let h = host(json!({"image": image()}), "preparing", json!({}));
    assert_done_leads_to(&h, Operation::Prepare, State::Available);
    let h = host(json!({"image": image()}), "available", json!({}));
    assert_eq!(next_state(&plan(&h, &facts())), Some(State::Provisioning));
    let h = host(json!({"image": image()}), "provisioning", json!({}));
    assert_eq!(plan(&h, &facts()), Step::Call(Operation::Provision));
    let done = after(&h, Operation::Provision, &CallResult::Done);
    assert_eq!(done.state, Some(State::Provisioned));
    assert_eq!(done.record_provisioned, Some(true));
    let status = applied(&h, &done);
    assert_eq!(
        status.provisioning.image.map(|i| i.url),
        Some("http://example.test/os.qcow2".into())
    );
    assert!(
        status
            .operation_history
            .and_then(|o| o.provision)
            .and_then(|p| p.end)
            .is_some()
    );
}

#[test]
fn available_host_without_a_slot_is_delayed() {
    let h = host(json!({"image": image()}), "available", json!({}));
    let mut f = facts();
    f.has_capacity = false;
    match plan(&h, &f) {
        Step::Transition(u) => {
            assert_eq!(u.state, None);
            assert_eq!(u.operational_status, Some(OperationalStatus::Delayed));
            assert!(u.event.is_some_and(|(reason, _, _)| reason == "Delayed"));
        }
        other => panic!("{other:?}"),
    }
    let delayed = host(
        json!({"image": image()}),
        "available",
        json!({"operationalStatus": "delayed"}),
    );
    match plan(&delayed, &f) {
        Step::Transition(u) => {
            assert_eq!(u.operational_status, Some(OperationalStatus::Delayed));
            assert_eq!(u.event, None, "no second event while it keeps waiting");
        }
        other => panic!("{other:?}"),
    }
    let delayed = host(
        json!({"image": image()}),
        "available",
        json!({"operationalStatus": "delayed", "errorMessage": "stale", "errorCount": 2}),
    );
    // The slot came: one step starts provisioning and says the host no longer waits,
    // clearing what the wait's own step would have.
    match plan(&delayed, &facts()) {
        Step::Transition(u) => {
            assert_eq!(u.state, Some(State::Provisioning));
            let status = applied(&delayed, &u);
            assert_eq!(status.operational_status, OperationalStatus::Ok);
            assert_eq!((status.error_message.as_str(), status.error_count), ("", 0));
        }
        other => panic!("{other:?}"),
    }
    // Nothing left to use the slot for (the image is gone): the wait is cleared on
    // its own.
    let idle = host(
        json!({}),
        "available",
        json!({"operationalStatus": "delayed"}),
    );
    match plan(&idle, &facts()) {
        Step::Transition(u) => {
            assert_eq!(u.state, None);
            assert_eq!(applied(&idle, &u).operational_status, OperationalStatus::Ok);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_step_into_a_stable_state_records_the_reported_power_with_it() {
    let h = host(
        json!({"image": image(), "online": true}),
        "provisioning",
        json!({"provisioning": {"state": "provisioning", "ID": "n"}, "poweredOn": false}),
    );
    let f = Facts {
        reported_power: Some(true),
        ..facts()
    };
    let done = after(&h, Operation::Provision, &CallResult::Done);
    let u = with_reported_power(&h, &f, done.clone());
    assert_eq!(u.state, Some(State::Provisioned));
    assert_eq!(
        u.powered_on,
        Some(true),
        "one write says provisioned and on"
    );
    // Not while the host is still on its way, nor when the power is as recorded.
    let waiting = after(
        &h,
        Operation::Provision,
        &CallResult::InProgress {
            after: Duration::from_secs(1),
            changed: false,
        },
    );
    assert_eq!(with_reported_power(&h, &f, waiting).powered_on, None);
    let off = Facts {
        reported_power: Some(false),
        ..facts()
    };
    assert_eq!(with_reported_power(&h, &off, done).powered_on, None);
}

#[test]
fn failed_provisioning_deprovisions_and_counts_the_failure() {
    let h = host(json!({"image": image()}), "provisioning", json!({}));
    let u = after(
        &h,
        Operation::Provision,
        &CallResult::Failed("image checksum mismatch".into()),
    );
    assert_eq!(u.state, Some(State::Deprovisioning));
    assert!(u.provisioning_failed);
    assert_eq!(u.requeue, Requeue::Backoff);
    let status = applied(&h, &u);
    assert_eq!(status.error_type, Some(ErrorType::Provisioning));
    assert_eq!(status.error_count, 1);
    assert_eq!(status.provisioning_fail_count, 1);
    assert_eq!(status.operational_status, OperationalStatus::Error);
    assert_eq!(status.error_message, "image checksum mismatch");
}

#[test]
fn after_the_last_attempt_only_a_different_image_provisions_again() {
    let failed = json!({
        "errorType": "provisioning error", "operationalStatus": "error",
        "errorMessage": "image checksum mismatch", "errorCount": 5,
        "provisioningFailCount": crate::controller::host::MAX_PROVISIONING_RETRIES,
        "lastAttemptedImage": image(),
    });
    let h = host(json!({"image": image()}), "available", failed.clone());
    assert_eq!(
        plan(&h, &facts()),
        Step::Wait(SLOW_POLL),
        "the same image waits"
    );

    let mut other = image();
    other["url"] = json!("http://example.test/fixed.qcow2");
    let h = host(json!({"image": other}), "available", failed);
    let step = plan(&h, &facts());
    assert_eq!(next_state(&step), Some(State::Provisioning));
    let Step::Transition(update) = step else {
        panic!("a transition: {step:?}")
    };
    let status = applied(&h, &update);
    assert_eq!(
        status.provisioning_fail_count, 0,
        "the new image's attempts"
    );
    assert_eq!(status.error_type, None);
}

#[test]
fn removing_the_image_deprovisions_a_provisioned_host() {
    let h = host(
        json!({}),
        "provisioned",
        json!({"provisioning": {"state": "provisioned", "ID": "n", "image": image()}}),
    );
    assert_eq!(next_state(&plan(&h, &facts())), Some(State::Deprovisioning));
    let h = host(
        json!({"image": image()}),
        "provisioned",
        json!({"provisioning": {"state": "provisioned", "ID": "n", "image": image()}}),
    );
    assert_eq!(next_state(&plan(&h, &facts())), None);
}

#[test]
fn the_inspect_annotation_asks_for_one_inspection_and_goes_once_it_started() {
    let available = with_annotation(
        host(json!({"image": null}), "available", json!({})),
        crate::api::host::INSPECT_ANNOTATION,
        "",
    );
    assert_eq!(
        next_state(&plan(&available, &facts())),
        Some(State::Inspecting)
    );
    let inspecting = with_annotation(
        host(json!({"image": null}), "inspecting", json!({})),
        crate::api::host::INSPECT_ANNOTATION,
        "",
    );
    assert_eq!(
        plan(&inspecting, &facts()),
        Step::Call(Operation::Inspect { refresh: true })
    );
    let op = Operation::Inspect { refresh: true };
    let started = CallResult::Started {
        after: Duration::from_secs(10),
    };
    assert!(after(&inspecting, op, &started).clear_inspect_annotation);
    let on_the_way = CallResult::InProgress {
        after: Duration::from_secs(10),
        changed: true,
    };
    assert!(
        !after(&inspecting, op, &on_the_way).clear_inspect_annotation,
        "kept until the inspection itself started"
    );
}
