//! Upstream's `forced_detachment` on a real machine, its re-attach case: while the
//! agent deploys, the host is detached with `{"force": true}`. bmo lets the node go
//! at once and the host shows `detached`, still provisioning. Without the annotation
//! the host registers a new node and the deployment starts over and finishes: the
//! caller then checks that the VM boots what it deployed.

use std::time::Duration;

use serde_json::json;

use crate::watch::Watch;

const DETACHED: &str = "baremetalhost.metal3.io/detached";

/// The host's node id in `status.provisioning.id`.
async fn node_id(watch: &Watch<'_>) -> String {
    let host = watch.api.get(&watch.name).await.expect("host");
    host.status.map(|s| s.provisioning.id).unwrap_or_default()
}

/// Waits until Ironic deploys the host's node, detaches the host by force, then
/// re-attaches it; returns when the host provisions on a new node.
pub async fn force_detach_while_deploying_then_reattach(watch: &mut Watch<'_>) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(300);
    loop {
        let node = watch.ironic.get_node(&watch.node).await.ok().flatten();
        let state = node.and_then(|n| n.provision_state).unwrap_or_default();
        watch.mark(&format!("ironic: {state}"));
        if state == "deploying" || state == "wait call-back" {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "Ironic deploys the node: {:?}",
            watch.marks
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let old = node_id(watch).await;
    watch.mark("forced detachment while deploying");
    watch
        .patch(json!({"metadata": {"annotations": {DETACHED: "{\"force\": true}"}}}))
        .await;
    let status = watch
        .until("detached", Duration::from_secs(120), |s| {
            s["operationalStatus"] == json!("detached")
        })
        .await;
    assert_eq!(
        status["provisioning"]["state"],
        json!("provisioning"),
        "detached in the middle of provisioning: {status}"
    );
    assert_ne!(
        status["operationalStatus"],
        json!("error"),
        "no error: {status}"
    );
    watch.mark("detached while provisioning");

    watch
        .patch(json!({"metadata": {"annotations": {DETACHED: null}}}))
        .await;
    watch
        .until(
            "provisioned after re-attaching",
            Duration::from_secs(900),
            |s| s["provisioning"]["state"] == json!("provisioned"),
        )
        .await;
    let new = node_id(watch).await;
    assert!(
        !new.is_empty() && new != old,
        "re-attached, the host registered a new node ({old} → {new})"
    );
    let detached = watch.at("forced detachment while deploying", None);
    assert_eq!(
        watch.at("host: deprovisioning", detached),
        None,
        "the detachment deprovisioned nothing: {:?}",
        watch.marks
    );
    watch.mark("re-attached, provisioned on a new node");
}
