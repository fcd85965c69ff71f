//! What a reconcile of a host reads before its first step: the BMC Secret, the
//! deploy ramdisk (the host's PreprovisioningImage's when images are on), the host as
//! the provisioner takes it, the lease table and the provisioning slots.

use std::time::Duration;

use super::context::Context;
use super::errors::{ReconcileError, store_err};
use super::state_machine::{
    self, CredentialsCheck, Facts, PendingSettings, PendingUpdates, SpecProblem,
};
use super::store::Store;
use super::{preprov_image, request, secrets};
use crate::api::BareMetalHost;
use crate::metrics;
use crate::provisioner::{self, DeployRamdisk, Provisioner};

/// What a reconcile reads before its first step.
pub(super) struct Loaded {
    pub(super) facts: Facts,
    /// The host as the provisioner takes it, or why the spec gives none.
    pub(super) phost: Result<provisioner::Host, SpecProblem>,
    /// The stored hardware details with the lease table's NIC details, when those
    /// changed them.
    pub(super) lease_details: Option<crate::api::HardwareDetails>,
    /// The BMC Secret's resourceVersion.
    pub(super) credentials_version: Option<String>,
    /// The next step boots the agent, whose PreprovisioningImage is not ready: look
    /// again after this long.
    pub(super) waiting_for_image: Option<Duration>,
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

/// `phost` with the network data of `spec.preprovisioningNetworkDataName`, or why
/// that Secret is unusable.
async fn with_network_data<P: Provisioner, S: Store>(
    host: &BareMetalHost,
    ctx: &Context<P, S>,
    mut phost: provisioner::Host,
) -> Result<Result<provisioner::Host, SpecProblem>, ReconcileError> {
    let data = secrets::preprovisioning_network_data(host, &ctx.store)
        .await
        .map_err(store_err(host))?;
    Ok(match data {
        Ok(data) => {
            phost.preprovisioning_network_data = data;
            Ok(phost)
        }
        Err(message) => Err(SpecProblem {
            message,
            in_secret: true,
        }),
    })
}

/// Reads the BMC Secret, the lease table and the slots into the facts of a reconcile.
pub(super) async fn load<P: Provisioner, S: Store>(
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
    let phost = ctx
        .address_guard
        .checked(host, phost)
        .await
        .map_err(SpecProblem::in_spec);
    let phost = match phost {
        Ok(phost) => with_network_data(host, ctx, phost).await?,
        Err(problem) => Err(problem),
    };
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
