//! The kube-runtime side of the DataImage controller.
//!
//! A DataImage wakes when its generation changes (created, spec changed, deletion
//! asked for: bmo's own status writes wake nothing) or its finalizers or owners do,
//! and when the BareMetalHost of the same name appears, is paused or detached (or
//! no longer), or gets its node.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use kube::ResourceExt;
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher::DefaultBackoff;

use super::{DataImageContext, DataImageError};
use crate::api::host::{DETACHED_ANNOTATION, PAUSED_ANNOTATION};
use crate::api::{BareMetalHost, DataImage};
use crate::controller::runtime::controller::{self, Reconciler, fingerprint, own_watch_with};
use crate::controller::runtime::shared_watch::Subscription;
use crate::controller::runtime::store::{KubeClient, ObjectStore, managed_fields};
use crate::controller::runtime::watch::api_in;
use crate::provisioner::DataImageProvisioner;

/// What of a DataImage wakes it: generation, finalizers and owners.
fn image_change(image: &DataImage) -> Option<u64> {
    let owners: Vec<_> = image.owner_references().iter().map(|o| &o.uid).collect();
    fingerprint((image.metadata.generation, image.finalizers(), owners))
}

/// What of a host matters to its DataImage: which host, paused, detached, its node.
fn host_change(host: &BareMetalHost) -> Option<u64> {
    let annotations = host.annotations();
    fingerprint((
        &host.metadata.uid,
        [PAUSED_ANNOTATION, DETACHED_ANNOTATION].map(|key| annotations.contains_key(key)),
        host.status.as_ref().map(|s| s.provisioning.id.as_str()),
    ))
}

/// Runs the DataImage controller until `shutdown` resolves.
pub async fn run<P: DataImageProvisioner + 'static>(
    ctx: Arc<DataImageContext<P, KubeClient>>,
    hosts: Subscription<BareMetalHost>,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let images = api_in(ctx.store.client(), ctx.namespace.as_deref());
    // kube-runtime's own backoff, unlike the other controllers' watches.
    let controller = own_watch_with(
        images,
        managed_fields::trim,
        image_change,
        DefaultBackoff::default,
    );
    // A host without a DataImage, the usual case, is answered from it; one the cache
    // holds is read from the API server (the attach and eject decisions need its
    // current status).
    ctx.store.cache(controller.store());
    let host_changes = hosts.changed(host_change).filter_map(|h| async move {
        Some(ObjectRef::<DataImage>::new(&h.name_any()).within(&h.namespace()?))
    });
    controller::run(controller.reconcile_on(host_changes), ctx, shutdown).await;
}

impl<P: DataImageProvisioner + 'static, S: ObjectStore + 'static> Reconciler
    for DataImageContext<P, S>
{
    type Object = DataImage;
    type Error = DataImageError;
    /// Upstream's delay, after a lost write race too.
    const ERROR_RETRY: Duration = Duration::from_secs(60);
    const CONFLICT_RETRY: Option<Duration> = None;

    fn span(namespace: &str, name: &str) -> tracing::Span {
        tracing::info_span!("dataimage", %namespace, %name)
    }

    async fn reconcile(&self, image: &DataImage) -> Result<Action, DataImageError> {
        super::reconcile(image, self).await.map(Action::from)
    }
}
