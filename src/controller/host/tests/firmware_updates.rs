//! HostFirmwareComponents updates through the host controller: flashed while
//! preparing, recorded once, forgotten when preparing fails.

use serde_json::json;

use crate::api::HostFirmwareComponents;

use super::*;

fn bios_update() -> Vec<crate::api::firmware::FirmwareUpdate> {
    vec![crate::api::firmware::FirmwareUpdate {
        component: "bios".into(),
        url: "http://images/bios.bin".into(),
    }]
}

/// A HostFirmwareComponents asking for `updates`, judged valid and changed by the
/// firmware controller.
fn judged_components(
    updates: &[crate::api::firmware::FirmwareUpdate],
) -> crate::api::firmware::HostFirmwareComponents {
    serde_json::from_value(json!({
        "apiVersion": "metal3.io/v1alpha1", "kind": "HostFirmwareComponents",
        "metadata": {"name": "h", "namespace": NS, "generation": 2},
        "spec": {"updates": updates},
        "status": {"conditions": judged("True", "OK", 2)}
    }))
    .expect("valid object")
}

#[tokio::test]
async fn valid_firmware_updates_are_flashed_once_while_preparing() {
    let ctx = site("h", json!({"image": null, "online": false}));
    drive(&ctx, "h", in_state(State::Available)).await;
    let wanted = bios_update();
    ctx.store.put(judged_components(&wanted));
    let states = drive(&ctx, "h", |h| {
        h.is_some_and(|h| state_of(h) == State::Available)
            && ctx
                .store
                .stored::<HostFirmwareComponents>(NS, "h")
                .and_then(|o| o.status)
                .is_some_and(|s| s.updates == wanted)
    })
    .await;
    assert_eq!(
        states,
        [State::Available, State::Preparing, State::Available]
    );
    let node = ctx.provisioner.host(&format!("{NS}~h")).expect("node");
    assert_eq!(node.last_clean_steps, ["firmware.update"]);
    // Recorded as applied: the next reconciles flash nothing, even before the
    // firmware controller judges the object again.
    let object = ctx
        .store
        .stored::<HostFirmwareComponents>(NS, "h")
        .expect("object");
    assert_eq!(
        crate::api::firmware_pending::pending_updates(Some(&object)),
        crate::api::firmware_pending::PendingUpdates::None
    );
    step(&ctx, "h").await;
    assert_eq!(stored_state(&ctx, "h"), State::Available);
}

#[tokio::test]
async fn failed_preparing_forgets_the_recorded_updates_so_a_retry_flashes_them() {
    let ctx = context_with_steps(3);
    ctx.store.put(bmc_secret("h-bmc"));
    ctx.store
        .put_host(host("h", json!({"image": null, "online": false})));
    drive(&ctx, "h", in_state(State::Available)).await;
    ctx.store.put(judged_components(&bios_update()));
    let recorded = |ctx: &TestContext| {
        ctx.store
            .stored::<HostFirmwareComponents>(NS, "h")
            .and_then(|o| o.status)
            .map(|s| s.updates)
            .unwrap_or_default()
    };
    // Until the clean steps started (and the updates were recorded).
    for _ in 0..10 {
        if !recorded(&ctx).is_empty() {
            break;
        }
        step(&ctx, "h").await;
    }
    assert_eq!(recorded(&ctx), bios_update());
    ctx.provisioner.fail(
        "ns~h",
        FixtureOperation::Prepare,
        "Cleaning failed: flash refused",
    );
    step(&ctx, "h").await;
    let h = ctx.store.host(NS, "h").expect("host");
    assert_eq!(
        h.status.as_ref().and_then(|s| s.error_type),
        Some(ErrorType::Preparation)
    );
    assert!(recorded(&ctx).is_empty(), "{:?}", recorded(&ctx));
}
