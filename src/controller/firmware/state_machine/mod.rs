//! What the HostFirmwareSettings controller does next, as pure functions of what it
//! has read so far (no I/O, no clock).
//!
//! The steps, in order: nothing while the host has no node; make the host's
//! HostFirmwareSettings when it is missing, or adopt the one upstream's operator
//! left (the host as owner, status fields written with Update taken over); read the
//! BIOS settings; find the FirmwareSchema named by the hash of their schema (made when
//! missing, the settings object added to its owners); then save the status when it
//! changed. Names, hash, conditions and messages follow upstream's controller.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::ResourceExt;

use crate::api::BareMetalHost;
use crate::api::firmware::{
    FirmwareSchema, FirmwareSchemaSpec, HostFirmwareSettings, HostFirmwareSettingsStatus,
    SETTINGS_CHANGE_DETECTED, SETTINGS_VALID, SchemaReference, SettingSchema, SettingType,
};
pub use crate::api::firmware_pending::{PendingSettings, pending_settings, value_text};
use crate::controller::runtime::conditions::HasConditions;
use crate::controller::runtime::store::managed_fields::has_updates;
use crate::provisioner::BiosSettings;

/// Look again this soon while `spec.settings` differs from the BMC's (upstream: so the
/// status follows once cleaning applied them).
pub const REQUEUE_CHANGE_DETECTED: Duration = Duration::from_secs(60);
/// Otherwise, look again this soon. What bmo reads is what Ironic last read from the
/// BMC, and Ironic reads again only when it verifies, inspects, cleans or services
/// the node, after each of which bmo reads anyway ([`ironic_read_firmware`] and the
/// wakes in `run.rs`); this look only catches what those miss. Upstream looks every
/// 5 minutes, which at 1000 hosts is 7 Ironic requests a second for the BIOS
/// settings and firmware components of hosts at rest.
pub const REQUEUE: Duration = Duration::from_secs(3600);

/// Condition reasons, upstream's.
pub const REASON_SUCCESS: &str = "Success";
pub const REASON_CONFIGURATION_ERROR: &str = "ConfigurationError";
/// Condition message when a setting is refused, upstream's.
pub const INVALID_MESSAGE: &str = "Invalid BIOS setting";
/// Event reason for a refused setting, upstream's.
pub const EVENT_VALIDATION_FAILED: &str = "ValidationFailed";

/// What the reconciler has gathered.
#[derive(Debug, Clone, Default)]
pub struct Facts {
    /// The BareMetalHost of the same name.
    pub host: Option<BareMetalHost>,
    /// The HostFirmwareSettings.
    pub settings: Option<HostFirmwareSettings>,
    /// The node's BIOS as the provisioner read it.
    pub bios: Option<BiosSettings>,
    /// The FirmwareSchema named by the hash of `bios`'s schema, once looked up.
    pub schema: Option<Lookup<FirmwareSchema>>,
    pub now: Option<Time>,
}

/// An object looked up by name.
#[derive(Debug, Clone, PartialEq)]
pub enum Lookup<T> {
    Found(T),
    Missing,
}

/// One thing for the reconciler to do.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// The host is gone, being deleted, or has no node yet: wait for it to change.
    Idle,
    /// Make the HostFirmwareSettings, owned by the host, with empty spec and status.
    CreateSettings,
    /// The HostFirmwareSettings exists (upstream's operator made it, or the host was
    /// made again): add the host to its owners and take over its status fields.
    AdoptSettings,
    /// Read the node's BIOS settings.
    ReadBios,
    /// Look the FirmwareSchema of this name up.
    LookUpSchema(String),
    /// Make this FirmwareSchema, owned by the settings object.
    CreateSchema(Box<FirmwareSchema>),
    /// Add the settings object to the found FirmwareSchema's owners.
    OwnSchema,
    /// Save the status, or look again later.
    Status(StatusStep<HostFirmwareSettingsStatus>),
}

/// The next step.
pub fn next(facts: &Facts) -> Step {
    let Some(host) = facts.host.as_ref().filter(|h| has_node(h)) else {
        return Step::Idle;
    };
    let Some(settings) = &facts.settings else {
        return Step::CreateSettings;
    };
    if needs_adoption(settings, host) {
        return Step::AdoptSettings;
    }
    if !ironic_read_firmware(host) {
        return Step::Idle;
    }
    let Some(bios) = &facts.bios else {
        return Step::ReadBios;
    };
    let name = schema_name(&bios.schema);
    let schema = match &facts.schema {
        None => return Step::LookUpSchema(name),
        Some(Lookup::Missing) => {
            return Step::CreateSchema(Box::new(new_schema(host, settings, bios, name)));
        }
        Some(Lookup::Found(schema)) => schema,
    };
    if !owned_by(schema.owner_references(), settings.metadata.uid.as_deref()) {
        return Step::OwnSchema;
    }
    let (status, events) = status_for(settings, bios, schema);
    let current = settings.status.as_ref();
    Step::Status(status_step(
        current,
        (status, events),
        SETTINGS_CHANGE_DETECTED,
        facts.now.as_ref(),
    ))
}

/// How a firmware object's decisions end: its status saved, or a later look.
#[derive(Debug, Clone, PartialEq)]
pub enum StatusStep<S> {
    /// Write this status and publish these warning events (reason, message).
    Save {
        status: S,
        events: Vec<(String, String)>,
        requeue: Duration,
    },
    /// Nothing changed; look again after this long.
    Unchanged(Duration),
}

/// Whether `object` must be adopted before anything else: `host` is not among its
/// owners, or another field manager wrote its status with Update (upstream's
/// operator), which bmo takes over.
pub(crate) fn needs_adoption<K: kube::Resource>(object: &K, host: &BareMetalHost) -> bool {
    let managed = object.meta().managed_fields.as_deref().unwrap_or_default();
    !owned_by(object.owner_references(), host.metadata.uid.as_deref())
        || has_updates(managed, "status")
}

/// A firmware object's status: conditions set one by one, and when it was last
/// updated.
pub(crate) trait FirmwareStatus: HasConditions + PartialEq {
    fn last_updated_mut(&mut self) -> &mut Option<Time>;
}

impl HasConditions for HostFirmwareSettingsStatus {
    fn conditions_mut(&mut self) -> &mut Vec<Condition> {
        &mut self.conditions
    }
}

impl FirmwareStatus for HostFirmwareSettingsStatus {
    fn last_updated_mut(&mut self) -> &mut Option<Time> {
        &mut self.last_updated
    }
}

/// `status` (with its `events`) to save, stamped at `now` (new transitions and
/// `lastUpdated`), unless the object's `current` status is the same; either way when
/// to look again, sooner while condition `change_detected` is true.
pub(crate) fn status_step<S: FirmwareStatus>(
    current: Option<&S>,
    (mut status, events): (S, Vec<(String, String)>),
    change_detected: &str,
    now: Option<&Time>,
) -> StatusStep<S> {
    let requeue = if condition_true(status.conditions_mut(), change_detected) {
        REQUEUE_CHANGE_DETECTED
    } else {
        REQUEUE
    };
    if current == Some(&status) {
        return StatusStep::Unchanged(requeue);
    }
    if let Some(now) = now {
        stamp_transitions(status.conditions_mut(), now);
    }
    *status.last_updated_mut() = now.cloned();
    StatusStep::Save {
        status,
        events,
        requeue,
    }
}

/// The warning events a saved status publishes.
pub(crate) fn warnings(
    events: &[(String, String)],
) -> Vec<crate::controller::runtime::store::HostEvent> {
    events
        .iter()
        .map(|(reason, message)| {
            crate::controller::runtime::store::HostEvent::warning(reason, message)
        })
        .collect()
}

/// The host has an Ironic node (its UUID is recorded) and is not being deleted, and
/// upstream's firmware controllers would look at it: it is managed, and neither
/// paused nor detached.
pub(crate) fn has_node(host: &BareMetalHost) -> bool {
    use crate::api::host::{DETACHED_ANNOTATION, PAUSED_ANNOTATION};
    use crate::api::{OperationalStatus, ProvisioningState};
    let annotated = |key: &str| host.annotations().contains_key(key);
    host.metadata.deletion_timestamp.is_none()
        && !annotated(PAUSED_ANNOTATION)
        && !annotated(DETACHED_ANNOTATION)
        && host.status.as_ref().is_some_and(|s| {
            !s.provisioning.id.is_empty()
                && s.operational_status != OperationalStatus::Detached
                && !matches!(
                    s.provisioning.state,
                    ProvisioningState::None | ProvisioningState::Unmanaged
                )
        })
}

/// Ironic has read the node's BIOS settings and firmware: it does when it verifies
/// the node and again when inspection ends, so before registration and inspection
/// are over a read shows nothing preparing would act on. The settings object is
/// made meanwhile; what it reports is read once the host moves on.
pub(crate) fn ironic_read_firmware(host: &BareMetalHost) -> bool {
    use crate::api::ProvisioningState as State;
    !host.status.as_ref().is_some_and(|s| {
        matches!(
            s.provisioning.state,
            State::None | State::Unmanaged | State::Registering | State::Inspecting
        )
    })
}

pub(crate) fn owned_by(
    owners: &[k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference],
    uid: Option<&str>,
) -> bool {
    uid.is_some_and(|uid| owners.iter().any(|o| o.uid == uid))
}

pub(crate) fn condition_true(conditions: &[Condition], kind: &str) -> bool {
    conditions
        .iter()
        .any(|c| c.type_ == kind && c.status == "True")
}

/// Upstream's name for a schema: `schema-` and the first 8 hex digits of the SHA-256 of
/// every setting's name, type, allowed values, bounds, lengths and read-only flag,
/// sorted, printed as Go prints a string slice (`[a b c]`). Hosts of one model get the
/// same name, so they share the object; it also names upstream's existing objects.
pub fn schema_name(schema: &BTreeMap<String, SettingSchema>) -> String {
    let mut keys: Vec<String> = Vec::new();
    for (name, setting) in schema {
        keys.push(name.clone());
        keys.push(type_name(setting.attribute_type).to_owned());
        keys.extend(setting.allowable_values.iter().cloned());
        for bound in [
            setting.lower_bound,
            setting.upper_bound,
            setting.min_length,
            setting.max_length,
        ]
        .into_iter()
        .flatten()
        {
            keys.push(bound.to_string());
        }
        if let Some(read_only) = setting.read_only {
            keys.push(read_only.to_string());
        }
    }
    keys.sort();
    let text = format!("[{}]", keys.join(" "));
    let digest = ring::digest::digest(&ring::digest::SHA256, text.as_bytes());
    let hex: String = digest
        .as_ref()
        .iter()
        .take(4)
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("schema-{hex}")
}

fn type_name(kind: Option<SettingType>) -> &'static str {
    match kind {
        None => "",
        Some(SettingType::Enumeration) => "Enumeration",
        Some(SettingType::String) => "String",
        Some(SettingType::Integer) => "Integer",
        Some(SettingType::Boolean) => "Boolean",
        Some(SettingType::Password) => "Password",
    }
}

/// Which bound `value` lies beyond, if any: `("below minimum", low)` or
/// `("above maximum", high)`.
fn out_of_bounds(value: i64, low: Option<i64>, high: Option<i64>) -> Option<(&'static str, i64)> {
    match (
        low.filter(|low| value < *low),
        high.filter(|high| value > *high),
    ) {
        (Some(low), _) => Some(("below minimum", low)),
        (None, Some(high)) => Some(("above maximum", high)),
        (None, None) => None,
    }
}

/// Password settings are never stored: some BMCs report them (encrypted).
fn is_password(name: &str) -> bool {
    name.contains("Password")
}

/// The FirmwareSchema for `bios`, as upstream makes it: no password settings, the
/// inspected vendor and model, owned by the settings object.
fn new_schema(
    host: &BareMetalHost,
    settings: &HostFirmwareSettings,
    bios: &BiosSettings,
    name: String,
) -> FirmwareSchema {
    let vendor = host
        .status
        .as_ref()
        .and_then(|s| s.hardware.as_ref())
        .and_then(|h| h.system_vendor.as_ref());
    let schema = bios
        .schema
        .iter()
        .filter(|(n, s)| !is_password(n) && s.attribute_type != Some(SettingType::Password))
        .map(|(n, s)| (n.clone(), s.clone()))
        .collect();
    let mut object = FirmwareSchema::new(
        &name,
        FirmwareSchemaSpec {
            hardware_vendor: vendor.and_then(|v| v.manufacturer.clone()),
            hardware_model: vendor.and_then(|v| v.product_name.clone()),
            schema,
        },
    );
    object.metadata.namespace = settings.namespace();
    object
}

/// The status for what the BMC reports, with conditions `Valid` and `ChangeDetected`
/// for `spec.settings`, and the events to publish when a setting is refused.
pub fn status_for(
    settings: &HostFirmwareSettings,
    bios: &BiosSettings,
    schema: &FirmwareSchema,
) -> (HostFirmwareSettingsStatus, Vec<(String, String)>) {
    let old = settings.status.clone().unwrap_or_default();
    let current: BTreeMap<String, String> = bios
        .settings
        .iter()
        .filter(|(name, _)| !is_password(name))
        .map(|(n, v)| (n.clone(), v.clone()))
        .collect();
    let changed = settings
        .spec
        .settings
        .iter()
        .any(|(name, wanted)| current.get(name) != Some(&value_text(wanted)));
    let generation = settings.metadata.generation;
    let mut conditions = old.conditions.clone();
    let mut events = Vec::new();
    let mut set = |kind: &str, status: bool, reason: &str, message: &str| {
        set_condition(&mut conditions, kind, status, reason, message, generation);
    };
    let errors = if changed {
        validate(&settings.spec.settings, &current, &schema.spec.schema)
    } else {
        Vec::new()
    };
    set(SETTINGS_CHANGE_DETECTED, changed, REASON_SUCCESS, "");
    if errors.is_empty() {
        set(SETTINGS_VALID, true, REASON_SUCCESS, "");
    } else {
        set(
            SETTINGS_VALID,
            false,
            REASON_CONFIGURATION_ERROR,
            INVALID_MESSAGE,
        );
        // With nothing read yet every name is unknown: no events (upstream).
        if !current.is_empty() {
            events = errors
                .iter()
                .map(|e| {
                    (
                        EVENT_VALIDATION_FAILED.to_owned(),
                        format!("{INVALID_MESSAGE}: {e}"),
                    )
                })
                .collect();
        }
    }
    let status = HostFirmwareSettingsStatus {
        firmware_schema: Some(SchemaReference {
            namespace: schema.namespace().unwrap_or_default(),
            name: schema.name_any(),
        }),
        settings: current,
        last_updated: old.last_updated,
        conditions,
    };
    (status, events)
}

/// Sets condition `kind`, keeping its transition time when its status stays.
pub(crate) fn set_condition(
    conditions: &mut Vec<Condition>,
    kind: &str,
    status: bool,
    reason: &str,
    message: &str,
    generation: Option<i64>,
) {
    let status = if status { "True" } else { "False" };
    let existing = conditions.iter().position(|c| c.type_ == kind);
    let transition = existing
        .map(|i| &conditions[i])
        .filter(|c| c.status == status)
        .map(|c| c.last_transition_time.clone());
    let condition = Condition {
        type_: kind.to_owned(),
        status: status.to_owned(),
        reason: reason.to_owned(),
        message: message.to_owned(),
        observed_generation: generation,
        // A new transition gets its time when saved (the caller stamps it).
        last_transition_time: transition.unwrap_or_else(epoch),
    };
    match existing {
        Some(i) => conditions[i] = condition,
        None => conditions.push(condition),
    }
}

pub(crate) fn epoch() -> Time {
    Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH)
}

/// Stamps `now` on conditions whose transition has no time yet.
pub(crate) fn stamp_transitions(conditions: &mut [Condition], now: &Time) {
    for condition in conditions {
        if condition.last_transition_time == epoch() {
            condition.last_transition_time = now.clone();
        }
    }
}

/// Why each wanted setting cannot be applied, in upstream's words; an enumeration
/// value also names the allowed ones.
pub fn validate(
    wanted: &BTreeMap<String, IntOrString>,
    current: &BTreeMap<String, String>,
    schema: &BTreeMap<String, SettingSchema>,
) -> Vec<String> {
    let mut errors = Vec::new();
    for (name, value) in wanted {
        if is_password(name) {
            errors.push("cannot set Password field".to_owned());
        } else if !current.contains_key(name) {
            errors.push(format!("setting {name} is not in the Status field"));
        } else if let Some(reason) = refusal(schema.get(name), name, value) {
            errors.push(format!("Setting {name} is invalid, {reason}"));
        }
    }
    errors
}

/// Why `value` does not fit `schema`, if it does not.
fn refusal(schema: Option<&SettingSchema>, name: &str, value: &IntOrString) -> Option<String> {
    let Some(schema) = schema else {
        return Some("it is not in the associated schema".to_owned());
    };
    if schema.read_only == Some(true) {
        return Some("it is ReadOnly".to_owned());
    }
    if is_password(name) {
        return Some("Password fields can't be set".to_owned());
    }
    let text = value_text(value);
    match schema.attribute_type {
        Some(SettingType::Enumeration) => (!schema.allowable_values.contains(&text)).then(|| {
            format!(
                "unknown enumeration value - {text} (allowed values: {})",
                schema.allowable_values.join(", ")
            )
        }),
        Some(SettingType::Integer) => {
            let Ok(number) = text.parse::<i64>() else {
                return Some(format!("String {text} entered while integer expected"));
            };
            let (low, high) = (schema.lower_bound, schema.upper_bound);
            out_of_bounds(number, low, high)
                .map(|(side, bound)| format!("integer {number} is {side} value {bound}"))
        }
        Some(SettingType::String) => {
            let length = i64::try_from(text.len()).unwrap_or(i64::MAX);
            out_of_bounds(length, schema.min_length, schema.max_length)
                .map(|(side, bound)| format!("string {text} length is {side} length {bound}"))
        }
        Some(SettingType::Boolean) => {
            (text != "true" && text != "false").then(|| format!("{text} is not a boolean"))
        }
        Some(SettingType::Password) => Some("passwords are immutable".to_owned()),
        // Without a registry entry there is nothing to check (upstream).
        None => None,
    }
}

#[cfg(test)]
pub(crate) mod tests;
