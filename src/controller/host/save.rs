//! Saving a step's [`Update`]: the status (only when it changed), conditions, metrics,
//! the event, consumed annotations, and the requeue.

use std::time::Duration;

use k8s_openapi::api::core::v1::SecretReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;

use super::context::{Context, host_labels};
use super::errors::{ReconcileError, store_err};
use super::state_machine::{self, ErrorChange, Requeue, Update};
use super::store::{HostEvent, Store};
use super::{conditions, secrets};
use crate::api::host::{INSPECT_ANNOTATION, REBOOT_ANNOTATION_PREFIX};
use crate::api::{
    BareMetalHost, BareMetalHostStatus, CredentialsStatus, CurrentStep, HardwareDetails,
    OperationalStatus, ProvisioningState as State,
};
use crate::controller::runtime::{Next, backoff};
use crate::ironic::IronicError;
use crate::metrics::{self, TimedOperation};
use crate::provisioner::Provisioner;

/// What a save records besides the update itself.
#[derive(Debug, Default)]
pub struct Extras {
    /// The provisioner's id for the host (Ironic node UUID).
    pub provisioning_id: Option<String>,
    /// The BMC Secret's resourceVersion as tried, and whether it worked.
    pub credentials: Option<(Option<String>, bool)>,
    pub hardware: Option<HardwareDetails>,
    /// What the provisioner is doing now, for the conditions.
    pub progress: Option<String>,
    /// The Ironic step running now; the status shows it until a save without one.
    pub step: Option<CurrentStep>,
    /// The provisioner answered during this reconcile: a condition saying it cannot
    /// be reached is dropped.
    pub provisioner_reached: bool,
}

/// Applies `update` to the status, recomputes conditions, writes the status when it
/// changed, publishes the event and removes annotations the update consumed.
pub async fn save<P: Provisioner, S: Store>(
    host: &BareMetalHost,
    ctx: &Context<P, S>,
    update: Update,
    extras: Extras,
) -> Result<Next, ReconcileError> {
    if update.release {
        return release(host, ctx, &update).await;
    }
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    let before: BareMetalHostStatus = host.status.clone().unwrap_or_default();
    let mut status = updated_status(host, &before, &update, extras, &now);
    // An unchanged status is not written: the write would wake nobody usefully and
    // costs the API server a watch event.
    if status != before {
        if tracing::enabled!(tracing::Level::DEBUG) {
            tracing::debug!(fields = ?changed_fields(&before, &status), "writing the status");
        }
        status.last_updated = Some(now.clone());
        ctx.store
            .apply_status(host, &status)
            .await
            .map_err(store_err(host))?;
    }
    if status.provisioning.state != before.provisioning.state {
        tracing::info!(from = %before.provisioning.state, to = %status.provisioning.state, "state changed");
    }
    record_metrics(host, ctx, &update, &before, &status, &now);
    publish_events(host, ctx, &update, &before, &status).await;
    remove_consumed_annotations(host, ctx, &update).await?;
    Ok(match update.requeue {
        Requeue::Now => Next::After(Duration::from_millis(200)),
        Requeue::After(d) => Next::After(d),
        Requeue::Backoff => Next::After(backoff(status.error_count, ctx.settings.max_backoff)),
        Requeue::OnChange => Next::OnChange,
    })
}

/// The status `before` with `update` applied, what `extras` records, and the
/// conditions computed again.
fn updated_status(
    host: &BareMetalHost,
    before: &BareMetalHostStatus,
    update: &Update,
    extras: Extras,
    now: &Time,
) -> BareMetalHostStatus {
    let mut status = before.clone();
    state_machine::apply(host, &mut status, update, now);
    if let Some(id) = extras.provisioning_id.filter(|id| !id.is_empty()) {
        status.provisioning.id = id;
    }
    if let Some((version, worked)) = extras.credentials {
        let record = CredentialsStatus {
            credentials: host.spec.bmc.as_ref().map(|b| SecretReference {
                name: Some(b.credentials_name.clone()),
                namespace: host.namespace(),
            }),
            credentials_version: version,
        };
        status.tried_credentials = Some(record.clone());
        if worked {
            status.good_credentials = Some(record);
        }
    }
    if let Some(details) = extras.hardware {
        status.hardware = Some(details);
    }
    status.provisioning.current_step = extras.step;
    status.conditions = conditions::compute(
        &status,
        host.metadata.generation,
        extras.progress.as_deref(),
        extras.provisioner_reached,
        now,
    );
    status
}

/// Publishes the update's event, and announces newly accepted credentials.
async fn publish_events<P: Provisioner, S: Store>(
    host: &BareMetalHost,
    ctx: &Context<P, S>,
    update: &Update,
    before: &BareMetalHostStatus,
    status: &BareMetalHostStatus,
) {
    // Upstream announces each credentials version the BMC accepted.
    if status.good_credentials.is_some() && status.good_credentials != before.good_credentials {
        let event = HostEvent {
            reason: "BMCAccessValidated".to_owned(),
            message: "Verified access to BMC".to_owned(),
            warning: false,
        };
        ctx.store.publish(host, event).await;
    }
    if let Some(event) = host_event(update) {
        ctx.store.publish(host, event).await;
    }
}

/// Removes the annotations the update consumed (a one-shot reboot, a re-inspection).
async fn remove_consumed_annotations<P: Provisioner, S: Store>(
    host: &BareMetalHost,
    ctx: &Context<P, S>,
    update: &Update,
) -> Result<(), ReconcileError> {
    let mut consumed = Vec::new();
    let annotations = host.annotations();
    if update.clear_reboot && annotations.contains_key(REBOOT_ANNOTATION_PREFIX) {
        consumed.push(REBOOT_ANNOTATION_PREFIX);
    }
    if update.clear_inspect_annotation && annotations.contains_key(INSPECT_ANNOTATION) {
        consumed.push(INSPECT_ANNOTATION);
    }
    ctx.store
        .remove_annotations(host, &consumed)
        .await
        .map_err(store_err(host))
}

/// The status fields that differ between `before` and `after`, by JSON name, one
/// level into `provisioning` and by type for `conditions` (for the debug log).
fn changed_fields(before: &BareMetalHostStatus, after: &BareMetalHostStatus) -> Vec<String> {
    let to_map = |status: &BareMetalHostStatus| match serde_json::to_value(status) {
        Ok(serde_json::Value::Object(map)) => map,
        _ => serde_json::Map::new(),
    };
    let (before, after) = (to_map(before), to_map(after));
    let mut keys: Vec<&String> = before.keys().chain(after.keys()).collect();
    keys.sort();
    keys.dedup();
    let mut changed = Vec::new();
    for key in keys {
        let (old, new) = (before.get(key), after.get(key));
        if old == new {
            continue;
        }
        match (key.as_str(), old, new) {
            (
                "provisioning",
                Some(serde_json::Value::Object(old)),
                Some(serde_json::Value::Object(new)),
            ) => {
                let mut inner: Vec<&String> = old.keys().chain(new.keys()).collect();
                inner.sort();
                inner.dedup();
                changed.extend(
                    inner
                        .into_iter()
                        .filter(|k| old.get(*k) != new.get(*k))
                        .map(|k| format!("provisioning.{k}")),
                );
            }
            (
                "conditions",
                Some(serde_json::Value::Array(old)),
                Some(serde_json::Value::Array(new)),
            ) => {
                let kind = |c: &serde_json::Value| {
                    c.get("type")
                        .and_then(|t| t.as_str())
                        .unwrap_or("?")
                        .to_owned()
                };
                changed.extend(
                    new.iter()
                        .filter(|c| !old.contains(c))
                        .map(|c| format!("conditions.{}", kind(c))),
                );
            }
            _ => changed.push(key.clone()),
        }
    }
    changed
}

/// How long a host waits before it tries an unreachable provisioner again. Short and
/// fixed: an outage of Ironic is not the host's error, so it neither counts in
/// `errorCount` nor grows the host's backoff, and hosts resume within this long once
/// Ironic answers again.
pub const UNREACHABLE_RETRY: Duration = Duration::from_secs(10);

/// The provisioner could not be reached: the host's [`conditions::PROVISIONER_REACHABLE`]
/// condition says so with `error` (which names the endpoint, never credentials),
/// written only when it changed. The error fields and `errorCount` stay as they are;
/// the host is looked at again after [`UNREACHABLE_RETRY`].
pub async fn provisioner_unreachable<P: Provisioner, S: Store>(
    host: &BareMetalHost,
    ctx: &Context<P, S>,
    error: &IronicError,
) -> Result<Next, ReconcileError> {
    let message = format!(
        "{}; trying again every {} s",
        error.with_causes(),
        UNREACHABLE_RETRY.as_secs()
    );
    tracing::warn!("{message}");
    ctx.metrics.count(metrics::Event::ReconcileError);
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    let mut status: BareMetalHostStatus = host.status.clone().unwrap_or_default();
    let conditions =
        conditions::set_unreachable(&status.conditions, &message, host.metadata.generation, &now);
    if conditions != status.conditions {
        status.conditions = conditions;
        status.last_updated = Some(now);
        ctx.store
            .apply_status(host, &status)
            .await
            .map_err(store_err(host))?;
    }
    Ok(Next::After(UNREACHABLE_RETRY))
}

fn host_event(update: &Update) -> Option<HostEvent> {
    update
        .event
        .as_ref()
        .map(|(reason, message, warning)| HostEvent {
            reason: reason.clone(),
            message: message.clone(),
            warning: *warning,
        })
}

/// The host is gone from the provisioner: free its slot and metrics, and remove bmo's
/// finalizer so Kubernetes can delete it.
async fn release<P: Provisioner, S: Store>(
    host: &BareMetalHost,
    ctx: &Context<P, S>,
    update: &Update,
) -> Result<Next, ReconcileError> {
    ctx.slots.claim(&host.namespaced_name(), State::Deleting);
    ctx.metrics.forget_host(
        &host_labels(host),
        host.metadata.uid.as_deref().unwrap_or_default(),
    );
    if let Some(event) = host_event(update) {
        ctx.store.publish(host, event).await;
    }
    secrets::release(host, &ctx.store, &secrets::finalized_secret_names(host))
        .await
        .map_err(store_err(host))?;
    ctx.store
        .remove_finalizer(host)
        .await
        .map_err(store_err(host))?;
    Ok(Next::OnChange)
}

/// Counts what a status update shows: a state change (and how long the state it
/// leaves lasted), a new error, a delay by the provisioning limit.
fn record_metrics<P: Provisioner, S: Store>(
    host: &BareMetalHost,
    ctx: &Context<P, S>,
    update: &Update,
    before: &BareMetalHostStatus,
    after: &BareMetalHostStatus,
    now: &Time,
) {
    let labels = host_labels(host);
    let (old, new) = (before.provisioning.state, after.provisioning.state);
    if old != new {
        ctx.metrics.state_change(&old.to_string(), &new.to_string());
        if new == State::Unmanaged {
            ctx.metrics.count(metrics::Event::HostUnmanaged);
        }
        let history = before.operation_history.as_ref();
        let timed = history.and_then(|h| match old {
            State::Registering => Some((TimedOperation::Register, h.register.as_ref())),
            State::Inspecting => Some((TimedOperation::Inspect, h.inspect.as_ref())),
            State::Provisioning => Some((TimedOperation::Provision, h.provision.as_ref())),
            State::Deprovisioning => Some((TimedOperation::Deprovision, h.deprovision.as_ref())),
            _ => None,
        });
        if let Some((op, Some(metric))) = timed
            && let Some(start) = &metric.start
        {
            let seconds = now.0.duration_since(start.0).as_secs_f64();
            if seconds >= 0.0 {
                ctx.metrics.operation_duration(&labels, op, seconds);
            }
        }
    }
    if matches!(&update.event, Some((reason, _, _)) if reason == "DeprovisioningSkipped") {
        ctx.metrics
            .count(metrics::Event::DeleteWithoutDeprovisioning);
    }
    if let (ErrorChange::Set(..), Some((reason, _, true))) = (&update.error, &update.event) {
        ctx.metrics.host_error(reason);
    }
    if after.operational_status == OperationalStatus::Delayed
        && before.operational_status != OperationalStatus::Delayed
    {
        ctx.metrics.delayed(&labels, new == State::Deprovisioning);
    }
}
