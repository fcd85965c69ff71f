//! The kube-runtime side of the HostFirmwareSettings and HostFirmwareComponents
//! controllers.
//!
//! It reconciles BareMetalHosts (the firmware objects may not exist yet, and
//! kube-runtime only reconciles objects it has seen), each time both kinds: a host
//! wakes when its generation, its node (`status.provisioning.ID`) or its provisioning
//! state changes, and when the generation of its HostFirmwareSettings or
//! HostFirmwareComponents changes (a new spec), or the owners of the latter (upstream
//! reconciles a pre-made object once its host exists). bmo's own status writes wake
//! nothing.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Arc;

use futures::{FutureExt, StreamExt};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{WatchStreamExt, predicates, watcher};
use kube::{Api, ResourceExt};
use tracing::Instrument;

use super::components::ComponentsStore;
use super::{FirmwareContext, FirmwareError, FirmwareStore, KubeFirmwareStore, PROVISIONER_RETRY};
use crate::api::BareMetalHost;
use crate::api::firmware::{HostFirmwareComponents, HostFirmwareSettings};
use crate::controller::Next;
use crate::provisioner::FirmwareReader;

/// What of a host matters here: its generation, its node and its state, and whether
/// it is paused or detached (upstream leaves such hosts' firmware alone).
fn host_node(host: &BareMetalHost) -> Option<u64> {
    use crate::api::host::{DETACHED_ANNOTATION, PAUSED_ANNOTATION};
    let mut hasher = DefaultHasher::new();
    host.metadata.generation.hash(&mut hasher);
    host.metadata.uid.hash(&mut hasher);
    for key in [PAUSED_ANNOTATION, DETACHED_ANNOTATION] {
        host.annotations().contains_key(key).hash(&mut hasher);
    }
    host.status
        .as_ref()
        .map(|s| s.operational_status.to_string())
        .hash(&mut hasher);
    // Leaving `preparing` means BIOS settings may have been applied: read again.
    host.status
        .as_ref()
        .map(|s| (s.provisioning.id.as_str(), s.provisioning.state))
        .hash(&mut hasher);
    Some(hasher.finish())
}

/// What of a HostFirmwareComponents matters here: its spec and its owners.
fn components_change(object: &HostFirmwareComponents) -> Option<u64> {
    let mut hasher = DefaultHasher::new();
    object.metadata.generation.hash(&mut hasher);
    for owner in object.owner_references() {
        owner.uid.hash(&mut hasher);
    }
    Some(hasher.finish())
}

/// The host of the same name as a firmware object.
fn same_name<K: ResourceExt>(object: &K) -> Option<ObjectRef<BareMetalHost>> {
    Some(ObjectRef::<BareMetalHost>::new(&object.name_any()).within(&object.namespace()?))
}

/// Runs the HostFirmwareSettings controller until `shutdown` resolves.
pub async fn run<P: FirmwareReader + 'static>(
    ctx: Arc<FirmwareContext<P, KubeFirmwareStore>>,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let client = ctx.store.client().clone();
    let (hosts, settings, components): (
        Api<BareMetalHost>,
        Api<HostFirmwareSettings>,
        Api<HostFirmwareComponents>,
    ) = match &ctx.namespace {
        Some(ns) => (
            Api::namespaced(client.clone(), ns),
            Api::namespaced(client.clone(), ns),
            Api::namespaced(client, ns),
        ),
        None => (
            Api::all(client.clone()),
            Api::all(client.clone()),
            Api::all(client),
        ),
    };
    let (reader, writer) = kube::runtime::reflector::store();
    let host_changes = watcher(hosts, watcher::Config::default())
        .default_backoff()
        .reflect(writer)
        .applied_objects()
        .predicate_filter(host_node, Default::default());
    let settings_changes = watcher(settings, watcher::Config::default())
        .default_backoff()
        .applied_objects()
        .predicate_filter(predicates::generation, Default::default())
        .filter_map(|s| async move { same_name(&s.ok()?) });
    let components_changes = watcher(components, watcher::Config::default())
        .default_backoff()
        .applied_objects()
        .predicate_filter(components_change, Default::default())
        .filter_map(|c| async move { same_name(&c.ok()?) });
    let listed = reader.clone();
    let shutdown = shutdown.shared();
    let reconciling = Controller::for_stream(host_changes, reader)
        .reconcile_on(settings_changes)
        .reconcile_on(components_changes)
        .graceful_shutdown_on(shutdown.clone())
        .run(reconcile_host, error_policy, ctx)
        .for_each(|result| async move {
            if let Err(e) = result {
                tracing::debug!(error = %e, "firmware reconcile did not finish");
            }
        });
    crate::controller::run::run_until_shutdown(reconciling, shutdown, &listed, SHUTDOWN_GRACE)
        .await;
}

/// How long firmware reconciles in flight may take to finish after the shutdown signal.
const SHUTDOWN_GRACE: std::time::Duration = std::time::Duration::from_secs(3);

/// Both kinds for one host: the components are reconciled even when the settings
/// could not be (and the other way round); the sooner look-again wins.
async fn reconcile_host<P: FirmwareReader, S: FirmwareStore + ComponentsStore>(
    host: Arc<BareMetalHost>,
    ctx: Arc<FirmwareContext<P, S>>,
) -> Result<Action, FirmwareError> {
    let namespace = host.namespace().unwrap_or_default();
    let name = host.name_any();
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    let span = tracing::info_span!("hostfirmwaresettings", %namespace, %name);
    let settings = super::reconcile(&host, &ctx, now.clone())
        .instrument(span)
        .await;
    let span = tracing::info_span!("hostfirmwarecomponents", %namespace, %name);
    let components = super::components::reconcile(&host, &ctx, now)
        .instrument(span)
        .await;
    Ok(Action::from(sooner(settings?, components?)))
}

/// The sooner of two look-agains.
fn sooner(a: Next, b: Next) -> Next {
    match (a, b) {
        (Next::After(x), Next::After(y)) => Next::After(x.min(y)),
        (Next::After(x), Next::OnChange) | (Next::OnChange, Next::After(x)) => Next::After(x),
        (Next::OnChange, Next::OnChange) => Next::OnChange,
    }
}

fn error_policy<P: FirmwareReader, S: FirmwareStore>(
    host: Arc<BareMetalHost>,
    error: &FirmwareError,
    _ctx: Arc<FirmwareContext<P, S>>,
) -> Action {
    tracing::warn!(host = %host.namespaced_name(), %error, "firmware reconcile failed; retrying");
    Action::requeue(PROVISIONER_RETRY)
}
