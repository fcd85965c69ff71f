//! The least-privilege RBAC in deploy/rbac is enough: `bmo run` as a user holding only
//! that role takes a fake-hardware host to `provisioned`, and owns its
//! HostUpdatePolicy, without one refused request.

use std::time::Duration;

use bmo::api::firmware::HostUpdatePolicy;
use bmo::api::{BareMetalHost, ProvisioningState};
use k8s_openapi::api::core::v1::{Namespace, Secret};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding, RoleRef, Subject};
use kube::Api;
use kube::api::PostParams;

use crate::support::{
    BmoProcess, Stack, apply_shipped_cluster_role, create_fake_host, eventually, free_port,
    rbac_documents, unique_name,
};

/// The user `tests/env/stack` creates without any rights.
const OPERATOR_USER: &str = "bmo-operator";

#[test]
fn leader_election_role_covers_leases() {
    let _shared = crate::support::shared();
    let role: Role = rbac_documents()
        .into_iter()
        .find(|d| d["kind"] == "Role")
        .map(|d| serde_json::from_value(d).expect("a Role"))
        .expect("role.yaml has the leader-election Role");
    let rules = role.rules.expect("rules");
    assert!(rules.iter().any(|r| {
        r.api_groups.as_deref() == Some(&["coordination.k8s.io".to_owned()][..])
            && r.resources.as_deref() == Some(&["leases".to_owned()][..])
    }));
}

#[tokio::test]
async fn deploy_rbac_is_enough_to_provision_a_host() {
    let _shared = crate::support::shared();
    let stack = Stack::get();
    let admin = stack.kube_client().await;
    bmo::api::install::install(&admin, Duration::from_secs(60))
        .await
        .expect("install CRDs as admin");

    // The ClusterRole exactly as shipped, applied by the admin.
    let role_name = apply_shipped_cluster_role(&admin).await;

    // Bound in one namespace only (with WATCH_NAMESPACE), so that the user keeps no
    // rights anywhere else — other tests rely on that.
    let ns = unique_name("rbac");
    let mut namespace = Namespace::default();
    namespace.metadata.name = Some(ns.clone());
    Api::<Namespace>::all(admin.clone())
        .create(&PostParams::default(), &namespace)
        .await
        .expect("create namespace");
    let mut binding = RoleBinding {
        role_ref: RoleRef {
            api_group: Some("rbac.authorization.k8s.io".into()),
            kind: "ClusterRole".into(),
            name: role_name,
        },
        subjects: Some(vec![Subject {
            api_group: Some("rbac.authorization.k8s.io".into()),
            kind: "User".into(),
            name: OPERATOR_USER.into(),
            namespace: None,
        }]),
        ..Default::default()
    };
    binding.metadata.name = Some("bmo-manager".into());
    Api::<RoleBinding>::namespaced(admin.clone(), &ns)
        .create(&PostParams::default(), &binding)
        .await
        .expect("bind the ClusterRole to bmo-operator in the namespace");

    let name = "rbac-worker";
    create_fake_host(&admin, &ns, name).await;
    // Its HostUpdatePolicy, which bmo watches and adds the host to the owners of.
    let policies: Api<HostUpdatePolicy> = Api::namespaced(admin.clone(), &ns);
    let policy: HostUpdatePolicy = serde_json::from_value(serde_json::json!({
        "apiVersion": "metal3.io/v1alpha1", "kind": "HostUpdatePolicy",
        "metadata": {"name": name}, "spec": {"firmwareUpdates": "onReboot"}
    }))
    .expect("a HostUpdatePolicy");
    policies
        .create(&PostParams::default(), &policy)
        .await
        .expect("create the HostUpdatePolicy");
    let hosts: Api<BareMetalHost> = Api::namespaced(admin.clone(), &ns);

    let operator_kubeconfig = stack.operator_kubeconfig.display().to_string();
    let health = format!("127.0.0.1:{}", free_port());
    let bmo = BmoProcess::start(
        &["run"],
        &[
            ("KUBECONFIG", &operator_kubeconfig),
            ("IRONIC_ENDPOINT", stack.ironic_endpoint.as_str()),
            (
                "METAL3_AUTH_ROOT_DIR",
                stack.var("METAL3_AUTH_ROOT_DIR").unwrap_or_default(),
            ),
            ("WATCH_NAMESPACE", &ns),
            ("BMO_HEALTH_ADDR", &health),
            ("RUST_LOG", "info,bmo=debug"),
        ],
    );
    let host = eventually(
        "host to be provisioned by bmo running with deploy/rbac only",
        Duration::from_secs(240),
        || async {
            let h = hosts.get(name).await.map_err(|e| e.to_string())?;
            let log = bmo.log();
            let tail: Vec<&str> = log.lines().rev().take(5).collect();
            match h.provisioning_state() {
                ProvisioningState::Provisioned => Ok(h),
                other => Err(format!("{other}; log tail: {tail:?}")),
            }
        },
    )
    .await;
    // The Secret's label shows that bmo's patch of it went through too.
    let secret = Api::<Secret>::namespaced(admin.clone(), &ns)
        .get(&format!("{name}-bmc"))
        .await
        .expect("get secret");
    assert_eq!(
        secret
            .metadata
            .labels
            .unwrap_or_default()
            .get("environment.metal3.io")
            .map(String::as_str),
        Some("baremetal"),
        "bmo labelled the BMC Secret"
    );
    let host_uid = host.metadata.uid.clone();
    assert!(
        host.status.is_some_and(|s| s.error_message.is_empty()),
        "no error on the host"
    );
    eventually(
        "the HostUpdatePolicy owned by its host",
        Duration::from_secs(30),
        || async {
            let policy = policies.get(name).await.map_err(|e| e.to_string())?;
            let owners: Vec<Option<String>> = policy
                .metadata
                .owner_references
                .unwrap_or_default()
                .into_iter()
                .map(|o| Some(o.uid))
                .collect();
            (owners == [host_uid.clone()])
                .then_some(())
                .ok_or(format!("owners {owners:?}"))
        },
    )
    .await;
    // A refused request shows as "... is forbidden: User \"bmo-operator\" cannot ..."
    // (HTTP 403) in kube's error, which bmo logs for failed reconciles and watches.
    let log = bmo.log();
    assert!(
        !log.to_lowercase().contains("forbidden"),
        "bmo's log shows a refused request:\n{log}"
    );
}
