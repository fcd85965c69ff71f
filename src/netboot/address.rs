//! Finds bmo's own address on the provisioning network.
//!
//! Order of precedence: an explicit IP, an interface name, an interface with one of
//! the given MACs, any interface with an address in a CIDR, the interface of the
//! default route. A CIDR given together with an interface or MACs filters their
//! addresses. The choice is made from a [`Snapshot`] of the interfaces, so the rules
//! are tested without touching the machine's network.

use std::collections::BTreeMap;
use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;
use std::time::Duration;

use serde::Serialize;
use tokio::sync::watch;

use super::config::{IpFamily, ProvisioningNetwork};
use super::mac::MacAddr;

/// An IP network: an address and a prefix length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IpNet {
    pub addr: IpAddr,
    pub prefix_len: u8,
}

impl IpNet {
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.addr, ip) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                let mask = u32::MAX
                    .checked_shl(32 - u32::from(self.prefix_len))
                    .unwrap_or(0);
                u32::from(net) & mask == u32::from(ip) & mask
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.prefix_len))
                    .unwrap_or(0);
                u128::from(net) & mask == u128::from(ip) & mask
            }
            _ => false,
        }
    }
}

impl FromStr for IpNet {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (addr, len) = s
            .split_once('/')
            .ok_or_else(|| format!("{s:?} is not a CIDR: expected ADDRESS/PREFIXLEN"))?;
        let addr: IpAddr = addr
            .parse()
            .map_err(|e| format!("{s:?} is not a CIDR: bad address: {e}"))?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix_len: u8 = len
            .parse()
            .ok()
            .filter(|l| *l <= max)
            .ok_or_else(|| format!("{s:?} is not a CIDR: prefix length must be 0..={max}"))?;
        Ok(IpNet { addr, prefix_len })
    }
}

impl fmt::Display for IpNet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix_len)
    }
}

/// One address on one interface.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InterfaceAddr {
    pub interface: String,
    pub ip: IpAddr,
    pub prefix_len: u8,
}

/// The machine's interfaces at one moment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Snapshot {
    pub addrs: Vec<InterfaceAddr>,
    /// Interface name → hardware address.
    pub macs: BTreeMap<String, MacAddr>,
    /// Interfaces that carry a default route (IPv4 first, then IPv6).
    pub default_route_interfaces: Vec<String>,
}

/// What to look for, parsed from [`ProvisioningNetwork`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selector {
    pub ip: Option<IpAddr>,
    pub interface: Option<String>,
    pub macs: Vec<MacAddr>,
    pub cidr: Option<IpNet>,
    pub family: IpFamily,
}

/// Why no provisioning address could be chosen.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AddressError {
    #[error("invalid provisioning network setting {setting}: {reason}")]
    Invalid {
        setting: &'static str,
        reason: String,
    },
    #[error(
        "no provisioning IP found: {reason}; set PROVISIONING_IP, PROVISIONING_INTERFACE, PROVISIONING_MACS or BMO_PROVISIONING_CIDR to one that exists"
    )]
    NotFound { reason: String },
    #[error("cannot list network interfaces: {0}")]
    Io(String),
}

/// The chosen address and why it was chosen.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Choice {
    pub ip: IpAddr,
    pub interface: Option<String>,
    pub prefix_len: Option<u8>,
    pub reason: String,
}

impl Choice {
    /// `http://IP:PORT` with IPv6 addresses bracketed.
    pub fn http_base(&self, port: u16) -> String {
        url_base("http", self.ip, port)
    }
}

/// `SCHEME://IP:PORT` with IPv6 addresses bracketed.
pub fn url_base(scheme: &str, ip: IpAddr, port: u16) -> String {
    match ip {
        IpAddr::V4(v4) => format!("{scheme}://{v4}:{port}"),
        IpAddr::V6(v6) => format!("{scheme}://[{v6}]:{port}"),
    }
}

impl fmt::Display for Choice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.ip)?;
        if let Some(iface) = &self.interface {
            write!(f, " on {iface}")?;
        }
        write!(f, " ({})", self.reason)
    }
}

impl Selector {
    pub fn from_config(cfg: &ProvisioningNetwork) -> Result<Self, AddressError> {
        let ip = match cfg.provisioning_ip.as_deref().map(str::trim) {
            None | Some("") => None,
            Some(s) => {
                let addr = s.split_once('/').map_or(s, |(a, _)| a);
                let addr = addr.trim_start_matches('[').trim_end_matches(']');
                Some(addr.parse().map_err(|e| AddressError::Invalid {
                    setting: "PROVISIONING_IP",
                    reason: format!("{s:?} is not an IP address: {e}"),
                })?)
            }
        };
        let macs = cfg
            .provisioning_macs
            .iter()
            .map(|s| s.trim())
            .filter(|s| !s.is_empty())
            .map(|s| {
                s.parse().map_err(|e| AddressError::Invalid {
                    setting: "PROVISIONING_MACS",
                    reason: e,
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let cidr = match cfg.provisioning_cidr.as_deref().map(str::trim) {
            None | Some("") => None,
            Some(s) => Some(s.parse().map_err(|reason| AddressError::Invalid {
                setting: "BMO_PROVISIONING_CIDR",
                reason,
            })?),
        };
        Ok(Selector {
            ip,
            interface: cfg
                .provisioning_interface
                .clone()
                .filter(|s| !s.trim().is_empty()),
            macs,
            cidr,
            family: cfg.provisioning_ip_family,
        })
    }

    /// Chooses the provisioning address from `snap`.
    pub fn choose(&self, snap: &Snapshot) -> Result<Choice, AddressError> {
        if let Some(ip) = self.ip {
            return match snap.addrs.iter().find(|a| a.ip == ip) {
                Some(a) => Ok(Choice {
                    ip,
                    interface: Some(a.interface.clone()),
                    prefix_len: Some(a.prefix_len),
                    reason: format!("PROVISIONING_IP {ip} is on {}", a.interface),
                }),
                None => Err(AddressError::NotFound {
                    reason: format!("PROVISIONING_IP {ip} is on no interface"),
                }),
            };
        }
        if let Some(iface) = &self.interface {
            return self.pick_on(snap, iface, &format!("PROVISIONING_INTERFACE {iface}"));
        }
        if !self.macs.is_empty() {
            let mut wanted: Vec<&String> = snap
                .macs
                .iter()
                .filter(|(_, mac)| self.macs.contains(mac))
                .map(|(name, _)| name)
                .collect();
            wanted.sort();
            let mut last_err = None;
            for iface in wanted {
                let mac = snap.macs[iface];
                match self.pick_on(
                    snap,
                    iface,
                    &format!("{iface} has PROVISIONING_MACS entry {mac}"),
                ) {
                    Ok(c) => return Ok(c),
                    Err(e) => last_err = Some(e),
                }
            }
            return Err(last_err.unwrap_or_else(|| AddressError::NotFound {
                reason: format!(
                    "no interface has any of PROVISIONING_MACS {}",
                    self.macs
                        .iter()
                        .map(ToString::to_string)
                        .collect::<Vec<_>>()
                        .join(",")
                ),
            }));
        }
        if let Some(cidr) = self.cidr {
            let candidates: Vec<&InterfaceAddr> =
                snap.addrs.iter().filter(|a| cidr.contains(a.ip)).collect();
            return match best(&candidates, self.family) {
                Some(a) => Ok(Choice {
                    ip: a.ip,
                    interface: Some(a.interface.clone()),
                    prefix_len: Some(a.prefix_len),
                    reason: format!("{} is in BMO_PROVISIONING_CIDR {cidr}", a.ip),
                }),
                None => Err(AddressError::NotFound {
                    reason: format!("no interface has an address in BMO_PROVISIONING_CIDR {cidr}"),
                }),
            };
        }
        let mut last_err = None;
        for iface in &snap.default_route_interfaces {
            match self.pick_on(snap, iface, &format!("{iface} carries the default route")) {
                Ok(c) => return Ok(c),
                Err(e) => last_err = Some(e),
            }
        }
        Err(last_err.unwrap_or_else(|| AddressError::NotFound {
            reason: "nothing is configured and there is no default route".to_owned(),
        }))
    }

    fn pick_on(&self, snap: &Snapshot, iface: &str, why: &str) -> Result<Choice, AddressError> {
        let candidates: Vec<&InterfaceAddr> = snap
            .addrs
            .iter()
            .filter(|a| a.interface == iface)
            .filter(|a| self.cidr.is_none_or(|c| c.contains(a.ip)))
            .collect();
        match best(&candidates, self.family) {
            Some(a) => Ok(Choice {
                ip: a.ip,
                interface: Some(iface.to_owned()),
                prefix_len: Some(a.prefix_len),
                reason: match self.cidr {
                    Some(c) => format!("{why}; address in {c}"),
                    None => why.to_owned(),
                },
            }),
            None => Err(AddressError::NotFound {
                reason: match self.cidr {
                    Some(c) => format!("{iface} has no usable address in {c}"),
                    None => format!("{iface} has no usable address"),
                },
            }),
        }
    }
}

/// Global addresses before link-local ones, the preferred family first, then the
/// order the kernel lists them.
fn best<'a>(candidates: &[&'a InterfaceAddr], family: IpFamily) -> Option<&'a InterfaceAddr> {
    let rank = |a: &InterfaceAddr| {
        let link_local = match a.ip {
            IpAddr::V4(v4) => v4.is_link_local(),
            IpAddr::V6(v6) => v6.is_unicast_link_local(),
        };
        let other_family = match family {
            IpFamily::Ipv4 => a.ip.is_ipv6(),
            IpFamily::Ipv6 => a.ip.is_ipv4(),
        };
        (link_local, other_family)
    };
    candidates
        .iter()
        .filter(|a| !a.ip.is_unspecified() && !a.ip.is_multicast())
        .min_by_key(|a| rank(a))
        .copied()
}

/// Reads the interfaces of the calling thread's network namespace.
pub fn snapshot() -> Result<Snapshot, AddressError> {
    let mut snap = Snapshot::default();
    let ifaces = if_addrs::get_if_addrs().map_err(|e| AddressError::Io(e.to_string()))?;
    for iface in ifaces {
        let prefix_len = match &iface.addr {
            if_addrs::IfAddr::V4(v4) => u32::from(v4.netmask).count_ones() as u8,
            if_addrs::IfAddr::V6(v6) => u128::from(v6.netmask).count_ones() as u8,
        };
        if !snap.macs.contains_key(&iface.name)
            && let Some(mac) = hardware_address(&iface.name)
        {
            snap.macs.insert(iface.name.clone(), mac);
        }
        snap.addrs.push(InterfaceAddr {
            interface: iface.name,
            ip: iface.addr.ip(),
            prefix_len,
        });
    }
    snap.default_route_interfaces = default_route_interfaces();
    Ok(snap)
}

/// The kernel's index of the network interface `name`.
pub fn interface_index(name: &str) -> std::io::Result<u32> {
    let name = std::ffi::CString::new(name).map_err(|_| {
        std::io::Error::new(std::io::ErrorKind::InvalidInput, "interface name has a NUL")
    })?;
    // SAFETY: if_nametoindex reads a NUL-terminated string we own.
    let index = unsafe { libc::if_nametoindex(name.as_ptr()) };
    if index == 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(index)
}

/// The hardware address of `name`, asked of a socket in the calling thread's
/// network namespace (sysfs shows the namespace it was mounted in, not ours).
fn hardware_address(name: &str) -> Option<MacAddr> {
    let bytes = name.as_bytes();
    if bytes.len() >= libc::IFNAMSIZ {
        return None;
    }
    // SAFETY: plain socket/ioctl/close calls on a zeroed, NUL-terminated ifreq.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return None;
        }
        let mut req: libc::ifreq = std::mem::zeroed();
        for (dst, src) in req.ifr_name.iter_mut().zip(bytes) {
            *dst = *src as libc::c_char;
        }
        let rc = libc::ioctl(fd, libc::SIOCGIFHWADDR, &mut req);
        libc::close(fd);
        if rc != 0 {
            return None;
        }
        let sa = req.ifr_ifru.ifru_hwaddr;
        if sa.sa_family != libc::ARPHRD_ETHER {
            return None;
        }
        let mut mac = [0u8; 6];
        for (dst, src) in mac.iter_mut().zip(sa.sa_data.iter()) {
            *dst = *src as u8;
        }
        Some(MacAddr(mac))
    }
}

/// Interfaces carrying a default route, from the calling thread's namespace.
fn default_route_interfaces() -> Vec<String> {
    let mut out = Vec::new();
    if let Ok(text) = std::fs::read_to_string("/proc/thread-self/net/route") {
        out.extend(parse_ipv4_default_routes(&text));
    }
    if let Ok(text) = std::fs::read_to_string("/proc/thread-self/net/ipv6_route") {
        for iface in parse_ipv6_default_routes(&text) {
            if !out.contains(&iface) {
                out.push(iface);
            }
        }
    }
    out
}

/// `/proc/net/route`: Iface Destination Gateway Flags RefCnt Use Metric Mask ...
pub fn parse_ipv4_default_routes(text: &str) -> Vec<String> {
    let mut routes: Vec<(u32, String)> = text
        .lines()
        .skip(1)
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            let flags = u32::from_str_radix(f.get(3)?, 16).ok()?;
            let up = flags & 1 != 0;
            (up && *f.get(1)? == "00000000" && *f.get(7)? == "00000000")
                .then(|| Some((f.get(6)?.parse().ok()?, f[0].to_owned())))?
        })
        .collect();
    routes.sort();
    routes.into_iter().map(|(_, i)| i).collect()
}

/// `/proc/net/ipv6_route`: dest plen src splen nexthop metric refcnt use flags iface.
pub fn parse_ipv6_default_routes(text: &str) -> Vec<String> {
    const RTF_REJECT: u32 = 0x0200;
    let mut routes: Vec<(u32, String)> = text
        .lines()
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            let iface = *f.get(9)?;
            let flags = u32::from_str_radix(f.get(8)?, 16).ok()?;
            (f[0].chars().all(|c| c == '0')
                && *f.get(1)? == "00"
                && iface != "lo"
                && flags & RTF_REJECT == 0)
                .then(|| Some((u32::from_str_radix(f.get(5)?, 16).ok()?, iface.to_owned())))?
        })
        .collect();
    routes.sort();
    routes.into_iter().map(|(_, i)| i).collect()
}

/// Chooses the provisioning address, polling until `wait` has passed.
pub async fn wait_for_address(selector: &Selector, wait: Duration) -> Result<Choice, AddressError> {
    let deadline = tokio::time::Instant::now() + wait;
    let mut logged = false;
    loop {
        let result = snapshot().and_then(|s| selector.choose(&s));
        match result {
            Ok(choice) => return Ok(choice),
            Err(e @ (AddressError::Invalid { .. } | AddressError::Io(_))) => return Err(e),
            Err(e) if tokio::time::Instant::now() >= deadline => return Err(e),
            Err(e) => {
                if !logged {
                    tracing::info!(error = %e, wait_secs = wait.as_secs(), "waiting for the provisioning IP");
                    logged = true;
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
    }
}

/// Re-checks the provisioning address every `interval` and publishes changes. The
/// task runs on the caller's runtime thread, so it sees the caller's namespace.
pub fn follow(selector: Selector, initial: Choice, interval: Duration) -> watch::Receiver<Choice> {
    let (tx, rx) = watch::channel(initial);
    tokio::spawn(async move {
        let mut ticker = tokio::time::interval(interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticker.tick().await;
            if tx.is_closed() {
                return;
            }
            match snapshot().and_then(|s| selector.choose(&s)) {
                Ok(choice) => {
                    if choice.ip != tx.borrow().ip {
                        tracing::info!(old = %tx.borrow().ip, new = %choice, "provisioning IP changed");
                        let _ = tx.send(choice);
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, current = %tx.borrow().ip, "provisioning IP not found; keeping the last one");
                }
            }
        }
    });
    rx
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(iface: &str, ip: &str, len: u8) -> InterfaceAddr {
        InterfaceAddr {
            interface: iface.into(),
            ip: ip.parse().unwrap(),
            prefix_len: len,
        }
    }

    fn snap() -> Snapshot {
        Snapshot {
            addrs: vec![
                addr("eth0", "10.0.0.5", 24),
                addr("eth0", "fe80::1", 64),
                addr("eth1", "fe80::2", 64),
                addr("eth1", "2001:db8::7", 64),
                addr("eth1", "172.22.0.2", 24),
                addr("eth2", "fd00::9", 64),
            ],
            macs: [
                ("eth0".to_owned(), "52:54:00:00:00:01".parse().unwrap()),
                ("eth1".to_owned(), "52:54:00:00:00:02".parse().unwrap()),
                ("eth2".to_owned(), "52:54:00:00:00:03".parse().unwrap()),
            ]
            .into(),
            default_route_interfaces: vec!["eth0".into()],
        }
    }

    /// No address of the snapshot's interfaces matches `s`.
    fn assert_not_found(s: &Selector) {
        assert!(matches!(
            s.choose(&snap()),
            Err(AddressError::NotFound { .. })
        ));
    }

    fn sel(f: impl FnOnce(&mut ProvisioningNetwork)) -> Selector {
        let mut cfg = ProvisioningNetwork::default();
        f(&mut cfg);
        Selector::from_config(&cfg).unwrap()
    }

    #[test]
    fn explicit_ip_wins_and_names_its_interface() {
        let s = sel(|c| {
            c.provisioning_ip = Some("172.22.0.2/24".into());
            c.provisioning_interface = Some("eth0".into());
        });
        let c = s.choose(&snap()).unwrap();
        assert_eq!(c.ip.to_string(), "172.22.0.2");
        assert_eq!(c.interface.as_deref(), Some("eth1"));
        assert!(c.reason.contains("PROVISIONING_IP"), "{}", c.reason);
    }

    #[test]
    fn explicit_ip_missing_is_not_found() {
        let s = sel(|c| c.provisioning_ip = Some("192.0.2.1".into()));
        assert_not_found(&s);
    }

    #[test]
    fn interface_prefers_ipv4_then_global_ipv6() {
        let s = sel(|c| c.provisioning_interface = Some("eth1".into()));
        assert_eq!(s.choose(&snap()).unwrap().ip.to_string(), "172.22.0.2");
        let s = sel(|c| {
            c.provisioning_interface = Some("eth1".into());
            c.provisioning_ip_family = IpFamily::Ipv6;
        });
        assert_eq!(s.choose(&snap()).unwrap().ip.to_string(), "2001:db8::7");
    }

    #[test]
    fn mac_selects_its_interface() {
        let s = sel(|c| c.provisioning_macs = vec!["52:54:00:00:00:03".into()]);
        let c = s.choose(&snap()).unwrap();
        assert_eq!(
            (c.ip.to_string(), c.interface.unwrap()),
            ("fd00::9".into(), "eth2".into())
        );
    }

    #[test]
    fn unknown_mac_is_not_found() {
        let s = sel(|c| c.provisioning_macs = vec!["52:54:00:00:00:99".into()]);
        assert_not_found(&s);
    }

    #[test]
    fn cidr_alone_searches_all_interfaces() {
        let s = sel(|c| c.provisioning_cidr = Some("172.22.0.0/16".into()));
        let c = s.choose(&snap()).unwrap();
        assert_eq!(c.ip.to_string(), "172.22.0.2");
        assert!(c.reason.contains("172.22.0.0/16"));
    }

    #[test]
    fn cidr_filters_an_interface() {
        let s = sel(|c| {
            c.provisioning_interface = Some("eth1".into());
            c.provisioning_cidr = Some("2001:db8::/32".into());
        });
        assert_eq!(s.choose(&snap()).unwrap().ip.to_string(), "2001:db8::7");
        let s = sel(|c| {
            c.provisioning_interface = Some("eth0".into());
            c.provisioning_cidr = Some("172.22.0.0/24".into());
        });
        assert!(s.choose(&snap()).is_err());
    }

    #[test]
    fn default_route_interface_is_the_last_resort() {
        let c = sel(|_| {}).choose(&snap()).unwrap();
        assert_eq!(c.ip.to_string(), "10.0.0.5");
        assert!(c.reason.contains("default route"));
        let mut s = snap();
        s.default_route_interfaces.clear();
        assert!(sel(|_| {}).choose(&s).is_err());
    }

    #[test]
    fn bad_settings_are_rejected_with_their_name() {
        let mut cfg = ProvisioningNetwork {
            provisioning_ip: Some("not-an-ip".into()),
            ..Default::default()
        };
        let e = Selector::from_config(&cfg).unwrap_err().to_string();
        assert!(e.contains("PROVISIONING_IP"), "{e}");
        cfg.provisioning_ip = None;
        cfg.provisioning_cidr = Some("10.0.0.0/40".into());
        let e = Selector::from_config(&cfg).unwrap_err().to_string();
        assert!(e.contains("BMO_PROVISIONING_CIDR"), "{e}");
    }

    #[test]
    fn proc_route_parsing() {
        let v4 = "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n\
                  eth0\t0000A8C0\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n\
                  eth1\t00000000\t0100A8C0\t0003\t0\t0\t200\t00000000\t0\t0\t0\n\
                  eth0\t00000000\t0100A8C0\t0003\t0\t0\t100\t00000000\t0\t0\t0\n";
        assert_eq!(parse_ipv4_default_routes(v4), vec!["eth0", "eth1"]);
        let v6 = "00000000000000000000000000000000 00 00000000000000000000000000000000 00 fe800000000000000000000000000001 00000400 00000001 00000000 00000003     eth2\n\
                  00000000000000000000000000000000 00 00000000000000000000000000000000 00 00000000000000000000000000000000 ffffffff 00000001 00000000 00200200       lo\n\
                  20010db8000000000000000000000000 40 00000000000000000000000000000000 00 00000000000000000000000000000000 00000100 00000001 00000000 00000001     eth2\n";
        assert_eq!(parse_ipv6_default_routes(v6), vec!["eth2"]);
    }

    #[test]
    fn http_base_brackets_ipv6() {
        assert_eq!(
            url_base("http", "fd00::1".parse().unwrap(), 6180),
            "http://[fd00::1]:6180"
        );
        assert_eq!(
            url_base("http", "10.0.0.1".parse().unwrap(), 80),
            "http://10.0.0.1:80"
        );
    }
}
