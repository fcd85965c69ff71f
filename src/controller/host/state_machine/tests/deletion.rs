//! Deleting and detaching a host.

use super::*;
use serde_json::json;

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
fn only_a_forced_detach_interrupts_an_operation_and_its_state_stays() {
    let forced = r#"{"force": true}"#;
    for state in ["inspecting", "provisioning", "preparing", "deprovisioning"] {
        let st = json!({"provisioning": {"state": state, "ID": "n"}});
        let spec = json!({"image": image()});
        for (value, call) in [("", false), (r#"{"force": false}"#, false), (forced, true)] {
            let h = with_annotation(
                host(spec.clone(), state, st.clone()),
                crate::api::host::DETACHED_ANNOTATION,
                value,
            );
            let planned = plan(&h, &facts());
            assert_eq!(
                planned == Step::Call(Operation::Detach),
                call,
                "{state} with {value:?}: {planned:?}"
            );
        }
        let h = with_annotation(
            host(spec.clone(), state, st.clone()),
            crate::api::host::DETACHED_ANNOTATION,
            forced,
        );
        let update = after(&h, Operation::Detach, &CallResult::Done);
        assert_eq!(update.operational_status, Some(OperationalStatus::Detached));
        assert_eq!(update.state, None, "{state}: the provisioning state stays");

        // Deleted once detached: straight to deleting, no deprovisioning or power-off.
        let mut detached_st = st.clone();
        detached_st["operationalStatus"] = json!("detached");
        let h = with_annotation(
            host(spec, state, detached_st),
            crate::api::host::DETACHED_ANNOTATION,
            forced,
        );
        assert_eq!(
            next_state(&plan(&deleting(h), &facts())),
            Some(State::Deleting),
            "{state}"
        );
    }
}
