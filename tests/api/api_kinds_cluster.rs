//! Upstream's eleven kinds beyond BareMetalHost and HardwareData against the real
//! kube-apiserver of the test stack: every CRD installs, the example of each kind
//! (examples/upstream-kinds.yaml, the same as docs/api.md shows) applies and reads back into
//! bmo's Rust type, `kubectl get` answers to each upstream short name, and every CEL
//! rule and admission policy that stands in for upstream's webhooks refuses a bad
//! object, naming the field.

use std::fmt::Debug;
use std::path::Path;
use std::time::Duration;

use bmo::api::{
    BMCEventSubscription, BareMetalSwitch, DataImage, FirmwareSchema, HostClaim, HostDeployPolicy,
    HostFirmwareComponents, HostFirmwareSettings, HostNetworkAttachment, HostUpdatePolicy,
    PreprovisioningImage,
};
use kube::api::{Patch, PatchParams};
use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
use kube::{Api, Resource};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::support::{Stack, eventually, installed_namespace};

const FIELD_MANAGER: &str = "bmo-kinds-tests";
/// How long an admission policy may take to be enforced after it is installed.
const POLICY_SYNC: Duration = Duration::from_secs(30);

fn examples() -> Vec<Value> {
    examples_in("examples/upstream-kinds.yaml")
}

/// The objects of the example file `path` (from the repository root).
fn examples_in(path: &str) -> Vec<Value> {
    let full = Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
    let text = std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("read {path}: {e}"));
    serde_norway::Deserializer::from_str(&text)
        .map(|doc| Value::deserialize(doc).unwrap_or_else(|e| panic!("{path} is not YAML: {e}")))
        .filter(|doc| !doc.is_null())
        .collect()
}

fn example(kind: &str) -> Value {
    examples()
        .into_iter()
        .find(|doc| doc["kind"] == kind)
        .unwrap_or_else(|| panic!("examples/upstream-kinds.yaml has no {kind}"))
}

fn api_for(client: &kube::Client, namespace: &str, kind: &str) -> Api<DynamicObject> {
    let found = bmo::api::kinds::kinds()
        .into_iter()
        .find(|k| k.kind == kind)
        .unwrap_or_else(|| panic!("{kind} is not one of the eleven kinds"));
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("metal3.io", "v1alpha1", kind),
        found.plural,
    );
    Api::namespaced_with(client.clone(), namespace, &resource)
}

/// Server-side apply (as `kubectl apply --server-side`); the API server's answer.
async fn apply(client: &kube::Client, namespace: &str, object: &Value) -> Result<(), String> {
    let kind = object["kind"].as_str().expect("kind");
    let name = object["metadata"]["name"].as_str().expect("metadata.name");
    api_for(client, namespace, kind)
        .patch(
            name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(object),
        )
        .await
        .map(drop)
        .map_err(|e| e.to_string())
}

/// Reads the object back as bmo's type `K` and checks its spec is what was sent (with
/// the defaults applied on both sides).
async fn reads_back<K>(client: &kube::Client, namespace: &str, sent: &Value)
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + Debug
        + DeserializeOwned
        + Serialize,
{
    let name = sent["metadata"]["name"].as_str().expect("name");
    let api: Api<K> = Api::namespaced(client.clone(), namespace);
    let read = api
        .get(name)
        .await
        .unwrap_or_else(|e| panic!("{name}: read back as {}: {e}", K::kind(&())));
    let expected: K = serde_json::from_value(sent.clone()).expect("example parses as bmo's type");
    assert_eq!(
        serde_json::to_value(&read).unwrap()["spec"],
        serde_json::to_value(&expected).unwrap()["spec"],
        "{name}: the {} spec changed on the way through kube-apiserver",
        K::kind(&())
    );
}

#[tokio::test]
async fn every_kind_installs_applies_its_example_and_answers_to_its_short_names() {
    let _shared = crate::support::shared();
    let (client, namespace) = installed_namespace("api-kinds").await;
    let examples = examples();
    let kinds: Vec<&str> = examples.iter().filter_map(|d| d["kind"].as_str()).collect();
    let mut all: Vec<&str> = bmo::api::kinds::kinds().iter().map(|k| k.kind).collect();
    all.sort_unstable();
    let mut sorted = kinds.clone();
    sorted.sort_unstable();
    assert_eq!(sorted, all, "one example per kind");

    for doc in &examples {
        apply(&client, &namespace, doc)
            .await
            .unwrap_or_else(|e| panic!("{} refused: {e}", doc["kind"]));
    }
    for doc in &examples {
        match doc["kind"].as_str().unwrap() {
            "HostFirmwareSettings" => {
                reads_back::<HostFirmwareSettings>(&client, &namespace, doc).await;
            }
            "FirmwareSchema" => reads_back::<FirmwareSchema>(&client, &namespace, doc).await,
            "HostFirmwareComponents" => {
                reads_back::<HostFirmwareComponents>(&client, &namespace, doc).await;
            }
            "HostUpdatePolicy" => reads_back::<HostUpdatePolicy>(&client, &namespace, doc).await,
            "DataImage" => reads_back::<DataImage>(&client, &namespace, doc).await,
            "PreprovisioningImage" => {
                reads_back::<PreprovisioningImage>(&client, &namespace, doc).await;
            }
            "BMCEventSubscription" => {
                reads_back::<BMCEventSubscription>(&client, &namespace, doc).await;
            }
            "HostClaim" => reads_back::<HostClaim>(&client, &namespace, doc).await,
            "HostDeployPolicy" => reads_back::<HostDeployPolicy>(&client, &namespace, doc).await,
            "BareMetalSwitch" => reads_back::<BareMetalSwitch>(&client, &namespace, doc).await,
            "HostNetworkAttachment" => {
                reads_back::<HostNetworkAttachment>(&client, &namespace, doc).await;
            }
            other => panic!("unexpected kind {other}"),
        }
    }
    // The defaults upstream's schema declares are applied by the API server.
    let switch = api_for(&client, &namespace, "BareMetalSwitch")
        .get("tor-12")
        .await
        .expect("get switch");
    assert_eq!(switch.data["spec"]["driver"], "generic-switch");

    // Upstream's short names, through kubectl's discovery.
    let kubeconfig = &Stack::get().kubeconfig;
    for (short, name) in [
        ("hfs", "worker-0"),
        ("ppimg", "worker-0"),
        ("bes", "worker-0-events"),
        ("bmcevent", "worker-0-events"),
        ("bms", "tor-12"),
    ] {
        let output = std::process::Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args(["get", short, "-n", &namespace, "-o", "name"])
            .output()
            .expect("run kubectl (tests/env/stack puts it on PATH)");
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success() && stdout.lines().any(|l| l.ends_with(&format!("/{name}"))),
            "kubectl get {short}: {stdout} {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
}

/// `example` with the JSON merge patch `change` applied (`null` removes a field).
fn changed(example: &Value, change: Value) -> Value {
    let mut doc = example.clone();
    json_patch::merge(&mut doc, &change);
    doc
}

#[tokio::test]
async fn every_cel_rule_refuses_a_bad_object_naming_the_field() {
    let _shared = crate::support::shared();
    let (client, namespace) = installed_namespace("api-kinds-cel").await;
    let image = example("DataImage");
    let firmware = example("HostFirmwareComponents");
    let events = example("BMCEventSubscription");
    let claim = example("HostClaim");
    let attachment = example("HostNetworkAttachment");
    let expression = |key: &str, operator: &str, values: Value| {
        json!({"spec": {"hostSelector": {"matchExpressions": [
            {"key": key, "operator": operator, "values": values}]}}})
    };
    let cases: Vec<(Value, &str)> = vec![
        // DataImage: upstream's two URL checks, and its refusal of an empty URL.
        (
            changed(&image, json!({"spec": {"url": "images.example.com/x.iso"}})),
            "spec.url must be an absolute URL",
        ),
        (
            changed(&image, json!({"spec": {"url": "file:///srv/x.iso"}})),
            "spec.url must use the scheme http, https, ftp, gopher or oci",
        ),
        (
            changed(&image, json!({"spec": null})),
            "spec.url is required",
        ),
        // HostFirmwareComponents.
        (
            changed(
                &firmware,
                json!({"spec": {"updates": [{"component": "bios", "url": "not a url"}]}}),
            ),
            "spec.updates[].url must be an absolute URL",
        ),
        (
            changed(
                &firmware,
                json!({"spec": {"updates": [{"component": "bmc", "url": "file:///fw.bin"}]}}),
            ),
            "spec.updates[].url must use the scheme",
        ),
        // BMCEventSubscription (the update check is below).
        (
            changed(&events, json!({"spec": {"hostName": null}})),
            "spec.hostName is required",
        ),
        (
            changed(&events, json!({"spec": {"destination": ""}})),
            "spec.destination is required",
        ),
        (
            changed(
                &events,
                json!({"spec": {"destination": "events.example.com"}}),
            ),
            "spec.destination must be an absolute URL",
        ),
        (
            changed(
                &events,
                json!({"spec": {"destination": "https://events.example.com"}}),
            ),
            "spec.destination needs a path",
        ),
        // HostClaim: the label selector (an admission policy) and the image.
        (
            changed(
                &claim,
                json!({"spec": {"hostSelector": {"matchLabels": {"bad key!": "x"}}}}),
            ),
            "spec.hostSelector.matchLabels: every key must be a label key",
        ),
        (
            changed(
                &claim,
                json!({"spec": {"hostSelector": {"matchLabels": {"rack": "not valid!"}}}}),
            ),
            "spec.hostSelector.matchLabels: every value must be a label value",
        ),
        (
            changed(&claim, expression("bad key!", "exists", json!([]))),
            "spec.hostSelector.matchExpressions[].key must be a label key",
        ),
        (
            changed(&claim, expression("rack", "gt", json!(["1"]))),
            "spec.hostSelector.matchExpressions[].operator must be one of",
        ),
        (
            changed(&claim, expression("rack", "=", json!(["a", "b"]))),
            "values must hold exactly one value",
        ),
        (
            changed(&claim, expression("rack", "notin", json!([]))),
            "values must hold at least one value",
        ),
        (
            changed(&claim, expression("rack", "exists", json!(["a"]))),
            "values must be empty for the operators exists and !",
        ),
        (
            changed(
                &claim,
                expression("rack", "in", json!(["no spaces allowed"])),
            ),
            "spec.hostSelector.matchExpressions[].values: every value must be a label value",
        ),
        (
            changed(
                &claim,
                json!({"spec": {"image": {"url": "file:///x.qcow2"}}}),
            ),
            "spec.image.url must be an absolute URL with scheme",
        ),
        (
            changed(&claim, json!({"spec": {"image": {"checksum": null}}})),
            "spec.image.checksum is required",
        ),
        (
            changed(
                &claim,
                json!({"spec": {"image": {"url": "oci://registry.example.com/os:1", "format": null}}}),
            ),
            "spec.image.checksum must be empty for oci:// images",
        ),
        // HostNetworkAttachment.
        (
            changed(&attachment, json!({"spec": {"mode": "access"}})),
            "spec.allowedVLANs must be empty in access mode",
        ),
        (
            changed(&attachment, json!({"spec": {"allowedVLANs": ["4095"]}})),
            "spec.allowedVLANs[]: VLAN IDs must be between 1 and 4094",
        ),
        (
            changed(&attachment, json!({"spec": {"allowedVLANs": ["10-5000"]}})),
            "spec.allowedVLANs[]: VLAN IDs must be between 1 and 4094",
        ),
        (
            changed(&attachment, json!({"spec": {"allowedVLANs": ["310-300"]}})),
            "spec.allowedVLANs[]: a range start-end needs start below end",
        ),
    ];
    for (number, (doc, expected)) in cases.iter().enumerate() {
        let mut doc = doc.clone();
        doc["metadata"]["name"] = json!(format!("bad-{number}"));
        // CRD rules answer at once; a new admission policy may take a moment to be
        // enforced (and the object then exists, so the retry is an update).
        eventually(
            &format!("case {number} to be refused with {expected:?}"),
            POLICY_SYNC,
            || async {
                match apply(&client, &namespace, &doc).await {
                    Ok(()) => Err("accepted".to_owned()),
                    Err(e) if e.contains(expected) => Ok(()),
                    Err(e) => Err(e),
                }
            },
        )
        .await;
    }

    // The policies are enforced by now, and they let the valid examples through.
    apply(&client, &namespace, &claim)
        .await
        .expect("the example HostClaim passes the selector policy");

    // A BMCEventSubscription cannot change once created.
    apply(&client, &namespace, &events)
        .await
        .expect("the example subscription passes the header Secret policy");
    let error = apply(
        &client,
        &namespace,
        &changed(&events, json!({"spec": {"context": "rack-13"}})),
    )
    .await
    .expect_err("changing a subscription must be refused");
    assert!(
        error.contains("spec cannot be changed once the BMCEventSubscription exists"),
        "{error}"
    );
}

/// The objects of the eleven kinds in docs/api.md's ```yaml blocks.
fn objects_in_api_docs() -> Vec<Value> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/api.md");
    let text = std::fs::read_to_string(&path).expect("read docs/api.md");
    let kinds: Vec<&str> = bmo::api::kinds::kinds().iter().map(|k| k.kind).collect();
    let mut objects = Vec::new();
    let mut block: Option<String> = None;
    for line in text.lines() {
        match &mut block {
            None if line.starts_with("```yaml") => block = Some(String::new()),
            Some(body) if line.starts_with("```") => {
                for doc in serde_norway::Deserializer::from_str(body) {
                    let doc = Value::deserialize(doc).expect("docs/api.md block is YAML");
                    if doc["kind"].as_str().is_some_and(|k| kinds.contains(&k)) {
                        objects.push(doc);
                    }
                }
                block = None;
            }
            Some(body) => {
                body.push_str(line);
                body.push('\n');
            }
            None => {}
        }
    }
    objects
}

#[test]
fn api_docs_show_exactly_the_examples_the_tests_apply() {
    let _shared = crate::support::shared();
    let by_kind = |mut objects: Vec<Value>| {
        objects.sort_by_key(|o| o["kind"].as_str().unwrap_or_default().to_owned());
        objects
    };
    // The HostClaim controller's section shows examples/hostclaims.yaml (applied by
    // tests/controller/controller_claims.rs); its Secret is not one of the eleven kinds.
    let kinds: Vec<&str> = bmo::api::kinds::kinds().iter().map(|k| k.kind).collect();
    let mut applied = examples();
    applied.extend(
        examples_in("examples/hostclaims.yaml")
            .into_iter()
            .filter(|o| o["kind"].as_str().is_some_and(|k| kinds.contains(&k))),
    );
    assert_eq!(
        by_kind(objects_in_api_docs()),
        by_kind(applied),
        "docs/api.md must show the objects of examples/upstream-kinds.yaml and examples/hostclaims.yaml"
    );
}
