//! The stack is real: Kubernetes, Ironic and the Redfish emulator answer, and bmo's
//! clients can use them.

use std::time::Duration;

use bmo::ironic::{NodeCreate, ProvisionTarget};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use serde_json::{Map, Value, json};

use crate::support::{Stack, eventually, unique_name};

#[tokio::test]
async fn kubernetes_stores_a_secret_in_a_new_namespace() {
    let _shared = crate::support::shared();
    let stack = Stack::get();
    let client = stack.kube_client().await;
    let ns_name = unique_name("smoke");

    let namespaces: Api<Namespace> = Api::all(client.clone());
    let mut ns = Namespace::default();
    ns.metadata.name = Some(ns_name.clone());
    namespaces
        .create(&PostParams::default(), &ns)
        .await
        .expect("create namespace");

    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns_name);
    let mut secret = Secret::default();
    secret.metadata.name = Some("bmc-creds".into());
    secret.data = Some(
        [
            ("username".to_owned(), ByteString(b"admin".to_vec())),
            ("password".to_owned(), ByteString(b"s3cret".to_vec())),
        ]
        .into(),
    );
    secrets
        .create(&PostParams::default(), &secret)
        .await
        .expect("create secret");
    let read = secrets.get("bmc-creds").await.expect("read secret back");
    let data = read.data.expect("secret has data");
    assert_eq!(
        data.get("password").map(|b| b.0.as_slice()),
        Some(&b"s3cret"[..])
    );

    namespaces
        .delete(&ns_name, &DeleteParams::default())
        .await
        .expect("delete namespace");
}

#[tokio::test]
async fn operator_kubeconfig_has_no_rights_without_rbac() {
    let _shared = crate::support::shared();
    let stack = Stack::get();
    let client = crate::support::kube_client_from(&stack.operator_kubeconfig).await;
    let secrets: Api<Secret> = Api::namespaced(client, "default");
    let err = secrets
        .list(&Default::default())
        .await
        .expect_err("unbound user must be refused");
    match err {
        kube::Error::Api(status) => assert_eq!(status.code, 403, "{status:?}"),
        other => panic!("expected 403 Forbidden, got {other}"),
    }
}

#[tokio::test]
async fn ironic_enrols_and_deletes_a_fake_hardware_node() {
    let _shared = crate::support::shared();
    let stack = Stack::get();
    let ironic = stack.ironic().await;
    assert!(ironic.microversion() >= bmo::ironic::MIN_MICROVERSION);
    let name = unique_name("smoke-fake");

    let node = ironic
        .create_node(&NodeCreate {
            name: name.clone(),
            driver: "fake-hardware".into(),
            ..Default::default()
        })
        .await
        .expect("enrol fake-hardware node");
    assert_eq!(node.provision_state(), "enroll");
    ironic
        .create_port(&node.uuid, "52:54:00:aa:bb:01")
        .await
        .expect("create port");
    let by_mac = ironic
        .find_port_by_mac("52:54:00:aa:bb:01")
        .await
        .expect("find port");
    assert_eq!(by_mac.map(|p| p.node_uuid), Some(node.uuid.clone()));

    ironic
        .set_provision_state(&name, ProvisionTarget::Manage)
        .await
        .expect("manage");
    eventually(
        "fake node to become manageable",
        Duration::from_secs(60),
        || async {
            let n = ironic.get_node(&name).await.map_err(|e| e.to_string())?;
            match n {
                Some(n) if n.provision_state() == "manageable" => Ok(()),
                Some(n) => Err(format!("state {}", n.provision_state())),
                None => Err("node vanished".into()),
            }
        },
    )
    .await;

    ironic.delete_node(&name).await.expect("delete node");
    assert!(ironic.get_node(&name).await.expect("get").is_none());
    // The port went with the node.
    assert!(
        ironic
            .find_port_by_mac("52:54:00:aa:bb:01")
            .await
            .expect("find port")
            .is_none()
    );
}

#[tokio::test]
async fn ironic_reads_power_from_the_redfish_emulator() {
    let _shared = crate::support::shared();
    let stack = Stack::get();
    let ironic = stack.ironic().await;
    // The last system: other tests take the first ones.
    let system = stack
        .redfish_system_ids
        .last()
        .expect("stack has Redfish systems");
    let name = unique_name("smoke-redfish");
    let creds = &stack.redfish_credentials;

    let mut driver_info = Map::new();
    driver_info.insert(
        "redfish_address".into(),
        json!(stack.redfish_url.as_str().trim_end_matches('/')),
    );
    driver_info.insert(
        "redfish_system_id".into(),
        json!(format!("/redfish/v1/Systems/{system}")),
    );
    driver_info.insert("redfish_username".into(), json!(creds.username));
    driver_info.insert("redfish_password".into(), json!(creds.password.expose()));
    let node = ironic
        .create_node(&NodeCreate {
            name: name.clone(),
            driver: "redfish".into(),
            driver_info,
            boot_interface: Some("ipxe".into()),
            inspect_interface: Some("no-inspect".into()),
            ..Default::default()
        })
        .await
        .expect("enrol redfish node");

    ironic
        .set_provision_state(&node.uuid, ProvisionTarget::Manage)
        .await
        .expect("manage");
    let power = eventually(
        "redfish node to become manageable",
        Duration::from_secs(90),
        || async {
            let n = ironic
                .get_node(&node.uuid)
                .await
                .map_err(|e| e.to_string())?
                .ok_or("node vanished")?;
            match (n.provision_state(), n.power_state.clone()) {
                ("manageable", Some(p)) => Ok(p),
                (state, _) => Err(format!("state {state}, last_error {:?}", n.last_error)),
            }
        },
    )
    .await;

    let http = reqwest::Client::new();
    let system_doc: Value = http
        .get(
            stack
                .redfish_url
                .join(&format!("redfish/v1/Systems/{system}"))
                .expect("url"),
        )
        .basic_auth(&creds.username, Some(creds.password.expose()))
        .send()
        .await
        .expect("GET system from emulator")
        .error_for_status()
        .expect("emulator answers")
        .json()
        .await
        .expect("system is JSON");
    let emulator_power = system_doc["PowerState"]
        .as_str()
        .expect("PowerState")
        .to_lowercase();
    assert_eq!(
        power,
        format!("power {emulator_power}"),
        "Ironic and the emulator disagree"
    );

    ironic.delete_node(&node.uuid).await.expect("delete node");
    assert!(ironic.get_node(&node.uuid).await.expect("get").is_none());
}
