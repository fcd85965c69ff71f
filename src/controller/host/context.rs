//! What every reconcile of the host controller shares: the provisioner, the store,
//! the settings and the handles to what netboot learns at run time.

use std::sync::{Arc, OnceLock};
use std::time::Instant;

use kube::ResourceExt;
use kube::runtime::reflector;

use super::capacity::Slots;
use super::lease_details;
use super::node_owners::HostsOwningNodes;
use super::settings::ControllerSettings;
use super::steady::SteadyHosts;
use super::store::{KubeStore, Store, StoreError};
use crate::api::BareMetalHost;
use crate::api::firmware::{HostFirmwareComponents, HostFirmwareSettings};
use crate::api::firmware_pending::{PendingUpdates, pending_updates};
use crate::bmc::AddressGuard;
use crate::controller::runtime::seams::BeforePowerOn;
use crate::controller::runtime::store::cached;
use crate::metrics::{HostLabels, Metrics};
use crate::netboot::DeployImages;
use crate::netboot::hosts::HostDirectory;
use crate::netboot::leases::LeaseTable;
use crate::provisioner::{DeployRamdisk, Provisioner};

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
    /// bmo's DHCP server's known hosts, when it runs: the controller attaches the
    /// BareMetalHosts it watches.
    pub known_hosts: Option<HostDirectory>,
    /// `BMO_BUILD_PREPROV_IMAGE`: each host gets a PreprovisioningImage and boots
    /// the agent from it.
    pub preprovisioning_images: bool,
    /// Refuses BMC addresses and image URLs that point at link-local or cloud
    /// metadata addresses (`BMO_ALLOWED_LINK_LOCAL_CIDRS` widens it).
    pub address_guard: AddressGuard,
    /// The HostFirmwareSettings the running controller watches, so that reading a
    /// host's costs no API request; without it (tests) the store reads them.
    pub(super) firmware_cache: OnceLock<reflector::Store<HostFirmwareSettings>>,
    /// The same for HostFirmwareComponents.
    pub(super) components_cache: OnceLock<reflector::Store<HostFirmwareComponents>>,
    pub(super) slots: Slots,
    /// What attaches the DataImage of a host about to be powered on (the DataImage
    /// controller's part); without it (tests) DataImages are left alone.
    pub(super) data_images: Option<Arc<dyn BeforePowerOn<P>>>,
    /// Hosts at rest, watched through the list of nodes.
    pub(super) steady: SteadyHosts,
    /// Which host owns which Ironic node, from the watched hosts; without it (tests
    /// that call reconcile alone) a status annotation is taken in unchecked.
    pub(super) node_owners: OnceLock<HostsOwningNodes>,
    /// When this controller started ([`ControllerSettings::start_settle`]).
    pub(super) started: Instant,
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
            slots: Slots::new(settings.provisioning_limit),
            settings,
            metrics: Arc::new(Metrics::new()),
            leases: None,
            deploy_images: None,
            known_hosts: None,
            preprovisioning_images: false,
            address_guard: AddressGuard::default(),
            firmware_cache: OnceLock::new(),
            components_cache: OnceLock::new(),
            data_images: None,
            steady: SteadyHosts::default(),
            node_owners: OnceLock::new(),
            started: Instant::now(),
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

    /// Attaches DataImages through `data_images` before provisioned hosts power on.
    pub fn with_data_images(mut self, data_images: Arc<dyn BeforePowerOn<P>>) -> Self {
        self.data_images = Some(data_images);
        self
    }

    /// Makes the BareMetalHosts known to bmo's DHCP server through `hosts` while
    /// the controller runs.
    pub fn with_known_hosts(mut self, hosts: HostDirectory) -> Self {
        self.known_hosts = Some(hosts);
        self
    }

    /// Gives each host a PreprovisioningImage and boots the agent from it once it is
    /// ready (upstream's `-build-preprov-image`).
    pub fn with_preprovisioning_images(mut self) -> Self {
        self.preprovisioning_images = true;
        self
    }

    /// The deploy ramdisk as of now: the settings, else bmo's own images on the
    /// provisioning IP in use.
    pub(super) fn deploy_ramdisk(&self) -> DeployRamdisk {
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

    /// The host's HostFirmwareSettings: from the watch's cache once it listed them,
    /// else read through the store.
    pub(super) async fn firmware_settings(
        &self,
        host: &BareMetalHost,
    ) -> Result<Option<HostFirmwareSettings>, StoreError> {
        let namespace = host.namespace().unwrap_or_default();
        if let Some(settings) = cached(&self.firmware_cache, &namespace, &host.name_any()) {
            return Ok(settings);
        }
        self.store.namesake(host).await
    }

    /// The host's HostFirmwareComponents: from the watch's cache once it listed them,
    /// else (and whenever the cached one asks for updates) read through the store:
    /// updates are flashed only on a current read, since the cache may not yet hold
    /// the updates this controller recorded as flashed.
    pub(super) async fn firmware_components(
        &self,
        host: &BareMetalHost,
    ) -> Result<Option<HostFirmwareComponents>, StoreError> {
        let namespace = host.namespace().unwrap_or_default();
        if let Some(components) = cached(&self.components_cache, &namespace, &host.name_any())
            && !matches!(
                pending_updates(components.as_ref()),
                PendingUpdates::Apply { .. }
            )
        {
            return Ok(components);
        }
        self.store.namesake(host).await
    }

    /// Adds lease details (DHCP hostname, leased address) to `details`; whether
    /// anything changed.
    pub(super) fn add_lease_details(&self, details: &mut crate::api::HardwareDetails) -> bool {
        match &self.leases {
            Some(leases) => lease_details::add(details, |mac| leases.get(mac)),
            None => false,
        }
    }
}

/// The labels of `host`'s metrics.
pub(super) fn host_labels(host: &BareMetalHost) -> HostLabels {
    HostLabels {
        namespace: host.namespace().unwrap_or_default(),
        host: host.name_any(),
    }
}
