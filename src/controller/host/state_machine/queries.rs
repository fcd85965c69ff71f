//! What a host's spec, status and annotations say, as the steps ask it.

use super::facts::Facts;
use super::step::Update;
use crate::api::{
    BareMetalHost, BareMetalHostStatus, CustomDeploy, Image, OperationalStatus,
    ProvisioningState as State,
};

pub(super) fn status(host: &BareMetalHost) -> BareMetalHostStatus {
    host.status.clone().unwrap_or_default()
}

pub(super) fn annotation<'a>(host: &'a BareMetalHost, key: &str) -> Option<&'a str> {
    host.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .map(String::as_str)
}

/// The image URL, when one is set and not empty.
fn image_url(image: Option<&Image>) -> Option<&str> {
    image.map(|i| i.url.as_str()).filter(|u| !u.is_empty())
}

/// The custom deploy method, when one is set (it may be empty).
fn deploy_method(custom_deploy: Option<&CustomDeploy>) -> Option<&str> {
    custom_deploy.map(|c| c.method.as_str())
}

/// The host should be provisioned with an image or custom deploy it does not have.
pub fn needs_provisioning(host: &BareMetalHost) -> bool {
    let st = status(host);
    if !host.spec.online {
        return false;
    }
    if let Some(method) = deploy_method(host.spec.custom_deploy.as_ref()).filter(|m| !m.is_empty())
    {
        return deploy_method(st.provisioning.custom_deploy.as_ref()) != Some(method);
    }
    image_url(host.spec.image.as_ref()).is_some()
        && image_url(st.provisioning.image.as_ref()).is_none()
}

/// The image or custom deploy in the spec no longer matches what was provisioned.
pub fn provisioning_cancelled(host: &BareMetalHost) -> bool {
    let st = status(host);
    let spec_url = image_url(host.spec.image.as_ref());
    let status_url = image_url(st.provisioning.image.as_ref());
    if let Some(method) = deploy_method(host.spec.custom_deploy.as_ref()).filter(|m| !m.is_empty())
    {
        let status_method = deploy_method(st.provisioning.custom_deploy.as_ref());
        return (status_method.is_some() && status_method != Some(method))
            || (status_url.is_some() && spec_url != status_url);
    }
    if st.provisioning.custom_deploy.is_some() {
        return true;
    }
    match spec_url {
        None => true,
        Some(url) => status_url.is_some_and(|s| s != url),
    }
}

pub(super) fn detached(host: &BareMetalHost) -> bool {
    annotation(host, crate::api::host::DETACHED_ANNOTATION).is_some()
}

/// The `deleteAction` of the detached annotation is `delay`.
pub fn delete_delayed_by_detach(host: &BareMetalHost) -> bool {
    annotation(host, crate::api::host::DETACHED_ANNOTATION)
        .and_then(|v| serde_json::from_str::<serde_json::Value>(v).ok())
        .and_then(|v| {
            v.get("deleteAction")
                .and_then(|a| a.as_str())
                .map(str::to_owned)
        })
        .is_some_and(|a| a == "delay")
}

/// Whether the provisioner must (re-)register the host before the state's own work.
pub fn needs_registration(host: &BareMetalHost) -> bool {
    let state = host.provisioning_state();
    let st = status(host);
    !matches!(state, State::None | State::Unmanaged | State::Deleting)
        && st.operational_status != OperationalStatus::Detached
        && host.metadata.deletion_timestamp.is_none()
}

/// `update` with the power the BMC reported in this reconcile when the update moves
/// the host into a stable state and the power differs from the status: the write
/// that says `provisioned` then also says `poweredOn`, rather than a second write at
/// the next look.
pub fn with_reported_power(host: &BareMetalHost, facts: &Facts, mut update: Update) -> Update {
    let into_stable = matches!(
        update.state,
        Some(State::Available | State::Ready | State::Provisioned | State::ExternallyProvisioned)
    );
    if into_stable && update.powered_on.is_none() {
        update.powered_on = facts
            .reported_power
            .filter(|on| *on != status(host).powered_on);
    }
    update
}
