//! Power in stable states: `spec.online`, reboot annotations, and the DataImage a
//! provisioned host sees to before it powers on.

use super::*;
use serde_json::json;

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
