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

    /// Log line format.
    #[arg(long, env = "BMO_LOG_FORMAT", value_enum, default_value_t = LogFormat::Human)]
    pub log_format: LogFormat,

    /// Provisioning network: own IP, DHCP, TFTP, HTTP boot (src/netboot/config.rs).
    #[command(flatten)]
    pub netboot: crate::netboot::config::NetbootConfig,
}

impl Config {
    pub fn ironic_timeout(&self) -> Duration {
        Duration::from_secs(self.ironic_timeout_secs)
    }
}
