//! The one configuration struct, built once from flags > environment > defaults.
//!
//! Environment names follow upstream metal3 where the meaning exists there, so an
//! existing deployment's environment carries over unchanged.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use url::Url;

use crate::telemetry::LogFormat;

/// Upstream's default Ironic endpoint.
pub const DEFAULT_IRONIC_ENDPOINT: &str = "http://localhost:6385/v1/";

/// Settings for `bmo run`.
#[derive(Debug, Clone, Args)]
pub struct Config {
    /// Ironic API endpoint, including the `/v1/` path.
    #[arg(long, env = "IRONIC_ENDPOINT", default_value = DEFAULT_IRONIC_ENDPOINT)]
    pub ironic_endpoint: Url,

    /// CA bundle (PEM) that signs Ironic's certificate.
    #[arg(long, env = "IRONIC_CACERT_FILE")]
    pub ironic_cacert_file: Option<PathBuf>,

    /// Skip verification of Ironic's TLS certificate (testing only).
    #[arg(long, env = "IRONIC_INSECURE")]
    pub ironic_insecure: bool,

    /// Directory holding `ironic/username` and `ironic/password` for HTTP basic auth
    /// to Ironic; when those files are absent, no authentication is sent.
    #[arg(long, env = "METAL3_AUTH_ROOT_DIR", default_value = "/opt/metal3/auth")]
    pub auth_root_dir: PathBuf,

    /// Seconds to wait for one Ironic API response.
    #[arg(long, env = "BMO_IRONIC_TIMEOUT", default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub ironic_timeout_secs: u64,

    /// Address for the `/healthz` and `/readyz` probes.
    #[arg(long, env = "BMO_HEALTH_ADDR", default_value = "0.0.0.0:9440")]
    pub health_addr: SocketAddr,

    /// Only reconcile hosts in this namespace (all namespaces when unset).
    #[arg(long, env = "WATCH_NAMESPACE")]
    pub watch_namespace: Option<String>,

    /// Hosts reconciled at the same time.
    #[arg(long, env = "BMO_CONCURRENCY", default_value_t = 8, value_parser = clap::value_parser!(u16).range(1..=1000))]
    pub concurrency: u16,

    /// Hosts inspecting, provisioning or deprovisioning at the same time; others wait
    /// with operationalStatus `delayed`.
    #[arg(long, env = "PROVISIONING_LIMIT", default_value_t = 20)]
    pub provisioning_limit: usize,

    /// Longest wait between retries of a failing host, in seconds.
    #[arg(long, env = "BMO_MAX_BACKOFF", default_value_t = 600, value_parser = clap::value_parser!(u64).range(1..=86400))]
    pub max_backoff_secs: u64,

    /// Apply the CRDs (BareMetalHost, HardwareData) at start-up; needs the right to
    /// manage CustomResourceDefinitions.
    #[arg(long, env = "BMO_INSTALL_CRDS")]
    pub install_crds: bool,

    /// Run only while holding the `baremetal-operator` Lease, so that one of several
    /// replicas reconciles hosts and serves the network boot at a time.
    #[arg(long = "enable-leader-election", env = "BMO_LEADER_ELECTION")]
    pub leader_election: bool,

    /// This bmo's name: the leader Lease holder and the instance in its events
    /// (the host name when unset).
    #[arg(long, env = "POD_NAME")]
    pub pod_name: Option<String>,

    /// Namespace of the leader Lease (defaults to `WATCH_NAMESPACE`).
    #[arg(long = "leader-election-namespace", env = "POD_NAMESPACE")]
    pub leader_election_namespace: Option<String>,

    /// Seconds a leader Lease is valid without renewal.
    #[arg(long, env = "LEASE_DURATION_SECONDS", default_value_t = 15, value_parser = clap::value_parser!(u64).range(2..=3600))]
    pub lease_duration_seconds: u64,

    /// Seconds the leader keeps trying to renew before it gives up leadership.
    #[arg(long, env = "RENEW_DEADLINE_SECONDS", default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub renew_deadline_seconds: u64,

    /// Seconds between attempts to acquire or renew the Lease.
    #[arg(long, env = "RETRY_PERIOD_SECONDS", default_value_t = 2, value_parser = clap::value_parser!(u64).range(1..=600))]
    pub retry_period_seconds: u64,
    /// Turn DHCP requests from MACs no BareMetalHost has into new BareMetalHosts (no
    /// BMC, operationalStatus `discovered`), once per MAC; needs BMO_DHCP_MODE.
    #[arg(long, env = "BMO_DISCOVERY")]
    pub discovery: bool,

    /// Namespace of the hosts discovery creates (default: WATCH_NAMESPACE, else
    /// `default`).
    #[arg(long, env = "BMO_DISCOVERY_NAMESPACE")]
    pub discovery_namespace: Option<String>,

    /// Log line format.
    #[arg(long, env = "BMO_LOG_FORMAT", value_enum, default_value_t = LogFormat::Human)]
    pub log_format: LogFormat,

    /// Provisioning network: own IP, DHCP, TFTP, HTTP boot (src/netboot/config.rs).
    #[command(flatten)]
    pub netboot: crate::netboot::config::NetbootConfig,
}

/// A combination of settings that cannot work; each names the variables to fix.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error(
        "leader election needs a namespace for its Lease: set POD_NAMESPACE (or --leader-election-namespace) or WATCH_NAMESPACE"
    )]
    LeaseNamespace,
    #[error(
        "leader election timings must satisfy RETRY_PERIOD_SECONDS ({retry}) < RENEW_DEADLINE_SECONDS ({renew}) < LEASE_DURATION_SECONDS ({lease})"
    )]
    LeaseTimings { lease: u64, renew: u64, retry: u64 },
}

impl Config {
    pub fn ironic_timeout(&self) -> Duration {
        Duration::from_secs(self.ironic_timeout_secs)
    }

    /// The leader election Lease namespace and timings, when leader election is on.
    pub fn leader_election(&self) -> Result<Option<(String, crate::leader::Timings)>, ConfigError> {
        if !self.leader_election {
            return Ok(None);
        }
        let namespace = [&self.leader_election_namespace, &self.watch_namespace]
            .into_iter()
            .flatten()
            .find(|ns| !ns.is_empty())
            .cloned()
            .ok_or(ConfigError::LeaseNamespace)?;
        let timings = crate::leader::Timings {
            lease_duration: Duration::from_secs(self.lease_duration_seconds),
            renew_deadline: Duration::from_secs(self.renew_deadline_seconds),
            retry_period: Duration::from_secs(self.retry_period_seconds),
        };
        if timings.renew_deadline >= timings.lease_duration
            || timings.retry_period >= timings.renew_deadline
        {
            return Err(ConfigError::LeaseTimings {
                lease: self.lease_duration_seconds,
                renew: self.renew_deadline_seconds,
                retry: self.retry_period_seconds,
            });
        }
        Ok(Some((namespace, timings)))
    }

    /// Discovery's settings, when it is switched on.
    pub fn discovery_settings(&self) -> Option<crate::controller::discovery::DiscoverySettings> {
        let watch_namespace = self.watch_namespace.clone().filter(|ns| !ns.is_empty());
        self.discovery
            .then(|| crate::controller::discovery::DiscoverySettings {
                namespace: self
                    .discovery_namespace
                    .clone()
                    .filter(|ns| !ns.is_empty())
                    .or_else(|| watch_namespace.clone())
                    .unwrap_or_else(|| "default".to_owned()),
                watch_namespace,
            })
    }

    /// The controller's part of the configuration.
    pub fn controller_settings(&self) -> crate::controller::ControllerSettings {
        crate::controller::ControllerSettings {
            namespace: self.watch_namespace.clone().filter(|ns| !ns.is_empty()),
            concurrency: self.concurrency,
            provisioning_limit: self.provisioning_limit.max(1),
            max_backoff: Duration::from_secs(self.max_backoff_secs),
            deploy_ramdisk: crate::provisioner::DeployRamdisk {
                kernel_url: self
                    .netboot
                    .deploy_kernel_url
                    .as_ref()
                    .map(|u| u.to_string()),
                ramdisk_url: self
                    .netboot
                    .deploy_ramdisk_url
                    .as_ref()
                    .map(|u| u.to_string()),
                ..Default::default()
            },
        }
    }
}
