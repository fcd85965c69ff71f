//! Settings of the provisioning network services, flattened into [`crate::config::Config`].
//!
//! Names follow upstream metal3 (baremetal-operator and ironic-image) where the meaning
//! exists there; bmo's own settings start with `BMO_`.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use clap::{ArgAction, Args, ValueEnum};
use url::Url;

use super::dhcp::range::{DhcpRanges, RANGE_FORM};
use super::http_server::HttpLimits;
use super::leases::LeaseLimits;
use super::mac::MacAddr;

/// Which address bmo advertises on the provisioning network, and how to find it.
#[derive(Debug, Clone, Default, Args)]
pub struct ProvisioningNetwork {
    /// The provisioning IP itself (`ADDR` or `ADDR/PREFIX`); bmo waits for it to appear
    /// on an interface.
    #[arg(long, env = "PROVISIONING_IP")]
    pub provisioning_ip: Option<String>,

    /// The interface whose address is the provisioning IP.
    #[arg(long, env = "PROVISIONING_INTERFACE")]
    pub provisioning_interface: Option<String>,

    /// MAC addresses (comma-separated) of candidate provisioning interfaces.
    #[arg(long, env = "PROVISIONING_MACS", value_delimiter = ',')]
    pub provisioning_macs: Vec<String>,

    /// A CIDR (e.g. `172.22.0.0/24`) the provisioning IP must fall in.
    #[arg(long, env = "BMO_PROVISIONING_CIDR")]
    pub provisioning_cidr: Option<String>,

    /// Address family to prefer when an interface has both.
    #[arg(long, env = "BMO_PROVISIONING_IP_FAMILY", value_enum, default_value_t = IpFamily::Ipv4)]
    pub provisioning_ip_family: IpFamily,

    /// Seconds to wait for the provisioning IP to appear at start-up.
    #[arg(
        long = "provisioning-ip-wait",
        env = "BMO_PROVISIONING_IP_WAIT",
        default_value_t = 60
    )]
    pub provisioning_ip_wait_secs: u64,
}

impl ProvisioningNetwork {
    pub fn wait(&self) -> Duration {
        Duration::from_secs(self.provisioning_ip_wait_secs)
    }
}

/// Who may read the lease table at `/bmo/v1/leases` (`BMO_HTTP_LEASES`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum LeasesAccess {
    /// Every client that reaches the HTTP boot server.
    All,
    /// Only clients on the same machine (127.0.0.0/8, ::1).
    #[default]
    Localhost,
    /// Nobody: answered 403.
    Off,
}

/// Preferred address family.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub enum IpFamily {
    #[default]
    Ipv4,
    Ipv6,
}

/// DHCP server mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub enum DhcpMode {
    /// No DHCP server (another one hands out addresses and boot options).
    #[default]
    Off,
    /// Addresses from `DHCP_RANGE` and `DHCP_HOSTS`, plus boot options.
    Full,
    /// proxyDHCP: boot options only, beside an existing DHCP server.
    Proxy,
}

/// Settings of the built-in DHCP, TFTP and HTTP boot services.
#[derive(Debug, Clone, Args)]
pub struct NetbootConfig {
    #[command(flatten)]
    pub provisioning: ProvisioningNetwork,

    /// IPA kernel URL handed to Ironic; defaults to bmo's HTTP server on the
    /// provisioning IP (`/images/ironic-python-agent.kernel`).
    #[arg(long, env = "DEPLOY_KERNEL_URL")]
    pub deploy_kernel_url: Option<Url>,

    /// IPA ramdisk URL handed to Ironic; defaults to bmo's HTTP server on the
    /// provisioning IP (`/images/ironic-python-agent.initramfs`).
    #[arg(long, env = "DEPLOY_RAMDISK_URL")]
    pub deploy_ramdisk_url: Option<Url>,

    /// Serve HTTP boot (iPXE scripts, IPA images, Ironic's http_root).
    #[arg(long = "netboot-http", env = "BMO_HTTP", default_value_t = true, action = ArgAction::Set)]
    pub http: bool,

    /// Address the HTTP boot server listens on (the port comes from `HTTP_PORT`);
    /// `::` listens on IPv6 and IPv4.
    #[arg(long, env = "BMO_HTTP_BIND", default_value = "::")]
    pub http_bind: IpAddr,

    /// Port of the HTTP boot server (upstream ironic-image's `HTTP_PORT`).
    #[arg(long, env = "HTTP_PORT", default_value_t = 6180)]
    pub http_port: u16,

    /// Seconds a client has to send a complete request header, on a new connection
    /// and between requests on a kept-alive one.
    #[arg(long = "http-header-timeout", env = "BMO_HTTP_HEADER_TIMEOUT", default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub http_header_timeout_secs: u64,

    /// Seconds without a byte read or written after which an HTTP connection is closed.
    #[arg(long = "http-idle-timeout", env = "BMO_HTTP_IDLE_TIMEOUT", default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..=86400))]
    pub http_idle_timeout_secs: u64,

    /// Open HTTP boot connections in total; more are answered 503 and closed.
    #[arg(long, env = "BMO_HTTP_MAX_CONNECTIONS", default_value_t = 1024, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub http_max_connections: u32,

    /// Open HTTP boot connections from one client IP; more are answered 503 and closed.
    #[arg(long, env = "BMO_HTTP_MAX_CONNECTIONS_PER_CLIENT", default_value_t = 32, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub http_max_connections_per_client: u32,

    /// Who may read the lease table at `/bmo/v1/leases` on the HTTP boot server:
    /// `all`, `localhost` or `off`.
    #[arg(long, env = "BMO_HTTP_LEASES", value_enum, default_value_t = LeasesAccess::Localhost)]
    pub http_leases: LeasesAccess,

    /// Ironic's `[deploy] http_root`: where its iPXE boot interface writes
    /// `boot.ipxe` and `pxelinux.cfg/<mac>`, served at `/`.
    #[arg(long, env = "BMO_HTTP_ROOT", default_value = "/shared/html")]
    pub http_root: PathBuf,

    /// IPA kernel, ramdisk and OS images, served at `/images/` (HTTP and TFTP).
    #[arg(long, env = "BMO_IMAGES_DIR", default_value = "/shared/html/images")]
    pub images_dir: PathBuf,

    /// Serve TFTP (iPXE loaders, `/images/`, Ironic's `[pxe] tftp_root`).
    #[arg(long = "netboot-tftp", env = "BMO_TFTP", default_value_t = false, action = ArgAction::Set)]
    pub tftp: bool,

    /// Address the TFTP server listens on; `[::]` listens on IPv6 and IPv4.
    #[arg(long, env = "BMO_TFTP_ADDR", default_value = "[::]:69")]
    pub tftp_addr: SocketAddr,

    /// TFTP transfers running at once; more read requests get an ERROR packet.
    #[arg(long, env = "BMO_TFTP_MAX_SESSIONS", default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub tftp_max_sessions: u32,

    /// TFTP transfers running at once for one client IP.
    #[arg(long, env = "BMO_TFTP_MAX_SESSIONS_PER_CLIENT", default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub tftp_max_sessions_per_client: u32,

    /// Ironic's `[pxe] tftp_root`, served over TFTP at `/`.
    #[arg(long, env = "BMO_TFTP_ROOT", default_value = "/shared/tftpboot")]
    pub tftp_root: PathBuf,

    /// Directory of iPXE loaders that take precedence over the embedded ones
    /// (`undionly.kpxe`, `snponly-x86_64.efi`, `ipxe-x86_64.efi`, `snponly-arm64.efi`).
    #[arg(
        long,
        env = "BMO_IPXE_DIR",
        default_value = "/shared/custom_ipxe_firmware"
    )]
    pub ipxe_dir: PathBuf,

    /// Kernel parameters added to the fallback (inspection) iPXE script.
    #[arg(long, env = "BMO_IPXE_KERNEL_PARAMS", default_value = "ipa-insecure=1")]
    pub ipxe_kernel_params: String,

    /// DHCP server on the provisioning interface: off, full or proxy.
    #[arg(long, env = "BMO_DHCP_MODE", value_enum, default_value_t = DhcpMode::Off)]
    pub dhcp_mode: DhcpMode,

    /// Address range for full mode: `START,END[,PREFIXLEN|NETMASK]`, IPv4 for
    /// DHCPv4 or IPv6 (`fd00:1::10,fd00:1::100[,64]`) for DHCPv6. Several ranges,
    /// `;`-separated, serve one subnet each: the provisioning link's own and the
    /// subnets behind DHCP relays.
    #[arg(long, env = "DHCP_RANGE")]
    pub dhcp_range: Option<DhcpRanges>,

    /// Fixed addresses, `;`-separated `MAC,IP` pairs.
    #[arg(long, env = "DHCP_HOSTS")]
    pub dhcp_hosts: Option<DhcpHosts>,

    /// `tag:!known`: answer known hosts only (`DHCP_HOSTS` entries and the MACs of
    /// BareMetalHosts); others are recorded, not answered.
    #[arg(long, env = "DHCP_IGNORE")]
    pub dhcp_ignore: Option<DhcpIgnore>,

    /// Router (option 3) handed out in full mode.
    #[arg(long, env = "GATEWAY_IP")]
    pub gateway_ip: Option<Ipv4Addr>,

    /// DNS server (option 6) handed out in full mode.
    #[arg(long, env = "DNS_IP")]
    pub dns_ip: Option<Ipv4Addr>,

    /// Send IPv6 router advertisements on the provisioning interface (DHCPv6 only):
    /// the managed flag in full mode, other-config in proxy mode, and the prefix.
    /// Leave off where the site's router already advertises the link.
    #[arg(long, env = "BMO_ROUTER_ADVERTISEMENTS", default_value_t = false, action = ArgAction::Set)]
    pub router_advertisements: bool,

    /// Lease time in seconds.
    #[arg(long, env = "BMO_DHCP_LEASE_TIME", default_value_t = 3600, value_parser = clap::value_parser!(u32).range(60..))]
    pub dhcp_lease_secs: u32,

    /// Lease records kept at most (and so in the lease file). When full, records
    /// without a live lease make room, longest unseen first.
    #[arg(long, env = "BMO_DHCP_MAX_LEASES", default_value_t = 4096, value_parser = clap::value_parser!(u32).range(16..=1_000_000))]
    pub dhcp_max_leases: u32,

    /// Seconds after which a record whose lease expired, and whose client was not
    /// seen since, is removed from the table.
    #[arg(long = "dhcp-lease-retention", env = "BMO_DHCP_LEASE_RETENTION", default_value_t = 7 * 24 * 3600, value_parser = clap::value_parser!(u64).range(60..))]
    pub dhcp_lease_retention_secs: u64,

    /// Where the lease table is persisted (JSON, written atomically).
    #[arg(
        long,
        env = "BMO_LEASE_FILE",
        default_value = "/var/lib/bmo/leases.json"
    )]
    pub lease_file: PathBuf,
}

/// A combination of netboot settings that cannot work; each names the variables to fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NetbootConfigError {
    #[error("BMO_DHCP_MODE=full needs DHCP_RANGE={RANGE_FORM}")]
    FullWithoutRange,
    #[error(
        "BMO_ROUTER_ADVERTISEMENTS=true needs bmo's DHCPv6 server: set BMO_DHCP_MODE to full or proxy, or leave router advertisements to the site's router"
    )]
    AdvertisementsWithoutDhcp,
}

/// `DHCP_IGNORE`: which clients are not answered. ironic-image hands the value to
/// dnsmasq's `dhcp-ignore`; bmo understands the one form metal3 deployments use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DhcpIgnore {
    /// `tag:!known`: every client that is not a known host.
    Unknown,
}

impl FromStr for DhcpIgnore {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "tag:!known" => Ok(DhcpIgnore::Unknown),
            other => Err(format!(
                "DHCP_IGNORE {other:?}: bmo understands only tag:!known (answer known hosts only: DHCP_HOSTS entries and BareMetalHosts' MACs)"
            )),
        }
    }
}

/// `DHCP_HOSTS`: fixed addresses, `;`-separated `MAC,IP` pairs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DhcpHosts(pub Vec<(MacAddr, Ipv4Addr)>);

impl FromStr for DhcpHosts {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let entry = |host: &str| -> Result<(MacAddr, Ipv4Addr), String> {
            let form = "expected MAC,IP[;MAC,IP...], e.g. 52:54:00:12:34:56,172.22.0.20";
            let (mac, ip) = host
                .split_once(',')
                .ok_or_else(|| format!("DHCP_HOSTS entry {host:?} is not MAC,IP; {form}"))?;
            let mac = mac
                .trim()
                .parse()
                .map_err(|e| format!("DHCP_HOSTS entry {host:?}: {e}; {form}"))?;
            let ip = ip.trim().parse().map_err(|e| {
                format!("DHCP_HOSTS entry {host:?}: bad IPv4 address ({e}); {form}")
            })?;
            Ok((mac, ip))
        };
        s.split(';')
            .map(str::trim)
            .filter(|h| !h.is_empty())
            .map(entry)
            .collect::<Result<_, _>>()
            .map(DhcpHosts)
    }
}

impl NetbootConfig {
    /// The HTTP boot server's connection limits.
    pub fn http_limits(&self) -> HttpLimits {
        HttpLimits {
            header_timeout: Duration::from_secs(self.http_header_timeout_secs),
            idle_timeout: Duration::from_secs(self.http_idle_timeout_secs),
            max_connections: self.http_max_connections as usize,
            max_connections_per_client: self.http_max_connections_per_client as usize,
        }
    }

    /// The lease table's bounds.
    pub fn lease_limits(&self) -> LeaseLimits {
        LeaseLimits {
            max_leases: self.dhcp_max_leases as usize,
            retention_secs: self.dhcp_lease_retention_secs,
        }
    }

    /// Checks what each setting alone cannot: called at start-up, before any
    /// connection.
    pub fn check(&self) -> Result<(), NetbootConfigError> {
        if self.dhcp_mode == DhcpMode::Full && self.dhcp_range.is_none() {
            return Err(NetbootConfigError::FullWithoutRange);
        }
        if self.router_advertisements && self.dhcp_mode == DhcpMode::Off {
            return Err(NetbootConfigError::AdvertisementsWithoutDhcp);
        }
        Ok(())
    }

    /// Whether any network boot service is switched on.
    pub fn any_service(&self) -> bool {
        self.http || self.tftp || self.dhcp_mode != DhcpMode::Off
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netboot::dhcp::range::assert_refused_with_form;

    #[test]
    fn dhcp_hosts_are_mac_ip_pairs_and_a_bad_one_names_the_variable_and_form() {
        let hosts: DhcpHosts = " 52:54:00:00:00:01,172.22.0.20 ; 52:54:00:00:00:02,172.22.0.21;"
            .parse()
            .expect("valid");
        assert_eq!(hosts.0.len(), 2);
        assert_eq!(hosts.0[1].1, Ipv4Addr::new(172, 22, 0, 21));
        for bad in [
            "52:54:00:00:00:01",
            "nonsense,172.22.0.20",
            "52:54:00:00:00:01,1.2.3",
        ] {
            let e = bad.parse::<DhcpHosts>().expect_err(bad);
            assert!(e.contains("DHCP_HOSTS") && e.contains("MAC,IP"), "{e}");
        }
    }

    #[test]
    fn dhcp_ignore_is_tag_not_known_or_an_error_naming_the_variable() {
        assert_eq!(" tag:!known ".parse(), Ok(DhcpIgnore::Unknown));
        for bad in ["tag:known", "tag:!foo", ""] {
            let e = bad.parse::<DhcpIgnore>().expect_err(bad);
            assert!(e.contains("DHCP_IGNORE") && e.contains("tag:!known"), "{e}");
        }
    }

    fn parsed(args: &[&str]) -> NetbootConfig {
        use clap::{FromArgMatches, Parser};
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            netboot: NetbootConfig,
        }
        let matches = <Cli as clap::CommandFactory>::command()
            .try_get_matches_from(std::iter::once("bmo").chain(args.iter().copied()))
            .expect("parses");
        Cli::from_arg_matches(&matches).expect("parses").netboot
    }

    #[test]
    fn router_advertisements_are_off_by_default_and_need_a_dhcp_server() {
        let cfg = parsed(&[]);
        assert!(!cfg.router_advertisements);
        let cfg = parsed(&["--router-advertisements", "true"]);
        let e = cfg.check().expect_err("DHCP off");
        assert_eq!(e, NetbootConfigError::AdvertisementsWithoutDhcp);
        assert!(e.to_string().contains("BMO_DHCP_MODE"), "{e}");
        let cfg = parsed(&["--router-advertisements", "true", "--dhcp-mode", "proxy"]);
        assert_eq!(cfg.check(), Ok(()));
        let cfg = parsed(&[
            "--dhcp-mode",
            "full",
            "--dhcp-range",
            "10.0.0.10,10.0.0.20;10.1.0.10,10.1.0.20",
        ]);
        assert_eq!(cfg.dhcp_range.map(|r| r.v4().len()), Some(2));
    }

    #[test]
    fn a_bad_dhcp_range_names_the_variable_and_the_accepted_form() {
        assert_refused_with_form::<DhcpRanges>(&[
            "172.22.0.10-172.22.0.100",
            "172.22.0.100,172.22.0.10",
            "a,b",
            "1.1.1.1,1.1.1.2,40",
        ]);
    }
}
