//! A site without DHCP, on a real machine: a UEFI qemu VM (OVMF) behind a
//! `redfish-virtualmedia://` BMC (sushy-emulator's libvirt driver) on a network where
//! nothing answers DHCP (bmo runs with `BMO_DHCP_MODE=off`; a packet watch on the
//! bridge checks that no DHCP reply was sent, not even to a DHCP client the test
//! plugs in at the end). The host's
//! `preprovisioningNetworkDataName` Secret holds a static address: Ironic builds the
//! agent's ISO with it as network data, the BMC inserts the ISO, the real agent
//! comes up on that address, is inspected, metadata-cleaned and deploys the UEFI test
//! OS from bmo's HTTP server. The VM then boots from its disk, applies
//! `spec.networkData` (another address) from the config drive, shows it on its
//! console and answers a ping there. Upstream's `network_data` and `inspection`
//! scenarios over virtual media, in one VM lifecycle.
//!
//! The same lifecycle goes on with upstream's `automated_cleaning` and `live_iso`.
//! The VM has a second disk (1 GiB, too small to be the agent's root device). The
//! first deployment's user data is a script, which the test OS runs: it makes an ext2
//! filesystem on the second disk and writes FIRST.TXT on the image's EFI system
//! partition (the host sees both with `blkid -p` and mtools on the disk files).
//! Deprovisioning with metadata cleaning boots the agent from Ironic's ISO again and
//! erases both filesystems (blkid finds none). Upstream's `re_inspection`
//! (re_inspection.rs) follows: the agent gets a new address and reports it. A
//! reprovision, detached by force while Ironic deploys and re-attached
//! (forced_detach.rs, upstream's `forced_detachment`), boots the image again,
//! and its own user data finds no FIRST.TXT. Then the host is deprovisioned without
//! cleaning and given a live ISO (bmo's ISO writer, the test OS's kernel and
//! initramfs, a marker on the kernel command line): the VM boots it from virtual
//! media, its /init prints the marker, and the disk's data hash the same as before.
//! Deprovisioned, the host is marked externally provisioned (externally_provisioned.rs)
//! with nothing deployed and its node left available, then deleted.
//!
//! CI runs the short lifecycle: from the metadata cleaning straight to the live ISO.
//! The full one, with the re-inspection and the forced detachment (two more boots of
//! the agent, about 5 minutes), is `#[ignore]`d: run it with `--include-ignored`. The
//! controller tests cover both at fake hardware's fidelity in every run.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use bmo::api::BareMetalHost;
use bmo::ironic::{ClientConfig, IronicClient};
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use serde_json::{Value, json};

use crate::dhcp_watch::DhcpWatch;
use crate::externally_provisioned::externally_provisioned_from_available;
use crate::forced_detach::force_detach_while_deploying_then_reattach;
use crate::lab::{Firmware, HTTP_PORT, Lab, PROVISIONING_IP, Vm, VmSpec};
use crate::live_iso::{disk_digest, serve_live_iso};
use crate::re_inspection::re_inspect_on_a_new_address;
use crate::support::{Stack, new_namespace, unique_name};
use crate::vm_e2e::{create_secret, nic_of};
use crate::watch::{Watch, state_is, tail, wait_console};

const VM_MEMORY_MIB: u32 = 2560;
const VM_CPUS: u32 = 2;
const VM_DISK_GIB: u64 = 5;
const SECOND_DISK_GIB: u64 = 1;
/// Where the UEFI test OS's EFI system partition starts (sector 2048).
const ESP_OFFSET: u64 = 1 << 20;
/// The agent's address (preprovisioning network data) and the deployed OS's
/// (`spec.networkData`), both outside any DHCP range.
const AGENT_IP: &str = "10.77.0.60";
const OS_IP: &str = "10.77.0.61";
/// The agent's address after re-inspection, from a second network data Secret.
const AGENT_IP_2: &str = "10.77.0.62";

/// OpenStack network data: one physical link (the NIC with `mac`) with a static
/// IPv4 address on the provisioning network.
fn static_network_data(mac: &str, ip: &str) -> String {
    json!({
        "links": [{"id": "prov", "type": "phy", "ethernet_mac_address": mac, "mtu": 1500}],
        "networks": [{
            "id": "prov-v4", "link": "prov", "network_id": "prov", "type": "ipv4",
            "ip_address": ip, "netmask": "255.255.255.0", "routes": []
        }],
        "services": []
    })
    .to_string()
}

fn host(name: &str, lab: &Lab, vm: &Vm) -> BareMetalHost {
    let address = lab
        .redfish_address(vm)
        .replacen("redfish+", "redfish-virtualmedia+", 1);
    serde_json::from_value(json!({
        "apiVersion": "metal3.io/v1alpha1",
        "kind": "BareMetalHost",
        "metadata": {"name": name},
        "spec": {
            "online": true,
            "bootMACAddress": vm.mac,
            "bootMode": "UEFI",
            "automatedCleaningMode": "metadata",
            "preprovisioningNetworkDataName": "vm-preprov-net",
            "bmc": {
                "address": address,
                "credentialsName": "vm-bmc",
                "disableCertificateVerification": true
            }
        }
    }))
    .expect("host")
}

/// Pings `ip` from the lab's namespace until it answers, for up to a minute.
async fn wait_ping(lab: &Lab, ip: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let ok = lab
            .ns
            // busybox (Debian's busybox-static, which the stack installs): the
            // machine may have no iputils.
            .command("busybox")
            .args(["ping", "-c", "1", "-W", "1", ip])
            .output()
            .is_ok_and(|o| o.status.success());
        if ok {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{ip} does not answer a ping from the provisioning network"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Asks for a lease on the provisioning network as a new machine would: busybox's
/// udhcpc on a veth plugged into the bridge, three DISCOVERs a second apart. Whether
/// any server offered one.
fn dhcp_probe_gets_a_lease(lab: &Lab) -> bool {
    let ip = |args: &[&str]| {
        crate::support::netboot::run(Command::new("ip").arg("-n").arg(&lab.ns.name).args(args))
    };
    ip(&[
        "link", "add", "probe0", "type", "veth", "peer", "name", "probe1",
    ]);
    ip(&["link", "set", "probe1", "master", "br0", "up"]);
    ip(&["link", "set", "probe0", "up"]);
    let status = lab
        .ns
        .command("busybox")
        .args(["udhcpc", "-i", "probe0", "-n", "-q", "-t", "3", "-T", "1"])
        .args(["-s", "/bin/true"])
        .output()
        .expect("run busybox udhcpc");
    ip(&["link", "del", "probe0"]);
    status.status.success()
}

/// The test OS image for UEFI, copied next to the agent for bmo's HTTP server; its
/// URL and sha256.
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
        format!("http://{PROVISIONING_IP}:{HTTP_PORT}/images/{name}"),
        checksum,
    )
}

/// How much of the lifecycle one run goes through after the metadata cleaning.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Lifecycle {
    /// Straight on to the live ISO and external provisioning: the run CI affords.
    Short,
    /// Re-inspection and a forced detachment during a reprovision first: two more
    /// boots of the agent, about 5 minutes under TCG.
    Full,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vm_without_dhcp_boots_the_agent_from_virtual_media_on_a_static_address_and_deploys() {
    // One lab at a time: each starts the machine's one libvirtd.
    let _alone = crate::support::exclusive("vm_vmedia");
    vmedia_lifecycle(Lifecycle::Short).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "the short lifecycle plus about 5 minutes under TCG, past the vm binary's CI budget; run with --include-ignored"]
async fn vm_on_virtual_media_is_re_inspected_and_detached_by_force_while_reprovisioning() {
    // One lab at a time: each starts the machine's one libvirtd.
    let _alone = crate::support::exclusive("vm_vmedia_full");
    vmedia_lifecycle(Lifecycle::Full).await;
}

async fn vmedia_lifecycle(lifecycle: Lifecycle) {
    let stack = Stack::get();
    let client = stack.kube_client().await;
    bmo::api::install::install(&client, Duration::from_secs(60))
        .await
        .expect("install the CRDs");
    let mut lab = Lab::start_virtual_media(&[]);
    let ns = new_namespace(&client, "vm-vmedia").await;
    // Nothing on the network answers DHCP: bmo serves HTTP only.
    let _bmo = lab.start_bmo_with(&ns, &[("BMO_DHCP_MODE", "off"), ("BMO_TFTP", "false")]);
    let vm = lab.define_vm_booting(
        VmSpec {
            name: &unique_name("bmo-vm-vmedia"),
            uuid: "6f1b7c2e-3d4a-4b5c-8d9e-0a1b2c3d4e03",
            mac: "52:54:00:7e:00:03",
            memory_mib: VM_MEMORY_MIB,
            cpus: VM_CPUS,
            disk_gib: VM_DISK_GIB,
            firmware: Firmware::Uefi,
        },
        "hd",
    );
    // Too small for the agent's root device (4 GiB at least): the image goes to vda.
    let second_disk = lab.add_disk(&vm, SECOND_DISK_GIB);
    let dhcp = DhcpWatch::start(lab.ns.handle(), "br0", &vm.mac);
    lab.wait_for_bmc(&vm).await;
    let (image_url, checksum) = serve_uefi_image(&lab);

    let marker = unique_name("BMO-VMEDIA-MARKER");
    let marker2 = unique_name("BMO-VMEDIA-SECOND");
    for (name, data) in [
        (
            "vm-bmc",
            vec![("username", "admin"), ("password", "password")],
        ),
        (
            "vm-user-data",
            vec![("userData", &*first_user_data(&marker))],
        ),
        (
            "vm-user-data-2",
            vec![("userData", &*second_user_data(&marker2))],
        ),
    ] {
        create_secret(&client, &ns, name, &data).await;
    }
    let agent_net = static_network_data(&vm.mac, AGENT_IP);
    let os_net = static_network_data(&vm.mac, OS_IP);
    create_secret(
        &client,
        &ns,
        "vm-preprov-net",
        &[("networkData", &agent_net)],
    )
    .await;
    create_secret(&client, &ns, "vm-os-net", &[("networkData", &os_net)]).await;
    let agent_net_2 = static_network_data(&vm.mac, AGENT_IP_2);
    create_secret(
        &client,
        &ns,
        "vm-preprov-net-2",
        &[("networkData", &agent_net_2)],
    )
    .await;

    let api: Api<BareMetalHost> = Api::namespaced(client.clone(), &ns);
    let name = "vm-vmedia";
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

    // Inspection: the agent boots from the ISO the BMC inserted and reports the
    // static address on its NIC.
    let st = watch
        .until("available", Duration::from_secs(900), state_is("available"))
        .await;
    let nic = nic_of(&st["hardware"], &vm.mac);
    assert_eq!(nic["ip"], json!(AGENT_IP), "the agent's address: {nic}");
    check_agent_came_from_virtual_media(&watch, &vm, &agent_net).await;

    // Deployment: metadata cleaning, then the UEFI image from bmo's HTTP server
    // with the deployed OS's own network data and user data.
    watch
        .patch(json!({"spec": {
            "image": {"url": image_url, "checksum": checksum, "checksumType": "sha256", "format": "raw"},
            "userData": {"name": "vm-user-data"},
            "networkData": {"name": "vm-os-net"}
        }}))
        .await;
    watch
        .until(
            "provisioned",
            Duration::from_secs(900),
            state_is("provisioned"),
        )
        .await;
    assert!(
        watch.at("ironic: clean wait", None).is_some(),
        "Ironic cleaned the node before deploying: {:?}",
        watch.marks
    );
    let t = Duration::from_secs(300);
    wait_console(
        &vm,
        &lab,
        &format!("bmo-test-os: user_data: echo {marker}"),
        1,
        t,
    )
    .await;
    wait_console(&vm, &lab, "bmo-test-os: ready", 1, t).await;
    let console = vm.console();
    let booted = console
        .split("bmo-test-os: booted")
        .last()
        .unwrap_or_default();
    assert!(
        booted.contains(&format!("bmo-test-os: applied {OS_IP}/24"))
            && booted.contains(&format!("inet {OS_IP}/24")),
        "the deployed OS took spec.networkData's address from its config drive:\n{}",
        tail(booted, 30)
    );
    // OVMF started the boot entry the agent added with efibootmgr (IPA names it
    // "ironic1"), on the image's EFI system partition.
    assert!(
        console
            .lines()
            .any(|l| l.contains("BdsDxe: starting") && l.contains("\"ironic1\" from HD(")),
        "the firmware booted the agent's UEFI boot entry:\n{}",
        tail(&console, 40)
    );
    watch.mark("deployed OS booted from disk on its address");
    check_first_deployment_wrote(&vm, &second_disk, &marker);
    wait_ping(&lab, OS_IP).await;
    watch.mark("deployed OS answers on its address");

    assert!(
        !dhcp_probe_gets_a_lease(&lab),
        "a DHCP client on the provisioning network got a lease"
    );
    let seen = dhcp.seen();
    assert!(
        seen.requests.iter().any(|r| r.ends_with("DHCP DISCOVER")),
        "the watch saw the probe's DISCOVERs: {:?}",
        seen.requests
    );
    assert!(
        seen.replies.is_empty(),
        "nothing may answer DHCP on this network, yet: {:?}",
        seen.replies
    );
    assert!(
        seen.from_mac > 100,
        "the watch saw the VM's traffic on br0 ({} of {} frames)",
        seen.from_mac,
        seen.frames
    );
    eprintln!(
        "vm_vmedia: br0 carried {} frames, {} from the VM; DHCP requests {:?}, replies none",
        seen.frames, seen.from_mac, seen.requests
    );

    let image =
        json!({"url": image_url, "checksum": checksum, "checksumType": "sha256", "format": "raw"});
    metadata_clean(&mut watch, &second_disk).await;
    if lifecycle == Lifecycle::Full {
        re_inspect_and_reprovision(&mut watch, &second_disk, image, &marker2).await;
    }
    boot_a_live_iso(&mut watch, &lab, &vm).await;
    externally_provisioned_from_available(&mut watch).await;

    // Leaving: the host is deleted without cleaning (the point was the deployment).
    watch
        .patch(json!({"spec": {"automatedCleaningMode": "disabled"}}))
        .await;
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

/// The first deployment's user data: a file on the image's EFI system partition
/// and an ext2 filesystem on the second disk.
fn first_user_data(marker: &str) -> String {
    format!(
        "#!/bin/sh\necho {marker}\nmke2fs -F -L BMO2ND /dev/vdb >/dev/null 2>&1 && echo 'second disk: ext2 made'\nmkdir -p /mnt2 && mount -t vfat /dev/vda1 /mnt2 && echo {marker} >/mnt2/FIRST.TXT && umount /mnt2 && echo 'first disk: FIRST.TXT written'\n"
    )
}

/// The second deployment's user data: looks for the first one's file.
fn second_user_data(marker: &str) -> String {
    format!(
        "#!/bin/sh\necho {marker}\nmkdir -p /mnt2 && mount -t vfat -o ro /dev/vda1 /mnt2 && ls /mnt2 | tr '\\n' ' ' && echo && if [ -e /mnt2/FIRST.TXT ]; then echo 'FIRST.TXT is there'; else echo 'no FIRST.TXT'; fi\n"
    )
}

/// The filesystem type `blkid -p` finds at `offset` in a disk image (probing the
/// file itself, not a cache), or "" for none.
fn fs_type(disk: &Path, offset: u64) -> String {
    let out = Command::new("blkid")
        .args(["-p", "-o", "value", "-s", "TYPE", "-O", &offset.to_string()])
        .arg(disk)
        .output()
        .expect("run blkid");
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// FIRST.TXT on the first disk's EFI system partition, read with mtools, or None
/// when that partition or the file is not there.
fn first_file(vm: &Vm) -> Option<String> {
    let out = Command::new("mtype")
        .arg("-i")
        .arg(format!("{}@@{ESP_OFFSET}", vm.disk.display()))
        .arg("::FIRST.TXT")
        .env("MTOOLS_SKIP_CHECK", "1")
        .output()
        .expect("run mtype");
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The first deployment's user data ran: the guest says so, and the host finds its
/// file and the second disk's ext2.
fn check_first_deployment_wrote(vm: &Vm, second_disk: &Path, marker: &str) {
    let console = vm.console();
    for line in [
        "bmo-test-os: user_data ran: second disk: ext2 made",
        "bmo-test-os: user_data ran: first disk: FIRST.TXT written",
    ] {
        assert!(console.contains(line), "{line}:\n{}", tail(&console, 40));
    }
    assert_eq!(
        fs_type(second_disk, 0),
        "ext2",
        "the second disk's filesystem"
    );
    assert_eq!(fs_type(&vm.disk, ESP_OFFSET), "vfat", "the image's ESP");
    assert!(
        first_file(vm).is_some_and(|t| t.contains(marker)),
        "FIRST.TXT on the first disk"
    );
}

/// Upstream's `automated_cleaning`: deprovisioning with metadata cleaning (the agent
/// from Ironic's ISO again) erases the filesystems on both disks.
async fn metadata_clean(watch: &mut Watch<'_>, second_disk: &Path) {
    let vm = watch.vm;
    watch.mark("deprovisioning with metadata cleaning");
    let start = watch.at("deprovisioning with metadata cleaning", None);
    watch
        .patch(json!({"spec": {"image": null, "userData": null}}))
        .await;
    watch
        .until(
            "available after metadata cleaning",
            Duration::from_secs(900),
            state_is("available"),
        )
        .await;
    assert!(
        watch.at("ironic: clean wait", start).is_some(),
        "the agent cleaned the node: {:?}",
        watch.marks
    );
    watch.mark("metadata cleaned, available");
    assert_eq!(
        fs_type(second_disk, 0),
        "",
        "the second disk's ext2 is gone"
    );
    assert_eq!(
        fs_type(&vm.disk, ESP_OFFSET),
        "",
        "the first disk's EFI system partition (holding FIRST.TXT) is gone"
    );
}

/// Upstream's `re_inspection` on a new agent address, then a reprovision detached by
/// force while Ironic deploys and re-attached (`forced_detachment`), which boots the
/// image with no trace of the first deployment's files.
async fn re_inspect_and_reprovision(
    watch: &mut Watch<'_>,
    second_disk: &Path,
    image: Value,
    marker2: &str,
) {
    let (vm, lab) = (watch.vm, watch.lab);
    re_inspect_on_a_new_address(watch, "vm-preprov-net-2", AGENT_IP_2).await;

    watch
        .patch(json!({"spec": {"image": image, "userData": {"name": "vm-user-data-2"}}}))
        .await;
    force_detach_while_deploying_then_reattach(watch).await;
    let t = Duration::from_secs(300);
    wait_console(vm, lab, "bmo-test-os: ready", 2, t).await;
    let console = vm.console();
    let second = console
        .split("bmo-test-os: booted")
        .last()
        .unwrap_or_default();
    assert!(
        second.contains(&format!("bmo-test-os: user_data ran: {marker2}"))
            && second.contains("bmo-test-os: user_data ran: no FIRST.TXT"),
        "the second deployment booted without the first one's file:\n{}",
        tail(second, 30)
    );
    assert_eq!(
        fs_type(&vm.disk, ESP_OFFSET),
        "vfat",
        "the image's ESP again"
    );
    assert_eq!(
        first_file(vm),
        None,
        "no FIRST.TXT on the reprovisioned disk"
    );
    assert_eq!(fs_type(second_disk, 0), "", "the second disk stays blank");
    watch.mark("reprovisioned OS booted, first deployment's files gone");
}

/// Upstream's `live_iso`: the host is deprovisioned without cleaning, then given a
/// live ISO (`format: live-iso`, Ironic's `ramdisk` deploy interface with
/// `boot_iso`) that the BMC inserts and the VM boots; the ISO's marker shows on the
/// console and the disk is unchanged; deprovisioning returns it to available.
async fn boot_a_live_iso(watch: &mut Watch<'_>, lab: &Lab, vm: &Vm) {
    watch.mark("deprovisioning without cleaning");
    // The live OS reads the disk's config drive, if any, and runs its user data: the
    // reprovisioned deployment's, which only reads (the digest would tell); the short
    // lifecycle's metadata cleaning left none.
    let (iso_url, marker) = serve_live_iso(lab);
    watch
        .patch(json!({"spec": {
            "automatedCleaningMode": "disabled",
            "image": null, "userData": null, "networkData": null
        }}))
        .await;
    watch
        .until(
            "available after deprovisioning without cleaning",
            Duration::from_secs(600),
            state_is("available"),
        )
        .await;
    let before = disk_digest(&vm.disk);
    watch.mark("deprovisioned, disk digest taken");
    watch
        .patch(json!({"spec": {"image": {"url": iso_url, "format": "live-iso"}}}))
        .await;
    watch
        .until(
            "provisioned with the live ISO",
            Duration::from_secs(600),
            state_is("provisioned"),
        )
        .await;
    let node = watch
        .ironic
        .get_node(&watch.node)
        .await
        .expect("read the node")
        .expect("the host's node exists");
    let raw = serde_json::to_value(&node).expect("node as JSON");
    assert_eq!(raw["deploy_interface"], json!("ramdisk"), "{raw}");
    assert_eq!(raw["instance_info"]["boot_iso"], json!(iso_url), "{raw}");
    // The test OS's /init prints its command line: the ISO's kernel and initramfs
    // ran, not the disk's.
    let deadline = Instant::now() + Duration::from_secs(300);
    while !vm
        .console()
        .lines()
        .any(|l| l.contains("bmo-test-os: cmdline") && l.contains(&marker))
    {
        assert!(
            Instant::now() < deadline,
            "the live ISO's marker {marker} on its /init's console line:\n{}\n{}",
            tail(&vm.console(), 60),
            lab.logs_tail()
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    watch.mark("live ISO booted, its marker on the console");
    assert_eq!(
        disk_digest(&vm.disk),
        before,
        "the live ISO wrote nothing to the disk"
    );
    watch.patch(json!({"spec": {"image": null}})).await;
    watch
        .until(
            "available after the live ISO",
            Duration::from_secs(600),
            state_is("available"),
        )
        .await;
    watch.mark("live ISO deprovisioned");
}

/// The agent came up from virtual media: the node boots by Redfish virtual media
/// and carries the preprovisioning network data, and the console shows the ramdisk
/// applying it and the agent starting on that address.
async fn check_agent_came_from_virtual_media(watch: &Watch<'_>, vm: &Vm, agent_net: &str) {
    let node = watch
        .ironic
        .get_node(&watch.node)
        .await
        .expect("read the node")
        .expect("the host's node exists");
    let raw = serde_json::to_value(&node).expect("node as JSON");
    assert_eq!(
        raw["boot_interface"],
        json!("redfish-virtual-media"),
        "{raw}"
    );
    let expected: Value = serde_json::from_str(agent_net).expect("network data");
    assert_eq!(raw["network_data"], expected, "the node's network_data");
    let console = vm.console();
    for needle in [
        "boot_method=vmedia".to_owned(),
        format!("ipa-network-data: ip -4 addr add {AGENT_IP}/24"),
        "network data applied, DHCP on: (none)".to_owned(),
        format!("inet {AGENT_IP}/24"),
        "ipa-ramdisk: starting ironic-python-agent".to_owned(),
    ] {
        assert!(
            console.contains(&needle),
            "the agent's console shows {needle:?}:\n{}",
            tail(&console, 60)
        );
    }
}

fn print_phases(w: &Watch<'_>) {
    let secs = |d: Option<Duration>| d.map_or(f64::NAN, |d| d.as_secs_f64());
    let span = |a: Option<Duration>, b: Option<Duration>| secs(b) - secs(a);
    let inspecting = w.at("host: inspecting", None);
    let inspected = w.at("host: available", inspecting);
    let provisioning = w.at("host: provisioning", inspected);
    let deploying = w.at("ironic: deploying", provisioning);
    let provisioned = w.at("host: provisioned", deploying);
    let booted = w.at("deployed OS booted from disk on its address", provisioned);
    let cleaning = w.at("deprovisioning with metadata cleaning", booted);
    let cleaned = w.at("metadata cleaned, available", cleaning);
    let reinspected = w.at("re-inspected, available", cleaned);
    let detached = w.at("forced detachment while deploying", reinspected);
    let reattached = w.at("detached while provisioning", detached);
    let reprovisioned = w.at(
        "reprovisioned OS booted, first deployment's files gone",
        reattached,
    );
    let deprovisioning = w.at("deprovisioning without cleaning", reprovisioned);
    let live_start = w.at("deprovisioned, disk digest taken", deprovisioning);
    let live_booted = w.at("live ISO booted, its marker on the console", live_start);
    let live_done = w.at("live ISO deprovisioned", live_booted);
    let external = w.at(
        "externally provisioned, node available, no error",
        live_done,
    );
    let deleted = w.at("deleted, node gone", external);
    println!("\nvm_vmedia phases (seconds; TCG, {VM_CPUS} vCPUs, {VM_MEMORY_MIB} MiB, UEFI)");
    println!("| phase | s |\n|---|---:|");
    for (phase, s) in [
        ("registering (create → inspecting)", secs(inspecting)),
        (
            "ISO built and inserted, boot to agent + inspection (→ available)",
            span(inspecting, inspected),
        ),
        (
            "cleaning, metadata (the agent still up: fast track)",
            span(provisioning, deploying),
        ),
        (
            "deployment (image written, config drive, boot entry)",
            span(deploying, provisioned),
        ),
        (
            "first boot of the image from disk (→ its address on the console)",
            span(provisioned, booted),
        ),
        (
            "deprovisioning, metadata cleaning of both disks (agent booted again → available)",
            span(cleaning, cleaned),
        ),
        (
            "re-inspection on a new agent address (annotation → agent booted again → available)",
            span(cleaned, reinspected),
        ),
        (
            "reprovisioning (fast track) until Ironic deploys",
            span(reinspected, detached),
        ),
        ("forced detachment (→ detached)", span(detached, reattached)),
        (
            "re-attached: new node, cleaning, deployment and boot (→ the OS's user data ran)",
            span(reattached, reprovisioned),
        ),
        (
            "deprovisioning without cleaning (→ available)",
            span(deprovisioning, live_start),
        ),
        (
            "live ISO: inserted and booted (→ its marker on the console)",
            span(live_start, live_booted),
        ),
        (
            "live ISO: deprovisioning (→ available)",
            span(live_booted, live_done),
        ),
        (
            "marked externally provisioned (node left available, 10 s without error)",
            span(live_done, external),
        ),
        ("deletion (no cleaning)", span(external, deleted)),
        ("total", secs(deleted)),
    ] {
        // The short lifecycle has no re-inspection or reprovision rows.
        if s.is_finite() {
            println!("| {phase} | {s:.1} |");
        }
    }
}
