//! The kube-runtime side of the HostFirmwareSettings controller.
//!
//! It reconciles BareMetalHosts (a HostFirmwareSettings may not exist yet, and
//! kube-runtime only reconciles objects it has seen): a host wakes when its
//! generation, its node (`status.provisioning.ID`) or its provisioning state changes, and when the
//! generation of its HostFirmwareSettings changes (a new `spec.settings`). bmo's own
//! status writes wake nothing.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Arc;

use futures::{FutureExt, StreamExt};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{WatchStreamExt, predicates, watcher};
use kube::{Api, ResourceExt};
use tracing::Instrument;

use super::{FirmwareContext, FirmwareError, FirmwareStore, KubeFirmwareStore, PROVISIONER_RETRY};
use crate::api::BareMetalHost;
use crate::api::firmware::HostFirmwareSettings;
use crate::provisioner::FirmwareReader;

/// What of a host matters here: its generation, its node and its state.
fn host_node(host: &BareMetalHost) -> Option<u64> {
    let mut hasher = DefaultHasher::new();
    host.metadata.generation.hash(&mut hasher);
    host.metadata.uid.hash(&mut hasher);
    // Leaving `preparing` means BIOS settings may have been applied: read again.
    host.status
        .as_ref()
        .map(|s| (s.provisioning.id.as_str(), s.provisioning.state))
        .hash(&mut hasher);
    Some(hasher.finish())
}

/// Runs the HostFirmwareSettings controller until `shutdown` resolves.
pub async fn run<P: FirmwareReader + 'static>(
    ctx: Arc<FirmwareContext<P, KubeFirmwareStore>>,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let client = ctx.store.client().clone();
    let (hosts, settings): (Api<BareMetalHost>, Api<HostFirmwareSettings>) = match &ctx.namespace {
        Some(ns) => (
            Api::namespaced(client.clone(), ns),
            Api::namespaced(client.clone(), ns),
        ),
        None => (Api::all(client.clone()), Api::all(client)),
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
        .filter_map(|s| async move {
            let s = s.ok()?;
            Some(ObjectRef::<BareMetalHost>::new(&s.name_any()).within(&s.namespace()?))
        });
    let listed = reader.clone();
    let shutdown = shutdown.shared();
    let reconciling = Controller::for_stream(host_changes, reader)
        .reconcile_on(settings_changes)
        .graceful_shutdown_on(shutdown.clone())
        .run(reconcile_host, error_policy, ctx)
        .for_each(|result| async move {
            if let Err(e) = result {
                tracing::debug!(error = %e, "firmware settings reconcile did not finish");
            }
        });
    // As the host controller: before the first list of hosts succeeded nothing is in
    // flight and the controller would wait for that list forever, so it stops at
    // once; afterwards reconciles in flight get a short grace.
    let grace = async {
        shutdown.await;
        if listed.wait_until_ready().now_or_never().is_none() {
            return;
        }
        tokio::time::sleep(SHUTDOWN_GRACE).await;
    };
    tokio::select! {
        () = reconciling => {}
        () = grace => {}
    }
}

/// How long firmware reconciles in flight may take to finish after the shutdown signal.
const SHUTDOWN_GRACE: std::time::Duration = std::time::Duration::from_secs(3);

async fn reconcile_host<P: FirmwareReader, S: FirmwareStore>(
    host: Arc<BareMetalHost>,
    ctx: Arc<FirmwareContext<P, S>>,
) -> Result<Action, FirmwareError> {
    let span = tracing::info_span!(
        "hostfirmwaresettings",
        namespace = %host.namespace().unwrap_or_default(),
        name = %host.name_any()
    );
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    super::reconcile(&host, &ctx, now)
        .instrument(span)
        .await
        .map(Action::from)
}

fn error_policy<P: FirmwareReader, S: FirmwareStore>(
    host: Arc<BareMetalHost>,
    error: &FirmwareError,
    _ctx: Arc<FirmwareContext<P, S>>,
) -> Action {
    tracing::warn!(host = %host.namespaced_name(), %error, "firmware settings reconcile failed; retrying");
    Action::requeue(PROVISIONER_RETRY)
}
