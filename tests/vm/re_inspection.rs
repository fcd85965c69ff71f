//! Upstream's `re_inspection` on a real machine: an available host whose
//! preprovisioning network data now gives the agent another address is annotated
//! `inspect.metal3.io`. Ironic boots the agent again (inspection always reboots, fast
//! track or not), the agent reports the new address, bmo writes it into
//! `status.hardware` and clears the annotation. Upstream shows the new inspection by
//! a hostname that changes; here it is the NIC's address, which only a new boot of
//! the agent can report.

use std::time::Duration;

use serde_json::{Value, json};

use crate::vm_e2e::nic_of;
use crate::watch::{Watch, state_is};

/// When `status.operationHistory.inspect` last started.
fn inspect_started(status: &Value) -> Value {
    status["operationHistory"]["inspect"]["start"].clone()
}

/// Points the host at the `secret` network data (the agent's address `agent_ip`),
/// waits until bmo has given it to the node, then re-inspects by annotation.
pub async fn re_inspect_on_a_new_address(watch: &mut Watch<'_>, secret: &str, agent_ip: &str) {
    let before = watch
        .until("available", Duration::from_secs(60), state_is("available"))
        .await;
    let first = inspect_started(&before);
    assert_ne!(first, Value::Null, "inspected once: {before}");
    watch
        .patch(json!({"spec": {"preprovisioningNetworkDataName": secret}}))
        .await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let node = watch.ironic.get_node(&watch.node).await;
        let data = node.ok().flatten().and_then(|n| n.network_data);
        if data.is_some_and(|d| d.to_string().contains(agent_ip)) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "bmo gave the node the new preprovisioning network data ({agent_ip})"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    watch.mark("re-inspection requested");
    let start = watch.at("re-inspection requested", None);
    watch
        .patch(json!({"metadata": {"annotations": {"inspect.metal3.io": ""}}}))
        .await;
    let status = watch
        .until(
            "available after re-inspection",
            Duration::from_secs(900),
            |s| s["provisioning"]["state"] == json!("available") && inspect_started(s) != first,
        )
        .await;
    watch.mark("re-inspected, available");
    assert!(
        watch.at("host: inspecting", start).is_some()
            && watch.at("ironic: inspect wait", start).is_some(),
        "the host went through inspecting and Ironic waited for the agent: {:?}",
        watch.marks
    );
    let nic = nic_of(&status["hardware"], &watch.vm.mac);
    assert_eq!(
        nic["ip"],
        json!(agent_ip),
        "status.hardware holds what the new inspection found: {nic}"
    );
    let host = watch.api.get(&watch.name).await.expect("host");
    let annotations = host.metadata.annotations.unwrap_or_default();
    assert!(
        !annotations.contains_key("inspect.metal3.io"),
        "bmo cleared the inspect annotation: {annotations:?}"
    );
}
