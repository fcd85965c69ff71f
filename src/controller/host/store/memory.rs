//! [`Store`] in memory, for reconciler tests without a cluster.
//!
//! It keeps hosts, Secrets and HardwareData by `namespace/name`, bumps a
//! resourceVersion on every write, enforces the same preconditions as the API server
//! (a finalizer or owner write against a stale read is a [`StoreError::Conflict`]), and
//! records every status write and event so tests can count them.

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;

use super::{HostEvent, SECRET_FINALIZER, SECRET_LABEL, Store, StoreError, secret_is_held};
use crate::api::firmware::{
    FirmwareUpdate, HostFirmwareComponents, HostFirmwareSettings, HostUpdatePolicy,
};
use crate::api::host::FINALIZER;
use crate::api::{BareMetalHost, BareMetalHostStatus, HardwareDetails, PreprovisioningImage};
use crate::controller::runtime::store::owner_reference;

/// An event as [`MemoryStore`] recorded it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordedEvent {
    pub host: String,
    pub event: HostEvent,
}

#[derive(Default)]
struct Objects {
    hosts: BTreeMap<String, BareMetalHost>,
    secrets: BTreeMap<String, Secret>,
    hardware: BTreeMap<String, HardwareDetails>,
    firmware: BTreeMap<String, HostFirmwareSettings>,
    components: BTreeMap<String, HostFirmwareComponents>,
    update_policies: BTreeMap<String, HostUpdatePolicy>,
    preprovisioning_images: BTreeMap<String, PreprovisioningImage>,
    events: Vec<RecordedEvent>,
    status_writes: usize,
    version: u64,
}

impl Objects {
    fn bump(&mut self) -> String {
        self.version += 1;
        self.version.to_string()
    }

    fn host_mut(&mut self, host: &BareMetalHost) -> Result<&mut BareMetalHost, StoreError> {
        self.hosts
            .get_mut(&host_key(host))
            .ok_or(StoreError::Conflict)
    }
}

fn key(namespace: Option<String>, name: &str) -> String {
    format!("{}/{name}", namespace.unwrap_or_default())
}

/// The key of `host`, and of the objects named as it.
fn host_key(host: &BareMetalHost) -> String {
    key(host.namespace(), &host.name_any())
}

/// A copy of the object `namespace/name` in `objects`, if there is one.
fn stored<T: Clone>(objects: &BTreeMap<String, T>, namespace: &str, name: &str) -> Option<T> {
    objects.get(&key(Some(namespace.to_owned()), name)).cloned()
}

/// [`Store`] holding objects in memory.
#[derive(Default)]
pub struct MemoryStore {
    objects: Mutex<Objects>,
}

impl MemoryStore {
    fn lock(&self) -> MutexGuard<'_, Objects> {
        self.objects.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Adds (or replaces) a host, as `kubectl apply` would; it gets a uid and a
    /// resourceVersion.
    pub fn put_host(&self, mut host: BareMetalHost) {
        let mut objects = self.lock();
        host.metadata.resource_version = Some(objects.bump());
        if host.metadata.uid.is_none() {
            host.metadata.uid = Some(format!("uid-{}", host.name_any()));
        }
        if host.metadata.generation.is_none() {
            host.metadata.generation = Some(1);
        }
        objects.hosts.insert(host_key(&host), host);
    }

    /// Adds (or replaces) a host's HostFirmwareSettings.
    pub fn put_firmware_settings(&self, settings: HostFirmwareSettings) {
        let key = key(settings.namespace(), &settings.name_any());
        self.lock().firmware.insert(key, settings);
    }

    /// Adds (or replaces) a host's HostFirmwareComponents.
    pub fn put_firmware_components(&self, components: HostFirmwareComponents) {
        let key = key(components.namespace(), &components.name_any());
        self.lock().components.insert(key, components);
    }

    /// Adds (or replaces) a host's HostUpdatePolicy.
    pub fn put_update_policy(&self, policy: HostUpdatePolicy) {
        let key = key(policy.namespace(), &policy.name_any());
        self.lock().update_policies.insert(key, policy);
    }

    /// A host's HostFirmwareComponents as stored now.
    pub fn stored_firmware_components(
        &self,
        namespace: &str,
        name: &str,
    ) -> Option<HostFirmwareComponents> {
        stored(&self.lock().components, namespace, name)
    }

    /// The host as stored now.
    pub fn host(&self, namespace: &str, name: &str) -> Option<BareMetalHost> {
        stored(&self.lock().hosts, namespace, name)
    }

    /// Marks the host deleted (sets its deletionTimestamp); it goes once its last
    /// finalizer is removed.
    pub fn delete_host(&self, namespace: &str, name: &str) {
        let mut objects = self.lock();
        let version = objects.bump();
        let k = key(Some(namespace.to_owned()), name);
        let Some(host) = objects.hosts.get_mut(&k) else {
            return;
        };
        if host.finalizers().is_empty() {
            objects.hosts.remove(&k);
            return;
        }
        host.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::now(),
            ));
        host.metadata.resource_version = Some(version);
    }

    /// Adds (or replaces) a PreprovisioningImage, as its builder would write it.
    pub fn put_preprovisioning_image(&self, mut image: PreprovisioningImage) {
        let mut objects = self.lock();
        image.metadata.resource_version = Some(objects.bump());
        objects
            .preprovisioning_images
            .insert(key(image.namespace(), &image.name_any()), image);
    }

    /// The PreprovisioningImage as stored now.
    pub fn preprovisioning_image_now(
        &self,
        namespace: &str,
        name: &str,
    ) -> Option<PreprovisioningImage> {
        stored(&self.lock().preprovisioning_images, namespace, name)
    }

    pub fn put_secret(&self, mut secret: Secret) {
        let mut objects = self.lock();
        secret.metadata.resource_version = Some(objects.bump());
        objects
            .secrets
            .insert(key(secret.namespace(), &secret.name_any()), secret);
    }

    pub fn secret_now(&self, namespace: &str, name: &str) -> Option<Secret> {
        stored(&self.lock().secrets, namespace, name)
    }

    pub fn hardware_now(&self, namespace: &str, name: &str) -> Option<HardwareDetails> {
        stored(&self.lock().hardware, namespace, name)
    }

    /// Every event published so far.
    pub fn events(&self) -> Vec<RecordedEvent> {
        self.lock().events.clone()
    }

    /// How many status writes reached the store.
    pub fn status_writes(&self) -> usize {
        self.lock().status_writes
    }

    /// Another writer adds its own finalizer, as if between a reconciler's read and
    /// its write: a write based on the earlier read then fails its precondition.
    pub fn add_foreign_finalizer(&self, other_finalizer: &str, namespace: &str, name: &str) {
        let mut objects = self.lock();
        let version = objects.bump();
        if let Some(host) = objects
            .hosts
            .get_mut(&key(Some(namespace.to_owned()), name))
        {
            host.metadata
                .finalizers
                .get_or_insert_with(Vec::new)
                .push(other_finalizer.to_owned());
            host.metadata.resource_version = Some(version);
        }
    }

    fn write_finalizers(
        &self,
        host: &BareMetalHost,
        wanted: Vec<String>,
    ) -> Result<(), StoreError> {
        let mut objects = self.lock();
        let version = objects.bump();
        let stored = objects.host_mut(host)?;
        // The API server's precondition: the list as read (or, absent, the version).
        let unchanged = match &host.metadata.finalizers {
            Some(read) => stored.metadata.finalizers.as_ref() == Some(read),
            None => stored.metadata.resource_version == host.metadata.resource_version,
        };
        if !unchanged {
            return Err(StoreError::Conflict);
        }
        stored.metadata.finalizers = Some(wanted);
        stored.metadata.resource_version = Some(version);
        if stored.metadata.deletion_timestamp.is_some() && stored.finalizers().is_empty() {
            objects.hosts.remove(&host_key(host));
        }
        Ok(())
    }
}

impl Store for MemoryStore {
    async fn add_finalizer(&self, host: &BareMetalHost) -> Result<(), StoreError> {
        let mut wanted = host.finalizers().to_vec();
        wanted.push(FINALIZER.to_owned());
        self.write_finalizers(host, wanted)
    }

    async fn remove_finalizer(&self, host: &BareMetalHost) -> Result<(), StoreError> {
        let wanted = host
            .finalizers()
            .iter()
            .filter(|f| *f != FINALIZER)
            .cloned()
            .collect();
        self.write_finalizers(host, wanted)
    }

    async fn newest_version(&self, host: &BareMetalHost) -> Result<Option<String>, StoreError> {
        let objects = self.lock();
        Ok(objects
            .hosts
            .get(&host_key(host))
            .and_then(|h| h.metadata.resource_version.clone()))
    }

    /// Memory keeps no managedFields: nothing to take over.
    async fn take_over_status(
        &self,
        _host: &BareMetalHost,
    ) -> Result<Option<BareMetalHost>, StoreError> {
        Ok(None)
    }

    async fn apply_status(
        &self,
        host: &BareMetalHost,
        status: &BareMetalHostStatus,
    ) -> Result<(), StoreError> {
        let mut objects = self.lock();
        objects.status_writes += 1;
        let version = objects.bump();
        let stored = objects.host_mut(host)?;
        stored.status = Some(status.clone());
        stored.metadata.resource_version = Some(version);
        Ok(())
    }

    async fn remove_annotations(
        &self,
        host: &BareMetalHost,
        keys: &[&str],
    ) -> Result<(), StoreError> {
        if keys.is_empty() {
            return Ok(());
        }
        let mut objects = self.lock();
        let version = objects.bump();
        let stored = objects.host_mut(host)?;
        if let Some(annotations) = stored.metadata.annotations.as_mut() {
            for k in keys {
                annotations.remove(*k);
            }
        }
        stored.metadata.resource_version = Some(version);
        Ok(())
    }

    async fn apply_hardware_data(
        &self,
        host: &BareMetalHost,
        details: &HardwareDetails,
    ) -> Result<(), StoreError> {
        self.lock().hardware.insert(host_key(host), details.clone());
        Ok(())
    }

    async fn hardware_data(
        &self,
        host: &BareMetalHost,
    ) -> Result<Option<HardwareDetails>, StoreError> {
        Ok(self.lock().hardware.get(&host_key(host)).cloned())
    }

    async fn firmware_settings(
        &self,
        host: &BareMetalHost,
    ) -> Result<Option<HostFirmwareSettings>, StoreError> {
        Ok(self.lock().firmware.get(&host_key(host)).cloned())
    }

    async fn firmware_components(
        &self,
        host: &BareMetalHost,
    ) -> Result<Option<HostFirmwareComponents>, StoreError> {
        Ok(self.lock().components.get(&host_key(host)).cloned())
    }

    async fn host_update_policy(
        &self,
        host: &BareMetalHost,
    ) -> Result<Option<HostUpdatePolicy>, StoreError> {
        Ok(self.lock().update_policies.get(&host_key(host)).cloned())
    }

    async fn record_firmware_updates(
        &self,
        host: &BareMetalHost,
        updates: &[FirmwareUpdate],
    ) -> Result<(), StoreError> {
        let mut objects = self.lock();
        let object = objects
            .components
            .get_mut(&host_key(host))
            .ok_or(StoreError::Conflict)?;
        object.status.get_or_insert_default().updates = updates.to_vec();
        Ok(())
    }

    async fn forget_firmware_updates(&self, host: &BareMetalHost) -> Result<(), StoreError> {
        let mut objects = self.lock();
        let key = host_key(host);
        if let Some(object) = objects.components.get_mut(&key)
            && super::unconfirmed_updates(object)
            && let Some(status) = object.status.as_mut()
        {
            status.updates.clear();
        }
        Ok(())
    }

    async fn preprovisioning_image(
        &self,
        host: &BareMetalHost,
    ) -> Result<Option<PreprovisioningImage>, StoreError> {
        Ok(stored(
            &self.lock().preprovisioning_images,
            &host.namespace().unwrap_or_default(),
            &host.name_any(),
        ))
    }

    /// Keeps the stored status and generation, as the API server does for an apply
    /// without status; the generation moves when the spec changes.
    async fn apply_preprovisioning_image(
        &self,
        host: &BareMetalHost,
        image: &PreprovisioningImage,
    ) -> Result<(), StoreError> {
        let mut objects = self.lock();
        let version = objects.bump();
        let k = host_key(host);
        let mut written = image.clone();
        written.metadata.resource_version = Some(version);
        match objects.preprovisioning_images.get(&k) {
            Some(old) => {
                written.status = old.status.clone();
                let generation = old.metadata.generation.unwrap_or(1);
                written.metadata.generation =
                    Some(generation + i64::from(old.spec != written.spec));
            }
            None => written.metadata.generation = Some(1),
        }
        objects.preprovisioning_images.insert(k, written);
        Ok(())
    }

    async fn secret(&self, namespace: &str, name: &str) -> Result<Option<Secret>, StoreError> {
        Ok(self.secret_now(namespace, name))
    }

    async fn own_secret(
        &self,
        host: &BareMetalHost,
        secret: &Secret,
        hold: bool,
    ) -> Result<Option<String>, StoreError> {
        let mut objects = self.lock();
        let version = objects.bump();
        let stored = objects
            .secrets
            .get_mut(&key(secret.namespace(), &secret.name_any()))
            .ok_or(StoreError::Conflict)?;
        if stored.metadata.owner_references != secret.metadata.owner_references
            || stored.metadata.finalizers != secret.metadata.finalizers
        {
            return Err(StoreError::Conflict);
        }
        if hold && !secret_is_held(stored) {
            stored
                .metadata
                .finalizers
                .get_or_insert_with(Vec::new)
                .push(SECRET_FINALIZER.into());
        }
        let owner = owner_reference(host, false);
        let owners = stored
            .metadata
            .owner_references
            .get_or_insert_with(Vec::new);
        if !owners.iter().any(|o| o.uid == owner.uid) {
            owners.push(owner);
        }
        stored
            .metadata
            .labels
            .get_or_insert_with(Default::default)
            .insert(SECRET_LABEL.0.into(), SECRET_LABEL.1.into());
        stored.metadata.resource_version = Some(version.clone());
        Ok(Some(version))
    }

    async fn release_secret(&self, secret: &Secret) -> Result<(), StoreError> {
        let mut objects = self.lock();
        let version = objects.bump();
        let k = key(secret.namespace(), &secret.name_any());
        let stored = objects.secrets.get_mut(&k).ok_or(StoreError::Conflict)?;
        if stored.metadata.finalizers != secret.metadata.finalizers {
            return Err(StoreError::Conflict);
        }
        if let Some(finalizers) = stored.metadata.finalizers.as_mut() {
            finalizers.retain(|f| f != SECRET_FINALIZER);
        }
        stored.metadata.resource_version = Some(version);
        if stored.metadata.deletion_timestamp.is_some() && stored.finalizers().is_empty() {
            objects.secrets.remove(&k);
        }
        Ok(())
    }

    async fn publish(&self, host: &BareMetalHost, event: HostEvent) {
        self.lock().events.push(RecordedEvent {
            host: host_key(host),
            event,
        });
    }
}
