//! One reconcile of a host: the gate (paused, moved away, the finalizer), the fields
//! and status annotations bmo takes over, then what [`load`] reads, and the state
//! machine's steps carried out one by one until one saves or waits.

use std::sync::Arc;
use std::time::Duration;

use kube::runtime::controller::Action;
use tracing::Instrument;

use super::context::{Context, host_labels};
use super::errors::{ReconcileError, store_err};
use super::load::{Loaded, load};
use super::save::{self, Extras, save};
use super::state_machine::{
    self, CallResult, Facts, Gate, RegistrationCheck, SpecProblem, Step, Update,
};
use super::store::Store;
use super::{act, legacy_firmware, status_annotations};
use crate::api::{
    BareMetalHost, HardwareDetails, HostUpdatePolicy, OperationalStatus, ProvisioningState,
};
use crate::controller::runtime::Next;
use crate::controller::runtime::seams::SeamError;
use crate::metrics;
use crate::provisioner::{self, NodeOwners, Provisioner};

/// How soon a reconcile that found its copy of the host older than the API server's
/// looks again (the watch usually brings the newer copy first, which wakes it).
const STALE_COPY_RETRY: Duration = Duration::from_millis(200);

pub(super) async fn reconcile<P: Provisioner, S: Store>(
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
        Err(e) if e.is_conflict() => Ok(Action::requeue(Duration::from_secs(1))),
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
    if let Some(next) = take_in_and_gate(host, ctx, gate).await? {
        return Ok(next);
    }
    let loaded = load(host, ctx).await?;
    if let Some(poll) = loaded.waiting_for_image {
        return Ok(Next::After(poll));
    }
    let mut steps = Steps::new(host, ctx, loaded);
    load_firmware(host, ctx, &mut steps.facts).await?;
    steps.run().await
}

/// Takes in the status annotations, writes a new host's first state and adds bmo's
/// finalizer; `Some` when that ends the reconcile (a write, which the next reconcile
/// sees, or nothing left to do).
async fn take_in_and_gate<P: Provisioner, S: Store>(
    host: &BareMetalHost,
    ctx: &Context<P, S>,
    gate: Gate,
) -> Result<Option<Next>, ReconcileError> {
    let owners = ctx.node_owners.get();
    if status_annotations::take_in(host, &ctx.store, owners.map(|o| o as &dyn NodeOwners))
        .await
        .map_err(store_err(host))?
    {
        return Ok(Some(Next::After(Duration::ZERO)));
    }
    match gate {
        Gate::AddFinalizer => {
            ctx.store
                .add_finalizer(host)
                .await
                .map_err(store_err(host))?;
            // A new host shows its state in the same reconcile, with nothing read for
            // it. (The finalizer goes first: its write, guarded by the resourceVersion
            // while the host has no finalizers, would fail after the status write.)
            Ok(Some(match state_machine::first_state(host) {
                Some(update) => save(host, ctx, update, Extras::default()).await?,
                None => Next::After(Duration::ZERO),
            }))
        }
        Gate::Released | Gate::Paused | Gate::MovedAway => Ok(Some(Next::OnChange)),
        Gate::Proceed => Ok(None),
    }
}

/// The steps of one reconcile and what they learned so far.
struct Steps<'a, P, S> {
    host: &'a BareMetalHost,
    ctx: &'a Context<P, S>,
    facts: Facts,
    /// The host as the provisioner takes it, or why the spec gives none.
    phost: Result<provisioner::Host, SpecProblem>,
    /// The stored hardware details with the lease table's NIC details, when those
    /// changed them.
    lease_details: Option<HardwareDetails>,
    /// The BMC Secret's resourceVersion.
    credentials_version: Option<String>,
    /// What the registration check found, saved with its update.
    registration: Extras,
    /// The node and its state digest as the registration check saw them.
    seen_node: Option<(String, u64)>,
}

impl<'a, P: Provisioner, S: Store> Steps<'a, P, S> {
    fn new(host: &'a BareMetalHost, ctx: &'a Context<P, S>, loaded: Loaded) -> Self {
        Self {
            host,
            ctx,
            facts: loaded.facts,
            phost: loaded.phost,
            lease_details: loaded.lease_details,
            credentials_version: loaded.credentials_version,
            registration: Extras::default(),
            seen_node: None,
        }
    }

    /// Asks the state machine for the next step and carries it out, until one saves
    /// or waits.
    async fn run(mut self) -> Result<Next, ReconcileError> {
        let (host, ctx) = (self.host, self.ctx);
        loop {
            let step = state_machine::next(host, &self.facts);
            tracing::debug!(?step, state = %host.provisioning_state(), "next step");
            match step {
                Step::SaveLeaseDetails => return self.save_lease_details().await,
                Step::CheckRegistration => {
                    if let Some(next) = self.check_registration().await? {
                        return Ok(next);
                    }
                }
                Step::SaveRegistration(update) => {
                    return save(host, ctx, update, self.registration).await;
                }
                Step::Readopt => {
                    let Ok(phost) = &self.phost else {
                        return Ok(Next::After(state_machine::STEADY_POLL));
                    };
                    self.facts.adoption = Some(act::adopt(host, ctx, phost).await?);
                }
                Step::Transition(update) => return self.transition(update).await,
                Step::Wait(after) => return Ok(self.wait(after)),
                Step::PrepareDataImage => {
                    if let Some(next) = prepare_data_image(host, ctx).await? {
                        return Ok(next);
                    }
                    self.facts.data_image_checked = true;
                }
                Step::Call(op) => {
                    let Ok(phost) = self.phost else {
                        return Ok(Next::After(state_machine::STEADY_POLL));
                    };
                    return call_and_save(host, ctx, op, phost, &self.facts).await;
                }
            }
        }
    }

    /// Stores the hardware details with the lease table's NIC details, and says so.
    async fn save_lease_details(self) -> Result<Next, ReconcileError> {
        let (host, ctx) = (self.host, self.ctx);
        tracing::info!("NIC DHCP details updated from the lease table");
        let Some(details) = self.lease_details else {
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
        save(host, ctx, Default::default(), extras).await
    }

    /// The registration check: its answer goes into the facts, and what the save
    /// records of it into `registration`; `Some` when the spec gives no host to check.
    async fn check_registration(&mut self) -> Result<Option<Next>, ReconcileError> {
        let (host, ctx) = (self.host, self.ctx);
        let Ok(phost) = &self.phost else {
            return Ok(Some(Next::After(state_machine::STEADY_POLL)));
        };
        let outcome = ctx.provisioner.register(phost).await?;
        if !outcome.is_done() {
            ctx.metrics.count(metrics::Event::HostRegistrationRequired);
        }
        let result = act::call_result(&outcome);
        self.seen_node = outcome
            .value
            .provisioning_id
            .clone()
            .zip(outcome.value.node_state);
        self.registration = Extras {
            provisioning_id: outcome.value.provisioning_id.clone(),
            // Credentials the provisioner could not send yet stay untried.
            // They are good once the provisioner reached the BMC with them.
            credentials: (!outcome.value.credentials_pending).then(|| {
                let good = outcome.value.credentials_valid && outcome.error.is_none();
                (self.credentials_version.clone(), good)
            }),
            provisioner_reached: true,
            ..Default::default()
        };
        self.facts.power = state_machine::observed_power(host, outcome.value.power);
        self.facts.reported_power = outcome.value.power.known();
        self.facts.registration = Some(RegistrationCheck {
            result,
            deployed: outcome.value.deployed,
        });
        Ok(None)
    }

    /// Saves a change of the status only.
    async fn transition(self, update: Update) -> Result<Next, ReconcileError> {
        let (host, ctx) = (self.host, self.ctx);
        if update.operational_status == Some(OperationalStatus::Delayed) {
            ctx.slots.wait(&host.namespaced_name());
        }
        let reached = Extras {
            provisioner_reached: self.facts.registration.is_some(),
            ..Default::default()
        };
        save(host, ctx, update, reached).await
    }

    /// Nothing to do: look again after `after`, or at rest ([`rest`]).
    fn wait(self, after: Duration) -> Next {
        let (host, ctx) = (self.host, self.ctx);
        if host.metadata.deletion_timestamp.is_some()
            && state_machine::delete_delayed_by_detach(host)
        {
            ctx.metrics.count(metrics::Event::DeleteDelayedForDetached);
        }
        if after == state_machine::STEADY_POLL {
            return rest(host, ctx, self.seen_node);
        }
        Next::After(after)
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
                .namesake::<HostUpdatePolicy>(host)
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

/// Makes the provisioner call `op` and saves what it leads to.
async fn call_and_save<P: Provisioner, S: Store>(
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
