//! The Rust types carry every field of the API: a fully populated host and
//! HardwareData survive JSON -> Rust -> JSON unchanged, the host fixture really does
//! use every field of the schema, and JSON as upstream's Go client writes it parses.

use std::collections::BTreeSet;
use std::path::Path;

use bmo::api::{BareMetalHost, HardwareData, ProvisioningState};
use serde_json::{Value, json};

fn fixture(path: &str) -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    if path.extension().is_some_and(|e| e == "json") {
        serde_json::from_str(&text).expect("JSON fixture")
    } else {
        serde_norway::from_str(&text).expect("YAML fixture")
    }
}

#[test]
fn fully_populated_host_round_trips_unchanged() {
    let _shared = crate::support::shared();
    let original = fixture("tests/fixtures/hosts/full-host.json");
    let host: BareMetalHost = serde_json::from_value(original.clone()).expect("parses");
    assert_eq!(
        host.provisioning_state(),
        ProvisioningState::ExternallyProvisioned
    );
    assert_eq!(host.namespaced_name(), "/full-host");
    let back = serde_json::to_value(&host).expect("serializes");
    assert_eq!(back, original);
}

#[test]
fn fully_populated_hardware_data_round_trips_unchanged() {
    let _shared = crate::support::shared();
    let original = fixture("tests/fixtures/hosts/valid/hardwaredata.yaml");
    let data: HardwareData = serde_json::from_value(original.clone()).expect("parses");
    let back = serde_json::to_value(&data).expect("serializes");
    assert_eq!(back, original);
}

/// Every property path of a schema, `[]` marking list items.
fn schema_paths(schema: &Value, prefix: &str, out: &mut BTreeSet<String>) {
    if let Some(properties) = schema.get("properties").and_then(Value::as_object) {
        for (name, property) in properties {
            let path = if prefix.is_empty() {
                name.clone()
            } else {
                format!("{prefix}.{name}")
            };
            out.insert(path.clone());
            schema_paths(property, &path, out);
        }
    }
    if let Some(items) = schema.get("items") {
        schema_paths(items, &format!("{prefix}[]"), out);
    }
}

fn value_paths(value: &Value, prefix: &str, out: &mut BTreeSet<String>) {
    match value {
        Value::Object(map) => {
            for (name, v) in map {
                let path = if prefix.is_empty() {
                    name.clone()
                } else {
                    format!("{prefix}.{name}")
                };
                out.insert(path.clone());
                value_paths(v, &path, out);
            }
        }
        Value::Array(items) => items
            .iter()
            .for_each(|v| value_paths(v, &format!("{prefix}[]"), out)),
        _ => {}
    }
}

#[test]
fn the_full_host_fixture_uses_every_schema_field() {
    let _shared = crate::support::shared();
    let crd = serde_json::to_value(bmo::api::crd::baremetalhost_crd().expect("crd")).expect("json");
    let schema = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"];
    let mut wanted = BTreeSet::new();
    schema_paths(&schema["properties"]["spec"], "spec", &mut wanted);
    schema_paths(&schema["properties"]["status"], "status", &mut wanted);
    let mut present = BTreeSet::new();
    value_paths(
        &fixture("tests/fixtures/hosts/full-host.json"),
        "",
        &mut present,
    );
    // Fields a valid host cannot hold together; each is exercised in its twin place.
    let exempt = [
        "spec.inlineUserData",                          // exclusive with spec.userData
        "spec.raid.softwareRAIDVolumes",                // exclusive with hardware; status has it
        "status.provisioning.raid.hardwareRAIDVolumes", // spec has it
    ];
    let missing: Vec<&String> = wanted
        .iter()
        .filter(|p| !present.contains(*p))
        .filter(|p| !exempt.iter().any(|e| p.starts_with(e)))
        .collect();
    assert!(missing.is_empty(), "full-host.json lacks {missing:?}");
}

#[test]
fn json_as_upstream_go_clients_write_it_parses() {
    let _shared = crate::support::shared();
    // Go serializes nil slices as null, zero times as null, non-pointer structs as
    // empty objects, and some empty strings.
    let go = json!({
        "apiVersion": "metal3.io/v1alpha1",
        "kind": "BareMetalHost",
        "metadata": {"name": "worker-1", "namespace": "metal3", "creationTimestamp": null},
        "spec": {
            "bmc": {"address": "", "credentialsName": ""},
            "online": false,
            "raid": {"hardwareRAIDVolumes": null, "softwareRAIDVolumes": null},
            "automatedCleaningMode": "metadata",
        },
        "status": {
            "operationalStatus": "",
            "provisioning": {"state": "", "ID": "", "image": {"url": ""}},
            "goodCredentials": {},
            "triedCredentials": {},
            "errorMessage": "",
            "poweredOn": false,
            "operationHistory": {
                "register": {"start": null, "end": null},
                "inspect": {"start": null, "end": null},
                "provision": {"start": null, "end": null},
                "deprovision": {"start": null, "end": null}
            },
            "errorCount": 0,
            "provisioningFailCount": 0
        }
    });
    let host: BareMetalHost = serde_json::from_value(go).expect("Go-style JSON parses");
    assert!(!host.has_bmc_details());
    let raid = host.spec.raid.expect("raid");
    assert_eq!(raid.hardware_raid_volumes, None);
    let status = host.status.expect("status");
    assert_eq!(status.provisioning.state, ProvisioningState::None);
    assert_eq!(
        status
            .operation_history
            .and_then(|h| h.register)
            .and_then(|m| m.start),
        None
    );
}

#[test]
fn unknown_enum_values_are_refused_by_the_types_too() {
    let _shared = crate::support::shared();
    let bad = json!({
        "apiVersion": "metal3.io/v1alpha1", "kind": "BareMetalHost",
        "metadata": {"name": "x"},
        "spec": {"online": true, "bootMode": "bios"}
    });
    let err = serde_json::from_value::<BareMetalHost>(bad).expect_err("bios is no boot mode");
    assert!(err.to_string().contains("bios"), "{err}");
}
