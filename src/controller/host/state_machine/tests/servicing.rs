//! Servicing a provisioned host as its HostUpdatePolicy allows.

use super::*;
use serde_json::json;

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
