//! Every Kubernetes read and write about DataImages, for the DataImage controller and
//! for the host controller's power-on step. Finalizers and owners are written with a
//! precondition (JSON Patch `test` of the list as read), so a lost race is
//! [`StoreError::Conflict`]; the status by server-side apply.

use std::future::Future;
use std::sync::{Arc, OnceLock};

use kube::runtime::reflector;

use crate::api::images::DATA_IMAGE_FINALIZER;
use crate::api::{BareMetalHost, DataImage, DataImageStatus};
use crate::controller::runtime::store::events::Reporter;
use crate::controller::runtime::store::{
    HostEvent, KubeClient, StatusApply, StoreError, cached, owner_reference,
};

/// Upstream's `source.component` on DataImage events.
pub const SOURCE_COMPONENT: &str = "metal3-dataimage-controller";
/// Upstream's `reportingController` on DataImage events.
pub const REPORTING_CONTROLLER: &str = "metal3.io/dataimage-controller";
/// Who posts the DataImage events, as upstream.
pub const REPORTER: Reporter = Reporter {
    component: SOURCE_COMPONENT,
    controller: REPORTING_CONTROLLER,
};

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

/// [`DataImageStore`] on a Kubernetes client.
#[derive(Clone)]
pub struct KubeDataImageStore {
    kube: KubeClient,
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
            kube: KubeClient::new(client, instance),
            cache: Arc::default(),
        }
    }

    pub fn client(&self) -> &kube::Client {
        self.kube.client()
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
        self.kube.get(namespace, name).await
    }

    async fn host(&self, namespace: &str, name: &str) -> Result<Option<BareMetalHost>, StoreError> {
        self.kube.get(namespace, name).await
    }

    async fn add_owner(&self, image: &DataImage, host: &BareMetalHost) -> Result<(), StoreError> {
        self.kube
            .add_owner(image, owner_reference(host, false))
            .await?;
        Ok(())
    }

    async fn set_finalizer(&self, image: &DataImage, present: bool) -> Result<(), StoreError> {
        let finalizer = DATA_IMAGE_FINALIZER;
        self.kube.set_finalizer(image, finalizer, present).await
    }

    async fn apply_status(
        &self,
        image: &DataImage,
        status: &DataImageStatus,
    ) -> Result<(), StoreError> {
        // Status fields upstream's operator wrote with Update become bmo's first, so
        // that the apply clears what it leaves out (an old error, say).
        let how = StatusApply {
            take_over: true,
            refusal_is_conflict: false,
            ..StatusApply::PLAIN
        };
        self.kube.apply_status(image, status, how).await
    }

    async fn publish(&self, image: &DataImage, reason: &str, message: &str) {
        let event = HostEvent::warning(reason, message);
        self.kube.publish(image, REPORTER, &event).await;
    }
}
