//! Hardware details from outside: a host that does not inspect takes them from the
//! HardwareData of its name, made before it (upstream's `external_inspection`).

use super::*;
use crate::api::HardwareDetails;
use crate::controller::host::store::Store;

fn details(ram_mebibytes: i64) -> HardwareDetails {
    serde_json::from_value(json!({"ramMebibytes": ram_mebibytes, "hostname": "outside"}))
        .expect("hardware details")
}

/// A site with host `name` (`spec` merged into its spec) and a HardwareData of its
/// name made before the host's first reconcile.
async fn site_with_hardware_data(name: &str, spec: serde_json::Value) -> TestContext {
    let ctx = site(name, spec);
    let host = ctx.store.host(NS, name).expect("host");
    ctx.store
        .apply_hardware_data(&host, &details(4096))
        .await
        .expect("HardwareData");
    ctx
}

#[tokio::test]
async fn a_host_with_inspection_disabled_takes_the_hardware_data_made_before_it() {
    let ctx =
        site_with_hardware_data("x", json!({"inspectionMode": "disabled", "image": null})).await;
    let states = drive(&ctx, "x", in_state(State::Available)).await;
    assert!(!states.contains(&State::Inspecting), "{states:?}");
    let status = ctx
        .store
        .host(NS, "x")
        .and_then(|h| h.status)
        .expect("status");
    assert_eq!(status.hardware, Some(details(4096)));
    assert!(
        status
            .operation_history
            .and_then(|h| h.inspect)
            .and_then(|i| i.start)
            .is_none(),
        "never inspected"
    );
    assert!(event_reasons(&ctx).contains(&"UpdateHardwareDetails".to_owned()));

    // Details changed outside reach the status; the same details are not written again.
    let host = ctx.store.host(NS, "x").expect("host");
    ctx.store
        .apply_hardware_data(&host, &details(8192))
        .await
        .expect("HardwareData");
    drive(&ctx, "x", |h| {
        h.and_then(|h| h.status.as_ref())
            .is_some_and(|s| s.hardware == Some(details(8192)))
    })
    .await;
    let writes = event_reasons(&ctx)
        .iter()
        .filter(|r| *r == "UpdateHardwareDetails")
        .count();
    step(&ctx, "x").await;
    step(&ctx, "x").await;
    let again = event_reasons(&ctx)
        .iter()
        .filter(|r| *r == "UpdateHardwareDetails")
        .count();
    assert_eq!(writes, again, "taken in once per change");
}

#[tokio::test]
async fn a_host_that_inspects_ignores_the_hardware_data_and_inspects() {
    let ctx = site_with_hardware_data("i", json!({"image": null})).await;
    let states = drive(&ctx, "i", in_state(State::Available)).await;
    assert!(states.contains(&State::Inspecting), "{states:?}");
}
