//! Servicing through the host controller: a provisioned host's BIOS change, allowed
//! by its HostUpdatePolicy, runs as service steps while the host powers on; a failure
//! is a servicing error, and a withdrawn change lets the host recover.

use serde_json::json;

use super::*;
use crate::api::firmware::{HostFirmwareSettings, HostUpdatePolicy};

/// The host's HostFirmwareSettings asking for `ProcTurboMode: wanted` while the BMC
/// reports `current`, as the firmware controller judged it.
fn settings(wanted: &str, current: &str) -> HostFirmwareSettings {
    let changed = if wanted == current { "False" } else { "True" };
    serde_json::from_value(json!({
        "apiVersion": "metal3.io/v1alpha1", "kind": "HostFirmwareSettings",
        "metadata": {"name": "h", "namespace": NS, "generation": 2},
        "spec": {"settings": {"ProcTurboMode": wanted}},
        "status": {
            "settings": {"ProcTurboMode": current},
            "conditions": [
                {"type": "ChangeDetected", "status": changed, "reason": "", "message": "",
                 "observedGeneration": 2, "lastTransitionTime": "2026-01-01T00:00:00Z"},
                {"type": "Valid", "status": "True", "reason": "Success", "message": "",
                 "observedGeneration": 2, "lastTransitionTime": "2026-01-01T00:00:00Z"}
            ]
        }
    }))
    .expect("valid settings")
}

fn on_reboot_policy() -> HostUpdatePolicy {
    serde_json::from_value(json!({
        "apiVersion": "metal3.io/v1alpha1", "kind": "HostUpdatePolicy",
        "metadata": {"name": "h", "namespace": NS},
        "spec": {"firmwareSettings": "onReboot"}
    }))
    .expect("valid policy")
}

fn set_online(ctx: &TestContext, online: bool) {
    let mut h = ctx.store.host(NS, "h").expect("host");
    h.spec.online = online;
    ctx.store.put_host(h);
}

fn status(ctx: &TestContext) -> crate::api::BareMetalHostStatus {
    ctx.store
        .host(NS, "h")
        .and_then(|h| h.status)
        .unwrap_or_default()
}

/// A provisioned host, on, with a pending `ProcTurboMode` change, then powered off.
async fn provisioned_with_a_change(policy: bool) -> TestContext {
    let ctx = site("h", json!({}));
    drive(&ctx, "h", settled).await;
    ctx.store.put(settings("Disabled", "Enabled"));
    if policy {
        ctx.store.put(on_reboot_policy());
    }
    set_online(&ctx, false);
    drive(&ctx, "h", |h| {
        h.is_some_and(|h| h.status.as_ref().is_some_and(|s| !s.powered_on))
    })
    .await;
    assert_eq!(status(&ctx).operational_status, OperationalStatus::Ok);
    ctx
}

/// Reconciles until `done`; the operational statuses passed through.
async fn until(
    ctx: &TestContext,
    done: impl Fn(&crate::api::BareMetalHostStatus) -> bool,
) -> Vec<OperationalStatus> {
    let mut seen = Vec::new();
    for _ in 0..50 {
        let st = status(ctx);
        if seen.last() != Some(&st.operational_status) {
            seen.push(st.operational_status);
        }
        assert_eq!(st.provisioning.state, State::Provisioned);
        if done(&st) {
            return seen;
        }
        step(ctx, "h").await;
    }
    panic!("not there; passed through {seen:?}: {:?}", status(ctx));
}

#[tokio::test]
async fn without_a_policy_the_host_powers_on_unchanged() {
    let ctx = provisioned_with_a_change(false).await;
    set_online(&ctx, true);
    let seen = until(&ctx, |s| s.powered_on).await;
    assert_eq!(seen, [OperationalStatus::Ok]);
    assert!(
        !event_reasons(&ctx)
            .iter()
            .any(|r| r.starts_with("Servicing"))
    );
}

#[tokio::test]
async fn an_allowed_change_is_serviced_while_the_host_powers_on() {
    let ctx = provisioned_with_a_change(true).await;
    set_online(&ctx, true);
    until(&ctx, |s| {
        s.operational_status == OperationalStatus::Servicing
    })
    .await;
    let seen = until(&ctx, |s| s.operational_status == OperationalStatus::Ok).await;
    assert_eq!(seen, [OperationalStatus::Servicing, OperationalStatus::Ok]);
    let st = status(&ctx);
    assert!(!st.powered_on, "power waited for servicing");
    assert_eq!(st.provisioning.current_step, None);
    let node = ctx.provisioner.host(&format!("{NS}~h")).expect("node");
    assert_eq!(node.last_clean_steps, ["bios.apply_configuration"]);
    let reasons = event_reasons(&ctx);
    assert!(
        reasons.contains(&"ServicingStarted".to_owned()),
        "{reasons:?}"
    );
    assert!(
        reasons.contains(&"ServicingComplete".to_owned()),
        "{reasons:?}"
    );
    // The firmware controller reads the new value; the host powers on.
    ctx.store.put(settings("Disabled", "Disabled"));
    until(&ctx, |s| s.powered_on).await;
}

#[tokio::test]
async fn a_failure_is_a_servicing_error_and_withdrawing_the_change_recovers() {
    let ctx = provisioned_with_a_change(true).await;
    ctx.provisioner.fail(
        "ns~h",
        FixtureOperation::Service,
        "Servicing failed: attributes not updated.",
    );
    set_online(&ctx, true);
    until(&ctx, |s| s.error_type == Some(ErrorType::Servicing)).await;
    let st = status(&ctx);
    assert_eq!(st.operational_status, OperationalStatus::Error);
    assert!(!st.powered_on, "power waits for servicing");
    assert!(event_reasons(&ctx).contains(&"ServicingError".to_owned()));
    // The change withdrawn (the spec back to what the BMC has): the host recovers.
    ctx.provisioner
        .clear_failure("ns~h", FixtureOperation::Service);
    ctx.store.put(settings("Enabled", "Enabled"));
    until(&ctx, |s| s.powered_on).await;
    let st = status(&ctx);
    assert_eq!(
        (st.operational_status, st.error_type),
        (OperationalStatus::Ok, None)
    );
}
