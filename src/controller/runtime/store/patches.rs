//! Guarded writes of lists other controllers share (finalizers, ownerReferences) and
//! the take-over of fields written with Update: each write carries a precondition
//! (a JSON Patch `test` of the list as read, or of the resourceVersion when the list
//! is absent), so a lost race comes back as [`StoreError::Conflict`].

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};
use kube::api::{Patch, PatchParams};
use kube::{Api, Resource, ResourceExt};
use serde_json::{Value, json};

use super::managed_fields::take_over_updates;
use super::{FIELD_MANAGER, StoreError};

/// `~` and `/` escaped for a JSON Pointer segment.
pub fn pointer_segment(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

/// A JSON Patch that sets the list at `path` (read as `current`) to `wanted`, with a
/// `test` that the list is still as read — or, when it was absent, that the object's
/// resourceVersion is still as read.
pub fn guarded_list_patch(
    path: &str,
    current: &[Value],
    absent: bool,
    resource_version: Option<&str>,
    wanted: Vec<Value>,
) -> Vec<Value> {
    if absent {
        vec![
            json!({"op": "test", "path": "/metadata/resourceVersion", "value": resource_version.unwrap_or_default()}),
            json!({"op": "add", "path": path, "value": wanted}),
        ]
    } else {
        vec![
            json!({"op": "test", "path": path, "value": current}),
            json!({"op": "replace", "path": path, "value": wanted}),
        ]
    }
}

/// [`guarded_list_patch`] of `object`'s list at `path`, read as `current`, to
/// `wanted`.
pub fn guarded_list_write<K: Resource, T: serde::Serialize>(
    object: &K,
    path: &str,
    current: &Option<Vec<T>>,
    wanted: &[T],
) -> Result<Vec<Value>, StoreError> {
    let values = |items: &[T]| {
        let values: Result<Vec<Value>, _> = items.iter().map(serde_json::to_value).collect();
        values.map_err(|e| StoreError::Kube(kube::Error::SerdeError(e)))
    };
    let read = values(current.as_deref().unwrap_or_default())?;
    let version = object.meta().resource_version.as_deref();
    let patch = guarded_list_patch(path, &read, current.is_none(), version, values(wanted)?);
    Ok(patch)
}

/// Adds `owner` to `object`'s owners, if they are still as read.
pub async fn add_owner<K>(api: &Api<K>, object: &K, owner: OwnerReference) -> Result<K, StoreError>
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let current = &object.meta().owner_references;
    let wanted = [object.owner_references(), &[owner]].concat();
    let patch = guarded_list_write(object, "/metadata/ownerReferences", current, &wanted)?;
    patch_guarded(api, object, patch).await
}

/// Applies the JSON Patch `operations` to `object`, their `test`s its preconditions:
/// the object as it is afterwards; a failed test is [`StoreError::Conflict`].
pub async fn patch_guarded<K>(
    api: &Api<K>,
    object: &K,
    operations: Vec<Value>,
) -> Result<K, StoreError>
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let patch = Patch::Json::<()>(json_patch(operations)?);
    let name = object.name_any();
    let patched = api.patch(&name, &PatchParams::default(), &patch).await;
    patched.map_err(conflict_or)
}

/// Server-side applies `body` to the object `name` as `manager`, forced (the fields
/// `manager` applied before and leaves out go): the object as it is afterwards.
pub async fn apply_as<K>(
    api: &Api<K>,
    name: &str,
    manager: &str,
    body: &(impl serde::Serialize + std::fmt::Debug),
) -> Result<K, kube::Error>
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let params = PatchParams::apply(manager).force();
    api.patch(name, &params, &Patch::Apply(body)).await
}

/// A failed `test` comes back as 422 (Invalid), a stale resourceVersion as 409.
pub fn conflict_or(e: kube::Error) -> StoreError {
    match &e {
        kube::Error::Api(status) if status.code == 409 || status.code == 422 => {
            StoreError::Conflict
        }
        _ => StoreError::Kube(e),
    }
}

/// The object, or `None` on 404.
pub fn found<T>(result: Result<T, kube::Error>) -> Result<Option<T>, StoreError> {
    match result {
        Ok(object) => Ok(Some(object)),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(None),
        Err(e) => Err(StoreError::Kube(e)),
    }
}

/// Sets `object`'s finalizers to `wanted`, if they are still as read.
pub async fn patch_finalizers<K>(
    api: &Api<K>,
    object: &K,
    wanted: Vec<String>,
) -> Result<(), StoreError>
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let current = &object.meta().finalizers;
    let patch = guarded_list_write(object, "/metadata/finalizers", current, &wanted)?;
    patch_guarded(api, object, patch).await?;
    Ok(())
}

/// Makes bmo the only owner of the fields of `object` (`subresource` of it) that any
/// field manager wrote with Update, as client-go's managed-fields upgrade does: the
/// managedFields are replaced only if the resourceVersion is still the one read.
/// The object as it is afterwards, or `None` when there was nothing to take over.
pub async fn take_over<K>(
    api: &Api<K>,
    object: &K,
    subresource: &str,
) -> Result<Option<K>, StoreError>
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    let managed = object.meta().managed_fields.as_deref().unwrap_or_default();
    let Some(wanted) = take_over_updates(managed, FIELD_MANAGER, subresource, &now) else {
        return Ok(None);
    };
    let wanted =
        serde_json::to_value(wanted).map_err(|e| StoreError::Kube(kube::Error::SerdeError(e)))?;
    let version = object
        .meta()
        .resource_version
        .as_deref()
        .unwrap_or_default();
    let patch = vec![
        json!({"op": "test", "path": "/metadata/resourceVersion", "value": version}),
        json!({"op": "replace", "path": "/metadata/managedFields", "value": wanted}),
    ];
    let newer = patch_guarded(api, object, patch).await?;
    tracing::info!(
        object = %object.name_any(),
        subresource,
        "took over the fields other field managers wrote with Update"
    );
    Ok(Some(newer))
}

/// JSON Patch operations as kube sends them.
pub fn json_patch(operations: Vec<Value>) -> Result<json_patch::Patch, StoreError> {
    serde_json::from_value(Value::Array(operations))
        .map_err(|e| StoreError::Kube(kube::Error::SerdeError(e)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_writes_test_the_list_or_the_version() {
        let present = guarded_list_patch(
            "/metadata/finalizers",
            &[json!("a")],
            false,
            Some("7"),
            vec![json!("a"), json!("b")],
        );
        assert_eq!(
            present[0],
            json!({"op": "test", "path": "/metadata/finalizers", "value": ["a"]})
        );
        assert_eq!(present[1]["op"], "replace");
        let absent = guarded_list_patch(
            "/metadata/finalizers",
            &[],
            true,
            Some("7"),
            vec![json!("b")],
        );
        assert_eq!(
            absent[0],
            json!({"op": "test", "path": "/metadata/resourceVersion", "value": "7"})
        );
        assert_eq!(
            absent[1],
            json!({"op": "add", "path": "/metadata/finalizers", "value": ["b"]})
        );
        assert_eq!(pointer_segment("a/b~c"), "a~1b~0c");
    }
}
