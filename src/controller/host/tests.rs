//! The reconciler without a cluster: the fixture provisioner and the in-memory store.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use kube::runtime::Predicate;
use serde_json::json;

use super::run::host_change_predicate;
use super::store::{MemoryStore, SECRET_FINALIZER};
use super::*;
use crate::api::host::FINALIZER;
use crate::api::{BareMetalHost, ErrorType, OperationalStatus, ProvisioningState as State};
use crate::provisioner::{DeployRamdisk, FixtureOperation, FixtureProvisioner};

const NS: &str = "ns";

type TestContext = Context<FixtureProvisioner, MemoryStore>;

mod deletion;
mod deploy_ramdisk;
mod errors;
mod external_inspection;
mod firmware_map;
mod firmware_updates;
mod lifecycle;
mod network_data;
mod servicing;
mod settled;
mod wakes;

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

/// A network data Secret holding `data` under `networkData`.
fn network_data_secret(name: &str, data: &str) -> Secret {
    let mut secret = Secret::default();
    secret.metadata.name = Some(name.to_owned());
    secret.metadata.namespace = Some(NS.to_owned());
    secret.data = Some(BTreeMap::from([(
        "networkData".to_owned(),
        ByteString(data.as_bytes().to_vec()),
    )]));
    secret
}

/// A context holding the host `name` and its BMC Secret.
fn site(name: &str, spec: serde_json::Value) -> TestContext {
    let ctx = context();
    ctx.store.put(bmc_secret(&format!("{name}-bmc")));
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

/// The state of the host `name` as stored now.
fn stored_state(ctx: &TestContext, name: &str) -> State {
    state_of(&ctx.store.host(NS, name).expect("the host exists"))
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

/// The conditions of a firmware object the firmware controller judged valid at
/// `generation`, with `ChangeDetected` as `change_detected` and both for `reason`.
fn judged(change_detected: &str, reason: &str, generation: i64) -> serde_json::Value {
    json!([
        {"type": "ChangeDetected", "status": change_detected, "reason": reason, "message": "",
         "observedGeneration": generation, "lastTransitionTime": "2026-01-01T00:00:00Z"},
        {"type": "Valid", "status": "True", "reason": reason, "message": "",
         "observedGeneration": generation, "lastTransitionTime": "2026-01-01T00:00:00Z"}
    ])
}
