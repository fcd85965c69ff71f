//! The controller that fulfils PreprovisioningImages (`BMO_PREPROV_IMAGE_INITRD`):
//! for each image, read its network data Secret, let [`build::decide`] say the
//! status and the archive, serve the archive after bmo's IPA ramdisk, write the
//! status and post the event.
//!
//! Its reads and writes go through the runtime's store on the API server (the
//! decisions are pure and unit-tested; the I/O is this file).

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use kube::core::PartialObjectMeta;
use kube::runtime::controller::Action;
use kube::runtime::reflector;
use kube::runtime::{WatchStreamExt, predicates, watcher};

use super::build::{self, NETWORK_DATA_KEYS, NetworkData};
use crate::api::PreprovisioningImage;
use crate::controller::runtime::controller::{self as runtime, Reconciler};
use crate::controller::runtime::store::{
    Kind, KubeClient, ObjectError, ObjectStore, StatusApply, StoreError, patch_finalizers,
};
use crate::controller::runtime::watch::api_in;
use crate::netboot::host_ramdisks::RamdiskServer;

/// Its events are posted as upstream's image controller's; a refused status write is
/// an error like any other.
impl Kind for PreprovisioningImage {
    const STATUS_APPLY: StatusApply = StatusApply {
        refusal_is_conflict: false,
        ..StatusApply::PLAIN
    };
}
/// A built image is looked at again this often, so that its URLs follow the
/// provisioning IP.
const READY_RECHECK: Duration = Duration::from_secs(60);
/// An image that could not be built is tried again this often (a Secret made or
/// changed wakes it at once).
const FAILED_RETRY: Duration = Duration::from_secs(15);

/// Finalizers upstream puts on images: its image controller's (to discard the image
/// it built) and its host controller's. Neither is bmo's, and no upstream
/// controller runs beside bmo to remove them, so bmo removes them from an image
/// being deleted (images taken over from upstream, docs/migration.md).
pub const UPSTREAM_FINALIZERS: &[&str] = &[
    "preprovisioningimage.metal3.io",
    "baremetalhost.metal3.io/preprovisioningImage",
];

/// What every reconcile shares.
struct BuildContext {
    kube: KubeClient,
    server: RamdiskServer,
    images: reflector::Store<PreprovisioningImage>,
}

/// Runs the controller until `shutdown` resolves: images of `namespace` (all when
/// `None`) are built and served through `server`; events name `instance`.
pub async fn run(
    client: kube::Client,
    server: RamdiskServer,
    namespace: Option<String>,
    instance: Option<String>,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let namespace = namespace.as_deref();
    let own = runtime::own_watch(api_in(&client, namespace), |_| (), predicates::generation);
    let secrets: kube::Api<PartialObjectMeta<Secret>> = api_in(&client, namespace);
    let ctx = Arc::new(BuildContext {
        kube: KubeClient::new(client, instance),
        server,
        images: own.store(),
    });
    // A network data Secret made or changed: the image is built again at once.
    let secret_changes = watcher(secrets, watcher::Config::default()).touched_objects();
    let controller = runtime::wake_naming(own, secret_changes, |image, _, secret| {
        image.spec.network_data_name.as_deref() == Some(secret)
    });
    runtime::run(controller, ctx, shutdown).await;
}

impl Reconciler for BuildContext {
    type Object = PreprovisioningImage;
    type Error = ObjectError;
    const SHUTDOWN_GRACE: Option<Duration> = None;

    fn span(namespace: &str, name: &str) -> tracing::Span {
        tracing::info_span!("preprovisioningimage", namespace, name)
    }

    async fn reconcile(
        self: Arc<Self>,
        image: Arc<PreprovisioningImage>,
    ) -> Result<Action, ObjectError> {
        let reconciled = if image.metadata.deletion_timestamp.is_some() {
            release(&image, &self).await
        } else {
            reconcile_image(&image, &self).await
        };
        reconciled.map_err(ObjectError::about(image.as_ref()))
    }
}

/// An image being deleted: its ramdisk is no longer served, and upstream's
/// finalizers go.
async fn release(image: &PreprovisioningImage, ctx: &BuildContext) -> Result<Action, StoreError> {
    let namespace = image.namespace().unwrap_or_default();
    ctx.server.ramdisks.remove(&namespace, &image.name_any());
    let kept: Vec<String> = image
        .finalizers()
        .iter()
        .filter(|f| !UPSTREAM_FINALIZERS.contains(&f.as_str()))
        .cloned()
        .collect();
    if kept.len() != image.finalizers().len() {
        tracing::info!("removing upstream's finalizers from the deleted PreprovisioningImage");
        patch_finalizers(&ctx.kube.api_of(image), image, kept).await?;
    }
    Ok(Action::await_change())
}

async fn reconcile_image(
    image: &PreprovisioningImage,
    ctx: &BuildContext,
) -> Result<Action, StoreError> {
    let namespace = image.namespace().unwrap_or_default();
    let name = image.name_any();
    forget_deleted(ctx);
    let network = network_data(image, ctx, &namespace).await?;
    let base = ctx.server.base_ramdisk();
    let server = build::Server {
        base_ramdisk: base.is_file(),
        base_ramdisk_path: base.display().to_string(),
        kernel_url: ctx.server.images.kernel_url(),
        ramdisk_url: ctx
            .server
            .ramdisk_url(&namespace, &name, build::version_of(&network)),
    };
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    let decision = build::decide(
        image,
        &network,
        &server,
        crate::api::images::controller_architecture(),
        &now,
    );
    let built = decision.archive.is_some();
    match decision.archive {
        Some((version, archive)) => {
            ctx.server
                .ramdisks
                .set(&namespace, &name, &version, archive);
        }
        None => ctx.server.ramdisks.remove(&namespace, &name),
    }
    if image.status.as_ref() != Some(&decision.status) {
        tracing::info!(built, url = ?decision.status.image_url, "PreprovisioningImage status");
        ctx.kube.apply_status(image, &decision.status).await?;
    }
    if let Some(event) = decision.event {
        tracing::warn!(reason = %event.reason, message = %event.message, "PreprovisioningImage not built");
        ctx.kube.publish(image, &event).await;
    }
    Ok(Action::requeue(if built {
        READY_RECHECK
    } else {
        FAILED_RETRY
    }))
}

/// The network data Secret `image` names, read from `namespace`.
async fn network_data(
    image: &PreprovisioningImage,
    ctx: &BuildContext,
    namespace: &str,
) -> Result<NetworkData, StoreError> {
    let Some(secret) = &image.spec.network_data_name else {
        return Ok(NetworkData::None);
    };
    Ok(match ctx.kube.get::<Secret>(namespace, secret).await? {
        None => NetworkData::Missing {
            name: secret.clone(),
        },
        Some(found) => NetworkData::Found {
            name: secret.clone(),
            version: found.resource_version().unwrap_or_default(),
            data: found.data.and_then(|data| {
                NETWORK_DATA_KEYS
                    .iter()
                    .find_map(|k| data.get(*k).map(|v| v.0.clone()))
            }),
        },
    })
}

/// Stops serving the ramdisks of images that are gone.
fn forget_deleted(ctx: &BuildContext) {
    let present: HashSet<(String, String)> = ctx
        .images
        .state()
        .iter()
        .map(|i| (i.namespace().unwrap_or_default(), i.name_any()))
        .collect();
    ctx.server
        .ramdisks
        .retain(|ns, name| present.contains(&(ns.to_owned(), name.to_owned())));
}
