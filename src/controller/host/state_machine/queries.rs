//! What a host's spec, status and annotations say, as the steps ask it.

use super::facts::Facts;
use super::step::Update;
use crate::api::{
    BareMetalHost, BareMetalHostStatus, CustomDeploy, Image, OperationalStatus,
    ProvisioningState as State, RootDeviceHints,
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

/// A field of the detached annotation's JSON value (any other value, `""`
/// included, has none: upstream documents that it may be anything).
fn detach_option(host: &BareMetalHost, field: &str) -> Option<serde_json::Value> {
    annotation(host, crate::api::host::DETACHED_ANNOTATION)
        .and_then(|v| serde_json::from_str::<serde_json::Value>(v).ok())
        .and_then(|v| v.get(field).cloned())
}

/// The `deleteAction` of the detached annotation is `delay`.
pub fn delete_delayed_by_detach(host: &BareMetalHost) -> bool {
    detach_option(host, "deleteAction").is_some_and(|a| a == "delay")
}

/// The detached annotation says `"force": true`: detach also in the middle of an
/// operation (inspecting, provisioning, ...), as upstream does.
pub(super) fn detach_forced(host: &BareMetalHost) -> bool {
    detach_option(host, "force").is_some_and(|f| f == true)
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

/// The host's hardware profile as upstream names it in `status.hardwareProfile`: the
/// one recorded, else the spec's, else `libvirt` for a libvirt BMC, else `unknown`.
pub fn hardware_profile(host: &BareMetalHost) -> String {
    let recorded = host
        .status
        .as_ref()
        .and_then(|s| s.hardware_profile.clone());
    let asked = host.spec.hardware_profile.clone();
    let libvirt = host
        .spec
        .bmc
        .as_ref()
        .is_some_and(|b| b.address.starts_with("libvirt"));
    recorded
        .into_iter()
        .chain(asked)
        .find(|p| !p.is_empty())
        .unwrap_or_else(|| if libvirt { "libvirt" } else { "unknown" }.to_owned())
}

/// The root device hints a deployment uses: the spec's, else those of the hardware
/// profile the spec names. Upstream's default profile (`unknown`, `/dev/sda`) gives
/// none here: guessing the disk's name misplaces the OS on virtio and NVMe disks.
pub fn root_device_hints(host: &BareMetalHost) -> Option<RootDeviceHints> {
    if let Some(hints) = &host.spec.root_device_hints {
        return Some(hints.clone());
    }
    let (device_name, hctl) = match host.spec.hardware_profile.as_deref()? {
        "unknown" => (Some("/dev/sda"), None),
        "libvirt" => (Some("/dev/vda"), None),
        "openstack" => (Some("/dev/vdb"), None),
        "dell" => (None, Some("0:0:0:0")),
        "dell-raid" => (None, Some("0:2:0:0")),
        _ => return None,
    };
    Some(RootDeviceHints {
        device_name: device_name.map(str::to_owned),
        hctl: hctl.map(str::to_owned),
        ..Default::default()
    })
}
