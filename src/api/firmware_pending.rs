//! What the judged firmware objects ask of preparing: the contract between the
//! firmware controller, which writes their conditions, and the host controller,
//! which reads them (as upstream's host controller does) while preparing.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::firmware::{
    COMPONENTS_CHANGE_DETECTED, COMPONENTS_VALID, FirmwareUpdate, HostFirmwareComponents,
    HostFirmwareSettings, SETTINGS_CHANGE_DETECTED, SETTINGS_VALID,
};

/// What a host's HostFirmwareSettings asks of preparing, as upstream's host
/// controller reads it.
#[derive(Debug, Clone, Default, PartialEq)]
pub enum PendingSettings {
    /// Nothing to apply: no object, no change, or a change that is not valid.
    #[default]
    None,
    /// The conditions do not describe the current spec yet (or no settings were
    /// read): wait for the firmware controller.
    NotReady,
    /// Apply these settings (name, value), which differ from what the BMC reports.
    Apply(Vec<(String, serde_json::Value)>),
    /// What is asked cannot be applied (`spec.firmware` of an unknown vendor, or
    /// naming a setting HostFirmwareSettings names too): the sentence says why and
    /// what to do. Only the host controller's reading of `spec.firmware` says this.
    Refused(String),
}

/// A firmware object whose spec the firmware controller judges in two conditions.
trait Judged: kube::Resource {
    /// Its conditions, and the types of the two that judge the spec: a change
    /// detected, and whether it is valid.
    fn judgement(&self) -> (&[Condition], [&'static str; 2]);
}

impl Judged for HostFirmwareSettings {
    fn judgement(&self) -> (&[Condition], [&'static str; 2]) {
        let conditions = self.status.as_ref().map_or(&[][..], |s| &s.conditions);
        (conditions, [SETTINGS_CHANGE_DETECTED, SETTINGS_VALID])
    }
}

impl Judged for HostFirmwareComponents {
    fn judgement(&self) -> (&[Condition], [&'static str; 2]) {
        let conditions = self.status.as_ref().map_or(&[][..], |s| &s.conditions);
        (conditions, [COMPONENTS_CHANGE_DETECTED, COMPONENTS_VALID])
    }
}

/// `object` when its conditions, read as upstream's host controller reads them, say
/// it holds a valid change of its current spec; else the answer `none` (no object, no
/// change detected, or one not valid) or `not_ready` (the conditions do not describe
/// the current spec yet).
fn judged<K: Judged, T>(object: Option<&K>, (none, not_ready): (T, T)) -> Result<&K, T> {
    let Some(object) = object else {
        return Err(none);
    };
    let (conditions, [changed, valid]) = object.judgement();
    let find = |kind: &str| conditions.iter().find(|c| c.type_ == kind);
    let Some(change) = find(changed) else {
        return Err(none);
    };
    if change.observed_generation != object.meta().generation {
        return Err(not_ready);
    }
    if find(valid).is_none_or(|c| c.status != "True") || change.status != "True" {
        return Err(none);
    }
    Ok(object)
}

/// The settings preparing should apply: only a valid change whose conditions are
/// as new as the spec; values already in place are left out.
pub fn pending_settings(settings: Option<&HostFirmwareSettings>) -> PendingSettings {
    let settings = match judged(settings, (PendingSettings::None, PendingSettings::NotReady)) {
        Ok(settings) => settings,
        Err(answer) => return answer,
    };
    let status = settings.status.clone().unwrap_or_default();
    if status.settings.is_empty() {
        return PendingSettings::NotReady;
    }
    let apply: Vec<(String, serde_json::Value)> = settings
        .spec
        .settings
        .iter()
        .filter(|(name, wanted)| status.settings.get(*name) != Some(&value_text(wanted)))
        .map(|(name, wanted)| {
            let value = match wanted {
                IntOrString::Int(i) => serde_json::Value::from(*i),
                IntOrString::String(s) => serde_json::Value::from(s.as_str()),
            };
            (name.clone(), value)
        })
        .collect();
    if apply.is_empty() {
        PendingSettings::None
    } else {
        PendingSettings::Apply(apply)
    }
}

/// A wanted value as the BMC shows values: integers in decimal.
pub fn value_text(value: &IntOrString) -> String {
    match value {
        IntOrString::Int(i) => i.to_string(),
        IntOrString::String(s) => s.clone(),
    }
}

/// What a host's HostFirmwareComponents asks of preparing, as upstream's host
/// controller reads it.
#[derive(Debug, Clone, Default, PartialEq)]
pub enum PendingUpdates {
    /// Nothing to flash: no object, no change, a refused change, or every update
    /// already recorded as applied.
    #[default]
    None,
    /// The conditions do not describe the current spec yet: wait for the firmware
    /// controller.
    NotReady,
    /// Flash `flash` (the updates in the spec that `status.updates` lacks); once
    /// cleaning started, `status.updates` records `spec` (the whole list, as
    /// upstream).
    Apply {
        flash: Vec<FirmwareUpdate>,
        spec: Vec<FirmwareUpdate>,
    },
}

/// The updates preparing should flash: only a valid change whose conditions are as
/// new as the spec, and only those not recorded as applied (upstream's difference
/// by component and URL).
pub fn pending_updates(object: Option<&HostFirmwareComponents>) -> PendingUpdates {
    let object = match judged(object, (PendingUpdates::None, PendingUpdates::NotReady)) {
        Ok(object) => object,
        Err(answer) => return answer,
    };
    let status = object.status.clone().unwrap_or_default();
    let apply: Vec<FirmwareUpdate> = object
        .spec
        .updates
        .iter()
        .filter(|wanted| {
            !status
                .updates
                .iter()
                .any(|done| done.component == wanted.component && done.url == wanted.url)
        })
        .cloned()
        .collect();
    if apply.is_empty() {
        PendingUpdates::None
    } else {
        PendingUpdates::Apply {
            flash: apply,
            spec: object.spec.updates.clone(),
        }
    }
}
