//! Provisioning network services: bmo's own address, DHCP with hostname capture,
//! TFTP and HTTP boot, and the lease table shared with the host controller.
//!
//! See `docs/netboot.md`.

pub mod address;
pub mod config;
pub mod cpio;
pub mod descriptors;
pub mod dhcp;
pub mod files;
pub mod host_ramdisks;
pub mod hostname;
pub mod hosts;
pub mod http;
pub mod http_server;
pub mod ipxe;
pub mod leases;
pub mod mac;
pub mod slots;
pub mod tftp;

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;

use address::{AddressError, Choice, Selector};
use config::{DhcpMode, NetbootConfig};
use dhcp::policy::{Mode, Policy};
use files::{Loaders, TftpFiles};
use host_ramdisks::HostRamdisks;
use hosts::{HostDirectory, StaticHosts};
use http::HttpState;
use leases::{LeaseError, LeaseTable};
use slots::Slots;

/// How often the provisioning address is re-checked.
const FOLLOW_INTERVAL: Duration = Duration::from_secs(5);

/// How often expired lease records are looked for.
const PRUNE_INTERVAL: Duration = Duration::from_secs(30);

/// Removes lease records past their retention, now and then.
async fn prune_leases(leases: LeaseTable) {
    let mut every = tokio::time::interval(PRUNE_INTERVAL);
    loop {
        every.tick().await;
        let removed = leases.prune();
        if removed > 0 {
            tracing::debug!(removed, left = leases.len(), "old lease records removed");
        }
    }
}

/// Why the network boot services could not start.
#[derive(Debug, thiserror::Error)]
pub enum NetbootError {
    #[error(transparent)]
    Address(#[from] AddressError),
    #[error(transparent)]
    Leases(#[from] LeaseError),
    #[error("cannot listen on {addr} for {service}: {source}; free the port or change {setting}")]
    Bind {
        service: &'static str,
        addr: String,
        setting: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("DHCP cannot start: {0}")]
    Dhcp(String),
}

/// The running services. Dropping it stops them.
pub struct Netboot {
    /// The provisioning address, updated when it changes.
    pub address: watch::Receiver<Choice>,
    pub leases: LeaseTable,
    pub http_addr: Option<SocketAddr>,
    pub tftp_addr: Option<SocketAddr>,
    /// TFTP transfers running (when TFTP is on).
    pub tftp_sessions: Option<Slots>,
    /// The hosts DHCP knows (`DHCP_HOSTS`); the host controller attaches the
    /// cluster's BareMetalHosts to it.
    pub known_hosts: HostDirectory,
    /// The per-host ramdisks the HTTP server serves (empty unless bmo builds
    /// PreprovisioningImages).
    pub host_ramdisks: HostRamdisks,
    http_port: u16,
    tasks: Vec<JoinHandle<()>>,
}

impl Drop for Netboot {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

impl Netboot {
    /// The IPA kernel and ramdisk on bmo's HTTP server, as the provisioning IP changes.
    pub fn deploy_images(&self) -> DeployImages {
        DeployImages::new(self.address.clone(), self.http_port)
    }

    /// Writes pending lease changes; call before shutting down.
    pub async fn shutdown(self) -> Result<(), LeaseError> {
        self.leases.flush().await
    }
}

/// The IPA kernel and ramdisk URLs on bmo's own HTTP server. They follow the
/// provisioning IP: each call gives the URL on the address in use now.
#[derive(Debug, Clone)]
pub struct DeployImages {
    address: watch::Receiver<Choice>,
    port: u16,
}

impl DeployImages {
    /// URLs on the address `address` holds, at HTTP port `port`.
    pub fn new(address: watch::Receiver<Choice>, port: u16) -> Self {
        Self { address, port }
    }

    pub fn kernel_url(&self) -> String {
        self.url(http::DEFAULT_KERNEL)
    }

    pub fn ramdisk_url(&self) -> String {
        self.url(http::DEFAULT_RAMDISK)
    }

    fn url(&self, file: &str) -> String {
        self.http_url(&format!("/images/{file}"))
    }

    /// The URL of `path` (starting with `/`) on bmo's HTTP server, on the
    /// provisioning IP in use now.
    pub fn http_url(&self, path: &str) -> String {
        let base = self.address.borrow().http_base(self.port);
        format!("{base}{path}")
    }

    /// Resolves when the provisioning IP changed since the last call; `false` once
    /// the services stopped and it can change no more.
    pub async fn changed(&mut self) -> bool {
        self.address.changed().await.is_ok()
    }
}

/// Detects the provisioning address and starts the services `cfg` switches on.
/// Sockets are opened on the calling runtime thread, hence in its network namespace.
pub async fn start(cfg: &NetbootConfig, leases: LeaseTable) -> Result<Netboot, NetbootError> {
    let selector = Selector::from_config(&cfg.provisioning)?;
    let choice = address::wait_for_address(&selector, cfg.provisioning.wait()).await?;
    tracing::info!(address = %choice, "provisioning IP");
    let address = address::follow(selector, choice.clone(), FOLLOW_INTERVAL);
    let known_hosts = HostDirectory::new(StaticHosts::new(cfg.dhcp_hosts.as_ref()));
    leases.set_limits(cfg.lease_limits());
    leases.spawn_writer();
    let mut tasks = vec![tokio::spawn(prune_leases(leases.clone()))];
    let kernel_url = cfg.deploy_kernel_url.as_ref().map(ToString::to_string);
    let ramdisk_url = cfg.deploy_ramdisk_url.as_ref().map(ToString::to_string);
    let loaders = Loaders {
        dir: cfg.ipxe_dir.clone(),
    };

    let host_ramdisks = HostRamdisks::new();
    let mut http_addr = None;
    let mut http_port = cfg.http_port;
    if cfg.http {
        let bind = SocketAddr::new(cfg.http_bind, cfg.http_port);
        let listener = tokio::net::TcpListener::bind(bind)
            .await
            .map_err(|source| NetbootError::Bind {
                service: "HTTP boot",
                addr: bind.to_string(),
                setting: "HTTP_PORT or BMO_HTTP_BIND",
                source,
            })?;
        let local = listener.local_addr().unwrap_or(bind);
        http_port = local.port();
        http_addr = Some(local);
        let state = HttpState {
            http_root: cfg.http_root.clone(),
            images_dir: cfg.images_dir.clone(),
            loaders: loaders.clone(),
            leases: leases.clone(),
            address: address.clone(),
            port: http_port,
            kernel_url,
            ramdisk_url,
            kernel_params: cfg.ipxe_kernel_params.clone(),
            leases_access: cfg.http_leases,
            host_ramdisks: host_ramdisks.clone(),
        };
        let app = http::router(state);
        tracing::info!(addr = %local, root = %cfg.http_root.display(), images = %cfg.images_dir.display(), "serving HTTP boot");
        tasks.push(tokio::spawn(http_server::serve(
            listener,
            app,
            cfg.http_limits(),
        )));
    }

    let mut tftp_addr = None;
    let mut tftp_sessions = None;
    if cfg.tftp {
        let socket = tokio::net::UdpSocket::bind(cfg.tftp_addr)
            .await
            .map_err(|source| NetbootError::Bind {
                service: "TFTP",
                addr: cfg.tftp_addr.to_string(),
                setting: "BMO_TFTP_ADDR",
                source,
            })?;
        tftp_addr = Some(socket.local_addr().unwrap_or(cfg.tftp_addr));
        let files = Arc::new(TftpFiles {
            loaders: loaders.clone(),
            images_dir: cfg.images_dir.clone(),
            tftp_root: cfg.tftp_root.clone(),
        });
        tracing::info!(addr = %cfg.tftp_addr, loaders = ?loaders.available(), root = %cfg.tftp_root.display(), "serving TFTP");
        let sessions = tftp::session_slots(
            cfg.tftp_max_sessions as usize,
            cfg.tftp_max_sessions_per_client as usize,
        );
        tftp_sessions = Some(sessions.clone());
        tasks.push(tokio::spawn(tftp::serve(socket, files, sessions)));
    }

    if cfg.dhcp_mode != DhcpMode::Off {
        let IpAddr::V4(server_ip) = choice.ip else {
            return Err(NetbootError::Dhcp(format!(
                "the provisioning IP {} is IPv6; DHCPv4 needs an IPv4 one (set BMO_PROVISIONING_IP_FAMILY=ipv4)",
                choice.ip
            )));
        };
        let Some(interface) = choice.interface.clone() else {
            return Err(NetbootError::Dhcp(
                "the provisioning IP is on no known interface".into(),
            ));
        };
        let prefix = u32::from(choice.prefix_len.unwrap_or(24).min(32));
        let netmask = std::net::Ipv4Addr::from(u32::MAX.checked_shl(32 - prefix).unwrap_or(0));
        let mode = match (cfg.dhcp_mode, cfg.dhcp_range) {
            (DhcpMode::Proxy, _) => Mode::Proxy,
            (_, Some(range)) => Mode::Full { range },
            (_, None) => {
                return Err(NetbootError::Dhcp(
                    config::NetbootConfigError::FullWithoutRange.to_string(),
                ));
            }
        };
        let policy = Policy {
            mode: mode.clone(),
            server_ip,
            netmask,
            router: cfg.gateway_ip,
            dns: cfg.dns_ip,
            lease_secs: cfg.dhcp_lease_secs,
            http_base: choice.http_base(http_port),
            hosts: known_hosts.clone(),
            known_only: cfg.dhcp_ignore == Some(config::DhcpIgnore::Unknown),
        };
        let mut ports = vec![(67u16, false)];
        if matches!(mode, Mode::Proxy) {
            ports.push((4011, true));
        }
        for (port, proxy_port) in ports {
            let socket =
                dhcp::server::bind(&interface, port).map_err(|source| NetbootError::Bind {
                    service: "DHCP",
                    addr: format!("0.0.0.0:{port} on {interface}"),
                    setting: "BMO_DHCP_MODE",
                    source,
                })?;
            tasks.push(tokio::spawn(dhcp::server::serve(
                socket,
                policy.clone(),
                http_port,
                address.clone(),
                leases.clone(),
                proxy_port,
            )));
        }
        tracing::info!(mode = ?cfg.dhcp_mode, %interface, %server_ip, known_hosts_only = policy.known_only, "serving DHCP");
    }

    Ok(Netboot {
        address,
        leases,
        http_addr,
        tftp_addr,
        tftp_sessions,
        known_hosts,
        host_ramdisks,
        http_port,
        tasks,
    })
}
