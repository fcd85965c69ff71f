//! DataImages: an ISO attached to the BareMetalHost of the same name as virtual media
//! (a virtual CD, through Ironic's `/v1/nodes/{id}/vmedia`).
//!
//! As upstream, the work is split. The host controller attaches, changes and ejects
//! the image right before it powers on a provisioned or externally provisioned host
//! ([`prepare_power_on`], called from its power-on step), so that the host boots
//! with it. The DataImage controller ([`reconcile`], run by [`run`]) makes the host
//! the DataImage's owner, keeps [`crate::api::images::DATA_IMAGE_FINALIZER`] on it,
//! and on deletion ejects the image and then lets the object go.
//!
//! The same shape as the other controllers: [`state_machine`] decides (pure), the
//! provisioner acts ([`DataImageProvisioner`]), [`store`] writes.

mod run;
pub mod state_machine;
pub mod store;

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;

pub use run::run;
use state_machine::{CdRead, Facts, PowerOnStep, Requeue, Step};
pub use store::{DataImageStore, KubeDataImageStore};

use futures::future::BoxFuture;

use crate::api::{BareMetalHost, DataImage, DataImageStatus};
use crate::bmc::AddressGuard;
use crate::controller::runtime::Next;
use crate::controller::runtime::seams::{BeforePowerOn, SeamError};
use crate::controller::runtime::store::StoreError;
use crate::provisioner::{DataImageProvisioner, HostId, NodeRef, ProvisionerError};

/// Steps one reconcile takes at most; more means the object keeps changing under it.
const MAX_STEPS: usize = 8;

/// What the DataImage controller shares.
pub struct DataImageContext<P, S = KubeDataImageStore> {
    pub provisioner: P,
    pub store: S,
    /// `WATCH_NAMESPACE`: only objects in this namespace; all when `None`.
    pub namespace: Option<String>,
    /// Cap of the error backoff (`BMO_MAX_BACKOFF`).
    pub max_backoff: Duration,
}

/// Why a reconcile could not finish.
#[derive(Debug, thiserror::Error)]
pub enum DataImageError {
    #[error("DataImage {object}: {source}")]
    Store {
        object: String,
        #[source]
        source: StoreError,
    },
    #[error(transparent)]
    Provisioner(#[from] ProvisionerError),
}

fn name_of(image: &DataImage) -> String {
    format!(
        "{}/{}",
        image.namespace().unwrap_or_default(),
        image.name_any()
    )
}

fn node_of(host: &BareMetalHost) -> NodeRef {
    NodeRef {
        id: HostId::new(host.namespace().unwrap_or_default(), host.name_any()),
        provisioning_id: host
            .status
            .as_ref()
            .map(|s| s.provisioning.id.clone())
            .filter(|id| !id.is_empty()),
    }
}

/// Reads the host's virtual CD. Only Ironic being unreachable is an error; any other
/// failure is the DataImage's to report.
async fn read_cd<P: DataImageProvisioner>(
    provisioner: &P,
    host: &BareMetalHost,
) -> Result<CdRead, ProvisionerError> {
    match provisioner.virtual_cd(&node_of(host)).await {
        Ok(Some(cd)) => Ok(CdRead::Read(cd)),
        Ok(None) => Ok(CdRead::NoNode),
        Err(e) if e.unreachable().is_some() => Err(e),
        Err(e) => Ok(CdRead::Failed(crate::telemetry::with_causes(&e))),
    }
}

fn delay(requeue: Requeue, status: Option<&DataImageStatus>, max_backoff: Duration) -> Next {
    match requeue {
        Requeue::OnChange => Next::OnChange,
        Requeue::After(after) => Next::After(after),
        Requeue::Backoff => {
            let count = status.and_then(|s| s.error.as_ref()).map_or(1, |e| e.count);
            Next::After(
                crate::controller::runtime::backoff(count, max_backoff)
                    .max(state_machine::MIN_ERROR_BACKOFF),
            )
        }
    }
}

/// Saves `status` and publishes `event` (a Warning) about `image`.
async fn save<S: DataImageStore>(
    store: &S,
    image: &DataImage,
    status: &DataImageStatus,
    event: Option<&str>,
) -> Result<(), StoreError> {
    store.apply_status(image, status).await?;
    if let Some(message) = event {
        tracing::warn!(dataimage = %name_of(image), "{message}");
        store
            .publish(image, state_machine::ERROR_REASON, message)
            .await;
    }
    Ok(())
}

/// The host controller's power-on step for `host` (provisioned or externally
/// provisioned, to be powered on): attaches, changes or ejects the DataImage of the
/// same name. `None` means "power on now"; `Some(next)` holds the power-on until then.
/// A `spec.url` that `guard` refuses is an attach failure Ironic never hears of.
pub async fn prepare_power_on<P: DataImageProvisioner, S: DataImageStore>(
    host: &BareMetalHost,
    provisioner: &P,
    guard: &AddressGuard,
    store: &S,
    max_backoff: Duration,
    now: &Time,
) -> Result<Option<Next>, DataImageError> {
    let namespace = host.namespace().unwrap_or_default();
    let host_name = format!("{namespace}/{}", host.name_any());
    let store_err = |source| DataImageError::Store {
        object: host_name.clone(),
        source,
    };
    let Some(image) = store
        .data_image(&namespace, &host.name_any())
        .await
        .map_err(store_err)?
    else {
        return Ok(None);
    };
    let cd = read_cd(provisioner, host).await?;
    let step = state_machine::before_power_on(&host_name, &image, &cd, now);
    tracing::debug!(?step, "DataImage before power-on");
    let node = node_of(host);
    let (status, event, requeue) = match step {
        PowerOnStep::Proceed(status) => {
            if let Some(status) = status {
                save(store, &image, &status, None)
                    .await
                    .map_err(store_err)?;
            }
            return Ok(None);
        }
        PowerOnStep::Hold {
            status,
            event,
            requeue,
        } => (status, event, requeue),
        PowerOnStep::Attach => {
            let refused = match guard.check_url("spec.url", &image.spec.url).await {
                Err(refused) => Some(refused.to_string()),
                Ok(()) => {
                    tracing::info!(url = %image.spec.url, "attaching the DataImage");
                    provisioner
                        .attach_virtual_cd(&node, &image.spec.url)
                        .await?
                }
            };
            let (status, event, requeue) =
                state_machine::after_attach(&host_name, &image, refused.as_deref(), now);
            (Some(status), event, requeue)
        }
        PowerOnStep::Detach { failed } => {
            let mut image = image.clone();
            if let Some(message) = &failed {
                let status = state_machine::failed(&image, message, now);
                save(store, &image, &status, Some(message))
                    .await
                    .map_err(store_err)?;
                image.status = Some(status);
            }
            tracing::info!("ejecting the DataImage's virtual media");
            let refused = provisioner.detach_virtual_cd(&node).await?;
            let (status, event, requeue) =
                state_machine::after_detach(&host_name, &image, refused.as_deref(), now);
            let requeue = if failed.is_some() {
                Requeue::Backoff
            } else {
                requeue
            };
            if let Some(status) = &status {
                save(store, &image, status, event.as_deref())
                    .await
                    .map_err(store_err)?;
            }
            return Ok(Some(delay(requeue, image.status.as_ref(), max_backoff)));
        }
    };
    if let Some(status) = &status {
        save(store, &image, status, event.as_deref())
            .await
            .map_err(store_err)?;
    }
    Ok(Some(delay(requeue, status.as_ref(), max_backoff)))
}

/// The DataImage controller's part of the host's power-on
/// ([`BeforePowerOn`]): [`prepare_power_on`] on `store`.
pub struct AttachBeforePowerOn<S>(pub S);

impl<P: DataImageProvisioner, S: DataImageStore> BeforePowerOn<P> for AttachBeforePowerOn<S> {
    fn before_power_on<'a>(
        &'a self,
        host: &'a BareMetalHost,
        provisioner: &'a P,
        guard: &'a AddressGuard,
        max_backoff: Duration,
    ) -> BoxFuture<'a, Result<Option<Next>, SeamError>> {
        let now = Time(k8s_openapi::jiff::Timestamp::now());
        Box::pin(async move {
            prepare_power_on(host, provisioner, guard, &self.0, max_backoff, &now)
                .await
                .map_err(|e| match e {
                    DataImageError::Store { object, source } => SeamError::Store { object, source },
                    DataImageError::Provisioner(e) => SeamError::Provisioner(e),
                })
        })
    }
}

/// One reconcile of `image` by the DataImage controller.
pub async fn reconcile<P: DataImageProvisioner, S: DataImageStore>(
    image: &DataImage,
    ctx: &DataImageContext<P, S>,
) -> Result<Next, DataImageError> {
    let namespace = image.namespace().unwrap_or_default();
    let name = image.name_any();
    let store_err = |source| DataImageError::Store {
        object: format!("{namespace}/{name}"),
        source,
    };
    let host = ctx.store.host(&namespace, &name).await.map_err(store_err)?;
    let mut facts = Facts {
        image: image.clone(),
        host,
        cd: None,
    };
    for _ in 0..MAX_STEPS {
        let step = state_machine::next(&facts);
        tracing::debug!(?step, "DataImage step");
        let requeue = match step {
            Step::Wait(requeue) => requeue,
            Step::AddOwner => {
                let Some(host) = &facts.host else {
                    return Ok(Next::OnChange);
                };
                ctx.store
                    .add_owner(&facts.image, host)
                    .await
                    .map_err(store_err)?;
                if !reread(&mut facts, ctx).await.map_err(store_err)? {
                    return Ok(Next::OnChange);
                }
                continue;
            }
            Step::SetFinalizer(present) => {
                ctx.store
                    .set_finalizer(&facts.image, present)
                    .await
                    .map_err(store_err)?;
                if !present {
                    tracing::info!("DataImage released");
                    return Ok(Next::OnChange);
                }
                if !reread(&mut facts, ctx).await.map_err(store_err)? {
                    return Ok(Next::OnChange);
                }
                continue;
            }
            Step::ReadCd => {
                let Some(host) = &facts.host else {
                    return Ok(Next::OnChange);
                };
                facts.cd = Some(read_cd(&ctx.provisioner, host).await?);
                continue;
            }
            Step::Detach { status } => {
                let Some(host) = facts.host.clone() else {
                    return Ok(Next::OnChange);
                };
                let failed = status.is_some();
                if let Some((status, message)) = status {
                    save(&ctx.store, &facts.image, &status, Some(&message))
                        .await
                        .map_err(store_err)?;
                    facts.image.status = Some(status);
                }
                tracing::info!("DataImage deleted; ejecting its virtual media");
                let refused = ctx.provisioner.detach_virtual_cd(&node_of(&host)).await?;
                let now = Time(k8s_openapi::jiff::Timestamp::now());
                let host_name = format!("{namespace}/{name}");
                let (status, event, requeue) =
                    state_machine::after_detach(&host_name, &facts.image, refused.as_deref(), &now);
                // After a failed try the next one waits for the backoff.
                let requeue = if failed { Requeue::Backoff } else { requeue };
                if let Some(status) = &status {
                    save(&ctx.store, &facts.image, status, event.as_deref())
                        .await
                        .map_err(store_err)?;
                    facts.image.status = Some(status.clone());
                }
                return Ok(delay(requeue, facts.image.status.as_ref(), ctx.max_backoff));
            }
            Step::Save {
                status,
                event,
                requeue,
            } => {
                save(&ctx.store, &facts.image, &status, event.as_deref())
                    .await
                    .map_err(store_err)?;
                return Ok(delay(requeue, Some(&status), ctx.max_backoff));
            }
        };
        return Ok(delay(requeue, None, ctx.max_backoff));
    }
    Ok(Next::After(Duration::from_secs(1)))
}

/// Reads the DataImage again after a write; `false` when it is gone.
async fn reread<P, S: DataImageStore>(
    facts: &mut Facts,
    ctx: &DataImageContext<P, S>,
) -> Result<bool, StoreError> {
    let namespace = facts.image.namespace().unwrap_or_default();
    match ctx
        .store
        .data_image(&namespace, &facts.image.name_any())
        .await?
    {
        Some(image) => {
            facts.image = image;
            Ok(true)
        }
        None => Ok(false),
    }
}
