//! The reconciler without a cluster: the fixture provisioner and the in-memory store.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::runtime::Predicate;
use serde_json::json;

use super::run::host_change_predicate;
use super::store::{MemoryStore, SECRET_FINALIZER};
use super::*;
use crate::api::host::FINALIZER;
use crate::api::{ErrorType, OperationalStatus, ProvisioningState as State};
use crate::provisioner::{FixtureOperation, FixtureProvisioner};

const NS: &str = "ns";

type TestContext = Context<FixtureProvisioner, MemoryStore>;

mod firmware_map;
mod firmware_updates;
mod servicing;

fn context() -> TestContext {
    context_with_steps(1)
}

/// A context whose provisioner takes `steps` calls to finish each operation.
fn context_with_steps(steps: u32) -> TestContext {
    let settings = ControllerSettings {
        namespace: None,
        concurrency: 1,
        provisioning_limit: 20,
        max_backoff: Duration::from_secs(3600),
        steady_poll: state_machine::STEADY_POLL,
        start_settle: Duration::ZERO,
        deploy_ramdisk: DeployRamdisk::default(),
    };
    Context::with_store(
        MemoryStore::default(),
        FixtureProvisioner::new(steps),
        settings,
    )
}

fn host(name: &str, spec: serde_json::Value) -> BareMetalHost {
    let mut base = json!({
        "online": true,
        "bmc": {"address": format!("fake://{name}"), "credentialsName": format!("{name}-bmc")},
        "bootMACAddress": "52:54:00:00:00:01",
        "image": {"url": "http://images/os.qcow2", "checksum": "abc", "checksumType": "md5"},
    });
    if let (Some(b), Some(extra)) = (base.as_object_mut(), spec.as_object()) {
        for (k, v) in extra {
            b.insert(k.clone(), v.clone());
        }
    }
    serde_json::from_value(json!({
        "apiVersion": "metal3.io/v1alpha1", "kind": "BareMetalHost",
        "metadata": {"name": name, "namespace": NS},
        "spec": base,
    }))
    .expect("valid host")
}

fn bmc_secret(name: &str) -> Secret {
    let mut secret = Secret::default();
    secret.metadata.name = Some(name.to_owned());
    secret.metadata.namespace = Some(NS.to_owned());
    secret.data = Some(BTreeMap::from([
        ("username".to_owned(), ByteString(b"admin".to_vec())),
        ("password".to_owned(), ByteString(b"password".to_vec())),
    ]));
    secret
}

/// A context holding the host `name` and its BMC Secret.
fn site(name: &str, spec: serde_json::Value) -> TestContext {
    let ctx = context();
    ctx.store.put_secret(bmc_secret(&format!("{name}-bmc")));
    ctx.store.put_host(host(name, spec));
    ctx
}

/// The states a new host with an image goes through until it is provisioned.
const TO_PROVISIONED: [State; 7] = [
    State::None,
    State::Registering,
    State::Inspecting,
    State::Preparing,
    State::Available,
    State::Provisioning,
    State::Provisioned,
];

/// A host without BMC details, and no Secret.
fn unmanaged_site(name: &str) -> TestContext {
    let ctx = context();
    let mut h = host(name, json!({}));
    h.spec.bmc = None;
    ctx.store.put_host(h);
    ctx
}

/// The reasons of the Events published so far, oldest first.
fn event_reasons(ctx: &TestContext) -> Vec<String> {
    ctx.store
        .events()
        .into_iter()
        .map(|e| e.event.reason)
        .collect()
}

fn state_of(host: &BareMetalHost) -> State {
    host.provisioning_state()
}

/// One reconcile of the host as stored now.
async fn step(ctx: &TestContext, name: &str) -> Next {
    let host = ctx.store.host(NS, name).expect("the host exists");
    reconcile_host(&host, ctx).await.expect("reconcile")
}

/// Reconciles until `done` holds for the stored host (`None` once it is gone);
/// the states passed through, in order.
async fn drive(
    ctx: &TestContext,
    name: &str,
    done: impl Fn(Option<&BareMetalHost>) -> bool,
) -> Vec<State> {
    let mut states = Vec::new();
    for _ in 0..200 {
        let host = ctx.store.host(NS, name);
        if let Some(h) = &host
            && states.last() != Some(&state_of(h))
        {
            states.push(state_of(h));
        }
        if done(host.as_ref()) {
            return states;
        }
        step(ctx, name).await;
    }
    panic!("{name} did not get there; passed through {states:?}");
}

fn in_state(state: State) -> impl Fn(Option<&BareMetalHost>) -> bool {
    move |h| h.is_some_and(|h| state_of(h) == state)
}

/// Provisioned and powered on, as `spec.online` asks.
fn settled(h: Option<&BareMetalHost>) -> bool {
    h.is_some_and(|h| {
        state_of(h) == State::Provisioned && h.status.as_ref().is_some_and(|s| s.powered_on)
    })
}

#[tokio::test]
async fn a_host_goes_through_every_state_to_provisioned_and_back_to_available() {
    let ctx = site("h", json!({}));
    let states = drive(&ctx, "h", settled).await;
    assert_eq!(states, TO_PROVISIONED);
    let stored = ctx.store.host(NS, "h").expect("host");
    assert!(stored.finalizers().iter().any(|f| f == FINALIZER));
    let status = stored.status.expect("status");
    assert!(status.powered_on);
    assert!(status.hardware.is_some(), "inspection recorded hardware");
    assert!(
        ctx.store.hardware_now(NS, "h").is_some(),
        "and HardwareData"
    );
    let secret = ctx.store.secret_now(NS, "h-bmc").expect("secret");
    assert!(
        secret.owner_references().iter().any(|o| o.name == "h"),
        "the host owns its BMC Secret"
    );
    // Upstream's reasons, in upstream's order, once each.
    let reasons = event_reasons(&ctx);
    let expected = [
        "BMCAccessValidated",
        "Registered",
        "InspectionStarted",
        "InspectionComplete",
        "ProvisioningStarted",
        "ProvisioningComplete",
    ];
    let seen: Vec<&str> = reasons
        .iter()
        .map(String::as_str)
        .filter(|r| expected.contains(r))
        .collect();
    assert_eq!(seen, expected, "all reasons: {reasons:?}");

    // Removing the image deprovisions the host.
    let mut changed = ctx.store.host(NS, "h").expect("host");
    changed.spec.image = None;
    ctx.store.put_host(changed);
    let states = drive(&ctx, "h", in_state(State::Available)).await;
    assert_eq!(
        states,
        [State::Provisioned, State::Deprovisioning, State::Available]
    );
}

#[tokio::test]
async fn a_host_without_bmc_details_is_unmanaged() {
    let ctx = unmanaged_site("u");
    let states = drive(&ctx, "u", in_state(State::Unmanaged)).await;
    assert_eq!(states, [State::None, State::Unmanaged]);
    assert_eq!(step(&ctx, "u").await, Next::After(state_machine::SLOW_POLL));
}

#[tokio::test]
async fn an_externally_provisioned_host_only_has_its_power_managed() {
    let ctx = site("x", json!({"externallyProvisioned": true}));
    let states = drive(&ctx, "x", in_state(State::ExternallyProvisioned)).await;
    assert_eq!(
        states,
        [
            State::None,
            State::Registering,
            State::ExternallyProvisioned
        ]
    );
}

/// Deleting a host in `state` ends with the host gone and the provisioner's record
/// removed.
async fn deletion_from(state: State, spec: serde_json::Value) {
    let ctx = site("d", spec);
    // In `state` and holding bmo's finalizer (a host without it is simply gone).
    drive(&ctx, "d", |h| {
        h.is_some_and(|h| state_of(h) == state && h.finalizers().iter().any(|f| f == FINALIZER))
    })
    .await;
    ctx.store.delete_host(NS, "d");
    let states = drive(&ctx, "d", |h| h.is_none()).await;
    assert!(
        ctx.provisioner.host("ns~d").is_none(),
        "deleted from {state:?} through {states:?}, but the provisioner still has it"
    );
    let reasons = event_reasons(&ctx);
    assert!(
        reasons.contains(&"Deleted".to_owned()),
        "{state:?}: {reasons:?}"
    );
}

#[tokio::test]
async fn deletion_from_every_state_releases_the_host() {
    for state in TO_PROVISIONED {
        deletion_from(state, json!({})).await;
    }
    deletion_from(
        State::ExternallyProvisioned,
        json!({"externallyProvisioned": true}),
    )
    .await;

    // Deprovisioning: stop half-way through removing the image.
    let ctx = site("d", json!({}));
    drive(&ctx, "d", in_state(State::Provisioned)).await;
    let mut changed = ctx.store.host(NS, "d").expect("host");
    changed.spec.image = None;
    ctx.store.put_host(changed);
    drive(&ctx, "d", in_state(State::Deprovisioning)).await;
    ctx.store.delete_host(NS, "d");
    drive(&ctx, "d", |h| h.is_none()).await;
    assert!(ctx.provisioner.host("ns~d").is_none());
}

/// The stored Secret `name`'s finalizers.
fn secret_finalizers(ctx: &TestContext, name: &str) -> Vec<String> {
    ctx.store
        .secret_now(NS, name)
        .map(|s| s.finalizers().to_vec())
        .unwrap_or_default()
}

#[tokio::test]
async fn upstreams_secret_finalizer_goes_when_the_host_no_longer_needs_the_secret() {
    let ctx = context();
    for name in ["h-bmc", "h-bmc-new", "h-net"] {
        let mut secret = bmc_secret(name);
        secret.metadata.finalizers = Some(vec![SECRET_FINALIZER.into(), "other/keep".into()]);
        ctx.store.put_secret(secret);
    }
    ctx.store.put_host(host(
        "h",
        json!({"preprovisioningNetworkDataName": "h-net", "image": null}),
    ));
    drive(&ctx, "h", in_state(State::Available)).await;
    // In use: upstream's finalizer stays, as under upstream.
    assert!(secret_finalizers(&ctx, "h-bmc").contains(&SECRET_FINALIZER.to_owned()));

    // Another Secret: the one last tried is released.
    let mut moved = ctx.store.host(NS, "h").expect("host");
    if let Some(bmc) = moved.spec.bmc.as_mut() {
        bmc.credentials_name = "h-bmc-new".into();
    }
    ctx.store.put_host(moved);
    step(&ctx, "h").await;
    assert_eq!(secret_finalizers(&ctx, "h-bmc"), ["other/keep"]);
    assert!(secret_finalizers(&ctx, "h-bmc-new").contains(&SECRET_FINALIZER.to_owned()));

    // Deleted: the BMC and network data Secrets are released; other finalizers stay.
    ctx.store.delete_host(NS, "h");
    drive(&ctx, "h", |h| h.is_none()).await;
    assert_eq!(secret_finalizers(&ctx, "h-bmc-new"), ["other/keep"]);
    assert_eq!(secret_finalizers(&ctx, "h-net"), ["other/keep"]);
}

#[tokio::test]
async fn the_bmc_secret_is_held_while_its_host_uses_it_and_released_with_the_host() {
    let ctx = context();
    ctx.store.put_secret(bmc_secret("f-bmc"));
    ctx.store.put_host(host("f", json!({"image": null})));
    drive(&ctx, "f", in_state(State::Available)).await;
    // As upstream: a Secret in use cannot be deleted from under its host.
    assert_eq!(secret_finalizers(&ctx, "f-bmc"), [SECRET_FINALIZER]);

    ctx.store.delete_host(NS, "f");
    drive(&ctx, "f", |h| h.is_none()).await;
    assert!(secret_finalizers(&ctx, "f-bmc").is_empty());
}

#[tokio::test]
async fn a_host_deleted_by_clusterctl_move_lets_go_and_leaves_the_node_deployed() {
    let ctx = site("mv", json!({}));
    drive(&ctx, "mv", settled).await;
    let before = ctx.provisioner.host("ns~mv").expect("registered");
    // clusterctl replaces every annotation with its own, then deletes.
    let mut h = ctx.store.host(NS, "mv").expect("host");
    h.metadata.annotations = Some(BTreeMap::from([(
        crate::api::host::DELETE_FOR_MOVE_ANNOTATION.to_owned(),
        String::new(),
    )]));
    ctx.store.put_host(h);
    ctx.store.delete_host(NS, "mv");
    let writes = ctx.store.status_writes();
    assert_eq!(step(&ctx, "mv").await, Next::OnChange);
    assert!(ctx.store.host(NS, "mv").is_none(), "the finalizer stayed");
    assert_eq!(ctx.store.status_writes(), writes, "the status was written");
    assert_eq!(
        ctx.provisioner.host("ns~mv"),
        Some(before),
        "the provisioner's record changed"
    );
    assert_eq!(secret_finalizers(&ctx, "mv-bmc"), Vec::<String>::new());
    assert!(event_reasons(&ctx).contains(&"DeletedForMove".to_owned()));
}

#[tokio::test]
async fn deleting_an_unmanaged_host_needs_no_provisioner() {
    let ctx = unmanaged_site("u");
    drive(&ctx, "u", in_state(State::Unmanaged)).await;
    ctx.store.delete_host(NS, "u");
    let states = drive(&ctx, "u", |h| h.is_none()).await;
    assert_eq!(states.first(), Some(&State::Unmanaged));
}

/// The requeue must fall in `2^count` minutes less up to half, capped at `max`.
fn assert_backoff(next: Next, count: i64, max: Duration) {
    let full = Duration::from_secs(60 * (1 << count)).min(max);
    match next {
        Next::After(d) => assert!(
            d >= full / 2 && d <= full,
            "error {count}: {d:?} outside {:?}..={full:?}",
            full / 2
        ),
        other => panic!("error {count}: {other:?}"),
    }
}

#[tokio::test]
async fn a_failing_host_is_looked_at_once_per_backoff_step() {
    let ctx = site("f", json!({}));
    drive(&ctx, "f", in_state(State::Registering)).await;
    ctx.provisioner
        .fail("ns~f", FixtureOperation::Register, "BMC said no");
    for count in 1..=4 {
        let next = step(&ctx, "f").await;
        let status = ctx
            .store
            .host(NS, "f")
            .and_then(|h| h.status)
            .expect("status");
        assert_eq!(status.error_count, count);
        assert_eq!(status.error_type, Some(ErrorType::Registration));
        assert_eq!(status.operational_status, OperationalStatus::Error);
        assert_backoff(next, count, ctx.settings.max_backoff);
    }
    // BMO_MAX_BACKOFF caps the wait.
    for _ in 0..4 {
        step(&ctx, "f").await;
    }
    assert_backoff(step(&ctx, "f").await, 9, ctx.settings.max_backoff);

    // Fixed: the next look registers it and clears the error.
    ctx.provisioner
        .clear_failure("ns~f", FixtureOperation::Register);
    drive(&ctx, "f", in_state(State::Inspecting)).await;
    let status = ctx
        .store
        .host(NS, "f")
        .and_then(|h| h.status)
        .expect("status");
    assert_eq!(status.error_count, 0);
}

#[tokio::test]
async fn a_host_applied_before_its_secret_backs_off_then_registers() {
    let ctx = context();
    ctx.store.put_host(host("s", json!({})));
    drive(&ctx, "s", in_state(State::Registering)).await;
    for count in 1..=3 {
        assert_backoff(step(&ctx, "s").await, count, ctx.settings.max_backoff);
    }
    let status = ctx
        .store
        .host(NS, "s")
        .and_then(|h| h.status)
        .expect("status");
    assert!(
        status.error_message.contains("not found"),
        "{}",
        status.error_message
    );
    ctx.store.put_secret(bmc_secret("s-bmc"));
    drive(&ctx, "s", in_state(State::Inspecting)).await;
}

#[tokio::test]
async fn a_settled_host_writes_no_status() {
    let ctx = site("q", json!({}));
    drive(&ctx, "q", settled).await;
    let writes = ctx.store.status_writes();
    for _ in 0..5 {
        assert_eq!(
            step(&ctx, "q").await,
            Next::After(state_machine::STEADY_POLL)
        );
    }
    assert_eq!(
        ctx.store.status_writes(),
        writes,
        "nothing changed, nothing written"
    );
}

#[tokio::test]
async fn a_settled_host_drops_the_unreachable_condition_once_the_provisioner_answers() {
    let ctx = site("u", json!({}));
    drive(&ctx, "u", settled).await;
    let mut h = ctx.store.host(NS, "u").expect("host");
    let status = h.status.as_mut().expect("status");
    let now =
        k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(k8s_openapi::jiff::Timestamp::now());
    status.conditions = conditions::set_unreachable(
        &status.conditions,
        "cannot reach Ironic at http://ironic:6385/v1/",
        None,
        &now,
    );
    ctx.store.put_host(h);
    let writes = ctx.store.status_writes();

    assert_eq!(
        step(&ctx, "u").await,
        Next::After(state_machine::STEADY_POLL)
    );
    let h = ctx.store.host(NS, "u").expect("host");
    let status = h.status.expect("status");
    assert!(conditions::unreachable(&status).is_none());
    assert_eq!(status.error_count, 0);
    assert_eq!(status.provisioning.state, State::Provisioned);
    assert_eq!(ctx.store.status_writes(), writes + 1);
    // Then nothing more to write.
    step(&ctx, "u").await;
    assert_eq!(ctx.store.status_writes(), writes + 1);
}

#[test]
fn only_spec_annotation_and_finalizer_changes_wake_a_host() {
    let wakes = |h: &BareMetalHost| host_change_predicate().hash_property(h);
    let mut h = host("w", json!({}));
    h.metadata.generation = Some(1);
    let before = wakes(&h);

    let mut status_only = h.clone();
    status_only.status = Some(crate::api::BareMetalHostStatus {
        error_count: 7,
        ..Default::default()
    });
    status_only.metadata.resource_version = Some("99".into());
    assert_eq!(wakes(&status_only), before, "bmo's own status write");

    let mut spec = h.clone();
    spec.metadata.generation = Some(2);
    assert_ne!(wakes(&spec), before, "a spec change");

    let mut annotated = h.clone();
    annotated
        .annotations_mut()
        .insert("reboot.metal3.io".into(), String::new());
    assert_ne!(wakes(&annotated), before, "an annotation");

    let mut finalized = h.clone();
    finalized.finalizers_mut().push(FINALIZER.into());
    assert_ne!(wakes(&finalized), before, "a finalizer");
}

#[tokio::test]
async fn a_lost_finalizer_race_keeps_the_other_writer_and_retries() {
    let ctx = site("c", json!({}));
    let read = ctx.store.host(NS, "c").expect("host");
    // Another controller adds its finalizer between bmo's read and its write.
    ctx.store
        .add_foreign_finalizer("example.com/other", NS, "c");
    let result = reconcile_host(&read, &ctx).await;
    assert!(
        matches!(
            result,
            Err(ReconcileError::Store {
                source: StoreError::Conflict,
                ..
            })
        ),
        "{result:?}"
    );
    let stored = ctx.store.host(NS, "c").expect("host");
    assert_eq!(stored.finalizers(), ["example.com/other"]);

    // The retry reads the host again and keeps both.
    step(&ctx, "c").await;
    let stored = ctx.store.host(NS, "c").expect("host");
    assert_eq!(stored.finalizers(), ["example.com/other", FINALIZER]);
}

#[tokio::test]
async fn a_paused_host_is_left_alone() {
    let ctx = site("p", json!({}));
    let mut h = ctx.store.host(NS, "p").expect("host");
    h.annotations_mut()
        .insert(crate::api::host::PAUSED_ANNOTATION.into(), String::new());
    ctx.store.put_host(h);
    assert_eq!(step(&ctx, "p").await, Next::OnChange);
    assert_eq!(ctx.store.status_writes(), 0);
    assert!(
        ctx.store
            .host(NS, "p")
            .expect("host")
            .finalizers()
            .is_empty()
    );
}

#[tokio::test]
async fn a_bad_bmc_address_is_one_registration_error_until_the_spec_changes() {
    let ctx = site("b", json!({}));
    drive(&ctx, "b", in_state(State::Registering)).await;
    let mut h = ctx.store.host(NS, "b").expect("host");
    if let Some(bmc) = h.spec.bmc.as_mut() {
        bmc.address = "nonsense://b".into();
    }
    ctx.store.put_host(h);
    assert_eq!(step(&ctx, "b").await, Next::OnChange);
    let status = ctx
        .store
        .host(NS, "b")
        .and_then(|h| h.status)
        .expect("status");
    assert_eq!(status.error_type, Some(ErrorType::Registration));
    assert!(status.error_message.contains("spec.bmc.address"));
}

fn address(ip: &str) -> crate::netboot::address::Choice {
    crate::netboot::address::Choice {
        ip: ip.parse().expect("IP"),
        interface: Some("prov0".into()),
        prefix_len: Some(24),
        reason: "test".into(),
    }
}

#[tokio::test]
async fn the_deploy_ramdisk_follows_the_provisioning_ip_at_the_next_reconcile() {
    let (moved, address_rx) = tokio::sync::watch::channel(address("10.0.0.1"));
    let mut ctx = site("m", json!({}));
    ctx.deploy_images = Some(crate::netboot::DeployImages::new(address_rx, 6180));
    drive(&ctx, "m", settled).await;
    let ramdisk = |ctx: &TestContext| {
        let record = ctx.provisioner.host("ns~m").expect("registered");
        (
            record.deploy_ramdisk.kernel_url,
            record.deploy_ramdisk.ramdisk_url,
        )
    };
    assert_eq!(
        ramdisk(&ctx),
        (
            Some("http://10.0.0.1:6180/images/ironic-python-agent.kernel".into()),
            Some("http://10.0.0.1:6180/images/ironic-python-agent.initramfs".into())
        )
    );
    moved.send(address("10.0.0.2")).expect("receiver alive");
    step(&ctx, "m").await;
    assert_eq!(
        ramdisk(&ctx),
        (
            Some("http://10.0.0.2:6180/images/ironic-python-agent.kernel".into()),
            Some("http://10.0.0.2:6180/images/ironic-python-agent.initramfs".into())
        )
    );
}

#[tokio::test]
async fn deploy_image_urls_set_in_the_settings_win_over_bmo_s_own() {
    let (_moved, address_rx) = tokio::sync::watch::channel(address("10.0.0.1"));
    let mut ctx = site("s", json!({}));
    ctx.settings.deploy_ramdisk.kernel_url = Some("http://images/k".into());
    ctx.deploy_images = Some(crate::netboot::DeployImages::new(address_rx, 6180));
    drive(&ctx, "s", in_state(State::Inspecting)).await;
    let record = ctx.provisioner.host("ns~s").expect("registered");
    assert_eq!(
        record.deploy_ramdisk.kernel_url.as_deref(),
        Some("http://images/k")
    );
    assert_eq!(
        record.deploy_ramdisk.ramdisk_url.as_deref(),
        Some("http://10.0.0.1:6180/images/ironic-python-agent.initramfs")
    );
}

#[test]
fn a_dhcp_client_wakes_the_hosts_that_boot_from_or_have_its_mac() {
    let booting = host("a", json!({"bootMACAddress": "52:54:00:AA:00:01"}));
    let mut inspected = host("b", json!({"bootMACAddress": "52:54:00:aa:00:02"}));
    let mut status = crate::api::BareMetalHostStatus::default();
    let mut details = crate::api::HardwareDetails::default();
    details.nics.push(crate::api::Nic {
        mac: Some("52:54:00:aa:00:01".into()),
        ..Default::default()
    });
    status.hardware = Some(details);
    inspected.status = Some(status);
    let other = host("c", json!({"bootMACAddress": "52:54:00:aa:00:03"}));
    let hosts: Vec<_> = [booting, inspected, other]
        .into_iter()
        .map(std::sync::Arc::new)
        .collect();
    let mac = "52:54:00:aa:00:01".parse().expect("MAC");
    let woken: Vec<String> = super::run::hosts_with_mac(&hosts, &mac)
        .into_iter()
        .map(|r| r.name)
        .collect();
    assert_eq!(woken, ["a", "b"]);
}

#[tokio::test]
async fn credentials_changed_while_the_provisioner_is_busy_are_sent_once_it_rests() {
    let ctx = site("busy", json!({"image": null}));
    drive(&ctx, "busy", in_state(State::Available)).await;
    // The Secret versions in status.triedCredentials and status.goodCredentials.
    let versions = |ctx: &TestContext| {
        let status = ctx.store.host(NS, "busy").and_then(|h| h.status);
        let version = |c: Option<&crate::api::CredentialsStatus>| {
            c.and_then(|c| c.credentials_version.clone())
        };
        (
            version(status.as_ref().and_then(|s| s.tried_credentials.as_ref())),
            version(status.as_ref().and_then(|s| s.good_credentials.as_ref())),
        )
    };
    let tried = |ctx: &TestContext| versions(ctx).0;
    let before = tried(&ctx);
    assert!(before.is_some(), "the first credentials were tried");
    // The password is fixed while the node is in a transient state (e.g. verifying).
    ctx.provisioner.set_busy("ns~busy", true);
    let mut fixed = bmc_secret("busy-bmc");
    fixed
        .data
        .get_or_insert_with(Default::default)
        .insert("password".into(), ByteString(b"fixed".to_vec()));
    ctx.store.put_secret(fixed);
    let updates = |ctx: &TestContext| {
        ctx.provisioner
            .host("ns~busy")
            .map_or(0, |h| h.credential_updates)
    };
    let sent_before = updates(&ctx);
    step(&ctx, "busy").await;
    step(&ctx, "busy").await;
    assert_eq!(
        tried(&ctx),
        before,
        "credentials not sent are not recorded as tried"
    );
    assert_eq!(updates(&ctx), sent_before);
    // Once the node rests, the next registration sends them.
    ctx.provisioner.set_busy("ns~busy", false);
    step(&ctx, "busy").await;
    assert_eq!(
        updates(&ctx),
        sent_before + 1,
        "the new credentials were sent"
    );
    let (tried_now, good_now) = versions(&ctx);
    assert!(
        tried_now.is_some() && tried_now != before,
        "{tried_now:?} recorded as tried"
    );
    assert_eq!(good_now, tried_now, "and, as the BMC took them, as good");
}

#[tokio::test]
async fn the_running_clean_step_is_in_the_status_until_the_host_is_prepared() {
    let ctx = context_with_steps(3);
    ctx.store.put_secret(bmc_secret("h-bmc"));
    ctx.store.put_host(host(
        "h",
        json!({"raid": {"hardwareRAIDVolumes": [{"level": "1", "sizeGibibytes": 10}]}}),
    ));
    let step_of = |h: &BareMetalHost| {
        h.status
            .as_ref()
            .and_then(|s| s.provisioning.current_step.clone())
    };
    drive(&ctx, "h", |h| h.is_some_and(|h| step_of(h).is_some())).await;
    let host = ctx.store.host(NS, "h").expect("host");
    assert_eq!(state_of(&host), State::Preparing);
    assert_eq!(
        step_of(&host),
        Some(crate::api::CurrentStep {
            kind: crate::api::StepKind::Clean,
            name: "raid.create_configuration".into(),
        })
    );
    let conditions = host.status.expect("status").conditions;
    assert!(
        conditions
            .iter()
            .any(|c| c.message.contains("raid.create_configuration")),
        "{conditions:?}"
    );
    drive(&ctx, "h", in_state(State::Available)).await;
    let host = ctx.store.host(NS, "h").expect("host");
    assert_eq!(
        step_of(&host),
        None,
        "no step runs once the host is prepared"
    );
}

#[tokio::test]
async fn with_preprovisioning_images_a_host_inspects_only_once_its_image_is_ready() {
    use crate::controller::preprov_image::build;
    let mut ctx = site("p", json!({"preprovisioningNetworkDataName": "p-net"}));
    ctx.preprovisioning_images = true;
    let mut network = Secret::default();
    network.metadata.name = Some("p-net".into());
    network.metadata.namespace = Some(NS.into());
    ctx.store.put_secret(network);
    drive(&ctx, "p", in_state(State::Inspecting)).await;
    for _ in 0..3 {
        assert_eq!(step(&ctx, "p").await, Next::After(Duration::from_secs(2)));
    }
    assert_eq!(
        state_of(&ctx.store.host(NS, "p").expect("host")),
        State::Inspecting
    );
    let mut image = ctx
        .store
        .preprovisioning_image_now(NS, "p")
        .expect("the host wrote its image");
    assert_eq!(image.metadata.generation, Some(1), "written once");

    // The builder makes it ready; the next reconcile registers its URLs and inspects.
    let version = ctx
        .store
        .secret_now(NS, "p-net")
        .and_then(|s| s.metadata.resource_version)
        .expect("version");
    let server = build::Server {
        base_ramdisk: true,
        base_ramdisk_path: "/images/ironic-python-agent.initramfs".into(),
        kernel_url: "http://10.0.0.9:6180/images/ironic-python-agent.kernel".into(),
        ramdisk_url: format!(
            "http://10.0.0.9:6180/preprovisioning/ns/p/{version}/ironic-python-agent.initramfs"
        ),
    };
    let network = build::NetworkData::Found {
        name: "p-net".into(),
        version,
        data: None,
    };
    let now =
        k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(k8s_openapi::jiff::Timestamp::now());
    let decision = build::decide(
        &image,
        &network,
        &server,
        crate::api::images::controller_architecture(),
        &now,
    );
    image.status = Some(decision.status);
    ctx.store.put_preprovisioning_image(image);
    step(&ctx, "p").await;
    let record = ctx.provisioner.host("ns~p").expect("registered");
    assert_eq!(record.deploy_ramdisk.ramdisk_url, Some(server.ramdisk_url));
    assert_eq!(record.deploy_ramdisk.kernel_url, Some(server.kernel_url));
    drive(&ctx, "p", in_state(State::Available)).await;
}
