//! What the HostClaim controller reads and writes beyond every kind's
//! ([`ObjectStore`]), behind one trait: on the API server ([`KubeClient`]) and in
//! memory for reconciler tests ([`MemoryObjects`]).
//!
//! Writes shared with other writers carry a precondition: the claim's finalizers are
//! tested as read, and a host's `spec.consumerRef` is set or cleared only if the
//! host's resourceVersion is still the one read (two claims racing for one host:
//! one wins, the other sees [`StoreError::Conflict`] and picks again).

use std::collections::BTreeMap;
use std::future::Future;

use k8s_openapi::api::core::v1::{Namespace, ObjectReference, Secret};
use kube::api::{DeleteParams, ListParams};
use kube::{Api, ResourceExt};
use serde_json::json;

use super::state_machine::Drive;
use crate::api::{BareMetalHost, HostClaim, HostDeployPolicy};
use crate::controller::runtime::store::memory::unchanged;
use crate::controller::runtime::store::{
    FIELD_MANAGER, Kind, KubeClient, MemoryObjects, ObjectStore, StoreError, apply_as, conflict_or,
    found, patch_guarded,
};
use crate::controller::runtime::watch::api_in;

/// Field manager of the host fields a claim drives (apart from bmo's own status
/// writes), so that an apply without a field removes it from the host.
pub const DRIVE_FIELD_MANAGER: &str = "bmo-hostclaim";

/// Its status is applied as it is.
impl Kind for HostClaim {}

/// What the HostClaim controller reads and writes beyond every kind's.
pub trait ClaimStore: ObjectStore {
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
    /// Creates or replaces `secret` (server-side apply).
    fn apply_secret(&self, secret: &Secret) -> impl Future<Output = Result<(), StoreError>> + Send;
    /// Deletes the Secret `namespace/name`; a missing one is no error.
    fn delete_secret(
        &self,
        namespace: &str,
        name: &str,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
}

impl ClaimStore for KubeClient {
    async fn policies(&self, namespace: Option<&str>) -> Result<Vec<HostDeployPolicy>, StoreError> {
        let api: Api<HostDeployPolicy> = api_in(self.client(), namespace);
        Ok(api.list(&ListParams::default()).await?.items)
    }

    async fn namespace_labels(
        &self,
        name: &str,
    ) -> Result<Option<BTreeMap<String, String>>, StoreError> {
        let api: Api<Namespace> = Api::all(self.client().clone());
        Ok(found(api.get(name).await)?.map(|ns| ns.labels().clone()))
    }

    async fn hosts(&self, namespace: &str) -> Result<Vec<BareMetalHost>, StoreError> {
        let api = self.api::<BareMetalHost>(namespace);
        Ok(api.list(&ListParams::default()).await?.items)
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
        patch_guarded(&self.api_of(host), host, operations).await?;
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
        let api = self.api_of(host);
        let applied = apply_as(&api, &host.name_any(), DRIVE_FIELD_MANAGER, &patch).await;
        applied.map_err(conflict_or)?;
        Ok(())
    }

    async fn apply_secret(&self, secret: &Secret) -> Result<(), StoreError> {
        let api = self.api_of(secret);
        let mut applied = secret.clone();
        applied.metadata.managed_fields = None;
        let mut body = serde_json::to_value(&applied)
            .map_err(|e| StoreError::Kube(kube::Error::SerdeError(e)))?;
        body["apiVersion"] = json!("v1");
        body["kind"] = json!("Secret");
        let applied = apply_as(&api, &secret.name_any(), FIELD_MANAGER, &body).await;
        applied.map_err(conflict_or)?;
        Ok(())
    }

    async fn delete_secret(&self, namespace: &str, name: &str) -> Result<(), StoreError> {
        let api = self.api::<Secret>(namespace);
        found(api.delete(name, &DeleteParams::default()).await)?;
        Ok(())
    }
}

/// As on the API server: a host's consumer is written only if the host is still as
/// read.
impl ClaimStore for MemoryObjects {
    async fn policies(&self, namespace: Option<&str>) -> Result<Vec<HostDeployPolicy>, StoreError> {
        Ok(self.list(namespace))
    }

    async fn namespace_labels(
        &self,
        name: &str,
    ) -> Result<Option<BTreeMap<String, String>>, StoreError> {
        let namespace = self.stored::<Namespace>("", name);
        Ok(namespace.map(|ns| ns.labels().clone()))
    }

    async fn hosts(&self, namespace: &str) -> Result<Vec<BareMetalHost>, StoreError> {
        Ok(self.list(Some(namespace)))
    }

    async fn set_consumer(
        &self,
        host: &BareMetalHost,
        consumer: Option<ObjectReference>,
    ) -> Result<(), StoreError> {
        self.update(host, |stored| {
            unchanged(Some(&*stored), host)?;
            stored.spec.consumer_ref = consumer;
            Ok(())
        })
    }

    async fn drive(&self, host: &BareMetalHost, drive: &Drive) -> Result<(), StoreError> {
        self.update(host, |stored| {
            stored.spec.online = drive.online;
            stored.spec.image = drive.image.clone();
            stored.spec.custom_deploy = drive.custom_deploy.clone();
            stored.spec.user_data = drive.user_data.clone();
            stored.spec.network_data = drive.network_data.clone();
            stored.spec.meta_data = drive.meta_data.clone();
            Ok(())
        })
    }

    async fn apply_secret(&self, secret: &Secret) -> Result<(), StoreError> {
        self.put(secret.clone());
        Ok(())
    }

    async fn delete_secret(&self, namespace: &str, name: &str) -> Result<(), StoreError> {
        self.delete::<Secret>(namespace, name);
        Ok(())
    }
}
