//! Taking over fields another manager wrote with a plain update, the way client-go's
//! managed-fields upgrade (`csaupgrade`) does.
//!
//! Upstream's operator saves a host's status with an Update, so its field manager
//! (`baremetal-operator`, the binary's name, which client-go puts in the user agent)
//! keeps owning every status field it ever set. bmo saves with server-side apply, and
//! leaving a field out of an apply removes it only when nobody else owns it: a stale
//! `errorType` written by upstream would stay for good. Moving those Update entries'
//! fields into bmo's Apply entry makes bmo their sole owner, so the next apply that
//! leaves a field out clears it.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, ManagedFieldsEntry, Time};
use serde_json::{Map, Value};

/// Upstream baremetal-operator's field manager: it sets none, so the API server takes
/// the first part of client-go's user agent, the binary's name (`/baremetal-operator`
/// in upstream's image, built by its Dockerfile as `baremetal-operator`).
pub const UPSTREAM_FIELD_MANAGER: &str = "baremetal-operator";

/// `managed` with every `Update` entry of `subresource` folded into `manager`'s `Apply` entry for that subresource (made when
/// missing, stamped `now`); `None` when there is no such entry, so nothing to write.
pub fn take_over_updates(
    managed: &[ManagedFieldsEntry],
    manager: &str,
    subresource: &str,
    now: &Time,
) -> Option<Vec<ManagedFieldsEntry>> {
    // Any manager's Update, bmo's own included: an Update never gives a field up.
    let update_entry = |e: &ManagedFieldsEntry| {
        e.operation.as_deref() == Some("Update") && of_subresource(e, subresource)
    };
    let ours = |e: &ManagedFieldsEntry| {
        e.operation.as_deref() == Some("Apply")
            && of_subresource(e, subresource)
            && e.manager.as_deref() == Some(manager)
    };
    let taken: Vec<&ManagedFieldsEntry> = managed.iter().filter(|e| update_entry(e)).collect();
    let first = taken.first()?;
    let mut fields = managed
        .iter()
        .find(|e| ours(e))
        .and_then(|e| e.fields_v1.as_ref())
        .map(|f| f.0.clone())
        .unwrap_or_else(|| Value::Object(Map::new()));
    for entry in &taken {
        if let Some(other) = &entry.fields_v1 {
            union(&mut fields, &other.0);
        }
    }
    let api_version = managed
        .iter()
        .find(|e| ours(e))
        .and_then(|e| e.api_version.clone())
        .or_else(|| first.api_version.clone());
    let applied = ManagedFieldsEntry {
        api_version,
        fields_type: Some("FieldsV1".into()),
        fields_v1: Some(FieldsV1(fields)),
        manager: Some(manager.into()),
        operation: Some("Apply".into()),
        subresource: (!subresource.is_empty()).then(|| subresource.into()),
        time: Some(now.clone()),
    };
    let mut result: Vec<ManagedFieldsEntry> = managed
        .iter()
        .filter(|e| !update_entry(e) && !ours(e))
        .cloned()
        .collect();
    result.push(applied);
    Some(result)
}

/// Whether any field manager wrote fields of `subresource` with an Update (so an
/// apply that leaves them out would not clear them).
pub fn has_updates(managed: &[ManagedFieldsEntry], subresource: &str) -> bool {
    managed
        .iter()
        .any(|e| e.operation.as_deref() == Some("Update") && of_subresource(e, subresource))
}

/// Drops `object`'s managedFields, unless a field manager wrote its status with an
/// Update (which [`take_over_updates`] must see whole). Watch caches hold every
/// object for as long as bmo runs, and a managedFields list costs about as much
/// memory as the fields it lists; nothing else of bmo reads it.
pub fn trim<K: kube::Resource>(object: &mut K) {
    let meta = object.meta_mut();
    let needed = meta
        .managed_fields
        .as_deref()
        .is_some_and(|managed| has_updates(managed, "status"));
    if !needed {
        meta.managed_fields = None;
    }
}

/// `body` (what bmo is about to apply) without empty objects and nulls, at any
/// depth: an object left empty by that is dropped in turn.
///
/// After [`take_over_updates`], bmo owns every field upstream wrote, `null`s inside
/// objects included (upstream writes `operationHistory.deprovision` as
/// `{"start": null, "end": null}` until it has run). An apply that names such an
/// object as `{}` removes the children bmo owns and no longer sends, and the API
/// server stores the emptied object as `null`, which the schema refuses (422, `must
/// be of type object`) — every later status write with it. Left out, the object is
/// removed whole, which is valid; an object with content is kept as sent.
pub fn without_empty_objects(body: &mut Value) {
    match body {
        Value::Object(map) => {
            for value in map.values_mut() {
                without_empty_objects(value);
            }
            map.retain(|_, value| {
                !value.is_null() && value.as_object().is_none_or(|o| !o.is_empty())
            });
        }
        Value::Array(items) => items.iter_mut().for_each(without_empty_objects),
        _ => {}
    }
}

fn of_subresource(entry: &ManagedFieldsEntry, subresource: &str) -> bool {
    entry.subresource.as_deref().unwrap_or_default() == subresource
}

/// Adds every field of `other` (a FieldsV1 tree: objects whose leaves are `{}`) to
/// `into`.
fn union(into: &mut Value, other: &Value) {
    let (Value::Object(into), Value::Object(other)) = (into, other) else {
        return;
    };
    for (key, value) in other {
        match into.get_mut(key) {
            Some(existing) => union(existing, value),
            None => {
                into.insert(key.clone(), value.clone());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn entry(
        manager: &str,
        operation: &str,
        subresource: &str,
        fields: Value,
    ) -> ManagedFieldsEntry {
        ManagedFieldsEntry {
            api_version: Some("metal3.io/v1alpha1".into()),
            fields_type: Some("FieldsV1".into()),
            fields_v1: Some(FieldsV1(fields)),
            manager: Some(manager.into()),
            operation: Some(operation.into()),
            subresource: (!subresource.is_empty()).then(|| subresource.into()),
            time: None,
        }
    }

    /// `manager`'s Update of `fields` (below `f:status`) of the status subresource.
    fn status_update(manager: &str, fields: Value) -> ManagedFieldsEntry {
        entry(manager, "Update", "status", json!({"f:status": fields}))
    }

    /// `manager`'s Apply of `fields` (below `f:status`) of the status subresource.
    fn status_apply(manager: &str, fields: Value) -> ManagedFieldsEntry {
        entry(manager, "Apply", "status", json!({"f:status": fields}))
    }

    fn now() -> Time {
        Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH)
    }

    #[test]
    fn upstream_status_update_becomes_part_of_bmos_apply_entry() {
        let managed = vec![
            // Upstream's finalizer on the main resource: not status, left alone.
            entry(
                UPSTREAM_FIELD_MANAGER,
                "Update",
                "",
                json!({"f:metadata": {"f:finalizers": {".": {}, "v:\"baremetalhost.metal3.io\"": {}}}}),
            ),
            status_update(
                UPSTREAM_FIELD_MANAGER,
                json!({".": {}, "f:errorType": {}, "f:provisioning": {".": {}, "f:image": {"f:url": {}}}}),
            ),
            status_apply(
                "bmo",
                json!({"f:provisioning": {"f:state": {}}, "f:errorCount": {}}),
            ),
        ];
        let taken =
            take_over_updates(&managed, "bmo", "status", &now()).expect("something to take");
        assert_eq!(taken.len(), 2, "{taken:?}");
        assert_eq!(taken[0], managed[0]);
        let ours = &taken[1];
        assert_eq!(
            (
                ours.manager.as_deref(),
                ours.operation.as_deref(),
                ours.subresource.as_deref()
            ),
            (Some("bmo"), Some("Apply"), Some("status"))
        );
        assert_eq!(ours.time, Some(now()));
        assert_eq!(
            ours.fields_v1.as_ref().map(|f| &f.0),
            Some(&json!({"f:status": {
                ".": {},
                "f:errorType": {},
                "f:errorCount": {},
                "f:provisioning": {".": {}, "f:state": {}, "f:image": {"f:url": {}}}
            }}))
        );
    }

    #[test]
    fn an_apply_entry_is_made_when_bmo_never_wrote_the_status() {
        let managed = vec![
            status_update("kubectl-edit", json!({"f:poweredOn": {}})),
            status_update(UPSTREAM_FIELD_MANAGER, json!({"f:errorMessage": {}})),
        ];
        let taken =
            take_over_updates(&managed, "bmo", "status", &now()).expect("something to take");
        assert_eq!(taken.len(), 1);
        assert_eq!(
            taken[0].fields_v1.as_ref().map(|f| &f.0),
            Some(&json!({"f:status": {"f:poweredOn": {}, "f:errorMessage": {}}}))
        );
        assert_eq!(taken[0].api_version.as_deref(), Some("metal3.io/v1alpha1"));
    }

    #[test]
    fn nothing_to_do_without_updates_of_the_subresource() {
        let managed = vec![
            status_apply("bmo", json!({"f:errorCount": {}})),
            entry(
                UPSTREAM_FIELD_MANAGER,
                "Update",
                "",
                json!({"f:spec": {"f:online": {}}}),
            ),
            status_apply("other", json!({"f:poweredOn": {}})),
        ];
        assert_eq!(take_over_updates(&managed, "bmo", "status", &now()), None);
        assert_eq!(take_over_updates(&[], "bmo", "status", &now()), None);
    }

    /// Shapes found in upstream's status (02aa505, tests/controller/
    /// controller_upstream_migration.rs) as bmo reads and writes it back.
    #[test]
    fn an_operation_upstream_never_ran_is_left_out_not_sent_empty() {
        use crate::api::BareMetalHostStatus;
        // Upstream's nulls inside an object: read as an operation with no times.
        let upstream = json!({
            "operationalStatus": "OK", "errorMessage": "", "poweredOn": false,
            "errorCount": 0, "provisioningFailCount": 0,
            "provisioning": {"state": "available", "ID": "n-1"},
            "operationHistory": {
                "register": {"start": "2026-12-05T19:00:00Z", "end": "2026-12-05T19:00:05Z"},
                "inspect": {"start": null, "end": null},
                "provision": {"start": null, "end": null},
                "deprovision": {"start": null, "end": null}
            }
        });
        let status: BareMetalHostStatus =
            serde_json::from_value(upstream).expect("upstream's status reads");
        let mut body = serde_json::to_value(&status).expect("serializes");
        assert_eq!(body["operationHistory"]["deprovision"], json!({}));
        without_empty_objects(&mut body);
        assert_eq!(
            body["operationHistory"],
            json!({"register": {"start": "2026-12-05T19:00:00Z", "end": "2026-12-05T19:00:05Z"}})
        );
    }

    /// A host upstream left in `registering` with a wrong password, as stored (the
    /// real footprint, tests/controller/controller_upstream_migration.rs), plus a
    /// field bmo does not know: what bmo would apply back is valid.
    #[test]
    fn upstreams_real_status_round_trips_into_a_valid_apply() {
        use crate::api::BareMetalHostStatus;
        let upstream = json!({
            "conditions": [{"lastTransitionTime": "2026-12-05T19:34:41Z", "message": "",
                "observedGeneration": 1, "reason": "RegistrationFailed", "status": "False",
                "type": "Manageable"}],
            "errorCount": 1,
            "errorMessage": "Failed to get power state for node 19dd81cc: 401",
            "errorType": "registration error",
            "goodCredentials": {},
            "hardwareProfile": "unknown",
            "lastUpdated": "2026-12-05T19:34:45Z",
            "operationHistory": {
                "deprovision": {"end": null, "start": null},
                "inspect": {"end": null, "start": null},
                "provision": {"end": null, "start": null},
                "register": {"end": null, "start": "2026-12-05T19:34:41Z"}
            },
            "operationalStatus": "error",
            "poweredOn": false,
            "provisioning": {"ID": "19dd81cc", "bootMode": "UEFI", "image": {"url": ""},
                "rootDeviceHints": {"deviceName": "/dev/sda"}, "state": "registering"},
            "provisioningFailCount": 0,
            "triedCredentials": {"credentials": {"name": "bad", "namespace": "up1"},
                "credentialsVersion": "277"},
            "someFutureField": {"nested": null}
        });
        let status: BareMetalHostStatus =
            serde_json::from_value(upstream).expect("upstream's status reads");
        let mut body = serde_json::to_value(&status).expect("serializes");
        without_empty_objects(&mut body);
        // Nulls inside objects: the operations never run are left out whole.
        assert_eq!(
            body["operationHistory"],
            json!({"register": {"start": "2026-12-05T19:34:41Z"}})
        );
        // An empty object: left out.
        assert!(body.get("goodCredentials").is_none(), "{body}");
        // Empty strings are values: kept as they are.
        assert_eq!(body["provisioning"]["image"], json!({"url": ""}));
        assert_eq!(body["conditions"][0]["message"], json!(""));
        assert_eq!(
            body["provisioning"]["rootDeviceHints"],
            json!({"deviceName": "/dev/sda"})
        );
        assert_eq!(body["hardwareProfile"], json!("unknown"));
        // A field bmo does not know: not read, so not sent (once bmo owns it, the
        // apply removes it).
        assert!(body.get("someFutureField").is_none(), "{body}");
        assert!(!body.to_string().contains("null"), "{body}");
    }

    #[test]
    fn empty_objects_and_nulls_go_at_any_depth_the_rest_stays() {
        let mut body = json!({
            "errorMessage": "",
            "poweredOn": false,
            "errorCount": 0,
            "goodCredentials": {},
            "lastUpdated": null,
            "operationHistory": {"inspect": {"start": null}, "provision": {}},
            "provisioning": {"state": "available", "ID": "", "image": {"url": ""}, "raid": {}},
            "conditions": [{"type": "Ready", "reason": "", "extra": {}}],
        });
        without_empty_objects(&mut body);
        assert_eq!(
            body,
            json!({
                "errorMessage": "",
                "poweredOn": false,
                "errorCount": 0,
                "provisioning": {"state": "available", "ID": "", "image": {"url": ""}},
                "conditions": [{"type": "Ready", "reason": ""}],
            })
        );
    }

    #[test]
    fn caches_keep_managed_fields_only_when_a_status_update_must_be_taken_over() {
        use crate::api::BareMetalHost;
        let applied_only = vec![
            status_apply("bmo", json!({"f:errorCount": {}})),
            entry("kubectl", "Update", "", json!({"f:spec": {"f:online": {}}})),
        ];
        let mut host = BareMetalHost::new("host-0", Default::default());
        host.metadata.managed_fields = Some(applied_only.clone());
        trim(&mut host);
        assert_eq!(host.metadata.managed_fields, None);

        let mut migrated = applied_only;
        migrated.push(status_update(
            UPSTREAM_FIELD_MANAGER,
            json!({"f:errorType": {}}),
        ));
        host.metadata.managed_fields = Some(migrated.clone());
        trim(&mut host);
        assert_eq!(host.metadata.managed_fields, Some(migrated));
    }
}
