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
//! provisioner acts ([`DataImageProvisioner`]), the runtime's [`ObjectStore`] reads
//! and writes.

mod run;
pub mod state_machine;

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;

pub use run::run;
use state_machine::{CdRead, Facts, PowerOnStep, Requeue, Step};

use futures::future::BoxFuture;

use crate::api::images::DATA_IMAGE_FINALIZER;
use crate::api::{BareMetalHost, DataImage, DataImageStatus};
use crate::bmc::AddressGuard;
use crate::controller::runtime::seams::{BeforePowerOn, SeamError};
use crate::controller::runtime::steps::OUT_OF_STEPS;
use crate::controller::runtime::store::{
    HostEvent, Kind, KubeClient, ObjectError, ObjectStore, Read, StatusApply, StoreError,
    name_of as namespaced, owner_reference,
};
use crate::controller::runtime::{Next, node_of};
use crate::provisioner::{DataImageProvisioner, ProvisionerError};

/// Steps one reconcile takes at most; more means the object keeps changing under it.
const MAX_STEPS: usize = 8;

/// Its events are posted as upstream's controller's (Warnings).
impl Kind for DataImage {
    // Status fields upstream's operator wrote with Update become bmo's first, so that
    // the apply clears what it leaves out (an old error, say).
    const STATUS_APPLY: StatusApply = StatusApply {
        take_over: true,
        refusal_is_conflict: false,
        ..StatusApply::PLAIN
    };
}

/// What the DataImage controller shares.
pub struct DataImageContext<P, S = KubeClient> {
    pub provisioner: P,
    pub store: S,
    /// `WATCH_NAMESPACE`: only objects in this namespace; all when `None`.
    pub namespace: Option<String>,
    /// Cap of the error backoff (`BMO_MAX_BACKOFF`).
    pub max_backoff: Duration,
}

/// Why a reconcile could not finish.
pub type DataImageError = ObjectError;

/// The DataImage's `namespace/name`.
fn name_of(image: &DataImage) -> String {
    namespaced(image)
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
async fn save<S: ObjectStore>(
    store: &S,
    image: &DataImage,
    status: &DataImageStatus,
    event: Option<&str>,
) -> Result<(), StoreError> {
    let event = event.map(|message| HostEvent::warning(state_machine::ERROR_REASON, message));
    store.save(image, status, event.as_slice()).await
}

/// The host controller's power-on step for `host` (provisioned or externally
/// provisioned, to be powered on): attaches, changes or ejects the DataImage of the
/// same name. `None` means "power on now"; `Some(next)` holds the power-on until then.
/// A `spec.url` that `guard` refuses is an attach failure Ironic never hears of.
pub async fn prepare_power_on<P: DataImageProvisioner, S: ObjectStore>(
    host: &BareMetalHost,
    provisioner: &P,
    guard: &AddressGuard,
    store: &S,
    max_backoff: Duration,
    now: &Time,
) -> Result<Option<Next>, DataImageError> {
    let host_name = namespaced(host);
    let object = format!("DataImage {host_name}");
    let store_err = ObjectError::store(&object);
    let namespace = host.namespace().unwrap_or_default();
    let name = host.name_any();
    let found = store.read(&namespace, &name, Read::FreshIfPresent).await;
    let Some(image) = found.map_err(store_err)? else {
        return Ok(None);
    };
    let cd = read_cd(provisioner, host).await?;
    let step = state_machine::before_power_on(&host_name, &image, &cd, now);
    tracing::debug!(?step, "DataImage before power-on");
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
            let refused = attach(provisioner, guard, host, &image).await?;
            let (status, event, requeue) =
                state_machine::after_attach(&host_name, &image, refused.as_deref(), now);
            (Some(status), event, requeue)
        }
        PowerOnStep::Detach { failed } => {
            let mut image = image.clone();
            let failed =
                failed.map(|message| (state_machine::failed(&image, &message, now), message));
            let ejected = Eject {
                provisioner,
                store,
                host,
                object: &object,
                now,
                saying: "ejecting the DataImage's virtual media",
            };
            let (_, requeue) = ejected.run(&mut image, failed).await?;
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

/// Attaches `image` to `host`'s virtual CD unless `guard` refuses its URL: why it
/// was not attached, if it was not.
async fn attach<P: DataImageProvisioner>(
    provisioner: &P,
    guard: &AddressGuard,
    host: &BareMetalHost,
    image: &DataImage,
) -> Result<Option<String>, ProvisionerError> {
    match guard.check_url("spec.url", &image.spec.url).await {
        Err(refused) => Ok(Some(refused.to_string())),
        Ok(()) => {
            tracing::info!(url = %image.spec.url, "attaching the DataImage");
            provisioner
                .attach_virtual_cd(&node_of(host), &image.spec.url)
                .await
        }
    }
}

/// Ejecting a DataImage's virtual media from its host, and saving what came of it.
struct Eject<'a, P, S> {
    provisioner: &'a P,
    store: &'a S,
    host: &'a BareMetalHost,
    /// The DataImage, as its errors name it.
    object: &'a str,
    now: &'a Time,
    /// What the log says when ejecting.
    saying: &'static str,
}

impl<P: DataImageProvisioner, S: ObjectStore> Eject<'_, P, S> {
    /// Saves `failed` (the status of a failed try, and its message) first, then
    /// ejects and saves the status the eject comes to: that status, and when to look
    /// again (after a failed try, the backoff).
    async fn run(
        &self,
        image: &mut DataImage,
        failed: Option<(DataImageStatus, String)>,
    ) -> Result<(Option<DataImageStatus>, Requeue), DataImageError> {
        let store_err = ObjectError::store(self.object);
        let was_failed = failed.is_some();
        if let Some((status, message)) = failed {
            save(self.store, image, &status, Some(&message))
                .await
                .map_err(store_err)?;
            image.status = Some(status);
        }
        tracing::info!("{}", self.saying);
        let refused = self
            .provisioner
            .detach_virtual_cd(&node_of(self.host))
            .await?;
        let host_name = namespaced(self.host);
        let (status, event, requeue) =
            state_machine::after_detach(&host_name, image, refused.as_deref(), self.now);
        let requeue = if was_failed {
            Requeue::Backoff
        } else {
            requeue
        };
        if let Some(status) = &status {
            save(self.store, image, status, event.as_deref())
                .await
                .map_err(store_err)?;
        }
        Ok((status, requeue))
    }
}

/// The DataImage controller's part of the host's power-on
/// ([`BeforePowerOn`]): [`prepare_power_on`] on `store`.
pub struct AttachBeforePowerOn<S>(pub S);

impl<P: DataImageProvisioner, S: ObjectStore> BeforePowerOn<P> for AttachBeforePowerOn<S> {
    fn before_power_on<'a>(
        &'a self,
        host: &'a BareMetalHost,
        provisioner: &'a P,
        guard: &'a AddressGuard,
        max_backoff: Duration,
    ) -> BoxFuture<'a, Result<Option<Next>, SeamError>> {
        let now = Time(k8s_openapi::jiff::Timestamp::now());
        Box::pin(async move {
            prepare_power_on(host, provisioner, guard, &self.0, max_backoff, &now).await
        })
    }
}

/// One reconcile of `image` by the DataImage controller.
pub async fn reconcile<P: DataImageProvisioner, S: ObjectStore>(
    image: &DataImage,
    ctx: &DataImageContext<P, S>,
) -> Result<Next, DataImageError> {
    let object = format!("DataImage {}", name_of(image));
    let store_err = ObjectError::store(&object);
    let namespace = image.namespace().unwrap_or_default();
    let host = ctx.store.get(&namespace, &image.name_any()).await;
    let mut facts = Facts {
        image: image.clone(),
        host: host.map_err(store_err)?,
        cd: None,
    };
    for _ in 0..MAX_STEPS {
        let step = state_machine::next(&facts);
        tracing::debug!(?step, "DataImage step");
        match take(step, &mut facts, ctx, &object).await? {
            Taken::Requeue(requeue) => return Ok(delay(requeue, None, ctx.max_backoff)),
            Taken::Next(next) => return Ok(next),
            Taken::Step => {}
        }
    }
    Ok(OUT_OF_STEPS)
}

/// What taking a step came to.
enum Taken {
    /// On to the next step.
    Step,
    /// Look again as this says (no status saved).
    Requeue(Requeue),
    /// The reconcile ends.
    Next(Next),
}

/// Takes `step` for the DataImage `object`.
async fn take<P: DataImageProvisioner, S: ObjectStore>(
    step: Step,
    facts: &mut Facts,
    ctx: &DataImageContext<P, S>,
    object: &str,
) -> Result<Taken, DataImageError> {
    let store_err = ObjectError::store(object);
    match step {
        Step::Wait(requeue) => return Ok(Taken::Requeue(requeue)),
        Step::AddOwner => {
            let Some(host) = &facts.host else {
                return Ok(Taken::Next(Next::OnChange));
            };
            // Not as controller, as upstream.
            let owner = owner_reference(host, false);
            let added = ctx.store.add_owner(&facts.image, owner).await;
            added.map_err(store_err)?;
        }
        Step::SetFinalizer(present) => {
            let finalizer = DATA_IMAGE_FINALIZER;
            let set = ctx
                .store
                .set_finalizer(&facts.image, finalizer, present)
                .await;
            set.map_err(store_err)?;
            if !present {
                tracing::info!("DataImage released");
                return Ok(Taken::Next(Next::OnChange));
            }
        }
        Step::ReadCd => {
            let Some(host) = &facts.host else {
                return Ok(Taken::Next(Next::OnChange));
            };
            facts.cd = Some(read_cd(&ctx.provisioner, host).await?);
            return Ok(Taken::Step);
        }
        Step::Detach { status } => {
            let Some(host) = facts.host.clone() else {
                return Ok(Taken::Next(Next::OnChange));
            };
            let now = Time(k8s_openapi::jiff::Timestamp::now());
            let ejected = Eject {
                provisioner: &ctx.provisioner,
                store: &ctx.store,
                host: &host,
                object,
                now: &now,
                saying: "DataImage deleted; ejecting its virtual media",
            };
            let (status, requeue) = ejected.run(&mut facts.image, status).await?;
            if status.is_some() {
                facts.image.status = status;
            }
            let next = delay(requeue, facts.image.status.as_ref(), ctx.max_backoff);
            return Ok(Taken::Next(next));
        }
        Step::Save {
            status,
            event,
            requeue,
        } => {
            save(&ctx.store, &facts.image, &status, event.as_deref())
                .await
                .map_err(store_err)?;
            return Ok(Taken::Next(delay(requeue, Some(&status), ctx.max_backoff)));
        }
    }
    // After a write: read the DataImage again, unless it is gone.
    if !reread(facts, ctx).await.map_err(store_err)? {
        return Ok(Taken::Next(Next::OnChange));
    }
    Ok(Taken::Step)
}

/// Reads the DataImage again after a write; `false` when it is gone.
async fn reread<P, S: ObjectStore>(
    facts: &mut Facts,
    ctx: &DataImageContext<P, S>,
) -> Result<bool, StoreError> {
    let namespace = facts.image.namespace().unwrap_or_default();
    let name = facts.image.name_any();
    match ctx
        .store
        .read(&namespace, &name, Read::FreshIfPresent)
        .await?
    {
        Some(image) => {
            facts.image = image;
            Ok(true)
        }
        None => Ok(false),
    }
}
