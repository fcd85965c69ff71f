//! A real machine, end to end: a qemu VM (software emulation, BIOS) behind an IPMI
//! BMC (`ipmi://`: VirtualBMC in front of its libvirt domain, driven by Ironic's
//! `ipmi` hardware type through ipmitool) is network-booted by bmo's own DHCP, TFTP and
//! HTTP, inspected, cleaned and deployed by the real ironic-python-agent that
//! tests/env/ipa-build made, boots the deployed test OS from its disk, reads its
//! config drive, is powered off, on and rebooted through the BMC, deprovisioned with a
//! full disk wipe (`automatedCleaningMode: full`) and deleted. A second VM (UEFI,
//! behind a Redfish BMC: sushy-emulator's libvirt driver) loads iPXE over bmo's TFTP
//! and is inspected. See tests/vm/lab.rs for the network and the daemons.
//!
//! The time of each phase is printed as a table (docs/performance.md quotes it).

use std::time::{Duration, Instant};

use bmo::api::{BareMetalHost, HardwareData};
use bmo::ironic::{ClientConfig, IronicClient};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use serde_json::{Value, json};

use crate::lab::{Firmware, HTTP_PORT, Lab, PROVISIONING_IP, Vm, VmSpec};
use crate::support::netboot;
use crate::support::{Stack, new_namespace, unique_name};
use crate::vbmc::{self, VirtualBmc};
use crate::watch::{Watch, state_is, tail, wait_console};

const VM_MEMORY_MIB: u32 = 2560;
const VM_CPUS: u32 = 2;
const VM_DISK_GIB: u64 = 5;
const GPT_SIGNATURE: &[u8] = b"EFI PART";

/// Polls `check` on the VM's disk for up to a minute: the guest's writes reach the
/// image file when its kernel flushes them.
async fn wait_disk(vm: &Vm, what: &str, check: impl Fn(&Vm) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !check(vm) {
        assert!(Instant::now() < deadline, "the VM's disk: {what}");
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

pub async fn create_secret(client: &kube::Client, ns: &str, name: &str, data: &[(&str, &str)]) {
    let mut secret = Secret::default();
    secret.metadata.name = Some(name.to_owned());
    secret.data = Some(
        data.iter()
            .map(|(k, v)| ((*k).to_owned(), ByteString(v.as_bytes().to_vec())))
            .collect(),
    );
    Api::<Secret>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &secret)
        .await
        .expect("create Secret");
}

pub fn nic_of<'a>(hardware: &'a Value, mac: &str) -> &'a Value {
    hardware["nics"]
        .as_array()
        .and_then(|nics| {
            nics.iter().find(|n| {
                n["mac"]
                    .as_str()
                    .is_some_and(|m| m.eq_ignore_ascii_case(mac))
            })
        })
        .unwrap_or_else(|| panic!("no NIC with MAC {mac} in {hardware}"))
}

/// The first 16 bytes of the disk's last sector, where a GPT keeps its backup header.
fn last_sector_head(vm: &Vm) -> Vec<u8> {
    use std::io::{Read, Seek, SeekFrom};
    let mut head = vec![0u8; 16];
    std::fs::File::open(&vm.disk)
        .and_then(|mut f| {
            f.seek(SeekFrom::End(-512))?;
            f.read_exact(&mut head)
        })
        .expect("read the VM's disk");
    head
}

/// Where the wipe's marker goes: the middle of the disk, far from the image at its
/// start and the config drive at its end.
fn middle() -> u64 {
    (VM_DISK_GIB << 30) / 2
}

fn write_middle(vm: &Vm, bytes: &[u8]) {
    use std::io::{Seek, SeekFrom, Write};
    std::fs::OpenOptions::new()
        .write(true)
        .open(&vm.disk)
        .and_then(|mut f| {
            f.seek(SeekFrom::Start(middle()))?;
            f.write_all(bytes)?;
            f.sync_all()
        })
        .expect("write the marker into the VM's disk");
}

fn middle_has(vm: &Vm, bytes: &[u8]) -> bool {
    use std::io::{Read, Seek, SeekFrom};
    let mut found = vec![0u8; bytes.len()];
    std::fs::File::open(&vm.disk)
        .and_then(|mut f| {
            f.seek(SeekFrom::Start(middle()))?;
            f.read_exact(&mut found)
        })
        .expect("read the VM's disk");
    found == bytes
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vm_is_inspected_cleaned_deployed_and_deprovisioned_by_the_real_agent() {
    let _shared = crate::support::shared();
    let stack = Stack::get();
    let client = stack.kube_client().await;
    bmo::api::install::install(&client, Duration::from_secs(60))
        .await
        .expect("install the CRDs");
    let mut lab = Lab::start();
    let ns = new_namespace(&client, "vm-e2e").await;
    let _bmo = lab.start_bmo(&ns);

    let vm = lab.define_vm(VmSpec {
        name: &unique_name("bmo-vm-bios"),
        uuid: "6f1b7c2e-3d4a-4b5c-8d9e-0a1b2c3d4e01",
        mac: "52:54:00:7e:00:01",
        memory_mib: VM_MEMORY_MIB,
        cpus: VM_CPUS,
        disk_gib: VM_DISK_GIB,
        firmware: Firmware::Bios,
    });
    let uefi_vm = lab.define_vm(VmSpec {
        name: &unique_name("bmo-vm-uefi"),
        uuid: "6f1b7c2e-3d4a-4b5c-8d9e-0a1b2c3d4e02",
        mac: "52:54:00:7e:00:02",
        memory_mib: VM_MEMORY_MIB,
        cpus: VM_CPUS,
        disk_gib: VM_DISK_GIB,
        firmware: Firmware::Uefi,
    });
    // An old GPT for cleaning to erase: the deployed image later rewrites the
    // start of the disk, but nothing but cleaning touches the backup header at its end.
    netboot::run(std::process::Command::new("sh").arg("-c").arg(format!(
        "printf 'label: gpt\\nstart=2048, size=204800\\n' | sfdisk -q {}",
        vm.disk.display()
    )));
    assert_eq!(
        &last_sector_head(&vm)[..8],
        GPT_SIGNATURE,
        "the old GPT is in place"
    );
    // The BIOS VM's BMC speaks IPMI (VirtualBMC on a loopback port of the lab's
    // namespace); the UEFI VM's speaks Redfish (sushy-emulator).
    let vbmc = VirtualBmc::start(&lab).await;
    let ipmi_address = vbmc.add(&vm).await;
    lab.wait_for_bmc(&uefi_vm).await;

    // The test OS image, served by bmo's HTTP server next to the agent.
    let os_dir = std::path::PathBuf::from(stack.var("BMO_TEST_OS_DIR").expect("BMO_TEST_OS_DIR"));
    std::fs::copy(
        os_dir.join("bmo-test-os.img"),
        lab.images.join("bmo-test-os.img"),
    )
    .expect("copy the test OS image");
    let checksum = std::fs::read_to_string(os_dir.join("bmo-test-os.img.sha256sum"))
        .expect("checksum file")
        .split_whitespace()
        .next()
        .expect("checksum")
        .to_owned();

    let marker = unique_name("BMO-USERDATA-MARKER");
    create_secret(
        &client,
        &ns,
        "vm-bmc",
        &[("username", vbmc::USERNAME), ("password", vbmc::PASSWORD)],
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
    let name = "vm-0";
    let host = host(name, &ipmi_address, &vm, "legacy", "metadata");
    let ironic = IronicClient::connect(ClientConfig::new(lab.ironic_from_test.clone()))
        .await
        .expect("connect to the lab's Ironic");
    let node_name = format!("{ns}~{name}");
    let mut watch = Watch {
        api: api.clone(),
        name: name.to_owned(),
        ironic,
        node: node_name.clone(),
        lab: &lab,
        vm: &vm,
        start: Instant::now(),
        marks: Vec::new(),
    };
    api.create(&PostParams::default(), &host)
        .await
        .expect("create host");

    // 1, 2: registering -> inspecting (the real agent) -> available.
    let st = watch
        .until(
            "available",
            Duration::from_secs(1800),
            state_is("available"),
        )
        .await;
    let hw = &st["hardware"];
    assert_eq!(hw["cpu"]["count"], json!(VM_CPUS), "CPU count: {hw}");
    assert_eq!(hw["ramMebibytes"], json!(VM_MEMORY_MIB), "memory: {hw}");
    let disks = hw["storage"].as_array().expect("storage list");
    assert!(
        disks
            .iter()
            .any(|d| d["sizeBytes"] == json!(VM_DISK_GIB << 30)),
        "a {VM_DISK_GIB} GiB disk: {hw}"
    );
    let nic = nic_of(hw, &vm.mac);
    assert!(
        nic["model"].as_str().is_some_and(|m| m.contains("0x1af4")),
        "the virtio NIC's vendor in its model: {nic}"
    );
    // The agent's own DHCP client sent the host name; bmo's lease table put it here.
    let expected_hostname = format!("ipa-{}", vm.mac.replace(':', ""));
    assert_eq!(
        nic["dhcpHostname"],
        json!(expected_hostname),
        "the agent's DHCP hostname: {nic}"
    );
    assert!(
        nic["ip"]
            .as_str()
            .is_some_and(|ip| ip.starts_with("10.77.0.")),
        "the leased address on the NIC: {nic}"
    );

    // HardwareData, the object upstream's consumers read, holds the same details.
    let hardware_data: Api<HardwareData> = Api::namespaced(client.clone(), &ns);
    let hd = serde_json::to_value(
        hardware_data
            .get(name)
            .await
            .expect("the host's HardwareData"),
    )
    .expect("HardwareData as JSON");
    let hd_hw = &hd["spec"]["hardware"];
    assert_eq!(hd_hw["cpu"]["count"], json!(VM_CPUS), "HardwareData: {hd}");
    assert_eq!(
        nic_of(hd_hw, &vm.mac)["dhcpHostname"],
        json!(expected_hostname),
        "HardwareData: {hd}"
    );

    // 3: the agent came from bmo's HTTP server at the address bmo detected.
    let node = watch
        .ironic
        .get_node(&node_name)
        .await
        .expect("read the node")
        .expect("the host's node exists");
    // The ipmi:// address made an `ipmi` node that Ironic drives with ipmitool.
    assert_eq!(node.driver, "ipmi", "the node's hardware type");
    let ipmi_port = ipmi_address.rsplit(':').next().expect("port");
    assert_eq!(
        (
            node.driver_info.get("ipmi_address"),
            node.driver_info
                .get("ipmi_port")
                .map(|p| p.to_string().replace('"', ""))
        ),
        (Some(&json!("127.0.0.1")), Some(ipmi_port.to_owned())),
        "{:?}",
        node.driver_info
    );
    let images = format!("http://{PROVISIONING_IP}:{HTTP_PORT}/images");
    assert_eq!(
        node.driver_info.get("deploy_kernel"),
        Some(&json!(format!("{images}/ironic-python-agent.kernel"))),
        "{:?}",
        node.driver_info
    );
    assert_eq!(
        node.driver_info.get("deploy_ramdisk"),
        Some(&json!(format!("{images}/ironic-python-agent.initramfs"))),
        "{:?}",
        node.driver_info
    );
    let console = vm.console();
    assert!(
        console.contains("ipa-ramdisk: starting ironic-python-agent"),
        "the agent started:\n{}",
        tail(&console, 40)
    );

    // 4, 5: deploy the image with user data. Provisioning first cleans (metadata),
    // then the agent downloads the image from bmo and checks its checksum; the VM
    // boots it from disk and prints the user data from its config drive.
    watch
        .patch(json!({"spec": {
            "image": {
                "url": format!("{images}/bmo-test-os.img"),
                "checksum": checksum,
                "checksumType": "sha256",
                "format": "raw"
            },
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
    // The status named the deploy steps as the agent ran them.
    assert!(
        watch
            .marks
            .iter()
            .any(|(m, _)| m.starts_with("step: deploy deploy.")),
        "status.provisioning.currentStep showed a deploy step: {:?}",
        watch.marks
    );
    wait_disk(
        &vm,
        "metadata cleaning erased the old GPT's backup header",
        |vm| last_sector_head(vm)[..8] != *GPT_SIGNATURE,
    )
    .await;
    let user_data_line = format!("bmo-test-os: user_data: echo {marker}");
    wait_console(&vm, &lab, &user_data_line, 1, Duration::from_secs(600)).await;
    watch.mark("test OS booted and read its config drive");

    // 6: power through the BMC, seen in status.poweredOn within one poll.
    let t = Instant::now();
    watch.patch(json!({"spec": {"online": false}})).await;
    watch
        .until("poweredOn false", Duration::from_secs(120), |s| {
            s["poweredOn"] == json!(false)
        })
        .await;
    let power_off = t.elapsed();
    assert_eq!(vm.state(), "shut off", "the VM is off");
    assert_eq!(
        vbmc.power_status(&ipmi_address).as_deref(),
        Ok("off"),
        "the IPMI BMC reports the power off"
    );
    let t = Instant::now();
    watch.patch(json!({"spec": {"online": true}})).await;
    watch
        .until("poweredOn true", Duration::from_secs(120), |s| {
            s["poweredOn"] == json!(true)
        })
        .await;
    let power_on = t.elapsed();
    assert_eq!(vm.state(), "running", "the VM is on");
    assert_eq!(
        vbmc.power_status(&ipmi_address).as_deref(),
        Ok("on"),
        "the IPMI BMC reports the power on"
    );
    wait_console(&vm, &lab, "bmo-test-os: ready", 2, Duration::from_secs(600)).await;
    // A reboot annotation power-cycles the real VM: the OS boots once more.
    watch
        .patch(json!({"metadata": {"annotations": {"reboot.metal3.io": ""}}}))
        .await;
    wait_console(&vm, &lab, "bmo-test-os: ready", 3, Duration::from_secs(600)).await;
    watch.mark("rebooted by annotation");

    // 1, 4 and the full disk wipe: with `automatedCleaningMode: full`, deprovisioning
    // (image removed) takes the image off and then has Ironic run the agent's
    // `deploy.erase_devices` as a manual clean. The deployed image's partition table
    // goes, and so does a marker in the middle of the disk, which metadata cleaning
    // (proved above on the old GPT) leaves alone. Then the host is available again.
    assert_eq!(&vm.first_sector()[510..], &[0x55, 0xAA], "the image's MBR");
    let wipe_marker = unique_name("BMO-WIPE-MARKER");
    write_middle(&vm, wipe_marker.as_bytes());
    assert!(
        middle_has(&vm, wipe_marker.as_bytes()),
        "the marker is in the middle of the disk"
    );
    watch
        .patch(json!({"spec": {"automatedCleaningMode": "full"}}))
        .await;
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
    wait_disk(
        &vm,
        "deprovisioning erased the image's partition table",
        |vm| vm.first_sector()[446..512].iter().all(|b| *b == 0),
    )
    .await;
    wait_disk(&vm, "the full wipe erased the middle of the disk", |vm| {
        !middle_has(vm, wipe_marker.as_bytes())
    })
    .await;
    // Ironic's own view: the node's clean_step while the wipe ran, and a manual
    // cleaning that ended well in its history. (Its history names the steps of a
    // cleaning only when the agent was already up, so the step comes from the node.)
    for seen in [
        "ironic clean step: deploy.erase_devices",
        "step: clean deploy.erase_devices",
    ] {
        assert!(
            watch.marks.iter().any(|(m, _)| m == seen),
            "{seen:?} while deprovisioning: {:?}",
            watch.marks
        );
    }
    let history = watch
        .ironic
        .node_history(&node_name)
        .await
        .expect("read the node's history");
    assert!(
        history.iter().any(|h| h["event"]
            .as_str()
            .is_some_and(|e| e.starts_with("Manual Cleaning completed successfully"))),
        "Ironic's history has the manual cleaning: {history:#?}"
    );
    let node = watch
        .ironic
        .get_node(&node_name)
        .await
        .expect("read the node")
        .expect("the host's node exists");
    assert!(
        !node.extra.contains_key("bmo_full_disk_wipe"),
        "bmo's note of the wipe is gone once it is over: {:?}",
        node.extra
    );
    watch.mark("full disk wipe checked");
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
    assert!(
        watch
            .ironic
            .get_node(&node_name)
            .await
            .expect("read nodes")
            .is_none(),
        "the Ironic node {node_name} is gone with the host"
    );
    watch.mark("deleted, node gone");
    print_phases(&watch, power_off, power_on);
    // The agent deprovisioned with is still up (fast track): free the CPU.
    let _ = std::process::Command::new("virsh")
        .args(["-c", "qemu:///system", "destroy", &vm.name])
        .output();

    uefi_vm_boots_the_agent_with_its_loader_over_tftp(&lab, &api, &uefi_vm, &ns).await;
}

fn host(name: &str, bmc: &str, vm: &Vm, boot_mode: &str, cleaning: &str) -> BareMetalHost {
    serde_json::from_value(json!({
        "apiVersion": "metal3.io/v1alpha1",
        "kind": "BareMetalHost",
        "metadata": {"name": name},
        "spec": {
            "online": true,
            "bootMACAddress": vm.mac,
            "bootMode": boot_mode,
            "automatedCleaningMode": cleaning,
            "bmc": {
                "address": bmc,
                "credentialsName": "vm-bmc",
                "disableCertificateVerification": true
            }
        }
    }))
    .expect("host")
}

/// 3, the TFTP path: a UEFI VM whose firmware's own PXE client (no iPXE ROM) asks
/// for a loader gets iPXE over bmo's TFTP, which then fetches the boot script over
/// HTTP; the agent inspects it and the host becomes available.
async fn uefi_vm_boots_the_agent_with_its_loader_over_tftp(
    lab: &Lab,
    api: &Api<BareMetalHost>,
    vm: &Vm,
    ns: &str,
) {
    let name = "vm-1";
    api.create(
        &PostParams::default(),
        &host(name, &lab.redfish_address(vm), vm, "UEFI", "disabled"),
    )
    .await
    .expect("create the UEFI host");
    let mut watch = Watch {
        api: api.clone(),
        name: name.to_owned(),
        ironic: IronicClient::connect(ClientConfig::new(lab.ironic_from_test.clone()))
            .await
            .expect("connect to the lab's Ironic"),
        node: format!("{ns}~{name}"),
        lab,
        vm,
        start: Instant::now(),
        marks: Vec::new(),
    };
    let st = watch
        .until(
            "the UEFI host available",
            Duration::from_secs(1800),
            state_is("available"),
        )
        .await;
    let nic = nic_of(&st["hardware"], &vm.mac);
    assert_eq!(
        nic["dhcpHostname"],
        json!(format!("ipa-{}", vm.mac.replace(':', ""))),
        "{nic}"
    );
    let log = std::fs::read_to_string(lab.path().join("bmo.log")).unwrap_or_default();
    assert!(
        log.lines()
            .any(|l| l.contains("TFTP transfer") && l.contains("snponly-x86_64.efi")),
        "bmo sent the UEFI loader over TFTP:\n{}",
        tail(&log, 40)
    );
    let leases = std::fs::read_to_string(lab.path().join("leases.json")).unwrap_or_default();
    assert!(
        leases.contains(&vm.mac.to_lowercase()),
        "the UEFI VM's lease is recorded: {leases}"
    );
    watch.mark("UEFI host inspected (loader over TFTP)");
    println!(
        "| UEFI PXE over TFTP: create → available (inspected) | {:.1} |",
        watch.start.elapsed().as_secs_f64()
    );
    api.delete(name, &DeleteParams::default())
        .await
        .expect("delete the UEFI host");
    watch
        .until("the UEFI host is gone", Duration::from_secs(600), |s| {
            s["error"]
                .as_str()
                .is_some_and(|e| e.contains("NotFound") || e.contains("404"))
        })
        .await;
}

fn print_phases(w: &Watch<'_>, power_off: Duration, power_on: Duration) {
    let secs = |d: Option<Duration>| d.map_or(f64::NAN, |d| d.as_secs_f64());
    let inspecting = w.at("host: inspecting", None);
    let inspected = w.at("host: available", inspecting);
    let provisioning = w.at("host: provisioning", inspected);
    let clean_wait = w.at("ironic: clean wait", provisioning);
    let deploying = w.at("ironic: deploying", clean_wait);
    let provisioned = w.at("host: provisioned", deploying);
    let booted = w.at("test OS booted and read its config drive", provisioned);
    let deprovisioning = w.at("host: deprovisioning", booted);
    let available_again = w.at("host: available", deprovisioning);
    let span = |a: Option<Duration>, b: Option<Duration>| secs(b) - secs(a);
    println!("\nvm_e2e phases (seconds; TCG, 2 vCPUs, {VM_MEMORY_MIB} MiB, ipmi:// BMC)");
    println!("| phase | s |\n|---|---:|");
    for (phase, s) in [
        ("registering (create → inspecting)", secs(inspecting)),
        (
            "boot to agent + inspection (→ available)",
            span(inspecting, inspected),
        ),
        (
            "cleaning, metadata (provide → clean done)",
            span(provisioning, deploying),
        ),
        (
            "deployment (image written, config drive)",
            span(deploying, provisioned),
        ),
        (
            "first boot of the image (→ user data on console)",
            span(provisioned, booted),
        ),
        ("power off seen in status", power_off.as_secs_f64()),
        ("power on seen in status", power_on.as_secs_f64()),
        (
            "deprovisioning, full wipe (undeploy, erase_devices → available)",
            span(deprovisioning, available_again),
        ),
        ("total", secs(w.at("deleted, node gone", None))),
    ] {
        println!("| {phase} | {s:.1} |");
    }
}
