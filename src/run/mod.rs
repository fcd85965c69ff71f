//! `bmo run`: connects to Kubernetes and Ironic, serves the health probes, and runs
//! until SIGINT or SIGTERM.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;

use crate::config::Config;
use crate::controller;
use crate::ironic::{ClientConfig, IronicAuth, IronicClient, IronicError};
use crate::leader::Elector;
use crate::metrics::Metrics;
use crate::provisioner::{IronicProvisioner, ProvisionerSettings};
use crate::version::BUILD;

mod controllers;
mod state;

use controllers::start_controllers;
use state::{Health, Stop};

/// Why `bmo run` could not start or stopped early.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("no usable Kubernetes configuration (in-cluster or KUBECONFIG): {0}")]
    KubeConfig(#[source] kube::config::InferConfigError),
    #[error("cannot create the Kubernetes client: {0}")]
    KubeClient(#[source] kube::Error),
    #[error("cannot reach the Kubernetes API server: {0}")]
    KubeUnreachable(#[source] kube::Error),
    #[error(transparent)]
    Ironic(#[from] IronicError),
    #[error("cannot listen on {addr} for health probes: {source}")]
    Listen {
        addr: std::net::SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Netboot(#[from] crate::netboot::NetbootError),
    #[error("health server failed: {0}")]
    Serve(#[source] std::io::Error),
    #[error(
        "BMO_DISCOVERY needs bmo's DHCP server to see new machines: set BMO_DHCP_MODE to full or proxy"
    )]
    DiscoveryWithoutDhcp,
    #[error("cannot install the CRDs: {0}")]
    InstallCrds(#[source] crate::api::install::InstallError),
    #[error(transparent)]
    Leader(#[from] crate::leader::LeaderSettingsError),
    #[error(transparent)]
    Switches(#[from] crate::controller::switches::SwitchSettingsError),
    #[error(transparent)]
    NetbootConfig(#[from] crate::netboot::config::NetbootConfigError),
    #[error(transparent)]
    PreprovImage(#[from] controller::preprov_image::PreprovImageSettingsError),
    #[error(transparent)]
    SecureMetrics(#[from] crate::secure_metrics::SecureMetricsError),
    #[error("leadership of the Lease {0} was lost; exiting so that a restart rejoins the election")]
    LeadershipLost(String),
}

/// Runs bmo until a shutdown signal arrives.
pub async fn run(config: Config) -> Result<(), RunError> {
    tracing::info!("{BUILD}");
    // Every setting is checked before the first connection.
    let leader_election = config.leader_election()?;
    let discovery = discovery_settings(&config)?;
    config.netboot.check()?;
    let switch_targets = config.switches.targets()?;
    config
        .preprov_image
        .check(config.netboot.http && config.netboot.any_service())?;
    let ironic_config = config.ironic.client_config()?;
    let kube_config = kube::Config::infer().await.map_err(RunError::KubeConfig)?;
    let kube_url = kube_config.cluster_url.to_string();
    let kube = kube::Client::try_from(kube_config).map_err(RunError::KubeClient)?;

    let notifier = crate::notify::Notifier::from_env();
    let stop = Stop::on_signal(notifier.clone());
    // Every listener's caps fit the descriptor limit, raised as far as it goes.
    let fds = crate::netboot::descriptors::raise_limit();
    let (netboot_config, caps) = crate::netboot::descriptors::fit(&config.netboot, fds);

    // The probes answer from the start, so that while a dependency is not there yet
    // /healthz says bmo lives and /readyz says it is not ready.
    let health = health(&config);
    let probes = crate::netboot::descriptors::health_limits(caps.health);
    let server = serve_probes(&config, health.clone(), probes, stop.stopped()).await?;

    if !reach_kube(&kube, &kube_url, stop.stopped()).await? {
        return stopped_while_starting(server).await;
    }

    let ironic = match connect_ironic(ironic_config, stop.stopped()).await? {
        Some(ironic) => ironic,
        None => return stopped_while_starting(server).await,
    };

    let elector = match lead(&config, &kube, leader_election, &health, &stop).await {
        Leadership::Alone => None,
        Leadership::Leading(elector) => Some(*elector),
        Leadership::Stopped => {
            let _ = server.await;
            tracing::info!("shut down before becoming the leader");
            return Ok(());
        }
    };

    let (netboot, ironic_probe) = start_watched(&health, &ironic, &netboot_config).await?;
    let secured_metrics = config
        .secure_metrics
        .serve(kube.clone(), health.metrics.clone(), stop.stopped())
        .await?;
    if config.install_crds {
        install_crds(&kube).await?;
    }

    let provisioner = IronicProvisioner::new(ironic, ProvisionerSettings::default());
    let discovery_task = start_discovery(discovery, netboot.as_ref(), &kube);
    let controllers = start_controllers(
        &config,
        &kube,
        provisioner,
        netboot.as_ref(),
        &health,
        switch_targets,
        &stop,
    );
    let watchdog = announce_ready(&health, &notifier);
    let outcome = run_until_stopped(elector, &stop, controllers).await;
    let background = [
        discovery_task,
        watchdog.map(|w| w.abort_handle()),
        secured_metrics.map(|s| s.abort_handle()),
        Some(ironic_probe.abort_handle()),
    ];
    shut_down(server, background.into_iter().flatten(), netboot).await;
    outcome
}

/// Starts the network boot services and the look at Ironic every `IRONIC_PROBE`,
/// both shown on the boot activity page; the probe's handle is for stopping it.
async fn start_watched(
    health: &Health,
    ironic: &IronicClient,
    netboot_config: &crate::netboot::config::NetbootConfig,
) -> Result<(Option<crate::netboot::Netboot>, tokio::task::JoinHandle<()>), RunError> {
    let (reachability, probe) = crate::ironic::Reachability::watch(ironic.clone(), IRONIC_PROBE);
    health.activity.set_ironic(reachability);
    let netboot = start_netboot(netboot_config).await?;
    if let Some(netboot) = &netboot {
        health.activity.set_netboot(netboot);
    }
    Ok((netboot, probe))
}

/// The probes' state (not ready yet), the metrics and the page's sources, which the
/// `bmo_*` series read too.
fn health(config: &Config) -> Health {
    let activity = crate::activity::Activity::new(&config.activity, config.netboot.any_service());
    let full = config.netboot.dhcp_mode == crate::netboot::config::DhcpMode::Full;
    // The first IPv4 pool; an IPv6 range's use and relayed subnets' pools are not
    // series yet.
    let pool = match &config.netboot.dhcp_range {
        Some(ranges) if full => ranges.v4().first().copied(),
        _ => None,
    };
    let series = crate::activity::metrics::BmoSeries::new(activity.clone(), pool);
    let metrics = Metrics::with(|registry| {
        controller::runtime::observed::register(registry);
        registry.register_collector(Box::new(series));
    });
    Health {
        ready: Arc::new(AtomicBool::new(false)),
        metrics: Arc::new(metrics),
        activity,
    }
}

/// Says bmo is ready, on `/readyz` and to systemd, and starts the systemd watchdog
/// pings if systemd asks for them.
fn announce_ready(
    health: &Health,
    notifier: &crate::notify::Notifier,
) -> Option<tokio::task::JoinHandle<()>> {
    health.ready.store(true, Ordering::SeqCst);
    // systemd (Type=notify): ready only now that the controller and probes are up.
    if let Err(e) = notifier.ready("host controller running") {
        tracing::warn!(error = %e, "cannot tell systemd that bmo is ready");
    }
    notifier.spawn_watchdog()
}

/// The discovery settings, refused without bmo's DHCP server (which is how
/// discovery sees new machines).
fn discovery_settings(
    config: &Config,
) -> Result<Option<controller::discovery::DiscoverySettings>, RunError> {
    let discovery = config.discovery_settings();
    if discovery.is_some() && config.netboot.dhcp_mode == crate::netboot::config::DhcpMode::Off {
        return Err(RunError::DiscoveryWithoutDhcp);
    }
    Ok(discovery)
}

async fn install_crds(kube: &kube::Client) -> Result<(), RunError> {
    crate::api::install::install(kube, std::time::Duration::from_secs(60))
        .await
        .map_err(RunError::InstallCrds)?;
    tracing::info!("CRDs installed");
    Ok(())
}

/// Starts discovery when it is on and the network boot services run; the handle is
/// for stopping it.
fn start_discovery(
    discovery: Option<controller::discovery::DiscoverySettings>,
    netboot: Option<&crate::netboot::Netboot>,
    kube: &kube::Client,
) -> Option<tokio::task::AbortHandle> {
    let (settings, netboot) = discovery.zip(netboot)?;
    let task = tokio::spawn(controller::discovery::run(
        kube.clone(),
        netboot.leases.clone(),
        settings,
    ));
    Some(task.abort_handle())
}

/// After the controllers stop: waits for the health server, stops the `background`
/// tasks and saves the lease table.
async fn shut_down(
    server: tokio::task::JoinHandle<std::io::Result<()>>,
    background: impl Iterator<Item = tokio::task::AbortHandle>,
    netboot: Option<crate::netboot::Netboot>,
) {
    match server.await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => tracing::warn!(error = %e, "health server failed"),
        Err(e) => tracing::warn!(error = %e, "health server task failed"),
    }
    for task in background {
        task.abort();
    }
    if let Some(netboot) = netboot
        && let Err(e) = netboot.shutdown().await
    {
        tracing::warn!(error = %e, "lease table not saved at shutdown");
    }
    tracing::info!("shut down");
}

/// Waits until the Kubernetes API server at `url` answers, while it may still
/// come; `false` when `stop` comes first.
async fn reach_kube(
    kube: &kube::Client,
    url: &str,
    stop: impl Future<Output = ()>,
) -> Result<bool, RunError> {
    let waited = wait_for(
        "the Kubernetes API server",
        url,
        stop,
        kube_may_come,
        || kube.apiserver_version(),
    )
    .await;
    match waited {
        Ok(Some(version)) => {
            tracing::info!(%url, version = %version.git_version, "connected to Kubernetes");
            Ok(true)
        }
        Ok(None) => Ok(false),
        Err(e) => Err(RunError::KubeUnreachable(e)),
    }
}

/// The provisioning network services (src/netboot), when switched on; the handle
/// (address, lease table, known hosts, deploy image URLs) is for the host
/// controller.
async fn start_netboot(
    config: &crate::netboot::config::NetbootConfig,
) -> Result<Option<crate::netboot::Netboot>, RunError> {
    if !config.any_service() {
        return Ok(None);
    }
    let leases = crate::netboot::leases::LeaseTable::open(&config.lease_file)
        .map_err(crate::netboot::NetbootError::from)?;
    Ok(Some(crate::netboot::start(config, leases).await?))
}

/// Where `bmo run` stands in the leader election.
enum Leadership {
    /// No election: the only instance.
    Alone,
    Leading(Box<Elector>),
    /// Told to stop while standing by.
    Stopped,
}

/// With leader election, waits until this instance leads: a standby is healthy and
/// ready meanwhile; the controllers and the network boot services run only in the
/// leader.
async fn lead(
    config: &Config,
    kube: &kube::Client,
    election: Option<(String, crate::leader::Timings)>,
    health: &Health,
    stop: &Stop,
) -> Leadership {
    let Some((namespace, timings)) = election else {
        return Leadership::Alone;
    };
    health.ready.store(true, Ordering::SeqCst);
    let mut elector = Elector::new(
        kube.clone(),
        &namespace,
        crate::leader::identity(config.pod_name.as_deref()),
        timings,
    );
    tracing::info!(lease = %elector.lease(), identity = %elector.identity(), "waiting for leadership");
    tokio::select! {
        () = elector.acquire() => Leadership::Leading(Box::new(elector)),
        () = stop.stopped() => Leadership::Stopped,
    }
}

/// Runs until told to stop or, when leading, until leadership is lost (an error,
/// so that a restart rejoins the election); then waits for the `controllers` to
/// finish and gives the leadership up.
async fn run_until_stopped(
    mut elector: Option<Elector>,
    stop: &Stop,
    controllers: Vec<tokio::task::JoinHandle<()>>,
) -> Result<(), RunError> {
    let mut outcome = Ok(());
    match elector.as_mut() {
        Some(elector) => {
            tokio::select! {
                () = elector.keep_leading() => {
                    outcome = Err(RunError::LeadershipLost(elector.lease()));
                    stop.stop();
                }
                () = stop.stopped() => {}
            }
        }
        None => stop.stopped().await,
    }
    for task in controllers {
        let _ = task.await;
    }
    if let Some(elector) = &elector
        && outcome.is_ok()
    {
        match elector.release().await {
            Ok(()) => tracing::info!(lease = %elector.lease(), "leadership released"),
            Err(e) => tracing::warn!(error = %e, "cannot release the leader Lease"),
        }
    }
    outcome
}

/// Serves `/healthz`, `/readyz`, `/metrics` and (with `BMO_ACTIVITY_PAGE`) the boot activity page
/// on `BMO_HEALTH_ADDR` until `stop` resolves, with the boot server's accept loop: connection
/// caps, header and idle timeouts.
async fn serve_probes(
    config: &Config,
    health: Health,
    limits: crate::netboot::http_server::HttpLimits,
    stop: impl Future<Output = ()> + Send + 'static,
) -> Result<tokio::task::JoinHandle<std::io::Result<()>>, RunError> {
    let (addr, page) = (config.health_addr, config.activity.page);
    let mut app = Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics));
    if page {
        app = app.merge(health.activity.routes());
    }
    let app = app.with_state(health);
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| RunError::Listen { addr, source })?;
    let bound = listener.local_addr().unwrap_or(addr);
    tracing::info!(addr = %bound, page, "serving /healthz, /readyz, /metrics and the boot activity page");
    Ok(tokio::spawn(async move {
        tokio::select! {
            () = crate::netboot::http_server::serve(listener, app, limits) => {}
            () = stop => {}
        }
        Ok(())
    }))
}

/// Connects to Ironic, waiting while it is not there yet; `None` when `stop` came first.
async fn connect_ironic(
    ironic_config: ClientConfig,
    stop: impl Future<Output = ()>,
) -> Result<Option<IronicClient>, RunError> {
    let auth_kind = match ironic_config.auth {
        IronicAuth::None => "none",
        IronicAuth::Basic(_) => "http basic",
    };
    let url = crate::ironic::without_credentials(&ironic_config.endpoint);
    let ironic = wait_for("Ironic", &url, stop, ironic_may_come, || {
        IronicClient::connect(ironic_config.clone())
    })
    .await?;
    if let Some(ironic) = &ironic {
        tracing::info!(endpoint = %url, microversion = %ironic.microversion(), auth = auth_kind, "connected to Ironic");
    }
    Ok(ironic)
}

/// How often the boot activity page's look at Ironic is renewed.
const IRONIC_PROBE: Duration = Duration::from_secs(15);

/// The longest pause between two attempts to reach a dependency at start-up.
const MAX_STARTUP_RETRY: Duration = Duration::from_secs(10);

/// Calls `attempt` until it succeeds, fails in a way waiting will not mend (`may_come`
/// says which), or `stop` resolves (then `Ok(None)`). Each failure is logged with the
/// dependency's URL, and the pause doubles from 1 s up to `MAX_STARTUP_RETRY`.
async fn wait_for<T, E, Fut>(
    what: &str,
    url: &str,
    stop: impl Future<Output = ()>,
    may_come: fn(&E) -> bool,
    mut attempt: impl FnMut() -> Fut,
) -> Result<Option<T>, E>
where
    E: std::fmt::Display,
    Fut: Future<Output = Result<T, E>>,
{
    let mut pause = Duration::from_secs(1);
    tokio::pin!(stop);
    loop {
        let error = tokio::select! {
            result = attempt() => match result {
                Ok(value) => return Ok(Some(value)),
                Err(e) if may_come(&e) => e,
                Err(e) => return Err(e),
            },
            () = &mut stop => return Ok(None),
        };
        tracing::warn!(
            url,
            "waiting for {what} at {url}: {error}; trying again in {} s (not ready until then)",
            pause.as_secs()
        );
        tokio::select! {
            () = tokio::time::sleep(pause) => {}
            () = &mut stop => return Ok(None),
        }
        pause = (pause * 2).min(MAX_STARTUP_RETRY);
    }
}

/// Whether a failed call to the kube-apiserver may succeed later: it was not reached,
/// or answered that it is busy or not ready. Refused credentials, bad TLS
/// configuration and the like end start-up.
fn kube_may_come(error: &kube::Error) -> bool {
    match error {
        kube::Error::Api(status) => status.code == 429 || status.code >= 500,
        kube::Error::HyperError(_) | kube::Error::Service(_) => true,
        _ => false,
    }
}

/// Whether a failed connection to Ironic may succeed later: Ironic was not reached or
/// answered 5xx (starting behind its web server). Refused credentials, an Ironic too
/// old or an unreadable CA file end start-up.
fn ironic_may_come(error: &IronicError) -> bool {
    match error {
        IronicError::Unreachable { .. } => true,
        IronicError::Api { status, .. } => status.is_server_error(),
        _ => false,
    }
}

/// Ends a start-up cut short by SIGINT or SIGTERM.
async fn stopped_while_starting(
    server: tokio::task::JoinHandle<std::io::Result<()>>,
) -> Result<(), RunError> {
    let _ = server.await;
    tracing::info!("shut down while starting");
    Ok(())
}

async fn metrics(State(health): State<Health>) -> impl axum::response::IntoResponse {
    (
        [(
            axum::http::header::CONTENT_TYPE,
            crate::metrics::CONTENT_TYPE,
        )],
        health.metrics.render(),
    )
}

async fn readyz(State(health): State<Health>) -> (StatusCode, &'static str) {
    if health.ready.load(Ordering::SeqCst) {
        (StatusCode::OK, "ok")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "starting")
    }
}
