//! The HostClaim controller end to end: `bmo run --hostclaims` against the real
//! kube-apiserver and Ironic. A claim in a tenant namespace binds a fake-hardware host
//! of another namespace that a HostDeployPolicy opens to the tenant, the host is
//! provisioned with the claim's image and user data, its state shows in the claim,
//! and deleting the claim deprovisions the host and frees it. bmo runs as a user with
//! only the rights deploy/rbac ships.

use std::path::Path;
use std::time::Duration;

use crate::support::{
    bmo_run, create_bmc_secret, eventually, fake_host, installed_namespace,
    kubeconfig_with_shipped_rbac, new_namespace, unique_mac, wait_for_state,
};
use bmo::api::{BareMetalHost, HostClaim, ProvisioningState};
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::api::{DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::GroupVersionKind;
use kube::discovery::ApiResource;
use kube::{Api, ResourceExt};
use serde::Deserialize;
use serde_json::{Value, json};

const EXAMPLE_HOSTS_NS: &str = "hosts";
const EXAMPLE_TENANT_NS: &str = "tenant-a";

/// examples/hostclaims.yaml, with its two namespaces renamed.
fn example(hosts_ns: &str, tenant_ns: &str) -> Vec<Value> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/hostclaims.yaml");
    let text = std::fs::read_to_string(path).expect("read examples/hostclaims.yaml");
    serde_norway::Deserializer::from_str(&text)
        .map(|doc| {
            let mut doc = Value::deserialize(doc).expect("example is YAML");
            let renamed = match doc["metadata"]["namespace"].as_str() {
                Some(EXAMPLE_HOSTS_NS) => hosts_ns,
                Some(EXAMPLE_TENANT_NS) => tenant_ns,
                other => panic!("unexpected namespace {other:?} in the example"),
            };
            doc["metadata"]["namespace"] = json!(renamed);
            doc
        })
        .collect()
}

/// Server-side applies one object as `kubectl apply --server-side` would.
async fn apply(client: &kube::Client, object: &Value) {
    let (group, version) = match object["apiVersion"].as_str().expect("apiVersion") {
        gv if gv.contains('/') => gv.split_once('/').expect("group/version"),
        v => ("", v),
    };
    let kind = object["kind"].as_str().expect("kind");
    let plural = match kind {
        "HostDeployPolicy" => "hostdeploypolicies".to_owned(),
        other => format!("{}s", other.to_lowercase()),
    };
    let resource =
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), &plural);
    let api: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        object["metadata"]["namespace"].as_str().expect("namespace"),
        &resource,
    );
    api.patch(
        object["metadata"]["name"].as_str().expect("name"),
        &PatchParams::apply("controller-claims-test").force(),
        &Patch::Apply(object),
    )
    .await
    .unwrap_or_else(|e| panic!("apply {kind}: {e}"));
}

/// A fake-hardware host with no image (so it ends up available) and `labels`.
async fn create_free_host(client: &kube::Client, ns: &str, name: &str, labels: Value) {
    create_bmc_secret(client, ns, &format!("{name}-bmc"), "admin", "password").await;
    let mut manifest = fake_host(name, &unique_mac());
    manifest["metadata"]["labels"] = labels;
    manifest["spec"]["online"] = json!(false);
    manifest["spec"]
        .as_object_mut()
        .expect("spec")
        .remove("image");
    let host: BareMetalHost = serde_json::from_value(manifest).expect("valid host");
    Api::<BareMetalHost>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &host)
        .await
        .expect("create host");
}

fn condition(claim: &HostClaim, type_: &str) -> Option<(String, String)> {
    claim
        .status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| (c.status.clone(), c.reason.clone()))
}

#[tokio::test]
async fn a_claim_binds_a_host_of_another_namespace_provisions_it_and_releases_it_when_deleted() {
    let _shared = crate::support::shared();
    let (client, hosts_ns) = installed_namespace("claim-hosts").await;
    let tenant_ns = new_namespace(&client, "claim-tenant").await;
    let outsider_ns = new_namespace(&client, "claim-outsider").await;
    Api::<Namespace>::all(client.clone())
        .patch(
            &tenant_ns,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"metal3.io/tenant": "true"}}})),
        )
        .await
        .expect("label the tenant namespace");
    create_free_host(
        &client,
        &hosts_ns,
        "large-0",
        json!({"hardware-class": "large"}),
    )
    .await;
    create_free_host(
        &client,
        &hosts_ns,
        "small-0",
        json!({"hardware-class": "small"}),
    )
    .await;
    // bmo holds only the rights deploy/rbac ships.
    let kubeconfig = kubeconfig_with_shipped_rbac(&client).await;
    let (bmo, _health) = bmo_run(
        &hosts_ns,
        &[
            ("KUBECONFIG", kubeconfig.to_str().expect("UTF-8 path")),
            ("BMO_HOSTCLAIMS", "true"),
            ("RUST_LOG", "info,bmo=debug"),
        ],
    );
    let hosts: Api<BareMetalHost> = Api::namespaced(client.clone(), &hosts_ns);
    for name in ["large-0", "small-0"] {
        wait_for_state(
            &hosts,
            name,
            ProvisioningState::Available,
            Duration::from_secs(180),
        )
        .await;
    }

    let objects = example(&hosts_ns, &tenant_ns);
    for object in &objects {
        apply(&client, object).await;
    }
    // The same claim from a namespace the policy does not open binds nothing.
    let mut outsider = objects
        .iter()
        .find(|o| o["kind"] == "HostClaim")
        .expect("claim")
        .clone();
    outsider["metadata"]["namespace"] = json!(outsider_ns);
    outsider["spec"]
        .as_object_mut()
        .expect("spec")
        .remove("userData");
    apply(&client, &outsider).await;

    let claims: Api<HostClaim> = Api::namespaced(client.clone(), &tenant_ns);
    let log_tail = || {
        let log = bmo.log();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(5)..].join("\n")
    };
    let claim = eventually(
        "the claim to be provisioned",
        Duration::from_secs(240),
        || async {
            let claim = claims.get("web").await.map_err(|e| e.to_string())?;
            match condition(&claim, "Ready") {
                Some((status, _)) if status == "True" => Ok(claim),
                _ => Err(format!("{:?}; log: {}", claim.status, log_tail())),
            }
        },
    )
    .await;
    let status = claim.status.clone().expect("status");
    let bound = status.bare_metal_host.expect("bound host");
    assert_eq!(
        (bound.namespace.as_str(), bound.name.as_str()),
        (hosts_ns.as_str(), "large-0")
    );
    assert_eq!(status.hardware_data.map(|r| r.name), Some("large-0".into()));
    assert!(status.last_updated.is_some());
    assert!(
        claim
            .finalizers()
            .contains(&"metal3.io/hostclaim".to_owned())
    );
    for (type_, reason) in [
        ("Associated", "BareMetalHostAssociated"),
        ("Synchronized", "ConfigurationSynced"),
        ("Provisioned", "provisioned"),
        ("Ready", "InfoReported"),
    ] {
        assert_eq!(
            condition(&claim, type_),
            Some(("True".into(), reason.into()))
        );
    }

    // The host reports power on once it booted the image; the claim follows.
    eventually(
        "the claim to show the host powered on",
        Duration::from_secs(60),
        || async {
            let claim = claims.get("web").await.map_err(|e| e.to_string())?;
            let on = claim.status.as_ref().is_some_and(|s| s.powered_on);
            on.then_some(())
                .ok_or_else(|| format!("{:?}", claim.status))
        },
    )
    .await;

    // The host runs the claim's image with the claim's user data, copied next to it.
    let host = hosts.get("large-0").await.expect("host");
    assert_eq!(host.provisioning_state(), ProvisioningState::Provisioned);
    let consumer = host.spec.consumer_ref.clone().expect("consumerRef");
    assert_eq!(consumer.kind.as_deref(), Some("HostClaim"));
    assert_eq!(consumer.name.as_deref(), Some("web"));
    assert_eq!(consumer.namespace.as_deref(), Some(tenant_ns.as_str()));
    let image = host
        .status
        .as_ref()
        .and_then(|s| s.provisioning.image.clone())
        .expect("image");
    assert_eq!(image.url, "http://images.example.com/debian-13.qcow2");
    assert_eq!(
        host.spec.user_data.as_ref().and_then(|r| r.name.as_deref()),
        Some("large-0-userdata")
    );
    let secrets_of = |ns: &str| Api::<Secret>::namespaced(client.clone(), ns);
    let original = secrets_of(&tenant_ns)
        .get("web-user-data")
        .await
        .expect("user data");
    let copy = secrets_of(&hosts_ns)
        .get("large-0-userdata")
        .await
        .expect("copy");
    assert_eq!(copy.data, original.data);
    assert!(
        hosts
            .get("small-0")
            .await
            .expect("host")
            .spec
            .consumer_ref
            .is_none()
    );

    // New user data in the tenant's Secret reaches the copy.
    secrets_of(&tenant_ns)
        .patch(
            "web-user-data",
            &PatchParams::default(),
            &Patch::Merge(json!({"stringData": {"userData": "#cloud-config\nhostname: web-2\n"}})),
        )
        .await
        .expect("change the user data");
    eventually(
        "the copy to follow the Secret",
        Duration::from_secs(30),
        || async {
            let copy = secrets_of(&hosts_ns)
                .get("large-0-userdata")
                .await
                .map_err(|e| e.to_string())?;
            let value = copy
                .data
                .as_ref()
                .and_then(|d| d.get("userData"))
                .map(|v| v.0.clone());
            (value.as_deref() == Some(b"#cloud-config\nhostname: web-2\n".as_slice()))
                .then_some(())
                .ok_or_else(|| "copy not updated yet".to_owned())
        },
    )
    .await;

    let outsider = Api::<HostClaim>::namespaced(client.clone(), &outsider_ns);
    eventually(
        "the outsider's claim to find no host",
        Duration::from_secs(30),
        || async {
            let claim = outsider.get("web").await.map_err(|e| e.to_string())?;
            match condition(&claim, "Associated") {
                Some(c) if c == ("False".into(), "NoBareMetalHost".into()) => Ok(()),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;

    // Powering off through the claim powers the host off.
    claims
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"poweredOn": false}})),
        )
        .await
        .expect("power off through the claim");
    eventually(
        "the claim to show the host off",
        Duration::from_secs(60),
        || async {
            let claim = claims.get("web").await.map_err(|e| e.to_string())?;
            let host = hosts.get("large-0").await.map_err(|e| e.to_string())?;
            let off = !host.spec.online && claim.status.as_ref().is_some_and(|s| !s.powered_on);
            off.then_some(())
                .ok_or_else(|| format!("host online {}; {:?}", host.spec.online, claim.status))
        },
    )
    .await;

    claims
        .delete("web", &DeleteParams::default())
        .await
        .expect("delete claim");
    eventually("the claim to be gone", Duration::from_secs(240), || async {
        match claims.get_opt("web").await.map_err(|e| e.to_string())? {
            None => Ok(()),
            Some(c) => Err(format!(
                "{:?}; host {}; log: {}",
                condition(&c, "Associated"),
                hosts
                    .get("large-0")
                    .await
                    .map(|h| h.provisioning_state().to_string())
                    .unwrap_or_default(),
                log_tail()
            )),
        }
    })
    .await;
    let host = hosts.get("large-0").await.expect("host");
    assert_eq!(host.provisioning_state(), ProvisioningState::Available);
    assert!(host.spec.consumer_ref.is_none(), "host released");
    assert!(host.spec.image.is_none() && host.spec.user_data.is_none());
    assert!(
        secrets_of(&hosts_ns)
            .get_opt("large-0-userdata")
            .await
            .expect("get")
            .is_none(),
        "the copy of the user data is removed"
    );
}
