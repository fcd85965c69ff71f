//! A real machine on an IPv6-only provisioning network: `br0` has fd77::1/64 and no
//! IPv4 address at all ([`Lab::start_ipv6`]). A UEFI qemu VM (OVMF, its IPv4 PXE off)
//! network-boots from bmo over IPv6: router advertisement with the M flag, DHCPv6
//! with the boot file URL (option 59) `tftp://[fd77::1]/snponly-x86_64.efi`, iPXE
//! over TFTP, then iPXE's own DHCPv6 and the boot script, kernel and ramdisk over
//! HTTP from bracketed URLs. The real agent (tests/env/ipa-build) takes a DHCPv6
//! lease with its host name as FQDN (option 39), heartbeats to Ironic at
//! `http://[fd77::1]:PORT`, is inspected, metadata-cleaned, deploys the UEFI test OS
//! from bmo's HTTP server over IPv6, which boots from the disk; the host is then
//! deprovisioned (cleaning boots the agent over IPv6 again) and deleted.
//!
//! The time of each phase is printed as a table (docs/performance.md quotes it). It
//! takes 5 to 7.5 minutes, so it is `#[ignore]`d: run it with `--include-ignored`.

use std::time::{Duration, Instant};

use bmo::api::{BareMetalHost, HardwareData};
use bmo::ironic::{ClientConfig, IronicClient};
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use serde_json::{Value, json};

use crate::lab::{Firmware, HTTP_PORT, Lab, Vm, VmSpec};
use crate::support::{Stack, new_namespace, unique_name};
use crate::vm_e2e::{create_secret, nic_of};
use crate::watch::{Watch, state_is, tail, wait_console};

const VM_MEMORY_MIB: u32 = 2560;
const VM_CPUS: u32 = 2;
const VM_DISK_GIB: u64 = 5;

fn host(name: &str, lab: &Lab, vm: &Vm) -> BareMetalHost {
    serde_json::from_value(json!({
        "apiVersion": "metal3.io/v1alpha1",
        "kind": "BareMetalHost",
        "metadata": {"name": name},
        "spec": {
            "online": true,
            "bootMACAddress": vm.mac,
            "bootMode": "UEFI",
            "automatedCleaningMode": "metadata",
            "bmc": {
                "address": lab.redfish_address(vm),
                "credentialsName": "vm-bmc",
                "disableCertificateVerification": true
            }
        }
    }))
    .expect("host")
}

/// The node as Ironic's API shows it (all fields, `driver_internal_info` too), read
/// inside the lab's namespace.
fn raw_node(lab: &Lab, node: &str) -> Value {
    let url = format!(
        "http://127.0.0.1:{}/v1/nodes/{node}",
        lab.ironic_port_in_ns()
    );
    let out = lab
        .ns
        .command("curl")
        .args(["-sf", "-H", "X-OpenStack-Ironic-API-Version: 1.89", &url])
        .output()
        .expect("run curl");
    assert!(out.status.success(), "read the node at {url}");
    serde_json::from_slice(&out.stdout).expect("the node is JSON")
}

/// The UEFI test OS, copied next to the agent for bmo's HTTP server; its URL (over
/// IPv6) and checksum.
fn serve_uefi_image(lab: &Lab) -> (String, String) {
    let os_dir = std::path::PathBuf::from(
        Stack::get()
            .var("BMO_TEST_OS_DIR")
            .expect("BMO_TEST_OS_DIR"),
    );
    let name = "bmo-test-os-uefi.img";
    std::fs::copy(os_dir.join(name), lab.images.join(name)).expect("copy the UEFI test OS");
    let checksum = std::fs::read_to_string(os_dir.join(format!("{name}.sha256sum")))
        .expect("checksum file")
        .split_whitespace()
        .next()
        .expect("checksum")
        .to_owned();
    (
        format!("http://{}:{HTTP_PORT}/images/{name}", lab.url_host()),
        checksum,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "5 to 7.5 minutes under TCG, past the vm binary's budget; run with --include-ignored"]
async fn vm_ipv6_uefi_boots_the_agent_over_dhcpv6_is_inspected_deployed_and_deprovisioned() {
    let _alone = crate::support::exclusive("vm_ipv6");
    let stack = Stack::get();
    let client = stack.kube_client().await;
    bmo::api::install::install(&client, Duration::from_secs(60))
        .await
        .expect("install the CRDs");
    let mut lab = Lab::start_ipv6(&[]);
    let ns = new_namespace(&client, "vm-ipv6").await;
    let _bmo = lab.start_bmo(&ns);
    let vm = lab.define_vm(VmSpec {
        name: &unique_name("bmo-vm-v6"),
        uuid: "6f1b7c2e-3d4a-4b5c-8d9e-0a1b2c3d4e06",
        mac: "52:54:00:7e:00:06",
        memory_mib: VM_MEMORY_MIB,
        cpus: VM_CPUS,
        disk_gib: VM_DISK_GIB,
        firmware: Firmware::Uefi,
    });
    lab.wait_for_bmc(&vm).await;
    let (image_url, checksum) = serve_uefi_image(&lab);
    let marker = unique_name("BMO-V6-USERDATA");
    create_secret(
        &client,
        &ns,
        "vm-bmc",
        &[("username", "admin"), ("password", "password")],
    )
    .await;
    create_secret(
        &client,
        &ns,
        "vm-user-data",
        &[("userData", &format!("#!/bin/sh\necho {marker}\n"))],
    )
    .await;

    let api: Api<BareMetalHost> = Api::namespaced(client.clone(), &ns);
    let name = "vm-v6";
    let node_name = format!("{ns}~{name}");
    let mut watch = Watch {
        api: api.clone(),
        name: name.to_owned(),
        ironic: IronicClient::connect(ClientConfig::new(lab.ironic_from_test.clone()))
            .await
            .expect("connect to the lab's Ironic"),
        node: node_name.clone(),
        lab: &lab,
        vm: &vm,
        start: Instant::now(),
        marks: Vec::new(),
    };
    api.create(&PostParams::default(), &host(name, &lab, &vm))
        .await
        .expect("create host");

    // Network boot over IPv6 to the agent, inspection.
    let st = watch
        .until(
            "available",
            Duration::from_secs(1800),
            state_is("available"),
        )
        .await;
    check_inspected_over_ipv6(&watch, &st, &client, &ns).await;
    watch.mark("inspection over IPv6 checked");

    // Deployment: metadata cleaning, then the image from bmo's HTTP server over IPv6;
    // the VM boots it from its disk and prints the user data from its config drive.
    watch
        .patch(json!({"spec": {
            "image": {"url": image_url, "checksum": checksum, "checksumType": "sha256", "format": "raw"},
            "userData": {"name": "vm-user-data"}
        }}))
        .await;
    watch
        .until(
            "provisioned",
            Duration::from_secs(1800),
            state_is("provisioned"),
        )
        .await;
    assert!(
        watch.at("ironic: clean wait", None).is_some(),
        "Ironic cleaned the node before deploying: {:?}",
        watch.marks
    );
    let user_data_line = format!("bmo-test-os: user_data: echo {marker}");
    wait_console(&vm, &lab, &user_data_line, 1, Duration::from_secs(600)).await;
    let console = vm.console();
    assert!(
        console
            .lines()
            .any(|l| l.contains("BdsDxe: starting") && l.contains("\"ironic1\" from HD(")),
        "the firmware booted the agent's UEFI boot entry:\n{}",
        tail(&console, 40)
    );
    watch.mark("deployed OS booted from disk");

    // Deprovisioning: cleaning boots the agent over IPv6 once more and erases the
    // image's partition table; then the host is available again, and deleted.
    assert_eq!(&vm.first_sector()[510..], &[0x55, 0xAA], "the image's MBR");
    watch
        .patch(json!({"spec": {"image": null, "userData": null}}))
        .await;
    watch
        .until(
            "available after deprovisioning",
            Duration::from_secs(1800),
            |s| {
                s["provisioning"]["state"] == json!("available")
                    && s["provisioning"]["image"]["url"]
                        .as_str()
                        .unwrap_or("")
                        .is_empty()
            },
        )
        .await;
    let deadline = Instant::now() + Duration::from_secs(60);
    while !vm.first_sector()[446..512].iter().all(|b| *b == 0) {
        assert!(
            Instant::now() < deadline,
            "deprovisioning's cleaning erased the image's partition table"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    api.delete(name, &DeleteParams::default())
        .await
        .expect("delete host");
    watch
        .until("the host is gone", Duration::from_secs(600), |s| {
            s["error"]
                .as_str()
                .is_some_and(|e| e.contains("NotFound") || e.contains("404"))
        })
        .await;
    watch.mark("deleted, node gone");
    print_phases(&watch);
}

/// What the first network boot and inspection must show on an IPv6-only network:
/// bmo's DHCPv6 lease under the VM's MAC, the loader over TFTP, kernel and ramdisk
/// URLs bracketed, the agent's DHCPv6 address and FQDN in status and HardwareData,
/// and its heartbeat from that address.
async fn check_inspected_over_ipv6(watch: &Watch<'_>, st: &Value, client: &kube::Client, ns: &str) {
    let (lab, vm) = (watch.lab, watch.vm);
    let hw = &st["hardware"];
    assert_eq!(hw["cpu"]["count"], json!(VM_CPUS), "CPU count: {hw}");
    assert_eq!(hw["ramMebibytes"], json!(VM_MEMORY_MIB), "memory: {hw}");
    let nic = nic_of(hw, &vm.mac);
    // The agent's dhclient -6 sent its host name as FQDN; bmo's lease table put it here.
    let expected_hostname = format!("ipa-{}", vm.mac.replace(':', ""));
    assert_eq!(
        nic["dhcpHostname"],
        json!(expected_hostname),
        "the agent's DHCPv6 FQDN: {nic}"
    );
    let agent_ip = nic["ip"].as_str().unwrap_or_default().to_owned();
    assert!(
        agent_ip.starts_with("fd77::"),
        "the DHCPv6 address on the NIC: {nic}"
    );
    let hardware_data: Api<HardwareData> = Api::namespaced(client.clone(), ns);
    let hd = serde_json::to_value(hardware_data.get(&watch.name).await.expect("HardwareData"))
        .expect("HardwareData as JSON");
    let hd_nic = nic_of(&hd["spec"]["hardware"], &vm.mac);
    assert_eq!(
        hd_nic["dhcpHostname"],
        json!(expected_hostname),
        "HardwareData: {hd}"
    );
    assert_eq!(hd_nic["ip"], json!(agent_ip), "HardwareData: {hd}");

    let leases = std::fs::read_to_string(lab.path().join("leases.json")).unwrap_or_default();
    let lease: Value = serde_json::from_str(&leases).unwrap_or(Value::Null);
    assert!(
        leases.contains(&vm.mac.to_lowercase()) && leases.contains(&agent_ip),
        "bmo's DHCPv6 lease of {agent_ip} under {}: {lease}",
        vm.mac
    );
    let log = std::fs::read_to_string(lab.path().join("bmo.log")).unwrap_or_default();
    assert!(
        log.lines()
            .any(|l| l.contains("TFTP transfer") && l.contains("snponly-x86_64.efi")),
        "bmo sent the UEFI loader over TFTP:\n{}",
        tail(&log, 40)
    );

    let node = raw_node(lab, &watch.node);
    let images = format!("http://{}:{HTTP_PORT}/images", lab.url_host());
    assert_eq!(
        node["driver_info"]["deploy_kernel"],
        json!(format!("{images}/ironic-python-agent.kernel")),
        "{node}"
    );
    // The agent heartbeats from its DHCPv6 address: Ironic's API logs the request's
    // source, and the node keeps the URL the agent gave. (The first heartbeat comes
    // after inspection ended, once the agent looked its node up again.)
    let uuid = node["uuid"].as_str().unwrap_or_default().to_owned();
    let heartbeat = format!("{agent_ip} - POST /v1/heartbeat/{uuid} - 20");
    let deadline = Instant::now() + Duration::from_secs(300);
    let agent_url = loop {
        let url = raw_node(lab, &watch.node)["driver_internal_info"]["agent_url"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        if !url.is_empty() && lab.ironic_log().contains(&heartbeat) {
            break url;
        }
        assert!(
            Instant::now() < deadline,
            "no heartbeat from the agent at {agent_ip} ({heartbeat:?}); agent_url {url:?}\n{}",
            lab.logs_tail()
        );
        tokio::time::sleep(Duration::from_secs(2)).await;
    };
    assert!(
        // https: the agent makes itself a certificate (Ironic 39, `agent_verify_ca`).
        agent_url.contains(&format!("://[{agent_ip}]:9999")),
        "the agent's URL names its IPv6 address {agent_ip}: {agent_url}"
    );
    let console = vm.console();
    for needle in [
        "ipa-ramdisk: DHCPv6 on:",
        "ipa-ramdisk: starting ironic-python-agent",
    ] {
        assert!(
            console.contains(needle),
            "the console shows {needle:?}:\n{}",
            tail(&console, 60)
        );
    }
    eprintln!("vm_ipv6: agent heartbeats from {agent_url}; its NIC: {nic}");
}

fn print_phases(w: &Watch<'_>) {
    let secs = |d: Option<Duration>| d.map_or(f64::NAN, |d| d.as_secs_f64());
    let span = |a: Option<Duration>, b: Option<Duration>| secs(b) - secs(a);
    let inspecting = w.at("host: inspecting", None);
    let inspected = w.at("host: available", inspecting);
    let provisioning = w.at("host: provisioning", inspected);
    let deploying = w.at("ironic: deploying", provisioning);
    let provisioned = w.at("host: provisioned", deploying);
    let booted = w.at("deployed OS booted from disk", provisioned);
    let deprovisioning = w.at("host: deprovisioning", booted);
    let available_again = w.at("host: available", deprovisioning);
    let deleted = w.at("deleted, node gone", available_again);
    println!(
        "\nvm_ipv6 phases (seconds; TCG, {VM_CPUS} vCPUs, {VM_MEMORY_MIB} MiB, UEFI, IPv6 only)"
    );
    println!("| phase | s |\n|---|---:|");
    for (phase, s) in [
        ("registering (create → inspecting)", secs(inspecting)),
        (
            "PXEv6 → iPXE → agent over IPv6 + inspection (→ available)",
            span(inspecting, inspected),
        ),
        (
            "cleaning, metadata (provide → deploying)",
            span(provisioning, deploying),
        ),
        (
            "deployment (image over IPv6, config drive, boot entry)",
            span(deploying, provisioned),
        ),
        (
            "first boot of the image from disk (→ user data on console)",
            span(provisioned, booted),
        ),
        (
            "deprovisioning (agent over IPv6 again, metadata cleaning → available)",
            span(deprovisioning, available_again),
        ),
        ("deletion", span(available_again, deleted)),
        ("total", secs(deleted)),
    ] {
        println!("| {phase} | {s:.1} |");
    }
}
