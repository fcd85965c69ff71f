//! Every Kubernetes read and write of the HostFirmwareComponents controller.
//! The status is written with server-side apply and the resourceVersion as read, so
//! a status the host controller changed meanwhile (it records the updates preparing
//! started) is never overwritten: that write is [`StoreError::Conflict`], and the
//! reconcile reads again.

use std::future::Future;

use k8s_openapi::api::core::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::json;

use crate::api::BareMetalHost;
use crate::api::firmware::{
    HostFirmwareComponents, HostFirmwareComponentsSpec, HostFirmwareComponentsStatus,
};
use crate::controller::firmware::store::{
    KubeFirmwareStore, MemoryFirmwareStore, create_conflict, key, key_of, unchanged,
};
use crate::controller::runtime::store::events::{Reporter, upstream_event};
use crate::controller::runtime::store::{
    FIELD_MANAGER, HostEvent, StoreError, add_owner, cached, conflict_or, owner_reference,
    take_over,
};

/// Upstream's `source.component` on HostFirmwareComponents events.
pub const SOURCE_COMPONENT: &str = "metal3-hostfirmwarecomponents-controller";
/// Upstream's `reportingController` on HostFirmwareComponents events.
pub const REPORTING_CONTROLLER: &str = "metal3.io/hostfirmwarecomponents-controller";

/// The Kubernetes side of the HostFirmwareComponents controller.
pub trait ComponentsStore: Send + Sync {
    /// The object, possibly from a cache a write behind.
    fn components(
        &self,
        namespace: &str,
        name: &str,
    ) -> impl Future<Output = Result<Option<HostFirmwareComponents>, StoreError>> + Send;

    /// The object as the API server holds it now (after a write lost a race).
    fn current_components(
        &self,
        namespace: &str,
        name: &str,
    ) -> impl Future<Output = Result<Option<HostFirmwareComponents>, StoreError>> + Send {
        self.components(namespace, name)
    }

    /// Makes the host's HostFirmwareComponents (empty `spec.updates`), owned by the
    /// host; [`StoreError::Conflict`] when one appeared meanwhile.
    fn create_components(
        &self,
        host: &BareMetalHost,
    ) -> impl Future<Output = Result<HostFirmwareComponents, StoreError>> + Send;

    /// Adds the host to the object's owners (if they are still as read) and makes
    /// bmo the owner of the status fields written with Update.
    fn adopt_components(
        &self,
        host: &BareMetalHost,
        object: &HostFirmwareComponents,
    ) -> impl Future<Output = Result<HostFirmwareComponents, StoreError>> + Send;

    /// Writes the whole status, if the object is still as read.
    fn apply_components_status(
        &self,
        object: &HostFirmwareComponents,
        status: &HostFirmwareComponentsStatus,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Publishes an event about the object; a failure is logged, not returned.
    fn publish_components(
        &self,
        object: &HostFirmwareComponents,
        reason: &str,
        message: &str,
    ) -> impl Future<Output = ()> + Send;
}

/// The core/v1 Event upstream's controller posts about a HostFirmwareComponents.
/// Upstream says Normal; bmo marks refusals as warnings, as for hosts.
pub fn components_event(
    object: &HostFirmwareComponents,
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
    upstream_event(object, reporter, &event, None, instance, now)
}

/// The empty HostFirmwareComponents of `host`, owned by it.
fn new_components(host: &BareMetalHost) -> HostFirmwareComponents {
    let mut object =
        HostFirmwareComponents::new(&host.name_any(), HostFirmwareComponentsSpec::default());
    object.metadata.namespace = host.namespace();
    object.metadata.owner_references = Some(vec![owner_reference(host, false)]);
    object
}

impl ComponentsStore for KubeFirmwareStore {
    async fn components(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<HostFirmwareComponents>, StoreError> {
        match cached(&self.caches.components, namespace, name) {
            Some(components) => Ok(components),
            None => self.current_components(namespace, name).await,
        }
    }

    async fn current_components(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<HostFirmwareComponents>, StoreError> {
        Ok(self
            .api::<HostFirmwareComponents>(namespace)
            .get_opt(name)
            .await?)
    }

    async fn create_components(
        &self,
        host: &BareMetalHost,
    ) -> Result<HostFirmwareComponents, StoreError> {
        let object = new_components(host);
        let params = PostParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..PostParams::default()
        };
        self.api::<HostFirmwareComponents>(&host.namespace().unwrap_or_default())
            .create(&params, &object)
            .await
            .map_err(create_conflict)
    }

    async fn adopt_components(
        &self,
        host: &BareMetalHost,
        object: &HostFirmwareComponents,
    ) -> Result<HostFirmwareComponents, StoreError> {
        let api: Api<HostFirmwareComponents> = self.api(&object.namespace().unwrap_or_default());
        let uid = host.metadata.uid.as_deref().unwrap_or_default();
        let mut current = object.clone();
        if !current.owner_references().iter().any(|o| o.uid == uid) {
            current = add_owner(&api, &current, owner_reference(host, false)).await?;
            tracing::info!("adopted the host's HostFirmwareComponents");
        }
        if let Some(newer) = take_over(&api, &current, "status").await? {
            current = newer;
        }
        Ok(current)
    }

    async fn apply_components_status(
        &self,
        object: &HostFirmwareComponents,
        status: &HostFirmwareComponentsStatus,
    ) -> Result<(), StoreError> {
        let patch = json!({
            "apiVersion": "metal3.io/v1alpha1",
            "kind": "HostFirmwareComponents",
            "metadata": {"resourceVersion": object.resource_version()},
            "status": status,
        });
        self.api::<HostFirmwareComponents>(&object.namespace().unwrap_or_default())
            .patch_status(
                &object.name_any(),
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(&patch),
            )
            .await
            .map_err(conflict_or)?;
        Ok(())
    }

    async fn publish_components(
        &self,
        object: &HostFirmwareComponents,
        reason: &str,
        message: &str,
    ) {
        let now = Time(k8s_openapi::jiff::Timestamp::now());
        let event = components_event(object, reason, message, self.instance.as_deref(), &now);
        if let Err(e) = self
            .api::<Event>(&object.namespace().unwrap_or_default())
            .create(&PostParams::default(), &event)
            .await
        {
            tracing::debug!(error = %e, reason, "could not publish event");
        }
    }
}

/// As on the API server: the status write and adoption are refused
/// ([`StoreError::Conflict`]) when the object changed since it was read.
impl ComponentsStore for MemoryFirmwareStore {
    async fn components(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<HostFirmwareComponents>, StoreError> {
        Ok(self.lock().components.get(&key(namespace, name)).cloned())
    }

    async fn create_components(
        &self,
        host: &BareMetalHost,
    ) -> Result<HostFirmwareComponents, StoreError> {
        let mut objects = self.lock();
        let mut object = new_components(host);
        if objects.components.contains_key(&key_of(&object)) {
            return Err(StoreError::Conflict);
        }
        objects.stamp(&mut object);
        objects.components.insert(key_of(&object), object.clone());
        Ok(object)
    }

    async fn adopt_components(
        &self,
        host: &BareMetalHost,
        object: &HostFirmwareComponents,
    ) -> Result<HostFirmwareComponents, StoreError> {
        let mut objects = self.lock();
        unchanged(objects.components.get(&key_of(object)), object)?;
        let mut adopted = object.clone();
        let uid = host.metadata.uid.clone().unwrap_or_default();
        if !adopted.owner_references().iter().any(|o| o.uid == uid) {
            adopted
                .owner_references_mut()
                .push(owner_reference(host, false));
        }
        adopted.metadata.managed_fields = None;
        objects.stamp(&mut adopted);
        objects.components.insert(key_of(&adopted), adopted.clone());
        Ok(adopted)
    }

    async fn apply_components_status(
        &self,
        object: &HostFirmwareComponents,
        status: &HostFirmwareComponentsStatus,
    ) -> Result<(), StoreError> {
        let mut objects = self.lock();
        let key = key_of(object);
        unchanged(objects.components.get(&key), object)?;
        let mut stored = object.clone();
        stored.status = Some(status.clone());
        objects.stamp(&mut stored);
        objects.components.insert(key, stored);
        objects.status_writes += 1;
        Ok(())
    }

    async fn publish_components(
        &self,
        object: &HostFirmwareComponents,
        reason: &str,
        message: &str,
    ) {
        self.lock()
            .events
            .push((key_of(object), reason.to_owned(), message.to_owned()));
    }
}

/// A shared store (tests share one between the controller and a concurrent writer).
impl<T: ComponentsStore> ComponentsStore for std::sync::Arc<T> {
    async fn components(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<HostFirmwareComponents>, StoreError> {
        self.as_ref().components(namespace, name).await
    }

    async fn create_components(
        &self,
        host: &BareMetalHost,
    ) -> Result<HostFirmwareComponents, StoreError> {
        self.as_ref().create_components(host).await
    }

    async fn adopt_components(
        &self,
        host: &BareMetalHost,
        object: &HostFirmwareComponents,
    ) -> Result<HostFirmwareComponents, StoreError> {
        self.as_ref().adopt_components(host, object).await
    }

    async fn apply_components_status(
        &self,
        object: &HostFirmwareComponents,
        status: &HostFirmwareComponentsStatus,
    ) -> Result<(), StoreError> {
        self.as_ref().apply_components_status(object, status).await
    }

    async fn publish_components(
        &self,
        object: &HostFirmwareComponents,
        reason: &str,
        message: &str,
    ) {
        self.as_ref()
            .publish_components(object, reason, message)
            .await;
    }
}
