//! Every Kubernetes read and write of the HostFirmwareSettings controller, behind one
//! trait: [`KubeFirmwareStore`] on the API server, [`MemoryFirmwareStore`] for tests.
//! Owner lists are written with a precondition (JSON Patch `test` of the list as
//! read), so a lost race is [`StoreError::Conflict`]; the shared FirmwareSchema's are
//! appended to, without one (see `own_schema` of [`KubeFirmwareStore`]).

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Patch, PatchParams};
use kube::runtime::reflector;
use kube::{Resource, ResourceExt};
use serde_json::json;

use crate::api::BareMetalHost;
use crate::api::firmware::{
    FirmwareSchema, HostFirmwareComponents, HostFirmwareSettings, HostFirmwareSettingsSpec,
    HostFirmwareSettingsStatus, HostUpdatePolicy,
};
use crate::controller::runtime::store::events::Reporter;
use crate::controller::runtime::store::memory::Locked;
pub(super) use crate::controller::runtime::store::memory::{key, key_of, unchanged};
use crate::controller::runtime::store::{
    HostEvent, KubeClient, Read, StatusApply, StoreError, conflict_or, json_patch, owner_reference,
};

/// Upstream's `source.component` on HostFirmwareSettings events.
pub const SOURCE_COMPONENT: &str = "metal3-hostfirmwaresettings-controller";
/// Upstream's `reportingController` on HostFirmwareSettings events.
pub const REPORTING_CONTROLLER: &str = "metal3.io/hostfirmwaresettings-controller";
/// Who posts the HostFirmwareSettings events, as upstream.
pub const REPORTER: Reporter = Reporter {
    component: SOURCE_COMPONENT,
    controller: REPORTING_CONTROLLER,
};

/// The Kubernetes side of the HostFirmwareSettings controller.
pub trait FirmwareStore: Send + Sync {
    fn host(
        &self,
        namespace: &str,
        name: &str,
    ) -> impl Future<Output = Result<Option<BareMetalHost>, StoreError>> + Send;

    /// The object, from where `read` says.
    fn settings(
        &self,
        namespace: &str,
        name: &str,
        read: Read,
    ) -> impl Future<Output = Result<Option<HostFirmwareSettings>, StoreError>> + Send;

    /// Makes the host's HostFirmwareSettings (empty spec), owned by the host;
    /// [`StoreError::Conflict`] when one appeared meanwhile.
    fn create_settings(
        &self,
        host: &BareMetalHost,
    ) -> impl Future<Output = Result<HostFirmwareSettings, StoreError>> + Send;

    /// Adds the host to `settings`' owners (if they are still as read) and makes bmo
    /// the owner of the status fields other managers wrote with Update.
    fn adopt_settings(
        &self,
        host: &BareMetalHost,
        settings: &HostFirmwareSettings,
    ) -> impl Future<Output = Result<HostFirmwareSettings, StoreError>> + Send;

    /// The schema, from where `read` says.
    fn schema(
        &self,
        namespace: &str,
        name: &str,
        read: Read,
    ) -> impl Future<Output = Result<Option<FirmwareSchema>, StoreError>> + Send;

    /// Makes `schema`, owned by `settings`; [`StoreError::Conflict`] when it exists.
    fn create_schema(
        &self,
        settings: &HostFirmwareSettings,
        schema: &FirmwareSchema,
    ) -> impl Future<Output = Result<FirmwareSchema, StoreError>> + Send;

    /// Appends `settings` to `schema`'s owners as the schema is now (another owner
    /// added since it was read is kept).
    fn own_schema(
        &self,
        settings: &HostFirmwareSettings,
        schema: &FirmwareSchema,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Writes the whole status (server-side apply on the status subresource).
    fn apply_status(
        &self,
        settings: &HostFirmwareSettings,
        status: &HostFirmwareSettingsStatus,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Publishes an event about `settings`; a failure is logged, not returned.
    fn publish(
        &self,
        settings: &HostFirmwareSettings,
        reason: &str,
        message: &str,
    ) -> impl Future<Output = ()> + Send;
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
fn new_settings(host: &BareMetalHost) -> HostFirmwareSettings {
    let mut settings =
        HostFirmwareSettings::new(&host.name_any(), HostFirmwareSettingsSpec::default());
    settings.metadata.namespace = host.namespace();
    settings.metadata.owner_references = Some(vec![owner_reference(host, false)]);
    settings
}

/// [`FirmwareStore`] on a Kubernetes client.
#[derive(Clone)]
pub struct KubeFirmwareStore {
    pub(super) kube: KubeClient,
    pub(super) caches: Arc<FirmwareCaches>,
    /// Owners this bmo appended to a FirmwareSchema lately, by (schema, owner uid):
    /// the schema cache may not show them yet, and an append is not sent twice.
    appended_owners: Arc<Mutex<HashMap<(String, String), Instant>>>,
}

/// How long an appended owner is remembered: far longer than a watch event takes.
const APPENDED_OWNER_MEMORY: Duration = Duration::from_secs(60);

/// The firmware objects the running controller watches, so that a reconcile reads
/// them without a request; until a cache has listed, they are read from the API
/// server. A cache a write behind costs at most a status write that changes nothing,
/// a create refused as a conflict, after which the object is read from the API
/// server, or an owner patch of a HostUpdatePolicy refused as a conflict, after which
/// the host looks again a second later.
#[derive(Default)]
pub struct FirmwareCaches {
    pub(super) settings: OnceLock<reflector::Store<HostFirmwareSettings>>,
    pub(super) components: OnceLock<reflector::Store<HostFirmwareComponents>>,
    pub(super) schemas: OnceLock<reflector::Store<FirmwareSchema>>,
    pub(super) policies: OnceLock<reflector::Store<HostUpdatePolicy>>,
}

impl KubeFirmwareStore {
    /// `instance` names this bmo in the events it publishes (`POD_NAME`).
    pub fn new(client: kube::Client, instance: Option<String>) -> Self {
        Self {
            kube: KubeClient::new(client, instance),
            caches: Arc::default(),
            appended_owners: Arc::default(),
        }
    }

    pub fn client(&self) -> &kube::Client {
        self.kube.client()
    }
}

impl FirmwareStore for KubeFirmwareStore {
    async fn host(&self, namespace: &str, name: &str) -> Result<Option<BareMetalHost>, StoreError> {
        self.kube.get(namespace, name).await
    }

    async fn settings(
        &self,
        namespace: &str,
        name: &str,
        read: Read,
    ) -> Result<Option<HostFirmwareSettings>, StoreError> {
        let cache = &self.caches.settings;
        self.kube.read(cache, namespace, name, read).await
    }

    async fn create_settings(
        &self,
        host: &BareMetalHost,
    ) -> Result<HostFirmwareSettings, StoreError> {
        self.kube.create(&new_settings(host)).await
    }

    async fn adopt_settings(
        &self,
        host: &BareMetalHost,
        settings: &HostFirmwareSettings,
    ) -> Result<HostFirmwareSettings, StoreError> {
        let (adopted, _) = self
            .kube
            .adopt(settings, owner_reference(host, false))
            .await?;
        tracing::info!("adopted the host's HostFirmwareSettings");
        Ok(adopted)
    }

    async fn schema(
        &self,
        namespace: &str,
        name: &str,
        read: Read,
    ) -> Result<Option<FirmwareSchema>, StoreError> {
        let cache = &self.caches.schemas;
        self.kube.read(cache, namespace, name, read).await
    }

    async fn create_schema(
        &self,
        settings: &HostFirmwareSettings,
        schema: &FirmwareSchema,
    ) -> Result<FirmwareSchema, StoreError> {
        let mut schema = schema.clone();
        schema.metadata.namespace = settings.namespace();
        schema.metadata.owner_references = Some(vec![settings_owner(settings)]);
        self.kube.create(&schema).await
    }

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
        {
            let mut recent = self
                .appended_owners
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
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
        self.appended_owners
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(appended, Instant::now());
        Ok(())
    }

    async fn apply_status(
        &self,
        settings: &HostFirmwareSettings,
        status: &HostFirmwareSettingsStatus,
    ) -> Result<(), StoreError> {
        let how = StatusApply {
            refusal_is_conflict: false,
            ..StatusApply::PLAIN
        };
        self.kube.apply_status(settings, status, how).await
    }

    /// Upstream says Normal for everything; bmo marks refusals as warnings, as it
    /// does for hosts.
    async fn publish(&self, settings: &HostFirmwareSettings, reason: &str, message: &str) {
        let event = HostEvent::warning(reason, message);
        self.kube.publish(settings, REPORTER, &event).await;
    }
}

/// Where [`Objects`] keeps the objects of one kind.
pub(super) type Kept<K> = fn(&mut Objects) -> &mut BTreeMap<String, K>;

#[derive(Default)]
pub(super) struct Objects {
    hosts: BTreeMap<String, BareMetalHost>,
    settings: BTreeMap<String, HostFirmwareSettings>,
    schemas: BTreeMap<String, FirmwareSchema>,
    /// What [`FirmwareStore::schema`] answers instead, as a cache a write behind.
    stale_schemas: BTreeMap<String, Option<FirmwareSchema>>,
    pub(super) components: BTreeMap<String, HostFirmwareComponents>,
    pub(super) policies: BTreeMap<String, HostUpdatePolicy>,
    pub(super) events: Vec<(String, String, String)>,
    pub(super) status_writes: usize,
    version: u64,
}

/// [`FirmwareStore`] in memory: objects by `namespace/name`, a resourceVersion and a
/// uid per write, every status write and event recorded. Clones share the objects
/// (tests share one store between the controller and a concurrent writer).
#[derive(Default, Clone)]
pub struct MemoryFirmwareStore {
    objects: Arc<Locked<Objects>>,
}

impl MemoryFirmwareStore {
    pub(super) fn lock(&self) -> MutexGuard<'_, Objects> {
        self.objects.lock()
    }

    /// Puts (or replaces) a host, as a user would.
    pub fn put_host(&self, host: BareMetalHost) {
        let mut objects = self.lock();
        objects.hosts.insert(key_of(&host), host);
    }

    /// Puts (or replaces) a HostFirmwareSettings, as a user or another operator would.
    pub fn put_settings(&self, settings: HostFirmwareSettings) {
        let mut objects = self.lock();
        objects.settings.insert(key_of(&settings), settings);
    }

    /// Puts (or replaces) a FirmwareSchema.
    pub fn put_schema(&self, schema: FirmwareSchema) {
        let mut objects = self.lock();
        objects.schemas.insert(key_of(&schema), schema);
    }

    /// Makes [`FirmwareStore::schema`] answer `stale` for the schema `name` from now
    /// on, as a cache that has not seen the latest writes would (`None`: not there).
    pub fn serve_stale_schema(&self, namespace: &str, name: &str, stale: Option<FirmwareSchema>) {
        self.lock()
            .stale_schemas
            .insert(key(namespace, name), stale);
    }

    /// Puts (or replaces) a HostFirmwareComponents, as a user or another operator
    /// would; it gets a resourceVersion.
    pub fn put_components(&self, mut components: HostFirmwareComponents) {
        let mut objects = self.lock();
        objects.stamp(&mut components);
        objects.components.insert(key_of(&components), components);
    }

    pub fn stored_components(&self, namespace: &str, name: &str) -> Option<HostFirmwareComponents> {
        self.lock().components.get(&key(namespace, name)).cloned()
    }

    pub fn stored_settings(&self, namespace: &str, name: &str) -> Option<HostFirmwareSettings> {
        self.lock().settings.get(&key(namespace, name)).cloned()
    }

    pub fn schemas(&self) -> Vec<FirmwareSchema> {
        self.lock().schemas.values().cloned().collect()
    }

    /// (object, reason, message) of every event published.
    pub fn events(&self) -> Vec<(String, String, String)> {
        self.lock().events.clone()
    }

    pub fn status_writes(&self) -> usize {
        self.lock().status_writes
    }
}

impl Objects {
    /// `object` with `host` among its owners and bmo owning its status fields, as on
    /// the API server, if `stored` is still as read.
    pub(super) fn adopted<K: Resource + Clone>(
        &mut self,
        stored: Option<&K>,
        object: &K,
        host: &BareMetalHost,
    ) -> Result<K, StoreError> {
        unchanged(stored, object)?;
        let mut adopted = object.clone();
        let uid = host.metadata.uid.clone().unwrap_or_default();
        if !adopted.owner_references().iter().any(|o| o.uid == uid) {
            adopted
                .owner_references_mut()
                .push(owner_reference(host, false));
        }
        adopted.meta_mut().managed_fields = None;
        self.stamp(&mut adopted);
        Ok(adopted)
    }

    /// Stores the new `object`, stamped, where `kept` says; [`StoreError::Conflict`]
    /// when one of its name is there.
    pub(super) fn create<K: Resource + Clone>(
        &mut self,
        kept: Kept<K>,
        mut object: K,
    ) -> Result<K, StoreError> {
        let key = key_of(&object);
        if kept(self).contains_key(&key) {
            return Err(StoreError::Conflict);
        }
        self.stamp(&mut object);
        kept(self).insert(key, object.clone());
        Ok(object)
    }

    /// Stores `object` [`adopted`](Objects::adopted) by `host`, where `kept` says.
    pub(super) fn adopt<K: Resource + Clone>(
        &mut self,
        kept: Kept<K>,
        object: &K,
        host: &BareMetalHost,
    ) -> Result<K, StoreError> {
        let stored = kept(self).get(&key_of(object)).cloned();
        let adopted = self.adopted(stored.as_ref(), object, host)?;
        kept(self).insert(key_of(&adopted), adopted.clone());
        Ok(adopted)
    }

    /// Stores `object` with its new status, stamped, where `kept` says; counts the
    /// status write.
    pub(super) fn save_status<K: Resource>(&mut self, kept: Kept<K>, mut object: K) {
        self.stamp(&mut object);
        kept(self).insert(key_of(&object), object);
        self.status_writes += 1;
    }

    /// Records an event about `object`.
    pub(super) fn record<K: Resource>(&mut self, object: &K, reason: &str, message: &str) {
        self.events
            .push((key_of(object), reason.to_owned(), message.to_owned()));
    }

    pub(super) fn stamp<K: Resource>(&mut self, object: &mut K) {
        self.version += 1;
        let meta = object.meta_mut();
        meta.resource_version = Some(self.version.to_string());
        if meta.uid.is_none() {
            meta.uid = Some(format!("uid-{}", self.version));
        }
        if meta.generation.is_none() {
            meta.generation = Some(1);
        }
    }
}

impl FirmwareStore for MemoryFirmwareStore {
    async fn host(&self, namespace: &str, name: &str) -> Result<Option<BareMetalHost>, StoreError> {
        Ok(self.lock().hosts.get(&key(namespace, name)).cloned())
    }

    async fn settings(
        &self,
        namespace: &str,
        name: &str,
        _: Read,
    ) -> Result<Option<HostFirmwareSettings>, StoreError> {
        Ok(self.stored_settings(namespace, name))
    }

    async fn create_settings(
        &self,
        host: &BareMetalHost,
    ) -> Result<HostFirmwareSettings, StoreError> {
        self.lock().create(|o| &mut o.settings, new_settings(host))
    }

    async fn adopt_settings(
        &self,
        host: &BareMetalHost,
        settings: &HostFirmwareSettings,
    ) -> Result<HostFirmwareSettings, StoreError> {
        self.lock().adopt(|o| &mut o.settings, settings, host)
    }

    async fn schema(
        &self,
        namespace: &str,
        name: &str,
        read: Read,
    ) -> Result<Option<FirmwareSchema>, StoreError> {
        let objects = self.lock();
        let key = key(namespace, name);
        match objects.stale_schemas.get(&key) {
            Some(stale) if read == Read::Cached => Ok(stale.clone()),
            _ => Ok(objects.schemas.get(&key).cloned()),
        }
    }

    async fn create_schema(
        &self,
        settings: &HostFirmwareSettings,
        schema: &FirmwareSchema,
    ) -> Result<FirmwareSchema, StoreError> {
        let mut schema = schema.clone();
        schema.metadata.owner_references = Some(vec![settings_owner(settings)]);
        self.lock().create(|o| &mut o.schemas, schema)
    }

    async fn own_schema(
        &self,
        settings: &HostFirmwareSettings,
        schema: &FirmwareSchema,
    ) -> Result<(), StoreError> {
        let mut objects = self.lock();
        let key = key_of(schema);
        let Some(stored) = objects.schemas.get(&key) else {
            return Err(StoreError::Conflict);
        };
        // As on the API server: appended to the schema as stored now.
        let mut owned = stored.clone();
        owned.owner_references_mut().push(settings_owner(settings));
        objects.stamp(&mut owned);
        objects.schemas.insert(key, owned);
        Ok(())
    }

    async fn apply_status(
        &self,
        settings: &HostFirmwareSettings,
        status: &HostFirmwareSettingsStatus,
    ) -> Result<(), StoreError> {
        let mut objects = self.lock();
        let Some(mut stored) = objects.settings.get(&key_of(settings)).cloned() else {
            return Err(StoreError::Conflict);
        };
        stored.status = Some(status.clone());
        objects.save_status(|o| &mut o.settings, stored);
        Ok(())
    }

    async fn publish(&self, settings: &HostFirmwareSettings, reason: &str, message: &str) {
        self.lock().record(settings, reason, message);
    }
}
