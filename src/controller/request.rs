//! Provisioner requests assembled from a host and the Secrets it names.

use super::secrets::read_data;
use super::store::{Store, StoreError};
use crate::api::BareMetalHost;
use crate::metrics::Metrics;
use crate::provisioner::{PrepareRequest, ProvisionRequest};

/// Input for provision/adopt: image, hints and the config-drive data.
pub async fn provision_request<S: Store>(
    host: &BareMetalHost,
    store: &S,
    metrics: &Metrics,
) -> Result<ProvisionRequest, StoreError> {
    let spec = &host.spec;
    let user_data = read_data(host, store, spec.user_data.as_ref(), &["userData", "value"]).await?;
    let network_data = read_data(
        host,
        store,
        spec.network_data.as_ref(),
        &["networkData", "value"],
    )
    .await?;
    let meta_data = read_data(host, store, spec.meta_data.as_ref(), &["metaData", "value"]).await?;
    // A Secret that is named but missing (or lacks the key) is counted, as upstream does.
    for (reference, found, data_type) in [
        (spec.user_data.as_ref(), &user_data, "userData"),
        (spec.network_data.as_ref(), &network_data, "networkData"),
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
        root_device_hints: spec.root_device_hints.clone(),
        instance_uuid: host.metadata.uid.clone().unwrap_or_default(),
        user_data,
        network_data,
        meta_data,
        hardware: None,
    })
}

/// Input for prepare: the RAID wanted, and whether it differs from what was applied.
pub fn prepare_request(host: &BareMetalHost) -> PrepareRequest {
    let applied = host
        .status
        .as_ref()
        .and_then(|s| s.provisioning.raid.as_ref());
    PrepareRequest {
        raid: host.spec.raid.clone(),
        unprepared: host.spec.raid.as_ref() != applied,
        ..Default::default()
    }
}
