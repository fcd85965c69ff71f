//! The BareMetalHost and HardwareData APIs against the real kube-apiserver of the test
//! stack: bmo's CRDs and admission policies accept every example host (docs/ and
//! tests/fixtures/hosts/valid), reject every invalid one with a message naming the
//! field, guard DELETE, and store status written through the status subresource.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use bmo::api::{
    BareMetalHost, BareMetalHostStatus, HardwareData, OperationalStatus, ProvisioningState,
};
use k8s_openapi::api::core::v1::Namespace;
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::support::{Stack, eventually, installed_namespace, unique_name};

const FIELD_MANAGER: &str = "bmo-api-tests";
/// How long an admission policy may take to be enforced after it is installed.
const POLICY_SYNC: Duration = Duration::from_secs(30);

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The YAML documents of a file (or of a markdown code block).
fn documents(text: &str, origin: &str) -> Vec<Value> {
    serde_norway::Deserializer::from_str(text)
        .map(|doc| Value::deserialize(doc).unwrap_or_else(|e| panic!("{origin}: not YAML: {e}")))
        .filter(|doc| !doc.is_null())
        .collect()
}

fn yaml_files(dir: &str) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(repo().join(dir))
        .unwrap_or_else(|e| panic!("read {dir}: {e}"))
        .map(|entry| entry.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    files
}

fn api_for(client: &kube::Client, namespace: &str, object: &Value) -> Api<DynamicObject> {
    let api_version = object["apiVersion"].as_str().expect("apiVersion");
    let kind = object["kind"].as_str().expect("kind");
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let plural = match kind {
        "BareMetalHost" => "baremetalhosts",
        "HardwareData" => "hardwaredata",
        "Secret" => "secrets",
        other => panic!("no API for {other} in these tests"),
    };
    let resource =
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural);
    Api::namespaced_with(client.clone(), namespace, &resource)
}

/// Server-side apply, as `kubectl apply --server-side` does.
async fn apply(
    client: &kube::Client,
    namespace: &str,
    object: &Value,
    dry_run: bool,
) -> Result<(), kube::Error> {
    let name = object["metadata"]["name"].as_str().expect("metadata.name");
    let mut params = PatchParams::apply(FIELD_MANAGER).force();
    params.dry_run = dry_run;
    api_for(client, namespace, object)
        .patch(name, &params, &Patch::Apply(object))
        .await
        .map(drop)
}

#[tokio::test]
async fn every_example_host_applies_and_reads_back() {
    let _shared = crate::support::shared();
    let (client, _) = installed_namespace("api-valid").await;
    let mut examples: Vec<(String, Vec<Value>)> = Vec::new();
    for file in yaml_files("tests/fixtures/hosts/valid") {
        let text = std::fs::read_to_string(&file).expect("read fixture");
        let origin = file.display().to_string();
        examples.push((origin.clone(), documents(&text, &origin)));
    }
    for (origin, text) in doc_examples() {
        examples.push((origin.clone(), documents(&text, &origin)));
    }
    let hosts_in_docs = examples
        .iter()
        .filter(|(origin, docs)| origin.contains("docs/") && docs.iter().any(is_host))
        .count();
    assert!(
        hosts_in_docs >= 3,
        "docs/ should show example hosts; found {hosts_in_docs}"
    );

    let mut failures = Vec::new();
    let mut hosts = 0;
    for (origin, docs) in &examples {
        // One namespace per example: they reuse names.
        let namespace = unique_name("api-example");
        let namespaces: Api<Namespace> = Api::all(client.clone());
        let mut ns = Namespace::default();
        ns.metadata.name = Some(namespace.clone());
        namespaces
            .create(&PostParams::default(), &ns)
            .await
            .expect("create namespace");
        // Other kinds (a Deployment in a deployment guide, say) are not this test's.
        for doc in docs.iter().filter(|d| {
            matches!(
                d["kind"].as_str(),
                Some("BareMetalHost" | "HardwareData" | "Secret")
            )
        }) {
            let name = doc["metadata"]["name"].as_str().unwrap_or("?").to_owned();
            // Examples that name their namespace (the HostClaim one spans two) go
            // into this example's namespace like the rest.
            let mut doc = doc.clone();
            if let Some(metadata) = doc["metadata"].as_object_mut() {
                metadata.remove("namespace");
            }
            let doc = &doc;
            if let Err(e) = apply(&client, &namespace, doc, false).await {
                failures.push(format!("{origin}: {name}: {e}"));
                continue;
            }
            match doc["kind"].as_str() {
                Some("BareMetalHost") => {
                    hosts += 1;
                    let api: Api<BareMetalHost> = Api::namespaced(client.clone(), &namespace);
                    if let Err(e) = api.get(&name).await {
                        failures.push(format!("{origin}: {name}: read back as BareMetalHost: {e}"));
                    }
                }
                Some("HardwareData") => {
                    let api: Api<HardwareData> = Api::namespaced(client.clone(), &namespace);
                    match api.get(&name).await {
                        Ok(read) => {
                            let sent: HardwareData =
                                serde_json::from_value(doc.clone()).expect("fixture parses");
                            if read.spec != sent.spec {
                                failures.push(format!("{origin}: {name}: spec changed on the way"));
                            }
                        }
                        Err(e) => failures.push(format!("{origin}: {name}: read back: {e}")),
                    }
                }
                _ => {}
            }
        }
    }
    assert!(
        failures.is_empty(),
        "rejected examples:\n{}",
        failures.join("\n")
    );
    assert!(
        hosts >= 40,
        "expected the examples to hold at least 40 hosts, got {hosts}"
    );
}

fn is_host(doc: &Value) -> bool {
    doc["kind"] == "BareMetalHost"
}

/// Every ```yaml block of docs/*.md that holds Kubernetes objects.
fn doc_examples() -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut files: Vec<PathBuf> = std::fs::read_dir(repo().join("docs"))
        .expect("read docs/")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    files.sort();
    for file in files {
        let text = std::fs::read_to_string(&file).expect("read doc");
        let mut block: Option<(usize, String)> = None;
        for (number, line) in text.lines().enumerate() {
            match &mut block {
                None if line.trim_start().starts_with("```yaml") => {
                    block = Some((number + 1, String::new()));
                }
                Some((start, body)) if line.trim_start().starts_with("```") => {
                    if body.contains("apiVersion:") {
                        out.push((format!("{}:{start}", file.display()), std::mem::take(body)));
                    }
                    block = None;
                }
                Some((_, body)) => {
                    body.push_str(line);
                    body.push('\n');
                }
                None => {}
            }
        }
    }
    out
}

struct InvalidCase {
    file: PathBuf,
    expect: Vec<String>,
    docs: Vec<Value>,
}

fn invalid_cases() -> Vec<InvalidCase> {
    yaml_files("tests/fixtures/hosts/invalid")
        .into_iter()
        .map(|file| {
            let text = std::fs::read_to_string(&file).expect("read fixture");
            let expect: Vec<String> = text
                .lines()
                .filter_map(|l| l.strip_prefix("# expect: "))
                .map(str::to_owned)
                .collect();
            assert!(
                !expect.is_empty(),
                "{} has no `# expect:` line",
                file.display()
            );
            let docs = documents(&text, &file.display().to_string());
            assert!(!docs.is_empty(), "{} has no document", file.display());
            InvalidCase { file, expect, docs }
        })
        .collect()
}

#[tokio::test]
async fn every_invalid_host_is_rejected_naming_the_field() {
    let _shared = crate::support::shared();
    let (client, namespace) = installed_namespace("api-invalid").await;
    let cases = invalid_cases();
    assert!(cases.len() >= 25, "only {} invalid fixtures", cases.len());

    let mut failures = Vec::new();
    let mut messages = Vec::new();
    for case in &cases {
        let origin = case.file.display().to_string();
        let (last, setup_docs) = case.docs.split_last().expect("documents");
        for doc in setup_docs {
            if let Err(e) = apply(&client, &namespace, doc, false).await {
                failures.push(format!("{origin}: the setup document was refused: {e}"));
            }
        }
        // Dry runs until refused: a freshly installed admission policy takes a moment.
        let refused = tokio::time::timeout(POLICY_SYNC, async {
            loop {
                if apply(&client, &namespace, last, true).await.is_err() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        })
        .await;
        if refused.is_err() {
            failures.push(format!("{origin}: accepted, expected a rejection"));
            continue;
        }
        match apply(&client, &namespace, last, false).await {
            Ok(()) => failures.push(format!("{origin}: accepted, expected a rejection")),
            Err(kube::Error::Api(status)) => {
                let missing: Vec<&String> = case
                    .expect
                    .iter()
                    .filter(|e| !status.message.contains(e.as_str()))
                    .collect();
                if !missing.is_empty() {
                    failures.push(format!(
                        "{origin}: message lacks {missing:?}: {}",
                        status.message
                    ));
                }
                if status.code != 422 && status.code != 403 {
                    failures.push(format!(
                        "{origin}: HTTP {} ({})",
                        status.code, status.message
                    ));
                }
                messages.push(status.message);
            }
            Err(other) => failures.push(format!("{origin}: {other}")),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));

    // Every rule bmo ships is shown to fire by some fixture.
    let mut unexercised: BTreeSet<String> = bmo::api::crd::baremetalhost_rules()
        .into_iter()
        .map(|r| r.message.to_owned())
        .collect();
    for policy in bmo::api::admission::policies() {
        let name = policy.policy.metadata.name.as_deref();
        if name == Some(bmo::api::admission::REFERENCES_POLICY)
            || name == Some(bmo::api::admission::LINK_LOCAL_POLICY)
        {
            for v in policy
                .policy
                .spec
                .and_then(|s| s.validations)
                .unwrap_or_default()
            {
                unexercised.extend(v.message);
            }
        }
    }
    unexercised.retain(|rule| !messages.iter().any(|m| m.contains(rule.as_str())));
    assert!(
        unexercised.is_empty(),
        "rules no invalid fixture triggers:\n{}",
        unexercised.into_iter().collect::<Vec<_>>().join("\n")
    );
}

fn host(name: &str, extra: Value) -> Value {
    let mut host = json!({
        "apiVersion": "metal3.io/v1alpha1",
        "kind": "BareMetalHost",
        "metadata": {"name": name},
        "spec": {
            "online": true,
            "bootMACAddress": "52:54:00:aa:00:01",
            "bmc": {"address": "redfish://10.0.30.1/redfish/v1/Systems/1", "credentialsName": "bmc"},
        },
    });
    merge(&mut host, extra);
    host
}

fn merge(into: &mut Value, from: Value) {
    match (into, from) {
        (Value::Object(into), Value::Object(from)) => {
            for (key, value) in from {
                merge(into.entry(key).or_insert(Value::Null), value);
            }
        }
        (into, from) => *into = from,
    }
}

#[tokio::test]
async fn deleting_a_consumed_host_needs_the_override_annotation() {
    let _shared = crate::support::shared();
    let (client, namespace) = installed_namespace("api-delete").await;
    let hosts: Api<BareMetalHost> = Api::namespaced(client.clone(), &namespace);
    let consumed = host(
        "consumed",
        json!({"spec": {"consumerRef": {"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1",
                                        "kind": "Metal3Machine", "name": "worker-7"}}}),
    );
    apply(&client, &namespace, &consumed, false)
        .await
        .expect("create consumed host");
    let free = host("free", json!({}));
    apply(&client, &namespace, &free, false)
        .await
        .expect("create free host");

    let dry = DeleteParams {
        dry_run: true,
        ..Default::default()
    };
    let refusal = eventually("the delete guard to refuse", POLICY_SYNC, || async {
        match hosts.delete("consumed", &dry).await {
            Err(kube::Error::Api(status)) => Ok(status),
            Err(other) => Err(other.to_string()),
            Ok(_) => Err("dry-run delete accepted".into()),
        }
    })
    .await;
    assert_eq!(refusal.code, 403, "{refusal:?}");
    for expected in [
        "spec.consumerRef",
        "Metal3Machine worker-7",
        bmo::api::host::ALLOW_DELETE_WHILE_CONSUMED_ANNOTATION,
    ] {
        assert!(refusal.message.contains(expected), "{}", refusal.message);
    }
    // A real delete is refused too, and the host stays.
    assert!(
        hosts
            .delete("consumed", &DeleteParams::default())
            .await
            .is_err()
    );
    assert!(hosts.get_opt("consumed").await.expect("get").is_some());

    // The guard only concerns consumed hosts.
    hosts
        .delete("free", &DeleteParams::default())
        .await
        .expect("a host without consumerRef deletes");

    // The copy `clusterctl move` deletes (it lives on in the target) goes through.
    let moved = bmo::api::host::DELETE_FOR_MOVE_ANNOTATION;
    for value in [json!(""), Value::Null] {
        let patch = json!({"metadata": {"annotations": {moved: value}}});
        hosts
            .patch("consumed", &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .expect("annotate");
        if !value.is_null() {
            hosts
                .delete("consumed", &dry)
                .await
                .expect("a host deleted for a move may go");
        }
    }

    // The wrong value of the override does not count; "true" does.
    for (value, allowed) in [("yes", false), ("true", true)] {
        let patch = json!({"metadata": {"annotations": {
            bmo::api::host::ALLOW_DELETE_WHILE_CONSUMED_ANNOTATION: value}}});
        hosts
            .patch("consumed", &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .expect("annotate");
        let result = hosts.delete("consumed", &DeleteParams::default()).await;
        assert_eq!(result.is_ok(), allowed, "override {value:?}: {result:?}");
    }
    assert!(hosts.get_opt("consumed").await.expect("get").is_none());
}

fn full_host_fixture() -> Value {
    let path = repo().join("tests/fixtures/hosts/full-host.json");
    let text = std::fs::read_to_string(&path).expect("read full-host.json");
    serde_json::from_str(&text).expect("full-host.json is JSON")
}

#[tokio::test]
async fn status_written_through_the_subresource_round_trips_field_for_field() {
    let _shared = crate::support::shared();
    let (client, namespace) = installed_namespace("api-status").await;
    let hosts: Api<BareMetalHost> = Api::namespaced(client.clone(), &namespace);
    let mut fixture = full_host_fixture();
    // Secret references must point into the host's own namespace.
    for field in ["userData", "networkData", "metaData"] {
        fixture["spec"][field]["namespace"] = json!(namespace);
    }
    let mut without_status = fixture.clone();
    without_status
        .as_object_mut()
        .expect("object")
        .remove("status");
    apply(&client, &namespace, &without_status, false)
        .await
        .expect("create the fully populated host");

    // Status sent on the main resource is ignored (status subresource is enabled).
    let created = hosts.get("full-host").await.expect("get");
    assert!(created.status.is_none(), "{:?}", created.status);
    assert_eq!(
        serde_json::to_value(&created.spec).expect("spec to JSON"),
        fixture["spec"],
        "spec changed on the way through the API server"
    );

    let status: BareMetalHostStatus =
        serde_json::from_value(fixture["status"].clone()).expect("fixture status parses");
    let patch = json!({"status": status});
    hosts
        .patch_status("full-host", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("write status through the status subresource");
    let read = hosts.get("full-host").await.expect("get");
    let read_status = read.status.clone().expect("status is stored");
    assert_eq!(read_status, status);
    assert_eq!(
        serde_json::to_value(&read_status).expect("status to JSON"),
        fixture["status"]
    );
    assert_eq!(
        read.spec, created.spec,
        "writing status must not touch spec"
    );

    // The status schema is enforced too.
    let bad = json!({"status": {"operationalStatus": "broken"}});
    let err = hosts
        .patch_status("full-host", &PatchParams::default(), &Patch::Merge(&bad))
        .await
        .expect_err("an unknown operationalStatus is refused");
    assert!(
        err.to_string().contains("status.operationalStatus"),
        "{err}"
    );
}

#[tokio::test]
async fn allowed_transitions_are_not_refused() {
    let _shared = crate::support::shared();
    let (client, namespace) = installed_namespace("api-transitions").await;
    let hosts: Api<BareMetalHost> = Api::namespaced(client.clone(), &namespace);
    let set_state = |state: ProvisioningState| {
        let status = BareMetalHostStatus {
            operational_status: OperationalStatus::Ok,
            provisioning: bmo::api::ProvisionStatus {
                state,
                id: "5b4e4c4a-52c1-4bfb-8b0b-34c3a8bc6d3e".into(),
                ..Default::default()
            },
            ..Default::default()
        };
        json!({"status": status})
    };

    // bootMACAddress: same MAC in another case is no change.
    apply(&client, &namespace, &host("mac-case", json!({})), false)
        .await
        .expect("create");
    apply(
        &client,
        &namespace,
        &host(
            "mac-case",
            json!({"spec": {"bootMACAddress": "52:54:00:AA:00:01"}}),
        ),
        false,
    )
    .await
    .expect("upper-casing the boot MAC is allowed");

    // bmc.address may change while registering.
    apply(&client, &namespace, &host("re-address", json!({})), false)
        .await
        .expect("create");
    hosts
        .patch_status(
            "re-address",
            &PatchParams::default(),
            &Patch::Merge(&set_state(ProvisioningState::Registering)),
        )
        .await
        .expect("status registering");
    let moved = json!({"spec": {"bmc": {"address": "redfish://10.0.30.2/redfish/v1/Systems/1"}}});
    apply(&client, &namespace, &host("re-address", moved), false)
        .await
        .expect("bmc.address may change while registering");

    // externallyProvisioned may be turned on while available.
    apply(&client, &namespace, &host("adopt", json!({})), false)
        .await
        .expect("create");
    hosts
        .patch_status(
            "adopt",
            &PatchParams::default(),
            &Patch::Merge(&set_state(ProvisioningState::Available)),
        )
        .await
        .expect("status available");
    let adopt = json!({"spec": {"externallyProvisioned": true}});
    apply(&client, &namespace, &host("adopt", adopt), false)
        .await
        .expect("externallyProvisioned may be turned on while available");
    let read = hosts.get("adopt").await.expect("get");
    assert!(read.spec.externally_provisioned);
    assert_eq!(read.provisioning_state(), ProvisioningState::Available);
}

#[tokio::test]
async fn a_host_without_spec_is_accepted_updated_and_deleted() {
    let _shared = crate::support::shared();
    let (client, namespace) = installed_namespace("api-no-spec").await;
    let hosts: Api<BareMetalHost> = Api::namespaced(client.clone(), &namespace);
    let discovered = json!({
        "apiVersion": "metal3.io/v1alpha1",
        "kind": "BareMetalHost",
        "metadata": {"name": "demo-discovered"},
    });
    apply(&client, &namespace, &discovered, false)
        .await
        .expect("upstream's demo-discovered host (no spec) is accepted");
    let read = hosts.get("demo-discovered").await.expect("read back");
    assert_eq!(read.spec, bmo::api::BareMetalHostSpec::default());

    // The transition rules and admission policies read spec; none may trip on its absence.
    let labelled = json!({"metadata": {"labels": {"example.com/rack": "r1"}}});
    hosts
        .patch(
            "demo-discovered",
            &PatchParams::default(),
            &Patch::Merge(&labelled),
        )
        .await
        .expect("a label can be added to a host without spec");
    let status = BareMetalHostStatus {
        operational_status: OperationalStatus::Discovered,
        ..Default::default()
    };
    hosts
        .patch_status(
            "demo-discovered",
            &PatchParams::default(),
            &Patch::Merge(&json!({"status": status})),
        )
        .await
        .expect("status can be written to a host without spec");
    hosts
        .delete("demo-discovered", &DeleteParams::default())
        .await
        .expect("a host without spec can be deleted");
}

#[tokio::test]
async fn nulls_as_go_clients_write_them_are_accepted() {
    let _shared = crate::support::shared();
    let (client, namespace) = installed_namespace("api-nulls").await;
    let hosts: Api<BareMetalHost> = Api::namespaced(client.clone(), &namespace);
    let with_nulls = host(
        "go-client",
        json!({"spec": {"raid": {"hardwareRAIDVolumes": null, "softwareRAIDVolumes": null}}}),
    );
    apply(&client, &namespace, &with_nulls, false)
        .await
        .expect("null RAID lists are accepted");
    // Status as upstream's controller writes it: zero times are null, empty structs {}.
    let status = json!({"status": {
        "operationalStatus": "discovered",
        "provisioning": {"state": "registering", "ID": "", "image": {"url": ""},
                         "raid": {"hardwareRAIDVolumes": null, "softwareRAIDVolumes": null}},
        "goodCredentials": {}, "triedCredentials": {},
        "errorMessage": "", "poweredOn": false,
        "operationHistory": {"register": {"start": "2026-12-01T10:00:00Z", "end": null},
                             "inspect": {"start": null, "end": null},
                             "provision": {"start": null, "end": null},
                             "deprovision": {"start": null, "end": null}},
        "errorCount": 0, "provisioningFailCount": 0,
    }});
    hosts
        .patch_status("go-client", &PatchParams::default(), &Patch::Merge(&status))
        .await
        .expect("Go-style status is accepted");
    let read = hosts.get("go-client").await.expect("get");
    let status = read.status.expect("status");
    assert_eq!(status.provisioning.state, ProvisioningState::Registering);
    let register = status
        .operation_history
        .and_then(|h| h.register)
        .expect("register metric");
    assert!(register.start.is_some() && register.end.is_none());
}

/// `kubectl` of the stack, with the stack's admin kubeconfig.
fn kubectl(args: &[&str]) -> String {
    let stack = Stack::get();
    let mut command = std::process::Command::new("kubectl");
    if let Some(path) = stack.var("PATH") {
        command.env("PATH", path);
    }
    let output = command
        .env("KUBECONFIG", &stack.kubeconfig)
        .args(args)
        .output()
        .expect("run kubectl (the stack puts it on PATH)");
    assert!(
        output.status.success(),
        "kubectl {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).expect("UTF-8")
}

fn columns(line: &str) -> Vec<String> {
    // Columns are separated by two or more spaces; values may contain one.
    line.split("  ")
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .map(str::to_owned)
        .collect()
}

#[tokio::test]
async fn kubectl_shows_upstream_columns_under_the_short_names() {
    let _shared = crate::support::shared();
    let (client, namespace) = installed_namespace("api-kubectl").await;
    let hosts: Api<BareMetalHost> = Api::namespaced(client.clone(), &namespace);
    let consumed = host(
        "worker-9",
        json!({"spec": {"consumerRef": {"kind": "Metal3Machine", "name": "machine-9"}}}),
    );
    apply(&client, &namespace, &consumed, false)
        .await
        .expect("create host");
    let status = json!({"status": {
        "operationalStatus": "error", "errorType": "provisioning error",
        "errorMessage": "image write failed", "poweredOn": true,
        "provisioning": {"state": "provisioning", "ID": "5b4e4c4a-52c1-4bfb-8b0b-34c3a8bc6d3e"},
        "errorCount": 1, "provisioningFailCount": 1,
    }});
    hosts
        .patch_status("worker-9", &PatchParams::default(), &Patch::Merge(&status))
        .await
        .expect("write status");

    let table = kubectl(&["get", "bmh", "-n", &namespace]);
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(
        columns(lines[0]),
        ["NAME", "STATE", "CONSUMER", "ONLINE", "ERROR", "AGE"],
        "{table}"
    );
    assert_eq!(
        columns(lines[1])[..5],
        [
            "worker-9",
            "provisioning",
            "machine-9",
            "true",
            "provisioning error"
        ],
        "{table}"
    );

    let wide = kubectl(&["get", "bmhost", "-n", &namespace, "-o", "wide"]);
    let header = columns(wide.lines().next().expect("header"));
    assert_eq!(
        header,
        [
            "NAME", "STATUS", "STATE", "CONSUMER", "BMC", "ONLINE", "ERROR", "AGE"
        ],
        "{wide}"
    );
    assert!(
        wide.contains("redfish://10.0.30.1/redfish/v1/Systems/1"),
        "{wide}"
    );

    let data = json!({"apiVersion": "metal3.io/v1alpha1", "kind": "HardwareData",
                      "metadata": {"name": "worker-9"},
                      "spec": {"hardware": {"hostname": "worker-9", "ramMebibytes": 8192}}});
    apply(&client, &namespace, &data, false)
        .await
        .expect("create HardwareData");
    let hd = kubectl(&["get", "hd", "-n", &namespace]);
    assert_eq!(
        columns(hd.lines().next().expect("header")),
        ["NAME", "AGE"],
        "{hd}"
    );
    assert!(hd.contains("worker-9"), "{hd}");
}
