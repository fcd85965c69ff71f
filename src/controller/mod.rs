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
pub mod discovery;
pub mod mapping;
pub mod request;
mod run;
pub mod save;
pub mod secrets;
pub mod state_machine;
pub mod status_annotations;
pub mod store;
#[cfg(test)]
mod tests;

use std::hash::{BuildHasher, Hasher};
use std::sync::Arc;
use std::time::Duration;

use kube::ResourceExt;
use kube::runtime::controller::Action;
use tracing::Instrument;

use crate::api::BareMetalHost;
use crate::metrics::{self, HostLabels, Metrics};
use crate::netboot::DeployImages;
use crate::netboot::leases::LeaseTable;
use crate::provisioner::{DeployRamdisk, Provisioner, ProvisionerError};
use capacity::Slots;
pub use run::run;
use save::{Extras, save};
use state_machine::{AfterRegistration, CallResult, CredentialsCheck, Facts, Gate, Step};
pub use store::{FIELD_MANAGER, KubeStore, SECRET_LABEL, Store, StoreError};

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
    pub deploy_ramdisk: DeployRamdisk,
}

/// When to look at a host again (unless a watch event comes first).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    After(Duration),
    OnChange,
}

impl From<Next> for Action {
    fn from(next: Next) -> Self {
        match next {
            Next::After(d) => Action::requeue(d),
            Next::OnChange => Action::await_change(),
        }
    }
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

/// What every reconcile shares.
pub struct Context<P, S = KubeStore> {
    pub provisioner: P,
    pub store: S,
    pub settings: ControllerSettings,
    /// What `/metrics` exports.
    pub metrics: Arc<Metrics>,
    /// What bmo's DHCP server learned, when it runs: NICs in the hardware details get
    /// their DHCP hostname and leased address from it.
    pub leases: Option<LeaseTable>,
    /// bmo's own IPA kernel and ramdisk URLs, for what `DEPLOY_KERNEL_URL` and
    /// `DEPLOY_RAMDISK_URL` leave unset; they follow the provisioning IP.
    pub deploy_images: Option<DeployImages>,
    slots: Slots,
}

impl<P: Provisioner> Context<P> {
    /// A context writing to the cluster `client` talks to, with events from no
    /// named instance (`bmo run` names it with `POD_NAME`, through [`Self::with_store`]).
    pub fn new(client: kube::Client, provisioner: P, settings: ControllerSettings) -> Self {
        Self::with_store(KubeStore::new(client, None), provisioner, settings)
    }
}

impl<P: Provisioner, S: Store> Context<P, S> {
    /// A context writing through `store`.
    pub fn with_store(store: S, provisioner: P, settings: ControllerSettings) -> Self {
        Self {
            provisioner,
            store,
            settings,
            metrics: Arc::new(Metrics::new()),
            leases: None,
            deploy_images: None,
            slots: Slots::default(),
        }
    }

    /// Counts into `metrics` (shared with the `/metrics` endpoint) instead of a
    /// registry of its own.
    pub fn with_metrics(mut self, metrics: Arc<Metrics>) -> Self {
        self.metrics = metrics;
        self
    }

    /// Fills hardware details from `leases` (bmo's DHCP server's lease table).
    pub fn with_leases(mut self, leases: LeaseTable) -> Self {
        self.leases = Some(leases);
        self
    }

    /// Points nodes at `images` unless the settings name a kernel and ramdisk; every
    /// host is reconciled again when their address changes.
    pub fn with_deploy_images(mut self, images: DeployImages) -> Self {
        self.deploy_images = Some(images);
        self
    }

    /// The deploy ramdisk as of now: the settings, else bmo's own images on the
    /// provisioning IP in use.
    fn deploy_ramdisk(&self) -> DeployRamdisk {
        let mut ramdisk = self.settings.deploy_ramdisk.clone();
        if let Some(images) = &self.deploy_images {
            ramdisk
                .kernel_url
                .get_or_insert_with(|| images.kernel_url());
            ramdisk
                .ramdisk_url
                .get_or_insert_with(|| images.ramdisk_url());
        }
        ramdisk
    }

    /// Adds lease details (DHCP hostname, leased address) to `details`; whether
    /// anything changed.
    fn add_lease_details(&self, details: &mut crate::api::HardwareDetails) -> bool {
        match &self.leases {
            Some(leases) => mapping::add_lease_details(details, |mac| leases.get(mac)),
            None => false,
        }
    }
}

/// `2^min(count, 9)` minutes less up to half of it, capped at `max`.
pub fn backoff(error_count: i64, max: Duration) -> Duration {
    let exp = u32::try_from(error_count.clamp(0, 9)).unwrap_or(9);
    let full = Duration::from_secs(60 * (1u64 << exp)).min(max);
    let random = std::hash::RandomState::new().build_hasher().finish();
    let fraction = 0.5 + (random % 500) as f64 / 1000.0;
    full.mul_f64(fraction).max(Duration::from_secs(1))
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
    ctx.metrics.reconcile(&host_labels(&host));
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

/// One reconcile of `host`: load, decide, act, store.
pub async fn reconcile_host<P: Provisioner, S: Store>(
    host: &BareMetalHost,
    ctx: &Context<P, S>,
) -> Result<Next, ReconcileError> {
    let gate = state_machine::gate(host);
    if gate == Gate::Paused {
        tracing::debug!("paused; leaving the host alone");
        return Ok(Next::OnChange);
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
    if status_annotations::take_in(host, &ctx.store)
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
        Gate::Released | Gate::Paused => return Ok(Next::OnChange),
        Gate::Proceed => {}
    }
    let name = host.namespaced_name();
    let state = host.provisioning_state();
    let deleting = host.metadata.deletion_timestamp.is_some();
    // A DHCP exchange after inspection (a renewal, the provisioned OS) reaches the
    // stored hardware details on the next reconcile; nothing else changes.
    if !deleting
        && let Some(mut details) = host.status.as_ref().and_then(|s| s.hardware.clone())
        && ctx.add_lease_details(&mut details)
    {
        tracing::info!("NIC DHCP details updated from the lease table");
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
    let credentials_changed = loaded.version.is_some() && loaded.version != previous_version;
    if credentials_changed && previous_version.is_some() {
        ctx.metrics.count(metrics::Event::CredentialsUpdated);
    }
    let phost = match mapping::host_input(
        host,
        loaded.credentials,
        credentials_changed,
        &ctx.deploy_ramdisk(),
    ) {
        Ok(h) => Some(h),
        Err(e) => match state_machine::spec_error(host, e.to_string()) {
            Some(update) => return save(host, ctx, update, Extras::default()).await,
            None => None,
        },
    };

    let mut facts = Facts {
        credentials: loaded.check,
        power: None,
        has_capacity: ctx
            .slots
            .has_capacity(&name, state, ctx.settings.provisioning_limit),
        reboot: state_machine::reboot_request(host),
    };

    // Registration is checked on every reconcile: it re-creates a vanished node and
    // sends changed credentials.
    let mut provisioner_reached = false;
    if let Some(phost) = phost.as_ref()
        && state_machine::needs_registration(host)
        && facts.credentials == CredentialsCheck::Valid
    {
        let outcome = ctx.provisioner.register(phost).await?;
        provisioner_reached = true;
        if !outcome.is_done() {
            ctx.metrics.count(metrics::Event::HostRegistrationRequired);
        }
        let result = act::call_result(&outcome);
        match state_machine::after_registration(host, &result, outcome.value.deployed) {
            AfterRegistration::Save(update) => {
                let extras = Extras {
                    provisioning_id: outcome.value.provisioning_id.clone(),
                    credentials: Some((loaded.version, result == CallResult::Done)),
                    provisioner_reached: true,
                    ..Default::default()
                };
                return save(host, ctx, update, extras).await;
            }
            AfterRegistration::Adopt => {
                let adopted = act::adopt(host, ctx, phost).await?;
                if let Some(update) = state_machine::after_adoption(host, &adopted) {
                    let extras = Extras {
                        provisioner_reached,
                        ..Default::default()
                    };
                    return save(host, ctx, update, extras).await;
                }
            }
            AfterRegistration::Proceed => {}
        }
        facts.power = state_machine::observed_power(host, outcome.value.power);
    }

    let step = match (state_machine::plan(host, &facts), &phost) {
        (Step::Call(op), None) => state_machine::without_provisioner(op),
        (step, _) => step,
    };
    tracing::debug!(?step, %state, "planned");
    let reached = || Extras {
        provisioner_reached,
        ..Default::default()
    };
    match step {
        Step::Transition(update) => save(host, ctx, update, reached()).await,
        Step::Wait(after) => {
            if deleting && state_machine::delete_delayed_by_detach(host) {
                ctx.metrics.count(metrics::Event::DeleteDelayedForDetached);
            }
            // The provisioner answers again: say so, though nothing else changed.
            if provisioner_reached
                && host
                    .status
                    .as_ref()
                    .is_some_and(|s| conditions::unreachable(s).is_some())
            {
                let update = state_machine::Update {
                    requeue: state_machine::Requeue::After(after),
                    ..Default::default()
                };
                return save(host, ctx, update, reached()).await;
            }
            Ok(Next::After(after))
        }
        Step::Call(op) => {
            let Some(mut phost) = phost else {
                return Ok(Next::After(state_machine::STEADY_POLL));
            };
            phost.restart_on_failure = state_machine::restart_on_failure(host, op);
            if matches!(
                op,
                state_machine::Operation::Provision | state_machine::Operation::Deprovision
            ) {
                ctx.slots.claim(&name, state);
            }
            let (result, mut extras) = act::call(host, ctx, op, &phost).await?;
            extras.provisioner_reached = true;
            if matches!(op, state_machine::Operation::Inspect { .. })
                && matches!(result, CallResult::InProgress { .. })
            {
                ctx.slots.claim(&name, state);
            }
            let update = state_machine::after(host, op, &result);
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
    }
}
