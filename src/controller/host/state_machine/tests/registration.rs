//! The registration check every reconcile makes, re-adoption, spec problems and
//! lease details.

use super::*;
use serde_json::json;

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
        spec_problem: Some(SpecProblem::in_spec("unknown BMC scheme")),
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
fn the_hardware_profile_is_recorded_once_registered_and_an_explicit_one_gives_hints() {
    let leaving = |spec: serde_json::Value| {
        let h = host(spec, "registering", json!({}));
        let update = Update {
            state: Some(State::Inspecting),
            ..Default::default()
        };
        applied(&h, &update).hardware_profile
    };
    assert_eq!(leaving(json!({})).as_deref(), Some("unknown"));
    assert_eq!(
        leaving(json!({"bmc": {"address": "libvirt://x", "credentialsName": "c"}})).as_deref(),
        Some("libvirt")
    );
    assert_eq!(
        leaving(json!({"hardwareProfile": "dell"})).as_deref(),
        Some("dell")
    );
    let still = host(json!({}), "", json!({}));
    let registering = Update {
        state: Some(State::Registering),
        ..Default::default()
    };
    assert_eq!(applied(&still, &registering).hardware_profile, None);

    // Hints: the spec's win; an explicit profile gives its own; none by default.
    let hints = |spec: serde_json::Value| root_device_hints(&host(spec, "available", json!({})));
    assert_eq!(hints(json!({})), None);
    let libvirt = hints(json!({"hardwareProfile": "libvirt"})).expect("hints");
    assert_eq!(libvirt.device_name.as_deref(), Some("/dev/vda"));
    let raid = hints(json!({"hardwareProfile": "dell-raid"})).expect("hints");
    assert_eq!(raid.hctl.as_deref(), Some("0:2:0:0"));
    let own =
        hints(json!({"hardwareProfile": "libvirt", "rootDeviceHints": {"deviceName": "/dev/sdb"}}))
            .expect("hints");
    assert_eq!(own.device_name.as_deref(), Some("/dev/sdb"));
    // What a deployment records is what it used.
    let h = host(
        json!({"hardwareProfile": "openstack", "image": image()}),
        "provisioning",
        json!({}),
    );
    let done = Update {
        record_provisioned: Some(true),
        ..Default::default()
    };
    let recorded = applied(&h, &done)
        .provisioning
        .root_device_hints
        .expect("recorded");
    assert_eq!(recorded.device_name.as_deref(), Some("/dev/vdb"));
}

#[test]
fn a_new_host_gets_its_first_state_from_its_spec_alone_and_others_take_the_whole_reconcile() {
    let mut new = host(json!({}), "", json!({}));
    new.status = None;
    // The same step the whole reconcile takes with everything loaded.
    let first = first_state(&new).expect("a first state");
    assert_eq!(first.state, Some(State::Registering));
    assert_eq!(next(&new, &facts()), Step::Transition(first));
    let mut no_bmc = host(json!({"bmc": null}), "", json!({}));
    no_bmc.status = None;
    assert_eq!(
        first_state(&no_bmc).and_then(|u| u.state),
        Some(State::Unmanaged)
    );
    // A status (a host taken over from elsewhere), deletion or a detached annotation:
    // not a plain new host.
    assert_eq!(first_state(&host(json!({}), "", json!({}))), None);
    assert_eq!(first_state(&deleting(new.clone())), None);
    let detached = with_annotation(new, "baremetalhost.metal3.io/detached", "");
    assert_eq!(first_state(&detached), None);
}
