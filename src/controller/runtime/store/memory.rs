//! What the kinds' in-memory stores (for reconciler tests) share: objects by
//! `namespace/name` behind one lock, and the preconditions the API server checks.

use std::sync::{Mutex, MutexGuard, PoisonError};

use kube::{Resource, ResourceExt};

use super::StoreError;

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

/// A memory store's objects, behind a lock a panicking test does not poison.
#[derive(Default)]
pub struct Locked<T>(Mutex<T>);

impl<T> Locked<T> {
    pub fn lock(&self) -> MutexGuard<'_, T> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// [`StoreError::Conflict`] unless `stored` is still at `read`'s resourceVersion.
pub fn unchanged<K: Resource>(stored: Option<&K>, read: &K) -> Result<(), StoreError> {
    match stored {
        Some(s) if s.meta().resource_version == read.meta().resource_version => Ok(()),
        _ => Err(StoreError::Conflict),
    }
}

/// Sets `stored`'s finalizers to `wanted` (and its resourceVersion to `version`) if
/// they are still as in `read`, as a guarded patch does; [`StoreError::Conflict`]
/// when they changed or the object is gone.
pub fn replace_finalizers<K: Resource>(
    stored: Option<&mut K>,
    read: &K,
    wanted: Vec<String>,
    version: Option<String>,
) -> Result<(), StoreError> {
    let stored = stored.ok_or(StoreError::Conflict)?;
    if stored.finalizers() != read.finalizers() {
        return Err(StoreError::Conflict);
    }
    stored.meta_mut().finalizers = Some(wanted);
    stored.meta_mut().resource_version = version;
    Ok(())
}
