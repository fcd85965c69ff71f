//! BIOS settings, firmware updates, `spec.firmware` and RAID: what prepares a host
//! again and what preparing records.

use super::*;
use serde_json::json;

/// Facts changed by `apply` prepare an available host again and are applied by
/// preparing; changed by `not_ready` (not judged yet), they leave an available host
/// as it is and hold preparing.
fn assert_prepares_again(apply: impl FnOnce(&mut Facts), not_ready: impl FnOnce(&mut Facts)) {
    let (mut applying, mut waiting) = (facts(), facts());
    apply(&mut applying);
    not_ready(&mut waiting);
    let (apply, not_ready) = (&applying, &waiting);
    let h = host(json!({}), "available", json!({}));
    match plan(&h, apply) {
        Step::Transition(u) => assert_eq!(u.state, Some(State::Preparing)),
        other => panic!("{other:?}"),
    }
    assert_eq!(plan(&h, not_ready), plan(&h, &facts()));
    let p = host(json!({}), "preparing", json!({}));
    assert_eq!(plan(&p, not_ready), Step::Wait(FIRMWARE_WAIT));
    assert_eq!(plan(&p, apply), Step::Call(Operation::Prepare));
}

#[test]
fn changed_bios_settings_prepare_an_available_host_again() {
    assert_prepares_again(
        |f| f.firmware = PendingSettings::Apply(vec![("ProcTurboMode".into(), json!("Disabled"))]),
        // Not judged yet: an available host goes on as it is; preparing waits.
        |f| f.firmware = PendingSettings::NotReady,
    );
}

#[test]
fn requested_firmware_updates_prepare_an_available_host_again() {
    let flash = vec![crate::api::firmware::FirmwareUpdate {
        component: "bios".into(),
        url: "http://images.example/bios.bin".into(),
    }];
    assert_prepares_again(
        |f| {
            let spec = Vec::new();
            f.firmware_updates = PendingUpdates::Apply { flash, spec };
        },
        |f| f.firmware_updates = PendingUpdates::NotReady,
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
