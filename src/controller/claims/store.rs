//! Every Kubernetes read and write of the HostClaim controller, behind one trait:
//! [`KubeClaimStore`] on the API server, [`MemoryClaimStore`] for reconciler tests.
//!
//! Writes shared with other writers carry a precondition: the claim's finalizers are
//! tested as read, and a host's `spec.consumerRef` is set or cleared only if the
//! host's resourceVersion is still the one read (two claims racing for one host:
//! one wins, the other sees [`StoreError::Conflict`] and picks again).

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::MutexGuard;

use k8s_openapi::api::core::v1::{Namespace, ObjectReference, Secret};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use kube::{Api, ResourceExt};
use serde_json::json;

use super::state_machine::Drive;
use crate::api::claims::HOST_CLAIM_FINALIZER;
use crate::api::{BareMetalHost, HostClaim, HostClaimStatus, HostDeployPolicy};
use crate::controller::runtime::store::kube_client::finalizers_with;
use crate::controller::runtime::store::memory::{Locked, replace_finalizers};
use crate::controller::runtime::store::{
    FIELD_MANAGER, KubeClient, StatusApply, StoreError, conflict_or, found, json_patch,
};

/// Field manager of the host fields a claim drives (apart from bmo's own status
/// writes), so that an apply without a field removes it from the host.
pub const DRIVE_FIELD_MANAGER: &str = "bmo-hostclaim";

/// The Kubernetes side of the HostClaim controller.
pub trait ClaimStore: Send + Sync {
    /// Adds (`present`) or removes the claim finalizer, if the finalizers are still as
    /// read.
    fn set_finalizer(
        &self,
        claim: &HostClaim,
        present: bool,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
    /// Writes the claim's whole status (server-side apply).
    fn apply_status(
        &self,
        claim: &HostClaim,
        status: &HostClaimStatus,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
    /// The HostDeployPolicies in `namespace`, or in every namespace.
    fn policies(
        &self,
        namespace: Option<&str>,
    ) -> impl Future<Output = Result<Vec<HostDeployPolicy>, StoreError>> + Send;
    /// The labels of namespace `name`, `None` when it does not exist.
    fn namespace_labels(
        &self,
        name: &str,
    ) -> impl Future<Output = Result<Option<BTreeMap<String, String>>, StoreError>> + Send;
    /// The BareMetalHosts in `namespace`.
    fn hosts(
        &self,
        namespace: &str,
    ) -> impl Future<Output = Result<Vec<BareMetalHost>, StoreError>> + Send;
    /// The BareMetalHost `namespace/name`, when it exists.
    fn host(
        &self,
        namespace: &str,
        name: &str,
    ) -> impl Future<Output = Result<Option<BareMetalHost>, StoreError>> + Send;
    /// Sets (or with `None` removes) the host's `spec.consumerRef`, if the host is
    /// still as read.
    fn set_consumer(
        &self,
        host: &BareMetalHost,
        consumer: Option<ObjectReference>,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
    /// Writes what the claim drives into the host's spec (server-side apply as
    /// [`DRIVE_FIELD_MANAGER`]: what `drive` leaves out is removed).
    fn drive(
        &self,
        host: &BareMetalHost,
        drive: &Drive,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
    /// The Secret `namespace/name`, when it exists.
    fn secret(
        &self,
        namespace: &str,
        name: &str,
    ) -> impl Future<Output = Result<Option<Secret>, StoreError>> + Send;
    /// Creates or replaces `secret` (server-side apply).
    fn apply_secret(&self, secret: &Secret) -> impl Future<Output = Result<(), StoreError>> + Send;
    /// Deletes the Secret `namespace/name`; a missing one is no error.
    fn delete_secret(
        &self,
        namespace: &str,
        name: &str,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
}

/// [`ClaimStore`] on a Kubernetes client.
#[derive(Clone)]
pub struct KubeClaimStore {
    client: kube::Client,
    kube: KubeClient,
}

impl KubeClaimStore {
    pub fn new(client: kube::Client) -> Self {
        Self {
            kube: KubeClient::new(client.clone(), None),
            client,
        }
    }

    pub fn client(&self) -> &kube::Client {
        &self.client
    }

    fn hosts_in(&self, namespace: &str) -> Api<BareMetalHost> {
        Api::namespaced(self.client.clone(), namespace)
    }
}

impl ClaimStore for KubeClaimStore {
    async fn set_finalizer(&self, claim: &HostClaim, present: bool) -> Result<(), StoreError> {
        let finalizer = HOST_CLAIM_FINALIZER;
        self.kube.set_finalizer(claim, finalizer, present).await
    }

    async fn apply_status(
        &self,
        claim: &HostClaim,
        status: &HostClaimStatus,
    ) -> Result<(), StoreError> {
        let how = StatusApply::PLAIN;
        self.kube.apply_status(claim, status, how).await
    }

    async fn policies(&self, namespace: Option<&str>) -> Result<Vec<HostDeployPolicy>, StoreError> {
        let api: Api<HostDeployPolicy> = match namespace {
            Some(ns) => Api::namespaced(self.client.clone(), ns),
            None => Api::all(self.client.clone()),
        };
        Ok(api.list(&ListParams::default()).await?.items)
    }

    async fn namespace_labels(
        &self,
        name: &str,
    ) -> Result<Option<BTreeMap<String, String>>, StoreError> {
        let api: Api<Namespace> = Api::all(self.client.clone());
        Ok(found(api.get(name).await)?.map(|ns| ns.labels().clone()))
    }

    async fn hosts(&self, namespace: &str) -> Result<Vec<BareMetalHost>, StoreError> {
        Ok(self
            .hosts_in(namespace)
            .list(&ListParams::default())
            .await?
            .items)
    }

    async fn host(&self, namespace: &str, name: &str) -> Result<Option<BareMetalHost>, StoreError> {
        self.kube.get(namespace, name).await
    }

    async fn set_consumer(
        &self,
        host: &BareMetalHost,
        consumer: Option<ObjectReference>,
    ) -> Result<(), StoreError> {
        let version = host.metadata.resource_version.clone().unwrap_or_default();
        let mut operations =
            vec![json!({"op": "test", "path": "/metadata/resourceVersion", "value": version})];
        match consumer {
            Some(reference) => {
                operations
                    .push(json!({"op": "add", "path": "/spec/consumerRef", "value": reference}));
            }
            None if host.spec.consumer_ref.is_some() => {
                operations.push(json!({"op": "remove", "path": "/spec/consumerRef"}));
            }
            None => return Ok(()),
        }
        self.hosts_in(&host.namespace().unwrap_or_default())
            .patch(
                &host.name_any(),
                &PatchParams::default(),
                &Patch::Json::<()>(json_patch(operations)?),
            )
            .await
            .map_err(conflict_or)?;
        Ok(())
    }

    async fn drive(&self, host: &BareMetalHost, drive: &Drive) -> Result<(), StoreError> {
        let mut spec = json!({"online": drive.online});
        let fields = [
            ("image", serde_json::to_value(&drive.image)),
            ("customDeploy", serde_json::to_value(&drive.custom_deploy)),
            ("userData", serde_json::to_value(&drive.user_data)),
            ("networkData", serde_json::to_value(&drive.network_data)),
            ("metaData", serde_json::to_value(&drive.meta_data)),
        ];
        for (field, value) in fields {
            let value = value.map_err(|e| StoreError::Kube(kube::Error::SerdeError(e)))?;
            if !value.is_null() {
                spec[field] = value;
            }
        }
        let patch = json!({
            "apiVersion": "metal3.io/v1alpha1",
            "kind": "BareMetalHost",
            "spec": spec,
        });
        self.hosts_in(&host.namespace().unwrap_or_default())
            .patch(
                &host.name_any(),
                &PatchParams::apply(DRIVE_FIELD_MANAGER).force(),
                &Patch::Apply(&patch),
            )
            .await
            .map_err(conflict_or)?;
        Ok(())
    }

    async fn secret(&self, namespace: &str, name: &str) -> Result<Option<Secret>, StoreError> {
        self.kube.get(namespace, name).await
    }

    async fn apply_secret(&self, secret: &Secret) -> Result<(), StoreError> {
        let api: Api<Secret> =
            Api::namespaced(self.client.clone(), &secret.namespace().unwrap_or_default());
        let mut applied = secret.clone();
        applied.metadata.managed_fields = None;
        let mut body = serde_json::to_value(&applied)
            .map_err(|e| StoreError::Kube(kube::Error::SerdeError(e)))?;
        body["apiVersion"] = json!("v1");
        body["kind"] = json!("Secret");
        api.patch(
            &secret.name_any(),
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&body),
        )
        .await
        .map_err(conflict_or)?;
        Ok(())
    }

    async fn delete_secret(&self, namespace: &str, name: &str) -> Result<(), StoreError> {
        let api: Api<Secret> = Api::namespaced(self.client.clone(), namespace);
        found(api.delete(name, &DeleteParams::default()).await)?;
        Ok(())
    }
}

#[derive(Default)]
struct Objects {
    claims: BTreeMap<String, HostClaim>,
    hosts: BTreeMap<String, BareMetalHost>,
    policies: Vec<HostDeployPolicy>,
    namespaces: BTreeMap<String, BTreeMap<String, String>>,
    secrets: BTreeMap<String, Secret>,
    version: u64,
}

impl Objects {
    fn bump(&mut self) -> Option<String> {
        self.version += 1;
        Some(self.version.to_string())
    }
}

fn key(namespace: Option<String>, name: &str) -> String {
    format!("{}/{name}", namespace.unwrap_or_default())
}

/// [`ClaimStore`] in memory, with the same preconditions as the API server.
#[derive(Default)]
pub struct MemoryClaimStore {
    objects: Locked<Objects>,
}

impl MemoryClaimStore {
    fn lock(&self) -> MutexGuard<'_, Objects> {
        self.objects.lock()
    }

    /// Adds or replaces a claim (new resourceVersion).
    pub fn put_claim(&self, mut claim: HostClaim) {
        let mut objects = self.lock();
        claim.metadata.resource_version = objects.bump();
        objects
            .claims
            .insert(key(claim.namespace(), &claim.name_any()), claim);
    }

    /// Adds or replaces a host (new resourceVersion).
    pub fn put_host(&self, mut host: BareMetalHost) {
        let mut objects = self.lock();
        host.metadata.resource_version = objects.bump();
        objects
            .hosts
            .insert(key(host.namespace(), &host.name_any()), host);
    }

    pub fn put_policy(&self, policy: HostDeployPolicy) {
        self.lock().policies.push(policy);
    }

    pub fn put_namespace(&self, name: &str, labels: BTreeMap<String, String>) {
        self.lock().namespaces.insert(name.to_owned(), labels);
    }

    pub fn put_secret(&self, secret: Secret) {
        let mut objects = self.lock();
        objects
            .secrets
            .insert(key(secret.namespace(), &secret.name_any()), secret);
    }

    pub fn claim(&self, namespace: &str, name: &str) -> Option<HostClaim> {
        self.lock()
            .claims
            .get(&key(Some(namespace.to_owned()), name))
            .cloned()
    }

    pub fn stored_host(&self, namespace: &str, name: &str) -> Option<BareMetalHost> {
        self.lock()
            .hosts
            .get(&key(Some(namespace.to_owned()), name))
            .cloned()
    }

    pub fn stored_secret(&self, namespace: &str, name: &str) -> Option<Secret> {
        self.lock()
            .secrets
            .get(&key(Some(namespace.to_owned()), name))
            .cloned()
    }

    fn set_finalizers(&self, claim: &HostClaim, wanted: Vec<String>) -> Result<(), StoreError> {
        let mut objects = self.lock();
        let version = objects.bump();
        let stored = objects
            .claims
            .get_mut(&key(claim.namespace(), &claim.name_any()));
        replace_finalizers(stored, claim, wanted, version)
    }
}

impl ClaimStore for MemoryClaimStore {
    /// As on the API server: a deleted claim without finalizers is gone.
    async fn set_finalizer(&self, claim: &HostClaim, present: bool) -> Result<(), StoreError> {
        let wanted = finalizers_with(claim, HOST_CLAIM_FINALIZER, present);
        let gone = wanted.is_empty() && claim.metadata.deletion_timestamp.is_some();
        self.set_finalizers(claim, wanted)?;
        if gone {
            self.lock()
                .claims
                .remove(&key(claim.namespace(), &claim.name_any()));
        }
        Ok(())
    }

    async fn apply_status(
        &self,
        claim: &HostClaim,
        status: &HostClaimStatus,
    ) -> Result<(), StoreError> {
        let mut objects = self.lock();
        let stored = objects
            .claims
            .get_mut(&key(claim.namespace(), &claim.name_any()))
            .ok_or(StoreError::Conflict)?;
        stored.status = Some(status.clone());
        Ok(())
    }

    async fn policies(&self, namespace: Option<&str>) -> Result<Vec<HostDeployPolicy>, StoreError> {
        Ok(self
            .lock()
            .policies
            .iter()
            .filter(|p| namespace.is_none_or(|ns| p.namespace().as_deref() == Some(ns)))
            .cloned()
            .collect())
    }

    async fn namespace_labels(
        &self,
        name: &str,
    ) -> Result<Option<BTreeMap<String, String>>, StoreError> {
        Ok(self.lock().namespaces.get(name).cloned())
    }

    async fn hosts(&self, namespace: &str) -> Result<Vec<BareMetalHost>, StoreError> {
        Ok(self
            .lock()
            .hosts
            .values()
            .filter(|h| h.namespace().as_deref() == Some(namespace))
            .cloned()
            .collect())
    }

    async fn host(&self, namespace: &str, name: &str) -> Result<Option<BareMetalHost>, StoreError> {
        Ok(self.stored_host(namespace, name))
    }

    async fn set_consumer(
        &self,
        host: &BareMetalHost,
        consumer: Option<ObjectReference>,
    ) -> Result<(), StoreError> {
        let mut objects = self.lock();
        let version = objects.bump();
        let stored = objects
            .hosts
            .get_mut(&key(host.namespace(), &host.name_any()))
            .ok_or(StoreError::Conflict)?;
        if stored.metadata.resource_version != host.metadata.resource_version {
            return Err(StoreError::Conflict);
        }
        stored.spec.consumer_ref = consumer;
        stored.metadata.resource_version = version;
        Ok(())
    }

    async fn drive(&self, host: &BareMetalHost, drive: &Drive) -> Result<(), StoreError> {
        let mut objects = self.lock();
        let version = objects.bump();
        let stored = objects
            .hosts
            .get_mut(&key(host.namespace(), &host.name_any()))
            .ok_or(StoreError::Conflict)?;
        stored.spec.online = drive.online;
        stored.spec.image = drive.image.clone();
        stored.spec.custom_deploy = drive.custom_deploy.clone();
        stored.spec.user_data = drive.user_data.clone();
        stored.spec.network_data = drive.network_data.clone();
        stored.spec.meta_data = drive.meta_data.clone();
        stored.metadata.resource_version = version;
        Ok(())
    }

    async fn secret(&self, namespace: &str, name: &str) -> Result<Option<Secret>, StoreError> {
        Ok(self.stored_secret(namespace, name))
    }

    async fn apply_secret(&self, secret: &Secret) -> Result<(), StoreError> {
        self.put_secret(secret.clone());
        Ok(())
    }

    async fn delete_secret(&self, namespace: &str, name: &str) -> Result<(), StoreError> {
        self.lock()
            .secrets
            .remove(&key(Some(namespace.to_owned()), name));
        Ok(())
    }
}
