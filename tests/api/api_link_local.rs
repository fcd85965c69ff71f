//! The link-local admission policies against the stack's real kube-apiserver: a
//! BareMetalHost or DataImage pointing at the metadata service (169.254.169.254) is
//! refused naming the field, loopback passes, and a namespace carrying the exemption
//! label may use link-local addresses (bmo's own check then decides); a host stored
//! with one stays updatable as long as the address is left alone. No bmo runs here:
//! nothing connects anywhere.

use std::time::Duration;

use bmo::api::{BareMetalHost, DataImage};
use k8s_openapi::api::core::v1::Namespace;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::json;

use crate::support::{eventually, installed_namespace, unique_name};

/// How long an admission policy may take to be enforced after it is installed.
const POLICY_SYNC: Duration = Duration::from_secs(30);

fn host(name: &str, bmc: &str, image_url: &str) -> BareMetalHost {
    serde_json::from_value(json!({
        "apiVersion": "metal3.io/v1alpha1", "kind": "BareMetalHost",
        "metadata": {"name": name},
        "spec": {
            "online": true, "bootMACAddress": "52:54:00:aa:00:01",
            "bmc": {"address": bmc, "credentialsName": "bmc"},
            "image": {"url": image_url, "checksum": "0123456789abcdef0123456789abcdef"}
        }
    }))
    .expect("host")
}

fn dry_run() -> PostParams {
    PostParams {
        dry_run: true,
        ..Default::default()
    }
}

/// The message kube-apiserver refuses `host` with, once the policy is enforced.
async fn refusal(hosts: &Api<BareMetalHost>, host: &BareMetalHost) -> String {
    eventually("the link-local policy to refuse", POLICY_SYNC, || async {
        match hosts.create(&dry_run(), host).await {
            Err(kube::Error::Api(status)) => Ok(status.message),
            Err(other) => Err(other.to_string()),
            Ok(_) => Err("accepted".into()),
        }
    })
    .await
}

async fn exempt_namespace(client: &kube::Client) -> String {
    let name = unique_name("api-link-local-exempt");
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

#[tokio::test]
async fn admission_refuses_the_metadata_address_and_lets_loopback_and_exempt_namespaces_through() {
    let _shared = crate::support::shared();
    let (client, namespace) = installed_namespace("api-link-local").await;
    let hosts: Api<BareMetalHost> = Api::namespaced(client.clone(), &namespace);

    let metadata_bmc = host(
        "metadata-bmc",
        "169.254.169.254",
        "http://10.0.0.9/os.qcow2",
    );
    let message = refusal(&hosts, &metadata_bmc).await;
    assert!(
        message.contains("spec.bmc.address must not point at a link-local"),
        "{message}"
    );
    for (name, bmc, image, field) in [
        (
            "mapped",
            "ipmi://[::ffff:169.254.169.254]:623",
            "http://10.0.0.9/os.qcow2",
            "spec.bmc.address",
        ),
        (
            "hex",
            "redfish://0xa9.0xfe.0xa9.0xfe/redfish/v1/Systems/1",
            "http://10.0.0.9/os.qcow2",
            "spec.bmc.address",
        ),
        (
            "google",
            "redfish://metadata.google.internal/",
            "http://10.0.0.9/os.qcow2",
            "spec.bmc.address",
        ),
        (
            "image",
            "redfish://10.0.0.5/",
            "http://169.254.169.254/latest/os.qcow2",
            "spec.image.url",
        ),
        (
            "image-short",
            "redfish://10.0.0.5/",
            "http://169.254.43518/os.qcow2",
            "spec.image.url",
        ),
    ] {
        let message = refusal(&hosts, &host(name, bmc, image)).await;
        assert!(message.contains(field), "{name}: {message}");
    }

    // Loopback (the test stack's BMCs and images) passes.
    let loopback = host(
        "loopback",
        "redfish+http://127.0.0.1:8000/redfish/v1/Systems/1",
        "http://127.0.0.1:6180/os.qcow2",
    );
    hosts
        .create(&dry_run(), &loopback)
        .await
        .expect("a loopback host is accepted");

    // A namespace labelled as exempt may use link-local addresses at admission.
    let exempt = exempt_namespace(&client).await;
    Api::<BareMetalHost>::namespaced(client.clone(), &exempt)
        .create(&dry_run(), &metadata_bmc)
        .await
        .expect("an exempt namespace may name a link-local BMC");
}

#[tokio::test]
async fn admission_refuses_a_data_image_at_the_metadata_address() {
    let _shared = crate::support::shared();
    let (client, namespace) = installed_namespace("api-link-local-dataimage").await;
    let images: Api<DataImage> = Api::namespaced(client.clone(), &namespace);
    let image: DataImage = serde_json::from_value(json!({
        "apiVersion": "metal3.io/v1alpha1", "kind": "DataImage",
        "metadata": {"name": "host-1"},
        "spec": {"url": "http://[::ffff:a9fe:a9fe]/config.iso"}
    }))
    .expect("data image");
    let message = eventually("the DataImage policy to refuse", POLICY_SYNC, || async {
        match images.create(&dry_run(), &image).await {
            Err(kube::Error::Api(status)) => Ok(status.message),
            Err(other) => Err(other.to_string()),
            Ok(_) => Err("accepted".into()),
        }
    })
    .await;
    assert!(message.contains("spec.url must not point"), "{message}");
}

#[tokio::test]
async fn admission_refuses_a_firmware_update_at_the_metadata_address() {
    let _shared = crate::support::shared();
    let (client, namespace) = installed_namespace("api-link-local-firmware").await;
    let components: Api<bmo::api::HostFirmwareComponents> =
        Api::namespaced(client.clone(), &namespace);
    let object: bmo::api::HostFirmwareComponents = serde_json::from_value(json!({
        "apiVersion": "metal3.io/v1alpha1", "kind": "HostFirmwareComponents",
        "metadata": {"name": "host-1"},
        "spec": {"updates": [
            {"component": "bios", "url": "http://10.0.0.9/bios.bin"},
            {"component": "bmc", "url": "http://169.254.169.254/bmc.bin"}
        ]}
    }))
    .expect("firmware components");
    let message = eventually(
        "the HostFirmwareComponents policy to refuse",
        POLICY_SYNC,
        || async {
            match components.create(&dry_run(), &object).await {
                Err(kube::Error::Api(status)) => Ok(status.message),
                Err(other) => Err(other.to_string()),
                Ok(_) => Err("accepted".into()),
            }
        },
    )
    .await;
    assert!(
        message.contains("spec.updates[].url must not point"),
        "{message}"
    );
}

#[tokio::test]
async fn a_host_stored_with_a_link_local_address_stays_updatable_but_cannot_take_another() {
    let _shared = crate::support::shared();
    let (client, _) = installed_namespace("api-link-local-ratchet").await;
    let namespace = exempt_namespace(&client).await;
    let hosts: Api<BareMetalHost> = Api::namespaced(client.clone(), &namespace);
    // Stored while the namespace is exempt (as a host made before the policy was).
    hosts
        .create(
            &PostParams::default(),
            &host("stored", "169.254.10.5", "http://10.0.0.9/os.qcow2"),
        )
        .await
        .expect("an exempt namespace may store a link-local BMC");
    let label = bmo::api::admission::LINK_LOCAL_EXEMPTION_LABEL;
    Api::<Namespace>::all(client.clone())
        .patch(
            &namespace,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {label: null}}})),
        )
        .await
        .expect("lift the exemption");
    let probe = host("probe", "169.254.169.254", "http://10.0.0.9/os.qcow2");
    refusal(&hosts, &probe).await;

    // Updates that leave the address alone pass (finalizers, annotations, power).
    hosts
        .patch(
            "stored",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"example.com/note": "kept"}}, "spec": {"online": false}})),
        )
        .await
        .expect("an update leaving the address alone is accepted");
    // A new link-local value is refused.
    let refused = hosts
        .patch(
            "stored",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"image": {"url": "http://169.254.169.254/os.qcow2"}}})),
        )
        .await
        .expect_err("a new link-local image URL is refused");
    assert!(
        refused
            .to_string()
            .contains("spec.image.url must not point"),
        "{refused}"
    );
}
