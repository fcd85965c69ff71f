//! Which controllers `bmo run` starts and how they are connected: the shared watches,
//! the host controller's context and the seams between controllers.

use std::sync::Arc;

use super::state::{Health, Stop};
use crate::api::BareMetalHost;
use crate::config::Config;
use crate::controller;
use crate::controller::runtime::shared_watch::Subscription;
use crate::controller::runtime::store::KubeClient;
use crate::provisioner::IronicProvisioner;

/// The controllers the configuration turns on: HostClaim, BareMetalSwitch, and the
/// PreprovisioningImage builder.
fn optional_controllers(
    config: &Config,
    kube: &kube::Client,
    netboot: Option<&crate::netboot::Netboot>,
    switch_targets: Option<controller::switches::SwitchTargets>,
    namespace: Option<&str>,
    stop: &Stop,
) -> Vec<tokio::task::JoinHandle<()>> {
    let mut tasks = Vec::new();
    if config.claims.enabled {
        tasks.push(tokio::spawn(controller::claims::run(
            KubeClient::new(kube.clone(), None),
            namespace.map(str::to_owned),
            stop.stopped(),
        )));
        tracing::info!("HostClaim controller started");
    }
    if let Some(targets) = switch_targets {
        tracing::info!("BareMetalSwitch controller started");
        tasks.push(tokio::spawn(controller::switches::run(
            controller::switches::KubeSwitchStore::new(kube.clone()),
            targets,
            namespace.map(str::to_owned),
            stop.stopped(),
        )));
    }
    // bmo builds initrd and iso PreprovisioningImages itself: its IPA ramdisk plus
    // each host's network data, served by its HTTP server (checked to be on).
    if let Some(netboot) = netboot.filter(|_| config.preprov_image.builds_images()) {
        let server = crate::netboot::host_ramdisks::RamdiskServer {
            ramdisks: netboot.host_ramdisks.clone(),
            images: netboot.deploy_images(),
            images_dir: config.netboot.images_dir.clone(),
        };
        tracing::info!("PreprovisioningImage builder started");
        let settings = &config.preprov_image;
        let builds = controller::preprov_image::Builds {
            initrd: settings.preprov_image_initrd,
            iso: settings
                .preprov_image_iso
                .then(|| controller::preprov_image::IsoBuild {
                    http_root: config.netboot.http_root.clone(),
                    kernel_params: settings.preprov_image_iso_kernel_params.clone(),
                }),
        };
        tasks.push(tokio::spawn(controller::preprov_image::run(
            kube.clone(),
            server,
            builds,
            namespace.map(str::to_owned),
            config.pod_name.clone(),
            stop.stopped(),
        )));
    }
    tasks
}

/// Starts every controller (hosts, firmware, DataImages, event subscriptions,
/// HostClaims, switches, PreprovisioningImages, and the watches they share); each
/// task ends after `stop`.
pub(super) fn start_controllers(
    config: &Config,
    kube: &kube::Client,
    provisioner: IronicProvisioner,
    netboot: Option<&crate::netboot::Netboot>,
    health: &Health,
    switch_targets: Option<controller::switches::SwitchTargets>,
    stop: &Stop,
) -> Vec<tokio::task::JoinHandle<()>> {
    let namespace = config.watch_namespace.clone().filter(|ns| !ns.is_empty());
    let host_store = controller::host::KubeStore::new(kube.clone(), config.pod_name.clone());
    let data_image_store = KubeClient::new(kube.clone(), config.pod_name.clone());
    let ctx = host_context(
        config,
        host_store,
        provisioner.clone(),
        netboot,
        health,
        data_image_store.clone(),
    );
    let max_backoff = ctx.settings.max_backoff;
    // One watch each of hosts, HostFirmwareSettings and HostFirmwareComponents for
    // every controller that reads them (src/controller/shared_watch.rs).
    let mut watches = controller::runtime::shared_watch::Watches::new(kube, namespace.as_deref());
    let host_feeds = watches.subscribe();
    let firmware_feeds = watches.subscribe();
    let data_image_hosts = watches.hosts.subscribe();
    let subscription_hosts = watches.hosts.subscribe();
    health.activity.set_hosts(watches.hosts.cache());
    let (attachment_hosts, attachment_host_events) =
        (watches.hosts.cache(), watches.hosts.events());
    let mut tasks = vec![
        tokio::spawn(controller::host::run_with(ctx, host_feeds, stop.stopped())),
        tokio::spawn(watches.run(stop.stopped())),
        tokio::spawn(controller::switches::attachments::run(
            kube.clone(),
            namespace.clone(),
            attachment_hosts,
            attachment_host_events,
            stop.stopped(),
        )),
    ];
    tasks.extend(optional_controllers(
        config,
        kube,
        netboot,
        switch_targets,
        namespace.as_deref(),
        stop,
    ));
    tasks.extend(start_firmware_and_subscriptions(
        config,
        kube,
        provisioner.clone(),
        firmware_feeds,
        subscription_hosts,
        stop,
    ));
    let data_image_ctx = Arc::new(controller::dataimage::DataImageContext {
        provisioner,
        store: data_image_store,
        namespace: config.watch_namespace.clone(),
        max_backoff,
    });
    let data_images = controller::dataimage::run(data_image_ctx, data_image_hosts, stop.stopped());
    tasks.push(tokio::spawn(data_images));
    tracing::info!(
        namespace = config.watch_namespace.as_deref().unwrap_or("(all)"),
        concurrency = config.concurrency,
        "host controller started"
    );
    tasks
}

/// The controllers of HostFirmwareSettings, FirmwareSchemas and HostFirmwareComponents
/// (on `feeds`), and of BMCEventSubscriptions (on `hosts`): each on the provisioner
/// with a client of its own, naming this bmo, in the watched namespace.
fn start_firmware_and_subscriptions(
    config: &Config,
    kube: &kube::Client,
    provisioner: IronicProvisioner,
    feeds: controller::runtime::shared_watch::Feeds,
    hosts: Subscription<BareMetalHost>,
    stop: &Stop,
) -> [tokio::task::JoinHandle<()>; 2] {
    let store = || KubeClient::new(kube.clone(), config.pod_name.clone());
    let namespace = config.watch_namespace.clone();
    let firmware = Arc::new(controller::firmware::FirmwareContext {
        provisioner: provisioner.clone(),
        store: store(),
        namespace: namespace.clone(),
    });
    let subscriptions = Arc::new(controller::event_subscriptions::SubscriptionContext {
        provisioner,
        store: store(),
        namespace,
    });
    [
        tokio::spawn(controller::firmware::run(
            firmware,
            config.concurrency,
            feeds,
            stop.stopped(),
        )),
        tokio::spawn(controller::event_subscriptions::run(
            subscriptions,
            hosts,
            stop.stopped(),
        )),
    ]
}

/// The host controller's context: its store, provisioner and settings, and what the
/// network boot services share with it.
fn host_context(
    config: &Config,
    store: controller::host::KubeStore,
    provisioner: IronicProvisioner,
    netboot: Option<&crate::netboot::Netboot>,
    health: &Health,
    data_image_store: KubeClient,
) -> Arc<controller::host::Context<IronicProvisioner>> {
    let mut ctx =
        controller::host::Context::with_store(store, provisioner, config.controller_settings())
            .with_metrics(health.metrics.clone())
            .with_data_images(Arc::new(controller::dataimage::AttachBeforePowerOn(
                data_image_store,
            )));
    ctx.address_guard = config.addresses.guard();
    // Without explicit URLs, Ironic boots the IPA images bmo itself serves, on the
    // provisioning IP in use at each reconcile.
    if config.preprov_image.build_preprov_image {
        ctx = ctx.with_preprovisioning_images();
    }
    if let Some(netboot) = netboot {
        ctx = ctx
            .with_leases(netboot.leases.clone())
            .with_known_hosts(netboot.known_hosts.clone())
            .with_deploy_images(netboot.deploy_images());
    }
    Arc::new(ctx)
}
