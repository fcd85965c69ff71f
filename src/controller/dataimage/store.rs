//! Every Kubernetes read and write about DataImages, for the DataImage controller and
//! for the host controller's power-on step. Finalizers and owners are written with a
//! precondition (JSON Patch `test` of the list as read), so a lost race is
//! [`StoreError::Conflict`]; the status by server-side apply.

use std::future::Future;
use std::sync::{Arc, OnceLock};

use k8s_openapi::api::core::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::reflector;
use kube::{Api, Resource, ResourceExt};
use serde_json::json;

use crate::api::images::DATA_IMAGE_FINALIZER;
use crate::api::{BareMetalHost, DataImage, DataImageStatus};
use crate::controller::runtime::store::events::{Reporter, upstream_event};
use crate::controller::runtime::store::{
    FIELD_MANAGER, HostEvent, StoreError, add_owner, cached, owner_reference, patch_finalizers,
    take_over,
};

/// Upstream's `source.component` on DataImage events.
pub const SOURCE_COMPONENT: &str = "metal3-dataimage-controller";
/// Upstream's `reportingController` on DataImage events.
pub const REPORTING_CONTROLLER: &str = "metal3.io/dataimage-controller";

/// The Kubernetes side of DataImages.
pub trait DataImageStore: Send + Sync {
    fn data_image(
        &self,
        namespace: &str,
        name: &str,
    ) -> impl Future<Output = Result<Option<DataImage>, StoreError>> + Send;

    fn host(
        &self,
        namespace: &str,
        name: &str,
    ) -> impl Future<Output = Result<Option<BareMetalHost>, StoreError>> + Send;

    /// Adds `host` to `image`'s owners (not as controller, as upstream), if they are
    /// still as read.
    fn add_owner(
        &self,
        image: &DataImage,
        host: &BareMetalHost,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Adds or removes [`DATA_IMAGE_FINALIZER`], if the finalizers are still as read.
    fn set_finalizer(
        &self,
        image: &DataImage,
        present: bool,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Writes the whole status (server-side apply on the status subresource).
    fn apply_status(
        &self,
        image: &DataImage,
        status: &DataImageStatus,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Publishes a Warning event about `image`; a failure is logged, not returned.
    fn publish(
        &self,
        image: &DataImage,
        reason: &str,
        message: &str,
    ) -> impl Future<Output = ()> + Send;
}

/// The core/v1 Event upstream's DataImage controller would post about `image`.
pub fn data_image_event(
    image: &DataImage,
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
    upstream_event(image, reporter, &event, None, instance, now)
}

/// [`DataImageStore`] on a Kubernetes client.
#[derive(Clone)]
pub struct KubeDataImageStore {
    client: kube::Client,
    instance: Option<String>,
    /// The DataImage controller's watch, shared by every clone of the store (the
    /// host controller holds one): a host without a DataImage, the usual case, is
    /// answered from it; one the cache holds is read from the API server, since the
    /// attach and eject decisions need its current status.
    pub(super) cache: Arc<OnceLock<reflector::Store<DataImage>>>,
}

impl KubeDataImageStore {
    /// `instance` names this bmo in the events it publishes (`POD_NAME`).
    pub fn new(client: kube::Client, instance: Option<String>) -> Self {
        Self {
            client,
            instance,
            cache: Arc::default(),
        }
    }

    pub fn client(&self) -> &kube::Client {
        &self.client
    }

    fn api<K>(&self, namespace: &str) -> Api<K>
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope>,
        K::DynamicType: Default,
    {
        Api::namespaced(self.client.clone(), namespace)
    }
}

impl DataImageStore for KubeDataImageStore {
    async fn data_image(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<DataImage>, StoreError> {
        if let Some(None) = cached(&self.cache, namespace, name) {
            return Ok(None);
        }
        Ok(self.api::<DataImage>(namespace).get_opt(name).await?)
    }

    async fn host(&self, namespace: &str, name: &str) -> Result<Option<BareMetalHost>, StoreError> {
        Ok(self.api::<BareMetalHost>(namespace).get_opt(name).await?)
    }

    async fn add_owner(&self, image: &DataImage, host: &BareMetalHost) -> Result<(), StoreError> {
        let api = self.api::<DataImage>(&image.namespace().unwrap_or_default());
        add_owner(&api, image, owner_reference(host, false)).await?;
        Ok(())
    }

    async fn set_finalizer(&self, image: &DataImage, present: bool) -> Result<(), StoreError> {
        let mut wanted: Vec<String> = image
            .finalizers()
            .iter()
            .filter(|f| *f != DATA_IMAGE_FINALIZER)
            .cloned()
            .collect();
        if present {
            wanted.push(DATA_IMAGE_FINALIZER.to_owned());
        }
        let api = self.api::<DataImage>(&image.namespace().unwrap_or_default());
        patch_finalizers(&api, image, wanted).await
    }

    async fn apply_status(
        &self,
        image: &DataImage,
        status: &DataImageStatus,
    ) -> Result<(), StoreError> {
        let patch = json!({
            "apiVersion": "metal3.io/v1alpha1",
            "kind": "DataImage",
            "status": status,
        });
        let api = self.api::<DataImage>(&image.namespace().unwrap_or_default());
        // Status fields upstream's operator wrote with Update become bmo's first, so
        // that the apply clears what it leaves out (an old error, say).
        take_over(&api, image, "status").await?;
        api.patch_status(
            &image.name_any(),
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&patch),
        )
        .await?;
        Ok(())
    }

    async fn publish(&self, image: &DataImage, reason: &str, message: &str) {
        let now = Time(k8s_openapi::jiff::Timestamp::now());
        let event = data_image_event(image, reason, message, self.instance.as_deref(), &now);
        if let Err(e) = self
            .api::<Event>(&image.namespace().unwrap_or_default())
            .create(&PostParams::default(), &event)
            .await
        {
            tracing::debug!(error = %e, reason, "could not publish event");
        }
    }
}
