//! The writes every kind's store makes of its own objects, on one Kubernetes client:
//! reads that answer `None` for a missing object, the status by server-side apply
//! (with the take-over of fields written with Update, when asked), the kind's
//! finalizer, the host as an owner, a new object, and upstream-shaped events.

use std::sync::OnceLock;

use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::core::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::reflector;
use kube::{Api, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::json;

use super::events::{Reporter, upstream_event};
use super::{
    FIELD_MANAGER, HostEvent, Read, StoreError, add_owner, cached, conflict_or, patch_finalizers,
};

/// An object of one of bmo's namespaced kinds.
pub trait Object:
    Resource<DynamicType = (), Scope = NamespaceResourceScope>
    + Clone
    + DeserializeOwned
    + Serialize
    + std::fmt::Debug
{
}

impl<K> Object for K where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + Serialize
        + std::fmt::Debug
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

/// The namespaced object's `namespace/name`.
pub fn name_of<K: Resource>(object: &K) -> String {
    format!(
        "{}/{}",
        object.meta().namespace.as_deref().unwrap_or_default(),
        object.meta().name.as_deref().unwrap_or_default()
    )
}

/// A Kubernetes client, and the name of this bmo in the events it publishes.
#[derive(Clone)]
pub struct KubeClient {
    client: kube::Client,
    instance: Option<String>,
}

impl KubeClient {
    /// `instance` names this bmo in the events it publishes (`POD_NAME`).
    pub fn new(client: kube::Client, instance: Option<String>) -> Self {
        Self { client, instance }
    }

    pub fn client(&self) -> &kube::Client {
        &self.client
    }

    pub fn api<K>(&self, namespace: &str) -> Api<K>
    where
        K: Resource<Scope = NamespaceResourceScope>,
        K::DynamicType: Default,
    {
        Api::namespaced(self.client.clone(), namespace)
    }

    /// The Api of `object`'s kind in its namespace.
    pub fn api_of<K: Object>(&self, object: &K) -> Api<K> {
        self.api(&object.namespace().unwrap_or_default())
    }

    /// The object `namespace/name`, `None` when it does not exist.
    pub async fn get<K: Object>(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<K>, StoreError> {
        Ok(self.api::<K>(namespace).get_opt(name).await?)
    }

    /// The object `namespace/name` as `read` says: from `cache` when it may and the
    /// cache has listed, else from the API server; `None` when it does not exist.
    pub async fn read<K: Object>(
        &self,
        cache: &OnceLock<reflector::Store<K>>,
        namespace: &str,
        name: &str,
        read: Read,
    ) -> Result<Option<K>, StoreError> {
        if read == Read::Cached
            && let Some(object) = cached(cache, namespace, name)
        {
            return Ok(object);
        }
        self.get(namespace, name).await
    }

    /// Makes `object` as bmo; [`StoreError::Conflict`] when it exists already.
    pub async fn create<K: Object>(&self, object: &K) -> Result<K, StoreError> {
        let params = PostParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..PostParams::default()
        };
        self.api_of(object)
            .create(&params, object)
            .await
            .map_err(|e| match &e {
                kube::Error::Api(status) if status.code == 409 => StoreError::Conflict,
                _ => StoreError::Kube(e),
            })
    }

    /// Writes `status` as `object`'s whole status (server-side apply on the status
    /// subresource), as `how` says.
    pub async fn apply_status<K: Object, S: Serialize>(
        &self,
        object: &K,
        status: &S,
        how: StatusApply,
    ) -> Result<(), StoreError> {
        let mut body = json!({
            "apiVersion": K::api_version(&()),
            "kind": K::kind(&()),
            "status": status,
        });
        if how.named {
            body["metadata"]["name"] = json!(object.name_any());
        }
        if how.if_unchanged {
            body["metadata"]["resourceVersion"] = json!(object.resource_version());
        }
        let api = self.api_of(object);
        if how.take_over {
            super::take_over(&api, object, "status").await?;
        }
        let params = PatchParams::apply(how.manager).force();
        match api
            .patch_status(&object.name_any(), &params, &Patch::Apply(&body))
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if how.refusal_is_conflict => Err(conflict_or(e)),
            Err(e) => Err(StoreError::Kube(e)),
        }
    }

    /// Adds (`present`) or removes `finalizer`, if the finalizers are still as read.
    pub async fn set_finalizer<K: Object>(
        &self,
        object: &K,
        finalizer: &str,
        present: bool,
    ) -> Result<(), StoreError> {
        let wanted = finalizers_with(object, finalizer, present);
        patch_finalizers(&self.api_of(object), object, wanted).await
    }

    /// Adds `owner` to `object`'s owners (if they are still as read).
    pub async fn add_owner<K: Object>(
        &self,
        object: &K,
        owner: OwnerReference,
    ) -> Result<K, StoreError> {
        add_owner(&self.api_of(object), object, owner).await
    }

    /// Adds `owner` to `object`'s owners unless it is among them (if they are still
    /// as read), then makes bmo the owner of the status fields other managers wrote
    /// with Update: the object as it is afterwards, and whether the owner was added.
    pub async fn adopt<K: Object>(
        &self,
        object: &K,
        owner: OwnerReference,
    ) -> Result<(K, bool), StoreError> {
        let api = self.api_of(object);
        let mut current = object.clone();
        let added = !current
            .owner_references()
            .iter()
            .any(|o| o.uid == owner.uid);
        if added {
            current = add_owner(&api, &current, owner).await?;
        }
        if let Some(newer) = super::take_over(&api, &current, "status").await? {
            current = newer;
        }
        Ok((current, added))
    }

    /// Publishes `event` about `object` as upstream's `reporter` posts it; a failure
    /// is logged, not returned.
    pub async fn publish<K: Object>(&self, object: &K, reporter: Reporter, event: &HostEvent) {
        let now = Time(k8s_openapi::jiff::Timestamp::now());
        let event = upstream_event(
            object,
            reporter,
            event,
            None,
            self.instance.as_deref(),
            &now,
        );
        if let Err(e) = self
            .api::<Event>(&object.namespace().unwrap_or_default())
            .create(&PostParams::default(), &event)
            .await
        {
            let reason = event.reason.as_deref().unwrap_or_default();
            tracing::debug!(error = %e, reason, "could not publish event");
        }
    }
}

/// `object`'s finalizers with `finalizer` (last) or without it.
pub fn finalizers_with<K: Resource>(object: &K, finalizer: &str, present: bool) -> Vec<String> {
    let mut wanted: Vec<String> = object
        .finalizers()
        .iter()
        .filter(|f| *f != finalizer)
        .cloned()
        .collect();
    if present {
        wanted.push(finalizer.to_owned());
    }
    wanted
}
