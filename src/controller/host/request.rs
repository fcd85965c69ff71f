//! Provisioner inputs assembled from a BareMetalHost: the [`Host`] every call takes,
//! and the provision and prepare requests (with the Secrets they name). The spec's
//! image, root device hints and RAID go in as the API has them; only what needs
//! checking or resolving (BMC address, boot MAC, inspection mode) is parsed here, once.

use k8s_openapi::api::core::v1::SecretReference;

use super::secrets::read_data;
use super::state_machine::{self, PendingSettings, PendingUpdates};
use super::store::{Store, StoreError};
use crate::api::host::HARDWARE_PROFILES;
use crate::api::{BareMetalHost, InspectionMode};
use crate::bmc::{BmcAddress, parse_mac};
use crate::credentials::Credentials;
use crate::metrics::Metrics;
use crate::provisioner::{
    DeployRamdisk, Host, HostId, PrepareRequest, ProvisionRequest, ServiceRequest,
};

/// Why a host's spec cannot be turned into provisioner input.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    #[error("spec.bmc.address {address:?}: {reason}")]
    BmcAddress { address: String, reason: String },
    #[error(
        "spec.bootMACAddress {mac:?} is not a MAC address (six hex pairs, e.g. 52:54:00:12:34:56)"
    )]
    BootMac { mac: String },
    #[error(
        "spec.bmc.address {address:?} needs spec.bootMACAddress (the MAC of the NIC the host boots from)"
    )]
    BootMacRequired { address: String },
    #[error("spec.bmc is missing: set spec.bmc.address and spec.bmc.credentialsName")]
    NoBmc,
    #[error(
        "spec.hardwareProfile {profile:?} is not a known profile ({known}); remove it and use spec.rootDeviceHints",
        known = HARDWARE_PROFILES.join(", ")
    )]
    HardwareProfile { profile: String },
}

/// The provisioner's view of `host`.
pub fn host_input(
    bmh: &BareMetalHost,
    credentials: Credentials,
    credentials_changed: bool,
    deploy_ramdisk: &DeployRamdisk,
) -> Result<Host, SpecError> {
    let bmc = bmh.spec.bmc.as_ref().ok_or(SpecError::NoBmc)?;
    if let Some(profile) = bmh
        .spec
        .hardware_profile
        .as_deref()
        .filter(|p| !p.is_empty() && !HARDWARE_PROFILES.contains(p))
    {
        return Err(SpecError::HardwareProfile {
            profile: profile.to_owned(),
        });
    }
    let address = BmcAddress::parse(&bmc.address).map_err(|e| SpecError::BmcAddress {
        address: crate::bmc::redact_userinfo(&bmc.address),
        reason: e.to_string(),
    })?;
    let boot_mac = match bmh
        .spec
        .boot_mac_address
        .as_deref()
        .filter(|m| !m.is_empty())
    {
        Some(mac) => Some(parse_mac(mac).map_err(|_| SpecError::BootMac {
            mac: mac.to_owned(),
        })?),
        None if address.kind.needs_boot_mac() => {
            return Err(SpecError::BootMacRequired {
                address: bmc.address.clone(),
            });
        }
        None => None,
    };
    let status = bmh.status.clone().unwrap_or_default();
    Ok(Host {
        id: HostId::new(
            bmh.metadata.namespace.clone().unwrap_or_default(),
            bmh.metadata.name.clone().unwrap_or_default(),
        ),
        provisioning_id: Some(status.provisioning.id.clone()).filter(|id| !id.is_empty()),
        bmc: address,
        credentials,
        credentials_changed,
        disable_certificate_verification: bmc.disable_certificate_verification,
        boot_mac,
        boot_mode: bmh.boot_mode(),
        inspection_mode: match bmh.spec.inspection_mode {
            _ if bmh.inspection_disabled() => InspectionMode::Disabled,
            Some(InspectionMode::Fast) => InspectionMode::Fast,
            _ => InspectionMode::Agent,
        },
        cleaning_mode: bmh.spec.automated_cleaning_mode,
        architecture: bmh.spec.architecture.clone().filter(|a| !a.is_empty()),
        externally_provisioned: bmh.spec.externally_provisioned,
        disable_power_off: bmh.spec.disable_power_off,
        deploy_ramdisk: deploy_ramdisk.clone(),
        restart_on_failure: false,
        // Read from its Secret by the reconcile (`load::with_network_data`).
        preprovisioning_network_data: None,
    })
}

/// Input for provision/adopt: image, hints and the config-drive data.
pub async fn provision_request<S: Store>(
    host: &BareMetalHost,
    store: &S,
    metrics: &Metrics,
) -> Result<ProvisionRequest, StoreError> {
    let spec = &host.spec;
    let user_data = read_data(host, store, spec.user_data.as_ref(), &["userData", "value"]).await?;
    // Without networkData, the preprovisioning network data serves the OS too, as
    // upstream does.
    let preprovisioning_network_data = spec
        .preprovisioning_network_data_name
        .as_ref()
        .filter(|n| !n.is_empty())
        .map(|name| SecretReference {
            name: Some(name.clone()),
            namespace: None,
        });
    let network_reference = spec
        .network_data
        .as_ref()
        .or(preprovisioning_network_data.as_ref());
    let network_data = read_data(host, store, network_reference, &["networkData", "value"]).await?;
    let meta_data = read_data(host, store, spec.meta_data.as_ref(), &["metaData", "value"]).await?;
    // A Secret that is named but missing (or lacks the key) is counted, as upstream does.
    for (reference, found, data_type) in [
        (spec.user_data.as_ref(), &user_data, "userData"),
        (network_reference, &network_data, "networkData"),
        (spec.meta_data.as_ref(), &meta_data, "metaData"),
    ] {
        if reference.and_then(|r| r.name.as_ref()).is_some() && found.is_none() {
            metrics.config_data_error(data_type);
        }
    }
    let user_data = user_data.or_else(|| {
        spec.inline_user_data
            .as_ref()
            .map(|d| d.expose().as_bytes().to_vec())
    });
    Ok(ProvisionRequest {
        image: spec.image.clone(),
        custom_deploy: spec.custom_deploy.as_ref().map(|c| c.method.clone()),
        root_device_hints: state_machine::root_device_hints(host),
        instance_uuid: host.metadata.uid.clone().unwrap_or_default(),
        user_data,
        network_data,
        meta_data,
        // Without networkData, the config drive brings every inspected NIC up by DHCP.
        hardware: host.status.as_ref().and_then(|s| s.hardware.clone()),
    })
}

/// Input for prepare: the RAID wanted and whether it differs from what was applied,
/// the BIOS settings of the host's HostFirmwareSettings that differ from the BMC's,
/// and the updates of its HostFirmwareComponents not flashed yet.
pub fn prepare_request(
    host: &BareMetalHost,
    firmware: &PendingSettings,
    updates: &PendingUpdates,
) -> PrepareRequest {
    let applied = host
        .status
        .as_ref()
        .and_then(|s| s.provisioning.raid.as_ref());
    let bios_settings = match firmware {
        PendingSettings::Apply(settings) => settings.clone(),
        PendingSettings::None | PendingSettings::NotReady | PendingSettings::Refused(_) => {
            Vec::new()
        }
    };
    let firmware_updates = match updates {
        PendingUpdates::Apply { flash, .. } => flash.clone(),
        PendingUpdates::None | PendingUpdates::NotReady => Vec::new(),
    };
    PrepareRequest {
        raid: host.spec.raid.clone(),
        unprepared: host.spec.raid.as_ref() != applied
            || !bios_settings.is_empty()
            || !firmware_updates.is_empty(),
        bios_settings,
        firmware_updates,
        ..Default::default()
    }
}

/// Input for servicing: the allowed BIOS settings that differ from the BMC's and the
/// allowed updates not flashed yet; `withdrawn` when the allowed objects ask for
/// nothing at all (`spec_set` false).
pub fn service_request(
    firmware: &PendingSettings,
    updates: &PendingUpdates,
    spec_set: bool,
) -> ServiceRequest {
    ServiceRequest {
        withdrawn: !spec_set,
        bios_settings: match firmware {
            PendingSettings::Apply(settings) => settings.clone(),
            // Refused only while preparing (spec.firmware); servicing never sees it.
            PendingSettings::None | PendingSettings::NotReady | PendingSettings::Refused(_) => {
                Vec::new()
            }
        },
        firmware_updates: match updates {
            PendingUpdates::Apply { flash, .. } => flash.clone(),
            PendingUpdates::None | PendingUpdates::NotReady => Vec::new(),
        },
    }
}
