//! Every Kubernetes read and write of the BMCEventSubscription controller, behind
//! one trait: [`KubeSubscriptionStore`] on the API server, [`MemorySubscriptionStore`]
//! for reconciler tests.

use std::collections::BTreeMap;
use std::future::Future;

use crate::api::events::BMC_EVENT_SUBSCRIPTION_FINALIZER;
use crate::api::{BMCEventSubscription, BMCEventSubscriptionStatus, BareMetalHost};
use crate::controller::runtime::store::events::Reporter;
use crate::controller::runtime::store::kube_client::finalizers_with;
use crate::controller::runtime::store::memory::{Locked, key, key_of, replace_finalizers};
use crate::controller::runtime::store::{HostEvent, KubeClient, StatusApply, StoreError};
use k8s_openapi::api::core::v1::Secret;

/// `source.component` of the events, as upstream names its controller.
pub const SOURCE_COMPONENT: &str = "metal3-bmceventsubscription-controller";
/// `reportingComponent` of the events.
pub const REPORTING_CONTROLLER: &str = "metal3.io/bmceventsubscription-controller";
/// Who posts the events, as upstream.
pub const REPORTER: Reporter = Reporter {
    component: SOURCE_COMPONENT,
    controller: REPORTING_CONTROLLER,
};

/// The Kubernetes side of the BMCEventSubscription controller.
pub trait SubscriptionStore: Send + Sync {
    /// The BareMetalHost `namespace/name`, when it exists.
    fn host(
        &self,
        namespace: &str,
        name: &str,
    ) -> impl Future<Output = Result<Option<BareMetalHost>, StoreError>> + Send;
    /// The Secret `namespace/name`, when it exists.
    fn secret(
        &self,
        namespace: &str,
        name: &str,
    ) -> impl Future<Output = Result<Option<Secret>, StoreError>> + Send;
    /// Adds the finalizer, if the finalizers are still as read.
    fn add_finalizer(
        &self,
        subscription: &BMCEventSubscription,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
    /// Removes the finalizer, if the finalizers are still as read.
    fn remove_finalizer(
        &self,
        subscription: &BMCEventSubscription,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
    /// Writes the whole status (server-side apply).
    fn apply_status(
        &self,
        subscription: &BMCEventSubscription,
        status: &BMCEventSubscriptionStatus,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
    /// Publishes an event about the subscription; a failure is only logged.
    fn publish(
        &self,
        subscription: &BMCEventSubscription,
        event: &HostEvent,
    ) -> impl Future<Output = ()> + Send;
}

/// [`SubscriptionStore`] on a Kubernetes client.
#[derive(Clone)]
pub struct KubeSubscriptionStore {
    kube: KubeClient,
}

impl KubeSubscriptionStore {
    /// `instance` names this bmo in the events it publishes (`POD_NAME`).
    pub fn new(client: kube::Client, instance: Option<String>) -> Self {
        Self {
            kube: KubeClient::new(client, instance),
        }
    }

    pub fn client(&self) -> &kube::Client {
        self.kube.client()
    }
}

impl SubscriptionStore for KubeSubscriptionStore {
    async fn host(&self, namespace: &str, name: &str) -> Result<Option<BareMetalHost>, StoreError> {
        self.kube.get(namespace, name).await
    }

    async fn secret(&self, namespace: &str, name: &str) -> Result<Option<Secret>, StoreError> {
        self.kube.get(namespace, name).await
    }

    async fn add_finalizer(&self, subscription: &BMCEventSubscription) -> Result<(), StoreError> {
        let finalizer = BMC_EVENT_SUBSCRIPTION_FINALIZER;
        self.kube.set_finalizer(subscription, finalizer, true).await
    }

    async fn remove_finalizer(
        &self,
        subscription: &BMCEventSubscription,
    ) -> Result<(), StoreError> {
        let finalizer = BMC_EVENT_SUBSCRIPTION_FINALIZER;
        self.kube
            .set_finalizer(subscription, finalizer, false)
            .await
    }

    async fn apply_status(
        &self,
        subscription: &BMCEventSubscription,
        status: &BMCEventSubscriptionStatus,
    ) -> Result<(), StoreError> {
        let how = StatusApply::PLAIN;
        self.kube.apply_status(subscription, status, how).await
    }

    async fn publish(&self, subscription: &BMCEventSubscription, event: &HostEvent) {
        self.kube.publish(subscription, REPORTER, event).await;
    }
}

#[derive(Default)]
struct Objects {
    subscriptions: BTreeMap<String, BMCEventSubscription>,
    hosts: BTreeMap<String, BareMetalHost>,
    secrets: BTreeMap<String, Secret>,
    events: Vec<HostEvent>,
    version: u64,
}

/// [`SubscriptionStore`] in memory, with every event recorded.
#[derive(Default)]
pub struct MemorySubscriptionStore {
    objects: Locked<Objects>,
}

impl MemorySubscriptionStore {
    fn lock(&self) -> std::sync::MutexGuard<'_, Objects> {
        self.objects.lock()
    }

    pub fn put_subscription(&self, subscription: BMCEventSubscription) {
        let key = key_of(&subscription);
        self.lock().subscriptions.insert(key, subscription);
    }

    pub fn put_host(&self, host: BareMetalHost) {
        self.lock().hosts.insert(key_of(&host), host);
    }

    pub fn put_secret(&self, secret: Secret) {
        self.lock().secrets.insert(key_of(&secret), secret);
    }

    /// The stored subscription; `None` once deleted.
    pub fn subscription(&self, namespace: &str, name: &str) -> Option<BMCEventSubscription> {
        self.lock()
            .subscriptions
            .get(&key(namespace, name))
            .cloned()
    }

    pub fn events(&self) -> Vec<HostEvent> {
        self.lock().events.clone()
    }

    fn set_finalizer(
        &self,
        subscription: &BMCEventSubscription,
        present: bool,
    ) -> Result<(), StoreError> {
        let wanted = finalizers_with(subscription, BMC_EVENT_SUBSCRIPTION_FINALIZER, present);
        let mut objects = self.lock();
        objects.version += 1;
        let version = objects.version.to_string();
        let key = key_of(subscription);
        let gone = wanted.is_empty()
            && objects
                .subscriptions
                .get(&key)
                .is_some_and(|s| s.metadata.deletion_timestamp.is_some());
        let stored = objects.subscriptions.get_mut(&key);
        replace_finalizers(stored, subscription, wanted, Some(version))?;
        if gone {
            objects.subscriptions.remove(&key);
        }
        Ok(())
    }
}

impl SubscriptionStore for MemorySubscriptionStore {
    async fn host(&self, namespace: &str, name: &str) -> Result<Option<BareMetalHost>, StoreError> {
        Ok(self.lock().hosts.get(&key(namespace, name)).cloned())
    }

    async fn secret(&self, namespace: &str, name: &str) -> Result<Option<Secret>, StoreError> {
        Ok(self.lock().secrets.get(&key(namespace, name)).cloned())
    }

    async fn add_finalizer(&self, subscription: &BMCEventSubscription) -> Result<(), StoreError> {
        self.set_finalizer(subscription, true)
    }

    async fn remove_finalizer(
        &self,
        subscription: &BMCEventSubscription,
    ) -> Result<(), StoreError> {
        self.set_finalizer(subscription, false)
    }

    async fn apply_status(
        &self,
        subscription: &BMCEventSubscription,
        status: &BMCEventSubscriptionStatus,
    ) -> Result<(), StoreError> {
        let mut objects = self.lock();
        let Some(stored) = objects.subscriptions.get_mut(&key_of(subscription)) else {
            return Err(StoreError::Conflict);
        };
        stored.status = Some(status.clone());
        Ok(())
    }

    async fn publish(&self, _subscription: &BMCEventSubscription, event: &HostEvent) {
        self.lock().events.push(event.clone());
    }
}
