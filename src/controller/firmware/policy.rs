//! The host's HostUpdatePolicy (same name) gets the host among its owners once the
//! host has a node, as upstream's operator does when it makes the host's firmware
//! objects: when the host was its only owner, deleting the host deletes the policy
//! too (Kubernetes' garbage collector), and a host made later under the same name
//! does not inherit it. Other owners are kept. The policy's spec is read by the host
//! controller when it services (`state_machine::servicing`); nothing here reads or
//! writes it.

use kube::ResourceExt;

use super::context::{FirmwareContext, FirmwareError};
use super::state_machine::has_node;
use crate::api::BareMetalHost;
use crate::api::firmware::HostUpdatePolicy;
use crate::controller::runtime::Next;
use crate::controller::runtime::controller::CONFLICT_RETRY;
use crate::controller::runtime::store::{
    ObjectError, ObjectStore, Read, StoreError, owner_reference,
};

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
pub async fn reconcile<P, S: ObjectStore>(
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
    // Possibly from a cache a write behind.
    let policy = ctx.store.read(&namespace, &name, Read::Cached).await;
    let Some(policy) = policy.map_err(store_err)? else {
        return Ok(Next::OnChange);
    };
    if !needs_owner(host, &policy) {
        return Ok(Next::OnChange);
    }
    match ctx
        .store
        .add_owner(&policy, owner_reference(host, false))
        .await
    {
        Ok(()) => {
            tracing::info!("the host owns its HostUpdatePolicy");
            Ok(Next::OnChange)
        }
        Err(StoreError::Conflict) => Ok(Next::After(CONFLICT_RETRY)),
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

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use serde_json::json;

    use super::*;
    use crate::controller::firmware::state_machine::tests::{owned_by, owner_uids, test_host};
    use crate::controller::runtime::store::MemoryObjects;

    /// The policy of host `a` as stored now.
    fn stored_policy(ctx: &FirmwareContext<(), MemoryObjects>) -> Option<HostUpdatePolicy> {
        ctx.store.stored("ns", "a")
    }

    fn context() -> FirmwareContext<(), MemoryObjects> {
        FirmwareContext {
            provisioner: (),
            store: MemoryObjects::default(),
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
        let fleet = owned_by("v1", "ConfigMap", "fleet", "fleet-uid");
        policy.metadata.owner_references = Some(vec![fleet]);
        policy
    }

    fn owners(ctx: &FirmwareContext<(), MemoryObjects>) -> Vec<String> {
        let policy = stored_policy(ctx).expect("the policy is kept");
        owner_uids(&policy)
    }

    #[tokio::test]
    async fn a_registered_host_is_added_to_its_policys_owners_once() {
        let ctx = context();
        ctx.store.put(policy());
        let host = test_host("a", "node-a");

        assert_eq!(reconcile(&host, &ctx).await.expect("owned"), Next::OnChange);
        assert_eq!(
            owners(&ctx),
            ["fleet-uid", "a-uid"],
            "the other owner is kept"
        );
        let owned = stored_policy(&ctx).expect("kept");
        assert_eq!(owned.spec, policy().spec, "the spec is the user's");

        reconcile(&host, &ctx).await.expect("nothing to do");
        let again = stored_policy(&ctx).expect("kept");
        assert_eq!(
            again.metadata.resource_version, owned.metadata.resource_version,
            "no second write"
        );
    }

    #[tokio::test]
    async fn a_host_without_a_node_or_being_deleted_leaves_the_policy_alone() {
        let ctx = context();
        ctx.store.put(policy());
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
        assert!(stored_policy(&ctx).is_none(), "none is made");
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
