//! What every controller's store shares: the reads and writes every kind makes
//! ([`kind`]: [`ObjectStore`]) on the API server ([`kube_client`]) and in memory
//! ([`memory`]), the error of a Kubernetes call, guarded list writes ([`patches`]),
//! server-side apply with the take-over of fields written with Update
//! ([`managed_fields`]) and upstream-shaped events ([`events`]).

pub mod events;
pub mod kind;
pub mod kube_client;
pub mod managed_fields;
pub mod memory;
pub mod patches;

use std::sync::OnceLock;

use futures::FutureExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::runtime::reflector::{self, ObjectRef};
use kube::{Resource, ResourceExt};

use crate::api::BareMetalHost;
use crate::provisioner::ProvisionerError;

pub use kind::{Kind, Object, ObjectStore, StatusApply, Stored};
pub use kube_client::KubeClient;
pub use memory::MemoryObjects;
pub use patches::{
    add_owner, apply_as, conflict_or, found, json_patch, patch_finalizers, patch_guarded, take_over,
};

/// The namespaced object's `namespace/name`.
pub fn name_of<K: Resource>(object: &K) -> String {
    format!(
        "{}/{}",
        object.meta().namespace.as_deref().unwrap_or_default(),
        object.meta().name.as_deref().unwrap_or_default()
    )
}

/// Whether `object` holds `finalizer`.
pub fn has_finalizer<K: Resource>(object: &K, finalizer: &str) -> bool {
    object.finalizers().iter().any(|f| f == finalizer)
}

/// Field manager for everything bmo writes.
pub const FIELD_MANAGER: &str = "bmo";

/// `namespace/name` as `cache` holds it (`Some(None)`: it has no such object), or
/// `None` when there is no cache or it has not listed yet.
pub fn cached<K>(
    cache: &OnceLock<reflector::Store<K>>,
    namespace: &str,
    name: &str,
) -> Option<Option<K>>
where
    K: Resource + Clone + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone,
{
    let cache = cache.get()?;
    cache.wait_until_ready().now_or_never()?.ok()?;
    Some(
        cache
            .get(&ObjectRef::new(name).within(namespace))
            .map(|object| object.as_ref().clone()),
    )
}

/// Where a read may come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Read {
    /// The controller's cache once it has listed (possibly a write behind), else the
    /// API server.
    Cached,
    /// The API server, as it holds the object now (after a write lost a race).
    Fresh,
    /// None when the listed cache has no such object (the usual case, answered
    /// without a request), else the API server: an object that exists is read as it
    /// is now.
    FreshIfPresent,
    /// The cache when it holds the object, else the API server: for a cache of some
    /// of the objects only (those bmo labelled).
    CachedIfPresent,
}

/// A Kubernetes call that did not go through.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The object changed since it was read; read it again and retry.
    #[error("the object changed since it was read (lost a write race); retrying")]
    Conflict,
    #[error("Kubernetes API call failed: {0}")]
    Kube(#[from] kube::Error),
}

/// Why a reconcile of an object could not finish: a Kubernetes call about `object`
/// (its kind and `namespace/name`), or the provisioner.
#[derive(Debug, thiserror::Error)]
pub enum ObjectError {
    #[error("{object}: {source}")]
    Store {
        /// What was being read or written, e.g. `DataImage ns/name`.
        object: String,
        #[source]
        source: StoreError,
    },
    #[error(transparent)]
    Provisioner(#[from] ProvisionerError),
}

impl ObjectError {
    /// The error of a Kubernetes call about `object`, for `map_err`.
    pub fn store(object: &str) -> impl Fn(StoreError) -> ObjectError + Copy + '_ {
        move |source| ObjectError::Store {
            object: object.to_owned(),
            source,
        }
    }

    /// The error of a Kubernetes call about `object` (named by its kind and
    /// `namespace/name`), for `map_err`.
    pub fn about<K: Resource<DynamicType = ()>>(object: &K) -> impl Fn(StoreError) -> ObjectError {
        let object = format!("{} {}", K::kind(&()), name_of(object));
        move |source| ObjectError::Store {
            object: object.clone(),
            source,
        }
    }
}

/// An event to publish about an object (a host, most often).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostEvent {
    pub reason: String,
    pub message: String,
    pub warning: bool,
}

impl HostEvent {
    /// A Warning event.
    pub fn warning(reason: &str, message: &str) -> Self {
        HostEvent {
            reason: reason.to_owned(),
            message: message.to_owned(),
            warning: true,
        }
    }

    /// A Normal event.
    pub fn normal(reason: &str, message: &str) -> Self {
        HostEvent {
            warning: false,
            ..HostEvent::warning(reason, message)
        }
    }
}

/// The host as an owner: `controller` for objects it alone makes (HardwareData).
pub fn owner_reference(host: &BareMetalHost, controller: bool) -> OwnerReference {
    OwnerReference {
        api_version: "metal3.io/v1alpha1".into(),
        kind: "BareMetalHost".into(),
        name: host.name_any(),
        uid: host.metadata.uid.clone().unwrap_or_default(),
        controller: Some(controller),
        block_owner_deletion: None,
    }
}
