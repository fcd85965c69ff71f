//! Reading a node's firmware: its BIOS settings and their registry.

use super::IronicProvisioner;
use crate::api::firmware::{SettingSchema, SettingType};
use crate::ironic::BiosSetting;
use crate::provisioner::{BiosSettings, NodeRef, ProvisionerError};

impl IronicProvisioner {
    pub(in crate::provisioner) async fn read_bios(
        &self,
        node: &NodeRef,
    ) -> Result<Option<BiosSettings>, ProvisionerError> {
        let err = |source| ProvisionerError::Ironic {
            host: node.id.to_string(),
            source,
        };
        let ident = match node.provisioning_id.as_deref().filter(|id| !id.is_empty()) {
            Some(id) => id.to_owned(),
            None => node.id.node_name(),
        };
        let Some(list) = self.client.get_bios(&ident).await.map_err(err)? else {
            return Ok(None);
        };
        Ok(Some(bios_settings(list)))
    }
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
}
