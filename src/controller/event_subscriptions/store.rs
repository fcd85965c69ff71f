//! Every Kubernetes read and write of the BMCEventSubscription controller, behind
//! one trait: [`KubeSubscriptionStore`] on the API server, [`MemorySubscriptionStore`]
//! for reconciler tests.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Mutex, MutexGuard, PoisonError};

use k8s_openapi::api::core::v1::{Event, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::json;

use crate::api::events::BMC_EVENT_SUBSCRIPTION_FINALIZER;
use crate::api::{BMCEventSubscription, BMCEventSubscriptionStatus, BareMetalHost};
use crate::controller::runtime::store::events::{Reporter, upstream_event};
use crate::controller::runtime::store::{
    FIELD_MANAGER, HostEvent, StoreError, conflict_or, patch_finalizers,
};

/// `source.component` of the events, as upstream names its controller.
pub const SOURCE_COMPONENT: &str = "metal3-bmceventsubscription-controller";
/// `reportingComponent` of the events.
pub const REPORTING_CONTROLLER: &str = "metal3.io/bmceventsubscription-controller";

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

fn without_finalizer(subscription: &BMCEventSubscription) -> Vec<String> {
    subscription
        .finalizers()
        .iter()
        .filter(|f| *f != BMC_EVENT_SUBSCRIPTION_FINALIZER)
        .cloned()
        .collect()
}

fn with_finalizer(subscription: &BMCEventSubscription) -> Vec<String> {
    let mut wanted = subscription.finalizers().to_vec();
    wanted.push(BMC_EVENT_SUBSCRIPTION_FINALIZER.to_owned());
    wanted
}

/// [`SubscriptionStore`] on a Kubernetes client.
#[derive(Clone)]
pub struct KubeSubscriptionStore {
    client: kube::Client,
    instance: Option<String>,
}

impl KubeSubscriptionStore {
    /// `instance` names this bmo in the events it publishes (`POD_NAME`).
    pub fn new(client: kube::Client, instance: Option<String>) -> Self {
        Self { client, instance }
    }

    pub fn client(&self) -> &kube::Client {
        &self.client
    }

    fn subscriptions(&self, subscription: &BMCEventSubscription) -> Api<BMCEventSubscription> {
        Api::namespaced(
            self.client.clone(),
            &subscription.namespace().unwrap_or_default(),
        )
    }
}

/// The object, or `None` on 404.
fn found<T>(result: Result<T, kube::Error>) -> Result<Option<T>, StoreError> {
    match result {
        Ok(object) => Ok(Some(object)),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(None),
        Err(e) => Err(StoreError::Kube(e)),
    }
}

impl SubscriptionStore for KubeSubscriptionStore {
    async fn host(&self, namespace: &str, name: &str) -> Result<Option<BareMetalHost>, StoreError> {
        found(
            Api::<BareMetalHost>::namespaced(self.client.clone(), namespace)
                .get(name)
                .await,
        )
    }

    async fn secret(&self, namespace: &str, name: &str) -> Result<Option<Secret>, StoreError> {
        found(
            Api::<Secret>::namespaced(self.client.clone(), namespace)
                .get(name)
                .await,
        )
    }

    async fn add_finalizer(&self, subscription: &BMCEventSubscription) -> Result<(), StoreError> {
        patch_finalizers(
            &self.subscriptions(subscription),
            subscription,
            with_finalizer(subscription),
        )
        .await
    }

    async fn remove_finalizer(
        &self,
        subscription: &BMCEventSubscription,
    ) -> Result<(), StoreError> {
        patch_finalizers(
            &self.subscriptions(subscription),
            subscription,
            without_finalizer(subscription),
        )
        .await
    }

    async fn apply_status(
        &self,
        subscription: &BMCEventSubscription,
        status: &BMCEventSubscriptionStatus,
    ) -> Result<(), StoreError> {
        let patch = json!({
            "apiVersion": "metal3.io/v1alpha1",
            "kind": "BMCEventSubscription",
            "status": status,
        });
        self.subscriptions(subscription)
            .patch_status(
                &subscription.name_any(),
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(&patch),
            )
            .await
            .map_err(conflict_or)?;
        Ok(())
    }

    async fn publish(&self, subscription: &BMCEventSubscription, event: &HostEvent) {
        let now = Time(k8s_openapi::jiff::Timestamp::now());
        let reporter = Reporter {
            component: SOURCE_COMPONENT,
            controller: REPORTING_CONTROLLER,
        };
        let event: Event = upstream_event(
            subscription,
            reporter,
            event,
            None,
            self.instance.as_deref(),
            &now,
        );
        if let Err(e) = Api::<Event>::namespaced(
            self.client.clone(),
            &subscription.namespace().unwrap_or_default(),
        )
        .create(&PostParams::default(), &event)
        .await
        {
            tracing::debug!(error = %e, "could not publish event");
        }
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

fn key(namespace: &str, name: &str) -> String {
    format!("{namespace}/{name}")
}

/// [`SubscriptionStore`] in memory, with every event recorded.
#[derive(Default)]
pub struct MemorySubscriptionStore {
    objects: Mutex<Objects>,
}

impl MemorySubscriptionStore {
    fn lock(&self) -> MutexGuard<'_, Objects> {
        self.objects.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub fn put_subscription(&self, subscription: BMCEventSubscription) {
        let key = key(
            &subscription.namespace().unwrap_or_default(),
            &subscription.name_any(),
        );
        self.lock().subscriptions.insert(key, subscription);
    }

    pub fn put_host(&self, host: BareMetalHost) {
        let key = key(&host.namespace().unwrap_or_default(), &host.name_any());
        self.lock().hosts.insert(key, host);
    }

    pub fn put_secret(&self, secret: Secret) {
        let key = key(&secret.namespace().unwrap_or_default(), &secret.name_any());
        self.lock().secrets.insert(key, secret);
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

    fn set_finalizers(
        &self,
        subscription: &BMCEventSubscription,
        wanted: Vec<String>,
    ) -> Result<(), StoreError> {
        let mut objects = self.lock();
        objects.version += 1;
        let version = objects.version.to_string();
        let key = key(
            &subscription.namespace().unwrap_or_default(),
            &subscription.name_any(),
        );
        let Some(stored) = objects.subscriptions.get_mut(&key) else {
            return Err(StoreError::Conflict);
        };
        if stored.finalizers() != subscription.finalizers() {
            return Err(StoreError::Conflict);
        }
        let gone = wanted.is_empty() && stored.metadata.deletion_timestamp.is_some();
        stored.metadata.finalizers = Some(wanted);
        stored.metadata.resource_version = Some(version);
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
        self.set_finalizers(subscription, with_finalizer(subscription))
    }

    async fn remove_finalizer(
        &self,
        subscription: &BMCEventSubscription,
    ) -> Result<(), StoreError> {
        self.set_finalizers(subscription, without_finalizer(subscription))
    }

    async fn apply_status(
        &self,
        subscription: &BMCEventSubscription,
        status: &BMCEventSubscriptionStatus,
    ) -> Result<(), StoreError> {
        let mut objects = self.lock();
        let key = key(
            &subscription.namespace().unwrap_or_default(),
            &subscription.name_any(),
        );
        let Some(stored) = objects.subscriptions.get_mut(&key) else {
            return Err(StoreError::Conflict);
        };
        stored.status = Some(status.clone());
        Ok(())
    }

    async fn publish(&self, _subscription: &BMCEventSubscription, event: &HostEvent) {
        self.lock().events.push(event.clone());
    }
}
