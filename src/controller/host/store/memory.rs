//! [`Store`] in memory, for reconciler tests without a cluster.
//!
//! It keeps hosts, Secrets and the objects named as a host in the runtime's
//! [`MemoryObjects`]: a resourceVersion on every write, the same preconditions as the
//! API server (a finalizer or owner write against a stale read is a
//! [`StoreError::Conflict`]), and every status write and event recorded so tests can
//! count them.

use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;

use super::{HostEvent, SECRET_FINALIZER, SECRET_LABEL, Store, StoreError, secret_is_held};
use crate::api::firmware::{FirmwareUpdate, HostFirmwareComponents};
use crate::api::{
    BareMetalHost, HardwareData, HardwareDataSpec, HardwareDetails, PreprovisioningImage,
};
use crate::controller::runtime::store::{MemoryObjects, Object, Stored, owner_reference};

/// An event as [`MemoryStore`] recorded it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordedEvent {
    pub host: String,
    pub event: HostEvent,
}

/// [`Store`] holding objects in memory.
#[derive(Default)]
pub struct MemoryStore {
    objects: MemoryObjects,
}

impl MemoryStore {
    /// The object of kind `K` named as `host`, as stored now.
    fn namesake<K: Stored>(&self, host: &BareMetalHost) -> Option<K> {
        let namespace = host.namespace().unwrap_or_default();
        self.objects.stored(&namespace, &host.name_any())
    }

    /// Adds (or replaces) a host, as `kubectl apply` would; it gets a uid and a
    /// resourceVersion.
    pub fn put_host(&self, mut host: BareMetalHost) {
        if host.metadata.uid.is_none() {
            host.metadata.uid = Some(format!("uid-{}", host.name_any()));
        }
        self.objects.put(host);
    }

    /// Adds (or replaces) any other object: the host's firmware objects, its
    /// PreprovisioningImage, a Secret.
    pub fn put<K: Stored>(&self, object: K) {
        self.objects.put(object);
    }

    /// The object of kind `K` as stored now.
    pub fn stored<K: Stored>(&self, namespace: &str, name: &str) -> Option<K> {
        self.objects.stored(namespace, name)
    }

    /// The host as stored now.
    pub fn host(&self, namespace: &str, name: &str) -> Option<BareMetalHost> {
        self.objects.stored(namespace, name)
    }

    /// Marks the host deleted (sets its deletionTimestamp); it goes once its last
    /// finalizer is removed.
    pub fn delete_host(&self, namespace: &str, name: &str) {
        self.objects.delete::<BareMetalHost>(namespace, name);
    }

    pub fn hardware_now(&self, namespace: &str, name: &str) -> Option<HardwareDetails> {
        let data = self.objects.stored::<HardwareData>(namespace, name);
        data.and_then(|d| d.spec.hardware)
    }

    /// Every event published so far.
    pub fn events(&self) -> Vec<RecordedEvent> {
        let events = self.objects.events_about().into_iter();
        events
            .map(|(host, event)| RecordedEvent { host, event })
            .collect()
    }

    /// How many status writes reached the store.
    pub fn status_writes(&self) -> usize {
        self.objects.status_writes()
    }

    /// Another writer adds its own finalizer, as if between a reconciler's read and
    /// its write: a write based on the earlier read then fails its precondition.
    pub fn add_foreign_finalizer(&self, other_finalizer: &str, namespace: &str, name: &str) {
        if let Some(host) = self.host(namespace, name) {
            let _ = self.objects.update(&host, |stored| {
                let finalizers = stored.metadata.finalizers.get_or_insert_with(Vec::new);
                finalizers.push(other_finalizer.to_owned());
                Ok(())
            });
        }
    }

    /// Changes the object of kind `K` named as `host` by `write`; none is no error.
    fn update_namesake<K: Object>(&self, host: &BareMetalHost, write: impl FnOnce(&mut K)) {
        if let Some(object) = self.namesake::<K>(host) {
            let _ = self.objects.update(&object, |stored| {
                write(stored);
                Ok(())
            });
        }
    }
}

impl Store for MemoryStore {
    type Objects = MemoryObjects;

    fn objects(&self) -> &MemoryObjects {
        &self.objects
    }

    async fn newest_version(&self, host: &BareMetalHost) -> Result<Option<String>, StoreError> {
        let stored = self.namesake::<BareMetalHost>(host);
        Ok(stored.and_then(|h| h.metadata.resource_version))
    }

    /// Memory keeps no managedFields: nothing to take over.
    async fn take_over_status(
        &self,
        _host: &BareMetalHost,
    ) -> Result<Option<BareMetalHost>, StoreError> {
        Ok(None)
    }

    async fn remove_annotations(
        &self,
        host: &BareMetalHost,
        keys: &[&str],
    ) -> Result<(), StoreError> {
        if keys.is_empty() {
            return Ok(());
        }
        self.objects.update(host, |stored| {
            if let Some(annotations) = stored.metadata.annotations.as_mut() {
                annotations.retain(|k, _| !keys.contains(&k.as_str()));
            }
            Ok(())
        })
    }

    async fn apply_hardware_data(
        &self,
        host: &BareMetalHost,
        details: &HardwareDetails,
    ) -> Result<(), StoreError> {
        let hardware = Some(details.clone());
        let mut data = HardwareData::new(&host.name_any(), HardwareDataSpec { hardware });
        data.metadata.namespace = host.namespace();
        self.objects.put(data);
        Ok(())
    }

    async fn record_firmware_updates(
        &self,
        host: &BareMetalHost,
        updates: &[FirmwareUpdate],
    ) -> Result<(), StoreError> {
        let object = self.namesake::<HostFirmwareComponents>(host);
        self.objects
            .update(&object.ok_or(StoreError::Conflict)?, |stored| {
                stored.status.get_or_insert_default().updates = updates.to_vec();
                Ok(())
            })
    }

    async fn forget_firmware_updates(&self, host: &BareMetalHost) -> Result<(), StoreError> {
        self.update_namesake(host, |object: &mut HostFirmwareComponents| {
            if super::unconfirmed_updates(object)
                && let Some(status) = object.status.as_mut()
            {
                status.updates.clear();
            }
        });
        Ok(())
    }

    /// Keeps the stored status and generation, as the API server does for an apply
    /// without status; the generation moves when the spec changes.
    async fn apply_preprovisioning_image(
        &self,
        host: &BareMetalHost,
        image: &PreprovisioningImage,
    ) -> Result<(), StoreError> {
        let mut written = image.clone();
        written.metadata.namespace = host.namespace();
        written.metadata.name = Some(host.name_any());
        match self.namesake::<PreprovisioningImage>(host) {
            Some(old) => {
                written.status = old.status.clone();
                let generation = old.metadata.generation.unwrap_or(1);
                written.metadata.generation =
                    Some(generation + i64::from(old.spec != written.spec));
            }
            None => written.metadata.generation = Some(1),
        }
        self.objects.put(written);
        Ok(())
    }

    async fn own_secret(
        &self,
        host: &BareMetalHost,
        secret: &Secret,
        hold: bool,
    ) -> Result<Option<String>, StoreError> {
        self.objects.update(secret, |stored| {
            if stored.metadata.owner_references != secret.metadata.owner_references
                || stored.metadata.finalizers != secret.metadata.finalizers
            {
                return Err(StoreError::Conflict);
            }
            if hold && !secret_is_held(stored) {
                let finalizers = stored.metadata.finalizers.get_or_insert_with(Vec::new);
                finalizers.push(SECRET_FINALIZER.into());
            }
            let owner = owner_reference(host, false);
            let owners = stored.owner_references_mut();
            if !owners.iter().any(|o| o.uid == owner.uid) {
                owners.push(owner);
            }
            stored
                .labels_mut()
                .insert(SECRET_LABEL.0.into(), SECRET_LABEL.1.into());
            Ok(())
        })?;
        let namespace = secret.namespace().unwrap_or_default();
        let owned = self.stored::<Secret>(&namespace, &secret.name_any());
        Ok(owned.and_then(|s| s.metadata.resource_version))
    }
}
