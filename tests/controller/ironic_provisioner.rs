//! The Ironic provisioner against the real Ironic 39 of tests/env: lifecycle on
//! fake-hardware, inspection fed through Ironic's own ramdisk API, Redfish
//! credentials and power against sushy-emulator, deletion from awkward states,
//! re-adoption after the database is wiped, and a locked node.

use std::future::Future;
use std::time::{Duration, Instant};

use bmo::api::{
    ChecksumType, DiskType, HardwareRaidLevel, HardwareRaidVolume, Image, ImageFormat, RaidConfig,
    RootDeviceHints,
};
use bmo::bmc::BmcAddress;
use bmo::credentials::{Credentials, SecretString};
use bmo::ironic::{ClientConfig, IronicClient, PatchOp, PowerTarget, ProvisionTarget};
use bmo::provisioner::{
    AutomatedCleaningMode, BootMode, DeployRamdisk, Host, HostId, InspectStatus, InspectionMode,
    IronicProvisioner, Outcome, PowerMode, PowerState, PrepareRequest, ProvisionRequest,
    Provisioner, ProvisionerResult, ProvisionerSettings,
};
use serde_json::{Value, json};

use crate::support::{PrivateIronic, Stack, eventually, unique_name};

fn fast_settings() -> ProvisionerSettings {
    ProvisionerSettings {
        short_delay: Duration::from_millis(200),
        long_delay: Duration::from_millis(500),
        ..ProvisionerSettings::default()
    }
}

async fn provisioner() -> IronicProvisioner {
    IronicProvisioner::new(Stack::get().ironic().await, fast_settings())
}

/// A MAC no other test uses (locally administered).
fn unique_mac() -> String {
    use std::hash::{BuildHasher, Hasher};
    let r = std::hash::RandomState::new()
        .build_hasher()
        .finish()
        .to_be_bytes();
    format!(
        "02:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
        r[0], r[1], r[2], r[3], r[4]
    )
}

fn host(name: &str, address: &str, credentials: Credentials) -> Host {
    let stack = Stack::get();
    Host {
        id: HostId::new("bmo-test", name),
        provisioning_id: None,
        bmc: BmcAddress::parse(address).expect("test address parses"),
        credentials,
        credentials_changed: false,
        disable_certificate_verification: false,
        boot_mac: Some(unique_mac()),
        boot_mode: BootMode::Uefi,
        inspection_mode: InspectionMode::Agent,
        cleaning_mode: AutomatedCleaningMode::Metadata,
        architecture: None,
        externally_provisioned: false,
        disable_power_off: false,
        deploy_ramdisk: DeployRamdisk {
            kernel_url: stack.var("DEPLOY_KERNEL_URL").map(str::to_owned),
            ramdisk_url: stack.var("DEPLOY_RAMDISK_URL").map(str::to_owned),
            ..Default::default()
        },
        preprovisioning_network_data: None,
        restart_on_failure: false,
    }
}

fn fake_host(prefix: &str) -> Host {
    let name = unique_name(prefix);
    host(
        &name,
        &format!("fake://{name}"),
        Credentials {
            username: "unused".into(),
            password: SecretString::new("unused"),
        },
    )
}

/// Calls `op` (sleeping as each outcome asks) until it is done; panics with the
/// outcome's error or after `timeout`.
async fn drive<T: std::fmt::Debug, F, Fut>(what: &str, timeout: Duration, mut op: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = ProvisionerResult<T>>,
{
    let started = Instant::now();
    let deadline = started + timeout;
    loop {
        let outcome = op().await.unwrap_or_else(|e| panic!("{what}: {e}"));
        if let Some(error) = &outcome.error {
            panic!("{what} failed: {error}");
        }
        match outcome.requeue_after {
            None => {
                // Shown with --nocapture: how long each step takes on real Ironic.
                eprintln!("timing: {what}: {:.1} s", started.elapsed().as_secs_f64());
                return outcome.value;
            }
            Some(after) => {
                if Instant::now() >= deadline {
                    panic!(
                        "{what} not done after {timeout:?}; last {:?}",
                        outcome.value
                    );
                }
                tokio::time::sleep(after).await;
            }
        }
    }
}

/// Like [`drive`], but expects a failure and returns its message.
async fn drive_to_error<T: std::fmt::Debug, F, Fut>(
    what: &str,
    timeout: Duration,
    mut op: F,
) -> String
where
    F: FnMut() -> Fut,
    Fut: Future<Output = ProvisionerResult<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        let outcome: Outcome<T> = op().await.unwrap_or_else(|e| panic!("{what}: {e}"));
        if let Some(error) = outcome.error {
            return error;
        }
        let Some(after) = outcome.requeue_after else {
            panic!(
                "{what} succeeded but should have failed: {:?}",
                outcome.value
            );
        };
        if Instant::now() >= deadline {
            panic!("{what} did not fail within {timeout:?}");
        }
        tokio::time::sleep(after).await;
    }
}

async fn register(p: &IronicProvisioner, host: &mut Host) -> String {
    let reg = drive("register", Duration::from_secs(90), || p.register(host)).await;
    assert!(reg.credentials_valid, "{reg:?}");
    let id = reg.provisioning_id.expect("node UUID");
    host.provisioning_id = Some(id.clone());
    id
}

async fn node_state(client: &IronicClient, id: &str) -> String {
    client
        .get_node(id)
        .await
        .expect("get node")
        .map(|n| n.provision_state().to_owned())
        .unwrap_or_else(|| "(gone)".into())
}

fn image(checksum_type: ChecksumType) -> Image {
    Image {
        url: "http://127.0.0.1:1/images/ubuntu-24.04.qcow2".into(),
        checksum: Some(match checksum_type {
            ChecksumType::Md5 => "9e107d9d372bb6826bd81d3542a419d6".into(),
            ChecksumType::Sha256 => "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855".into(),
            ChecksumType::Sha512 => "cf83e1357eefb8bdf1542850d66d8007d620e4050b5715dc83f4a921d36ce9ce47d0d13c5d85f2b0ff8318d2877eec2f63b931bd47417a81a538327af927da3e".into(),
            ChecksumType::Auto => "http://127.0.0.1:1/images/ubuntu-24.04.qcow2.sha256sum".into(),
        }),
        checksum_type: Some(checksum_type),
        format: Some(ImageFormat::Qcow2),
        ..Default::default()
    }
}

async fn lifecycle(checksum_type: ChecksumType) {
    let p = provisioner().await;
    let client = p.client().clone();
    let mut h = fake_host("life");
    let id = register(&p, &mut h).await;
    assert_eq!(node_state(&client, &id).await, "manageable");
    let node = client.get_node(&id).await.unwrap().unwrap();
    assert_eq!(node.name.as_deref(), Some(h.id.node_name().as_str()));
    let ports = client.list_node_ports(&id).await.unwrap();
    assert_eq!(ports.len(), 1);
    assert_eq!(Some(ports[0].address.clone()), h.boot_mac);

    // Registering again finds the same node instead of making a second one.
    let again = drive("register again", Duration::from_secs(30), || p.register(&h)).await;
    assert_eq!(again.provisioning_id.as_deref(), Some(id.as_str()));
    let mut by_mac = h.clone();
    by_mac.provisioning_id = None;
    by_mac.id = HostId::new("bmo-test", &h.id.name);
    let found = drive("register by name", Duration::from_secs(30), || {
        p.register(&by_mac)
    })
    .await;
    assert_eq!(found.provisioning_id.as_deref(), Some(id.as_str()));

    let inspected = drive("inspect", Duration::from_secs(60), || p.inspect(&h, false)).await;
    assert!(
        matches!(inspected, InspectStatus::Complete(_)),
        "{inspected:?}"
    );

    if checksum_type == ChecksumType::Md5 {
        // fake-hardware's RAID interface has no clean steps: Ironic's refusal comes
        // back as the reason, every time, until the host is told to start over.
        let raid = PrepareRequest {
            raid: Some(RaidConfig {
                hardware_raid_volumes: Some(vec![HardwareRaidVolume {
                    name: Some("root".into()),
                    level: HardwareRaidLevel::Raid1,
                    size_gibibytes: Some(100),
                    rotational: None,
                    number_of_physical_disks: None,
                    controller: None,
                    physical_disks: Vec::new(),
                }]),
                software_raid_volumes: None,
            }),
            unprepared: true,
            ..Default::default()
        };
        let error = drive_to_error("prepare RAID", Duration::from_secs(60), || {
            p.prepare(&h, &raid)
        })
        .await;
        assert!(error.starts_with("Cleaning failed:"), "{error}");
        assert!(
            error.contains("raid") && error.contains("create_configuration"),
            "{error}"
        );
        let again = p.prepare(&h, &raid).await.expect("prepare again");
        assert_eq!(again.error.as_deref(), Some(error.as_str()));
        assert_eq!(node_state(&client, &id).await, "clean failed");
        let mut retry = h.clone();
        retry.restart_on_failure = true;
        let recovered = p
            .prepare(&retry, &PrepareRequest::default())
            .await
            .expect("recover");
        assert_eq!(recovered.error, None);
        eventually(
            "manageable after clean failed",
            Duration::from_secs(30),
            || async {
                match node_state(&client, &id).await.as_str() {
                    "manageable" => Ok(()),
                    s => Err(s.to_owned()),
                }
            },
        )
        .await;
    }

    // BIOS settings as a manual clean step (fake-hardware's BIOS interface runs it).
    let prepare = PrepareRequest {
        bios_settings: vec![("ProcVirtualization".into(), json!("Enabled"))],
        unprepared: true,
        ..Default::default()
    };
    let first = p.prepare(&h, &prepare).await.expect("prepare");
    assert_eq!(first.error, None);
    assert!(first.value.started, "{first:?}");
    let mut done = prepare.clone();
    done.unprepared = false;
    drive("prepare", Duration::from_secs(60), || p.prepare(&h, &done)).await;
    let node = client.get_node(&id).await.unwrap().unwrap();
    assert_eq!(
        node.provision_state(),
        "manageable",
        "manual cleaning went back to manageable"
    );
    assert_eq!(node.last_error, None);

    let request = ProvisionRequest {
        image: Some(image(checksum_type)),
        root_device_hints: Some(RootDeviceHints {
            device_name: Some("/dev/sda".into()),
            ..Default::default()
        }),
        instance_uuid: uuid_like(),
        user_data: Some(b"#cloud-config\nhostname: test\n".to_vec()),
        ..Default::default()
    };
    drive("provision", Duration::from_secs(120), || {
        p.provision(&h, &request)
    })
    .await;
    let node = client.get_node(&id).await.unwrap().unwrap();
    assert_eq!(node.provision_state(), "active");
    assert_eq!(
        node.instance_uuid.as_deref(),
        Some(request.instance_uuid.as_str())
    );
    let info = &node.instance_info;
    assert_eq!(
        info["image_source"],
        "http://127.0.0.1:1/images/ubuntu-24.04.qcow2"
    );
    assert_eq!(info["image_disk_format"], "qcow2");
    assert_eq!(info["root_device"]["name"], "s== /dev/sda");
    let checksum = request.image.as_ref().unwrap().checksum.clone().unwrap();
    match checksum_type {
        ChecksumType::Auto => {
            assert_eq!(info["image_checksum"], json!(checksum));
            assert!(info.get("image_os_hash_algo").is_none());
        }
        other => {
            let algo = format!("{other:?}").to_lowercase();
            assert_eq!(info["image_os_hash_algo"], json!(algo));
            assert_eq!(info["image_os_hash_value"], json!(checksum));
            assert!(info.get("image_checksum").is_none());
        }
    }
    drive("power on", Duration::from_secs(30), || p.power_on(&h)).await;
    // A settled host's reconcile reads its node once: registration reports what the
    // controller needs (deployed, power) without further calls.
    let settled = drive("register settled", Duration::from_secs(10), || {
        p.register(&h)
    })
    .await;
    assert!(settled.deployed, "an active node needs no adoption");
    assert_eq!(settled.power, PowerState::On);

    if checksum_type == ChecksumType::Sha512 {
        // Cleaning turned off before deprovisioning is synced to Ironic first.
        h.cleaning_mode = AutomatedCleaningMode::Disabled;
    }

    drive("deprovision", Duration::from_secs(120), || {
        p.deprovision(&h)
    })
    .await;
    assert_eq!(node_state(&client, &id).await, "available");
    let node = client.get_node(&id).await.unwrap().unwrap();
    assert_eq!(
        node.automated_clean,
        Some(checksum_type != ChecksumType::Sha512),
        "automated cleaning follows the cleaning mode"
    );
    drive("delete", Duration::from_secs(60), || p.delete(&h)).await;
    assert!(client.get_node(&id).await.unwrap().is_none());
    assert!(
        client
            .find_port_by_mac(h.boot_mac.as_deref().unwrap())
            .await
            .unwrap()
            .is_none()
    );
}

/// A boot port deleted in Ironic behind bmo's back is made again at the first look
/// after the recheck interval (once kept as "seen" for as long as bmo ran).
#[tokio::test]
async fn a_boot_port_deleted_behind_bmos_back_is_made_again() {
    let _shared = crate::support::shared();
    let stack = Stack::get();
    let client = stack.ironic().await;
    let p = IronicProvisioner::new(
        client.clone(),
        ProvisionerSettings {
            boot_port_recheck: Duration::ZERO,
            ..fast_settings()
        },
    );
    let h = fake_host("port");
    let mac = h.boot_mac.clone().unwrap();
    drive("register", Duration::from_secs(60), || p.register(&h)).await;
    let port = client
        .find_port_by_mac(&mac)
        .await
        .unwrap()
        .expect("port made");
    let url = stack
        .ironic_endpoint
        .join(&format!("ports/{}", port.uuid))
        .unwrap();
    let deleted = reqwest::Client::new()
        .delete(url)
        .header("X-OpenStack-Ironic-API-Version", "1.89")
        .send()
        .await
        .unwrap();
    assert!(deleted.status().is_success(), "{deleted:?}");
    assert!(client.find_port_by_mac(&mac).await.unwrap().is_none());
    drive("register again", Duration::from_secs(60), || p.register(&h)).await;
    let again = client
        .find_port_by_mac(&mac)
        .await
        .unwrap()
        .expect("port made again");
    assert_eq!(again.node_uuid, port.node_uuid);
    drive("delete", Duration::from_secs(60), || p.delete(&h)).await;
}

fn uuid_like() -> String {
    let n = unique_name("x");
    let hex = n.trim_start_matches("x-");
    format!("{hex}-0000-4000-8000-{hex}0000")
}

#[tokio::test]
async fn fake_host_lifecycle_with_md5_checksum() {
    let _shared = crate::support::shared();
    lifecycle(ChecksumType::Md5).await;
}

#[tokio::test]
async fn fake_host_lifecycle_with_sha256_checksum() {
    let _shared = crate::support::shared();
    lifecycle(ChecksumType::Sha256).await;
}

#[tokio::test]
async fn fake_host_lifecycle_with_sha512_checksum() {
    let _shared = crate::support::shared();
    lifecycle(ChecksumType::Sha512).await;
}

#[tokio::test]
async fn fake_host_lifecycle_with_checksum_url_and_auto_type() {
    let _shared = crate::support::shared();
    lifecycle(ChecksumType::Auto).await;
}

/// A Dell-like server: 25 GbE with LLDP, NVMe + SATA SSD, both IP families.
fn dell_inventory(mac: &str) -> Value {
    json!({
        "inventory": {
            "interfaces": [
                {"name": "eno12399np0", "mac_address": mac, "ipv4_address": "192.0.2.41",
                 "ipv6_address": "2001:db8::41", "has_carrier": true, "speed_mbps": 25000,
                 "vendor": "0x14e4", "product": "0x16d7", "pci_address": "0000:31:00.0",
                 "driver": "bnxt_en", "lldp": []},
                {"name": "eno12409np1", "mac_address": "b0:7b:25:00:00:02", "has_carrier": false,
                 "vendor": "0x14e4", "product": "0x16d7", "pci_address": "0000:31:00.1", "driver": "bnxt_en"}
            ],
            "cpu": {"model_name": "Intel(R) Xeon(R) Gold 6338 CPU @ 2.00GHz", "frequency": "2000.0000",
                    "count": 128, "architecture": "x86_64", "flags": ["vmx", "avx512f", "aes"], "socket_count": 2},
            "disks": [
                {"name": "/dev/nvme0n1", "model": "Dell Ent NVMe P5600 MU U.2 1.6TB", "size": 1600321314816u64,
                 "rotational": false, "wwn": "eui.01000000000000005cd2e4b5e7a35051", "serial": "PHAB1234001",
                 "vendor": null, "hctl": null, "by_path": "/dev/disk/by-path/pci-0000:c3:00.0-nvme-1"},
                {"name": "/dev/sda", "model": "MZ7LH480HBHQ0D3", "size": 480103981056u64, "rotational": false,
                 "serial": "S4EJNA0N123456", "vendor": "ATA", "hctl": "0:0:0:0", "wwn": "0x5002538e00000001"}
            ],
            "memory": {"total": 270065262592u64, "physical_mb": 262144},
            "system_vendor": {"product_name": "PowerEdge R650", "serial_number": "7XK1234",
                              "manufacturer": "Dell Inc.",
                              "firmware": {"vendor": "Dell Inc.", "version": "1.10.2", "build_date": "02/14/2024"}},
            "boot": {"current_boot_mode": "uefi", "pxe_interface": mac},
            "hostname": "r650-rack3-u17"
        },
        "root_disk": {"name": "/dev/nvme0n1", "size": 1600321314816u64, "rotational": false},
        "parsed_lldp": {"eno12399np0": {"switch_chassis_id": "44:4c:a8:00:00:01", "switch_port_id": "Ethernet17",
                                        "switch_system_name": "tor-rack3"}}
    })
}

/// A small 1 GbE box with a spinning disk, IPv4 only, no reported speed on one NIC.
fn supermicro_inventory(mac: &str) -> Value {
    json!({
        "inventory": {
            "interfaces": [
                {"name": "enp3s0", "mac_address": mac, "ipv4_address": "198.51.100.7", "has_carrier": true,
                 "speed_mbps": 1000, "vendor": "0x8086", "product": "0x1533", "pci_address": "0000:03:00.0"},
                {"name": "enp4s0", "mac_address": "3c:ec:ef:00:00:02", "has_carrier": true,
                 "vendor": "0x8086", "product": "0x1533", "pci_address": "0000:04:00.0"}
            ],
            "cpu": {"model_name": "Intel(R) Xeon(R) E-2236 CPU @ 3.40GHz", "frequency": "3400", "count": 12,
                    "architecture": "x86_64", "flags": ["sse4_2", "aes"]},
            "disks": [
                {"name": "/dev/sda", "model": "ST4000NM0035-1V4", "size": 4000787030016u64, "rotational": true,
                 "serial": "ZC1ABCDE", "vendor": "ATA", "hctl": "1:0:0:0"}
            ],
            "memory": {"total": 33554432000u64, "physical_mb": 32768},
            "system_vendor": {"product_name": "SYS-5019C-M", "serial_number": "S123456X",
                              "manufacturer": "Supermicro",
                              "firmware": {"vendor": "American Megatrends Inc.", "version": "2.1", "build_date": "06/24/2022"}},
            "boot": {"current_boot_mode": "bios", "pxe_interface": mac},
            "hostname": "sm-edge-07"
        },
        "root_disk": {"name": "/dev/sda", "size": 4000787030016u64, "rotational": true}
    })
}

/// Registers a fake host switched to agent inspection with iPXE boot, starts
/// inspection through the provisioner and waits for Ironic's `inspect wait`.
async fn host_waiting_for_ramdisk(p: &IronicProvisioner, prefix: &str) -> (Host, String) {
    let client = p.client();
    let mut h = fake_host(prefix);
    let id = register(p, &mut h).await;
    let node = client.get_node(&id).await.unwrap().unwrap();
    assert!(
        node.driver_info.contains_key("deploy_kernel"),
        "deploy kernel is in driver_info"
    );
    client
        .patch_node(
            &id,
            &[
                PatchOp::set("/inspect_interface", "agent"),
                PatchOp::set("/boot_interface", "ipxe"),
            ],
        )
        .await
        .expect("switch to agent inspection");
    let first = p.inspect(&h, false).await.expect("start inspection");
    assert_eq!(first.error, None);
    assert_eq!(first.value, InspectStatus::Started);
    eventually(
        "node to wait for the ramdisk",
        Duration::from_secs(60),
        || async {
            let n = client
                .get_node(&id)
                .await
                .map_err(|e| e.to_string())?
                .ok_or("gone")?;
            match n.provision_state() {
                "inspect wait" => Ok(()),
                s => Err(format!("{s}, last_error {:?}", n.last_error)),
            }
        },
    )
    .await;
    let waiting = p.inspect(&h, false).await.expect("inspect while waiting");
    assert_eq!(waiting.value, InspectStatus::InProgress);
    assert!(waiting.requeue_after.is_some());
    (h, id)
}

#[tokio::test]
async fn inspection_maps_a_dell_inventory_that_ironic_processed() {
    let _shared = crate::support::shared();
    let p = provisioner().await;
    let (h, id) = host_waiting_for_ramdisk(&p, "insp-dell").await;
    let mac = h.boot_mac.clone().unwrap();
    p.client()
        .continue_inspection(&dell_inventory(&mac))
        .await
        .expect("Ironic accepts the inventory");
    let status = drive("inspect", Duration::from_secs(60), || p.inspect(&h, false)).await;
    let InspectStatus::Complete(hw) = status else {
        panic!("{status:?}")
    };
    let node = p.client().get_node(&id).await.unwrap().unwrap();
    assert_eq!(node.provision_state(), "manageable");
    assert_eq!(node.properties["cpu_arch"], "x86_64", "Ironic's hooks ran");

    let some = |s: &str| Some(s.to_owned());
    let vendor = hw.system_vendor.clone().unwrap();
    assert_eq!(vendor.manufacturer, some("Dell Inc."));
    assert_eq!(vendor.product_name, some("PowerEdge R650"));
    assert_eq!(vendor.serial_number, some("7XK1234"));
    let bios = hw.firmware.clone().and_then(|f| f.bios).unwrap();
    assert_eq!(bios.vendor, some("Dell Inc."));
    assert_eq!(bios.version, some("1.10.2"));
    assert_eq!(bios.date, some("02/14/2024"));
    assert_eq!(hw.hostname, some("r650-rack3-u17"));
    assert_eq!(hw.ram_mebibytes, Some(262144));
    let cpu = hw.cpu.clone().unwrap();
    assert_eq!(cpu.arch, some("x86_64"));
    assert_eq!(cpu.count, Some(128));
    assert_eq!(cpu.clock_megahertz, Some(2000.0));
    assert_eq!(cpu.flags, vec!["aes", "avx512f", "vmx"]);
    // eno12399np0 twice (IPv4, IPv6), eno12409np1 once.
    assert_eq!(hw.nics.len(), 3, "{:?}", hw.nics);
    let boot: Vec<_> = hw.nics.iter().filter(|n| n.mac == some(&mac)).collect();
    assert_eq!(boot.len(), 2);
    assert_eq!(boot[0].name, some("eno12399np0"));
    assert_eq!(boot[0].ip, some("192.0.2.41"));
    assert_eq!(boot[1].ip, some("2001:db8::41"));
    assert_eq!(boot[0].speed_gbps, Some(25));
    assert_eq!(boot[0].model, some("0x14e4 0x16d7"));
    assert_eq!(boot[0].pci_address, some("0000:31:00.0"));
    let lldp = boot[0]
        .lldp
        .as_ref()
        .expect("LLDP passed through plugin_data");
    assert_eq!(lldp.switch_system_name, some("tor-rack3"));
    let other = hw
        .nics
        .iter()
        .find(|n| n.name == some("eno12409np1"))
        .unwrap();
    assert_eq!(other.speed_gbps, None, "no speed reported, none invented");
    assert_eq!(other.ip, None);
    assert_eq!(hw.storage.len(), 2);
    assert_eq!(
        hw.storage[0].name,
        some("/dev/disk/by-path/pci-0000:c3:00.0-nvme-1")
    );
    assert_eq!(hw.storage[0].disk_type, Some(DiskType::Nvme));
    assert_eq!(hw.storage[0].size_bytes, Some(1600321314816));
    assert_eq!(hw.storage[0].serial_number, some("PHAB1234001"));
    assert_eq!(hw.storage[1].name, some("/dev/sda"));
    assert_eq!(hw.storage[1].disk_type, Some(DiskType::Ssd));
    assert_eq!(hw.storage[1].hctl, some("0:0:0:0"));

    drive("delete", Duration::from_secs(30), || p.delete(&h)).await;
}

#[tokio::test]
async fn inspection_maps_a_small_server_inventory() {
    let _shared = crate::support::shared();
    let p = provisioner().await;
    let (h, _) = host_waiting_for_ramdisk(&p, "insp-sm").await;
    let mac = h.boot_mac.clone().unwrap();
    p.client()
        .continue_inspection(&supermicro_inventory(&mac))
        .await
        .expect("Ironic accepts the inventory");
    let status = drive("inspect", Duration::from_secs(60), || p.inspect(&h, false)).await;
    let InspectStatus::Complete(hw) = status else {
        panic!("{status:?}")
    };
    let some = |s: &str| Some(s.to_owned());
    assert_eq!(
        hw.system_vendor.clone().unwrap().manufacturer,
        some("Supermicro")
    );
    let bios = hw.firmware.clone().and_then(|f| f.bios).unwrap();
    assert_eq!(bios.vendor, some("American Megatrends Inc."));
    assert_eq!(bios.date, some("06/24/2022"));
    assert_eq!(hw.ram_mebibytes, Some(32768));
    assert_eq!(hw.cpu.clone().unwrap().clock_megahertz, Some(3400.0));
    assert_eq!(hw.nics.len(), 2);
    assert_eq!(hw.nics[0].speed_gbps, Some(1), "1000 Mbps is 1 Gbps, not 0");
    assert_eq!(hw.nics[0].name, some("enp3s0"));
    assert_eq!(hw.storage[0].disk_type, Some(DiskType::Hdd));
    assert!(hw.storage[0].rotational);
    assert_eq!(hw.hostname, some("sm-edge-07"));

    // A refresh starts a new inspection.
    let again = p.inspect(&h, true).await.expect("re-inspect");
    assert_eq!(again.value, InspectStatus::Started);
    drive("delete while inspecting", Duration::from_secs(60), || {
        p.delete(&h)
    })
    .await;
}

#[tokio::test]
async fn live_iso_and_secure_boot_reach_ironic() {
    let _shared = crate::support::shared();
    let p = provisioner().await;
    let client = p.client().clone();
    let mut h = fake_host("live-iso");
    h.boot_mode = BootMode::UefiSecureBoot;
    h.inspection_mode = InspectionMode::Disabled;
    let id = register(&p, &mut h).await;
    let request = ProvisionRequest {
        image: Some(Image {
            url: "http://127.0.0.1:1/images/live.iso".into(),
            format: Some(ImageFormat::LiveIso),
            ..Default::default()
        }),
        instance_uuid: uuid_like(),
        ..Default::default()
    };
    drive("provision live ISO", Duration::from_secs(120), || {
        p.provision(&h, &request)
    })
    .await;
    let node = client.get_node(&id).await.unwrap().unwrap();
    assert_eq!(node.provision_state(), "active");
    assert_eq!(
        node.instance_info["boot_iso"],
        "http://127.0.0.1:1/images/live.iso"
    );
    assert!(node.instance_info.get("image_source").is_none());
    assert_eq!(node.instance_info["capabilities"]["secure_boot"], "true");
    assert_eq!(
        node.properties["capabilities"],
        "boot_mode:uefi,secure_boot:true"
    );
    assert_eq!(node.inspect_interface.as_deref(), Some("no-inspect"));
    drive("delete from active", Duration::from_secs(30), || {
        p.delete(&h)
    })
    .await;
    assert!(client.get_node(&id).await.unwrap().is_none());
}

#[tokio::test]
async fn delete_from_enroll_and_from_inspect_failed() {
    let _shared = crate::support::shared();
    let p = provisioner().await;
    let client = p.client().clone();

    // enroll: the first register call only creates the node.
    let h = fake_host("del-enroll");
    let first = p.register(&h).await.expect("register");
    assert_eq!(first.error, None);
    let id = first.value.provisioning_id.clone().unwrap();
    assert_eq!(node_state(&client, &id).await, "enroll");
    drive("delete from enroll", Duration::from_secs(30), || {
        p.delete(&h)
    })
    .await;
    assert!(client.get_node(&id).await.unwrap().is_none());

    // inspect failed: abort an inspection waiting for a ramdisk that never comes.
    let (mut h, id) = host_waiting_for_ramdisk(&p, "del-failed").await;
    client
        .set_provision_state(&id, ProvisionTarget::Abort)
        .await
        .expect("abort");
    eventually("inspect failed", Duration::from_secs(30), || async {
        match node_state(&client, &id).await.as_str() {
            "inspect failed" => Ok(()),
            s => Err(s.to_owned()),
        }
    })
    .await;
    h.provisioning_id = Some(id.clone());
    drive(
        "delete from inspect failed",
        Duration::from_secs(30),
        || p.delete(&h),
    )
    .await;
    assert!(client.get_node(&id).await.unwrap().is_none());
    // Deleting what is gone is done, not an error.
    drive("delete again", Duration::from_secs(5), || p.delete(&h)).await;
}

fn redfish_host(index: usize, password: &str) -> Host {
    let stack = Stack::get();
    let system = &stack.redfish_system_ids[index];
    let url = stack.redfish_url.as_str().trim_end_matches('/');
    let url = url.replacen("http://", "redfish+http://", 1);
    let mut h = host(
        &unique_name("redfish"),
        &format!("{url}/redfish/v1/Systems/{system}"),
        Credentials {
            username: stack.redfish_credentials.username.clone(),
            password: SecretString::new(password),
        },
    );
    h.boot_mac = Some(stack.redfish_system_macs[index].clone());
    h
}

#[tokio::test]
async fn redfish_wrong_password_is_a_clear_error_until_fixed_then_power_works() {
    let _shared = crate::support::shared();
    let stack = Stack::get();
    let p = provisioner().await;
    let client = p.client().clone();
    let mut h = redfish_host(0, "wrong-password");

    let error = drive_to_error(
        "register with a wrong password",
        Duration::from_secs(90),
        || p.register(&h),
    )
    .await;
    assert!(
        error.starts_with("Ironic cannot manage the host through its BMC:"),
        "{error}"
    );
    assert!(
        error.contains("401")
            || error.to_lowercase().contains("unauthorized")
            || error.to_lowercase().contains("authentic"),
        "{error}"
    );
    assert!(!error.contains("wrong-password"), "{error}");
    assert!(
        error.ends_with("Check the username and password in the secret named by credentialsName."),
        "{error}"
    );
    eprintln!("registration error as the user sees it: {error}");
    // The same error every time, not only the first.
    let again = p.register(&h).await.expect("register again");
    assert_eq!(again.error.as_deref(), Some(error.as_str()));

    // The controller says the credentials changed once; the call that sends them
    // reports a change, and later calls check them.
    h.credentials.password = stack.redfish_credentials.password.clone();
    h.credentials_changed = true;
    let sent = p
        .register(&h)
        .await
        .expect("register with the right password");
    assert_eq!(sent.error, None);
    assert!(sent.changed);
    h.credentials_changed = false;
    let id = register(&p, &mut h).await;
    assert_eq!(node_state(&client, &id).await, "manageable");
    let node = client.get_node(&id).await.unwrap().unwrap();
    assert_eq!(node.driver, "redfish");
    assert_eq!(node.boot_interface.as_deref(), Some("ipxe"));

    // A new address (another system of the emulator) is sent to Ironic.
    let system_1 = &stack.redfish_system_ids[1];
    let moved = h
        .bmc
        .original
        .replace(&stack.redfish_system_ids[0], system_1);
    h.bmc = BmcAddress::parse(&moved).unwrap();
    drive(
        "register with a new address",
        Duration::from_secs(60),
        || p.register(&h),
    )
    .await;
    let node = client.get_node(&id).await.unwrap().unwrap();
    assert_eq!(
        node.driver_info["redfish_system_id"],
        json!(format!("/redfish/v1/Systems/{system_1}"))
    );
    assert_eq!(node.provision_state(), "manageable");
    h.bmc = BmcAddress::parse(
        &h.bmc
            .original
            .replace(system_1, &stack.redfish_system_ids[0]),
    )
    .unwrap();
    drive(
        "register with the old address",
        Duration::from_secs(60),
        || p.register(&h),
    )
    .await;

    // A wrong password on a managed node: Ironic does not re-verify by itself, bmo
    // asks the BMC, and the reason stays until the credentials change again.
    h.credentials.password = SecretString::new("wrong-again");
    h.credentials_changed = true;
    let broken = p
        .register(&h)
        .await
        .expect("register with a wrong password");
    let error = broken.error.expect("the new password is refused");
    assert!(
        error.starts_with("Ironic cannot reach the BMC with the new settings:"),
        "{error}"
    );
    assert!(error.contains("401"), "{error}");
    assert!(!error.contains("wrong-again"), "{error}");
    h.credentials_changed = false;
    for _ in 0..2 {
        let again = p.register(&h).await.expect("register again");
        assert_eq!(
            again.error.as_deref(),
            Some(error.as_str()),
            "reported every time"
        );
    }
    h.credentials.password = stack.redfish_credentials.password.clone();
    h.credentials_changed = true;
    let fixed = p
        .register(&h)
        .await
        .expect("register with the right password");
    assert_eq!(fixed.error, None);
    assert!(fixed.value.credentials_valid);
    h.credentials_changed = false;
    drive("register after the fix", Duration::from_secs(10), || {
        p.register(&h)
    })
    .await;

    drive("power on", Duration::from_secs(90), || p.power_on(&h)).await;
    assert_eq!(
        drive("power state", Duration::from_secs(5), || p.register(&h))
            .await
            .power,
        PowerState::On
    );
    assert_eq!(
        redfish_power(stack, 0).await,
        "On",
        "the emulated BMC is on"
    );
    drive("soft power off", Duration::from_secs(120), || {
        p.power_off(&h, PowerMode::Soft)
    })
    .await;
    assert_eq!(redfish_power(stack, 0).await, "Off");

    drive("delete", Duration::from_secs(30), || p.delete(&h)).await;
    assert!(client.get_node(&id).await.unwrap().is_none());
}

/// sushy-emulator's fake systems have no Processors resource, so Ironic's
/// out-of-band inspection fails: its reason must reach the user, every time, and a
/// retry must start inspection again.
#[tokio::test]
async fn failed_fast_inspection_reports_ironics_reason_every_time() {
    let _shared = crate::support::shared();
    let p = provisioner().await;
    let client = p.client().clone();
    let mut h = redfish_host(2, Stack::get().redfish_credentials.password.expose());
    h.inspection_mode = InspectionMode::Fast;
    let id = register(&p, &mut h).await;
    let node = client.get_node(&id).await.unwrap().unwrap();
    assert_eq!(node.inspect_interface.as_deref(), Some("redfish"));
    let error = drive_to_error("fast inspection", Duration::from_secs(120), || {
        p.inspect(&h, false)
    })
    .await;
    assert!(error.starts_with("Inspection failed: "), "{error}");
    assert!(error.contains("Processors"), "{error}");
    for _ in 0..2 {
        let again = p.inspect(&h, false).await.expect("inspect again");
        assert_eq!(
            again.error.as_deref(),
            Some(error.as_str()),
            "same reason every time"
        );
    }
    let mut retry = h.clone();
    retry.restart_on_failure = true;
    let restarted = p.inspect(&retry, false).await.expect("retry");
    assert_eq!(restarted.value, InspectStatus::Started, "{restarted:?}");
    drive("delete", Duration::from_secs(60), || p.delete(&h)).await;
    assert!(client.get_node(&id).await.unwrap().is_none());
}

async fn redfish_power(stack: &Stack, index: usize) -> String {
    let creds = &stack.redfish_credentials;
    let url = stack
        .redfish_url
        .join(&format!(
            "redfish/v1/Systems/{}",
            stack.redfish_system_ids[index]
        ))
        .unwrap();
    let doc: Value = reqwest::Client::new()
        .get(url)
        .basic_auth(&creds.username, Some(creds.password.expose()))
        .send()
        .await
        .expect("emulator answers")
        .json()
        .await
        .expect("JSON");
    doc["PowerState"].as_str().unwrap_or_default().to_owned()
}

#[tokio::test]
async fn register_adopts_an_unnamed_node_with_the_boot_mac_and_refuses_a_named_one() {
    let _shared = crate::support::shared();
    let p = provisioner().await;
    let client = p.client().clone();

    // An unnamed node that has the host's boot MAC is the host's node.
    let mut h = fake_host("by-mac");
    let orphan = client
        .create_node(&bmo::ironic::NodeCreate {
            driver: "fake-hardware".into(),
            ..Default::default()
        })
        .await
        .expect("create unnamed node");
    client
        .create_port(&orphan.uuid, h.boot_mac.as_deref().unwrap())
        .await
        .expect("port");
    let id = register(&p, &mut h).await;
    assert_eq!(id, orphan.uuid, "found by MAC, not duplicated");
    let node = client.get_node(&id).await.unwrap().unwrap();
    assert_eq!(node.name.as_deref(), Some(h.id.node_name().as_str()));

    // A node that belongs to another host by name is a conflict, said every time.
    let mut thief = fake_host("thief");
    thief.boot_mac = h.boot_mac.clone();
    let error = drive_to_error("register a MAC in use", Duration::from_secs(10), || {
        p.register(&thief)
    })
    .await;
    assert!(
        error.contains(h.boot_mac.as_deref().unwrap()) && error.contains(&h.id.node_name()),
        "{error}"
    );
    let again = p.register(&thief).await.unwrap();
    assert_eq!(again.error.as_deref(), Some(error.as_str()));
    assert!(
        client
            .get_node(&thief.id.node_name())
            .await
            .unwrap()
            .is_none()
    );

    drive("delete", Duration::from_secs(30), || p.delete(&h)).await;
}

#[tokio::test]
async fn disable_power_off_and_preprovisioning_network_data_reach_ironic() {
    let _shared = crate::support::shared();
    let p = provisioner().await;
    let mut h = fake_host("no-off");
    h.disable_power_off = true;
    h.preprovisioning_network_data = Some(b"links:\n- id: eno1\n  type: phy\n  ethernet_mac_address: 02:00:00:00:00:01\nnetworks: []\nservices: []\n".to_vec());
    let id = register(&p, &mut h).await;
    let node = p.client().get_node(&id).await.unwrap().unwrap();
    assert!(node.disable_power_off, "Ironic knows not to power it off");
    assert_eq!(
        node.network_data.as_ref().unwrap()["links"][0]["id"],
        "eno1",
        "YAML network data reached Ironic"
    );
    // Changed network data is sent again on the next registration.
    h.preprovisioning_network_data = Some(
        br#"{"links": [], "networks": [], "services": [{"type": "dns", "address": "192.0.2.53"}]}"#
            .to_vec(),
    );
    drive("re-register", Duration::from_secs(30), || p.register(&h)).await;
    let node = p.client().get_node(&id).await.unwrap().unwrap();
    assert_eq!(
        node.network_data.as_ref().unwrap()["services"][0]["address"],
        "192.0.2.53"
    );
    for _ in 0..2 {
        let o = p.power_off(&h, PowerMode::Hard).await.expect("power off");
        assert!(
            o.error
                .as_deref()
                .unwrap_or_default()
                .contains("disablePowerOff"),
            "{o:?}"
        );
    }
    drive("delete", Duration::from_secs(30), || p.delete(&h)).await;
}

#[tokio::test]
async fn libvirt_without_boot_mac_is_refused_with_the_reason() {
    let _shared = crate::support::shared();
    let p = provisioner().await;
    let mut h = fake_host("libvirt");
    h.bmc = BmcAddress::parse("libvirt://127.0.0.1:6233/").unwrap();
    h.boot_mac = None;
    let outcome = p.register(&h).await.expect("register");
    let error = outcome.error.expect("refused");
    assert!(error.contains("needs bootMACAddress"), "{error}");
    assert!(
        p.client()
            .get_node(&h.id.node_name())
            .await
            .unwrap()
            .is_none(),
        "no node was created"
    );
}

#[tokio::test]
async fn a_provisioned_host_is_readopted_after_the_ironic_database_is_wiped() {
    let _shared = crate::support::shared();
    let ironic = PrivateIronic::start("wipe", &[]);
    let p = IronicProvisioner::new(ironic.client().await, fast_settings());
    let mut h = fake_host("readopt");
    let old_id = register(&p, &mut h).await;
    drive("inspect", Duration::from_secs(60), || p.inspect(&h, false)).await;
    let request = ProvisionRequest {
        image: Some(image(ChecksumType::Sha256)),
        instance_uuid: uuid_like(),
        ..Default::default()
    };
    drive("provision", Duration::from_secs(120), || {
        p.provision(&h, &request)
    })
    .await;

    ironic.wipe();
    let client = ironic.client().await;
    assert!(
        client.list_nodes().await.unwrap().is_empty(),
        "the database is empty"
    );
    let p = IronicProvisioner::new(client.clone(), fast_settings());

    // The controller still has the old UUID; the node is recreated and adopted.
    let reg = drive("re-register", Duration::from_secs(60), || p.register(&h)).await;
    assert!(!reg.deployed, "a re-created node must be adopted");
    let new_id = reg.provisioning_id.unwrap();
    assert_ne!(new_id, old_id);
    h.provisioning_id = Some(new_id.clone());
    let mut seen = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let o = p.adopt(&h, &request).await.expect("adopt");
        assert_eq!(o.error, None);
        let state = node_state(&client, &new_id).await;
        if seen.last() != Some(&state) {
            seen.push(state);
        }
        if o.is_done() {
            break;
        }
        assert!(Instant::now() < deadline, "adoption not done: {seen:?}");
        tokio::time::sleep(o.requeue_after.unwrap()).await;
    }
    assert!(
        !seen
            .iter()
            .any(|s| s == "deploying" || s == "wait call-back" || s == "available"),
        "re-adoption must not deploy: {seen:?}"
    );
    let node = client.get_node(&new_id).await.unwrap().unwrap();
    assert_eq!(node.provision_state(), "active");
    assert_eq!(
        node.instance_info["image_source"],
        json!(request.image.as_ref().unwrap().url)
    );
    assert_eq!(
        node.instance_uuid.as_deref(),
        Some(request.instance_uuid.as_str())
    );

    // Provisioning an active host is already done: nothing is redeployed.
    let o = p.provision(&h, &request).await.expect("provision");
    assert!(o.is_done() && !o.changed, "{o:?}");

    drive("delete from active", Duration::from_secs(30), || {
        p.delete(&h)
    })
    .await;
    assert!(client.get_node(&new_id).await.unwrap().is_none());
}

#[tokio::test]
async fn a_node_locked_by_ironic_is_retried_not_failed() {
    let _shared = crate::support::shared();
    // Every fake power change holds the node's lock for 8 seconds.
    let ironic = PrivateIronic::start("locked", &["[fake]", "power_delay = 8"]);
    let mut config = ClientConfig::new(ironic.endpoint.clone());
    config.retry_base_delay = Duration::from_millis(500);
    config.max_attempts = 10;
    let client = IronicClient::connect(config).await.expect("connect");
    let p = IronicProvisioner::new(client.clone(), fast_settings());
    let mut h = fake_host("locked");
    let id = register(&p, &mut h).await;

    client
        .set_power_state(&id, PowerTarget::On, None)
        .await
        .expect("power on");
    eventually(
        "the power change to hold the lock",
        Duration::from_secs(10),
        || async {
            let n = client
                .get_node(&id)
                .await
                .map_err(|e| e.to_string())?
                .ok_or("gone")?;
            n.reservation
                .clone()
                .map(drop)
                .ok_or_else(|| "not reserved yet".to_owned())
        },
    )
    .await;

    // New credentials mean a PATCH, which the conductor cannot do while locked.
    h.credentials_changed = true;
    let before = client.busy_retries();
    let started = Instant::now();
    let outcome = p.register(&h).await.expect("register during the lock");
    assert_eq!(outcome.error, None, "a locked node is not a failure");
    assert!(
        client.busy_retries() > before,
        "Ironic answered 409 and bmo retried"
    );
    assert!(
        started.elapsed() >= Duration::from_secs(2),
        "the call waited for the lock"
    );
    let node = client.get_node(&id).await.unwrap().unwrap();
    assert_eq!(node.provision_state(), "manageable");
    h.credentials_changed = false;
    eventually("power on to finish", Duration::from_secs(30), || async {
        let n = client
            .get_node(&id)
            .await
            .map_err(|e| e.to_string())?
            .ok_or("gone")?;
        (n.power_state.as_deref() == Some("power on") && n.target_power_state.is_none())
            .then_some(())
            .ok_or_else(|| format!("{:?} → {:?}", n.power_state, n.target_power_state))
    })
    .await;
    drive("delete", Duration::from_secs(60), || p.delete(&h)).await;
}

/// The shared view of nodes relies on Ironic listing nodes by provision change,
/// newest first, with never-changed nodes last, and on the list stopping at the first
/// node older than asked.
#[tokio::test]
async fn nodes_list_by_provision_change_newest_first_down_to_a_cutoff() {
    let _shared = crate::support::shared();
    let client = Stack::get().ironic().await;
    let mut uuids = Vec::new();
    for _ in 0..3 {
        let node = client
            .create_node(&bmo::ironic::NodeCreate {
                name: unique_name("changes"),
                driver: "fake-hardware".into(),
                ..Default::default()
            })
            .await
            .expect("create node");
        uuids.push(node.uuid);
    }
    let [first, second, untouched] = uuids.as_slice() else {
        unreachable!()
    };
    for uuid in [first, second] {
        client
            .set_provision_state(uuid, ProvisionTarget::Manage)
            .await
            .expect("manage");
        eventually("manageable", Duration::from_secs(30), || async {
            let state = node_state(&client, uuid).await;
            (state == "manageable").then_some(()).ok_or(state)
        })
        .await;
    }
    let changed_at = |node: &bmo::ironic::Node| -> Option<k8s_openapi::jiff::Timestamp> {
        node.provision_updated_at.as_deref()?.parse().ok()
    };
    let cutoff = changed_at(&client.get_node(first).await.unwrap().unwrap());
    assert!(
        cutoff.is_some(),
        "a managed node has a provision change stamp"
    );

    let listed = client
        .list_nodes_by_provision_change(&["uuid", "driver", "provision_state"], |node| {
            changed_at(node) >= cutoff
        })
        .await
        .expect("list changes");
    let position = |uuid: &str| listed.iter().position(|n| n.uuid == uuid);
    let (Some(first_at), Some(second_at)) = (position(first), position(second)) else {
        panic!("both managed nodes are listed: {listed:?}")
    };
    assert!(second_at < first_at, "the newer change comes first");
    assert_eq!(
        position(untouched),
        None,
        "a node that never changed is not listed"
    );
    assert!(
        listed
            .windows(2)
            .all(|pair| changed_at(&pair[0]) >= changed_at(&pair[1])),
        "newest first"
    );
    for uuid in &uuids {
        client.delete_node(uuid).await.expect("delete");
    }
}
