//! Reconciler tests: the claim controller on the in-memory store.

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::json;

use super::*;
use crate::api::{HostDeployPolicy, ProvisioningState};
use crate::controller::runtime::store::MemoryObjects;

/// Namespace `name` with `labels`.
fn namespace(name: &str, labels: BTreeMap<String, String>) -> Namespace {
    let mut namespace = Namespace::default();
    namespace.metadata.name = Some(name.into());
    namespace.metadata.labels = Some(labels);
    namespace
}

fn store_with(policy_names: serde_json::Value) -> MemoryObjects {
    let store = MemoryObjects::default();
    store.put(namespace(
        "tenant",
        [("team".to_owned(), "a".to_owned())].into(),
    ));
    let policy: HostDeployPolicy = serde_json::from_value(json!({
        "apiVersion": "metal3.io/v1alpha1", "kind": "HostDeployPolicy",
        "metadata": {"name": "policy", "namespace": "infra"},
        "spec": {"hostClaimNamespaces": policy_names},
    }))
    .expect("policy");
    store.put(policy);
    let mut host: BareMetalHost = serde_json::from_value(json!({
        "apiVersion": "metal3.io/v1alpha1", "kind": "BareMetalHost",
        "metadata": {"name": "bm-0", "namespace": "infra", "labels": {"size": "large"}},
        "spec": {"online": false},
    }))
    .expect("host");
    let mut status = crate::api::BareMetalHostStatus::default();
    status.provisioning.state = ProvisioningState::Available;
    host.status = Some(status);
    store.put(host);
    store.put(user_data("tenant", "ud", "#cloud-config\n"));
    store
}

fn user_data(ns: &str, name: &str, value: &str) -> Secret {
    let mut secret = Secret {
        data: Some([("userData".to_owned(), ByteString(value.as_bytes().to_vec()))].into()),
        ..Secret::default()
    };
    secret.metadata.name = Some(name.into());
    secret.metadata.namespace = Some(ns.into());
    secret
}

fn put_claim(store: &MemoryObjects, spec: serde_json::Value) {
    store.put::<HostClaim>(
        serde_json::from_value(json!({
            "apiVersion": "metal3.io/v1alpha1", "kind": "HostClaim",
            "metadata": {"name": "web", "namespace": "tenant", "uid": "u1", "generation": 1},
            "spec": spec,
        }))
        .expect("claim"),
    );
}

fn ctx(store: MemoryObjects) -> ClaimContext<MemoryObjects> {
    ClaimContext {
        store,
        namespace: None,
    }
}

/// Reconciles the stored claim once.
async fn step(ctx: &ClaimContext<MemoryObjects>) -> Action {
    let claim = claim_now(&ctx.store, "web").expect("claim stored");
    reconcile_claim(&claim, ctx).await.expect("reconcile")
}

/// The claim `name` in namespace `tenant`, as stored now.
fn claim_now(store: &MemoryObjects, name: &str) -> Option<HostClaim> {
    store.stored("tenant", name)
}

/// The copy of the claim's user data in the host's namespace, as stored now.
fn copy_now(store: &MemoryObjects) -> Option<Secret> {
    store.stored("infra", "bm-0-userdata")
}

/// Asserts that the stored claim's condition `type_` has `(status, reason)`.
fn assert_condition(ctx: &ClaimContext<MemoryObjects>, type_: &str, expected: (&str, &str)) {
    let (status, reason) = condition(ctx, type_);
    assert_eq!((status.as_str(), reason.as_str()), expected, "{type_}");
}

fn condition(ctx: &ClaimContext<MemoryObjects>, type_: &str) -> (String, String) {
    let claim = claim_now(&ctx.store, "web").expect("claim");
    let status = claim.status.unwrap_or_default();
    let c = status
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .unwrap_or_else(|| panic!("no {type_} in {:?}", status.conditions));
    (c.status.clone(), c.reason.clone())
}

fn host(ctx: &ClaimContext<MemoryObjects>) -> BareMetalHost {
    ctx.store
        .stored::<BareMetalHost>("infra", "bm-0")
        .expect("host")
}

fn set_host_state(ctx: &ClaimContext<MemoryObjects>, state: ProvisioningState, powered_on: bool) {
    let mut h = host(ctx);
    if let Some(s) = h.status.as_mut() {
        s.provisioning.state = state;
        s.powered_on = powered_on;
    }
    ctx.store.put(h);
}

fn spec() -> serde_json::Value {
    json!({"poweredOn": true, "userData": {"name": "ud"},
           "hostSelector": {"matchLabels": {"size": "large"}},
           "image": {"url": "http://images/os.qcow2", "checksum": "abc", "checksumType": "sha256"}})
}

#[tokio::test]
async fn a_claim_binds_drives_mirrors_and_on_deletion_deprovisions_and_releases() {
    let ctx = ctx(store_with(
        json!({"hasLabels": [{"name": "team", "value": "a"}]}),
    ));
    put_claim(&ctx.store, spec());
    binds_and_drives_the_host(&ctx).await;
    mirrors_the_provisioned_host(&ctx).await;
    on_deletion_deprovisions_and_releases(&ctx).await;
}

/// The first passes: the finalizer, then the host bound, given the claim's image,
/// power and user data (a copy), and the conditions saying so.
async fn binds_and_drives_the_host(ctx: &ClaimContext<MemoryObjects>) {
    step(ctx).await;
    let claim = claim_now(&ctx.store, "web").expect("claim");
    assert_eq!(claim.finalizers(), [HOST_CLAIM_FINALIZER]);

    step(ctx).await;
    let h = host(ctx);
    assert!(
        state_machine::bound_to(&h, &claim),
        "consumerRef names the claim"
    );
    assert!(h.spec.online);
    assert_eq!(
        h.spec.image.as_ref().map(|i| i.url.as_str()),
        Some("http://images/os.qcow2")
    );
    assert_eq!(
        h.spec.user_data.as_ref().and_then(|r| r.name.as_deref()),
        Some("bm-0-userdata")
    );
    let copy = copy_now(&ctx.store).expect("user data copied");
    assert_eq!(copy.data, user_data("tenant", "ud", "#cloud-config\n").data);
    assert_condition(ctx, "Associated", ("True", "BareMetalHostAssociated"));
    assert_condition(ctx, "Synchronized", ("True", "ConfigurationSynced"));
    assert_condition(ctx, "Provisioned", ("False", "available"));
    assert_eq!(condition(ctx, "Ready").0, "False");
}

/// The host provisioned and powered on: the claim's status follows it, and a second
/// pass changes nothing on the host.
async fn mirrors_the_provisioned_host(ctx: &ClaimContext<MemoryObjects>) {
    set_host_state(ctx, ProvisioningState::Provisioned, true);
    step(ctx).await;
    let status = claim_now(&ctx.store, "web")
        .and_then(|c| c.status)
        .expect("status");
    assert!(status.powered_on);
    assert_eq!(status.hardware_data.map(|r| r.name), Some("bm-0".into()));
    assert_condition(ctx, "Provisioned", ("True", "provisioned"));
    assert_condition(ctx, "Ready", ("True", "InfoReported"));
    // Settled: a second pass changes nothing on the host.
    let version = host(ctx).metadata.resource_version;
    step(ctx).await;
    assert_eq!(host(ctx).metadata.resource_version, version);
}

/// The claim deleted: the host is deprovisioned, still bound until it is available
/// again, then released, the user data copy removed and the finalizer with it.
async fn on_deletion_deprovisions_and_releases(ctx: &ClaimContext<MemoryObjects>) {
    let mut deleted = claim_now(&ctx.store, "web").expect("claim");
    deleted.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::now()));
    ctx.store.put(deleted);
    step(ctx).await;
    let h = host(ctx);
    assert!(h.spec.image.is_none() && !h.spec.online && h.spec.user_data.is_none());
    assert!(
        h.spec.consumer_ref.is_some(),
        "still bound while it deprovisions"
    );
    assert_condition(ctx, "Associated", ("False", "HostClaimDeleting"));
    step(ctx).await;
    assert!(claim_now(&ctx.store, "web").is_some(), "waits for the host");
    set_host_state(ctx, ProvisioningState::Deprovisioning, false);
    step(ctx).await;
    assert!(claim_now(&ctx.store, "web").is_some(), "waits for the host");
    set_host_state(ctx, ProvisioningState::Available, false);
    step(ctx).await;
    assert!(host(ctx).spec.consumer_ref.is_none(), "host released");
    assert!(copy_now(&ctx.store).is_none(), "copy removed");
    assert!(
        claim_now(&ctx.store, "web").is_none(),
        "finalizer removed, claim gone"
    );
}

#[tokio::test]
async fn without_an_admitting_policy_no_host_is_bound() {
    let ctx = ctx(store_with(json!({"names": ["someone-else"]})));
    put_claim(&ctx.store, spec());
    step(&ctx).await;
    let action = step(&ctx).await;
    assert_eq!(action, Action::requeue(RETRY_DELAY));
    assert_condition(&ctx, "Associated", ("False", "NoBareMetalHost"));
    assert!(host(&ctx).spec.consumer_ref.is_none());
}

#[tokio::test]
async fn a_second_claim_finds_no_free_host() {
    let ctx = ctx(store_with(json!({})));
    put_claim(&ctx.store, spec());
    step(&ctx).await;
    step(&ctx).await;
    let mut other = claim_now(&ctx.store, "web").expect("claim");
    other.metadata.name = Some("db".into());
    other.metadata.uid = Some("u2".into());
    other.status = None;
    ctx.store.put(other.clone());
    reconcile_claim(&other, &ctx).await.expect("reconcile");
    let other = claim_now(&ctx.store, "db").expect("claim");
    let associated = other.status.unwrap_or_default().conditions;
    assert!(
        associated
            .iter()
            .any(|c| c.type_ == "Associated" && c.reason == "NoBareMetalHost")
    );
    assert_eq!(
        host(&ctx).spec.consumer_ref.and_then(|r| r.name),
        Some("web".into())
    );
}

#[tokio::test]
async fn a_missing_secret_leaves_the_host_alone_and_says_which() {
    let ctx = ctx(store_with(json!({})));
    put_claim(
        &ctx.store,
        json!({"poweredOn": true, "networkData": {"name": "absent"}}),
    );
    step(&ctx).await;
    let action = step(&ctx).await;
    assert_eq!(action, Action::requeue(RETRY_DELAY));
    assert_condition(
        &ctx,
        "Synchronized",
        ("False", "NetworkDataSecretSyncFailure"),
    );
    assert!(!host(&ctx).spec.online, "host not driven");
}

#[tokio::test]
async fn a_secret_that_is_not_the_claims_copy_is_never_overwritten() {
    let ctx = ctx(store_with(json!({})));
    ctx.store
        .put(user_data("infra", "bm-0-userdata", "admin's"));
    put_claim(&ctx.store, spec());
    step(&ctx).await;
    step(&ctx).await;
    assert_condition(&ctx, "Synchronized", ("False", "UserDataSecretSyncFailure"));
    let kept = copy_now(&ctx.store).expect("secret");
    assert_eq!(kept.data, user_data("infra", "x", "admin's").data);
}

#[tokio::test]
async fn a_lost_race_for_the_host_is_a_conflict() {
    let ctx = ctx(store_with(json!({})));
    let stale = host(&ctx);
    ctx.store.put(stale.clone());
    let claim: HostClaim = serde_json::from_value(json!({
        "apiVersion": "metal3.io/v1alpha1", "kind": "HostClaim",
        "metadata": {"name": "web", "namespace": "tenant"}, "spec": {"poweredOn": true}}))
    .expect("claim");
    let result = ctx
        .store
        .set_consumer(&stale, Some(state_machine::consumer_ref(&claim)))
        .await;
    assert!(matches!(result, Err(StoreError::Conflict)));
}

#[tokio::test]
async fn a_bmo_confined_to_a_namespace_binds_only_hosts_there_and_leaves_other_claims_alone() {
    let mut elsewhere = ctx(store_with(json!({})));
    elsewhere.namespace = Some("other-hosts".into());
    put_claim(&elsewhere.store, spec());
    step(&elsewhere).await;
    step(&elsewhere).await;
    assert_eq!(condition(&elsewhere, "Associated").1, "NoBareMetalHost");
    assert!(host(&elsewhere).spec.consumer_ref.is_none());

    // Bound by a bmo of the host's namespace: the confined one does not touch it.
    let mut here = ctx(elsewhere.store);
    here.namespace = Some("infra".into());
    step(&here).await;
    assert_eq!(condition(&here, "Associated").1, "BareMetalHostAssociated");
    let mut elsewhere = here;
    elsewhere.namespace = Some("other-hosts".into());
    let before = claim_now(&elsewhere.store, "web");
    let mut deleted = before.clone().expect("claim");
    deleted.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::now()));
    elsewhere.store.put(deleted);
    step(&elsewhere).await;
    assert!(
        host(&elsewhere).spec.image.is_some(),
        "not deprovisioned by the other bmo"
    );
}

#[test]
fn a_claim_is_woken_by_the_secrets_of_its_own_namespace_it_names() {
    let store = store_with(json!({}));
    put_claim(
        &store,
        json!({"poweredOn": true, "userData": {"name": "ud"}, "metaData": {"name": "md"}}),
    );
    let claim = claim_now(&store, "web").expect("claim");
    assert!(run::refers_to(&claim, "tenant", "ud"));
    assert!(run::refers_to(&claim, "tenant", "md"));
    assert!(!run::refers_to(&claim, "tenant", "other"));
    assert!(
        !run::refers_to(&claim, "infra", "ud"),
        "another namespace's Secret"
    );
}
