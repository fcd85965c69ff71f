//! `spec.firmware` (upstream's three deprecated BIOS switches) mapped to the BIOS
//! setting names of the host's vendor, and added to what preparing applies.
//!
//! Upstream's operator once mapped the switches per BMC driver (iDRAC, iLO 4/5,
//! iRMC) and now refuses the field. The names belong to the vendor's firmware, not
//! to Ironic's driver (a Dell behind plain `redfish://` names them the Dell way), so
//! the vendor comes from the BMC driver when it names one and otherwise from the
//! inspected manufacturer. The values are upstream's facts:
//!
//! | switch | Dell (iDRAC) | HPE (iLO 5) |
//! |---|---|---|
//! | `virtualizationEnabled` | `ProcVirtualization` | `ProcVirtualization` |
//! | `simultaneousMultithreadingEnabled` | `LogicalProc` | `ProcHyperthreading` |
//! | `sriovEnabled` | `SriovGlobalEnable` | `Sriov` |
//!
//! with `Enabled` / `Disabled`. Fujitsu's names upstream used (`cpu_vt_enabled`, …)
//! were those of Ironic's iRMC BIOS interface, which translated them; Ironic and bmo
//! have dropped that driver, and through Redfish an iRMC uses its own names, so a
//! Fujitsu host is refused with the fix rather than sent names its BMC lacks.
//!
//! Pure: no I/O. [`pending`] is what the host controller asks while preparing.

use std::collections::BTreeSet;
use std::fmt;

use crate::api::firmware::HostFirmwareSettings;
use crate::api::{BareMetalHost, FirmwareConfig, ProvisioningState};
use crate::bmc::{BmcAddress, BmcType};

use crate::api::firmware_pending::{PendingSettings, pending_settings};

/// A hardware vendor whose BIOS names bmo knows, or knows it does not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Vendor {
    Dell,
    Hpe,
    Fujitsu,
}

impl fmt::Display for Vendor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Dell => "Dell",
            Self::Hpe => "HPE",
            Self::Fujitsu => "Fujitsu",
        })
    }
}

impl Vendor {
    /// The vendor a BMC driver is made for; `None` for the generic ones.
    pub fn of_bmc(kind: BmcType) -> Option<Self> {
        match kind {
            BmcType::IdracRedfish | BmcType::IdracVirtualMedia => Some(Self::Dell),
            BmcType::Ilo5Redfish | BmcType::Ilo5VirtualMedia => Some(Self::Hpe),
            BmcType::Ipmi
            | BmcType::Libvirt
            | BmcType::Redfish
            | BmcType::RedfishVirtualMedia
            | BmcType::RedfishUefiHttp
            | BmcType::Fake => None,
        }
    }

    /// The vendor an inspected manufacturer string names ("Dell Inc.", "HPE",
    /// "Hewlett Packard Enterprise", "FUJITSU"); `None` for any other.
    pub fn of_manufacturer(manufacturer: &str) -> Option<Self> {
        let lower = manufacturer.to_ascii_lowercase();
        let words: Vec<&str> = lower
            .split(|c: char| !c.is_ascii_alphanumeric())
            .filter(|w| !w.is_empty())
            .collect();
        if words.contains(&"dell") {
            Some(Self::Dell)
        } else if words.iter().any(|w| matches!(*w, "hp" | "hpe" | "hewlett")) {
            Some(Self::Hpe)
        } else if words.contains(&"fujitsu") {
            Some(Self::Fujitsu)
        } else {
            None
        }
    }
}

/// One switch of `spec.firmware`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Switch {
    Virtualization,
    SimultaneousMultithreading,
    Sriov,
}

impl Switch {
    /// The field's path, for messages.
    pub fn field(self) -> &'static str {
        match self {
            Self::Virtualization => "spec.firmware.virtualizationEnabled",
            Self::SimultaneousMultithreading => "spec.firmware.simultaneousMultithreadingEnabled",
            Self::Sriov => "spec.firmware.sriovEnabled",
        }
    }

    /// The vendor's BIOS setting for this switch; `None` where bmo knows no name.
    fn setting(self, vendor: Vendor) -> Option<&'static str> {
        match (vendor, self) {
            (Vendor::Dell | Vendor::Hpe, Self::Virtualization) => Some("ProcVirtualization"),
            (Vendor::Dell, Self::SimultaneousMultithreading) => Some("LogicalProc"),
            (Vendor::Dell, Self::Sriov) => Some("SriovGlobalEnable"),
            (Vendor::Hpe, Self::SimultaneousMultithreading) => Some("ProcHyperthreading"),
            (Vendor::Hpe, Self::Sriov) => Some("Sriov"),
            (Vendor::Fujitsu, _) => None,
        }
    }
}

/// One switch as a vendor BIOS setting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mapped {
    pub switch: Switch,
    pub setting: &'static str,
    pub value: &'static str,
}

/// The switches `config` sets, in field order.
fn switches(config: &FirmwareConfig) -> Vec<(Switch, bool)> {
    [
        (Switch::Virtualization, config.virtualization_enabled),
        (
            Switch::SimultaneousMultithreading,
            config.simultaneous_multithreading_enabled,
        ),
        (Switch::Sriov, config.sriov_enabled),
    ]
    .into_iter()
    .filter_map(|(switch, on)| on.map(|on| (switch, on)))
    .collect()
}

/// `config` as `vendor`'s BIOS settings; `None` when bmo knows no names for it.
pub fn map(vendor: Vendor, config: &FirmwareConfig) -> Option<Vec<Mapped>> {
    switches(config)
        .into_iter()
        .map(|(switch, on)| {
            Some(Mapped {
                switch,
                setting: switch.setting(vendor)?,
                value: if on { "Enabled" } else { "Disabled" },
            })
        })
        .collect()
}

/// The fix every refusal ends with.
const FIX: &str = "remove spec.firmware and set the BIOS's own setting names in the host's HostFirmwareSettings spec.settings";

/// Why `spec.firmware` cannot be applied to a host.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LegacyError {
    #[error(
        "host {host}: spec.firmware cannot be mapped to BIOS settings: the vendor is unknown (BMC driver {driver}, inspected manufacturer {manufacturer}; bmo knows Dell's and HPE's names); {fix}",
        fix = FIX
    )]
    UnknownVendor {
        host: String,
        driver: String,
        manufacturer: String,
    },
    #[error(
        "host {host}: spec.firmware cannot be mapped to {vendor} BIOS settings: upstream's {vendor} names belonged to Ironic's iRMC driver, which Ironic and bmo no longer have; {fix}",
        fix = FIX
    )]
    NoNames { host: String, vendor: Vendor },
    #[error(
        "host {host}: {field} sets the BIOS setting {setting}, which HostFirmwareSettings {host} spec.settings sets too; remove it from one of them"
    )]
    Conflict {
        host: String,
        field: &'static str,
        setting: &'static str,
    },
    #[error(
        "host {host}: {field} maps to the {vendor} BIOS setting {setting}, which the BMC does not report (HostFirmwareSettings {host} status.settings); {fix}",
        fix = FIX
    )]
    NotReported {
        host: String,
        field: &'static str,
        vendor: Vendor,
        setting: &'static str,
    },
}

/// The host's vendor: from its BMC driver when that names one, else from the
/// inspected manufacturer.
pub fn vendor_of(host: &BareMetalHost) -> Result<Vendor, LegacyError> {
    let kind = host
        .spec
        .bmc
        .as_ref()
        .and_then(|bmc| BmcAddress::parse(&bmc.address).ok())
        .map(|address| address.kind);
    let manufacturer = host
        .status
        .as_ref()
        .and_then(|s| s.hardware.as_ref())
        .and_then(|h| h.system_vendor.as_ref())
        .and_then(|v| v.manufacturer.as_deref())
        .filter(|m| !m.is_empty());
    kind.and_then(Vendor::of_bmc)
        .or_else(|| manufacturer.and_then(Vendor::of_manufacturer))
        .ok_or_else(|| LegacyError::UnknownVendor {
            host: host.namespaced_name(),
            driver: kind.map_or_else(|| "unknown".to_owned(), |k| k.to_string()),
            manufacturer: manufacturer.map_or_else(|| "none".to_owned(), |m| format!("{m:?}")),
        })
}

/// The settings `spec.firmware` asks for that the BMC does not have yet; `Ok(None)`
/// while the host's HostFirmwareSettings does not show the BIOS yet.
fn still_to_apply(
    host: &BareMetalHost,
    config: &FirmwareConfig,
    settings: Option<&HostFirmwareSettings>,
) -> Result<Option<Vec<(String, serde_json::Value)>>, LegacyError> {
    let name = host.namespaced_name();
    let vendor = vendor_of(host)?;
    let mapped = map(vendor, config).ok_or_else(|| LegacyError::NoNames {
        host: name.clone(),
        vendor,
    })?;
    let Some(settings) = settings else {
        return Ok(None);
    };
    // One setting, one owner: which of the two would win is not for bmo to guess.
    if let Some(m) = mapped
        .iter()
        .find(|m| settings.spec.settings.contains_key(m.setting))
    {
        return Err(LegacyError::Conflict {
            host: name,
            field: m.switch.field(),
            setting: m.setting,
        });
    }
    let Some(status) = settings
        .status
        .as_ref()
        .filter(|s| s.firmware_schema.is_some())
    else {
        return Ok(None);
    };
    let mut wanted = Vec::new();
    for m in &mapped {
        match status.settings.get(m.setting) {
            None => {
                return Err(LegacyError::NotReported {
                    host: name,
                    field: m.switch.field(),
                    vendor,
                    setting: m.setting,
                });
            }
            Some(current) if current == m.value => {}
            Some(_) => wanted.push((m.setting.to_owned(), serde_json::Value::from(m.value))),
        }
    }
    Ok(Some(wanted))
}

/// What preparing applies: the host's HostFirmwareSettings ([`pending_settings`]),
/// plus, while the host is preparing, the `spec.firmware` switches as its vendor's
/// settings that differ from what the BMC reports (waiting until the BIOS was read),
/// or why they cannot be applied.
pub fn pending(host: &BareMetalHost, settings: Option<&HostFirmwareSettings>) -> PendingSettings {
    let base = pending_settings(settings);
    let Some(config) = host
        .spec
        .firmware
        .as_ref()
        .filter(|c| !switches(c).is_empty())
    else {
        return base;
    };
    if host.provisioning_state() != ProvisioningState::Preparing {
        return base;
    }
    let wanted = match still_to_apply(host, config, settings) {
        Err(e) => return PendingSettings::Refused(e.to_string()),
        Ok(None) => return PendingSettings::NotReady,
        Ok(Some(wanted)) => wanted,
    };
    match base {
        PendingSettings::None if wanted.is_empty() => PendingSettings::None,
        PendingSettings::None => PendingSettings::Apply(wanted),
        PendingSettings::Apply(mut apply) => {
            // The conflict check above keeps the names apart.
            let names: BTreeSet<String> = apply.iter().map(|(n, _)| n.clone()).collect();
            apply.extend(wanted.into_iter().filter(|(n, _)| !names.contains(n)));
            PendingSettings::Apply(apply)
        }
        other @ (PendingSettings::NotReady | PendingSettings::Refused(_)) => other,
    }
}

#[cfg(test)]
mod tests;
