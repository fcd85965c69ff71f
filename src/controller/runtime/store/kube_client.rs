//! [`ObjectStore`] on one Kubernetes client: reads that answer `None` for a missing
//! object, the status by server-side apply (with the take-over of fields written with
//! Update, when the kind asks), a finalizer, and upstream-shaped events; and what
//! some kinds' stores add: cached reads, the host as an owner, a new object.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::core::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::reflector;
use kube::{Api, Resource, ResourceExt};
use serde_json::json;

use super::events::upstream_event;
use super::kind::{Kind, Object, ObjectStore};
use super::{
    FIELD_MANAGER, HostEvent, Read, StoreError, add_owner, cached, conflict_or, patch_finalizers,
};

/// A Kubernetes client, the name of this bmo in the events it publishes, and what
/// kinds' stores keep beside it.
#[derive(Clone)]
pub struct KubeClient {
    client: kube::Client,
    instance: Option<String>,
    /// One value of each type, made on first use and shared by every clone: watch
    /// caches ([`KubeClient::cache`]) and whatever else a kind's store keeps.
    kept: Arc<Mutex<HashMap<TypeId, Arc<dyn Any + Send + Sync>>>>,
}

impl KubeClient {
    /// `instance` names this bmo in the events it publishes (`POD_NAME`).
    pub fn new(client: kube::Client, instance: Option<String>) -> Self {
        Self {
            client,
            instance,
            kept: Arc::default(),
        }
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

    /// The `T` this client and its clones keep, made on first use.
    pub fn kept<T: Default + Send + Sync + 'static>(&self) -> Arc<T> {
        let mut kept = self.kept.lock().unwrap_or_else(PoisonError::into_inner);
        let entry = kept
            .entry(TypeId::of::<T>())
            .or_insert_with(|| Arc::new(T::default()));
        match Arc::clone(entry).downcast::<T>() {
            Ok(value) => value,
            // Never: the entry of T's type holds a T.
            Err(_) => Arc::new(T::default()),
        }
    }

    /// Answers cached reads of `K` from `cache`, a controller's watch of them; only
    /// the first call counts.
    pub fn cache<K: Object>(&self, cache: reflector::Store<K>) {
        let _ = self.kept::<OnceLock<reflector::Store<K>>>().set(cache);
    }

    /// `namespace/name` as the cache of `K` holds it (`Some(None)`: it has no such
    /// object), or `None` when there is no cache or it has not listed yet.
    pub fn cached<K: Object>(&self, namespace: &str, name: &str) -> Option<Option<K>> {
        cached(
            &self.kept::<OnceLock<reflector::Store<K>>>(),
            namespace,
            name,
        )
    }
}

impl ObjectStore for KubeClient {
    async fn read<K: Object>(
        &self,
        namespace: &str,
        name: &str,
        read: Read,
    ) -> Result<Option<K>, StoreError> {
        match (read, self.cached::<K>(namespace, name)) {
            (Read::Cached, Some(object))
            | (Read::FreshIfPresent, Some(object @ None))
            | (Read::CachedIfPresent, Some(object @ Some(_))) => Ok(object),
            _ => Ok(self.api::<K>(namespace).get_opt(name).await?),
        }
    }

    async fn create<K: Object>(&self, object: &K) -> Result<K, StoreError> {
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

    async fn set_finalizer<K: Object>(
        &self,
        object: &K,
        finalizer: &str,
        present: bool,
    ) -> Result<(), StoreError> {
        let wanted = finalizers_with(object, finalizer, present);
        patch_finalizers(&self.api_of(object), object, wanted).await
    }

    async fn add_owner<K: Object>(
        &self,
        object: &K,
        owner: OwnerReference,
    ) -> Result<(), StoreError> {
        add_owner(&self.api_of(object), object, owner).await?;
        Ok(())
    }

    async fn adopt<K: Object>(
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

    /// Server-side apply on the status subresource, as [`Kind::STATUS_APPLY`] says.
    async fn apply_status<K: Kind>(
        &self,
        object: &K,
        status: &K::Status,
    ) -> Result<(), StoreError> {
        let how = K::STATUS_APPLY;
        let status =
            K::status_body(status).map_err(|e| StoreError::Kube(kube::Error::SerdeError(e)))?;
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

    /// Posted as upstream's controller of the kind posts it.
    async fn publish<K: Kind>(&self, object: &K, event: &HostEvent) {
        let now = Time(k8s_openapi::jiff::Timestamp::now());
        let event = upstream_event(
            object,
            &K::reporter(),
            event,
            object.related(),
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
