//! Every Kubernetes read and write of the HostFirmwareSettings controller, behind one
//! trait: [`KubeFirmwareStore`] on the API server, [`MemoryFirmwareStore`] for tests.
//! Owner lists are written with a precondition (JSON Patch `test` of the list as
//! read), so a lost race is [`StoreError::Conflict`]; the shared FirmwareSchema's are
//! appended to, without one (see `own_schema` of [`KubeFirmwareStore`]).

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::reflector;
use kube::{Api, Resource, ResourceExt};
use serde_json::json;

use crate::api::BareMetalHost;
use crate::api::firmware::{
    FirmwareSchema, HostFirmwareComponents, HostFirmwareSettings, HostFirmwareSettingsSpec,
    HostFirmwareSettingsStatus, HostUpdatePolicy,
};
use crate::controller::runtime::store::events::{Reporter, upstream_event};
use crate::controller::runtime::store::{
    FIELD_MANAGER, HostEvent, StoreError, add_owner, cached, conflict_or, json_patch,
    owner_reference, take_over,
};

/// Upstream's `source.component` on HostFirmwareSettings events.
pub const SOURCE_COMPONENT: &str = "metal3-hostfirmwaresettings-controller";
/// Upstream's `reportingController` on HostFirmwareSettings events.
pub const REPORTING_CONTROLLER: &str = "metal3.io/hostfirmwaresettings-controller";

/// The Kubernetes side of the HostFirmwareSettings controller.
pub trait FirmwareStore: Send + Sync {
    fn host(
        &self,
        namespace: &str,
        name: &str,
    ) -> impl Future<Output = Result<Option<BareMetalHost>, StoreError>> + Send;

    /// The object, possibly from a cache a write behind.
    fn settings(
        &self,
        namespace: &str,
        name: &str,
    ) -> impl Future<Output = Result<Option<HostFirmwareSettings>, StoreError>> + Send;

    /// The object as the API server holds it now (after a create lost a race).
    fn current_settings(
        &self,
        namespace: &str,
        name: &str,
    ) -> impl Future<Output = Result<Option<HostFirmwareSettings>, StoreError>> + Send {
        self.settings(namespace, name)
    }

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

    fn schema(
        &self,
        namespace: &str,
        name: &str,
    ) -> impl Future<Output = Result<Option<FirmwareSchema>, StoreError>> + Send;

    /// The schema as the API server holds it now (after a write lost a race).
    fn current_schema(
        &self,
        namespace: &str,
        name: &str,
    ) -> impl Future<Output = Result<Option<FirmwareSchema>, StoreError>> + Send {
        self.schema(namespace, name)
    }

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

/// The core/v1 Event upstream's controller posts about `settings`. Upstream says
/// Normal for everything; bmo marks refusals as warnings, as it does for hosts.
pub fn settings_event(
    settings: &HostFirmwareSettings,
    reason: &str,
    message: &str,
    instance: Option<&str>,
    now: &Time,
) -> Event {
    let event = HostEvent {
        reason: reason.to_owned(),
        message: message.to_owned(),
        warning: true,
    };
    let reporter = Reporter {
        component: SOURCE_COMPONENT,
        controller: REPORTING_CONTROLLER,
    };
    upstream_event(settings, reporter, &event, None, instance, now)
}

/// [`FirmwareStore`] on a Kubernetes client.
#[derive(Clone)]
pub struct KubeFirmwareStore {
    client: kube::Client,
    pub(super) instance: Option<String>,
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
            client,
            instance,
            caches: Arc::default(),
            appended_owners: Arc::default(),
        }
    }

    pub fn client(&self) -> &kube::Client {
        &self.client
    }

    pub(super) fn api<K>(&self, namespace: &str) -> Api<K>
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope>,
        K::DynamicType: Default,
    {
        Api::namespaced(self.client.clone(), namespace)
    }
}

pub(super) fn create_conflict(e: kube::Error) -> StoreError {
    match &e {
        kube::Error::Api(status) if status.code == 409 => StoreError::Conflict,
        _ => StoreError::Kube(e),
    }
}

impl FirmwareStore for KubeFirmwareStore {
    async fn host(&self, namespace: &str, name: &str) -> Result<Option<BareMetalHost>, StoreError> {
        Ok(self.api::<BareMetalHost>(namespace).get_opt(name).await?)
    }

    async fn settings(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<HostFirmwareSettings>, StoreError> {
        if let Some(settings) = cached(&self.caches.settings, namespace, name) {
            return Ok(settings);
        }
        self.current_settings(namespace, name).await
    }

    async fn current_settings(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<HostFirmwareSettings>, StoreError> {
        Ok(self
            .api::<HostFirmwareSettings>(namespace)
            .get_opt(name)
            .await?)
    }

    async fn create_settings(
        &self,
        host: &BareMetalHost,
    ) -> Result<HostFirmwareSettings, StoreError> {
        let api = self.api::<HostFirmwareSettings>(&host.namespace().unwrap_or_default());
        let params = PostParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..PostParams::default()
        };
        api.create(&params, &new_settings(host))
            .await
            .map_err(create_conflict)
    }

    async fn adopt_settings(
        &self,
        host: &BareMetalHost,
        settings: &HostFirmwareSettings,
    ) -> Result<HostFirmwareSettings, StoreError> {
        let api = self.api::<HostFirmwareSettings>(&settings.namespace().unwrap_or_default());
        let uid = host.metadata.uid.as_deref().unwrap_or_default();
        let mut current = settings.clone();
        if !current.owner_references().iter().any(|o| o.uid == uid) {
            current = add_owner(&api, &current, owner_reference(host, false)).await?;
        }
        if let Some(newer) = take_over(&api, &current, "status").await? {
            current = newer;
        }
        tracing::info!("adopted the host's HostFirmwareSettings");
        Ok(current)
    }

    async fn schema(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<FirmwareSchema>, StoreError> {
        if let Some(schema) = cached(&self.caches.schemas, namespace, name) {
            return Ok(schema);
        }
        self.current_schema(namespace, name).await
    }

    async fn current_schema(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<FirmwareSchema>, StoreError> {
        Ok(self.api::<FirmwareSchema>(namespace).get_opt(name).await?)
    }

    async fn create_schema(
        &self,
        settings: &HostFirmwareSettings,
        schema: &FirmwareSchema,
    ) -> Result<FirmwareSchema, StoreError> {
        let mut schema = schema.clone();
        schema.metadata.owner_references = Some(vec![settings_owner(settings)]);
        let params = PostParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..PostParams::default()
        };
        self.api::<FirmwareSchema>(&settings.namespace().unwrap_or_default())
            .create(&params, &schema)
            .await
            .map_err(create_conflict)
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
        self.client
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
        let patch = json!({
            "apiVersion": "metal3.io/v1alpha1",
            "kind": "HostFirmwareSettings",
            "status": status,
        });
        self.api::<HostFirmwareSettings>(&settings.namespace().unwrap_or_default())
            .patch_status(
                &settings.name_any(),
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(&patch),
            )
            .await?;
        Ok(())
    }

    async fn publish(&self, settings: &HostFirmwareSettings, reason: &str, message: &str) {
        let now = Time(k8s_openapi::jiff::Timestamp::now());
        let event = settings_event(settings, reason, message, self.instance.as_deref(), &now);
        if let Err(e) = self
            .api::<Event>(&settings.namespace().unwrap_or_default())
            .create(&PostParams::default(), &event)
            .await
        {
            tracing::debug!(error = %e, reason, "could not publish event");
        }
    }
}

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
/// uid per write, every status write and event recorded.
#[derive(Default)]
pub struct MemoryFirmwareStore {
    objects: Mutex<Objects>,
}

pub(super) fn key(namespace: &str, name: &str) -> String {
    format!("{namespace}/{name}")
}

pub(super) fn key_of<K: Resource>(object: &K) -> String {
    key(
        object.meta().namespace.as_deref().unwrap_or_default(),
        object.meta().name.as_deref().unwrap_or_default(),
    )
}

impl MemoryFirmwareStore {
    pub(super) fn lock(&self) -> MutexGuard<'_, Objects> {
        self.objects.lock().unwrap_or_else(PoisonError::into_inner)
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

pub(super) fn unchanged<K: Resource>(stored: Option<&K>, read: &K) -> Result<(), StoreError> {
    match stored {
        Some(s) if s.meta().resource_version == read.meta().resource_version => Ok(()),
        _ => Err(StoreError::Conflict),
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
    ) -> Result<Option<HostFirmwareSettings>, StoreError> {
        Ok(self.stored_settings(namespace, name))
    }

    async fn create_settings(
        &self,
        host: &BareMetalHost,
    ) -> Result<HostFirmwareSettings, StoreError> {
        let mut objects = self.lock();
        let mut settings = new_settings(host);
        if objects.settings.contains_key(&key_of(&settings)) {
            return Err(StoreError::Conflict);
        }
        objects.stamp(&mut settings);
        objects.settings.insert(key_of(&settings), settings.clone());
        Ok(settings)
    }

    async fn adopt_settings(
        &self,
        host: &BareMetalHost,
        settings: &HostFirmwareSettings,
    ) -> Result<HostFirmwareSettings, StoreError> {
        let mut objects = self.lock();
        unchanged(objects.settings.get(&key_of(settings)), settings)?;
        let mut adopted = settings.clone();
        let uid = host.metadata.uid.clone().unwrap_or_default();
        if !adopted.owner_references().iter().any(|o| o.uid == uid) {
            adopted
                .owner_references_mut()
                .push(owner_reference(host, false));
        }
        adopted.metadata.managed_fields = None;
        objects.stamp(&mut adopted);
        objects.settings.insert(key_of(&adopted), adopted.clone());
        Ok(adopted)
    }

    async fn schema(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<FirmwareSchema>, StoreError> {
        let objects = self.lock();
        let key = key(namespace, name);
        if let Some(stale) = objects.stale_schemas.get(&key) {
            return Ok(stale.clone());
        }
        Ok(objects.schemas.get(&key).cloned())
    }

    async fn current_schema(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<FirmwareSchema>, StoreError> {
        Ok(self.lock().schemas.get(&key(namespace, name)).cloned())
    }

    async fn create_schema(
        &self,
        settings: &HostFirmwareSettings,
        schema: &FirmwareSchema,
    ) -> Result<FirmwareSchema, StoreError> {
        let mut objects = self.lock();
        if objects.schemas.contains_key(&key_of(schema)) {
            return Err(StoreError::Conflict);
        }
        let mut schema = schema.clone();
        schema.metadata.owner_references = Some(vec![settings_owner(settings)]);
        objects.stamp(&mut schema);
        objects.schemas.insert(key_of(&schema), schema.clone());
        Ok(schema)
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
        let key = key_of(settings);
        let Some(mut stored) = objects.settings.get(&key).cloned() else {
            return Err(StoreError::Conflict);
        };
        stored.status = Some(status.clone());
        objects.stamp(&mut stored);
        objects.settings.insert(key, stored);
        objects.status_writes += 1;
        Ok(())
    }

    async fn publish(&self, settings: &HostFirmwareSettings, reason: &str, message: &str) {
        self.lock()
            .events
            .push((key_of(settings), reason.to_owned(), message.to_owned()));
    }
}
