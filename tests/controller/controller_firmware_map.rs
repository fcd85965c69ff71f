//! `spec.firmware` against the real stack: the three switches reach the BIOS under
//! the vendor's own names while the host prepares, the host's HostFirmwareSettings
//! then shows them, and what bmo cannot apply (an unknown vendor, a setting that
//! HostFirmwareSettings names too) fails preparing with a message naming the host,
//! the field and the fix.
//!
//! The hosts are fake-hardware ones whose vendor comes from the
//! `inspect.metal3.io/hardwaredetails` annotation (inspection disabled), and whose BIOS
//! is Ironic's fake BIOS interface (tests/support/fake_bios.rs).

use std::collections::BTreeMap;
use std::time::Duration;

use crate::support::fake_bios::{bios_values, node_with_bios};
use crate::support::{
    Stack, bmo_run, create_bmc_secret, eventually, installed_namespace, unique_mac, wait_for_state,
};
use bmo::api::firmware::HostFirmwareSettings;
use bmo::api::{BareMetalHost, ErrorType, ProvisioningState};
use k8s_openapi::api::core::v1::Event;
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

/// A Dell's BIOS before bmo touches it.
fn dell_bios() -> Vec<Value> {
    let switch = |name: &str, value: &str| {
        json!({"name": name, "value": value, "attribute_type": "Enumeration",
               "allowable_values": ["Enabled", "Disabled"], "read_only": false})
    };
    vec![
        switch("ProcVirtualization", "Disabled"),
        switch("LogicalProc", "Enabled"),
        switch("SriovGlobalEnable", "Disabled"),
    ]
}

/// A fake-hardware host whose inspected manufacturer is `manufacturer`, with
/// `firmware` as its spec.firmware; it has no image, so it rests available.
async fn create_host(
    client: &kube::Client,
    ns: &str,
    name: &str,
    mac: &str,
    manufacturer: &str,
    firmware: Value,
) {
    create_bmc_secret(client, ns, &format!("{name}-bmc"), "admin", "password").await;
    let details = json!({"systemVendor": {"manufacturer": manufacturer, "productName": "R650"},
                         "ramMebibytes": 4096});
    let host: BareMetalHost = serde_json::from_value(json!({
        "apiVersion": "metal3.io/v1alpha1", "kind": "BareMetalHost",
        "metadata": {"name": name, "annotations": {
            "inspect.metal3.io": "disabled",
            "inspect.metal3.io/hardwaredetails": details.to_string(),
        }},
        "spec": {
            "online": false,
            "bootMACAddress": mac,
            "bmc": {"address": format!("fake://{name}"), "credentialsName": format!("{name}-bmc")},
            "firmware": firmware,
        }
    }))
    .unwrap();
    Api::<BareMetalHost>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &host)
        .await
        .expect("create host");
}

/// The host's preparation error message, once it has one containing `part`.
async fn preparation_error(hosts: &Api<BareMetalHost>, name: &str, part: &str) -> String {
    eventually(
        &format!("{name} to fail preparing over {part}"),
        Duration::from_secs(120),
        || async {
            let h = hosts.get(name).await.map_err(|e| e.to_string())?;
            let st = h.status.clone().unwrap_or_default();
            if st.error_type == Some(ErrorType::Preparation) && st.error_message.contains(part) {
                assert_eq!(h.provisioning_state(), ProvisioningState::Preparing);
                Ok(st.error_message)
            } else {
                Err(format!(
                    "{} {:?} {:?}",
                    h.provisioning_state(),
                    st.error_type,
                    st.error_message
                ))
            }
        },
    )
    .await
}

/// The Warning event of `reason` on host `name` with exactly `message`.
async fn warning_event(events: &Api<Event>, name: &str, reason: &str, message: &str) {
    eventually(
        &format!("a {reason} event on {name}"),
        Duration::from_secs(30),
        || async {
            let list = events
                .list(&ListParams::default())
                .await
                .map_err(|e| e.to_string())?;
            let seen: Vec<(Option<String>, Option<String>)> = list
                .items
                .into_iter()
                .filter(|e| e.involved_object.name.as_deref() == Some(name))
                .filter(|e| e.reason.as_deref() == Some(reason))
                .map(|e| (e.type_, e.message))
                .collect();
            if seen.contains(&(Some("Warning".into()), Some(message.into()))) {
                Ok(())
            } else {
                Err(format!("{seen:?}"))
            }
        },
    )
    .await;
}

#[tokio::test]
async fn spec_firmware_reaches_a_dell_bios_under_dells_names() {
    let _shared = crate::support::shared();
    let (client, ns) = installed_namespace("fwmap").await;
    let ironic = Stack::get().ironic().await;
    let hosts: Api<BareMetalHost> = Api::namespaced(client.clone(), &ns);
    let settings: Api<HostFirmwareSettings> = Api::namespaced(client.clone(), &ns);
    let events: Api<Event> = Api::namespaced(client.clone(), &ns);

    let wanted = json!({"virtualizationEnabled": true,
                        "simultaneousMultithreadingEnabled": false,
                        "sriovEnabled": true});
    let dell_names: BTreeMap<String, String> = [
        ("ProcVirtualization", "Enabled"),
        ("LogicalProc", "Disabled"),
        ("SriovGlobalEnable", "Enabled"),
    ]
    .into_iter()
    .map(|(n, v)| (n.to_owned(), v.to_owned()))
    .collect();
    let mac = unique_mac();
    node_with_bios(&ironic, &ns, "dell", &mac, dell_bios()).await;
    create_host(&client, &ns, "dell", &mac, "Dell Inc.", wanted.clone()).await;
    // A vendor bmo knows no names for; bmo enrols its node itself.
    create_host(
        &client,
        &ns,
        "acme",
        &unique_mac(),
        "Acme Computing",
        wanted.clone(),
    )
    .await;

    let bmo = bmo_run(&ns, &[("RUST_LOG", "info,bmo=debug")]).0;

    // The Dell prepares with its BIOS set the Dell way, and is available.
    let host = wait_for_state(
        &hosts,
        "dell",
        ProvisioningState::Available,
        Duration::from_secs(180),
    )
    .await;
    assert_eq!(bios_values(&ironic, &ns, "dell").await, dell_names);
    assert_eq!(
        host.status.and_then(|s| s.provisioning.firmware),
        host.spec.firmware,
        "what preparing applied is recorded"
    );
    // The BIOS is read back into the host's HostFirmwareSettings.
    eventually(
        "HostFirmwareSettings dell to show the Dell names",
        Duration::from_secs(60),
        || async {
            let hfs = settings.get("dell").await.map_err(|e| e.to_string())?;
            let now = hfs.status.map(|s| s.settings).unwrap_or_default();
            if now == dell_names {
                Ok(())
            } else {
                Err(format!(
                    "{now:?}; log tail: {:?}",
                    bmo.log().lines().rev().take(3).collect::<Vec<_>>()
                ))
            }
        },
    )
    .await;

    // The unknown vendor: preparing fails, naming host, field and fix, once.
    let message = preparation_error(&hosts, "acme", "vendor is unknown").await;
    assert_eq!(
        message,
        format!(
            "host {ns}/acme: spec.firmware cannot be mapped to BIOS settings: the vendor is \
             unknown (BMC driver fake, inspected manufacturer \"Acme Computing\"; bmo knows \
             Dell's and HPE's names); remove spec.firmware and set the BIOS's own setting \
             names in the host's HostFirmwareSettings spec.settings"
        )
    );
    warning_event(&events, "acme", "PreparationError", &message).await;
    // The fix the message names: without spec.firmware the host prepares.
    hosts
        .patch(
            "acme",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"firmware": null}})),
        )
        .await
        .expect("remove spec.firmware");
    let acme = wait_for_state(
        &hosts,
        "acme",
        ProvisioningState::Available,
        Duration::from_secs(120),
    )
    .await;
    let st = acme.status.unwrap_or_default();
    assert_eq!((st.error_type, st.error_message.as_str()), (None, ""));

    // HostFirmwareSettings naming a setting spec.firmware sets too: an error, not a
    // silent winner, and the BIOS keeps what it has.
    settings
        .patch(
            "dell",
            &PatchParams::apply("kubectl").force(),
            &Patch::Apply(json!({
                "apiVersion": "metal3.io/v1alpha1", "kind": "HostFirmwareSettings",
                "metadata": {"name": "dell"},
                "spec": {"settings": {"LogicalProc": "Enabled"}}
            })),
        )
        .await
        .expect("apply HostFirmwareSettings");
    let message = preparation_error(&hosts, "dell", "LogicalProc").await;
    assert_eq!(
        message,
        format!(
            "host {ns}/dell: spec.firmware.simultaneousMultithreadingEnabled sets the BIOS \
             setting LogicalProc, which HostFirmwareSettings {ns}/dell spec.settings sets too; \
             remove it from one of them"
        )
    );
    warning_event(&events, "dell", "PreparationError", &message).await;
    assert_eq!(bios_values(&ironic, &ns, "dell").await, dell_names);

    drop(bmo);
}
