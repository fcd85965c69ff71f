//! Ironic fake-hardware nodes with a BIOS. Ironic's fake BIOS interface starts empty;
//! its `apply_configuration` clean step stores the settings it is given (with their
//! registry fields), which `GET /v1/nodes/{id}/bios?detail=True` then returns as a
//! BMC's would. Unlike a BMC it keeps only the settings the last step sent.

use std::collections::BTreeMap;
use std::time::Duration;

use bmo::ironic::{IronicClient, NodeCreate, ProvisionRequest, ProvisionTarget};
use serde_json::{Value, json};

use super::eventually;

/// Waits until node `uuid` rests in `state` (no target state).
pub async fn wait_node(ironic: &IronicClient, uuid: &str, state: &str) {
    eventually(
        &format!("node {state}"),
        Duration::from_secs(120),
        || async {
            let n = ironic
                .get_node(uuid)
                .await
                .map_err(|e| e.to_string())?
                .ok_or("node gone")?;
            match n.provision_state.as_deref() {
                Some(s) if s == state && n.target_provision_state.is_none() => Ok(()),
                other => Err(format!("{other:?} {:?}", n.last_error)),
            }
        },
    )
    .await;
}

/// A fake-hardware node `ns~name` with port `mac`, whose BIOS holds `bios` (Ironic's
/// BIOS setting objects: `name`, `value` and registry fields), left available, as
/// bmo finds a node upstream's operator enrolled.
pub async fn node_with_bios(
    ironic: &IronicClient,
    ns: &str,
    name: &str,
    mac: &str,
    bios: Vec<Value>,
) {
    let node = NodeCreate {
        name: format!("{ns}~{name}"),
        driver: "fake-hardware".into(),
        boot_interface: Some("fake".into()),
        deploy_interface: Some("fake".into()),
        management_interface: Some("fake".into()),
        power_interface: Some("fake".into()),
        bios_interface: Some("fake".into()),
        automated_clean: Some(false),
        ..Default::default()
    };
    let node = ironic.create_node(&node).await.expect("create node");
    ironic
        .create_port(&node.uuid, mac)
        .await
        .expect("create port");
    ironic
        .set_provision_state(&node.uuid, ProvisionTarget::Manage)
        .await
        .expect("manage");
    wait_node(ironic, &node.uuid, "manageable").await;
    let mut clean = ProvisionRequest::new(ProvisionTarget::Clean);
    clean.clean_steps = Some(vec![json!({
        "interface": "bios", "step": "apply_configuration",
        "args": {"settings": bios}
    })]);
    ironic
        .change_provision_state(&node.uuid, &clean)
        .await
        .expect("clean with the BIOS step");
    wait_node(ironic, &node.uuid, "manageable").await;
    ironic
        .set_provision_state(&node.uuid, ProvisionTarget::Provide)
        .await
        .expect("provide");
    wait_node(ironic, &node.uuid, "available").await;
}

/// The BIOS settings Ironic holds for node `ns~name`, name to value.
pub async fn bios_values(ironic: &IronicClient, ns: &str, name: &str) -> BTreeMap<String, String> {
    let node = ironic
        .get_node(&format!("{ns}~{name}"))
        .await
        .expect("read node")
        .expect("node exists");
    ironic
        .get_bios(&node.uuid)
        .await
        .expect("read BIOS")
        .unwrap_or_default()
        .into_iter()
        .map(|s| (s.name, s.value.unwrap_or_default()))
        .collect()
}
