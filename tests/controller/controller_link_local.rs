//! Hosts whose BMC address or image URL spells a link-local (metadata service)
//! address in a form admission cannot read get a registration error naming the field
//! and the host from `bmo run`, and Ironic never hears of them: no node is made. The
//! namespace carries the admission exemption label, as a site that lifts admission's
//! check would, so only the controller's check stands between the host and Ironic.
//! No test connects anywhere: the refusal comes before any connection, and the
//! addresses are spellings of 169.254.0.1, not of the metadata service, in case a
//! regression lets one through.

use std::time::Duration;

use bmo::api::{BareMetalHost, ErrorType};
use k8s_openapi::api::core::v1::Namespace;
use kube::Api;
use kube::api::PostParams;
use serde_json::json;

use crate::support::{Stack, bmo_run, create_bmc_secret, eventually, unique_mac, unique_name};

async fn exempt_namespace(client: &kube::Client) -> String {
    let name = unique_name("link-local");
    let mut namespace = Namespace::default();
    namespace.metadata.name = Some(name.clone());
    namespace.metadata.labels = Some(
        [(
            bmo::api::admission::LINK_LOCAL_EXEMPTION_LABEL.to_owned(),
            "true".to_owned(),
        )]
        .into(),
    );
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &namespace)
        .await
        .expect("create namespace");
    name
}

fn host(name: &str, bmc: &str, image_url: &str) -> BareMetalHost {
    serde_json::from_value(json!({
        "apiVersion": "metal3.io/v1alpha1", "kind": "BareMetalHost",
        "metadata": {"name": name},
        "spec": {
            "online": true, "bootMACAddress": unique_mac(),
            "bmc": {"address": bmc, "credentialsName": "bmc"},
            "image": {"url": image_url, "checksum": "0123456789abcdef0123456789abcdef", "checksumType": "md5"}
        }
    }))
    .expect("host")
}

#[tokio::test]
async fn hex_and_integer_spellings_of_a_link_local_address_get_an_error_naming_the_field_and_no_node()
 {
    let _shared = crate::support::shared();
    let stack = Stack::get();
    let client = stack.kube_client().await;
    bmo::api::install::install(&client, Duration::from_secs(60))
        .await
        .expect("install CRDs");
    let ns = exempt_namespace(&client).await;
    create_bmc_secret(&client, &ns, "bmc", "admin", "pw").await;
    let hosts: Api<BareMetalHost> = Api::namespaced(client.clone(), &ns);
    let cases = [
        (
            "hex-bmc",
            "redfish+http://0xa9.0xfe.0x0.0x1:8000/redfish/v1/Systems/1",
            "http://127.0.0.1/os.qcow2",
            "spec.bmc.address: host 0xa9.0xfe.0x0.0x1 is 169.254.0.1",
        ),
        (
            "integer-image",
            "fake://integer-image",
            "http://2851995649/os.qcow2",
            "spec.image.url: host 2851995649 is 169.254.0.1",
        ),
    ];
    for (name, bmc, image, _) in &cases {
        hosts
            .create(&PostParams::default(), &host(name, bmc, image))
            .await
            .unwrap_or_else(|e| panic!("create {name}: {e}"));
    }
    let bmo = bmo_run(&ns, &[]).0;
    for (name, _, _, says) in &cases {
        let message = eventually(
            &format!("{name} to get its registration error"),
            Duration::from_secs(60),
            || async {
                let h = hosts.get(name).await.map_err(|e| e.to_string())?;
                let status = h.status.unwrap_or_default();
                match status.error_type {
                    Some(ErrorType::Registration) => Ok(status.error_message),
                    other => Err(format!("{other:?} {}", status.error_message)),
                }
            },
        )
        .await;
        assert!(message.starts_with(says), "{name}: {message}");
        assert!(
            message.contains("BMO_ALLOWED_LINK_LOCAL_CIDRS"),
            "{message}"
        );
    }
    let nodes = stack.ironic().await.list_nodes().await.expect("list nodes");
    for (name, ..) in &cases {
        let node_name = format!("{ns}~{name}");
        assert!(
            !nodes.iter().any(|n| n.name.as_deref() == Some(&node_name)),
            "Ironic has a node for {node_name}\nlog: {}",
            bmo.log()
        );
    }
}
