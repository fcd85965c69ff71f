//! Pure translations of provisioning input into Ironic's `instance_info`, deploy
//! interface, deploy steps, config drive and manual clean steps.

use serde_json::{Map, Value, json};

use crate::api::{
    ChecksumType, HardwareDetails, HardwareRaidVolume, Image, RootDeviceHints, SoftwareRaidVolume,
};

use super::types::{BootMode, HostId, PrepareRequest, ProvisionRequest};

/// What manual cleaning for a [`PrepareRequest`] needs from Ironic.
#[derive(Debug, Clone, PartialEq)]
pub struct CleanPlan {
    /// For `PUT /v1/nodes/{id}/states/raid`.
    pub target_raid_config: Option<Value>,
    /// Software RAID is built by the ramdisk: the node needs `raid_interface=agent`.
    pub software_raid: bool,
    pub steps: Vec<Value>,
}

fn size_gb(size: Option<i64>) -> Value {
    size.filter(|&s| s > 0).map_or(json!("MAX"), |s| json!(s))
}

pub fn clean_plan(request: &PrepareRequest) -> CleanPlan {
    let mut plan = CleanPlan {
        target_raid_config: None,
        software_raid: false,
        steps: Vec::new(),
    };
    if let Some(raid) = &request.raid {
        if let Some(software) = &raid.software_raid_volumes {
            plan.software_raid = true;
            plan.target_raid_config = Some(json!({"logical_disks": software_raid_disks(software)}));
            plan.steps
                .push(json!({"interface": "raid", "step": "delete_configuration"}));
            plan.steps
                .push(json!({"interface": "deploy", "step": "erase_devices_metadata"}));
            if !software.is_empty() {
                plan.steps
                    .push(json!({"interface": "raid", "step": "create_configuration"}));
            }
        } else if let Some(hardware) = &raid.hardware_raid_volumes {
            plan.target_raid_config = Some(json!({"logical_disks": hardware_raid_disks(hardware)}));
            plan.steps
                .push(json!({"interface": "raid", "step": "delete_configuration"}));
            if !hardware.is_empty() {
                plan.steps
                    .push(json!({"interface": "raid", "step": "create_configuration"}));
            }
        }
    }
    plan.steps.extend(firmware_steps(
        &request.bios_settings,
        &request.firmware_updates,
    ));
    if request.full_disk_wipe {
        plan.steps
            .push(json!({"interface": "deploy", "step": "erase_devices"}));
    }
    plan
}

/// Ironic's `logical_disks` for software RAID volumes; the first is the root volume.
fn software_raid_disks(volumes: &[SoftwareRaidVolume]) -> Vec<Value> {
    volumes
        .iter()
        .enumerate()
        .map(|(i, v)| {
            json!({
                "size_gb": size_gb(v.size_gibibytes),
                "raid_level": v.level,
                "controller": "software",
                "is_root_volume": i == 0,
                "physical_disks": v.physical_disks.iter().map(|h| Value::Object(root_device(h))).collect::<Vec<_>>(),
            })
        })
        .collect()
}

/// Ironic's `logical_disks` for hardware RAID volumes, with only the fields each
/// volume sets; the first is the root volume.
fn hardware_raid_disks(volumes: &[HardwareRaidVolume]) -> Vec<Value> {
    volumes
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let mut d = json!({
                "size_gb": size_gb(v.size_gibibytes),
                "raid_level": v.level,
                "is_root_volume": i == 0,
            });
            if let Some(name) = &v.name {
                d["volume_name"] = json!(name);
            }
            if let Some(c) = &v.controller {
                d["controller"] = json!(c);
            }
            if !v.physical_disks.is_empty() {
                d["physical_disks"] = json!(v.physical_disks);
            }
            if let Some(n) = v
                .number_of_physical_disks
                .and_then(|n| u32::try_from(n).ok())
            {
                d["number_of_physical_disks"] = json!(n);
            }
            if let Some(r) = v.rotational {
                d["disk_type"] = json!(if r { "hdd" } else { "ssd" });
            }
            d
        })
        .collect()
}

/// The BIOS `apply_configuration` and firmware `update` steps for `bios_settings`
/// and `updates` (none for what is empty): clean steps when preparing, service steps
/// on a provisioned host; Ironic takes the same shape for both.
pub fn firmware_steps(
    bios_settings: &[(String, Value)],
    updates: &[crate::api::firmware::FirmwareUpdate],
) -> Vec<Value> {
    let mut steps = Vec::new();
    if !bios_settings.is_empty() {
        let settings: Vec<Value> = bios_settings
            .iter()
            .map(|(name, value)| json!({"name": name, "value": value}))
            .collect();
        steps.push(json!({"interface": "bios", "step": "apply_configuration", "args": {"settings": settings}}));
    }
    if !updates.is_empty() {
        let settings: Vec<Value> = updates
            .iter()
            .map(|u| json!({"component": u.component, "url": u.url}))
            .collect();
        steps.push(
            json!({"interface": "firmware", "step": "update", "args": {"settings": settings}}),
        );
    }
    steps
}

/// Where an input could not be used; becomes the outcome's error sentence.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct InputError {
    pub field: &'static str,
    pub message: String,
}

/// What Ironic needs to deploy a request.
#[derive(Debug, Clone, PartialEq)]
pub struct DeploySettings {
    pub instance_info: Map<String, Value>,
    pub deploy_interface: &'static str,
    pub deploy_steps: Option<Vec<Value>>,
    /// `None` for live ISOs, which have no disk to put a config drive on.
    pub config_drive: Option<Value>,
}

/// Ironic's root device hints (`instance_info.root_device`).
pub fn root_device(hints: &RootDeviceHints) -> Map<String, Value> {
    let mut m = Map::new();
    let mut eq = |key: &str, v: &Option<String>| {
        if let Some(v) = v.as_deref().filter(|v| !v.is_empty()) {
            m.insert(key.into(), json!(format!("s== {v}")));
        }
    };
    if let Some(name) = hints.device_name.as_deref().filter(|n| !n.is_empty()) {
        let key = if name.starts_with("/dev/disk/by-path/") {
            "by_path"
        } else {
            "name"
        };
        eq(key, &Some(name.to_owned()));
    }
    eq("hctl", &hints.hctl);
    eq("serial", &hints.serial_number);
    eq("wwn", &hints.wwn);
    eq("wwn_with_extension", &hints.wwn_with_extension);
    eq("wwn_vendor_extension", &hints.wwn_vendor_extension);
    if let Some(v) = hints.model.as_deref().filter(|v| !v.is_empty()) {
        m.insert("model".into(), json!(format!("<in> {v}")));
    }
    if let Some(v) = hints.vendor.as_deref().filter(|v| !v.is_empty()) {
        m.insert("vendor".into(), json!(format!("<in> {v}")));
    }
    if let Some(gb) = hints.min_size_gigabytes.filter(|&g| g > 0) {
        m.insert("size".into(), json!(format!(">= {gb}")));
    }
    if let Some(r) = hints.rotational {
        m.insert("rotational".into(), json!(r.to_string()));
    }
    m
}

/// Parses JSON or YAML bytes from a secret into a JSON value.
pub fn parse_document(field: &'static str, bytes: &[u8]) -> Result<Value, InputError> {
    let text = std::str::from_utf8(bytes).map_err(|_| InputError {
        field,
        message: "is not UTF-8 text; write it as JSON or YAML".into(),
    })?;
    if let Ok(v) = serde_json::from_str::<Value>(text) {
        return Ok(v);
    }
    serde_saphyr::from_str::<Value>(text).map_err(|e| InputError {
        field,
        message: format!(
            "is neither JSON nor YAML ({}); fix the secret",
            e.to_string().lines().next().unwrap_or_default()
        ),
    })
}

/// The default network data when none is given: every inspected NIC up with DHCP.
pub fn default_network_data(hardware: &HardwareDetails) -> Value {
    let mut links = Vec::new();
    let mut networks = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    for nic in &hardware.nics {
        let Some(mac) = nic.mac.as_deref().filter(|m| !m.is_empty()) else {
            continue;
        };
        let v6 = nic.ip.as_deref().is_some_and(|ip| ip.contains(':'));
        let id = nic.name.as_deref().filter(|n| !n.is_empty()).unwrap_or(mac);
        if seen.insert(mac.to_owned()) {
            links.push(json!({"id": id, "type": "phy", "ethernet_mac_address": mac}));
        }
        let kind = if v6 { "ipv6_dhcp" } else { "ipv4_dhcp" };
        if seen.insert(format!("{mac}/{kind}")) {
            networks.push(
                json!({"id": format!("{id}-{kind}"), "type": kind, "link": id, "network_id": ""}),
            );
        }
    }
    json!({"links": links, "networks": networks, "services": []})
}

pub fn deploy_settings(
    host: &HostId,
    boot_mode: BootMode,
    request: &ProvisionRequest,
) -> Result<DeploySettings, InputError> {
    let mut info = Map::new();
    let capabilities = if boot_mode == BootMode::UefiSecureBoot {
        json!({"secure_boot": "true"})
    } else {
        json!({})
    };
    info.insert("capabilities".into(), capabilities);
    if let Some(hints) = &request.root_device_hints {
        let rd = root_device(hints);
        if !rd.is_empty() {
            info.insert("root_device".into(), Value::Object(rd));
        }
    }
    let live_iso = request.image.as_ref().is_some_and(|i| i.is_live_iso());
    if let Some(image) = &request.image {
        if image.url.is_empty() {
            return Err(InputError {
                field: "image.url",
                message: "is empty; give the URL of the image to write".into(),
            });
        }
        if live_iso {
            info.insert("boot_iso".into(), json!(image.url));
        } else {
            info.insert("image_source".into(), json!(image.url));
            if let Some(format) = &image.format {
                info.insert("image_disk_format".into(), json!(format));
            }
            insert_checksum(&mut info, image, request.custom_deploy.is_some())?;
        }
    } else if request.custom_deploy.is_none() {
        return Err(InputError {
            field: "image",
            message: "is not set; give an image or a custom deploy method".into(),
        });
    }
    let (deploy_interface, deploy_steps) = match &request.custom_deploy {
        Some(method) => (
            "custom-agent",
            Some(vec![
                json!({"interface": "deploy", "step": method, "args": {}, "priority": 80}),
            ]),
        ),
        None if live_iso => ("ramdisk", None),
        None => ("direct", None),
    };
    let config_drive = if live_iso {
        None
    } else {
        Some(config_drive(host, request)?)
    };
    Ok(DeploySettings {
        instance_info: info,
        deploy_interface,
        deploy_steps,
        config_drive,
    })
}

/// The image's checksum in `instance_info`: Ironic's `image_checksum`, or the
/// `image_os_hash_*` pair when the algorithm is named. An OCI image or a custom
/// deploy needs none.
fn insert_checksum(
    info: &mut Map<String, Value>,
    image: &Image,
    custom_deploy: bool,
) -> Result<(), InputError> {
    match (
        image.checksum.as_deref().filter(|c| !c.is_empty()),
        image.checksum_type,
    ) {
        (None, _) if image.url.starts_with("oci://") => {}
        (None, _) if custom_deploy => {}
        (None, _) => {
            return Err(InputError {
                field: "image.checksum",
                message: "is missing; give the image's checksum or the URL of a checksum file"
                    .into(),
            });
        }
        (Some(sum), None | Some(ChecksumType::Auto)) => {
            info.insert("image_checksum".into(), json!(sum));
        }
        (Some(sum), Some(algo)) => {
            // Serialised as the API spells it: md5, sha256, sha512.
            info.insert("image_os_hash_algo".into(), json!(algo));
            info.insert("image_os_hash_value".into(), json!(sum));
        }
    }
    Ok(())
}

fn config_drive(host: &HostId, request: &ProvisionRequest) -> Result<Value, InputError> {
    let mut meta = Map::new();
    meta.insert("uuid".into(), json!(request.instance_uuid));
    meta.insert("metal3-namespace".into(), json!(host.namespace));
    meta.insert("metal3-name".into(), json!(host.name));
    meta.insert("local-hostname".into(), json!(host.name));
    meta.insert("local_hostname".into(), json!(host.name));
    meta.insert("name".into(), json!(host.name));
    if let Some(bytes) = &request.meta_data {
        match parse_document("metaData", bytes)? {
            Value::Object(extra) => meta.extend(extra),
            Value::Null => {}
            _ => {
                return Err(InputError {
                    field: "metaData",
                    message: "must be a mapping of keys to values".into(),
                });
            }
        }
    }
    let mut drive = Map::new();
    drive.insert("meta_data".into(), Value::Object(meta));
    let network = match &request.network_data {
        Some(bytes) => Some(parse_document("networkData", bytes)?),
        None => request.hardware.as_ref().map(default_network_data),
    };
    if let Some(network) = network.filter(|n| !n.is_null()) {
        drive.insert("network_data".into(), network);
    }
    if let Some(bytes) = &request.user_data {
        let text = std::str::from_utf8(bytes).map_err(|_| InputError {
            field: "userData",
            message: "is not UTF-8 text; cloud-init and ignition data must be text".into(),
        })?;
        drive.insert("user_data".into(), json!(text));
    }
    Ok(Value::Object(drive))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::Nic;
    use crate::api::{Image, ImageFormat};

    fn host() -> HostId {
        HostId::new("ns", "h1")
    }

    fn request(image: Image) -> ProvisionRequest {
        ProvisionRequest {
            image: Some(image),
            instance_uuid: "uid-1".into(),
            ..Default::default()
        }
    }

    fn step_names(plan: &CleanPlan) -> Vec<String> {
        plan.steps
            .iter()
            .map(|s| {
                format!(
                    "{}.{}",
                    s["interface"].as_str().unwrap(),
                    s["step"].as_str().unwrap()
                )
            })
            .collect()
    }

    #[test]
    fn clean_plan_for_hardware_raid_bios_and_firmware() {
        use crate::api::{HardwareRaidLevel, HardwareRaidVolume, RaidConfig};
        let hw = clean_plan(&PrepareRequest {
            raid: Some(RaidConfig {
                hardware_raid_volumes: Some(vec![HardwareRaidVolume {
                    name: Some("os".into()),
                    level: HardwareRaidLevel::Raid10,
                    size_gibibytes: None,
                    rotational: Some(false),
                    number_of_physical_disks: Some(2),
                    controller: Some("RAID.Integrated.1-1".into()),
                    physical_disks: vec!["Disk.Bay.0".into(), "Disk.Bay.1".into()],
                }]),
                software_raid_volumes: None,
            }),
            bios_settings: vec![("SriovGlobalEnable".into(), json!("Enabled"))],
            firmware_updates: vec![crate::api::firmware::FirmwareUpdate {
                component: "bmc".into(),
                url: "https://images.example/bmc.bin".into(),
            }],
            ..Default::default()
        });
        assert!(!hw.software_raid);
        assert_eq!(
            step_names(&hw),
            [
                "raid.delete_configuration",
                "raid.create_configuration",
                "bios.apply_configuration",
                "firmware.update"
            ]
        );
        assert_eq!(
            hw.steps[3]["args"]["settings"],
            json!([{"component": "bmc", "url": "https://images.example/bmc.bin"}])
        );
        let disk = &hw.target_raid_config.as_ref().unwrap()["logical_disks"][0];
        assert_eq!(disk["size_gb"], "MAX");
        assert_eq!(disk["raid_level"], "1+0");
        assert_eq!(disk["number_of_physical_disks"], 2);
        assert_eq!(disk["disk_type"], "ssd");
        assert_eq!(disk["volume_name"], "os");
        assert_eq!(disk["is_root_volume"], true);
        assert_eq!(
            hw.steps[2]["args"]["settings"][0]["name"],
            "SriovGlobalEnable"
        );
    }

    #[test]
    fn clean_plan_for_software_raid_and_wipe() {
        use crate::api::{RaidConfig, SoftwareRaidLevel, SoftwareRaidVolume};
        let sw = clean_plan(&PrepareRequest {
            raid: Some(RaidConfig {
                hardware_raid_volumes: None,
                software_raid_volumes: Some(vec![SoftwareRaidVolume {
                    root_volume: true,
                    level: SoftwareRaidLevel::Raid1,
                    size_gibibytes: Some(50),
                    physical_disks: vec![
                        RootDeviceHints {
                            device_name: Some("/dev/sda".into()),
                            ..Default::default()
                        },
                        RootDeviceHints {
                            device_name: Some("/dev/sdb".into()),
                            ..Default::default()
                        },
                    ],
                }]),
            }),
            full_disk_wipe: true,
            ..Default::default()
        });
        assert!(sw.software_raid);
        assert_eq!(
            step_names(&sw),
            [
                "raid.delete_configuration",
                "deploy.erase_devices_metadata",
                "raid.create_configuration",
                "deploy.erase_devices"
            ]
        );
        let disk = &sw.target_raid_config.as_ref().unwrap()["logical_disks"][0];
        assert_eq!(disk["controller"], "software");
        assert_eq!(disk["raid_level"], "1");
        assert_eq!(disk["size_gb"], 50);
        assert_eq!(disk["physical_disks"][1]["name"], "s== /dev/sdb");
    }

    #[test]
    fn an_empty_raid_list_only_deletes_the_raid() {
        use crate::api::RaidConfig;
        // An empty list removes the RAID without creating any.
        let delete_only = clean_plan(&PrepareRequest {
            raid: Some(RaidConfig {
                hardware_raid_volumes: Some(vec![]),
                software_raid_volumes: None,
            }),
            ..Default::default()
        });
        assert_eq!(step_names(&delete_only), ["raid.delete_configuration"]);
    }

    #[test]
    fn checksum_types_map_to_os_hash_or_image_checksum() {
        for (ty, algo) in [
            (Some(ChecksumType::Md5), Some("md5")),
            (Some(ChecksumType::Sha256), Some("sha256")),
            (Some(ChecksumType::Sha512), Some("sha512")),
            (Some(ChecksumType::Auto), None),
            (None, None),
        ] {
            let image = Image {
                url: "http://img/x.qcow2".into(),
                checksum: Some("abc".into()),
                checksum_type: ty,
                format: Some(ImageFormat::Qcow2),
                ..Default::default()
            };
            let s = deploy_settings(&host(), BootMode::Uefi, &request(image)).unwrap();
            let i = &s.instance_info;
            assert_eq!(i["image_source"], "http://img/x.qcow2");
            assert_eq!(i["image_disk_format"], "qcow2");
            match algo {
                Some(a) => {
                    assert_eq!(i["image_os_hash_algo"], a);
                    assert_eq!(i["image_os_hash_value"], "abc");
                    assert!(!i.contains_key("image_checksum"));
                }
                None => {
                    assert_eq!(i["image_checksum"], "abc");
                    assert!(!i.contains_key("image_os_hash_algo"));
                }
            }
            assert_eq!(s.deploy_interface, "direct");
        }
    }

    #[test]
    fn live_iso_boots_the_iso_without_config_drive() {
        let image = Image {
            url: "http://img/live.iso".into(),
            format: Some(ImageFormat::LiveIso),
            ..Default::default()
        };
        let s = deploy_settings(&host(), BootMode::UefiSecureBoot, &request(image)).unwrap();
        assert_eq!(s.instance_info["boot_iso"], "http://img/live.iso");
        assert!(!s.instance_info.contains_key("image_source"));
        assert_eq!(s.instance_info["capabilities"]["secure_boot"], "true");
        assert_eq!(s.deploy_interface, "ramdisk");
        assert!(s.config_drive.is_none());
    }

    #[test]
    fn custom_deploy_uses_custom_agent_and_a_deploy_step() {
        let req = ProvisionRequest {
            custom_deploy: Some("install_coreos".into()),
            ..Default::default()
        };
        let s = deploy_settings(&host(), BootMode::Uefi, &req).unwrap();
        assert_eq!(s.deploy_interface, "custom-agent");
        assert_eq!(s.deploy_steps.unwrap()[0]["step"], "install_coreos");
    }

    #[test]
    fn missing_checksum_and_image_are_explained() {
        let image = Image {
            url: "http://img/x.raw".into(),
            ..Default::default()
        };
        let e = deploy_settings(&host(), BootMode::Uefi, &request(image)).unwrap_err();
        assert!(e.to_string().contains("image.checksum"), "{e}");
        let e = deploy_settings(&host(), BootMode::Uefi, &ProvisionRequest::default()).unwrap_err();
        assert!(e.to_string().contains("custom deploy"), "{e}");
    }

    #[test]
    fn root_device_hints_use_ironic_operators() {
        let rd = root_device(&RootDeviceHints {
            device_name: Some("/dev/disk/by-path/pci-0000:00:1f.2-ata-1".into()),
            model: Some("Samsung".into()),
            min_size_gigabytes: Some(100),
            rotational: Some(false),
            serial_number: Some("S1".into()),
            ..Default::default()
        });
        assert_eq!(
            rd["by_path"],
            "s== /dev/disk/by-path/pci-0000:00:1f.2-ata-1"
        );
        assert_eq!(rd["model"], "<in> Samsung");
        assert_eq!(rd["size"], ">= 100");
        assert_eq!(rd["rotational"], "false");
        assert_eq!(rd["serial"], "s== S1");
        let rd = root_device(&RootDeviceHints {
            device_name: Some("/dev/sda".into()),
            ..Default::default()
        });
        assert_eq!(rd["name"], "s== /dev/sda");
    }

    #[test]
    fn config_drive_merges_meta_data_and_defaults_network_data_to_dhcp() {
        let mut req = request(Image {
            url: "http://img/x".into(),
            checksum: Some("abc".into()),
            ..Default::default()
        });
        req.user_data = Some(b"#cloud-config\n".to_vec());
        req.meta_data = Some(b"role: worker\nname: custom\n".to_vec());
        req.hardware = Some(HardwareDetails {
            nics: vec![
                Nic {
                    name: Some("eno1".into()),
                    mac: Some("aa:00:00:00:00:01".into()),
                    ip: Some("192.0.2.1".into()),
                    ..Default::default()
                },
                Nic {
                    name: Some("eno1".into()),
                    mac: Some("aa:00:00:00:00:01".into()),
                    ip: Some("2001:db8::1".into()),
                    ..Default::default()
                },
                Nic {
                    name: Some("eno2".into()),
                    mac: Some("aa:00:00:00:00:02".into()),
                    ..Default::default()
                },
            ],
            ..Default::default()
        });
        let drive = deploy_settings(&host(), BootMode::Uefi, &req)
            .unwrap()
            .config_drive
            .unwrap();
        assert_eq!(drive["user_data"], "#cloud-config\n");
        assert_eq!(drive["meta_data"]["uuid"], "uid-1");
        assert_eq!(drive["meta_data"]["metal3-namespace"], "ns");
        assert_eq!(drive["meta_data"]["role"], "worker");
        assert_eq!(drive["meta_data"]["name"], "custom");
        let links = drive["network_data"]["links"].as_array().unwrap();
        assert_eq!(links.len(), 2);
        let networks = drive["network_data"]["networks"].as_array().unwrap();
        assert_eq!(networks.len(), 3, "{networks:?}");
        assert!(
            networks
                .iter()
                .all(|n| n["type"].as_str().unwrap().ends_with("_dhcp"))
        );

        req.network_data = Some(br#"{"links": [], "networks": [], "services": [{"type": "dns", "address": "192.0.2.53"}]}"#.to_vec());
        let drive = deploy_settings(&host(), BootMode::Uefi, &req)
            .unwrap()
            .config_drive
            .unwrap();
        assert_eq!(
            drive["network_data"]["services"][0]["address"],
            "192.0.2.53"
        );

        req.meta_data = Some(b"[unclosed".to_vec());
        let e = deploy_settings(&host(), BootMode::Uefi, &req).unwrap_err();
        assert!(e.to_string().starts_with("metaData"), "{e}");
    }
}
