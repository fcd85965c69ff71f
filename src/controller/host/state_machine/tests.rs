use super::*;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::json;

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

/// `automatedCleaningMode: full` wipes inside the one deprovision call (the provisioner
/// runs the manual clean); the host's own states are those of every mode.
#[test]
fn a_full_wipe_is_part_of_deprovisioning_in_every_cleaning_mode_alike() {
    for mode in ["metadata", "disabled", "full"] {
        let h = host(
            json!({"automatedCleaningMode": mode}),
            "provisioned",
            json!({"provisioning": {"state": "provisioned", "ID": "n", "image": image()}}),
        );
        assert_eq!(
            next_state(&plan(&h, &facts())),
            Some(State::Deprovisioning),
            "{mode}"
        );
        let h = host(
            json!({"automatedCleaningMode": mode}),
            "deprovisioning",
            json!({}),
        );
        assert_calls_then(&h, Operation::Deprovision, State::Available);
        let h = deleting(h);
        assert_calls_then(&h, Operation::Deprovision, State::PoweringOffBeforeDelete);
    }
}

#[test]
fn a_provisioned_host_sees_to_its_data_image_before_powering_on() {
    let unchecked = Facts {
        data_image_checked: false,
        ..facts()
    };
    for state in ["provisioned", "externally provisioned"] {
        let h = host(
            json!({"online": true, "image": image(), "externallyProvisioned": state != "provisioned"}),
            state,
            json!({"provisioning": {"state": state, "ID": "n", "image": image()}}),
        );
        assert_eq!(plan(&h, &unchecked), Step::PrepareDataImage, "{state}");
        assert_eq!(
            plan(&h, &facts()),
            Step::Call(Operation::PowerOn),
            "{state}"
        );
    }
    // Upstream attaches in provisioned states only.
    let h = host(json!({"online": true}), "available", json!({}));
    assert_eq!(plan(&h, &unchecked), Step::Call(Operation::PowerOn));
}

#[test]
fn power_follows_online_in_stable_states() {
    let h = host(json!({"online": true}), "available", json!({}));
    assert_eq!(plan(&h, &facts()), Step::Call(Operation::PowerOn));
    let h = host(
        json!({"online": false}),
        "available",
        json!({"poweredOn": true}),
    );
    let mut f = facts();
    f.power = Some(true);
    assert_eq!(
        plan(&h, &f),
        Step::Call(Operation::PowerOff { hard: false })
    );
    // What the BMC says is recorded first.
    let h = host(
        json!({"online": false}),
        "available",
        json!({"poweredOn": false}),
    );
    assert!(matches!(
        plan(&h, &f),
        Step::Transition(Update {
            powered_on: Some(true),
            ..
        })
    ));
    // Power as wanted: nothing to do.
    let h = host(
        json!({"online": true}),
        "provisioned",
        json!({"poweredOn": true, "provisioning": {"state": "provisioned", "ID": "n", "image": image()}}),
    );
    let h = BareMetalHost {
        spec: crate::api::BareMetalHostSpec {
            image: serde_json::from_value(image()).ok(),
            ..h.spec.clone()
        },
        ..h
    };
    assert_eq!(plan(&h, &f), Step::Wait(STEADY_POLL));
}

#[test]
fn reboot_annotation_powers_off_hard_then_clears_itself() {
    let spec = json!({"image": image()});
    let st = json!({"poweredOn": true, "provisioning": {"state": "provisioned", "ID": "n", "image": image()}});
    let h = host(spec.clone(), "provisioned", st);
    let mut f = facts();
    f.power = Some(true);
    f.reboot = Some(RebootRequest {
        hard: true,
        one_shot: true,
    });
    assert_eq!(plan(&h, &f), Step::Call(Operation::PowerOff { hard: true }));
    let off = host(
        spec,
        "provisioned",
        json!({"poweredOn": false, "provisioning": {"state": "provisioned", "ID": "n", "image": image()}}),
    );
    f.power = Some(false);
    assert!(matches!(
        plan(&off, &f),
        Step::Transition(Update {
            clear_reboot: true,
            ..
        })
    ));
    // A held (suffixed) annotation keeps the host off.
    f.reboot = Some(RebootRequest {
        hard: false,
        one_shot: false,
    });
    assert_eq!(plan(&off, &f), Step::Wait(STEADY_POLL));
}

#[test]
fn deletion_paths_follow_the_state() {
    let cases = [
        ("registering", State::Deleting),
        ("", State::Deleting),
        ("provisioned", State::Deprovisioning),
        ("provisioning", State::Deprovisioning),
        ("available", State::PoweringOffBeforeDelete),
        ("inspecting", State::PoweringOffBeforeDelete),
        ("externally provisioned", State::PoweringOffBeforeDelete),
    ];
    for (state, to) in cases {
        let h = deleting(host(json!({}), state, json!({})));
        assert_eq!(next_state(&plan(&h, &facts())), Some(to), "from {state:?}");
    }
    let h = deleting(host(json!({}), "powering off before delete", json!({})));
    assert_calls_then(&h, Operation::PowerOff { hard: true }, State::Deleting);
    let h = deleting(host(json!({}), "deprovisioning", json!({})));
    assert_done_leads_to(&h, Operation::Deprovision, State::PoweringOffBeforeDelete);
    let h = deleting(host(json!({}), "deprovisioning", json!({"errorCount": 4})));
    assert_eq!(
        next_state(&plan(&h, &facts())),
        Some(State::PoweringOffBeforeDelete),
        "gives up after repeated failures"
    );
    let h = deleting(host(json!({}), "deleting", json!({})));
    assert_eq!(plan(&h, &facts()), Step::Call(Operation::Delete));
}

#[test]
fn detach_and_reattach() {
    let st = json!({"provisioning": {"state": "provisioned", "ID": "n", "image": image()}});
    let h = with_annotation(
        host(json!({"image": image()}), "provisioned", st.clone()),
        crate::api::host::DETACHED_ANNOTATION,
        "",
    );
    assert_eq!(plan(&h, &facts()), Step::Call(Operation::Detach));
    assert_eq!(
        after(&h, Operation::Detach, &CallResult::Done).operational_status,
        Some(OperationalStatus::Detached)
    );
    let mut detached_st = st.clone();
    detached_st["operationalStatus"] = json!("detached");
    let h = with_annotation(
        host(
            json!({"image": image()}),
            "provisioned",
            detached_st.clone(),
        ),
        crate::api::host::DETACHED_ANNOTATION,
        "",
    );
    assert_eq!(plan(&h, &facts()), Step::Wait(SLOW_POLL));
    // Deleting a detached host skips deprovisioning, unless told to wait.
    assert_eq!(
        next_state(&plan(&deleting(h.clone()), &facts())),
        Some(State::Deleting)
    );
    let delayed = with_annotation(
        h,
        crate::api::host::DETACHED_ANNOTATION,
        r#"{"deleteAction":"delay"}"#,
    );
    assert_eq!(plan(&deleting(delayed), &facts()), Step::Wait(SLOW_POLL));
    let reattached = host(json!({"image": image()}), "provisioned", detached_st);
    assert!(matches!(
        plan(&reattached, &facts()),
        Step::Transition(Update {
            operational_status: Some(OperationalStatus::Ok),
            ..
        })
    ));
}

#[test]
fn failures_set_the_error_type_of_the_operation() {
    let cases = [
        (Operation::Register, "registering", ErrorType::Registration),
        (
            Operation::Inspect { refresh: false },
            "inspecting",
            ErrorType::Inspection,
        ),
        (Operation::Prepare, "preparing", ErrorType::Preparation),
        (
            Operation::Deprovision,
            "deprovisioning",
            ErrorType::Provisioning,
        ),
        (Operation::PowerOn, "available", ErrorType::PowerManagement),
        (
            Operation::Adopt,
            "provisioned",
            ErrorType::ProvisionedRegistration,
        ),
        (Operation::Detach, "provisioned", ErrorType::Detach),
    ];
    for (op, state, kind) in cases {
        let h = host(json!({}), state, json!({}));
        let u = after(&h, op, &CallResult::Failed("it broke".into()));
        assert_eq!(u.error, ErrorChange::Set(kind, "it broke".into()), "{op:?}");
        assert!(
            u.event.as_ref().is_some_and(|e| e.2),
            "failure events are warnings"
        );
    }
    let h = host(json!({}), "inspecting", json!({}));
    let u = after(
        &h,
        Operation::Inspect { refresh: false },
        &CallResult::InProgress {
            after: Duration::from_secs(10),
            changed: true,
        },
    );
    assert_eq!(
        (u.state, u.requeue),
        (None, Requeue::After(Duration::from_secs(10)))
    );
}

#[test]
fn success_clears_the_error() {
    let h = host(
        json!({}),
        "preparing",
        json!({"operationalStatus": "error", "errorType": "preparation error", "errorMessage": "x", "errorCount": 2}),
    );
    let u = after(&h, Operation::Prepare, &CallResult::Done);
    let status = applied(&h, &u);
    assert_eq!(
        (
            status.error_type,
            status.error_count,
            status.operational_status
        ),
        (None, 0, OperationalStatus::Ok)
    );
    assert!(status.error_message.is_empty());
}

fn registered(result: CallResult, deployed: bool) -> Facts {
    Facts {
        registration: Some(RegistrationCheck { result, deployed }),
        ..facts()
    }
}

#[test]
fn a_registered_host_is_checked_first_and_then_goes_on_with_its_state() {
    let h = host(json!({}), "preparing", json!({}));
    assert_eq!(next(&h, &facts()), Step::CheckRegistration);
    assert_eq!(
        next(&h, &registered(CallResult::Done, false)),
        Step::Call(Operation::Prepare)
    );
    // Hosts with no record to check: new, unmanaged, deleting.
    assert_eq!(
        next_state(&next(&host(json!({}), "", json!({})), &facts())),
        Some(State::Registering)
    );
    let d = deleting(host(json!({}), "deleting", json!({})));
    assert_eq!(next(&d, &facts()), Step::Call(Operation::Delete));
}

#[test]
fn a_failed_or_first_registration_is_saved_with_the_credentials_as_tried() {
    let h = host(json!({}), "available", json!({}));
    let failed = registered(CallResult::Failed("BMC refused the password".into()), false);
    match next(&h, &failed) {
        Step::SaveRegistration(u) => assert!(matches!(
            u.error,
            ErrorChange::Set(ErrorType::Registration, _)
        )),
        other => panic!("{other:?}"),
    }
    let h = host(json!({}), "registering", json!({}));
    match next(&h, &registered(CallResult::Done, false)) {
        Step::SaveRegistration(u) => assert_eq!(u.state, Some(State::Inspecting)),
        other => panic!("{other:?}"),
    }
    // A registration error ends once registration works, in whatever state.
    let h = host(
        json!({}),
        "preparing",
        json!({"errorType": "registration error", "errorCount": 3}),
    );
    match next(&h, &registered(CallResult::Done, false)) {
        Step::SaveRegistration(u) => assert_eq!(u.error, ErrorChange::Clear),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_provisioned_host_whose_record_is_not_deployed_is_readopted_first() {
    let h = host(json!({"image": image()}), "provisioned", json!({}));
    let mut f = registered(CallResult::Done, false);
    assert_eq!(next(&h, &f), Step::Readopt);
    f.adoption = Some(CallResult::Failed("no image".into()));
    match next(&h, &f) {
        Step::Transition(u) => assert!(matches!(
            u.error,
            ErrorChange::Set(ErrorType::ProvisionedRegistration, _)
        )),
        other => panic!("{other:?}"),
    }
    f.adoption = Some(CallResult::Done);
    assert_eq!(next(&h, &f), plan(&h, &f));
    // A deployed record needs no adoption.
    assert_eq!(
        next(&h, &registered(CallResult::Done, true)),
        plan(&h, &facts())
    );
}

#[test]
fn a_spec_the_provisioner_cannot_use_is_one_error_and_deletion_still_releases() {
    let h = host(json!({}), "available", json!({}));
    let f = Facts {
        spec_problem: Some("unknown BMC scheme".into()),
        ..facts()
    };
    match next(&h, &f) {
        Step::Transition(u) => {
            assert!(matches!(
                u.error,
                ErrorChange::Set(ErrorType::Registration, _)
            ));
            assert_eq!(u.requeue, Requeue::OnChange);
        }
        other => panic!("{other:?}"),
    }
    let d = deleting(host(json!({}), "deleting", json!({})));
    assert_eq!(next(&d, &f), Step::Transition(release()));
}

#[test]
fn lease_details_are_saved_first_except_while_deleting() {
    let f = Facts {
        lease_details_changed: true,
        ..facts()
    };
    let h = host(json!({}), "provisioned", json!({}));
    assert_eq!(next(&h, &f), Step::SaveLeaseDetails);
    let d = deleting(host(json!({}), "deleting", json!({})));
    assert_eq!(next(&d, &f), Step::Call(Operation::Delete));
}

#[test]
fn changed_bios_settings_prepare_an_available_host_again() {
    let apply = Facts {
        firmware: PendingSettings::Apply(vec![("ProcTurboMode".into(), json!("Disabled"))]),
        ..facts()
    };
    let h = host(json!({}), "available", json!({}));
    match plan(&h, &apply) {
        Step::Transition(u) => assert_eq!(u.state, Some(State::Preparing)),
        other => panic!("{other:?}"),
    }
    // Not judged yet: an available host goes on as it is; preparing waits.
    let not_ready = Facts {
        firmware: PendingSettings::NotReady,
        ..facts()
    };
    assert_eq!(plan(&h, &not_ready), plan(&h, &facts()));
    let p = host(json!({}), "preparing", json!({}));
    assert_eq!(plan(&p, &not_ready), Step::Wait(FIRMWARE_WAIT));
    assert_eq!(plan(&p, &apply), Step::Call(Operation::Prepare));
}

#[test]
fn requested_firmware_updates_prepare_an_available_host_again() {
    let apply = Facts {
        firmware_updates: PendingUpdates::Apply {
            flash: vec![crate::api::firmware::FirmwareUpdate {
                component: "bios".into(),
                url: "http://images.example/bios.bin".into(),
            }],
            spec: Vec::new(),
        },
        ..facts()
    };
    let h = host(json!({}), "available", json!({}));
    match plan(&h, &apply) {
        Step::Transition(u) => assert_eq!(u.state, Some(State::Preparing)),
        other => panic!("{other:?}"),
    }
    let not_ready = Facts {
        firmware_updates: PendingUpdates::NotReady,
        ..facts()
    };
    assert_eq!(plan(&h, &not_ready), plan(&h, &facts()));
    let p = host(json!({}), "preparing", json!({}));
    assert_eq!(plan(&p, &not_ready), Step::Wait(FIRMWARE_WAIT));
    assert_eq!(plan(&p, &apply), Step::Call(Operation::Prepare));
}

/// A provisioned host, off (a reboot's power-off done), with `status` added.
fn provisioned_off(status: serde_json::Value) -> BareMetalHost {
    let mut extra = json!({"provisioning": {"state": "provisioned", "ID": "n", "image": image()}});
    if let (Some(e), Some(more)) = (extra.as_object_mut(), status.as_object()) {
        for (k, v) in more {
            e.insert(k.clone(), v.clone());
        }
    }
    host(json!({"image": image()}), "provisioned", extra)
}

fn bios_change(allowed: bool) -> Facts {
    Facts {
        firmware: PendingSettings::Apply(vec![("ProcTurboMode".into(), json!("Disabled"))]),
        servicing_allowed: ServicingAllowed {
            settings: allowed,
            updates: false,
        },
        ..facts()
    }
}

#[test]
fn without_a_policy_allowing_it_a_changed_setting_does_not_service_the_host() {
    let h = provisioned_off(json!({}));
    assert_eq!(
        plan(&h, &bios_change(false)),
        Step::Call(Operation::PowerOn)
    );
    let policy: crate::api::firmware::HostUpdatePolicy = serde_json::from_value(json!({
        "apiVersion": "metal3.io/v1alpha1", "kind": "HostUpdatePolicy",
        "metadata": {"name": "h", "namespace": "ns"},
        "spec": {"firmwareSettings": "onPreparing", "firmwareUpdates": "onReboot"}
    }))
    .expect("valid policy");
    let allowed = ServicingAllowed::from_policy(Some(&policy));
    assert!(!allowed.settings && allowed.updates);
    assert_eq!(
        ServicingAllowed::from_policy(None),
        ServicingAllowed::default()
    );
}

#[test]
fn an_allowed_change_services_a_provisioned_host_while_it_powers_on() {
    let h = provisioned_off(json!({}));
    assert!(wants_servicing_facts(&h));
    let Step::Transition(update) = plan(&h, &bios_change(true)) else {
        panic!("servicing should start with a status change");
    };
    let st = applied(&h, &update);
    assert_eq!(st.operational_status, OperationalStatus::Servicing);
    assert_eq!(st.provisioning.state, State::Provisioned);
    // Being serviced: the provisioner is asked, and power waits for it.
    let servicing = provisioned_off(json!({"operationalStatus": "servicing"}));
    assert_eq!(
        plan(&servicing, &bios_change(true)),
        Step::Call(Operation::Service)
    );
    let on = Facts {
        power: Some(true),
        ..bios_change(true)
    };
    let servicing_on =
        provisioned_off(json!({"operationalStatus": "servicing", "poweredOn": true}));
    assert_eq!(plan(&servicing_on, &on), Step::Call(Operation::Service));
    // Done: back to OK, provisioned, and power as the spec says.
    let st = applied(
        &servicing,
        &after(&servicing, Operation::Service, &CallResult::Done),
    );
    assert_eq!(st.operational_status, OperationalStatus::Ok);
    assert_eq!(st.provisioning.state, State::Provisioned);
    // A host that is on is not serviced until it reboots.
    let running = provisioned_off(json!({"poweredOn": true}));
    let on = Facts {
        power: Some(true),
        ..bios_change(true)
    };
    assert!(!wants_servicing_facts(&running));
    assert_eq!(plan(&running, &on), Step::Wait(STEADY_POLL));
    // A spec not judged yet holds the power-on briefly.
    let not_ready = Facts {
        firmware: PendingSettings::NotReady,
        ..bios_change(true)
    };
    assert_eq!(plan(&h, &not_ready), Step::Wait(FIRMWARE_WAIT));
}

#[test]
fn a_servicing_failure_is_a_servicing_error_and_a_withdrawn_change_recovers() {
    let h = provisioned_off(json!({"operationalStatus": "servicing"}));
    let failed = CallResult::Failed("Servicing failed: attributes not updated.".into());
    let update = after(&h, Operation::Service, &failed);
    assert_eq!(update.requeue, Requeue::Backoff);
    let (reason, _, warning) = update.event.clone().expect("an event");
    assert_eq!((reason.as_str(), warning), ("ServicingError", true));
    let st = applied(&h, &update);
    assert_eq!(st.error_type, Some(ErrorType::Servicing));
    assert_eq!(st.operational_status, OperationalStatus::Error);
    assert_eq!(st.provisioning.state, State::Provisioned);
    // The failed host keeps asking the provisioner (which retries with the change
    // or aborts without it), whatever its power.
    let errored = provisioned_off(json!({
        "operationalStatus": "error", "errorType": "servicing error", "errorCount": 1,
        "errorMessage": "Servicing failed"
    }));
    assert!(wants_servicing_facts(&errored));
    assert_eq!(plan(&errored, &facts()), Step::Call(Operation::Service));
    assert!(restart_on_failure(&errored, Operation::Service));
    // Restarted: servicing again, the error is over.
    let restarted = after(
        &errored,
        Operation::Service,
        &CallResult::Started {
            after: std::time::Duration::from_secs(1),
        },
    );
    let st = applied(&errored, &restarted);
    assert_eq!(
        (st.operational_status, st.error_type),
        (OperationalStatus::Servicing, None)
    );
    // Change withdrawn, servicing aborted: OK again.
    let st = applied(
        &errored,
        &after(&errored, Operation::Service, &CallResult::Done),
    );
    assert_eq!(
        (st.operational_status, st.error_type, st.error_count),
        (OperationalStatus::Ok, None, 0)
    );
}

#[test]
fn a_changed_spec_firmware_prepares_again_and_is_recorded_once_prepared() {
    let firmware = json!({"firmware": {"sriovEnabled": true}});
    let h = host(firmware.clone(), "available", json!({}));
    match plan(&h, &facts()) {
        Step::Transition(u) => {
            assert_eq!(u.state, Some(State::Preparing));
            assert!(u.event.is_some_and(|e| e.1.contains("spec.firmware")));
        }
        other => panic!("{other:?}"),
    }
    let p = host(firmware.clone(), "preparing", json!({}));
    let done = after(&p, Operation::Prepare, &CallResult::Done);
    let status = applied(&p, &done);
    assert_eq!(status.provisioning.firmware, p.spec.firmware);
    // What preparing applied is not applied again.
    let recorded = host(
        firmware,
        "available",
        json!({"provisioning": {"state": "available", "ID": "node-1",
                                "firmware": {"sriovEnabled": true}}}),
    );
    assert_eq!(
        plan(&recorded, &facts()),
        plan(&host(json!({}), "available", json!({})), &facts())
    );
}

#[test]
fn refused_bios_settings_fail_preparing_once_until_something_changes() {
    let refused = Facts {
        firmware: PendingSettings::Refused("host ns/h: spec.firmware: why; fix".into()),
        ..facts()
    };
    let p = host(
        json!({"firmware": {"sriovEnabled": true}}),
        "preparing",
        json!({}),
    );
    let Step::Transition(u) = plan(&p, &refused) else {
        panic!("not a status change");
    };
    assert_eq!(
        u.error,
        ErrorChange::Set(
            ErrorType::Preparation,
            "host ns/h: spec.firmware: why; fix".into()
        )
    );
    assert_eq!(
        u.event,
        Some((
            "PreparationError".into(),
            "host ns/h: spec.firmware: why; fix".into(),
            true
        ))
    );
    assert_eq!(u.requeue, Requeue::OnChange);
    assert_eq!(u.state, None, "the host stays preparing");
    // Said once: the next reconcile changes nothing and publishes nothing.
    let status = applied(&p, &u);
    let mut again = p.clone();
    again.status = Some(status);
    assert_eq!(
        plan(&again, &refused),
        Step::Transition(Update {
            requeue: Requeue::OnChange,
            ..Default::default()
        })
    );
}

#[test]
fn the_raid_is_recorded_when_its_clean_starts_and_forgotten_when_preparing_fails() {
    // Ironic returns a node to `manageable` after a manual clean; had the RAID not been
    // recorded when the clean started, preparing would start it again there.
    let raid = json!({"raid": {"hardwareRAIDVolumes": [{"level": "1", "sizeGibibytes": 10}]}});
    let h = host(raid, "preparing", json!({}));
    assert!(
        crate::controller::host::request::prepare_request(
            &h,
            &facts().firmware,
            &facts().firmware_updates
        )
        .unprepared
    );
    let started = after(
        &h,
        Operation::Prepare,
        &CallResult::Started {
            after: Duration::from_secs(5),
        },
    );
    assert_eq!(started.state, None, "still preparing");
    let status = applied(&h, &started);
    assert_eq!(status.provisioning.raid, h.spec.raid);
    let mut cleaning = h.clone();
    cleaning.status = Some(status);
    let request = crate::controller::host::request::prepare_request(
        &cleaning,
        &facts().firmware,
        &facts().firmware_updates,
    );
    assert!(
        !request.unprepared,
        "the clean that started is not started again"
    );

    let failed = after(
        &cleaning,
        Operation::Prepare,
        &CallResult::Failed("Cleaning failed: no controller".into()),
    );
    let status = applied(&cleaning, &failed);
    assert_eq!(
        status.provisioning.raid, None,
        "the next attempt applies it again"
    );
}
