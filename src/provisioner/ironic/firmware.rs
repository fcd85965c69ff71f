//! Reading a node's firmware: its BIOS settings and their registry, and its firmware
//! components with their versions.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::IronicProvisioner;
use crate::api::firmware::{
    FirmwareComponentStatus, NIC_COMPONENT_PREFIX, SettingSchema, SettingType,
};
use crate::ironic::{BiosSetting, FirmwareComponent};
use crate::provisioner::{BiosSettings, NodeRef, ProvisionerError};

/// The node's identifier for reads: its UUID when recorded, else its name.
fn ident(node: &NodeRef) -> String {
    match node.provisioning_id.as_deref().filter(|id| !id.is_empty()) {
        Some(id) => id.to_owned(),
        None => node.id.node_name(),
    }
}

impl IronicProvisioner {
    pub(in crate::provisioner) async fn read_firmware_components(
        &self,
        node: &NodeRef,
    ) -> Result<Option<Vec<FirmwareComponentStatus>>, ProvisionerError> {
        let err = |source| ProvisionerError::Ironic {
            host: node.id.to_string(),
            source,
        };
        let list = self.client.get_firmware(&ident(node)).await.map_err(err)?;
        Ok(list.map(|l| l.into_iter().filter_map(component_status).collect()))
    }

    pub(in crate::provisioner) async fn read_bios(
        &self,
        node: &NodeRef,
    ) -> Result<Option<BiosSettings>, ProvisionerError> {
        let err = |source| ProvisionerError::Ironic {
            host: node.id.to_string(),
            source,
        };
        let Some(list) = self.client.get_bios(&ident(node)).await.map_err(err)? else {
            return Ok(None);
        };
        Ok(Some(bios_settings(list)))
    }
}

/// One of Ironic's components as upstream shows it; only BIOS, BMC and NICs (as
/// upstream, which ignores other kinds).
fn component_status(c: FirmwareComponent) -> Option<FirmwareComponentStatus> {
    let known = c.component == "bios"
        || c.component == "bmc"
        || c.component.starts_with(NIC_COMPONENT_PREFIX);
    if !known {
        tracing::debug!(component = %c.component, "ignoring firmware component");
        return None;
    }
    Some(FirmwareComponentStatus {
        component: c.component,
        initial_version: c.initial_version.unwrap_or_default(),
        current_version: c.current_version.filter(|v| !v.is_empty()),
        last_version_flashed: c.last_version_flashed.filter(|v| !v.is_empty()),
        updated_at: c
            .updated_at
            .and_then(|t| t.parse::<k8s_openapi::jiff::Timestamp>().ok())
            .map(Time),
    })
}

/// Ironic's list as settings (name → value) and their schema.
fn bios_settings(list: Vec<BiosSetting>) -> BiosSettings {
    let mut out = BiosSettings::default();
    for setting in list {
        let schema = SettingSchema {
            // A type outside Redfish's five is kept as "no type": nothing is checked.
            attribute_type: setting
                .attribute_type
                .and_then(|t| serde_json::from_value::<SettingType>(t.into()).ok()),
            allowable_values: setting.allowable_values.unwrap_or_default(),
            lower_bound: setting.lower_bound,
            upper_bound: setting.upper_bound,
            min_length: setting.min_length,
            max_length: setting.max_length,
            read_only: setting.read_only,
            unique: setting.unique,
        };
        out.settings
            .insert(setting.name.clone(), setting.value.unwrap_or_default());
        out.schema.insert(setting.name, schema);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ironic_settings_become_values_and_schema() {
        let list: Vec<BiosSetting> = serde_json::from_value(serde_json::json!([
            {"name": "ProcTurboMode", "value": "Enabled", "attribute_type": "Enumeration",
             "allowable_values": ["Enabled", "Disabled"], "read_only": false,
             "reset_required": true, "unique": false},
            {"name": "NumCores", "value": "8", "attribute_type": "Integer",
             "lower_bound": 1, "upper_bound": 16},
            {"name": "Odd", "value": null, "attribute_type": "Map"}
        ]))
        .expect("valid list");
        let read = bios_settings(list);
        assert_eq!(read.settings["ProcTurboMode"], "Enabled");
        assert_eq!(read.settings["Odd"], "");
        assert_eq!(
            read.schema["ProcTurboMode"].allowable_values,
            vec!["Enabled", "Disabled"]
        );
        assert_eq!(
            read.schema["NumCores"].attribute_type,
            Some(SettingType::Integer)
        );
        assert_eq!(read.schema["NumCores"].upper_bound, Some(16));
        assert_eq!(read.schema["Odd"].attribute_type, None);
    }

    #[test]
    fn ironic_components_keep_bios_bmc_and_nics_only() {
        let list: Vec<FirmwareComponent> = serde_json::from_value(serde_json::json!([
            {"component": "bmc", "initial_version": "1.00", "current_version": "1.00",
             "last_version_flashed": null, "created_at": "2026-12-03T22:00:00+00:00",
             "updated_at": null},
            {"component": "bios", "initial_version": "2.1", "current_version": "2.2",
             "last_version_flashed": "2.2", "updated_at": "2026-12-03T22:05:00+00:00"},
            {"component": "nic:NIC.1", "initial_version": "7", "current_version": "7"},
            {"component": "cpld", "initial_version": "1", "current_version": "1"}
        ]))
        .expect("valid list");
        let shown: Vec<FirmwareComponentStatus> =
            list.into_iter().filter_map(component_status).collect();
        let names: Vec<&str> = shown.iter().map(|c| c.component.as_str()).collect();
        assert_eq!(names, ["bmc", "bios", "nic:NIC.1"]);
        assert_eq!(shown[0].initial_version, "1.00");
        assert_eq!(shown[0].last_version_flashed, None);
        assert_eq!(shown[0].updated_at, None);
        assert_eq!(shown[1].current_version.as_deref(), Some("2.2"));
        assert_eq!(shown[1].last_version_flashed.as_deref(), Some("2.2"));
        assert!(shown[1].updated_at.is_some());
    }
}
