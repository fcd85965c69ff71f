//! What every kind's store does, once for all kinds: [`ObjectStore`] reads any
//! [`Object`] by name (the host an object names, a Secret) and writes a [`Kind`]'s
//! finalizer, status and events; [`super::KubeClient`] does it on the API server,
//! [`super::memory::MemoryObjects`] in memory for reconciler tests. A kind's store
//! adds only the reads and writes of its own.

use std::fmt::Debug;
use std::future::Future;

use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::Resource;
use kube::core::object::HasStatus;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::events::Reporter;
use super::{FIELD_MANAGER, HostEvent, Read, StoreError, name_of};

/// An object a store keeps: of any kind, namespaced or not.
pub trait Stored: Resource<DynamicType = ()> + Clone + Send + Sync + 'static {}

impl<K: Resource<DynamicType = ()> + Clone + Send + Sync + 'static> Stored for K {}

/// An object of a namespaced kind (one of bmo's, a Secret, ...).
pub trait Object:
    Stored + Resource<Scope = NamespaceResourceScope> + DeserializeOwned + Serialize + Debug
{
}

impl<K> Object for K where
    K: Stored + Resource<Scope = NamespaceResourceScope> + DeserializeOwned + Serialize + Debug
{
}

/// How a kind's status is applied.
#[derive(Debug, Clone, Copy)]
pub struct StatusApply {
    /// The field manager of the apply (forced).
    pub manager: &'static str,
    /// First make bmo the owner of the status fields other managers wrote with
    /// Update, so that the apply clears what it leaves out ([`super::take_over`]).
    pub take_over: bool,
    /// Send the resourceVersion as read: a status changed meanwhile is not
    /// overwritten, the write is [`StoreError::Conflict`].
    pub if_unchanged: bool,
    /// Name the object in the body's metadata.
    pub named: bool,
    /// A 409 or 422 answer is [`StoreError::Conflict`] (else the error as it came).
    pub refusal_is_conflict: bool,
}

impl StatusApply {
    /// Applied as bmo, as it is: no take-over, no precondition.
    pub const PLAIN: StatusApply = StatusApply {
        manager: FIELD_MANAGER,
        take_over: false,
        if_unchanged: false,
        named: false,
        refusal_is_conflict: true,
    };
}

/// A kind bmo writes the status of: how the status is applied, and who its events
/// say posted them.
pub trait Kind: Object + HasStatus<Status: Serialize + Clone + Send + Sync + 'static> {
    /// How the status is applied.
    const STATUS_APPLY: StatusApply = StatusApply::PLAIN;

    /// The status as the apply sends it.
    fn status_body(status: &Self::Status) -> Result<Value, serde_json::Error> {
        serde_json::to_value(status)
    }

    /// Who posts the kind's events: upstream's controller of it.
    fn reporter() -> Reporter {
        Reporter::upstream(&Self::kind(&()))
    }

    /// The object an event about `self` names as related (a host's consumer).
    fn related(&self) -> Option<ObjectReference> {
        None
    }
}

/// The reads and writes every kind's store makes. Writes of lists other writers
/// share carry a precondition (the list as read): a lost race is
/// [`StoreError::Conflict`].
pub trait ObjectStore: Send + Sync {
    /// The object `namespace/name` from where `read` says; `None` when it does not
    /// exist.
    fn read<K: Object>(
        &self,
        namespace: &str,
        name: &str,
        read: Read,
    ) -> impl Future<Output = Result<Option<K>, StoreError>> + Send;

    /// The object `namespace/name` as the API server holds it now.
    fn get<K: Object>(
        &self,
        namespace: &str,
        name: &str,
    ) -> impl Future<Output = Result<Option<K>, StoreError>> + Send {
        self.read(namespace, name, Read::Fresh)
    }

    /// Makes `object` as bmo: the object made; [`StoreError::Conflict`] when one of
    /// its name exists.
    fn create<K: Object>(&self, object: &K) -> impl Future<Output = Result<K, StoreError>> + Send;

    /// Adds (`present`) or removes `finalizer`, if the finalizers are still as read.
    fn set_finalizer<K: Object>(
        &self,
        object: &K,
        finalizer: &str,
        present: bool,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Adds `owner` to `object`'s owners, if they are still as read.
    fn add_owner<K: Object>(
        &self,
        object: &K,
        owner: OwnerReference,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Adds `owner` to `object`'s owners unless it is among them (if they are still
    /// as read), then makes bmo the owner of the status fields other managers wrote
    /// with Update: the object as it is afterwards, and whether the owner was added.
    fn adopt<K: Object>(
        &self,
        object: &K,
        owner: OwnerReference,
    ) -> impl Future<Output = Result<(K, bool), StoreError>> + Send;

    /// Writes `status` as `object`'s whole status, as its kind applies it.
    fn apply_status<K: Kind>(
        &self,
        object: &K,
        status: &K::Status,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Publishes `event` about `object`; a failure is logged, not returned.
    fn publish<K: Kind>(&self, object: &K, event: &HostEvent) -> impl Future<Output = ()> + Send;

    /// Writes `status`, then publishes `events` about `object`, each in the log too
    /// (a Warning event as a warning).
    fn save<K: Kind>(
        &self,
        object: &K,
        status: &K::Status,
        events: &[HostEvent],
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        async move {
            self.apply_status(object, status).await?;
            for event in events {
                let (object_name, reason) = (name_of(object), &event.reason);
                if event.warning {
                    tracing::warn!(object = %object_name, %reason, "{}", event.message);
                } else {
                    tracing::info!(object = %object_name, %reason, "{}", event.message);
                }
                self.publish(object, event).await;
            }
            Ok(())
        }
    }
}
