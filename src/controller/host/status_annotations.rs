//! What brings status in from outside, as upstream: the status annotation saved
//! before a move between clusters, and hardware details inspected by other means,
//! by annotation or, for a host that does not inspect, in the HardwareData of its
//! name. Each annotation is consumed (removed) once looked at.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;

use super::store::{HostEvent, Store, StoreError};
use crate::api::host::{HARDWARE_DETAILS_ANNOTATION, STATUS_ANNOTATION};
use crate::api::{BareMetalHost, BareMetalHostStatus, HardwareDetails};
use crate::provisioner::{HostId, NodeOwners};

fn event(reason: &str, message: String, warning: bool) -> HostEvent {
    HostEvent {
        reason: reason.into(),
        message,
        warning,
    }
}

/// Tells the user that an annotation did not parse; it is removed all the same.
async fn report_invalid<S: Store>(
    store: &S,
    host: &BareMetalHost,
    annotation: &str,
    expected: &str,
    e: &serde_json::Error,
) {
    let message = format!("annotation {annotation} is not {expected} ({e}); ignored and removed");
    store
        .publish(host, event("InvalidAnnotation", message, true))
        .await;
}

/// The other host that owns the node `restored` records, if any: such a status is
/// refused whole.
fn claims_other_node(
    host: &BareMetalHost,
    restored: &BareMetalHostStatus,
    owners: Option<&dyn NodeOwners>,
) -> Option<HostId> {
    let id = restored.provisioning.id.as_str();
    if id.is_empty() {
        return None;
    }
    let this = HostId::new(host.namespace().unwrap_or_default(), host.name_any());
    owners?.other_owner(&this, id, None)
}

/// Takes in the status or hardware-details annotation, if the host has one; whether it
/// did (the reconcile then starts again from the new state). A status naming a node
/// that another host owns (`owners`) is refused with a warning event naming both.
pub async fn take_in<S: Store>(
    host: &BareMetalHost,
    store: &S,
    owners: Option<&dyn NodeOwners>,
) -> Result<bool, StoreError> {
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    if let Some(raw) = host.annotations().get(STATUS_ANNOTATION) {
        let never_saved = host
            .status
            .as_ref()
            .and_then(|s| s.last_updated.as_ref())
            .is_none();
        if never_saved {
            restore_status(host, store, owners, raw, now).await?;
        }
        store.remove_annotations(host, &[STATUS_ANNOTATION]).await?;
        return Ok(true);
    }
    if let Some(raw) = host.annotations().get(HARDWARE_DETAILS_ANNOTATION) {
        take_in_hardware_details(host, store, raw, now).await?;
        store
            .remove_annotations(host, &[HARDWARE_DETAILS_ANNOTATION])
            .await?;
        return Ok(true);
    }
    take_in_hardware_data(host, store, now).await
}

/// A host that does not inspect takes its hardware details from the HardwareData of
/// its name when that holds other details than its status (inspected by other
/// means, or made before the host); whether it did.
async fn take_in_hardware_data<S: Store>(
    host: &BareMetalHost,
    store: &S,
    now: Time,
) -> Result<bool, StoreError> {
    if !host.inspection_disabled() || host.metadata.deletion_timestamp.is_some() {
        return Ok(false);
    }
    let mut status = host.status.clone().unwrap_or_default();
    let Some(details) = store.hardware_data(host).await? else {
        return Ok(false);
    };
    if status.hardware.as_ref() == Some(&details) {
        return Ok(false);
    }
    status.hardware = Some(details);
    status.last_updated = Some(now);
    store.apply_status(host, &status).await?;
    let message = format!(
        "hardware details taken from HardwareData {}",
        host.namespaced_name()
    );
    store
        .publish(host, event("UpdateHardwareDetails", message, false))
        .await;
    Ok(true)
}

/// Restores the status saved in the status annotation `raw`, unless it names a node
/// another host owns or does not parse.
async fn restore_status<S: Store>(
    host: &BareMetalHost,
    store: &S,
    owners: Option<&dyn NodeOwners>,
    raw: &str,
    now: Time,
) -> Result<(), StoreError> {
    match serde_json::from_str::<BareMetalHostStatus>(raw) {
        Ok(restored) if let Some(owner) = claims_other_node(host, &restored, owners) => {
            let message = format!(
                "annotation {STATUS_ANNOTATION} names Ironic node {} of host {owner}; host {} cannot take it over, so the status was not restored and the annotation is removed",
                restored.provisioning.id,
                host.namespaced_name()
            );
            store
                .publish(host, event("StatusAnnotationRefused", message, true))
                .await;
        }
        Ok(mut restored) => {
            // The HardwareData object, when there is one, wins for the hardware.
            if let Some(hardware) = store.hardware_data(host).await? {
                restored.hardware = Some(hardware);
            }
            restored.last_updated = Some(now);
            store.apply_status(host, &restored).await?;
            let message = format!("status restored from the {STATUS_ANNOTATION} annotation");
            store
                .publish(host, event("StatusRestored", message, false))
                .await;
        }
        Err(e) => {
            report_invalid(store, host, STATUS_ANNOTATION, "a BareMetalHost status", &e).await
        }
    }
    Ok(())
}

/// Stores the hardware details of the annotation `raw` when the host has none or
/// does not inspect; otherwise says that the annotation is ignored.
async fn take_in_hardware_details<S: Store>(
    host: &BareMetalHost,
    store: &S,
    raw: &str,
    now: Time,
) -> Result<(), StoreError> {
    let status = host.status.clone().unwrap_or_default();
    if status.hardware.is_some() && !host.inspection_disabled() {
        let message = format!(
            "annotation {HARDWARE_DETAILS_ANNOTATION} ignored: the host has inspection data and inspection is not disabled"
        );
        store
            .publish(host, event("RemoveAnnotation", message, false))
            .await;
        return Ok(());
    }
    match serde_json::from_str::<HardwareDetails>(raw) {
        Ok(details) => {
            store.apply_hardware_data(host, &details).await?;
            let mut status = status;
            status.hardware = Some(details);
            status.last_updated = Some(now);
            store.apply_status(host, &status).await?;
            let message =
                format!("hardware details taken from the {HARDWARE_DETAILS_ANNOTATION} annotation");
            store
                .publish(host, event("UpdateHardwareDetails", message, false))
                .await;
        }
        Err(e) => {
            report_invalid(
                store,
                host,
                HARDWARE_DETAILS_ANNOTATION,
                "hardware details",
                &e,
            )
            .await
        }
    }
    Ok(())
}
