//! Carrying out a planned provisioner call and reporting its result.

use std::time::Duration;

use crate::api::{BareMetalHost, CurrentStep};
use crate::metrics::Metrics;
use crate::provisioner::{self, InspectStatus, Outcome, PowerMode, Progress, Provisioner};

use super::context::{Context, host_labels};
use super::errors::{ReconcileError, store_err};
use super::request::{prepare_request, provision_request, service_request};
use super::save::Extras;
use super::state_machine::{CallResult, Facts, Operation, PendingUpdates};
use super::store::Store;

/// A provisioner outcome as the state machine sees it.
pub fn call_result<T>(outcome: &Outcome<T>) -> CallResult {
    if let Some(error) = &outcome.error {
        CallResult::Failed(error.clone())
    } else if let Some(after) = outcome.requeue_after {
        CallResult::InProgress {
            after,
            changed: outcome.changed,
        }
    } else {
        CallResult::Done
    }
}

/// Records the step the provisioner reports as running, for the status and the
/// conditions.
fn running(extras: &mut Extras, step: Option<&CurrentStep>) {
    extras.progress = step.map(|s| format!("running {} step {}", s.kind, s.name));
    extras.step = step.cloned();
}

/// Makes the call `op` for `host`; the result, and what the save records besides.
pub async fn call<P: Provisioner, S: Store>(
    host: &BareMetalHost,
    ctx: &Context<P, S>,
    op: Operation,
    phost: &provisioner::Host,
    facts: &Facts,
) -> Result<(CallResult, Extras), ReconcileError> {
    let p = &ctx.provisioner;
    let mut extras = Extras::default();
    let result = match op {
        Operation::Register => call_result(&p.register(phost).await?),
        Operation::Inspect { refresh } => inspect(ctx, phost, refresh, &mut extras).await?,
        Operation::Prepare => {
            prepare_or_service(false, host, ctx, phost, facts, &mut extras).await?
        }
        Operation::Service => {
            prepare_or_service(true, host, ctx, phost, facts, &mut extras).await?
        }
        Operation::Provision => {
            let request = provision_request(host, &ctx.store, &ctx.metrics)
                .await
                .map_err(store_err(host))?;
            let outcome = p.provision(phost, &request).await?;
            running(&mut extras, outcome.value.current_step.as_ref());
            call_result(&outcome)
        }
        Operation::Deprovision => {
            let outcome = p.deprovision(phost).await?;
            running(&mut extras, outcome.value.current_step.as_ref());
            call_result(&outcome)
        }
        Operation::Adopt => adopt(host, ctx, phost).await?,
        Operation::PowerOn => {
            let outcome = p.power_on(phost).await?;
            count_power_change(&ctx.metrics, host, outcome.changed, true);
            call_result(&outcome)
        }
        Operation::PowerOff { hard } => {
            let mode = if hard {
                PowerMode::Hard
            } else {
                PowerMode::Soft
            };
            let outcome = p.power_off(phost, mode).await?;
            count_power_change(&ctx.metrics, host, outcome.changed, false);
            call_result(&outcome)
        }
        Operation::Detach => call_result(&p.detach(phost).await?),
        Operation::Delete => call_result(&p.delete(phost).await?),
    };
    Ok((result, extras))
}

/// Inspects the host; the hardware details, with the lease table's NIC details, go
/// into `extras` once inspection is complete.
async fn inspect<P: Provisioner, S: Store>(
    ctx: &Context<P, S>,
    phost: &provisioner::Host,
    refresh: bool,
    extras: &mut Extras,
) -> Result<CallResult, ReconcileError> {
    let outcome = ctx.provisioner.inspect(phost, refresh).await?;
    if let InspectStatus::Complete(details) = &outcome.value {
        let mut details = details.as_ref().clone();
        ctx.add_lease_details(&mut details);
        extras.hardware = Some(details);
    }
    let after = outcome.requeue_after.unwrap_or(Duration::from_secs(10));
    let running = matches!(
        outcome.value,
        InspectStatus::Started | InspectStatus::InProgress
    );
    // The Progressing condition's message stays the state's own ("host is
    // inspecting"): once inspection started, saying it again in other
    // words would be a status write that tells nothing new.
    Ok(if running && outcome.error.is_none() {
        if matches!(outcome.value, InspectStatus::Started) {
            CallResult::Started { after }
        } else {
            CallResult::InProgress {
                after,
                changed: outcome.changed,
            }
        }
    } else {
        call_result(&outcome)
    })
}

/// Prepares the host with the RAID, BIOS settings and firmware updates it asks for,
/// or services a provisioned one with what its policy allows. The firmware updates
/// are recorded once the clean or service steps run, as upstream, so that they are
/// not started again once the steps are over.
async fn prepare_or_service<P: Provisioner, S: Store>(
    servicing: bool,
    host: &BareMetalHost,
    ctx: &Context<P, S>,
    phost: &provisioner::Host,
    facts: &Facts,
    extras: &mut Extras,
) -> Result<CallResult, ReconcileError> {
    let (outcome, updates, flashing) = if servicing {
        let (settings, updates) = super::state_machine::servicing::allowed_changes(facts);
        let request = service_request(&settings, &updates, facts.firmware_spec_set);
        let outcome = ctx.provisioner.service(phost, &request).await?;
        (outcome, updates, !request.firmware_updates.is_empty())
    } else {
        let request = prepare_request(host, &facts.firmware, &facts.firmware_updates);
        let outcome = ctx.provisioner.prepare(phost, &request).await?;
        let flashing = !request.firmware_updates.is_empty();
        (outcome, facts.firmware_updates.clone(), flashing)
    };
    // A failed call forgets the recorded updates: any when preparing, only those it
    // was flashing when servicing.
    let forget = outcome.error.is_some() && (flashing || !servicing);
    let started = outcome.value.started && flashing;
    track_firmware_updates(host, ctx, &updates, started, forget).await?;
    running(extras, outcome.value.current_step.as_ref());
    Ok(started_or_result(&outcome))
}

/// Records the firmware updates `updates` applies once the steps flashing them
/// `started`, and forgets the recorded ones when told to (a failed call).
async fn track_firmware_updates<P: Provisioner, S: Store>(
    host: &BareMetalHost,
    ctx: &Context<P, S>,
    updates: &PendingUpdates,
    started: bool,
    forget: bool,
) -> Result<(), ReconcileError> {
    if let PendingUpdates::Apply { spec, .. } = updates
        && started
    {
        ctx.store
            .record_firmware_updates(host, spec)
            .await
            .map_err(store_err(host))?;
    }
    if forget {
        ctx.store
            .forget_firmware_updates(host)
            .await
            .map_err(store_err(host))?;
    }
    Ok(())
}

/// `Started` when this call began the clean or service steps (the state machine
/// records what they apply), else what the outcome says.
fn started_or_result(outcome: &Outcome<Progress>) -> CallResult {
    match outcome.requeue_after {
        Some(after) if outcome.value.started && outcome.error.is_none() => {
            CallResult::Started { after }
        }
        _ => call_result(outcome),
    }
}

/// Adopts the host with its image and config data.
pub async fn adopt<P: Provisioner, S: Store>(
    host: &BareMetalHost,
    ctx: &Context<P, S>,
    phost: &provisioner::Host,
) -> Result<CallResult, ReconcileError> {
    let request = provision_request(host, &ctx.store, &ctx.metrics)
        .await
        .map_err(store_err(host))?;
    Ok(call_result(&ctx.provisioner.adopt(phost, &request).await?))
}

fn count_power_change(metrics: &Metrics, host: &BareMetalHost, changed: bool, on: bool) {
    if changed {
        metrics.power_change(&host_labels(host), on);
    }
}
