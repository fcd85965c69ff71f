//! `spec.firmware` through the host controller: applied as the BIOS clean step while
//! preparing, recorded once prepared, and refused once, until the spec changes, when
//! the vendor is unknown.

use serde_json::json;

use super::*;

const WANTED: &str = r#"{"virtualizationEnabled": true, "sriovEnabled": false}"#;

/// The host's HostFirmwareSettings with the BIOS read as a Dell's, nothing asked.
fn dell_settings() -> crate::api::firmware::HostFirmwareSettings {
    serde_json::from_value(json!({
        "apiVersion": "metal3.io/v1alpha1", "kind": "HostFirmwareSettings",
        "metadata": {"name": "h", "namespace": NS, "generation": 1},
        "spec": {"settings": {}},
        "status": {
            "schema": {"name": "schema-1", "namespace": NS},
            "settings": {"ProcVirtualization": "Disabled", "LogicalProc": "Enabled",
                         "SriovGlobalEnable": "Disabled"},
            "conditions": judged("False", "Success", 1)
        }
    }))
    .expect("valid object")
}

#[tokio::test]
async fn a_dell_prepares_with_the_mapped_settings_once() {
    let wanted: serde_json::Value = serde_json::from_str(WANTED).expect("json");
    let ctx = site(
        "h",
        json!({"image": null, "online": false, "firmware": wanted,
               "bmc": {"address": "idrac-redfish://10.0.0.5/redfish/v1/Systems/1",
                       "credentialsName": "h-bmc"}}),
    );
    ctx.store.put(dell_settings());
    drive(&ctx, "h", in_state(State::Available)).await;
    let node = ctx.provisioner.host(&format!("{NS}~h")).expect("node");
    assert_eq!(node.last_clean_steps, ["bios.apply_configuration"]);
    let h = ctx.store.host(NS, "h").expect("host");
    let status = h.status.clone().unwrap_or_default();
    assert_eq!(status.provisioning.firmware, h.spec.firmware);
    // Recorded: the available host stays available.
    step(&ctx, "h").await;
    assert_eq!(stored_state(&ctx, "h"), State::Available);
}

#[tokio::test]
async fn an_unknown_vendor_fails_preparing_once_until_the_spec_changes() {
    let wanted: serde_json::Value = serde_json::from_str(WANTED).expect("json");
    let ctx = site(
        "h",
        json!({"image": null, "online": false, "firmware": wanted}),
    );
    drive(&ctx, "h", |h| {
        h.and_then(|h| h.status.as_ref())
            .is_some_and(|s| s.error_type == Some(ErrorType::Preparation))
    })
    .await;
    let h = ctx.store.host(NS, "h").expect("host");
    let status = h.status.clone().unwrap_or_default();
    assert_eq!(state_of(&h), State::Preparing);
    assert!(
        status.error_message.starts_with("host ns/h: spec.firmware")
            && status.error_message.contains("HostFirmwareSettings"),
        "{}",
        status.error_message
    );
    let errors = |ctx: &TestContext| {
        event_reasons(ctx)
            .into_iter()
            .filter(|r| r == "PreparationError")
            .count()
    };
    assert_eq!(errors(&ctx), 1);
    assert_eq!(step(&ctx, "h").await, Next::OnChange);
    assert_eq!(errors(&ctx), 1, "said once");
    // The fix: without spec.firmware the host prepares.
    let mut fixed = ctx.store.host(NS, "h").expect("host");
    fixed.spec.firmware = None;
    ctx.store.put_host(fixed);
    drive(&ctx, "h", in_state(State::Available)).await;
    let status = ctx
        .store
        .host(NS, "h")
        .and_then(|h| h.status)
        .unwrap_or_default();
    assert_eq!(status.error_type, None);
}
