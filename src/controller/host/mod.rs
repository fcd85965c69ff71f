//! The host controller: a kube-runtime reconciler around the pure state machine.
//!
//! Each reconcile is load → decide → act → store:
//! - load: the host (from the watch), its BMC Secret ([`secrets`]), and what the
//!   every-reconcile registration check tells about the hardware;
//! - decide: [`state_machine`] picks one [`Step`] and says how the status changes;
//! - act: a provisioner call ([`act`]), when the step is one;
//! - store: every Kubernetes write goes through a [`Store`] ([`save`] for the status,
//!   event and requeue).
//!
//! Nothing about the lifecycle is decided here.

pub mod act;
pub mod capacity;
pub mod conditions;
mod context;
pub mod known_hosts;
pub mod lease_details;
pub mod legacy_firmware;
pub mod node_owners;
pub mod preprov_image;
pub mod request;
pub(crate) mod run;
pub mod save;
pub mod secrets;
pub mod state_machine;
pub mod status_annotations;
pub mod steady;
pub mod store;
#[cfg(test)]
mod tests;

use std::sync::Arc;
use std::time::Duration;

use kube::ResourceExt;
use kube::runtime::controller::Action;
use tracing::Instrument;

use crate::api::{BareMetalHost, OperationalStatus, ProvisioningState};
pub use crate::controller::runtime::Next;
use crate::controller::runtime::backoff;
use crate::controller::runtime::seams::SeamError;
use crate::metrics::{self, HostLabels};
use crate::provisioner::{self, DeployRamdisk, NodeOwners, Provisioner, ProvisionerError};
pub use context::Context;
pub use run::{run, run_with};
use save::{Extras, save};
use state_machine::{
    CallResult, CredentialsCheck, Facts, Gate, PendingSettings, PendingUpdates, RegistrationCheck,
    Step,
};
pub use store::{KubeStore, SECRET_LABEL, Store, StoreError};

/// How soon a reconcile that found its copy of the host older than the API server's
/// looks again (the watch usually brings the newer copy first, which wakes it).
const STALE_COPY_RETRY: Duration = Duration::from_millis(200);

/// Provisioning attempts for one image before bmo stops retrying.
pub const MAX_PROVISIONING_RETRIES: i64 = 5;

/// Settings of the controller, from the one [`crate::config::Config`].
#[derive(Debug, Clone)]
pub struct ControllerSettings {
    /// `WATCH_NAMESPACE`: only hosts in this namespace; all when `None`.
    pub namespace: Option<String>,
    /// `BMO_CONCURRENCY`: hosts reconciled at once.
    pub concurrency: u16,
    /// `PROVISIONING_LIMIT`: hosts inspecting, provisioning or deprovisioning at once.
    pub provisioning_limit: usize,
    /// Cap of the error backoff.
    pub max_backoff: Duration,
    /// `BMO_STEADY_POLL`: how often hosts at rest are checked for changes made
    /// behind bmo's back (one list of nodes for all of them).
    pub steady_poll: Duration,
    /// `BMO_START_SETTLE`: how long after start no change is asked of the
    /// provisioner (requests of a killed predecessor land first).
    pub start_settle: Duration,
    pub deploy_ramdisk: DeployRamdisk,
}

/// Why a reconcile could not finish; retried with backoff by the controller.
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    #[error("host {host}: {source}")]
    Store {
        host: String,
        #[source]
        source: StoreError,
    },
    #[error(transparent)]
    Provisioner(#[from] ProvisionerError),
}

fn store_err(host: &BareMetalHost) -> impl FnOnce(StoreError) -> ReconcileError + '_ {
    move |source| ReconcileError::Store {
        host: host.namespaced_name(),
        source,
    }
}

fn host_labels(host: &BareMetalHost) -> HostLabels {
    HostLabels {
        namespace: host.namespace().unwrap_or_default(),
        host: host.name_any(),
    }
}

async fn reconcile<P: Provisioner, S: Store>(
    host: Arc<BareMetalHost>,
    ctx: Arc<Context<P, S>>,
) -> Result<Action, ReconcileError> {
    ctx.metrics.reconcile(
        &host_labels(&host),
        host.metadata.uid.as_deref().unwrap_or_default(),
        host.metadata.deletion_timestamp.is_some(),
    );
    let span = tracing::info_span!("host", host = %host.namespaced_name());
    match reconcile_host(&host, &ctx).instrument(span.clone()).await {
        // The watch brings the newer object; look again with it shortly.
        Err(ReconcileError::Store {
            source: StoreError::Conflict,
            ..
        }) => Ok(Action::requeue(Duration::from_secs(1))),
        // Not the host's error: said in a condition, retried soon, errorCount kept.
        Err(ReconcileError::Provisioner(e)) => match e.unreachable() {
            Some(ironic) => save::provisioner_unreachable(&host, &ctx, ironic)
                .instrument(span)
                .await
                .map(Action::from),
            None => Err(ReconcileError::Provisioner(e)),
        },
        other => other.map(Action::from),
    }
}

/// One reconcile of `host`: load, then ask [`state_machine::next`] for a step and
/// carry it out until one saves or waits.
pub async fn reconcile_host<P: Provisioner, S: Store>(
    host: &BareMetalHost,
    ctx: &Context<P, S>,
) -> Result<Next, ReconcileError> {
    ctx.steady.forget(host);
    let gate = state_machine::gate(host);
    if gate == Gate::Paused {
        tracing::debug!("paused; leaving the host alone");
        return Ok(Next::OnChange);
    }
    if gate == Gate::MovedAway {
        // The moved copy owns the node now: neither the status nor the provisioner
        // is touched here.
        tracing::info!("deleted by clusterctl move; letting go, the provisioner's node stays");
        return save(host, ctx, state_machine::moved_away(), Extras::default()).await;
    }
    // Status fields another manager wrote with Update (upstream's operator, before
    // bmo took over) become bmo's on the first reconcile, so that bmo's status
    // writes clear what they leave out; the rest of the reconcile uses the host as
    // it is after that write.
    let newer = ctx
        .store
        .take_over_status(host)
        .await
        .map_err(store_err(host))?;
    let host = newer.as_ref().unwrap_or(host);
    let owners = ctx.node_owners.get();
    if status_annotations::take_in(host, &ctx.store, owners.map(|o| o as &dyn NodeOwners))
        .await
        .map_err(store_err(host))?
    {
        return Ok(Next::After(Duration::ZERO));
    }
    match gate {
        Gate::AddFinalizer => {
            ctx.store
                .add_finalizer(host)
                .await
                .map_err(store_err(host))?;
            return Ok(Next::After(Duration::ZERO));
        }
        Gate::Released | Gate::Paused | Gate::MovedAway => return Ok(Next::OnChange),
        Gate::Proceed => {}
    }
    let Loaded {
        mut facts,
        phost,
        lease_details,
        credentials_version,
        waiting_for_image,
    } = load(host, ctx).await?;
    if let Some(poll) = waiting_for_image {
        return Ok(Next::After(poll));
    }
    load_firmware(host, ctx, &mut facts).await?;
    let mut registration = Extras::default();
    // The node and its state digest as the registration check saw them.
    let mut seen_node = None;
    loop {
        let step = state_machine::next(host, &facts);
        tracing::debug!(?step, state = %host.provisioning_state(), "next step");
        let reached = || Extras {
            provisioner_reached: facts.registration.is_some(),
            ..Default::default()
        };
        match step {
            Step::SaveLeaseDetails => {
                tracing::info!("NIC DHCP details updated from the lease table");
                let Some(details) = lease_details else {
                    return Ok(Next::After(Duration::ZERO));
                };
                ctx.store
                    .apply_hardware_data(host, &details)
                    .await
                    .map_err(store_err(host))?;
                let extras = Extras {
                    hardware: Some(details),
                    ..Default::default()
                };
                return save(host, ctx, Default::default(), extras).await;
            }
            Step::CheckRegistration => {
                let Ok(phost) = &phost else {
                    return Ok(Next::After(state_machine::STEADY_POLL));
                };
                let outcome = ctx.provisioner.register(phost).await?;
                if !outcome.is_done() {
                    ctx.metrics.count(metrics::Event::HostRegistrationRequired);
                }
                let result = act::call_result(&outcome);
                seen_node = outcome
                    .value
                    .provisioning_id
                    .clone()
                    .zip(outcome.value.node_state);
                registration = Extras {
                    provisioning_id: outcome.value.provisioning_id.clone(),
                    // Credentials the provisioner could not send yet stay untried.
                    // They are good once the provisioner reached the BMC with them.
                    credentials: (!outcome.value.credentials_pending).then(|| {
                        let good = outcome.value.credentials_valid && outcome.error.is_none();
                        (credentials_version.clone(), good)
                    }),
                    provisioner_reached: true,
                    ..Default::default()
                };
                facts.power = state_machine::observed_power(host, outcome.value.power);
                facts.reported_power = outcome.value.power.known();
                facts.registration = Some(RegistrationCheck {
                    result,
                    deployed: outcome.value.deployed,
                });
            }
            Step::SaveRegistration(update) => return save(host, ctx, update, registration).await,
            Step::Readopt => {
                let Ok(phost) = &phost else {
                    return Ok(Next::After(state_machine::STEADY_POLL));
                };
                facts.adoption = Some(act::adopt(host, ctx, phost).await?);
            }
            Step::Transition(update) => {
                if update.operational_status == Some(OperationalStatus::Delayed) {
                    ctx.slots.wait(&host.namespaced_name());
                }
                return save(host, ctx, update, reached()).await;
            }
            Step::Wait(after) => {
                if host.metadata.deletion_timestamp.is_some()
                    && state_machine::delete_delayed_by_detach(host)
                {
                    ctx.metrics.count(metrics::Event::DeleteDelayedForDetached);
                }
                if after == state_machine::STEADY_POLL {
                    return Ok(rest(host, ctx, seen_node));
                }
                return Ok(Next::After(after));
            }
            Step::PrepareDataImage => {
                if let Some(next) = prepare_data_image(host, ctx).await? {
                    return Ok(next);
                }
                facts.data_image_checked = true;
            }
            Step::Call(op) => {
                let Ok(phost) = phost else {
                    return Ok(Next::After(state_machine::STEADY_POLL));
                };
                return call(host, ctx, op, phost, &facts).await;
            }
        }
    }
}

/// The BIOS settings and firmware updates the host's objects ask for, where they
/// matter: an available or preparing host applies them by preparing, a provisioned
/// one by servicing as far as its HostUpdatePolicy allows. The firmware objects come
/// from the watch's cache; the policy is read (a request) only when they ask for
/// something or servicing is under way.
async fn load_firmware<P: Provisioner, S: Store>(
    host: &BareMetalHost,
    ctx: &Context<P, S>,
    facts: &mut Facts,
) -> Result<(), ReconcileError> {
    let preparing = matches!(
        host.provisioning_state(),
        ProvisioningState::Available | ProvisioningState::Ready | ProvisioningState::Preparing
    );
    if !preparing && !state_machine::wants_servicing_facts(host) {
        return Ok(());
    }
    let settings = ctx.firmware_settings(host).await.map_err(store_err(host))?;
    let components = ctx
        .firmware_components(host)
        .await
        .map_err(store_err(host))?;
    let settings_set = settings
        .as_ref()
        .is_some_and(|s| !s.spec.settings.is_empty());
    let updates_set = components
        .as_ref()
        .is_some_and(|c| !c.spec.updates.is_empty());
    let (apply_settings, apply_updates) = if preparing {
        (true, true)
    } else {
        if settings_set || updates_set || state_machine::servicing_under_way(host) {
            let policy = ctx
                .store
                .host_update_policy(host)
                .await
                .map_err(store_err(host))?;
            facts.servicing_allowed = state_machine::ServicingAllowed::from_policy(policy.as_ref());
        }
        (
            facts.servicing_allowed.settings,
            facts.servicing_allowed.updates,
        )
    };
    if apply_settings {
        facts.firmware = legacy_firmware::pending(host, settings.as_ref());
        facts.firmware_spec_set |= settings_set;
    }
    if apply_updates {
        facts.firmware_updates = crate::api::firmware_pending::pending_updates(components.as_ref());
        facts.firmware_spec_set |= updates_set;
    }
    Ok(())
}

/// The host's DataImage before power-on; `Some` holds the power-on until then.
async fn prepare_data_image<P: Provisioner, S: Store>(
    host: &BareMetalHost,
    ctx: &Context<P, S>,
) -> Result<Option<Next>, ReconcileError> {
    let Some(data_images) = &ctx.data_images else {
        return Ok(None);
    };
    match data_images
        .before_power_on(
            host,
            &ctx.provisioner,
            &ctx.address_guard,
            ctx.settings.max_backoff,
        )
        .await
    {
        Ok(next) => Ok(next),
        Err(SeamError::Provisioner(e)) => Err(e.into()),
        Err(SeamError::Store { source, .. }) => Err(store_err(host)(source)),
    }
}

/// A host with nothing to do until something changes: watched through the list of
/// nodes ([`steady`]) when the registration check gave its node's state, else looked
/// at again after the steady interval.
fn rest<P: Provisioner, S: Store>(
    host: &BareMetalHost,
    ctx: &Context<P, S>,
    seen_node: Option<(String, u64)>,
) -> Next {
    match seen_node {
        Some((node, state)) => {
            ctx.steady.watch(host, node, state);
            Next::OnChange
        }
        None => Next::After(ctx.settings.steady_poll),
    }
}

/// What a reconcile reads before its first step.
struct Loaded {
    facts: Facts,
    /// The host as the provisioner takes it, or why the spec gives none.
    phost: Result<provisioner::Host, String>,
    /// The stored hardware details with the lease table's NIC details, when those
    /// changed them.
    lease_details: Option<crate::api::HardwareDetails>,
    /// The BMC Secret's resourceVersion.
    credentials_version: Option<String>,
    /// The next step boots the agent, whose PreprovisioningImage is not ready: look
    /// again after this long.
    waiting_for_image: Option<Duration>,
}

/// How often a host waiting for its PreprovisioningImage to be built looks at it
/// again (the host controller does not watch images).
const PREPROVISIONING_IMAGE_POLL: Duration = Duration::from_secs(2);
/// The same for an image whose build failed (its `Error` condition says why; the
/// builder tries again every 15 s and when the Secret changes).
const FAILED_PREPROVISIONING_IMAGE_POLL: Duration = Duration::from_secs(15);

/// The deploy ramdisk for `host`: its PreprovisioningImage's when images are on and
/// it is ready, else the context's; and how long the host must wait for the image,
/// if it must.
async fn deploy_ramdisk<P: Provisioner, S: Store>(
    host: &BareMetalHost,
    ctx: &Context<P, S>,
) -> Result<(DeployRamdisk, Option<Duration>), ReconcileError> {
    use preprov_image::{self as host_side, ImageUse};
    let default = ctx.deploy_ramdisk();
    if !ctx.preprovisioning_images || !host_side::wants_image(host) {
        return Ok((default, None));
    }
    let image_use = host_side::deploy_ramdisk(host, &ctx.store, &default)
        .await
        .map_err(store_err(host))?;
    let (why, poll) = match image_use {
        ImageUse::Ready(ramdisk) => return Ok((ramdisk, None)),
        ImageUse::Pending(why) => (why, PREPROVISIONING_IMAGE_POLL),
        ImageUse::Failed(why) => (why, FAILED_PREPROVISIONING_IMAGE_POLL),
    };
    let wait = host_side::needs_image(host);
    tracing::debug!(why, wait, "PreprovisioningImage not usable");
    Ok((default, wait.then_some(poll)))
}

/// Reads the BMC Secret, the lease table and the slots into the facts of a reconcile.
async fn load<P: Provisioner, S: Store>(
    host: &BareMetalHost,
    ctx: &Context<P, S>,
) -> Result<Loaded, ReconcileError> {
    let loaded = match secrets::load_credentials(host, &ctx.store).await {
        Ok(loaded) => loaded,
        Err(e) => {
            ctx.metrics.count(metrics::Event::CredentialsUnhandledError);
            return Err(store_err(host)(e));
        }
    };
    match &loaded.check {
        CredentialsCheck::Missing(_) => ctx.metrics.count(metrics::Event::CredentialsMissing),
        CredentialsCheck::Invalid(_) => ctx.metrics.count(metrics::Event::CredentialsInvalid),
        CredentialsCheck::Valid => {}
    }
    let previous_version = host
        .status
        .as_ref()
        .and_then(|s| s.tried_credentials.as_ref())
        .and_then(|c| c.credentials_version.clone());
    let credentials_changed = loaded.changed_since(previous_version.as_deref());
    if credentials_changed && previous_version.is_some() {
        ctx.metrics.count(metrics::Event::CredentialsUpdated);
    }
    let (ramdisk, waiting_for_image) = deploy_ramdisk(host, ctx).await?;
    let phost = request::host_input(host, loaded.credentials, credentials_changed, &ramdisk)
        .map_err(|e| e.to_string());
    let phost = ctx.address_guard.checked(host, phost).await;
    let lease_details = host
        .status
        .as_ref()
        .and_then(|s| s.hardware.clone())
        .and_then(|mut details| ctx.add_lease_details(&mut details).then_some(details));
    let facts = Facts {
        credentials: loaded.check,
        power: None,
        reported_power: None,
        has_capacity: ctx
            .slots
            .has_capacity(&host.namespaced_name(), host.provisioning_state()),
        reboot: state_machine::reboot_request(host),
        spec_problem: phost.as_ref().err().cloned(),
        lease_details_changed: lease_details.is_some(),
        registration: None,
        adoption: None,
        firmware: PendingSettings::None,
        firmware_updates: PendingUpdates::None,
        servicing_allowed: Default::default(),
        firmware_spec_set: false,
        data_image_checked: false,
    };
    Ok(Loaded {
        facts,
        phost,
        lease_details,
        credentials_version: loaded.version,
        waiting_for_image,
    })
}

/// Makes the provisioner call `op` and saves what it leads to.
async fn call<P: Provisioner, S: Store>(
    host: &BareMetalHost,
    ctx: &Context<P, S>,
    op: state_machine::Operation,
    mut phost: provisioner::Host,
    facts: &Facts,
) -> Result<Next, ReconcileError> {
    // A bmo killed just before may have left requests that Ironic has not carried
    // out yet; a change decided before they land could repeat one.
    let settling = ctx
        .settings
        .start_settle
        .saturating_sub(ctx.started.elapsed());
    if !settling.is_zero() {
        tracing::debug!(
            ?op,
            ?settling,
            "settling after start before changing anything"
        );
        return Ok(Next::After(settling));
    }
    if op.is_destructive() {
        // The watch's copy can lag the API server (bmo's own last write, a user's
        // change of spec): a destructive step decided on an older copy could undo
        // what the newer one says. Decide again on the newest.
        let newest = ctx
            .store
            .newest_version(host)
            .await
            .map_err(store_err(host))?;
        if newest != host.metadata.resource_version {
            tracing::debug!(
                ?op,
                "the host changed since this copy; deciding again on the newest"
            );
            return Ok(Next::After(STALE_COPY_RETRY));
        }
    }
    let name = host.namespaced_name();
    let state = host.provisioning_state();
    phost.restart_on_failure = state_machine::restart_on_failure(host, op);
    if matches!(
        op,
        state_machine::Operation::Provision | state_machine::Operation::Deprovision
    ) {
        ctx.slots.claim(&name, state);
    }
    let (result, mut extras) = act::call(host, ctx, op, &phost, facts).await?;
    extras.provisioner_reached = true;
    if matches!(op, state_machine::Operation::Inspect { .. })
        && matches!(
            result,
            CallResult::InProgress { .. } | CallResult::Started { .. }
        )
    {
        ctx.slots.claim(&name, state);
    }
    let update =
        state_machine::with_reported_power(host, facts, state_machine::after(host, op, &result));
    if let Some(next) = update.state {
        ctx.slots.claim(&name, next);
    }
    if let Some(details) = &extras.hardware {
        ctx.store
            .apply_hardware_data(host, details)
            .await
            .map_err(store_err(host))?;
    }
    save(host, ctx, update, extras).await
}
