//! Inspection results: what Ironic's `/v1/nodes/{id}/inventory` says, as plain structs
//! the controller converts to the CRD's HardwareDetails.

use serde::{Deserialize, Serialize};
use serde_json::Value;

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HardwareDetails {
    pub system_vendor: SystemVendor,
    pub firmware: Firmware,
    pub ram_mebibytes: u64,
    pub nics: Vec<Nic>,
    pub storage: Vec<Storage>,
    pub cpu: Cpu,
    pub hostname: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SystemVendor {
    pub manufacturer: String,
    pub product_name: String,
    pub serial_number: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Firmware {
    pub bios: Bios,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Bios {
    pub date: String,
    pub vendor: String,
    pub version: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Vlan {
    pub id: u16,
    pub name: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lldp {
    pub switch_id: String,
    pub port_id: String,
    pub switch_system_name: String,
}

/// One NIC address family: a NIC with both IPv4 and IPv6 gives two entries.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Nic {
    /// The name the ramdisk reported (e.g. `eno1`); never made up.
    pub name: String,
    /// `"<vendor> <product>"` as reported (PCI ids).
    pub model: String,
    pub mac: String,
    pub ip: String,
    /// The reported link speed; `None` when the ramdisk did not report one.
    pub speed_mbps: Option<u64>,
    pub vlans: Vec<Vlan>,
    pub vlan_id: u16,
    pub pxe: bool,
    pub lldp: Option<Lldp>,
    pub pci_address: String,
}

impl Nic {
    /// Speed in whole Gbps as the CRD has it: rounded, but a link slower than
    /// 1 Gbps is 1, never 0 (0 would read as "no link").
    pub fn speed_gbps(&self) -> Option<u64> {
        self.speed_mbps
            .filter(|&mbps| mbps > 0)
            .map(|mbps| ((mbps + 500) / 1000).max(1))
    }
}

/// The kind of disk, as the API has it.
pub use crate::api::DiskType;

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Storage {
    /// `by_path` when the ramdisk reported one, else the device name.
    pub name: String,
    pub alternate_names: Vec<String>,
    pub rotational: bool,
    pub disk_type: DiskType,
    pub size_bytes: u64,
    pub vendor: String,
    pub model: String,
    pub serial_number: String,
    pub wwn: String,
    pub wwn_vendor_extension: String,
    pub wwn_with_extension: String,
    pub hctl: String,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Cpu {
    pub arch: String,
    pub model: String,
    pub clock_megahertz: f64,
    /// Sorted.
    pub flags: Vec<String>,
    pub count: u32,
}

fn s(v: &Value, key: &str) -> String {
    match v.get(key) {
        Some(Value::String(s)) => s.trim().to_owned(),
        Some(Value::Number(n)) => n.to_string(),
        _ => String::new(),
    }
}

fn u(v: &Value, key: &str) -> Option<u64> {
    match v.get(key)? {
        Value::Number(n) => n
            .as_u64()
            .or_else(|| n.as_f64().filter(|f| *f >= 0.0).map(|f| f.round() as u64)),
        Value::String(s) => s.trim().parse::<f64>().ok().map(|f| f.round() as u64),
        _ => None,
    }
}

impl HardwareDetails {
    /// Maps Ironic's `GET /v1/nodes/{id}/inventory` answer (`{inventory, plugin_data}`).
    pub fn from_ironic_inventory(doc: &Value) -> Self {
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
        let clock = match cpu.get("frequency") {
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
        Self {
            system_vendor: SystemVendor {
                manufacturer: s(vendor, "manufacturer"),
                product_name: s(vendor, "product_name"),
                serial_number: s(vendor, "serial_number"),
            },
            firmware: Firmware {
                bios: Bios {
                    date: s(fw, "build_date"),
                    vendor: s(fw, "vendor"),
                    version: s(fw, "version"),
                },
            },
            ram_mebibytes: inv
                .get("memory")
                .and_then(|m| u(m, "physical_mb"))
                .unwrap_or_default(),
            nics,
            storage,
            cpu: Cpu {
                arch: s(cpu, "architecture"),
                model: s(cpu, "model_name"),
                clock_megahertz: clock.round(),
                flags,
                count: u(cpu, "count").unwrap_or_default() as u32,
            },
            hostname: s(inv, "hostname"),
        }
    }

    /// One line for the log: what the host is, never the raw inventory.
    pub fn summary(&self) -> String {
        let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
        let disks: Vec<String> = self
            .storage
            .iter()
            .map(|d| format!("{:.0} GiB {:?}", gib(d.size_bytes), d.disk_type))
            .collect();
        let mut macs: Vec<&str> = self.nics.iter().map(|n| n.mac.as_str()).collect();
        macs.dedup();
        let vendor = format!(
            "{} {}",
            self.system_vendor.manufacturer, self.system_vendor.product_name
        );
        format!(
            "{}; {} CPU(s) {} {}; {} MiB RAM; disks: {}; {} NIC(s); firmware {} {} ({}); hostname {}",
            vendor.trim(),
            self.cpu.count,
            self.cpu.arch,
            self.cpu.model,
            self.ram_mebibytes,
            if disks.is_empty() {
                "none".to_owned()
            } else {
                disks.join(", ")
            },
            macs.len(),
            self.firmware.bios.vendor,
            self.firmware.bios.version,
            self.firmware.bios.date,
            if self.hostname.is_empty() {
                "(none)"
            } else {
                &self.hostname
            },
        )
    }
}

fn nic_entries(iface: &Value, plugin: &Value) -> Vec<Nic> {
    let name = s(iface, "name");
    let lldp_doc = plugin.get("parsed_lldp").and_then(|p| p.get(&name));
    let lldp = lldp_doc.map(|l| Lldp {
        switch_id: s(l, "switch_chassis_id"),
        port_id: s(l, "switch_port_id"),
        switch_system_name: s(l, "switch_system_name"),
    });
    let vlans = lldp_doc
        .and_then(|l| l.get("switch_port_vlans"))
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .map(|v| Vlan {
                    id: u(v, "id").unwrap_or_default().min(4094) as u16,
                    name: s(v, "name"),
                })
                .collect()
        })
        .unwrap_or_default();
    let vlan_id = lldp_doc
        .and_then(|l| u(l, "switch_port_untagged_vlan_id"))
        .unwrap_or_default()
        .min(4094) as u16;
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
        name,
        model,
        mac: s(iface, "mac_address").to_ascii_lowercase(),
        ip: String::new(),
        speed_mbps: u(iface, "speed_mbps").filter(|&m| m > 0),
        vlans,
        vlan_id,
        pxe,
        lldp,
        pci_address: s(iface, "pci_address"),
    };
    let ips: Vec<String> = ["ipv4_address", "ipv6_address"]
        .iter()
        .map(|k| s(iface, k))
        .filter(|ip| !ip.is_empty())
        .collect();
    if ips.is_empty() {
        return vec![base];
    }
    ips.into_iter()
        .map(|ip| Nic { ip, ..base.clone() })
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
        name: if by_path.is_empty() { dev } else { by_path },
        alternate_names,
        rotational,
        disk_type,
        size_bytes: u(disk, "size").unwrap_or_default(),
        vendor: s(disk, "vendor"),
        model: s(disk, "model"),
        serial_number: s(disk, "serial"),
        wwn: s(disk, "wwn"),
        wwn_vendor_extension: s(disk, "wwn_vendor_extension"),
        wwn_with_extension: s(disk, "wwn_with_extension"),
        hctl: s(disk, "hctl"),
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
        let hw = HardwareDetails::from_ironic_inventory(&doc);
        assert_eq!(hw.nics.len(), 4, "eno1 twice (v4 + v6), eno2, eno3");
        assert_eq!(hw.nics[0].ip, "192.0.2.5");
        assert_eq!(hw.nics[1].ip, "2001:db8::5");
        assert_eq!(hw.nics[0].mac, "aa:bb:cc:00:00:01");
        assert_eq!(hw.nics[0].speed_gbps(), Some(25));
        assert_eq!(hw.nics[2].speed_gbps(), Some(1), "100 Mbps is not 0");
        assert_eq!(hw.nics[3].speed_gbps(), None, "unknown speed stays unknown");
        assert!(hw.nics[0].pxe && !hw.nics[2].pxe);
        assert_eq!(hw.nics[0].model, "0x8086 0x1572");
        assert_eq!(hw.nics[0].vlan_id, 100);
        assert_eq!(hw.nics[0].lldp.as_ref().unwrap().port_id, "Ethernet1/7");
        assert_eq!(hw.nics[2].name, "eno2");
        assert_eq!(hw.cpu.clock_megahertz, 2400.0);
        assert_eq!(hw.cpu.flags, vec!["aes", "vmx"]);
        assert_eq!(hw.cpu.count, 32);
        assert_eq!(hw.ram_mebibytes, 131072);
        assert_eq!(
            hw.storage[0].name,
            "/dev/disk/by-path/pci-0000:00:17.0-ata-1"
        );
        assert_eq!(hw.storage[0].alternate_names[0], "/dev/sda");
        assert_eq!(hw.storage[0].disk_type, DiskType::Ssd);
        assert_eq!(hw.storage[1].disk_type, DiskType::Nvme);
        assert_eq!(hw.storage[2].disk_type, DiskType::Hdd);
        assert_eq!(hw.firmware.bios.version, "1.9.2");
        assert_eq!(hw.firmware.bios.date, "2023-05-04");
        assert_eq!(hw.system_vendor.product_name, "PowerEdge R650");
        assert_eq!(hw.hostname, "node-1.example.com");
        let summary = hw.summary();
        assert!(summary.contains("Dell Inc. PowerEdge R650"), "{summary}");
        assert!(summary.contains("3 NIC(s)"), "{summary}");
    }

    #[test]
    fn an_empty_inventory_maps_to_empty_details() {
        let hw = HardwareDetails::from_ironic_inventory(&json!({}));
        assert_eq!(hw, HardwareDetails::default());
    }
}
