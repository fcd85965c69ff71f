use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ManagedFieldsEntry, OwnerReference};
use serde_json::json;

use super::*;
use crate::controller::runtime::store::MemoryObjects;

/// Upstream's own test schema (hostfirmwaresettings_test.go), whose name upstream's
/// test pins as `schema-4bcc035f`.
fn upstream_test_schema() -> BTreeMap<String, SettingSchema> {
    serde_json::from_value(json!({
        "AssetTag": {"attribute_type": "String", "min_length": 0, "max_length": 20, "unique": true},
        "CustomPostMessage": {"attribute_type": "String", "min_length": 0, "max_length": 20, "unique": false, "read_only": false},
        "L2Cache": {"attribute_type": "String", "min_length": 0, "max_length": 20, "read_only": true},
        "NetworkBootRetryCount": {"attribute_type": "Integer", "lower_bound": 0, "upper_bound": 20, "read_only": false},
        "ProcVirtualization": {"attribute_type": "Enumeration", "allowable_values": ["Enabled", "Disabled"], "read_only": false},
        "SecureBoot": {"attribute_type": "Enumeration", "allowable_values": ["Enabled", "Disabled"], "read_only": true},
    }))
    .expect("valid schema")
}

fn upstream_test_settings() -> BTreeMap<String, String> {
    [
        ("L2Cache", "10x512 KB"),
        ("NetworkBootRetryCount", "20"),
        ("ProcVirtualization", "Disabled"),
        ("SecureBoot", "Enabled"),
        ("AssetTag", "X45672917"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect()
}

#[test]
fn schema_names_match_upstreams() {
    assert_eq!(schema_name(&upstream_test_schema()), "schema-4bcc035f");
    // `unique` is not part of the name (upstream leaves it out).
    let mut other = upstream_test_schema();
    if let Some(s) = other.get_mut("AssetTag") {
        s.unique = Some(false);
    }
    assert_eq!(schema_name(&other), "schema-4bcc035f");
    // Anything else is.
    if let Some(s) = other.get_mut("NetworkBootRetryCount") {
        s.upper_bound = Some(21);
    }
    assert_ne!(schema_name(&other), "schema-4bcc035f");
}

#[test]
fn each_wanted_setting_is_checked_as_upstream_checks_it() {
    let schema = upstream_test_schema();
    let current = upstream_test_settings();
    let int = |i: i32| IntOrString::Int(i);
    let text = |s: &str| IntOrString::String(s.to_owned());
    let table: Vec<(&str, IntOrString, Option<&str>)> = vec![
        ("ProcVirtualization", text("Enabled"), None),
        (
            "ProcVirtualization",
            text("On"),
            Some(
                "Setting ProcVirtualization is invalid, unknown enumeration value - On (allowed values: Enabled, Disabled)",
            ),
        ),
        ("NetworkBootRetryCount", int(5), None),
        ("NetworkBootRetryCount", text("7"), None),
        (
            "NetworkBootRetryCount",
            int(21),
            Some("Setting NetworkBootRetryCount is invalid, integer 21 is above maximum value 20"),
        ),
        (
            "NetworkBootRetryCount",
            int(-1),
            Some("Setting NetworkBootRetryCount is invalid, integer -1 is below minimum value 0"),
        ),
        (
            "NetworkBootRetryCount",
            text("many"),
            Some(
                "Setting NetworkBootRetryCount is invalid, String many entered while integer expected",
            ),
        ),
        (
            "SecureBoot",
            text("Disabled"),
            Some("Setting SecureBoot is invalid, it is ReadOnly"),
        ),
        (
            "AssetTag",
            text("a-very-long-asset-tag-indeed"),
            Some(
                "Setting AssetTag is invalid, string a-very-long-asset-tag-indeed length is above maximum length 20",
            ),
        ),
        (
            "NoSuchSetting",
            text("x"),
            Some("setting NoSuchSetting is not in the Status field"),
        ),
        (
            "AdminPassword",
            text("x"),
            Some("cannot set Password field"),
        ),
    ];
    for (name, value, expected) in table {
        let wanted = BTreeMap::from([(name.to_owned(), value.clone())]);
        let errors = validate(&wanted, &current, &schema);
        assert_eq!(
            errors,
            expected.map(str::to_owned).into_iter().collect::<Vec<_>>(),
            "{name} = {value:?}"
        );
    }
    // A setting the BMC reports without a registry entry is not in the schema.
    let mut current = current;
    current.insert("Unlisted".into(), "a".into());
    let wanted = BTreeMap::from([("Unlisted".to_owned(), text("b"))]);
    assert_eq!(
        validate(&wanted, &current, &schema),
        vec!["Setting Unlisted is invalid, it is not in the associated schema"]
    );
    // A schema entry without a type accepts anything (BMCs without a registry).
    let untyped = BTreeMap::from([("Unlisted".to_owned(), SettingSchema::default())]);
    assert!(validate(&wanted, &current, &untyped).is_empty());
}

fn host(node: &str) -> BareMetalHost {
    test_host("h", node)
}

/// A host named `name` whose node (`status.provisioning.ID`) is `node`.
pub(crate) fn test_host(name: &str, node: &str) -> BareMetalHost {
    let mut host: BareMetalHost = serde_json::from_value(json!({
        "apiVersion": "metal3.io/v1alpha1", "kind": "BareMetalHost",
        "metadata": {"name": name, "namespace": "ns", "uid": format!("{name}-uid"), "generation": 1},
        "spec": {"online": true},
    }))
    .expect("valid host");
    let mut status = crate::api::BareMetalHostStatus::default();
    status.provisioning.id = node.to_owned();
    status.provisioning.state = crate::api::ProvisioningState::Available;
    host.status = Some(status);
    host
}

fn owner(uid: &str) -> OwnerReference {
    owned_by("metal3.io/v1alpha1", "BareMetalHost", "h", uid)
}

/// An owner: `kind` (of `api_version`) `name`, by `uid`.
pub(crate) fn owned_by(api_version: &str, kind: &str, name: &str, uid: &str) -> OwnerReference {
    OwnerReference {
        api_version: api_version.into(),
        kind: kind.into(),
        name: name.into(),
        uid: uid.into(),
        ..OwnerReference::default()
    }
}

/// The uids of `object`'s owners, in order.
pub(crate) fn owner_uids(object: &impl kube::Resource) -> Vec<String> {
    let owners = object.meta().owner_references.iter().flatten();
    owners.map(|o| o.uid.clone()).collect()
}

/// The names of `object`'s owners, in order.
pub(crate) fn owner_names(object: &impl kube::Resource) -> Vec<String> {
    let owners = object.meta().owner_references.iter().flatten();
    owners.map(|o| o.name.clone()).collect()
}

fn hfs(spec: serde_json::Value, owners: Vec<OwnerReference>) -> HostFirmwareSettings {
    let mut settings: HostFirmwareSettings = serde_json::from_value(json!({
        "apiVersion": "metal3.io/v1alpha1", "kind": "HostFirmwareSettings",
        "metadata": {"name": "h", "namespace": "ns", "uid": "hfs-uid", "generation": 2},
        "spec": {"settings": spec},
    }))
    .expect("valid settings");
    settings.metadata.owner_references = Some(owners);
    settings
}

fn schema_object(owned: bool) -> FirmwareSchema {
    let mut schema = FirmwareSchema::new(
        "schema-4bcc035f",
        FirmwareSchemaSpec {
            schema: upstream_test_schema(),
            ..FirmwareSchemaSpec::default()
        },
    );
    schema.metadata.namespace = Some("ns".into());
    schema.metadata.owner_references = owned.then(|| {
        vec![OwnerReference {
            uid: "hfs-uid".into(),
            ..OwnerReference::default()
        }]
    });
    schema
}

fn bios() -> BiosSettings {
    let mut settings = upstream_test_settings();
    settings.insert("AdminPassword".into(), "secret".into());
    let mut schema = upstream_test_schema();
    schema.insert(
        "AdminPassword".into(),
        SettingSchema {
            attribute_type: Some(SettingType::Password),
            ..SettingSchema::default()
        },
    );
    BiosSettings { settings, schema }
}

/// The time the firmware tests run at.
pub(crate) fn now() -> Time {
    Time(k8s_openapi::jiff::Timestamp::from_second(1_800_000_000).expect("valid time"))
}

/// What upstream's operator leaves on a status it wrote: an Update by its field
/// manager.
pub(crate) fn upstream_status_update() -> ManagedFieldsEntry {
    ManagedFieldsEntry {
        manager: Some("baremetal-operator".into()),
        operation: Some("Update".into()),
        subresource: Some("status".into()),
        ..ManagedFieldsEntry::default()
    }
}

/// (object, reason, message) of every event published to `store`.
pub(crate) fn events(store: &MemoryObjects) -> Vec<(String, String, String)> {
    let events = store.events_about().into_iter();
    events
        .map(|(object, event)| (object, event.reason, event.message))
        .collect()
}

/// The firmware controllers' context on `provisioner` and an empty in-memory store.
pub(crate) fn memory_context<P>(
    provisioner: P,
) -> crate::controller::firmware::FirmwareContext<P, MemoryObjects> {
    crate::controller::firmware::FirmwareContext {
        provisioner,
        store: Default::default(),
        namespace: None,
    }
}

fn kind(step: &Step) -> &'static str {
    match step {
        Step::Idle => "Idle",
        Step::CreateSettings => "CreateSettings",
        Step::AdoptSettings => "AdoptSettings",
        Step::ReadBios => "ReadBios",
        Step::LookUpSchema(_) => "LookUpSchema",
        Step::CreateSchema(_) => "CreateSchema",
        Step::OwnSchema => "OwnSchema",
        Step::Status(StatusStep::Save { .. }) => "SaveStatus",
        Step::Status(StatusStep::Unchanged(_)) => "Done",
    }
}

/// A case of [`steps_follow_what_is_known`]: what it is, the facts, the step's kind.
type Case = (&'static str, Facts, &'static str);

/// Facts of `host` and its settings object `settings`, nothing read yet.
fn known(host: BareMetalHost, settings: Option<HostFirmwareSettings>) -> Facts {
    Facts {
        host: Some(host),
        settings,
        ..Facts::default()
    }
}

/// The settings object of host `h-uid`, as bmo made it.
fn ours() -> Option<HostFirmwareSettings> {
    Some(hfs(json!({}), vec![owner("h-uid")]))
}

/// Facts of a host with a node, its settings object ours and its BIOS read, the
/// schema as looked up.
fn bios_read(schema: Option<Lookup<FirmwareSchema>>) -> Facts {
    Facts {
        bios: Some(bios()),
        schema,
        ..known(host("node-1"), ours())
    }
}

/// Hosts whose BIOS Ironic has not read, or that are gone or going.
fn cases_of_the_host() -> Vec<Case> {
    use crate::api::ProvisioningState::{Inspecting, Preparing, Registering};
    let in_state = |state| {
        let mut h = host("node-1");
        if let Some(s) = h.status.as_mut() {
            s.provisioning.state = state;
        }
        h
    };
    let mut deleted = host("node-1");
    deleted.metadata.deletion_timestamp = Some(now());
    vec![
        ("no host", Facts::default(), "Idle"),
        (
            "registering host without a settings object: made before Ironic read the BIOS",
            known(in_state(Registering), None),
            "CreateSettings",
        ),
        (
            "registering host: Ironic has not read the BIOS yet",
            known(in_state(Registering), ours()),
            "Idle",
        ),
        (
            "inspecting host: Ironic reads the BIOS again when inspection ends",
            known(in_state(Inspecting), ours()),
            "Idle",
        ),
        (
            "preparing host",
            known(in_state(Preparing), ours()),
            "ReadBios",
        ),
        ("host without a node", known(host(""), None), "Idle"),
        ("host being deleted", known(deleted, None), "Idle"),
    ]
}

/// A host with a node, and its settings object missing, someone else's or ours.
fn cases_of_the_settings_object() -> Vec<Case> {
    let mut written_by_upstream = hfs(json!({}), vec![owner("h-uid")]);
    written_by_upstream.metadata.managed_fields = Some(vec![upstream_status_update()]);
    let another_hosts = hfs(json!({}), vec![owner("old-uid")]);
    vec![
        (
            "no settings object",
            known(host("node-1"), None),
            "CreateSettings",
        ),
        (
            "settings object of another host of that name",
            known(host("node-1"), Some(another_hosts)),
            "AdoptSettings",
        ),
        (
            "status written by upstream with Update",
            known(host("node-1"), Some(written_by_upstream)),
            "AdoptSettings",
        ),
        (
            "ours, BIOS not read",
            known(host("node-1"), ours()),
            "ReadBios",
        ),
    ]
}

/// The BIOS read, and its schema not looked up, missing, someone else's or ours.
fn cases_of_the_schema() -> Vec<Case> {
    let everything = Facts {
        now: Some(now()),
        ..bios_read(Some(Lookup::Found(schema_object(true))))
    };
    vec![
        (
            "read, schema not looked up",
            bios_read(None),
            "LookUpSchema",
        ),
        (
            "schema missing",
            bios_read(Some(Lookup::Missing)),
            "CreateSchema",
        ),
        (
            "schema of another host",
            bios_read(Some(Lookup::Found(schema_object(false)))),
            "OwnSchema",
        ),
        (
            "everything known, status not written",
            everything,
            "SaveStatus",
        ),
    ]
}

#[test]
fn steps_follow_what_is_known() {
    let table = [
        cases_of_the_host(),
        cases_of_the_settings_object(),
        cases_of_the_schema(),
    ];
    for (case, facts, expected) in table.concat() {
        assert_eq!(kind(&next(&facts)), expected, "{case}");
    }
}

#[test]
fn the_schema_made_leaves_passwords_out_and_is_named_by_the_full_read() {
    let facts = Facts {
        host: Some(host("node-1")),
        settings: Some(hfs(json!({}), vec![owner("h-uid")])),
        bios: Some(bios()),
        schema: Some(Lookup::Missing),
        now: None,
    };
    let Step::CreateSchema(schema) = next(&facts) else {
        panic!("expected CreateSchema");
    };
    // Named by everything read, passwords included, as upstream names it.
    assert_eq!(
        schema.metadata.name.as_deref(),
        Some(schema_name(&bios().schema).as_str())
    );
    assert_eq!(schema.metadata.namespace.as_deref(), Some("ns"));
    assert_eq!(schema.spec.schema, upstream_test_schema());
}

/// The status after one save, and what the next look says.
fn saved(
    spec: serde_json::Value,
) -> (
    HostFirmwareSettingsStatus,
    Vec<(String, String)>,
    Duration,
    Step,
) {
    let mut facts = Facts {
        host: Some(host("node-1")),
        settings: Some(hfs(spec, vec![owner("h-uid")])),
        bios: Some(bios()),
        schema: Some(Lookup::Found(schema_object(true))),
        now: Some(now()),
    };
    let Step::Status(StatusStep::Save {
        status,
        events,
        requeue,
    }) = next(&facts)
    else {
        panic!("expected SaveStatus");
    };
    if let Some(settings) = facts.settings.as_mut() {
        settings.status = Some(status.clone());
    }
    (status, events, requeue, next(&facts))
}

fn condition<'a>(
    status: &'a HostFirmwareSettingsStatus,
    kind: &str,
) -> (&'a str, &'a str, &'a str, Option<i64>) {
    let c = status
        .conditions
        .iter()
        .find(|c| c.type_ == kind)
        .expect("condition present");
    (
        c.status.as_str(),
        c.reason.as_str(),
        c.message.as_str(),
        c.observed_generation,
    )
}

#[test]
fn conditions_and_events_follow_the_wanted_settings() {
    // Nothing wanted: valid, no change, the settings without passwords.
    let (status, events, requeue, then) = saved(json!({}));
    assert_eq!(status.settings, upstream_test_settings());
    assert_eq!(
        status.firmware_schema,
        Some(SchemaReference {
            namespace: "ns".into(),
            name: "schema-4bcc035f".into()
        })
    );
    assert_eq!(status.last_updated, Some(now()));
    assert_eq!(
        condition(&status, SETTINGS_VALID),
        ("True", REASON_SUCCESS, "", Some(2))
    );
    assert_eq!(
        condition(&status, SETTINGS_CHANGE_DETECTED),
        ("False", REASON_SUCCESS, "", Some(2))
    );
    assert!(
        status
            .conditions
            .iter()
            .all(|c| c.last_transition_time == now())
    );
    assert!(events.is_empty());
    assert_eq!(requeue, REQUEUE);
    assert_eq!(
        then,
        Step::Status(StatusStep::Unchanged(REQUEUE)),
        "a saved status is not written again"
    );

    // A valid change: detected, valid, looked at again sooner.
    let (status, events, requeue, then) = saved(json!({"ProcVirtualization": "Enabled"}));
    assert_eq!(condition(&status, SETTINGS_VALID).0, "True");
    assert_eq!(condition(&status, SETTINGS_CHANGE_DETECTED).0, "True");
    assert!(events.is_empty());
    assert_eq!(requeue, REQUEUE_CHANGE_DETECTED);
    assert_eq!(
        then,
        Step::Status(StatusStep::Unchanged(REQUEUE_CHANGE_DETECTED))
    );

    // A wanted value equal to the current one is no change.
    let (status, ..) = saved(json!({"NetworkBootRetryCount": 20}));
    assert_eq!(condition(&status, SETTINGS_CHANGE_DETECTED).0, "False");

    // Refused values: invalid, one event per setting naming it and what it accepts.
    let (status, events, _, _) =
        saved(json!({"ProcVirtualization": "On", "SecureBoot": "Disabled"}));
    assert_eq!(
        condition(&status, SETTINGS_VALID),
        (
            "False",
            REASON_CONFIGURATION_ERROR,
            INVALID_MESSAGE,
            Some(2)
        )
    );
    assert_eq!(condition(&status, SETTINGS_CHANGE_DETECTED).0, "True");
    assert_eq!(
        events,
        vec![
            (
                EVENT_VALIDATION_FAILED.to_owned(),
                "Invalid BIOS setting: Setting ProcVirtualization is invalid, unknown enumeration value - On (allowed values: Enabled, Disabled)".to_owned()
            ),
            (
                EVENT_VALIDATION_FAILED.to_owned(),
                "Invalid BIOS setting: Setting SecureBoot is invalid, it is ReadOnly".to_owned()
            ),
        ]
    );
}

#[test]
fn a_condition_keeps_its_transition_time_while_its_status_stays() {
    let (status, ..) = saved(json!({}));
    let later = Time(k8s_openapi::jiff::Timestamp::from_second(1_900_000_000).expect("valid time"));
    let mut settings = hfs(
        json!({"ProcVirtualization": "Enabled"}),
        vec![owner("h-uid")],
    );
    settings.status = Some(status);
    let facts = Facts {
        host: Some(host("node-1")),
        settings: Some(settings),
        bios: Some(bios()),
        schema: Some(Lookup::Found(schema_object(true))),
        now: Some(later.clone()),
    };
    let Step::Status(StatusStep::Save { status, .. }) = next(&facts) else {
        panic!("expected SaveStatus");
    };
    let time = |kind: &str| {
        status
            .conditions
            .iter()
            .find(|c| c.type_ == kind)
            .map(|c| c.last_transition_time.clone())
    };
    assert_eq!(time(SETTINGS_VALID), Some(now()), "Valid stayed True");
    assert_eq!(
        time(SETTINGS_CHANGE_DETECTED),
        Some(later),
        "ChangeDetected turned True"
    );
}

fn with_conditions(
    spec: serde_json::Value,
    status_settings: serde_json::Value,
    conditions: serde_json::Value,
) -> HostFirmwareSettings {
    let mut settings = hfs(spec, vec![owner("h-uid")]);
    settings.status = Some(
        serde_json::from_value(json!({"settings": status_settings, "conditions": conditions}))
            .expect("valid status"),
    );
    settings
}

fn cond(kind: &str, status: &str, generation: i64) -> serde_json::Value {
    json!({"type": kind, "status": status, "reason": "Success", "message": "",
           "observedGeneration": generation, "lastTransitionTime": "2027-01-01T00:00:00Z"})
}

#[test]
fn preparing_applies_only_a_valid_change_judged_at_the_current_generation() {
    // The object's generation is 2.
    let current = json!({"ProcTurboMode": "Enabled", "BootRetries": "3"});
    let wanted = json!({"ProcTurboMode": "Disabled", "BootRetries": 3});
    let table: Vec<(&str, Option<HostFirmwareSettings>, PendingSettings)> = vec![
        ("no object", None, PendingSettings::None),
        (
            "not judged yet",
            Some(with_conditions(wanted.clone(), current.clone(), json!([]))),
            PendingSettings::None,
        ),
        (
            "judged at an older generation",
            Some(with_conditions(
                wanted.clone(),
                current.clone(),
                json!([cond("ChangeDetected", "True", 1), cond("Valid", "True", 1)]),
            )),
            PendingSettings::NotReady,
        ),
        (
            "invalid",
            Some(with_conditions(
                wanted.clone(),
                current.clone(),
                json!([cond("ChangeDetected", "True", 2), cond("Valid", "False", 2)]),
            )),
            PendingSettings::None,
        ),
        (
            "no change",
            Some(with_conditions(
                wanted.clone(),
                current.clone(),
                json!([cond("ChangeDetected", "False", 2), cond("Valid", "True", 2)]),
            )),
            PendingSettings::None,
        ),
        (
            "nothing read yet",
            Some(with_conditions(
                wanted.clone(),
                json!({}),
                json!([cond("ChangeDetected", "True", 2), cond("Valid", "True", 2)]),
            )),
            PendingSettings::NotReady,
        ),
        (
            "a valid change: only what differs",
            Some(with_conditions(
                wanted,
                current,
                json!([cond("ChangeDetected", "True", 2), cond("Valid", "True", 2)]),
            )),
            PendingSettings::Apply(vec![("ProcTurboMode".into(), json!("Disabled"))]),
        ),
    ];
    for (case, settings, expected) in table {
        assert_eq!(pending_settings(settings.as_ref()), expected, "{case}");
    }
    // Integers go to Ironic as numbers.
    let settings = with_conditions(
        json!({"BootRetries": 5}),
        json!({"BootRetries": "3"}),
        json!([cond("ChangeDetected", "True", 2), cond("Valid", "True", 2)]),
    );
    assert_eq!(
        pending_settings(Some(&settings)),
        PendingSettings::Apply(vec![("BootRetries".into(), json!(5))])
    );
}
