//! The host's HostUpdatePolicy (same name) gets the host among its owners once the
//! host has a node, as upstream's operator does when it makes the host's firmware
//! objects: when the host was its only owner, deleting the host deletes the policy
//! too (Kubernetes' garbage collector), and a host made later under the same name
//! does not inherit it. Other owners are kept. The policy's spec is read by the host
//! controller when it services (`state_machine::servicing`); nothing here reads or
//! writes it.

use std::future::Future;

use kube::ResourceExt;

use super::context::{FirmwareContext, FirmwareError};
use super::state_machine::has_node;
use super::store::{KubeFirmwareStore, MemoryFirmwareStore, key, key_of, unchanged};
use crate::api::BareMetalHost;
use crate::api::firmware::HostUpdatePolicy;
use crate::controller::runtime::Next;
use crate::controller::runtime::store::{ObjectError, StoreError, cached, owner_reference};

/// The Kubernetes side of owning HostUpdatePolicies.
pub trait PolicyStore: Send + Sync {
    /// The host's policy, possibly from a cache a write behind.
    fn policy(
        &self,
        namespace: &str,
        name: &str,
    ) -> impl Future<Output = Result<Option<HostUpdatePolicy>, StoreError>> + Send;

    /// Adds the host to `policy`'s owners, if they are still as read.
    fn own_policy(
        &self,
        host: &BareMetalHost,
        policy: &HostUpdatePolicy,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
}

/// Whether `policy` still lacks `host` among its owners and should get it: the host
/// has a node (upstream owns the policy when it makes the firmware objects) and the
/// policy is not being deleted.
pub fn needs_owner(host: &BareMetalHost, policy: &HostUpdatePolicy) -> bool {
    let Some(uid) = host.metadata.uid.as_deref() else {
        return false;
    };
    has_node(host)
        && policy.metadata.deletion_timestamp.is_none()
        && !policy.owner_references().iter().any(|o| o.uid == uid)
}

/// Whether a BareMetalHost of the policy's name is among its owners: what the watch
/// wakes a host for. [`needs_owner`] tells a host made anew under that name apart by
/// uid.
pub(super) fn owned_by_its_host(policy: &HostUpdatePolicy) -> bool {
    let name = policy.name_any();
    policy
        .owner_references()
        .iter()
        .any(|o| o.kind == "BareMetalHost" && o.name == name)
}

/// One reconcile of `host`'s HostUpdatePolicy: owned if it needs to be. A write that
/// lost a race looks again shortly (the watch then shows the policy as it is).
pub async fn reconcile<P, S: PolicyStore>(
    host: &BareMetalHost,
    ctx: &FirmwareContext<P, S>,
) -> Result<Next, FirmwareError> {
    if !has_node(host) {
        return Ok(Next::OnChange);
    }
    let namespace = host.namespace().unwrap_or_default();
    let name = host.name_any();
    let object = format!("HostUpdatePolicy {namespace}/{name}");
    let store_err = ObjectError::store(&object);
    let Some(policy) = ctx
        .store
        .policy(&namespace, &name)
        .await
        .map_err(store_err)?
    else {
        return Ok(Next::OnChange);
    };
    if !needs_owner(host, &policy) {
        return Ok(Next::OnChange);
    }
    match ctx.store.own_policy(host, &policy).await {
        Ok(()) => {
            tracing::info!("the host owns its HostUpdatePolicy");
            Ok(Next::OnChange)
        }
        Err(StoreError::Conflict) => Ok(Next::After(RETRY_AFTER_CONFLICT)),
        // Deleted meanwhile: nothing to own.
        Err(StoreError::Kube(kube::Error::Api(status))) if status.code == 404 => Ok(Next::OnChange),
        // bmo's role predates the permission (an upgrade without deploy/rbac): said
        // once per host change, not retried with the BIOS and firmware reads.
        Err(StoreError::Kube(kube::Error::Api(status))) if status.code == 403 => {
            tracing::warn!(
                "cannot add the host to its HostUpdatePolicy's owners: {}; grant `patch` on \
                 hostupdatepolicies (deploy/rbac/role.yaml)",
                status.message
            );
            Ok(Next::OnChange)
        }
        Err(e) => Err(store_err(e)),
    }
}

/// How soon to try again after the policy changed under the write.
const RETRY_AFTER_CONFLICT: std::time::Duration = std::time::Duration::from_secs(1);

impl PolicyStore for KubeFirmwareStore {
    async fn policy(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<HostUpdatePolicy>, StoreError> {
        if let Some(policy) = cached(&self.caches.policies, namespace, name) {
            return Ok(policy);
        }
        self.kube.get(namespace, name).await
    }

    async fn own_policy(
        &self,
        host: &BareMetalHost,
        policy: &HostUpdatePolicy,
    ) -> Result<(), StoreError> {
        self.kube
            .add_owner(policy, owner_reference(host, false))
            .await?;
        Ok(())
    }
}

impl MemoryFirmwareStore {
    /// Puts (or replaces) a HostUpdatePolicy, as a user would; it gets a
    /// resourceVersion.
    pub fn put_policy(&self, mut policy: HostUpdatePolicy) {
        let mut objects = self.lock();
        objects.stamp(&mut policy);
        objects.policies.insert(key_of(&policy), policy);
    }

    pub fn stored_policy(&self, namespace: &str, name: &str) -> Option<HostUpdatePolicy> {
        self.lock().policies.get(&key(namespace, name)).cloned()
    }
}

impl PolicyStore for MemoryFirmwareStore {
    async fn policy(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<HostUpdatePolicy>, StoreError> {
        Ok(self.stored_policy(namespace, name))
    }

    async fn own_policy(
        &self,
        host: &BareMetalHost,
        policy: &HostUpdatePolicy,
    ) -> Result<(), StoreError> {
        let mut objects = self.lock();
        unchanged(objects.policies.get(&key_of(policy)), policy)?;
        let mut owned = policy.clone();
        owned
            .owner_references_mut()
            .push(owner_reference(host, false));
        objects.stamp(&mut owned);
        objects.policies.insert(key_of(&owned), owned);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};
    use serde_json::json;

    use super::*;
    use crate::controller::firmware::state_machine::tests::test_host;

    fn context() -> FirmwareContext<(), MemoryFirmwareStore> {
        FirmwareContext {
            provisioner: (),
            store: MemoryFirmwareStore::default(),
            namespace: None,
        }
    }

    /// A policy for host `a`, as a user makes it, owned by something else already.
    fn policy() -> HostUpdatePolicy {
        let mut policy: HostUpdatePolicy = serde_json::from_value(json!({
            "apiVersion": "metal3.io/v1alpha1", "kind": "HostUpdatePolicy",
            "metadata": {"name": "a", "namespace": "ns"},
            "spec": {"firmwareSettings": "onReboot"},
        }))
        .expect("valid policy");
        policy.metadata.owner_references = Some(vec![OwnerReference {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            name: "fleet".into(),
            uid: "fleet-uid".into(),
            ..OwnerReference::default()
        }]);
        policy
    }

    fn owners(ctx: &FirmwareContext<(), MemoryFirmwareStore>) -> Vec<String> {
        let policy = ctx
            .store
            .stored_policy("ns", "a")
            .expect("the policy is kept");
        policy
            .owner_references()
            .iter()
            .map(|o| o.uid.clone())
            .collect()
    }

    #[tokio::test]
    async fn a_registered_host_is_added_to_its_policys_owners_once() {
        let ctx = context();
        ctx.store.put_policy(policy());
        let host = test_host("a", "node-a");

        assert_eq!(reconcile(&host, &ctx).await.expect("owned"), Next::OnChange);
        assert_eq!(
            owners(&ctx),
            ["fleet-uid", "a-uid"],
            "the other owner is kept"
        );
        let owned = ctx.store.stored_policy("ns", "a").expect("kept");
        assert_eq!(owned.spec, policy().spec, "the spec is the user's");

        reconcile(&host, &ctx).await.expect("nothing to do");
        let again = ctx.store.stored_policy("ns", "a").expect("kept");
        assert_eq!(
            again.metadata.resource_version, owned.metadata.resource_version,
            "no second write"
        );
    }

    #[tokio::test]
    async fn a_host_without_a_node_or_being_deleted_leaves_the_policy_alone() {
        let ctx = context();
        ctx.store.put_policy(policy());
        let registering = test_host("a", "");
        reconcile(&registering, &ctx).await.expect("nothing to do");
        assert_eq!(owners(&ctx), ["fleet-uid"]);

        let mut deleting = test_host("a", "node-a");
        deleting.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
        reconcile(&deleting, &ctx).await.expect("nothing to do");
        assert_eq!(owners(&ctx), ["fleet-uid"]);
    }

    #[tokio::test]
    async fn no_policy_is_nothing_to_do() {
        let ctx = context();
        let host = test_host("a", "node-a");
        assert_eq!(
            reconcile(&host, &ctx).await.expect("no policy"),
            Next::OnChange
        );
        assert!(ctx.store.stored_policy("ns", "a").is_none(), "none is made");
    }

    #[test]
    fn a_policy_being_deleted_gets_no_owner() {
        let host = test_host("a", "node-a");
        let mut leaving = policy();
        assert!(needs_owner(&host, &leaving));
        leaving.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
        assert!(!needs_owner(&host, &leaving));
    }
}
