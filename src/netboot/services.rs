//! Starting the network boot services: the provisioning address first, then HTTP,
//! TFTP and DHCP as the settings switch them on, and [`Netboot`], the handle that
//! keeps them running.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::address::{self, AddressError, Choice, Selector};
use super::boot_log::BootLog;
use super::config::{DhcpIgnore, DhcpMode, NetbootConfig, NetbootConfigError};
use super::deploy_images::DeployImages;
use super::dhcp::policy::{Mode, Policy};
use super::dhcp::policy6::{Mode6, Policy6};
use super::dhcp::range::DhcpRanges;
use super::dhcp::relay::{Relays, local_range};
use super::dhcp::relay6::{Relays6, local_range6};
use super::dhcp::server::{self as dhcp_server, Answers};
use super::dhcp::server6;
use super::files::{Loaders, TftpFiles};
use super::host_ramdisks::HostRamdisks;
use super::hosts::{HostDirectory, StaticHosts};
use super::http::{self, HttpState};
use super::http_server;
use super::leases::{LeaseError, LeaseTable};
use super::ra;
use super::slots::Slots;
use super::tftp;

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
    /// Each client's recent DHCP exchanges and transfers.
    pub boot_log: BootLog,
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
    let boot_log = BootLog::new(leases.clone());
    let mut tasks = vec![tokio::spawn(prune_leases(leases.clone()))];
    let loaders = Loaders {
        dir: cfg.ipxe_dir.clone(),
    };

    let host_ramdisks = HostRamdisks::new();
    let mut http_addr = None;
    let mut http_port = cfg.http_port;
    if cfg.http {
        let served = ServedByHttp {
            loaders: loaders.clone(),
            leases: leases.clone(),
            address: address.clone(),
            host_ramdisks: host_ramdisks.clone(),
            boot_log: boot_log.clone(),
        };
        let (local, task) = start_http(cfg, served).await?;
        http_port = local.port();
        http_addr = Some(local);
        tasks.push(task);
    }

    let mut tftp_addr = None;
    let mut tftp_sessions = None;
    if cfg.tftp {
        let (local, sessions, task) = start_tftp(cfg, loaders, boot_log.clone()).await?;
        tftp_addr = Some(local);
        tftp_sessions = Some(sessions);
        tasks.push(task);
    }

    if cfg.dhcp_mode != DhcpMode::Off {
        let served = ServedByDhcp {
            http_port,
            known_hosts: known_hosts.clone(),
            address: address.clone(),
            leases: leases.clone(),
            boot_log: boot_log.clone(),
        };
        tasks.extend(start_dhcp(cfg, &choice, served)?);
    }

    Ok(Netboot {
        address,
        leases,
        boot_log,
        http_addr,
        tftp_addr,
        tftp_sessions,
        known_hosts,
        host_ramdisks,
        http_port,
        tasks,
    })
}

/// Binds the HTTP boot server and starts serving; returns its address.
/// What the HTTP boot server serves and records, besides its settings.
struct ServedByHttp {
    loaders: Loaders,
    leases: LeaseTable,
    address: watch::Receiver<Choice>,
    host_ramdisks: HostRamdisks,
    boot_log: BootLog,
}

async fn start_http(
    cfg: &NetbootConfig,
    served: ServedByHttp,
) -> Result<(SocketAddr, JoinHandle<()>), NetbootError> {
    let bind = SocketAddr::new(cfg.http_bind, cfg.http_port);
    let listener = super::listen::tcp_listener(bind).map_err(|source| NetbootError::Bind {
        service: "HTTP boot",
        addr: bind.to_string(),
        setting: "HTTP_PORT or BMO_HTTP_BIND",
        source,
    })?;
    let local = listener.local_addr().unwrap_or(bind);
    let state = HttpState {
        http_root: cfg.http_root.clone(),
        images_dir: cfg.images_dir.clone(),
        loaders: served.loaders,
        leases: served.leases,
        address: served.address,
        port: local.port(),
        kernel_url: cfg.deploy_kernel_url.as_ref().map(ToString::to_string),
        ramdisk_url: cfg.deploy_ramdisk_url.as_ref().map(ToString::to_string),
        kernel_params: cfg.ipxe_kernel_params.clone(),
        leases_access: cfg.http_leases,
        host_ramdisks: served.host_ramdisks,
    };
    let app = http::router(state, served.boot_log);
    tracing::info!(addr = %local, root = %cfg.http_root.display(), images = %cfg.images_dir.display(), "serving HTTP boot");
    let task = tokio::spawn(http_server::serve(listener, app, cfg.http_limits()));
    Ok((local, task))
}

/// Binds the TFTP server and starts serving; returns its address and its transfers.
async fn start_tftp(
    cfg: &NetbootConfig,
    loaders: Loaders,
    boot_log: BootLog,
) -> Result<(SocketAddr, Slots, JoinHandle<()>), NetbootError> {
    let socket = super::listen::udp_socket(cfg.tftp_addr).map_err(|source| NetbootError::Bind {
        service: "TFTP",
        addr: cfg.tftp_addr.to_string(),
        setting: "BMO_TFTP_ADDR",
        source,
    })?;
    let local = socket.local_addr().unwrap_or(cfg.tftp_addr);
    tracing::info!(addr = %cfg.tftp_addr, loaders = ?loaders.available(), root = %cfg.tftp_root.display(), "serving TFTP");
    let files = Arc::new(TftpFiles {
        loaders,
        images_dir: cfg.images_dir.clone(),
        tftp_root: cfg.tftp_root.clone(),
    });
    let sessions = tftp::session_slots(
        cfg.tftp_max_sessions as usize,
        cfg.tftp_max_sessions_per_client as usize,
    );
    let task = tokio::spawn(tftp::serve(socket, files, sessions.clone(), boot_log));
    Ok((local, sessions, task))
}

/// What the DHCP server hands out and records, besides its settings.
struct ServedByDhcp {
    /// Port of bmo's HTTP boot server, for the iPXE script URL.
    http_port: u16,
    known_hosts: HostDirectory,
    address: watch::Receiver<Choice>,
    leases: LeaseTable,
    boot_log: BootLog,
}

/// Binds the DHCP ports on the provisioning interface (67, and 4011 in proxy mode)
/// and starts serving.
fn start_dhcp(
    cfg: &NetbootConfig,
    choice: &Choice,
    served: ServedByDhcp,
) -> Result<Vec<JoinHandle<()>>, NetbootError> {
    if let IpAddr::V6(server_ip) = choice.ip {
        return start_dhcp6(cfg, choice, server_ip, served);
    }
    if cfg.router_advertisements {
        tracing::warn!(address = %choice.ip, "BMO_ROUTER_ADVERTISEMENTS is ignored: the provisioning IP is IPv4");
    }
    let (answers, interface) = dhcp_policy(cfg, choice, &served)?;
    let policy = answers.policy.clone();
    let mut ports = vec![(67u16, false)];
    if matches!(policy.mode, Mode::Proxy) {
        ports.push((4011, true));
    }
    let mut tasks = Vec::new();
    for (port, proxy_port) in ports {
        let socket = dhcp_server::bind(&interface, port).map_err(|source| NetbootError::Bind {
            service: "DHCP",
            addr: format!("0.0.0.0:{port} on {interface}"),
            setting: "BMO_DHCP_MODE",
            source,
        })?;
        tasks.push(tokio::spawn(dhcp_server::serve(
            socket,
            answers.clone(),
            served.address.clone(),
            served.leases.clone(),
            served.boot_log.clone(),
            proxy_port,
        )));
    }
    tracing::info!(mode = ?cfg.dhcp_mode, %interface, server_ip = %policy.server_ip, known_hosts_only = policy.known_only, "serving DHCP");
    Ok(tasks)
}

/// The DHCP answers' policy and the interface to serve on, from the settings and the
/// provisioning address (which must be IPv4, on a known interface).
fn dhcp_policy(
    cfg: &NetbootConfig,
    choice: &Choice,
    served: &ServedByDhcp,
) -> Result<(Answers, String), NetbootError> {
    let IpAddr::V4(server_ip) = choice.ip else {
        return Err(NetbootError::Dhcp(format!(
            "the provisioning IP {} is IPv6; DHCPv4 needs an IPv4 one (set BMO_PROVISIONING_IP_FAMILY=ipv4)",
            choice.ip
        )));
    };
    let interface = dhcp_interface(choice)?;
    let prefix = u32::from(choice.prefix_len.unwrap_or(24).min(32));
    let netmask = Ipv4Addr::from(u32::MAX.checked_shl(32 - prefix).unwrap_or(0));
    let ranges = cfg
        .dhcp_range
        .as_ref()
        .map(DhcpRanges::v4)
        .unwrap_or_default();
    let local = local_range(&ranges, server_ip, netmask);
    let mode = match full_range(cfg, local, || {
        format!(
            "DHCP_RANGE is IPv6 but the provisioning IP {server_ip} is IPv4; give an IPv4 range or an IPv6 provisioning IP (BMO_PROVISIONING_IP_FAMILY=ipv6)"
        )
    })? {
        Some(range) => Mode::Full { range },
        None => Mode::Proxy,
    };
    if ranges.len() > 1 && matches!(mode, Mode::Full { .. }) {
        tracing::info!(ranges = ?ranges, "DHCP serves relayed subnets from their DHCP_RANGE");
    }
    let policy = Policy {
        mode,
        server_ip,
        netmask,
        router: cfg.gateway_ip,
        dns: cfg.dns_ip,
        lease_secs: cfg.dhcp_lease_secs,
        http_base: choice.http_base(served.http_port),
        hosts: served.known_hosts.clone(),
        known_only: cfg.dhcp_ignore == Some(DhcpIgnore::Unknown),
    };
    let answers = Answers {
        policy,
        relays: Relays::new(ranges),
        http_port: served.http_port,
    };
    Ok((answers, interface))
}

/// The provisioning IP's interface, where the DHCP servers listen.
fn dhcp_interface(choice: &Choice) -> Result<String, NetbootError> {
    choice
        .interface
        .clone()
        .ok_or_else(|| NetbootError::Dhcp("the provisioning IP is on no known interface".into()))
}

/// The range a full DHCP server leases from, `None` in proxy mode. `local` is the
/// range on the provisioning IP's subnet; without one, full mode is an error, worded
/// by `other_family` when `DHCP_RANGE` holds only the other address family.
fn full_range<R>(
    cfg: &NetbootConfig,
    local: Option<R>,
    other_family: impl FnOnce() -> String,
) -> Result<Option<R>, NetbootError> {
    match (cfg.dhcp_mode, local) {
        (DhcpMode::Proxy, _) => Ok(None),
        (_, Some(range)) => Ok(Some(range)),
        (_, None) if cfg.dhcp_range.is_some() => Err(NetbootError::Dhcp(other_family())),
        (_, None) => Err(NetbootError::Dhcp(
            NetbootConfigError::FullWithoutRange.to_string(),
        )),
    }
}

/// Opens the DHCPv6 sockets on the provisioning interface and starts serving, when
/// the provisioning IP is IPv6.
fn start_dhcp6(
    cfg: &NetbootConfig,
    choice: &Choice,
    server_ip: Ipv6Addr,
    served: ServedByDhcp,
) -> Result<Vec<JoinHandle<()>>, NetbootError> {
    let interface = dhcp_interface(choice)?;
    let ranges = cfg
        .dhcp_range
        .as_ref()
        .map(DhcpRanges::v6)
        .unwrap_or_default();
    let mode = match full_range(cfg, local_range6(&ranges, server_ip), || {
        format!(
            "DHCP_RANGE is IPv4 but the provisioning IP {server_ip} is IPv6; give an IPv6 range (e.g. fd00:1::10,fd00:1::100) or an IPv4 provisioning IP"
        )
    })? {
        Some(range) => Mode6::Full { range },
        None => Mode6::Proxy,
    };
    let sockets = server6::bind6(&interface).map_err(|source| NetbootError::Bind {
        service: "DHCPv6",
        addr: format!("[::]:547 and a packet socket on {interface}"),
        setting: "BMO_DHCP_MODE",
        source,
    })?;
    let advertising = start_advertising(cfg, choice, &mode, sockets.mac, &interface)?;
    let policy = Policy6 {
        mode,
        server_duid: sockets.server_duid(),
        server_ip,
        http_port: served.http_port,
        dns: None,
        lease_secs: cfg.dhcp_lease_secs,
        hosts: served.known_hosts,
        known_only: cfg.dhcp_ignore == Some(DhcpIgnore::Unknown),
    };
    tracing::info!(mode = ?cfg.dhcp_mode, %interface, %server_ip, known_hosts_only = policy.known_only, "serving DHCPv6");
    let mut tasks: Vec<JoinHandle<()>> = advertising.into_iter().collect();
    tasks.push(tokio::spawn(server6::serve6(
        sockets,
        policy,
        Relays6::new(ranges),
        served.address,
        served.leases,
        served.boot_log,
    )));
    Ok(tasks)
}

/// Starts sending router advertisements on `interface` when
/// `BMO_ROUTER_ADVERTISEMENTS` asks: the managed flag and the range's prefix in
/// full mode; other-config and the provisioning IP's prefix (for SLAAC when it is
/// a /64) in proxy mode.
fn start_advertising(
    cfg: &NetbootConfig,
    choice: &Choice,
    mode: &Mode6,
    mac: super::mac::MacAddr,
    interface: &str,
) -> Result<Option<JoinHandle<()>>, NetbootError> {
    if !cfg.router_advertisements {
        return Ok(None);
    }
    let advert = match mode {
        Mode6::Full { range } => ra::Advert {
            managed: true,
            other: false,
            prefix: range.start,
            prefix_len: range.prefix_len,
            autonomous: false,
            mac,
        },
        Mode6::Proxy => {
            let prefix_len = choice.prefix_len.unwrap_or(64).min(128);
            ra::Advert {
                managed: false,
                other: true,
                prefix: match choice.ip {
                    IpAddr::V6(ip) => ip,
                    IpAddr::V4(_) => Ipv6Addr::UNSPECIFIED,
                },
                prefix_len,
                autonomous: prefix_len == 64,
                mac,
            }
        }
    };
    let socket = ra::bind(interface).map_err(|source| NetbootError::Bind {
        service: "router advertisements",
        addr: format!("ICMPv6 on {interface}"),
        setting: "BMO_ROUTER_ADVERTISEMENTS",
        source,
    })?;
    tracing::info!(%interface, prefix = %advert.prefix, prefix_len = advert.prefix_len, managed = advert.managed, other_config = advert.other, "sending router advertisements");
    Ok(Some(tokio::spawn(ra::advertise(socket, advert))))
}
