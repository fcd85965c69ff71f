//! Inspection results: Ironic's `/v1/nodes/{id}/inventory` answer (or, when there is
//! none, the node's properties) read into the CRD's [`HardwareDetails`], as
//! `status.hardware` and the HardwareData resource store them.

use serde_json::{Map, Value};

use crate::api::{
    Bios, Cpu, DiskType, Firmware, HardwareDetails, HardwareSystemVendor, Lldp, Nic, Storage, Vlan,
};

/// A string field, trimmed (numbers as written); empty when absent.
fn s(v: &Value, key: &str) -> String {
    match v.get(key) {
        Some(Value::String(s)) => s.trim().to_owned(),
        Some(Value::Number(n)) => n.to_string(),
        _ => String::new(),
    }
}

/// A string field as the CRD has it: absent when empty.
fn text(v: &Value, key: &str) -> Option<String> {
    non_empty(s(v, key))
}

fn non_empty(s: String) -> Option<String> {
    Some(s).filter(|s| !s.is_empty())
}

/// A whole number, also from a float or a numeric string (rounded).
fn u(v: &Value, key: &str) -> Option<u64> {
    match v.get(key)? {
        Value::Number(n) => n
            .as_u64()
            .or_else(|| n.as_f64().filter(|f| *f >= 0.0).map(|f| f.round() as u64)),
        Value::String(s) => s.trim().parse::<f64>().ok().map(|f| f.round() as u64),
        _ => None,
    }
}

/// A VLAN ID, capped at 4094 (0 when absent).
fn vlan(v: &Value, key: &str) -> i32 {
    i32::from(u(v, key).unwrap_or_default().min(4094) as u16)
}

/// Link speed in whole Gbps as the CRD has it: rounded, but a link slower than
/// 1 Gbps is 1, never 0 (0 would read as "no link"); unknown stays unknown.
fn speed_gbps(mbps: Option<u64>) -> Option<i64> {
    mbps.filter(|&mbps| mbps > 0)
        .map(|mbps| (mbps.saturating_add(500) / 1000).max(1))
        .and_then(|gbps| i64::try_from(gbps).ok())
}

/// Reads Ironic's `GET /v1/nodes/{id}/inventory` answer (`{inventory, plugin_data}`).
/// Vendor, firmware, memory and CPU are always present (possibly empty), as upstream
/// stores them.
pub fn from_inventory(doc: &Value) -> HardwareDetails {
    let inv = doc.get("inventory").unwrap_or(&Value::Null);
    let plugin = doc.get("plugin_data").unwrap_or(&Value::Null);
    let vendor = inv.get("system_vendor").unwrap_or(&Value::Null);
    let fw = vendor.get("firmware").unwrap_or(&Value::Null);
    let cpu = inv.get("cpu").unwrap_or(&Value::Null);
    let mut flags: Vec<String> = cpu
        .get("flags")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default();
    flags.sort();
    flags.dedup();
    let clock: f64 = match cpu.get("frequency") {
        Some(Value::Number(n)) => n.as_f64().unwrap_or_default(),
        Some(Value::String(s)) => s.trim().parse().unwrap_or_default(),
        _ => 0.0,
    };
    let empty = Vec::new();
    let nics = inv
        .get("interfaces")
        .and_then(Value::as_array)
        .unwrap_or(&empty)
        .iter()
        .flat_map(|iface| nic_entries(iface, plugin))
        .collect();
    let storage = inv
        .get("disks")
        .and_then(Value::as_array)
        .unwrap_or(&empty)
        .iter()
        .map(storage_entry)
        .collect();
    HardwareDetails {
        system_vendor: Some(HardwareSystemVendor {
            manufacturer: text(vendor, "manufacturer"),
            product_name: text(vendor, "product_name"),
            serial_number: text(vendor, "serial_number"),
        }),
        firmware: Some(Firmware {
            bios: Some(Bios {
                date: text(fw, "build_date"),
                vendor: text(fw, "vendor"),
                version: text(fw, "version"),
            }),
        }),
        ram_mebibytes: i64::try_from(
            inv.get("memory")
                .and_then(|m| u(m, "physical_mb"))
                .unwrap_or_default(),
        )
        .ok(),
        nics,
        storage,
        cpu: Some(Cpu {
            arch: text(cpu, "architecture"),
            model: text(cpu, "model_name"),
            clock_megahertz: Some(clock.round()).filter(|&c| c > 0.0),
            flags,
            count: cpu_count(u(cpu, "count")),
        }),
        hostname: text(inv, "hostname"),
    }
}

fn cpu_count(count: Option<u64>) -> Option<i64> {
    Some(i64::from(count.unwrap_or_default() as u32)).filter(|&c| c > 0)
}

/// What out-of-band and fake inspection leave: no inventory, only the node's
/// `properties` (`cpu_arch`, `cpus`, `memory_mb`).
pub fn from_properties(properties: &Map<String, Value>) -> HardwareDetails {
    let mut details = from_inventory(&Value::Null);
    details.cpu = Some(Cpu {
        arch: properties
            .get("cpu_arch")
            .and_then(Value::as_str)
            .filter(|a| !a.is_empty())
            .map(str::to_owned),
        count: cpu_count(properties.get("cpus").and_then(Value::as_u64)),
        ..Default::default()
    });
    details.ram_mebibytes = i64::try_from(
        properties
            .get("memory_mb")
            .and_then(Value::as_u64)
            .unwrap_or_default(),
    )
    .ok();
    details
}

/// One line for the log: what the host is, never the raw inventory.
pub fn summary(details: &HardwareDetails) -> String {
    let or_empty = |s: &Option<String>| s.clone().unwrap_or_default();
    let gib = |b: i64| b as f64 / (1u64 << 30) as f64;
    let disks: Vec<String> = details
        .storage
        .iter()
        .map(|d| {
            format!(
                "{:.0} GiB {:?}",
                gib(d.size_bytes.unwrap_or_default()),
                d.disk_type.unwrap_or_default()
            )
        })
        .collect();
    let mut macs: Vec<Option<&str>> = details.nics.iter().map(|n| n.mac.as_deref()).collect();
    macs.dedup();
    let vendor = details.system_vendor.clone().unwrap_or_default();
    let vendor = format!(
        "{} {}",
        or_empty(&vendor.manufacturer),
        or_empty(&vendor.product_name)
    );
    let bios = details
        .firmware
        .as_ref()
        .and_then(|f| f.bios.clone())
        .unwrap_or_default();
    let cpu = details.cpu.clone().unwrap_or_default();
    format!(
        "{}; {} CPU(s) {} {}; {} MiB RAM; disks: {}; {} NIC(s); firmware {} {} ({}); hostname {}",
        vendor.trim(),
        cpu.count.unwrap_or_default(),
        or_empty(&cpu.arch),
        or_empty(&cpu.model),
        details.ram_mebibytes.unwrap_or_default(),
        if disks.is_empty() {
            "none".to_owned()
        } else {
            disks.join(", ")
        },
        macs.len(),
        or_empty(&bios.vendor),
        or_empty(&bios.version),
        or_empty(&bios.date),
        details.hostname.as_deref().unwrap_or("(none)"),
    )
}

/// One entry per address family the interface has (one without an address when it
/// has none).
fn nic_entries(iface: &Value, plugin: &Value) -> Vec<Nic> {
    let name = s(iface, "name");
    let lldp_doc = plugin.get("parsed_lldp").and_then(|p| p.get(&name));
    let lldp = lldp_doc.map(|l| Lldp {
        switch_id: text(l, "switch_chassis_id"),
        port_id: text(l, "switch_port_id"),
        switch_system_name: text(l, "switch_system_name"),
    });
    let vlans = lldp_doc
        .and_then(|l| l.get("switch_port_vlans"))
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .map(|v| Vlan {
                    id: Some(vlan(v, "id")),
                    name: text(v, "name"),
                })
                .collect()
        })
        .unwrap_or_default();
    let vlan_id = lldp_doc
        .map(|l| vlan(l, "switch_port_untagged_vlan_id"))
        .filter(|&id| id != 0);
    let pxe = plugin
        .get("all_interfaces")
        .and_then(|a| a.get(&name))
        .and_then(|i| i.get("pxe_enabled"))
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let model = format!("{} {}", s(iface, "vendor"), s(iface, "product"))
        .trim()
        .to_owned();
    let base = Nic {
        name: non_empty(name),
        model: non_empty(model),
        mac: non_empty(s(iface, "mac_address").to_ascii_lowercase()),
        ip: None,
        speed_gbps: speed_gbps(u(iface, "speed_mbps")),
        vlans,
        vlan_id,
        pxe,
        lldp,
        pci_address: text(iface, "pci_address"),
        dhcp_hostname: None,
    };
    let ips: Vec<String> = ["ipv4_address", "ipv6_address"]
        .iter()
        .filter_map(|k| text(iface, k))
        .collect();
    if ips.is_empty() {
        return vec![base];
    }
    ips.into_iter()
        .map(|ip| Nic {
            ip: Some(ip),
            ..base.clone()
        })
        .collect()
}

fn storage_entry(disk: &Value) -> Storage {
    let dev = s(disk, "name");
    let by_path = s(disk, "by_path");
    let rotational = disk
        .get("rotational")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let disk_type = if rotational {
        DiskType::Hdd
    } else if dev.starts_with("/dev/nvme") {
        DiskType::Nvme
    } else {
        DiskType::Ssd
    };
    let mut alternate_names = vec![dev.clone()];
    if !by_path.is_empty() {
        alternate_names.push(by_path.clone());
    }
    Storage {
        name: non_empty(if by_path.is_empty() { dev } else { by_path }),
        alternate_names,
        rotational,
        disk_type: Some(disk_type),
        size_bytes: i64::try_from(u(disk, "size").unwrap_or_default()).ok(),
        vendor: text(disk, "vendor"),
        model: text(disk, "model"),
        serial_number: text(disk, "serial"),
        wwn: text(disk, "wwn"),
        wwn_vendor_extension: text(disk, "wwn_vendor_extension"),
        wwn_with_extension: text(disk, "wwn_with_extension"),
        hctl: text(disk, "hctl"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn maps_an_inventory_with_both_ip_families_lldp_and_speeds() {
        let doc = json!({
            "inventory": {
                "interfaces": [
                    {"name": "eno1", "mac_address": "AA:BB:CC:00:00:01", "ipv4_address": "192.0.2.5",
                     "ipv6_address": "2001:db8::5", "speed_mbps": 25000, "vendor": "0x8086", "product": "0x1572",
                     "pci_address": "0000:3b:00.0"},
                    {"name": "eno2", "mac_address": "aa:bb:cc:00:00:02", "speed_mbps": 100},
                    {"name": "eno3", "mac_address": "aa:bb:cc:00:00:03"}
                ],
                "cpu": {"architecture": "x86_64", "model_name": "Intel Xeon", "frequency": "2400.4",
                        "count": 32, "flags": ["vmx", "aes", "vmx"]},
                "disks": [
                    {"name": "/dev/sda", "size": 480103981056u64, "rotational": false, "by_path": "/dev/disk/by-path/pci-0000:00:17.0-ata-1",
                     "serial": "S1", "hctl": "0:0:0:0"},
                    {"name": "/dev/nvme0n1", "size": 1000204886016u64, "rotational": false},
                    {"name": "/dev/sdb", "size": 4000787030016u64, "rotational": true}
                ],
                "memory": {"physical_mb": 131072, "total": 134000000000u64},
                "system_vendor": {"manufacturer": "Dell Inc.", "product_name": "PowerEdge R650", "serial_number": "ABC123",
                                  "firmware": {"vendor": "Dell Inc.", "version": "1.9.2", "build_date": "2023-05-04"}},
                "hostname": "node-1.example.com"
            },
            "plugin_data": {
                "all_interfaces": {"eno1": {"pxe_enabled": true}},
                "parsed_lldp": {"eno1": {"switch_chassis_id": "00:11:22:33:44:55", "switch_port_id": "Ethernet1/7",
                    "switch_system_name": "tor-1", "switch_port_vlans": [{"id": 100, "name": "prov"}],
                    "switch_port_untagged_vlan_id": 100}}
            }
        });
        let hw = from_inventory(&doc);
        assert_eq!(hw.nics.len(), 4, "eno1 twice (v4 + v6), eno2, eno3");
        let cpu = hw.cpu.as_ref().unwrap();
        assert_eq!(cpu.clock_megahertz, Some(2400.0));
        assert_eq!(cpu.flags, vec!["aes", "vmx"]);
        assert_eq!(hw.storage[0].alternate_names[0], "/dev/sda");
        // The whole document as status.hardware stores it: absent rather than empty
        // strings, speeds in whole Gbps (100 Mbps is 1, unknown stays absent).
        assert_eq!(
            serde_json::to_value(&hw).unwrap(),
            json!({
                "systemVendor": {"manufacturer": "Dell Inc.", "productName": "PowerEdge R650", "serialNumber": "ABC123"},
                "firmware": {"bios": {"date": "2023-05-04", "vendor": "Dell Inc.", "version": "1.9.2"}},
                "ramMebibytes": 131072,
                "nics": [
                    {"name": "eno1", "model": "0x8086 0x1572", "mac": "aa:bb:cc:00:00:01", "ip": "192.0.2.5",
                     "speedGbps": 25, "vlans": [{"id": 100, "name": "prov"}], "vlanId": 100, "pxe": true,
                     "lldp": {"switchID": "00:11:22:33:44:55", "portID": "Ethernet1/7", "switchSystemName": "tor-1"},
                     "pciAddress": "0000:3b:00.0"},
                    {"name": "eno1", "model": "0x8086 0x1572", "mac": "aa:bb:cc:00:00:01", "ip": "2001:db8::5",
                     "speedGbps": 25, "vlans": [{"id": 100, "name": "prov"}], "vlanId": 100, "pxe": true,
                     "lldp": {"switchID": "00:11:22:33:44:55", "portID": "Ethernet1/7", "switchSystemName": "tor-1"},
                     "pciAddress": "0000:3b:00.0"},
                    {"name": "eno2", "mac": "aa:bb:cc:00:00:02", "speedGbps": 1},
                    {"name": "eno3", "mac": "aa:bb:cc:00:00:03"}
                ],
                "storage": [
                    {"name": "/dev/disk/by-path/pci-0000:00:17.0-ata-1",
                     "alternateNames": ["/dev/sda", "/dev/disk/by-path/pci-0000:00:17.0-ata-1"],
                     "type": "SSD", "sizeBytes": 480103981056u64, "serialNumber": "S1", "hctl": "0:0:0:0"},
                    {"name": "/dev/nvme0n1", "alternateNames": ["/dev/nvme0n1"], "type": "NVME", "sizeBytes": 1000204886016u64},
                    {"name": "/dev/sdb", "alternateNames": ["/dev/sdb"], "rotational": true, "type": "HDD", "sizeBytes": 4000787030016u64}
                ],
                "cpu": {"arch": "x86_64", "model": "Intel Xeon", "clockMegahertz": 2400.0, "flags": ["aes", "vmx"], "count": 32},
                "hostname": "node-1.example.com"
            })
        );
        let summary = summary(&hw);
        assert!(summary.contains("Dell Inc. PowerEdge R650"), "{summary}");
        assert!(summary.contains("3 NIC(s)"), "{summary}");
        assert!(summary.contains("447 GiB Ssd"), "{summary}");
    }

    #[test]
    fn an_empty_inventory_keeps_vendor_firmware_memory_and_cpu() {
        assert_eq!(
            serde_json::to_value(from_inventory(&json!({}))).unwrap(),
            json!({"systemVendor": {}, "firmware": {"bios": {}}, "ramMebibytes": 0, "cpu": {}})
        );
        assert_eq!(
            serde_json::to_value(from_properties(
                json!({"cpu_arch": "x86_64", "cpus": 2, "memory_mb": 4096})
                    .as_object()
                    .unwrap()
            ))
            .unwrap(),
            json!({"systemVendor": {}, "firmware": {"bios": {}}, "ramMebibytes": 4096,
                   "cpu": {"arch": "x86_64", "count": 2}})
        );
    }
}
