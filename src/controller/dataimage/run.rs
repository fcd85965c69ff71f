//! The kube-runtime side of the DataImage controller.
//!
//! A DataImage wakes when its generation changes (created, spec changed, deletion
//! asked for: bmo's own status writes wake nothing) or its finalizers or owners do,
//! and when the BareMetalHost of the same name appears, is paused or detached (or
//! no longer), or gets its node.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Arc;

use futures::{FutureExt, StreamExt};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, ResourceExt};
use tracing::Instrument;

use super::{DataImageContext, DataImageError, DataImageStore, KubeDataImageStore};
use crate::api::host::{DETACHED_ANNOTATION, PAUSED_ANNOTATION};
use crate::api::{BareMetalHost, DataImage};
use crate::controller::runtime::shared_watch::Subscription;
use crate::controller::runtime::store::managed_fields;
use crate::provisioner::DataImageProvisioner;

/// How soon a reconcile that failed is tried again (upstream's delay).
const RETRY: std::time::Duration = std::time::Duration::from_secs(60);
/// How long reconciles in flight may take to finish after the shutdown signal.
const SHUTDOWN_GRACE: std::time::Duration = std::time::Duration::from_secs(3);

/// What of a DataImage wakes it: generation, finalizers and owners.
fn image_change(image: &DataImage) -> Option<u64> {
    let mut hasher = DefaultHasher::new();
    image.metadata.generation.hash(&mut hasher);
    image.finalizers().hash(&mut hasher);
    image
        .owner_references()
        .iter()
        .map(|o| o.uid.as_str())
        .for_each(|uid| uid.hash(&mut hasher));
    Some(hasher.finish())
}

/// What of a host matters to its DataImage: which host, paused, detached, its node.
fn host_change(host: &BareMetalHost) -> Option<u64> {
    let mut hasher = DefaultHasher::new();
    host.metadata.uid.hash(&mut hasher);
    host.annotations()
        .contains_key(PAUSED_ANNOTATION)
        .hash(&mut hasher);
    host.annotations()
        .contains_key(DETACHED_ANNOTATION)
        .hash(&mut hasher);
    host.status
        .as_ref()
        .map(|s| s.provisioning.id.as_str())
        .hash(&mut hasher);
    Some(hasher.finish())
}

/// Runs the DataImage controller until `shutdown` resolves.
pub async fn run<P: DataImageProvisioner + 'static>(
    ctx: Arc<DataImageContext<P, KubeDataImageStore>>,
    hosts: Subscription<BareMetalHost>,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let client = ctx.store.client().clone();
    let images: Api<DataImage> = match &ctx.namespace {
        Some(ns) => Api::namespaced(client, ns),
        None => Api::all(client),
    };
    let (reader, writer) = kube::runtime::reflector::store();
    let _ = ctx.store.cache.set(reader.clone());
    let image_changes = watcher(images, watcher::Config::default())
        .default_backoff()
        .modify(managed_fields::trim)
        .reflect(writer)
        .applied_objects()
        .predicate_filter(image_change, Default::default());
    let host_changes = hosts.changed(host_change).filter_map(|h| async move {
        Some(ObjectRef::<DataImage>::new(&h.name_any()).within(&h.namespace()?))
    });
    let listed = reader.clone();
    let shutdown = shutdown.shared();
    let reconciling = Controller::for_stream(image_changes, reader)
        .reconcile_on(host_changes)
        .graceful_shutdown_on(shutdown.clone())
        .run(reconcile_image, error_policy, ctx)
        .for_each(|result| async move {
            if let Err(e) = result {
                tracing::debug!(error = %e, "DataImage reconcile did not finish");
            }
        });
    crate::controller::runtime::watch::run_until_shutdown(
        reconciling,
        shutdown,
        &listed,
        SHUTDOWN_GRACE,
    )
    .await;
}

async fn reconcile_image<P: DataImageProvisioner, S: DataImageStore>(
    image: Arc<DataImage>,
    ctx: Arc<DataImageContext<P, S>>,
) -> Result<Action, DataImageError> {
    let span = tracing::info_span!(
        "dataimage",
        namespace = %image.namespace().unwrap_or_default(),
        name = %image.name_any()
    );
    super::reconcile(&image, &ctx)
        .instrument(span)
        .await
        .map(Action::from)
}

fn error_policy<P: DataImageProvisioner, S: DataImageStore>(
    image: Arc<DataImage>,
    error: &DataImageError,
    _ctx: Arc<DataImageContext<P, S>>,
) -> Action {
    tracing::warn!(dataimage = %super::name_of(&image), %error, "DataImage reconcile failed; retrying");
    Action::requeue(RETRY)
}
