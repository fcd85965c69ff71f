//! Every Kubernetes read and write of the HostFirmwareComponents controller.
//! The status is written with server-side apply and the resourceVersion as read, so
//! a status the host controller changed meanwhile (it records the updates preparing
//! started) is never overwritten: that write is [`StoreError::Conflict`], and the
//! reconcile reads again.

use std::future::Future;

use kube::ResourceExt;

use crate::api::BareMetalHost;
use crate::api::firmware::{
    HostFirmwareComponents, HostFirmwareComponentsSpec, HostFirmwareComponentsStatus,
};
use crate::controller::firmware::store::{
    KubeFirmwareStore, MemoryFirmwareStore, key_of, unchanged,
};
use crate::controller::runtime::store::events::Reporter;
use crate::controller::runtime::store::{
    HostEvent, Read, StatusApply, StoreError, owner_reference,
};

/// Upstream's `source.component` on HostFirmwareComponents events.
pub const SOURCE_COMPONENT: &str = "metal3-hostfirmwarecomponents-controller";
/// Upstream's `reportingController` on HostFirmwareComponents events.
pub const REPORTING_CONTROLLER: &str = "metal3.io/hostfirmwarecomponents-controller";
/// Who posts the HostFirmwareComponents events, as upstream.
pub const REPORTER: Reporter = Reporter {
    component: SOURCE_COMPONENT,
    controller: REPORTING_CONTROLLER,
};

/// The Kubernetes side of the HostFirmwareComponents controller.
pub trait ComponentsStore: Send + Sync {
    /// The object, from where `read` says.
    fn components(
        &self,
        namespace: &str,
        name: &str,
        read: Read,
    ) -> impl Future<Output = Result<Option<HostFirmwareComponents>, StoreError>> + Send;

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
        read: Read,
    ) -> Result<Option<HostFirmwareComponents>, StoreError> {
        let cache = &self.caches.components;
        self.kube.read(cache, namespace, name, read).await
    }

    async fn create_components(
        &self,
        host: &BareMetalHost,
    ) -> Result<HostFirmwareComponents, StoreError> {
        self.kube.create(&new_components(host)).await
    }

    async fn adopt_components(
        &self,
        host: &BareMetalHost,
        object: &HostFirmwareComponents,
    ) -> Result<HostFirmwareComponents, StoreError> {
        let (adopted, added) = self
            .kube
            .adopt(object, owner_reference(host, false))
            .await?;
        if added {
            tracing::info!("adopted the host's HostFirmwareComponents");
        }
        Ok(adopted)
    }

    async fn apply_components_status(
        &self,
        object: &HostFirmwareComponents,
        status: &HostFirmwareComponentsStatus,
    ) -> Result<(), StoreError> {
        let how = StatusApply {
            if_unchanged: true,
            ..StatusApply::PLAIN
        };
        self.kube.apply_status(object, status, how).await
    }

    async fn publish_components(
        &self,
        object: &HostFirmwareComponents,
        reason: &str,
        message: &str,
    ) {
        // Upstream says Normal; bmo marks refusals as warnings, as for hosts.
        let event = HostEvent::warning(reason, message);
        self.kube.publish(object, REPORTER, &event).await;
    }
}

/// As on the API server: the status write and adoption are refused
/// ([`StoreError::Conflict`]) when the object changed since it was read.
impl ComponentsStore for MemoryFirmwareStore {
    async fn components(
        &self,
        namespace: &str,
        name: &str,
        _: Read,
    ) -> Result<Option<HostFirmwareComponents>, StoreError> {
        Ok(self.stored_components(namespace, name))
    }

    async fn create_components(
        &self,
        host: &BareMetalHost,
    ) -> Result<HostFirmwareComponents, StoreError> {
        self.lock()
            .create(|o| &mut o.components, new_components(host))
    }

    async fn adopt_components(
        &self,
        host: &BareMetalHost,
        object: &HostFirmwareComponents,
    ) -> Result<HostFirmwareComponents, StoreError> {
        self.lock().adopt(|o| &mut o.components, object, host)
    }

    async fn apply_components_status(
        &self,
        object: &HostFirmwareComponents,
        status: &HostFirmwareComponentsStatus,
    ) -> Result<(), StoreError> {
        let mut objects = self.lock();
        unchanged(objects.components.get(&key_of(object)), object)?;
        let mut stored = object.clone();
        stored.status = Some(status.clone());
        objects.save_status(|o| &mut o.components, stored);
        Ok(())
    }

    async fn publish_components(
        &self,
        object: &HostFirmwareComponents,
        reason: &str,
        message: &str,
    ) {
        self.lock().record(object, reason, message);
    }
}
