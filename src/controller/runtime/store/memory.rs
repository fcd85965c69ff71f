//! [`ObjectStore`] in memory, for reconciler tests: [`MemoryObjects`] keeps objects
//! of any kind by kind and `namespace/name` behind one lock, stamps every write with
//! a new resourceVersion, checks the preconditions the API server checks, and
//! records every status write and event. A kind's in-memory store is its trait
//! implemented on it, with [`MemoryObjects::update`] for its own writes.

use std::any::{Any, TypeId};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};
use kube::{Resource, ResourceExt};

use super::kind::{Kind, Object, ObjectStore, Stored};
use super::kube_client::finalizers_with;
use super::{HostEvent, Read, StoreError};

/// The key of `namespace/name` in a memory store.
pub fn key(namespace: &str, name: &str) -> String {
    format!("{namespace}/{name}")
}

/// The key of `object` in a memory store.
pub fn key_of<K: Resource>(object: &K) -> String {
    key(
        object.meta().namespace.as_deref().unwrap_or_default(),
        object.meta().name.as_deref().unwrap_or_default(),
    )
}

/// [`StoreError::Conflict`] unless `stored` is still at `read`'s resourceVersion.
pub fn unchanged<K: Resource>(stored: Option<&K>, read: &K) -> Result<(), StoreError> {
    match stored {
        Some(s) if s.meta().resource_version == read.meta().resource_version => Ok(()),
        _ => Err(StoreError::Conflict),
    }
}

/// The API server's check of a guarded write of a list `stored` shares with other
/// writers: the list as read, or, when it was absent, the resourceVersion.
fn list_as_read<K: Resource, T: PartialEq>(
    stored: &K,
    read: &K,
    list: impl Fn(&K) -> &Option<Vec<T>>,
) -> Result<(), StoreError> {
    match list(read) {
        None => unchanged(Some(stored), read),
        as_read if list(stored) == as_read => Ok(()),
        _ => Err(StoreError::Conflict),
    }
}

/// Objects of any kind in memory, as the API server would hold them. Clones share
/// the objects (a test's concurrent writer shares the controller's store).
#[derive(Default, Clone)]
pub struct MemoryObjects {
    inner: Arc<Mutex<Inner>>,
}

/// An object's place: its kind and `namespace/name`.
type Place = (TypeId, String);

#[derive(Default)]
struct Inner {
    objects: BTreeMap<Place, Box<dyn Any + Send + Sync>>,
    /// What a cached read answers instead, as a cache a write behind.
    stale: BTreeMap<Place, Option<Box<dyn Any + Send + Sync>>>,
    /// Every event published, with the `namespace/name` of its object.
    events: Vec<(String, HostEvent)>,
    status_writes: usize,
    version: u64,
}

fn place<K: Stored>(namespace: &str, name: &str) -> Place {
    (TypeId::of::<K>(), key(namespace, name))
}

fn place_of<K: Stored>(object: &K) -> Place {
    (TypeId::of::<K>(), key_of(object))
}

impl Inner {
    fn get<K: Stored>(&self, place: &Place) -> Option<K> {
        self.objects.get(place)?.downcast_ref::<K>().cloned()
    }

    /// A new resourceVersion on `object`, and a uid and generation if it has none,
    /// as the API server gives every object it writes.
    fn stamp<K: Resource>(&mut self, object: &mut K) {
        self.version += 1;
        let meta = object.meta_mut();
        meta.resource_version = Some(self.version.to_string());
        meta.uid
            .get_or_insert_with(|| format!("uid-{}", self.version));
        meta.generation.get_or_insert(1);
    }

    /// Stores `object`, stamped, unless it is being deleted and has no finalizer left:
    /// then it goes.
    fn store<K: Stored>(&mut self, mut object: K) -> K {
        let place = place_of(&object);
        self.stamp(&mut object);
        if object.meta().deletion_timestamp.is_some() && object.finalizers().is_empty() {
            self.objects.remove(&place);
        } else {
            self.objects.insert(place, Box::new(object.clone()));
        }
        object
    }

    /// What `write` said, and the object as stored after it.
    fn update<K: Stored, T>(
        &mut self,
        read: &K,
        write: impl FnOnce(&mut K) -> Result<T, StoreError>,
    ) -> Result<(T, K), StoreError> {
        let mut stored = self.get::<K>(&place_of(read)).ok_or(StoreError::Conflict)?;
        let written = write(&mut stored)?;
        Ok((written, self.store(stored)))
    }
}

impl MemoryObjects {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Puts (or replaces) `object`, as a user would; it gets a new resourceVersion.
    pub fn put<K: Stored>(&self, object: K) {
        self.lock().store(object);
    }

    /// The object `namespace/name` as stored now.
    pub fn stored<K: Stored>(&self, namespace: &str, name: &str) -> Option<K> {
        self.lock().get(&place::<K>(namespace, name))
    }

    /// The objects of kind `K` in `namespace` (in every namespace when `None`).
    pub fn list<K: Stored>(&self, namespace: Option<&str>) -> Vec<K> {
        let kind = TypeId::of::<K>();
        let inner = self.lock();
        let objects = inner.objects.iter().filter(|((k, _), _)| *k == kind);
        objects
            .filter_map(|(_, object)| object.downcast_ref::<K>())
            .filter(|o| namespace.is_none_or(|ns| o.namespace().as_deref() == Some(ns)))
            .cloned()
            .collect()
    }

    /// Deletes the object `namespace/name` as the API server does: one with
    /// finalizers gets its deletionTimestamp and stays until the last goes.
    pub fn delete<K: Stored>(&self, namespace: &str, name: &str) {
        let mut inner = self.lock();
        if let Some(mut object) = inner.get::<K>(&place::<K>(namespace, name)) {
            let now = Time(k8s_openapi::jiff::Timestamp::now());
            object.meta_mut().deletion_timestamp.get_or_insert(now);
            inner.store(object);
        }
    }

    /// One write of the object `read` names: `write` changes it as stored now (or
    /// refuses, for a precondition); [`StoreError::Conflict`] when it is gone.
    pub fn update<K: Stored, T>(
        &self,
        read: &K,
        write: impl FnOnce(&mut K) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        Ok(self.lock().update(read, write)?.0)
    }

    /// Makes reads of `namespace/name` from the cache ([`Read::Cached`]) answer
    /// `stale` from now on, as a cache that has not seen the latest writes would.
    pub fn serve_stale<K: Stored>(&self, namespace: &str, name: &str, stale: Option<K>) {
        let stale = stale.map(|o| Box::new(o) as Box<dyn Any + Send + Sync>);
        self.lock().stale.insert(place::<K>(namespace, name), stale);
    }

    /// Every event published so far.
    pub fn events(&self) -> Vec<HostEvent> {
        let inner = self.lock();
        inner
            .events
            .iter()
            .map(|(_, event)| event.clone())
            .collect()
    }

    /// Every event published so far, with the `namespace/name` of its object.
    pub fn events_about(&self) -> Vec<(String, HostEvent)> {
        self.lock().events.clone()
    }

    /// How many status writes went through.
    pub fn status_writes(&self) -> usize {
        self.lock().status_writes
    }
}

impl ObjectStore for MemoryObjects {
    /// [`Read::Cached`]: what [`MemoryObjects::serve_stale`] said, if it did.
    async fn read<K: Object>(
        &self,
        namespace: &str,
        name: &str,
        read: Read,
    ) -> Result<Option<K>, StoreError> {
        let inner = self.lock();
        let place = place::<K>(namespace, name);
        Ok(match inner.stale.get(&place) {
            Some(stale) if read == Read::Cached => {
                stale.as_ref().and_then(|o| o.downcast_ref::<K>()).cloned()
            }
            _ => inner.get(&place),
        })
    }

    async fn create<K: Object>(&self, object: &K) -> Result<K, StoreError> {
        let mut inner = self.lock();
        if inner.objects.contains_key(&place_of(object)) {
            return Err(StoreError::Conflict);
        }
        Ok(inner.store(object.clone()))
    }

    async fn set_finalizer<K: Object>(
        &self,
        object: &K,
        finalizer: &str,
        present: bool,
    ) -> Result<(), StoreError> {
        self.update(object, |stored| {
            list_as_read(stored, object, |o| &o.meta().finalizers)?;
            stored.meta_mut().finalizers = Some(finalizers_with(object, finalizer, present));
            Ok(())
        })
    }

    async fn add_owner<K: Object>(
        &self,
        object: &K,
        owner: OwnerReference,
    ) -> Result<(), StoreError> {
        self.update(object, |stored| {
            list_as_read(stored, object, |o| &o.meta().owner_references)?;
            stored.owner_references_mut().push(owner);
            Ok(())
        })
    }

    /// As of the object as read: refused when it changed since.
    async fn adopt<K: Object>(
        &self,
        object: &K,
        owner: OwnerReference,
    ) -> Result<(K, bool), StoreError> {
        let (added, adopted) = self.lock().update(object, |stored| {
            unchanged(Some(&*stored), object)?;
            let added = !stored.owner_references().iter().any(|o| o.uid == owner.uid);
            if added {
                stored.owner_references_mut().push(owner);
            }
            // bmo now owns the status fields others wrote with Update.
            stored.meta_mut().managed_fields = None;
            Ok(added)
        })?;
        Ok((adopted, added))
    }

    async fn apply_status<K: Kind>(
        &self,
        object: &K,
        status: &K::Status,
    ) -> Result<(), StoreError> {
        let mut inner = self.lock();
        inner.update(object, |stored| {
            if K::STATUS_APPLY.if_unchanged {
                unchanged(Some(&*stored), object)?;
            }
            *stored.status_mut() = Some(status.clone());
            Ok(())
        })?;
        inner.status_writes += 1;
        Ok(())
    }

    async fn publish<K: Kind>(&self, object: &K, event: &HostEvent) {
        self.lock().events.push((key_of(object), event.clone()));
    }
}
