//! Upstream's fast (out-of-band) inspection on a real machine: a host with
//! `inspectionMode: fast` on a VM behind sushy-emulator's libvirt BMC is inspected
//! through Redfish alone (Ironic's `redfish` inspect interface). `status.hardware`
//! and the HardwareData show the VM's CPUs, memory and NIC as libvirt defines them,
//! and no hostname or address: no agent booted.

use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use bmo::api::{BareMetalHost, HardwareData};
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use serde_json::{Value, json};

use crate::lab::{Lab, Vm};
use crate::support::eventually;

/// Waits until `name` is gone from `hosts`.
pub async fn until_deleted(hosts: &Api<BareMetalHost>, name: &str) {
    eventually("the host is gone", Duration::from_secs(300), || async {
        match hosts.get_opt(name).await {
            Ok(None) => Ok(()),
            Ok(Some(h)) => Err(format!("still there: {:?}", h.status)),
            Err(e) => Err(e.to_string()),
        }
    })
    .await;
}

/// Creates a fast-inspected host for `vm` (its BMC Secret `credentials`), checks
/// what inspection found against the VM's definition, then deletes the host.
pub async fn fast_inspection_reads_the_vm_through_its_bmc(
    client: &kube::Client,
    ns: &str,
    lab: &Lab,
    vm: &Vm,
    credentials: &str,
    (cpus, memory_mib): (u32, u32),
) {
    let name = "fast-inspected";
    let hosts: Api<BareMetalHost> = Api::namespaced(client.clone(), ns);
    let host: BareMetalHost = serde_json::from_value(json!({
        "apiVersion": "metal3.io/v1alpha1", "kind": "BareMetalHost",
        "metadata": {"name": name},
        "spec": {
            "bootMACAddress": vm.mac, "bootMode": "UEFI", "inspectionMode": "fast",
            "bmc": {"address": lab.redfish_address(vm), "credentialsName": credentials}
        }
    }))
    .expect("host");
    hosts
        .create(&PostParams::default(), &host)
        .await
        .expect("create the fast-inspected host");
    let states = Mutex::new(Vec::<String>::new());
    let status = eventually(
        "available by fast inspection",
        Duration::from_secs(300),
        || {
            let (hosts, states) = (&hosts, &states);
            async move {
                let host = hosts.get(name).await.map_err(|e| e.to_string())?;
                let status = serde_json::to_value(&host.status).unwrap_or_default();
                let state = status["provisioning"]["state"].as_str().unwrap_or_default();
                let mut states = states.lock().unwrap_or_else(PoisonError::into_inner);
                if states.last().map(String::as_str) != Some(state) {
                    states.push(state.to_owned());
                }
                match state {
                    "available" => Ok(status),
                    _ => Err(format!("{state}: {}", status["errorMessage"])),
                }
            }
        },
    )
    .await;
    let states = states.into_inner().unwrap_or_else(PoisonError::into_inner);
    assert!(
        states.iter().any(|s| s == "inspecting"),
        "went through inspecting: {states:?}"
    );
    let hardware = &status["hardware"];
    let data = Api::<HardwareData>::namespaced(client.clone(), ns)
        .get(name)
        .await
        .expect("the HardwareData");
    let data = serde_json::to_value(&data).unwrap_or_default();
    for (what, details) in [
        ("status.hardware", hardware),
        ("HardwareData", &data["spec"]["hardware"]),
    ] {
        assert_eq!(details["cpu"]["count"], json!(cpus), "{what}: {details}");
        assert_eq!(
            details["ramMebibytes"],
            json!(memory_mib),
            "{what}: {details}"
        );
        let nic = details["nics"]
            .as_array()
            .and_then(|nics| nics.first())
            .cloned()
            .unwrap_or(Value::Null);
        assert!(
            nic["mac"]
                .as_str()
                .is_some_and(|m| m.eq_ignore_ascii_case(&vm.mac)),
            "{what}: the VM's NIC: {details}"
        );
        assert_eq!(
            nic["ip"].as_str().unwrap_or_default(),
            "",
            "{what}: no agent, no address: {details}"
        );
        assert_eq!(
            details["hostname"].as_str().unwrap_or_default(),
            "",
            "{what}: no agent, no hostname: {details}"
        );
    }
    hosts
        .delete(name, &DeleteParams::default())
        .await
        .expect("delete the fast-inspected host");
    until_deleted(&hosts, name).await;
}
