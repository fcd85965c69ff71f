//! The HostFirmwareSettings controller against the real stack: BIOS settings that
//! Ironic holds for a node reach the host's HostFirmwareSettings, hosts of one model
//! share one FirmwareSchema, `spec.settings` is checked against it (conditions and
//! events), and objects upstream's operator left are adopted, not duplicated.
//!
//! sushy-emulator 2.2.0's fake driver serves no BIOS (its systems have no `Bios`
//! link; `GET /redfish/v1/Systems/{id}/BIOS` and `.../BIOS/Settings` answer 501 "Not
//! implemented") and no `/redfish/v1/UpdateService/FirmwareInventory` (404), so
//! Ironic's redfish BIOS and firmware interfaces read nothing from it. The nodes here use
//! Ironic's fake BIOS interface instead: its `apply_configuration` clean step stores
//! the settings it is given (with their registry fields) as the node's BIOS
//! settings, which `GET /v1/nodes/{id}/bios?detail=True` then returns as it would
//! from a BMC. Unlike a BMC, it keeps only the settings a step sent (name and value:
//! the others and the registry fields go), so the refused-value check runs before
//! bmo applies anything.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::support::fake_bios::{bios_values, node_with_bios};
use crate::support::{
    Stack, bmo_run, create_bmc_secret, eventually, installed_namespace, unique_mac,
};
use bmo::api::BareMetalHost;
use bmo::api::firmware::{FirmwareSchema, HostFirmwareSettings, HostUpdatePolicy, SettingSchema};
use bmo::controller::firmware::state_machine::schema_name;
use k8s_openapi::api::core::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use serde::Deserialize;
use serde_json::{Value, json};

/// Upstream's field manager (see tests/controller/controller_migration.rs).
const UPSTREAM_MANAGER: &str = "baremetal-operator";

/// The BIOS of the test's "model": an enumeration, an integer, a read-only string.
fn seeded_bios() -> Vec<Value> {
    vec![
        json!({"name": "ProcVirtualization", "value": "Disabled", "attribute_type": "Enumeration",
               "allowable_values": ["Enabled", "Disabled"], "read_only": false,
               "reset_required": true, "unique": false}),
        json!({"name": "BootOrderRetries", "value": "1", "attribute_type": "Integer",
               "lower_bound": 0, "upper_bound": 10, "read_only": false}),
        json!({"name": "AssetTag", "value": "rack-1", "attribute_type": "String",
               "min_length": 0, "max_length": 32, "read_only": true}),
    ]
}

fn seeded_values() -> BTreeMap<String, String> {
    seeded_bios()
        .iter()
        .map(|s| {
            (
                s["name"].as_str().unwrap().to_owned(),
                s["value"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

fn seeded_schema() -> BTreeMap<String, SettingSchema> {
    seeded_bios()
        .into_iter()
        .map(|mut s| {
            let name = s["name"].as_str().unwrap().to_owned();
            let o = s.as_object_mut().unwrap();
            for key in ["name", "value", "reset_required"] {
                o.remove(key);
            }
            (name, serde_json::from_value(s).unwrap())
        })
        .collect()
}

/// A fake-hardware host without an image (it stays available).
async fn create_host(client: &kube::Client, ns: &str, name: &str, mac: &str) -> BareMetalHost {
    create_bmc_secret(client, ns, &format!("{name}-bmc"), "admin", "password").await;
    let host: BareMetalHost = serde_json::from_value(json!({
        "apiVersion": "metal3.io/v1alpha1", "kind": "BareMetalHost",
        "metadata": {"name": name},
        "spec": {
            "online": false,
            "bootMACAddress": mac,
            "bmc": {"address": format!("fake://{name}"), "credentialsName": format!("{name}-bmc")},
        }
    }))
    .unwrap();
    Api::<BareMetalHost>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &host)
        .await
        .expect("create host")
}

fn upstream() -> PostParams {
    PostParams {
        field_manager: Some(UPSTREAM_MANAGER.into()),
        ..Default::default()
    }
}

fn owner(kind: &str, name: &str, uid: &str) -> OwnerReference {
    OwnerReference {
        api_version: "metal3.io/v1alpha1".into(),
        kind: kind.into(),
        name: name.into(),
        uid: uid.into(),
        ..OwnerReference::default()
    }
}

/// `(status, reason, message)` of condition `kind`, once its observed generation is
/// the object's.
fn condition(hfs: &HostFirmwareSettings, kind: &str) -> Option<(String, String, String)> {
    hfs.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == kind && c.observed_generation == hfs.metadata.generation)
        .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
}

#[tokio::test]
async fn bios_settings_reach_their_hosts_and_upstreams_objects_are_adopted() {
    let _shared = crate::support::shared();
    let (client, ns) = installed_namespace("fw").await;
    let ironic = Stack::get().ironic().await;
    let settings: Api<HostFirmwareSettings> = Api::namespaced(client.clone(), &ns);
    let schemas: Api<FirmwareSchema> = Api::namespaced(client.clone(), &ns);

    // Two hosts of one model; `b` as upstream's operator left it.
    let (mac_a, mac_b) = (unique_mac(), unique_mac());
    node_with_bios(&ironic, &ns, "a", &mac_a, seeded_bios()).await;
    node_with_bios(&ironic, &ns, "b", &mac_b, seeded_bios()).await;
    create_host(&client, &ns, "a", &mac_a).await;
    let host_b = create_host(&client, &ns, "b", &mac_b).await;
    let expected_schema = schema_name(&seeded_schema());
    let mut upstream_hfs: HostFirmwareSettings = serde_json::from_value(json!({
        "apiVersion": "metal3.io/v1alpha1", "kind": "HostFirmwareSettings",
        "metadata": {"name": "b"}, "spec": {"settings": {}}
    }))
    .unwrap();
    upstream_hfs.metadata.owner_references =
        Some(vec![owner("BareMetalHost", "b", &host_b.uid().unwrap())]);
    let mut upstream_hfs = settings
        .create(&upstream(), &upstream_hfs)
        .await
        .expect("create hfs");
    upstream_hfs.status = Some(
        serde_json::from_value(json!({
            "schema": {"name": expected_schema, "namespace": ns},
            "settings": {"ProcVirtualization": "Disabled", "RetiredSetting": "1"},
        }))
        .unwrap(),
    );
    let upstream_hfs = settings
        .replace_status("b", &upstream(), &upstream_hfs)
        .await
        .expect("status written with Update");
    let mut upstream_schema: FirmwareSchema = serde_json::from_value(json!({
        "apiVersion": "metal3.io/v1alpha1", "kind": "FirmwareSchema",
        "metadata": {"name": expected_schema},
        "spec": {"schema": seeded_schema()}
    }))
    .unwrap();
    upstream_schema.metadata.owner_references = Some(vec![owner(
        "HostFirmwareSettings",
        "b",
        &upstream_hfs.uid().unwrap(),
    )]);
    schemas
        .create(&upstream(), &upstream_schema)
        .await
        .expect("create schema");

    // Host a's HostUpdatePolicy, made before bmo starts; b's comes later.
    let policies: Api<HostUpdatePolicy> = Api::namespaced(client.clone(), &ns);
    let policy = |name: &str| -> HostUpdatePolicy {
        serde_json::from_value(json!({
            "apiVersion": "metal3.io/v1alpha1", "kind": "HostUpdatePolicy",
            "metadata": {"name": name}, "spec": {"firmwareSettings": "onReboot"}
        }))
        .unwrap()
    };
    policies
        .create(&PostParams::default(), &policy("a"))
        .await
        .expect("create policy a");

    let bmo = bmo_run(&ns, &[("RUST_LOG", "info,bmo=debug")]).0;

    // Both hosts' settings are read from Ironic; `b`'s object is the same one.
    for name in ["a", "b"] {
        let hfs = eventually(
            &format!("HostFirmwareSettings {name} to hold the node's BIOS"),
            Duration::from_secs(120),
            || async {
                let hfs = settings
                    .get_opt(name)
                    .await
                    .map_err(|e| e.to_string())?
                    .ok_or("none yet")?;
                let status = hfs.status.clone().unwrap_or_default();
                if status.settings == seeded_values() {
                    Ok(hfs)
                } else {
                    Err(format!(
                        "{:?}; log tail: {:?}",
                        status.settings,
                        bmo.log().lines().rev().take(3).collect::<Vec<_>>()
                    ))
                }
            },
        )
        .await;
        let status = hfs.status.clone().unwrap();
        assert_eq!(
            status.firmware_schema.map(|s| s.name),
            Some(expected_schema.clone())
        );
        assert!(status.last_updated.is_some());
        assert_eq!(
            condition(&hfs, "Valid").map(|c| c.0).as_deref(),
            Some("True")
        );
        assert_eq!(
            condition(&hfs, "ChangeDetected").map(|c| c.0).as_deref(),
            Some("False")
        );
        let host = Api::<BareMetalHost>::namespaced(client.clone(), &ns)
            .get(name)
            .await
            .unwrap();
        assert_eq!(
            hfs.owner_references()
                .iter()
                .map(|o| o.uid.clone())
                .collect::<Vec<_>>(),
            vec![host.uid().unwrap()],
            "owned by its host, once"
        );
    }

    // Each host's HostUpdatePolicy gets the host among its owners (as upstream), so
    // it goes with the host; a policy made once the host is at rest (nothing wakes
    // the firmware controller for it but the policy) is owned too.
    let hosts: Api<BareMetalHost> = Api::namespaced(client.clone(), &ns);
    crate::support::wait_for_state(
        &hosts,
        "b",
        bmo::api::ProvisioningState::Available,
        Duration::from_secs(60),
    )
    .await;
    policies
        .create(&PostParams::default(), &policy("b"))
        .await
        .expect("create policy b");
    for name in ["a", "b"] {
        let host_uid = hosts.get(name).await.unwrap().uid().unwrap();
        let owned = eventually(
            &format!("HostUpdatePolicy {name} to be owned by its host"),
            Duration::from_secs(30),
            || async {
                let policy = policies.get(name).await.map_err(|e| e.to_string())?;
                let owners: Vec<(String, String)> = policy
                    .owner_references()
                    .iter()
                    .map(|o| (o.kind.clone(), o.uid.clone()))
                    .collect();
                if owners == [("BareMetalHost".to_owned(), host_uid.clone())] {
                    Ok(policy)
                } else {
                    Err(format!("owners {owners:?}"))
                }
            },
        )
        .await;
        assert_eq!(owned.spec, policy(name).spec, "the spec is the user's");
    }

    let adopted = settings.get("b").await.unwrap();
    assert_eq!(
        adopted.uid(),
        upstream_hfs.uid(),
        "upstream's object kept, not replaced"
    );
    let status_managers: Vec<(String, String)> = adopted
        .managed_fields()
        .iter()
        .filter(|e| e.subresource.as_deref() == Some("status"))
        .map(|e| {
            (
                e.manager.clone().unwrap_or_default(),
                e.operation.clone().unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(status_managers, [("bmo".to_owned(), "Apply".to_owned())]);

    // One schema for both, upstream's, now owned by both settings objects.
    let all = schemas.list(&ListParams::default()).await.unwrap().items;
    assert_eq!(
        all.len(),
        1,
        "one schema: {:?}",
        all.iter().map(|s| s.name_any()).collect::<Vec<_>>()
    );
    assert_eq!(all[0].name_any(), expected_schema);
    let a_uid = settings.get("a").await.unwrap().uid().unwrap();
    let mut owners: Vec<String> = all[0]
        .owner_references()
        .iter()
        .map(|o| o.uid.clone())
        .collect();
    owners.sort();
    let mut expected_owners = vec![a_uid, upstream_hfs.uid().unwrap()];
    expected_owners.sort();
    assert_eq!(owners, expected_owners);

    eventually(
        "host a to be available",
        Duration::from_secs(60),
        || async {
            let h = hosts.get("a").await.map_err(|e| e.to_string())?;
            match h.provisioning_state() {
                bmo::api::ProvisioningState::Available => Ok(()),
                other => Err(other.to_string()),
            }
        },
    )
    .await;

    // A value the schema refuses: Valid=False and an event naming the setting and
    // the values it accepts.
    settings
        .patch(
            "a",
            &PatchParams::apply("kubectl").force(),
            &Patch::Apply(json!({
                "apiVersion": "metal3.io/v1alpha1", "kind": "HostFirmwareSettings",
                "metadata": {"name": "a"},
                "spec": {"settings": {"ProcVirtualization": "Sideways", "BootOrderRetries": 3}}
            })),
        )
        .await
        .expect("apply a bad value");
    eventually(
        "the bad value to be refused",
        Duration::from_secs(60),
        || async {
            let hfs = settings.get("a").await.map_err(|e| e.to_string())?;
            match condition(&hfs, "Valid") {
                Some((s, r, m)) if s == "False" => {
                    assert_eq!(
                        (r.as_str(), m.as_str()),
                        ("ConfigurationError", "Invalid BIOS setting")
                    );
                    Ok(())
                }
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
    let events: Api<Event> = Api::namespaced(client.clone(), &ns);
    let event = eventually(
        "the ValidationFailed event",
        Duration::from_secs(30),
        || async {
            let list = events
                .list(&ListParams::default())
                .await
                .map_err(|e| e.to_string())?;
            list.items
                .into_iter()
                .find(|e| e.reason.as_deref() == Some("ValidationFailed"))
                .ok_or_else(|| "none yet".to_owned())
        },
    )
    .await;
    assert_eq!(
        event.involved_object.kind.as_deref(),
        Some("HostFirmwareSettings")
    );
    assert_eq!(event.involved_object.name.as_deref(), Some("a"));
    assert_eq!(
        event.message.as_deref(),
        Some(
            "Invalid BIOS setting: Setting ProcVirtualization is invalid, unknown enumeration value - Sideways (allowed values: Enabled, Disabled)"
        )
    );
    assert_eq!(
        event.source.and_then(|s| s.component).as_deref(),
        Some("metal3-hostfirmwaresettings-controller")
    );
    assert_eq!(
        event.reporting_component.as_deref(),
        Some("metal3.io/hostfirmwaresettings-controller")
    );

    // The documented example (docs/api.md, examples/upstream-kinds.yaml), applied
    // to host a: a valid change (it replaces the refused one).
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/upstream-kinds.yaml");
    let text = std::fs::read_to_string(path).unwrap();
    let mut example = serde_norway::Deserializer::from_str(&text)
        .map(|doc| Value::deserialize(doc).unwrap())
        .find(|doc| doc["kind"] == "HostFirmwareSettings")
        .expect("the example has a HostFirmwareSettings");
    assert_eq!(
        example["spec"]["settings"],
        json!({"ProcVirtualization": "Enabled", "BootOrderRetries": 3})
    );
    example["metadata"]["name"] = json!("a");
    settings
        .patch(
            "a",
            &PatchParams::apply("kubectl").force(),
            &Patch::Apply(&example),
        )
        .await
        .expect("apply the example");
    // A valid change prepares the available host again: Ironic runs the BIOS clean
    // step, and the settings read back are the wanted ones.
    let hfs = eventually(
        "the example's settings to be applied and read back",
        Duration::from_secs(180),
        || async {
            let hfs = settings.get("a").await.map_err(|e| e.to_string())?;
            let status = hfs.status.clone().unwrap_or_default();
            let applied = status
                .settings
                .get("ProcVirtualization")
                .map(String::as_str)
                == Some("Enabled")
                && status.settings.get("BootOrderRetries").map(String::as_str) == Some("3");
            match condition(&hfs, "ChangeDetected") {
                Some(c) if applied && c.0 == "False" => Ok(hfs),
                other => Err(format!("{:?} {other:?}", status.settings)),
            }
        },
    )
    .await;
    assert_eq!(
        condition(&hfs, "Valid").map(|c| c.0).as_deref(),
        Some("True")
    );
    let in_ironic = bios_values(&ironic, &ns, "a").await;
    assert_eq!(
        in_ironic.get("ProcVirtualization").map(String::as_str),
        Some("Enabled")
    );
    assert_eq!(
        in_ironic.get("BootOrderRetries").map(String::as_str),
        Some("3")
    );
    // Ironic's fake BIOS interface keeps only what the step sent (a real BMC keeps
    // every setting): the node's schema is now another one, and bmo names it anew.
    let schema_now = hfs.status.as_ref().and_then(|s| s.firmware_schema.clone());
    assert_ne!(schema_now.map(|s| s.name), Some(expected_schema.clone()));
    eventually(
        "host a to be available again",
        Duration::from_secs(60),
        || async {
            let h = hosts.get("a").await.map_err(|e| e.to_string())?;
            match h.provisioning_state() {
                bmo::api::ProvisioningState::Available => Ok(()),
                other => Err(other.to_string()),
            }
        },
    )
    .await;
    // The host went through preparing for it (its event says why).
    let preparing = events
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.involved_object.name.as_deref() == Some("a"))
        .filter_map(|e| e.message)
        .any(|m| m.contains("BIOS settings changed"));
    assert!(preparing, "host a was prepared again for the BIOS change");

    drop(bmo);
}
