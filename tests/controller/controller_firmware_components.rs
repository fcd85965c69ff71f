//! The HostFirmwareComponents controller against the real stack: the firmware
//! versions Ironic read from the BMC reach the host's HostFirmwareComponents,
//! `spec.updates` is checked (condition and event for an unknown component), a valid
//! update is flashed by Ironic's firmware `update` clean step while the host
//! prepares, and an object upstream's operator left is adopted, not duplicated.
//!
//! What each peer gives here:
//! - sushy-emulator 2.2.0's fake driver (the stack's Redfish BMCs) serves the
//!   Manager's `FirmwareVersion` ("1.00") but no `BiosVersion` (its systems have no
//!   firmware versions: `get_versions` is "Not implemented"). Ironic's redfish
//!   firmware interface caches what it finds when the node is verified, so a Redfish
//!   host shows one component, `bmc`.
//! - sushy-emulator's `UpdateService.SimpleUpdate` refuses Manager targets (400,
//!   "Manager is not currently a supported Target.") and, on the fake driver, System
//!   targets too (500, "Failed fetching BIOS information"); it has no
//!   `UpdateService/FirmwareInventory` (404). Ironic's redfish `update` clean step
//!   also needs the agent ramdisk (`requires_ramdisk=True`), which needs a machine.
//!   So updates run on a fake-hardware host: Ironic's fake firmware interface runs
//!   the `update` clean step with the settings bmo sends (and flashes nothing, and
//!   caches no components). Ironic's node history records each cleaning with its
//!   steps, which shows what bmo asked for.

use std::time::Duration;

use crate::support::{
    Stack, bmo_run, create_bmc_secret, eventually, installed_namespace, unique_mac,
};
use bmo::api::firmware::{FirmwareUpdate, HostFirmwareComponents};
use bmo::api::{BareMetalHost, ProvisioningState};
use k8s_openapi::api::core::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use serde::Deserialize;
use serde_json::{Value, json};

/// Upstream's field manager (see tests/controller/controller_migration.rs).
const UPSTREAM_MANAGER: &str = "baremetal-operator";

/// A Redfish host on the stack's first sushy-emulator system, registered and left
/// available (no inspection, no cleaning).
fn redfish_host(name: &str) -> Value {
    let stack = Stack::get();
    let emulator = stack
        .redfish_url
        .as_str()
        .trim_end_matches('/')
        .replace("http://", "");
    json!({
        "apiVersion": "metal3.io/v1alpha1", "kind": "BareMetalHost",
        "metadata": {"name": name},
        "spec": {
            "online": false,
            "bootMACAddress": unique_mac(),
            "inspectionMode": "disabled",
            "automatedCleaningMode": "disabled",
            "bmc": {
                "address": format!("redfish+http://{emulator}/redfish/v1/Systems/{}", stack.redfish_system_ids[0]),
                "credentialsName": format!("{name}-bmc")
            }
        }
    })
}

/// A fake-hardware host without an image (it stays available).
fn fake_host(name: &str) -> Value {
    json!({
        "apiVersion": "metal3.io/v1alpha1", "kind": "BareMetalHost",
        "metadata": {"name": name},
        "spec": {
            "online": false,
            "bootMACAddress": unique_mac(),
            "bmc": {"address": format!("fake://{name}"), "credentialsName": format!("{name}-bmc")},
        }
    })
}

async fn create_host(
    client: &kube::Client,
    ns: &str,
    host: Value,
    user: &str,
    pass: &str,
) -> BareMetalHost {
    let host: BareMetalHost = serde_json::from_value(host).unwrap();
    let name = host.name_any();
    create_bmc_secret(client, ns, &format!("{name}-bmc"), user, pass).await;
    Api::<BareMetalHost>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &host)
        .await
        .expect("create host")
}

/// `(status, reason, message)` of condition `kind`, once it describes the object's
/// generation.
fn condition(object: &HostFirmwareComponents, kind: &str) -> Option<(String, String, String)> {
    object
        .status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == kind && c.observed_generation == object.metadata.generation)
        .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
}

fn status_of(c: &Option<(String, String, String)>) -> Option<&str> {
    c.as_ref().map(|c| c.0.as_str())
}

async fn wait_state(hosts: &Api<BareMetalHost>, name: &str, state: ProvisioningState) {
    eventually(
        &format!("host {name} to be {state}"),
        Duration::from_secs(60),
        || async {
            let h = hosts.get(name).await.map_err(|e| e.to_string())?;
            if h.provisioning_state() == state {
                Ok(())
            } else {
                Err(h.provisioning_state().to_string())
            }
        },
    )
    .await;
}

/// The example of docs/api.md (examples/upstream-kinds.yaml), named `name`.
fn documented_example(name: &str) -> Value {
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/upstream-kinds.yaml");
    let text = std::fs::read_to_string(path).unwrap();
    let mut example = serde_norway::Deserializer::from_str(&text)
        .map(|doc| Value::deserialize(doc).unwrap())
        .find(|doc| doc["kind"] == "HostFirmwareComponents")
        .expect("the example has a HostFirmwareComponents");
    example["metadata"] = json!({"name": name});
    example
}

#[tokio::test]
async fn firmware_versions_are_shown_and_updates_are_flashed_while_preparing() {
    let _shared = crate::support::shared();
    let (client, ns) = installed_namespace("hfc").await;
    let stack = Stack::get();
    let ironic = stack.ironic().await;
    let hosts: Api<BareMetalHost> = Api::namespaced(client.clone(), &ns);
    let objects: Api<HostFirmwareComponents> = Api::namespaced(client.clone(), &ns);
    let creds = &stack.redfish_credentials;
    create_host(
        &client,
        &ns,
        redfish_host("rf"),
        &creds.username,
        creds.password.expose(),
    )
    .await;
    let fake = create_host(&client, &ns, fake_host("fk"), "admin", "password").await;
    // The fake host's object as upstream's operator left it: owned by the host,
    // status written with Update.
    let mut left: HostFirmwareComponents = serde_json::from_value(json!({
        "apiVersion": "metal3.io/v1alpha1", "kind": "HostFirmwareComponents",
        "metadata": {"name": "fk"}, "spec": {"updates": []}
    }))
    .unwrap();
    left.metadata.owner_references = Some(vec![OwnerReference {
        api_version: "metal3.io/v1alpha1".into(),
        kind: "BareMetalHost".into(),
        name: "fk".into(),
        uid: fake.uid().unwrap(),
        ..OwnerReference::default()
    }]);
    let upstream = PostParams {
        field_manager: Some(UPSTREAM_MANAGER.into()),
        ..PostParams::default()
    };
    let mut left = objects.create(&upstream, &left).await.expect("create");
    left.status = Some(
        serde_json::from_value(json!({
            "components": [{"component": "bios", "initialVersion": "0.9"}],
            "lastUpdated": "2026-01-01T00:00:00Z"
        }))
        .unwrap(),
    );
    let left = objects
        .replace_status("fk", &upstream, &left)
        .await
        .expect("status written with Update");

    let bmo = bmo_run(&ns, &[("RUST_LOG", "info,bmo=debug")]).0;
    let log_tail = || {
        bmo.log()
            .lines()
            .rev()
            .take(3)
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };

    // The Redfish host's object is made, and shows the BMC's version as Ironic read it.
    let rf = eventually(
        "HostFirmwareComponents rf to show the BMC's firmware",
        Duration::from_secs(60),
        || async {
            let o = objects
                .get_opt("rf")
                .await
                .map_err(|e| e.to_string())?
                .ok_or_else(|| format!("none yet; log tail: {:?}", log_tail()))?;
            let components = o.status.clone().unwrap_or_default().components;
            if components.iter().any(|c| c.component == "bmc") {
                Ok(o)
            } else {
                Err(format!("{components:?}"))
            }
        },
    )
    .await;
    let status = rf.status.clone().unwrap();
    let bmc = status
        .components
        .iter()
        .find(|c| c.component == "bmc")
        .unwrap();
    assert_eq!(bmc.initial_version, "1.00");
    assert_eq!(bmc.current_version.as_deref(), Some("1.00"));
    assert!(
        status.components.iter().all(|c| c.component != "bios"),
        "sushy-emulator's fake systems report no BIOS version: {:?}",
        status.components
    );
    let node = ironic.get_node(&format!("{ns}~rf")).await.unwrap().unwrap();
    let in_ironic = ironic.get_firmware(&node.uuid).await.unwrap().unwrap();
    assert_eq!(
        in_ironic
            .iter()
            .map(|c| c.component.as_str())
            .collect::<Vec<_>>(),
        status
            .components
            .iter()
            .map(|c| c.component.as_str())
            .collect::<Vec<_>>()
    );
    assert!(status.last_updated.is_some());
    assert!(status.updates.is_empty());
    assert_eq!(status_of(&condition(&rf, "Valid")), Some("True"));
    assert_eq!(status_of(&condition(&rf, "ChangeDetected")), Some("False"));
    let rf_host = hosts.get("rf").await.unwrap();
    assert_eq!(
        rf.owner_references()
            .iter()
            .map(|o| o.uid.clone())
            .collect::<Vec<_>>(),
        vec![rf_host.uid().unwrap()]
    );

    // The fake host's object is upstream's, adopted: the same object, its status
    // now bmo's (Ironic's fake firmware interface reports no components).
    let fk = eventually(
        "HostFirmwareComponents fk to be adopted",
        Duration::from_secs(60),
        || async {
            let o = objects.get("fk").await.map_err(|e| e.to_string())?;
            match condition(&o, "ChangeDetected") {
                Some(_) if o.status.as_ref().is_some_and(|s| s.components.is_empty()) => Ok(o),
                other => Err(format!("{other:?} {:?}", o.status)),
            }
        },
    )
    .await;
    assert_eq!(fk.uid(), left.uid(), "upstream's object kept, not replaced");
    assert_eq!(fk.owner_references().len(), 1, "owned by its host, once");
    let status_managers: Vec<(String, String)> = fk
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
    assert_eq!(
        objects
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .len(),
        2,
        "one object per host"
    );
    wait_state(&hosts, "fk", ProvisioningState::Available).await;

    // An unknown component: Valid=False and an event naming it and the names allowed;
    // nothing is flashed.
    objects
        .patch(
            "fk",
            &PatchParams::apply("kubectl").force(),
            &Patch::Apply(json!({
                "apiVersion": "metal3.io/v1alpha1", "kind": "HostFirmwareComponents",
                "metadata": {"name": "fk"},
                "spec": {"updates": [
                    {"component": "bios", "url": "http://127.0.0.1/fw/bios.bin"},
                    {"component": "cpld", "url": "http://127.0.0.1/fw/cpld.bin"}
                ]}
            })),
        )
        .await
        .expect("apply an unknown component");
    let refusal = "Invalid Firmware Components: component cpld is invalid, only 'bmc', 'bios', or names starting with 'nic:' are allowed as update names";
    let refused = eventually(
        "the unknown component to be refused",
        Duration::from_secs(30),
        || async {
            let o = objects.get("fk").await.map_err(|e| e.to_string())?;
            match condition(&o, "Valid") {
                Some(c) if c.0 == "False" => Ok(o),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
    assert_eq!(
        condition(&refused, "Valid"),
        Some(("False".into(), "InvalidComponent".into(), refusal.into()))
    );
    assert_eq!(
        status_of(&condition(&refused, "ChangeDetected")),
        Some("True")
    );
    let events: Api<Event> = Api::namespaced(client.clone(), &ns);
    let event = eventually(
        "the ValidationFailed event",
        Duration::from_secs(30),
        || async {
            events
                .list(&ListParams::default())
                .await
                .map_err(|e| e.to_string())?
                .items
                .into_iter()
                .find(|e| e.reason.as_deref() == Some("ValidationFailed"))
                .ok_or_else(|| "none yet".to_owned())
        },
    )
    .await;
    assert_eq!(
        event.involved_object.kind.as_deref(),
        Some("HostFirmwareComponents")
    );
    assert_eq!(event.involved_object.name.as_deref(), Some("fk"));
    assert_eq!(event.message.as_deref(), Some(refusal));
    assert_eq!(
        event.source.and_then(|s| s.component).as_deref(),
        Some("metal3-hostfirmwarecomponents-controller")
    );
    assert_eq!(
        event.reporting_component.as_deref(),
        Some("metal3.io/hostfirmwarecomponents-controller")
    );
    assert_eq!(
        hosts.get("fk").await.unwrap().provisioning_state(),
        ProvisioningState::Available,
        "a refused update prepares nothing"
    );

    // The documented example: a valid change. The host prepares again, Ironic runs
    // the firmware update clean step with it, and the status records it.
    let example = documented_example("fk");
    let wanted: Vec<FirmwareUpdate> =
        serde_json::from_value(example["spec"]["updates"].clone()).unwrap();
    assert_eq!(
        wanted
            .iter()
            .map(|u| u.component.as_str())
            .collect::<Vec<_>>(),
        ["bios", "bmc"]
    );
    objects
        .patch(
            "fk",
            &PatchParams::apply("kubectl").force(),
            &Patch::Apply(&example),
        )
        .await
        .expect("apply the example");
    let applied = eventually(
        "the example's updates to be flashed and recorded",
        Duration::from_secs(60),
        || async {
            let o = objects.get("fk").await.map_err(|e| e.to_string())?;
            let status = o.status.clone().unwrap_or_default();
            match condition(&o, "ChangeDetected") {
                Some(c) if c.0 == "False" && status.updates == wanted => Ok(o),
                other => Err(format!(
                    "{other:?} {:?}; log tail: {:?}",
                    status.updates,
                    log_tail()
                )),
            }
        },
    )
    .await;
    assert_eq!(status_of(&condition(&applied, "Valid")), Some("True"));
    let last_updated = applied.status.as_ref().and_then(|s| s.last_updated.clone());
    assert!(
        last_updated > refused.status.as_ref().and_then(|s| s.last_updated.clone()),
        "lastUpdated moved on: {last_updated:?}"
    );
    wait_state(&hosts, "fk", ProvisioningState::Available).await;
    let fk_node = ironic.get_node(&format!("{ns}~fk")).await.unwrap().unwrap();
    let history = ironic.node_history(&fk_node.uuid).await.unwrap();
    let events_text: Vec<&str> = history.iter().filter_map(|h| h["event"].as_str()).collect();
    // Ironic records the steps when a cleaning starts (they are cleared by its end).
    let started: Vec<usize> = events_text
        .iter()
        .enumerate()
        .filter(|(_, e)| {
            e.starts_with("Starting manual cleaning") && e.contains("'interface': 'firmware'")
        })
        .map(|(i, _)| i)
        .collect();
    assert_eq!(
        started.len(),
        1,
        "one cleaning with the firmware step (recording the updates keeps them from being flashed again): {events_text:?}"
    );
    let start = events_text[started[0]];
    assert!(
        start.contains("'step': 'update'") && wanted.iter().all(|u| start.contains(&u.url)),
        "the firmware update clean step with both URLs: {start}"
    );
    assert!(
        events_text[started[0]..]
            .iter()
            .any(|e| e.starts_with("Manual Cleaning completed successfully")),
        "the cleaning completed: {events_text:?}"
    );
    let preparing = events
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.involved_object.name.as_deref() == Some("fk"))
        .filter_map(|e| e.message)
        .any(|m| m.contains("firmware updates requested"));
    assert!(preparing, "host fk was prepared again for the updates");

    drop(bmo);
}
