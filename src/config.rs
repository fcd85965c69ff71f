//! The one configuration struct, built once from flags > environment > defaults.
//!
//! Environment names follow upstream metal3 where the meaning exists there, so an
//! existing deployment's environment carries over unchanged.

use std::net::SocketAddr;
use std::time::Duration;

use clap::Args;

use crate::telemetry::LogFormat;

/// Settings for `bmo run`.
#[derive(Debug, Clone, Args)]
pub struct Config {
    /// Ironic's endpoint and client settings (src/ironic/settings.rs).
    #[command(flatten)]
    pub ironic: crate::ironic::IronicSettings,

    /// Address for the `/healthz` and `/readyz` probes.
    #[arg(long, env = "BMO_HEALTH_ADDR", default_value = "0.0.0.0:9440")]
    pub health_addr: SocketAddr,

    /// `/metrics` over HTTPS for authorised tokens (src/secure_metrics).
    #[command(flatten)]
    pub secure_metrics: crate::secure_metrics::SecureMetricsSettings,

    /// The boot activity page on the health listener (src/activity).
    #[command(flatten)]
    pub activity: crate::activity::ActivitySettings,

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

    /// How often hosts at rest are checked for changes made behind bmo's back (power,
    /// provision state, maintenance, errors, a node gone), in seconds: one list of
    /// Ironic's nodes for all of them.
    #[arg(long, env = "BMO_STEADY_POLL", default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub steady_poll_secs: u64,

    /// Seconds after start before bmo asks Ironic for any change: requests a killed bmo
    /// sent just before it died may still be waiting in Ironic, and a change decided
    /// before they land could repeat them (an inspection run twice).
    #[arg(long, env = "BMO_START_SETTLE", default_value_t = 10, value_parser = clap::value_parser!(u64).range(0..=600))]
    pub start_settle_secs: u64,

    /// Apply the CRDs of all 13 kinds and the admission policies at start-up; needs the right to
    /// manage CustomResourceDefinitions.
    #[arg(long, env = "BMO_INSTALL_CRDS")]
    pub install_crds: bool,

    /// This bmo's name: the leader Lease holder and the instance in its events
    /// (the host name when unset).
    #[arg(long, env = "POD_NAME")]
    pub pod_name: Option<String>,

    /// Link-local and metadata addresses allowed in host specs (src/bmc/guard.rs).
    #[command(flatten)]
    pub addresses: crate::bmc::AddressSettings,

    /// Leader election (src/leader.rs).
    #[command(flatten)]
    pub leader: crate::leader::LeaderSettings,

    /// HostClaim controller (src/controller/claims).
    #[command(flatten)]
    pub claims: crate::controller::claims::ClaimSettings,

    /// BareMetalSwitch controller (src/controller/switches).
    #[command(flatten)]
    pub switches: crate::controller::switches::SwitchSettings,
    /// PreprovisioningImages (src/controller/preprov_image).
    #[command(flatten)]
    pub preprov_image: crate::controller::preprov_image::PreprovImageSettings,

    /// Turn DHCP requests from MACs no BareMetalHost has into new BareMetalHosts (no
    /// BMC, operationalStatus `discovered`), once per MAC; needs BMO_DHCP_MODE.
    #[arg(long, env = "BMO_DISCOVERY")]
    pub discovery: bool,

    /// Namespace of the hosts discovery creates (default: WATCH_NAMESPACE, else
    /// `default`).
    #[arg(long, env = "BMO_DISCOVERY_NAMESPACE")]
    pub discovery_namespace: Option<String>,

    /// Hosts discovery may create per 10-second window.
    #[arg(long, env = "BMO_DISCOVERY_BURST", default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..))]
    pub discovery_burst: u32,

    /// Hosts discovery may create per minute.
    #[arg(long, env = "BMO_DISCOVERY_PER_MINUTE", default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..))]
    pub discovery_per_minute: u32,

    /// Hosts discovery may create in total while bmo runs.
    #[arg(long, env = "BMO_DISCOVERY_MAX_HOSTS", default_value_t = 200, value_parser = clap::value_parser!(u32).range(1..))]
    pub discovery_max_hosts: u32,

    /// Log line format.
    #[arg(long, env = "BMO_LOG_FORMAT", value_enum, default_value_t = LogFormat::Human)]
    pub log_format: LogFormat,

    /// Provisioning network: own IP, DHCP, TFTP, HTTP boot (src/netboot/config.rs).
    #[command(flatten)]
    pub netboot: crate::netboot::config::NetbootConfig,
}

impl Config {
    /// The leader election Lease namespace and timings, when leader election is on.
    pub fn leader_election(
        &self,
    ) -> Result<Option<(String, crate::leader::Timings)>, crate::leader::LeaderSettingsError> {
        self.leader.election(self.watch_namespace.as_deref())
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
                limits: crate::controller::discovery::DiscoveryLimits {
                    per_window: self.discovery_burst,
                    per_minute: self.discovery_per_minute,
                    total: self.discovery_max_hosts,
                },
            })
    }

    /// The controller's part of the configuration.
    pub fn controller_settings(&self) -> crate::controller::host::ControllerSettings {
        crate::controller::host::ControllerSettings {
            namespace: self.watch_namespace.clone().filter(|ns| !ns.is_empty()),
            concurrency: self.concurrency,
            provisioning_limit: self.provisioning_limit.max(1),
            max_backoff: Duration::from_secs(self.max_backoff_secs),
            steady_poll: Duration::from_secs(self.steady_poll_secs),
            start_settle: Duration::from_secs(self.start_settle_secs),
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
