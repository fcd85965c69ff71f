//! Tenant isolation: a host never acts on another host's Ironic node, whatever its
//! status says. The probe that found the hole created a host carrying upstream's
//! status annotation with another host's `provisioning.ID`: bmo renamed the victim's
//! node, rewrote its BMC access, powered it off, and deleting the intruder
//! deprovisioned (cleaned) and deleted the victim's node.

use std::time::Duration;

use bmo::api::{BareMetalHost, ProvisioningState};
use bmo::ironic::Node;
use k8s_openapi::api::core::v1::Event;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::{Value, json};

use crate::support::{
    Stack, bmo_run, create_bmc_secret, eventually, fake_host, new_namespace, unique_mac,
    wait_for_state,
};

const STATUS: &str = "baremetalhost.metal3.io/status";

/// What of a node a takeover would change: name, power, provision state,
/// maintenance, driver and BMC access (passwords are masked by Ironic).
fn footprint(node: &Node) -> Value {
    json!({
        "uuid": node.uuid,
        "name": node.name,
        "power": node.power_state,
        "state": node.provision_state,
        "target": node.target_provision_state,
        "maintenance": node.maintenance,
        "driver": node.driver,
        "driver_info": node.driver_info,
        "instance_uuid": node.instance_uuid,
    })
}

async fn create_host(hosts: &Api<BareMetalHost>, host: Value) {
    let host: BareMetalHost = serde_json::from_value(host).expect("valid host");
    hosts
        .create(&PostParams::default(), &host)
        .await
        .expect("create host");
}

#[tokio::test]
async fn a_host_pointing_at_another_hosts_node_never_touches_it() {
    let _shared = crate::support::shared();
    let stack = Stack::get();
    let client = stack.kube_client().await;
    let ironic = stack.ironic().await;
    bmo::api::install::install(&client, Duration::from_secs(60))
        .await
        .expect("install CRDs");
    let ns = new_namespace(&client, "tenants").await;
    let hosts: Api<BareMetalHost> = Api::namespaced(client.clone(), &ns);
    let (bmo, _) = bmo_run(&ns, &[]);

    // The victim: a provisioned, powered-on host.
    let victim_mac = unique_mac();
    create_bmc_secret(&client, &ns, "victim-bmc", "admin", "password").await;
    create_host(&hosts, fake_host("victim", &victim_mac)).await;
    let victim = wait_for_state(
        &hosts,
        "victim",
        ProvisioningState::Provisioned,
        Duration::from_secs(120),
    )
    .await;
    let victim_id = victim
        .status
        .as_ref()
        .map(|s| s.provisioning.id.clone())
        .expect("the victim's node is recorded");
    let before = eventually(
        "the victim's node powered on",
        Duration::from_secs(60),
        || async {
            let node = ironic
                .get_node(&victim_id)
                .await
                .map_err(|e| e.to_string())?
                .ok_or("no node")?;
            match node.power_state.as_deref() {
                Some("power on") if node.target_power_state.is_none() => Ok(node),
                other => Err(format!("power {other:?}")),
            }
        },
    )
    .await;

    // Intruder 1 restores the victim's status from upstream's annotation; its own
    // MAC, BMC and credentials.
    let mut intruder = fake_host("intruder", &unique_mac());
    intruder["spec"]["online"] = json!(false);
    let victim_status = serde_json::to_string(&victim.status).expect("status JSON");
    intruder["metadata"]["annotations"] = json!({ STATUS: victim_status });
    create_bmc_secret(&client, &ns, "intruder-bmc", "mallory", "secret").await;
    create_host(&hosts, intruder).await;

    // Intruder 2 has the victim's boot MAC and writes the victim's node into its
    // status directly (a tenant allowed to write status).
    let mut copycat = fake_host("copycat", &victim_mac);
    copycat["spec"]["online"] = json!(false);
    create_bmc_secret(&client, &ns, "copycat-bmc", "mallory", "secret").await;
    create_host(&hosts, copycat).await;
    let claim = json!({"status": {
        "operationalStatus": "OK", "errorMessage": "", "poweredOn": false,
        "provisioning": {"ID": victim_id, "state": "provisioned"}
    }});
    hosts
        .patch_status("copycat", &PatchParams::default(), &Patch::Merge(&claim))
        .await
        .expect("write copycat's status");

    let events: Api<Event> = Api::namespaced(client.clone(), &ns);
    let refusal = eventually(
        "the annotation refused",
        Duration::from_secs(60),
        || async {
            let list = events
                .list(&ListParams::default().fields("involvedObject.name=intruder"))
                .await
                .map_err(|e| e.to_string())?;
            list.items
                .into_iter()
                .find(|e| e.reason.as_deref() == Some("StatusAnnotationRefused"))
                .and_then(|e| e.message)
                .ok_or_else(|| "no StatusAnnotationRefused event yet".to_owned())
        },
    )
    .await;
    assert!(
        refusal.contains(&format!("{ns}/victim")) && refusal.contains(&format!("{ns}/intruder")),
        "the refusal names both hosts: {refusal}"
    );
    eventually(
        "the annotation removed",
        Duration::from_secs(30),
        || async {
            let h = hosts.get("intruder").await.map_err(|e| e.to_string())?;
            match h.annotations().contains_key(STATUS) {
                false => Ok(()),
                true => Err("still annotated".into()),
            }
        },
    )
    .await;
    // The copycat's registration is refused, naming the victim.
    let copycat = eventually("copycat refused", Duration::from_secs(60), || async {
        let h = hosts.get("copycat").await.map_err(|e| e.to_string())?;
        let message = h
            .status
            .as_ref()
            .map(|s| s.error_message.clone())
            .unwrap_or_default();
        match message.contains(&format!("{ns}/victim")) {
            true => Ok(message),
            false => Err(format!("errorMessage {message:?}")),
        }
    })
    .await;
    assert!(copycat.contains(&victim_id), "{copycat}");

    // Both intruders go; deleting them completes and touches nothing of the victim's.
    for name in ["intruder", "copycat"] {
        hosts
            .delete(name, &DeleteParams::default())
            .await
            .expect("delete intruder");
    }
    eventually("intruders gone", Duration::from_secs(120), || async {
        let left: Vec<String> = hosts
            .list(&ListParams::default())
            .await
            .map_err(|e| e.to_string())?
            .items
            .iter()
            .filter(|h| h.name_any() != "victim")
            .map(|h| {
                let status = h.status.clone().unwrap_or_default();
                format!(
                    "{} ({}: {})",
                    h.name_any(),
                    h.provisioning_state(),
                    status.error_message
                )
            })
            .collect();
        match left.is_empty() {
            true => Ok(()),
            false => Err(format!("still there: {left:?}")),
        }
    })
    .await;
    let after = ironic
        .get_node(&victim_id)
        .await
        .expect("read the victim's node")
        .expect("the victim's node still exists");
    assert_eq!(
        footprint(&after),
        footprint(&before),
        "the victim's node is untouched; bmo log:\n{}",
        bmo.log_tail(40)
    );
    let victim = hosts.get("victim").await.expect("victim");
    let status = victim.status.clone().unwrap_or_default();
    assert_eq!(victim.provisioning_state(), ProvisioningState::Provisioned);
    assert_eq!(status.error_message, "", "the victim reports no error");
    assert_eq!(status.provisioning.id, victim_id);
}
