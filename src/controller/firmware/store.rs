//! What the firmware controllers read and write beyond every kind's
//! ([`ObjectStore`]): the objects bmo makes for a host, and the owner appended to a
//! shared FirmwareSchema ([`FirmwareStore::own_schema`]), on the API server
//! ([`KubeClient`]) and in memory ([`MemoryObjects`]).

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Patch, PatchParams};
use kube::{Resource, ResourceExt};
use serde_json::json;

use crate::api::BareMetalHost;
use crate::api::firmware::{
    FirmwareSchema, HostFirmwareComponents, HostFirmwareSettings, HostFirmwareSettingsSpec,
};
use crate::controller::runtime::store::memory::key_of;
use crate::controller::runtime::store::{
    Kind, KubeClient, MemoryObjects, ObjectStore, StatusApply, StoreError, conflict_or, json_patch,
    owner_reference,
};

/// Upstream says Normal for everything; bmo marks refusals as warnings, as it does
/// for hosts.
impl Kind for HostFirmwareSettings {
    const STATUS_APPLY: StatusApply = StatusApply {
        refusal_is_conflict: false,
        ..StatusApply::PLAIN
    };
}

/// Applied with the resourceVersion as read, so a status the host controller changed
/// meanwhile (it records the updates preparing started) is never overwritten: that
/// write is [`StoreError::Conflict`], and the reconcile reads again.
impl Kind for HostFirmwareComponents {
    const STATUS_APPLY: StatusApply = StatusApply {
        if_unchanged: true,
        ..StatusApply::PLAIN
    };
}

/// What the firmware controllers write beyond every kind's.
pub trait FirmwareStore: ObjectStore {
    /// Appends `settings` to `schema`'s owners as the schema is now (another owner
    /// added since it was read is kept).
    fn own_schema(
        &self,
        settings: &HostFirmwareSettings,
        schema: &FirmwareSchema,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
}

/// `settings` as an owner (of its FirmwareSchema), as upstream sets it.
pub(super) fn settings_owner(settings: &HostFirmwareSettings) -> OwnerReference {
    OwnerReference {
        api_version: "metal3.io/v1alpha1".into(),
        kind: "HostFirmwareSettings".into(),
        name: settings.name_any(),
        uid: settings.metadata.uid.clone().unwrap_or_default(),
        controller: None,
        block_owner_deletion: None,
    }
}

/// The empty HostFirmwareSettings of `host`, owned by it.
pub(super) fn new_settings(host: &BareMetalHost) -> HostFirmwareSettings {
    let mut settings =
        HostFirmwareSettings::new(&host.name_any(), HostFirmwareSettingsSpec::default());
    settings.metadata.namespace = host.namespace();
    settings.metadata.owner_references = Some(vec![owner_reference(host, false)]);
    settings
}

/// Owners this bmo appended to a FirmwareSchema lately, by (schema, owner uid): the
/// schema cache may not show them yet, and an append is not sent twice.
#[derive(Default)]
struct AppendedOwners(Mutex<HashMap<(String, String), Instant>>);

/// How long an appended owner is remembered: far longer than a watch event takes.
const APPENDED_OWNER_MEMORY: Duration = Duration::from_secs(60);

impl FirmwareStore for KubeClient {
    /// The schema of a model is shared by every host of it, and carries one owner per
    /// host (as upstream's does): a thousand hosts make it a quarter of a megabyte,
    /// and during an enrolment they add themselves at once. So the patch appends the
    /// one owner without a precondition (the API server applies it to the object as
    /// it is then: no lost races, no re-reads), and the answer is not kept. Only a
    /// schema without owners is written whole, guarded by its resourceVersion.
    async fn own_schema(
        &self,
        settings: &HostFirmwareSettings,
        schema: &FirmwareSchema,
    ) -> Result<(), StoreError> {
        let owner = settings_owner(settings);
        let appended = (key_of(schema), owner.uid.clone());
        let recent = self.kept::<AppendedOwners>();
        {
            let mut recent = recent.0.lock().unwrap_or_else(PoisonError::into_inner);
            recent.retain(|_, at| at.elapsed() < APPENDED_OWNER_MEMORY);
            if recent.contains_key(&appended) {
                return Ok(());
            }
        }
        let owner = serde_json::to_value(owner)
            .map_err(|e| StoreError::Kube(kube::Error::SerdeError(e)))?;
        let operations = match schema.metadata.owner_references {
            Some(_) => {
                vec![json!({"op": "add", "path": "/metadata/ownerReferences/-", "value": owner})]
            }
            None => vec![
                json!({"op": "test", "path": "/metadata/resourceVersion",
                       "value": schema.metadata.resource_version.as_deref().unwrap_or_default()}),
                json!({"op": "add", "path": "/metadata/ownerReferences", "value": [owner]}),
            ],
        };
        let namespace = schema.namespace().unwrap_or_default();
        let request = kube::core::Request::new(FirmwareSchema::url_path(&(), Some(&namespace)))
            .patch(
                &schema.name_any(),
                &PatchParams::default(),
                &Patch::Json::<()>(json_patch(operations)?),
            )
            .map_err(|e| StoreError::Kube(kube::Error::BuildRequest(e)))?;
        self.client()
            .request::<serde::de::IgnoredAny>(request)
            .await
            .map_err(conflict_or)?;
        let mut recent = recent.0.lock().unwrap_or_else(PoisonError::into_inner);
        recent.insert(appended, Instant::now());
        Ok(())
    }
}

impl FirmwareStore for MemoryObjects {
    /// As on the API server: appended to the schema as stored now.
    async fn own_schema(
        &self,
        settings: &HostFirmwareSettings,
        schema: &FirmwareSchema,
    ) -> Result<(), StoreError> {
        self.update(schema, |stored| {
            stored.owner_references_mut().push(settings_owner(settings));
            Ok(())
        })
    }
}
