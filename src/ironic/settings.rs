//! Settings of the Ironic client, flattened into [`crate::config::Config`].

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use url::Url;

use super::{ClientConfig, IronicAuth, IronicError};

/// Upstream's default Ironic endpoint.
pub const DEFAULT_IRONIC_ENDPOINT: &str = "http://localhost:6385/v1/";

/// Where Ironic is and how to talk to it.
#[derive(Debug, Clone, Args)]
pub struct IronicSettings {
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
}

impl IronicSettings {
    /// The client configuration, with the credentials read from the auth directory
    /// now (at start-up, before any connection).
    pub fn client_config(&self) -> Result<ClientConfig, IronicError> {
        let mut config = ClientConfig::new(self.ironic_endpoint.clone());
        config.auth = IronicAuth::from_auth_dir(&self.auth_root_dir)?;
        config.ca_file = self.ironic_cacert_file.clone();
        config.insecure = self.ironic_insecure;
        config.timeout = Duration::from_secs(self.ironic_timeout_secs);
        Ok(config)
    }
}
