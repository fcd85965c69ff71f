//! The controller that fulfils PreprovisioningImages (`BMO_PREPROV_IMAGE_INITRD`,
//! `BMO_PREPROV_IMAGE_ISO`): for each image, read its network data Secret, let
//! [`build::decide`] say the format, the status and the archive, serve the archive
//! after bmo's IPA ramdisk (`initrd`) or write the ISO holding them under the HTTP
//! root (`iso`, once per network data version), write the status and post the event.
//!
//! Its reads and writes go through the runtime's store on the API server (the
//! decisions are pure and unit-tested; the I/O is this file).

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use kube::core::PartialObjectMeta;
use kube::runtime::controller::Action;
use kube::runtime::reflector;
use kube::runtime::{WatchStreamExt, predicates, watcher};

use super::agent_iso::{self, Loaders};
use super::build::{self, NETWORK_DATA_KEYS, NetworkData};
use crate::api::{PreprovisioningImage, PreprovisioningImageFormat};
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
/// How often the ramdisks and ISOs of deleted images are looked for.
const SWEEP: Duration = Duration::from_secs(10);
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

/// First path segment (under the HTTP root) of the ISOs bmo builds.
pub const ISO_PATH_PREFIX: &str = "preprovisioning-iso";
/// The file name of each ISO.
pub const ISO_FILE: &str = "ironic-python-agent.iso";

/// How bmo builds `iso` images.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IsoBuild {
    /// bmo's HTTP root (`BMO_HTTP_ROOT`): the ISOs go under [`ISO_PATH_PREFIX`] there.
    pub http_root: PathBuf,
    /// The agent's kernel command line (`BMO_PREPROV_IMAGE_ISO_KERNEL_PARAMS`).
    pub kernel_params: String,
}

/// The formats bmo builds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Builds {
    pub initrd: bool,
    pub iso: Option<IsoBuild>,
}

/// The path (after the HTTP base, and under the HTTP root) of host
/// `namespace/name`'s ISO at `version`.
pub fn iso_path(namespace: &str, name: &str, version: &str) -> String {
    format!("/{ISO_PATH_PREFIX}/{namespace}/{name}/{version}/{ISO_FILE}")
}

/// What every reconcile shares.
struct BuildContext {
    kube: KubeClient,
    server: RamdiskServer,
    builds: Builds,
    images: reflector::Store<PreprovisioningImage>,
}

/// Runs the controller until `shutdown` resolves: images of `namespace` (all when
/// `None`) are built in the formats of `builds` and served through `server`; events
/// name `instance`.
pub async fn run(
    client: kube::Client,
    server: RamdiskServer,
    builds: Builds,
    namespace: Option<String>,
    instance: Option<String>,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let namespace = namespace.as_deref();
    let own = runtime::own_watch(api_in(&client, namespace), |_| (), predicates::generation);
    let secrets: kube::Api<PartialObjectMeta<Secret>> = api_in(&client, namespace);
    let ctx = Arc::new(BuildContext {
        kube: KubeClient::new(client.clone(), instance),
        server,
        builds,
        images: own.store(),
    });
    // A network data Secret made or changed: the image is built again at once.
    let secret_changes = watcher(secrets, watcher::Config::default()).touched_objects();
    let controller = runtime::wake_naming(own, secret_changes, |image, _, secret| {
        image.spec.network_data_name.as_deref() == Some(secret)
    });
    // An image deleted without a finalizer is never reconciled: a sweep stops serving
    // what it had, by the API server's list (the cache may not be filled yet).
    let sweeper = tokio::spawn(sweep(ctx.clone(), api_in(&client, namespace)));
    runtime::run(controller, ctx, shutdown).await;
    sweeper.abort();
}

impl Reconciler for BuildContext {
    type Object = PreprovisioningImage;
    type Error = ObjectError;
    const SHUTDOWN_GRACE: Option<Duration> = None;

    fn span(namespace: &str, name: &str) -> tracing::Span {
        tracing::info_span!("preprovisioningimage", namespace, name)
    }

    async fn reconcile(&self, image: &PreprovisioningImage) -> Result<Action, ObjectError> {
        let reconciled = if image.metadata.deletion_timestamp.is_some() {
            release(image, self).await
        } else {
            reconcile_image(image, self).await
        };
        reconciled.map_err(ObjectError::about(image))
    }
}

/// An image being deleted: its ramdisk is no longer served, and upstream's
/// finalizers go.
async fn release(image: &PreprovisioningImage, ctx: &BuildContext) -> Result<Action, StoreError> {
    let namespace = image.namespace().unwrap_or_default();
    ctx.server.ramdisks.remove(&namespace, &image.name_any());
    if let Some(iso) = &ctx.builds.iso {
        remove_isos(&iso.http_root, &namespace, &image.name_any(), None);
    }
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
    let version = build::version_of(&network);
    let server = build::Server {
        initrd: ctx.builds.initrd,
        iso: ctx.builds.iso.as_ref().map(|iso| build::IsoServer {
            url: ctx
                .server
                .images
                .http_url(&iso_path(&namespace, &name, version)),
            loaders: Loaders::find(&ctx.server.images_dir),
            kernel_params: iso.kernel_params.clone(),
        }),
        base_ramdisk: base.is_file(),
        base_ramdisk_path: base.display().to_string(),
        kernel_url: ctx.server.images.kernel_url(),
        ramdisk_url: ctx.server.ramdisk_url(&namespace, &name, version),
    };
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    let mut decision = build::decide(
        image,
        &network,
        &server,
        crate::api::images::controller_architecture(),
        &now,
    );
    let iso = decision.status.format == Some(PreprovisioningImageFormat::Iso);
    match (decision.archive.take(), &ctx.builds.iso) {
        (Some((version, archive)), Some(build)) if iso => {
            ctx.server.ramdisks.remove(&namespace, &name);
            let target = (namespace.clone(), name.clone(), version);
            if let Err(e) = write_iso(build, &ctx.server.images_dir, target, archive).await {
                decision = build::failed(
                    image,
                    build::REASON_BUILD_INVALID,
                    format!("bmo could not write the ISO: {e}"),
                    &now,
                );
            }
        }
        (Some((version, archive)), _) => {
            ctx.server
                .ramdisks
                .set(&namespace, &name, &version, archive);
        }
        (None, _) => ctx.server.ramdisks.remove(&namespace, &name),
    }
    let built = decision.status.image_url.is_some();
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

/// Writes host `namespace/name`'s ISO at `version` under the HTTP root, unless it is
/// there already, and removes its other versions.
async fn write_iso(
    build: &IsoBuild,
    images_dir: &Path,
    (namespace, name, version): (String, String, String),
    archive: Vec<u8>,
) -> std::io::Result<()> {
    let root = build.http_root.clone();
    let images_dir = images_dir.to_owned();
    let params = build.kernel_params.clone();
    let task = tokio::task::spawn_blocking(move || {
        remove_isos(&root, &namespace, &name, Some(&version));
        let path = root.join(iso_path(&namespace, &name, &version).trim_start_matches('/'));
        if path.is_file() {
            return Ok(());
        }
        tracing::info!(path = %path.display(), "writing the PreprovisioningImage's ISO");
        agent_iso::write(&path, &images_dir, &archive, &params)
    });
    task.await.map_err(std::io::Error::other)?
}

/// Removes host `namespace/name`'s ISOs under `http_root`, but for `keep`'s version.
fn remove_isos(http_root: &Path, namespace: &str, name: &str, keep: Option<&str>) {
    let dir = http_root.join(ISO_PATH_PREFIX).join(namespace).join(name);
    let Ok(versions) = std::fs::read_dir(&dir) else {
        return;
    };
    for entry in versions.flatten() {
        if keep.is_some_and(|k| entry.file_name() == k) {
            continue;
        }
        if let Err(e) = std::fs::remove_dir_all(entry.path()) {
            tracing::warn!(path = %entry.path().display(), error = %e, "cannot remove an old ISO");
        }
    }
    if keep.is_none() {
        let _ = std::fs::remove_dir(&dir);
    }
}

/// Removes the ISOs of hosts whose image is gone.
fn forget_deleted_isos(http_root: &Path, present: &HashSet<(String, String)>) {
    let root = http_root.join(ISO_PATH_PREFIX);
    for ns in std::fs::read_dir(&root).into_iter().flatten().flatten() {
        let namespace = ns.file_name().to_string_lossy().into_owned();
        for host in std::fs::read_dir(ns.path()).into_iter().flatten().flatten() {
            let name = host.file_name().to_string_lossy().into_owned();
            if !present.contains(&(namespace.clone(), name.clone())) {
                remove_isos(http_root, &namespace, &name, None);
            }
        }
    }
}

/// Every [`SWEEP`], stops serving the ramdisks and ISOs of images that neither
/// `images` (the API server) lists nor the cache holds.
async fn sweep(ctx: Arc<BuildContext>, images: kube::Api<PartialObjectMeta<PreprovisioningImage>>) {
    let mut tick = tokio::time::interval(SWEEP);
    loop {
        tick.tick().await;
        match images
            .list_metadata(&kube::api::ListParams::default())
            .await
        {
            Ok(list) => {
                // Those the cache has too: one made since the list is kept.
                let mut present: HashSet<_> = list.items.iter().map(key).collect();
                present.extend(ctx.images.state().iter().map(|i| key(i.as_ref())));
                forget_absent(&ctx, &present);
            }
            Err(e) => tracing::debug!(error = %e, "cannot list PreprovisioningImages to sweep"),
        }
    }
}

fn key(image: &impl ResourceExt) -> (String, String) {
    (image.namespace().unwrap_or_default(), image.name_any())
}

/// Stops serving the ramdisks and ISOs of images that are gone from the cache.
fn forget_deleted(ctx: &BuildContext) {
    let present: HashSet<(String, String)> =
        ctx.images.state().iter().map(|i| key(i.as_ref())).collect();
    forget_absent(ctx, &present);
}

/// Stops serving the ramdisks and ISOs of images not in `present`.
fn forget_absent(ctx: &BuildContext, present: &HashSet<(String, String)>) {
    ctx.server
        .ramdisks
        .retain(|ns, name| present.contains(&(ns.to_owned(), name.to_owned())));
    if let Some(iso) = &ctx.builds.iso {
        forget_deleted_isos(&iso.http_root, present);
    }
}
