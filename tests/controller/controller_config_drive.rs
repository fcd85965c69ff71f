//! The config drive bmo hands Ironic, read back from the node as Ironic stored it in
//! `instance_info` (support::stored_config_drive).

use std::time::Duration;

use crate::support::{
    bmo_run, create_bmc_secret, fake_host, installed_namespace, stored_config_drive, unique_mac,
    wait_for_state,
};
use bmo::api::{BareMetalHost, ProvisioningState};
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::PostParams;
use serde_json::{Value, json};

#[tokio::test]
async fn network_data_defaults_to_the_preprovisioning_data_else_dhcp_on_every_inspected_nic() {
    let _shared = crate::support::shared();
    let (client, ns) = installed_namespace("cfgdrive").await;
    let (bmo, _) = bmo_run(&ns, &[]);
    let hosts: Api<BareMetalHost> = Api::namespaced(client.clone(), &ns);

    let nics = [unique_mac(), unique_mac()];
    let user_data = "#cloud-config\nhostname: from-user-data\n";
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "user-data"},
        "stringData": {"userData": user_data},
    }))
    .expect("secret");
    secrets
        .create(&PostParams::default(), &secret)
        .await
        .expect("user data");

    let name = "nodata-0";
    let mut manifest = fake_host(name, &nics[0]);
    manifest["metadata"]["annotations"] = json!({
        "inspect.metal3.io": "disabled",
        "inspect.metal3.io/hardwaredetails": json!({"nics": [
            {"name": "eth0", "mac": nics[0], "ip": "192.0.2.10"},
            {"name": "eth1", "mac": nics[1]},
        ]}).to_string(),
    });
    manifest["spec"]["userData"] = json!({"name": "user-data"});
    create(&client, &ns, manifest).await;

    // A host with only preprovisioning network data gets that in its config drive.
    let preprovisioned = "preprov-0";
    // Valid as Ironic's schema requires: the node carries it as its network_data.
    let network_yaml = "links:\n- id: eth0\n  type: phy\n  ethernet_mac_address: 52:54:00:00:00:01\nnetworks: []\nservices: []\n";
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "preprov-network"},
        "stringData": {"networkData": network_yaml},
    }))
    .expect("secret");
    secrets
        .create(&PostParams::default(), &secret)
        .await
        .expect("network data");
    let mut manifest = fake_host(preprovisioned, &unique_mac());
    manifest["spec"]["preprovisioningNetworkDataName"] = json!("preprov-network");
    create(&client, &ns, manifest).await;

    let host = wait_for_state(
        &hosts,
        name,
        ProvisioningState::Provisioned,
        Duration::from_secs(240),
    )
    .await;
    let node = host.status.expect("status").provisioning.id;
    let drive = stored_config_drive(&node).await;
    let network = &drive["network_data"];
    assert!(
        network.is_object(),
        "no network_data in {drive}; bmo log: {}",
        bmo.log()
    );
    let links: Vec<(&str, &str)> = network["links"]
        .as_array()
        .expect("links")
        .iter()
        .map(|l| {
            (
                l["id"].as_str().unwrap_or(""),
                l["ethernet_mac_address"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(
        links,
        [("eth0", nics[0].as_str()), ("eth1", nics[1].as_str())],
        "{network}"
    );
    let networks: Vec<(&str, &str)> = network["networks"]
        .as_array()
        .expect("networks")
        .iter()
        .map(|n| {
            (
                n["link"].as_str().unwrap_or(""),
                n["type"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(
        networks,
        [("eth0", "ipv4_dhcp"), ("eth1", "ipv4_dhcp")],
        "{network}"
    );
    // The user's data is there beside it, as given.
    assert_eq!(drive["user_data"].as_str(), Some(user_data));

    let host = wait_for_state(
        &hosts,
        preprovisioned,
        ProvisioningState::Provisioned,
        Duration::from_secs(240),
    )
    .await;
    let drive = stored_config_drive(&host.status.expect("status").provisioning.id).await;
    assert_eq!(
        drive["network_data"],
        json!({"links": [{"id": "eth0", "type": "phy", "ethernet_mac_address": "52:54:00:00:00:01"}], "networks": [], "services": []})
    );
}

/// Creates the fake-hardware host `manifest` and its BMC Secret.
async fn create(client: &kube::Client, ns: &str, manifest: Value) {
    let host: BareMetalHost = serde_json::from_value(manifest).expect("host");
    let name = host.metadata.name.clone().expect("name");
    create_bmc_secret(client, ns, &format!("{name}-bmc"), "admin", "password").await;
    Api::<BareMetalHost>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &host)
        .await
        .expect("create host");
}
