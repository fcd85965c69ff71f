//! The address pool of full mode: `DHCP_RANGE`, IPv4 (DHCPv4) or IPv6 (DHCPv6).

use std::net::{Ipv4Addr, Ipv6Addr};

/// The accepted form of `DHCP_RANGE`, for error messages.
pub const RANGE_FORM: &str =
    "START,END[,PREFIXLEN|NETMASK], e.g. 172.22.0.10,172.22.0.100,24 or fd00:1::10,fd00:1::100,64";

/// `DHCP_RANGE` as given: its family picks the DHCP server (v4 or v6).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DhcpRange {
    V4(Range),
    V6(Range6),
}

impl std::str::FromStr for DhcpRange {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let first = s.split(';').next().unwrap_or("");
        if first.split(',').next().is_some_and(|a| a.contains(':')) {
            Range6::parse(s).map(DhcpRange::V6)
        } else {
            Range::parse(s).map(DhcpRange::V4)
        }
    }
}

/// An IPv6 address pool for DHCPv6 IA_NA leases: `start..=end`, at most 2^32
/// addresses apart from `start` counted (larger pools are cut there).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Range6 {
    pub start: Ipv6Addr,
    pub end: Ipv6Addr,
    /// The on-link prefix length (informational; DHCPv6 hands out /128s).
    pub prefix_len: u8,
}

impl Range6 {
    /// Parses `START,END[,PREFIXLEN]` as ironic-image's `DHCP_RANGE` for IPv6 (the
    /// first of several `;`-separated ranges). A trailing lease time, as dnsmasq
    /// takes, is refused: bmo's lease time is `BMO_DHCP_LEASE_TIME`.
    pub fn parse(s: &str) -> Result<Range6, String> {
        let first = s.split(';').next().unwrap_or("").trim();
        let parts: Vec<&str> = first.split(',').map(str::trim).collect();
        let ip = |p: &str| -> Result<Ipv6Addr, String> {
            p.parse().map_err(|e| {
                format!(
                    "DHCP_RANGE {s:?}: {p:?} is not an IPv6 address ({e}); expected {RANGE_FORM}"
                )
            })
        };
        let (start, end) = match parts.as_slice() {
            [a, b] | [a, b, _] => (ip(a)?, ip(b)?),
            _ => return Err(format!("DHCP_RANGE {s:?}: expected {RANGE_FORM}")),
        };
        if u128::from(start) > u128::from(end) {
            return Err(format!(
                "DHCP_RANGE {s:?}: start is after end; expected {RANGE_FORM}"
            ));
        }
        let prefix_len = match parts.get(2) {
            None => 64,
            Some(m) => m.parse().ok().filter(|l| *l <= 128).ok_or_else(|| {
                format!(
                    "DHCP_RANGE {s:?}: {m:?} is not an IPv6 prefix length; expected {RANGE_FORM}"
                )
            })?,
        };
        Ok(Range6 {
            start,
            end,
            prefix_len,
        })
    }

    /// Addresses in the pool, capped at 2^32.
    pub fn size(&self) -> u64 {
        let span = u128::from(self.end) - u128::from(self.start);
        u64::try_from(span.min(u128::from(u32::MAX))).unwrap_or(u64::from(u32::MAX)) + 1
    }

    /// The `n`th address of the pool (`n < size()`).
    pub fn nth(&self, n: u64) -> Ipv6Addr {
        Ipv6Addr::from(u128::from(self.start) + u128::from(n))
    }

    /// The pool as the lease table takes it.
    pub fn pool(&self) -> crate::netboot::leases::Pool6 {
        crate::netboot::leases::Pool6 {
            start: self.start,
            size: self.size(),
        }
    }

    pub fn contains(&self, ip: Ipv6Addr) -> bool {
        let (s, e, x) = (u128::from(self.start), u128::from(self.end), u128::from(ip));
        (s..=e).contains(&x) && x - s < u128::from(self.size())
    }
}

/// An address pool: `start..=end` with its netmask.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Range {
    pub start: Ipv4Addr,
    pub end: Ipv4Addr,
    pub netmask: Option<Ipv4Addr>,
}

impl Range {
    /// Parses `START,END[,PREFIXLEN|NETMASK]` (upstream's `DHCP_RANGE`; the first of
    /// several `;`-separated ranges).
    pub fn parse(s: &str) -> Result<Range, String> {
        let first = s.split(';').next().unwrap_or("").trim();
        let parts: Vec<&str> = first.split(',').map(str::trim).collect();
        let ip = |p: &str| -> Result<Ipv4Addr, String> {
            p.parse().map_err(|e| {
                format!(
                    "DHCP_RANGE {s:?}: {p:?} is not an IPv4 address ({e}); expected {RANGE_FORM}"
                )
            })
        };
        let (start, end) = match parts.as_slice() {
            [a, b] | [a, b, _] => (ip(a)?, ip(b)?),
            _ => return Err(format!("DHCP_RANGE {s:?}: expected {RANGE_FORM}")),
        };
        if u32::from(start) > u32::from(end) {
            return Err(format!(
                "DHCP_RANGE {s:?}: start is after end; expected {RANGE_FORM}"
            ));
        }
        let netmask = match parts.get(2) {
            None => None,
            Some(m) if m.contains('.') => Some(ip(m)?),
            Some(m) => {
                let len: u32 = m.parse().ok().filter(|l| *l <= 32).ok_or_else(|| {
                    format!("DHCP_RANGE {s:?}: {m:?} is not a prefix length or netmask; expected {RANGE_FORM}")
                })?;
                Some(Ipv4Addr::from(u32::MAX.checked_shl(32 - len).unwrap_or(0)))
            }
        };
        Ok(Range {
            start,
            end,
            netmask,
        })
    }
}

impl std::str::FromStr for Range {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn range_parsing() {
        let r = Range::parse("172.22.0.10,172.22.0.100").unwrap();
        assert_eq!(
            (r.start.to_string(), r.netmask),
            ("172.22.0.10".into(), None)
        );
        assert_eq!(
            Range::parse("10.0.0.1,10.0.0.9,255.255.0.0")
                .unwrap()
                .netmask
                .unwrap()
                .to_string(),
            "255.255.0.0"
        );
        assert_eq!(
            Range::parse("10.0.0.1,10.0.0.9,16")
                .unwrap()
                .netmask
                .unwrap()
                .to_string(),
            "255.255.0.0"
        );
        assert!(Range::parse("10.0.0.9,10.0.0.1").is_err());
        assert!(Range::parse("x").is_err());
    }

    #[test]
    fn ipv6_range_parsing_picks_the_family() {
        let r: DhcpRange = "fd00:1::10,fd00:1::100".parse().unwrap();
        let DhcpRange::V6(r) = r else {
            panic!("not v6: {r:?}")
        };
        assert_eq!((r.prefix_len, r.size()), (64, 0xf1));
        assert_eq!(r.nth(1).to_string(), "fd00:1::11");
        assert!(r.contains("fd00:1::100".parse().unwrap()));
        assert!(!r.contains("fd00:1::101".parse().unwrap()));
        assert!(matches!(
            "10.0.0.1,10.0.0.2".parse::<DhcpRange>(),
            Ok(DhcpRange::V4(_))
        ));
        let wide = Range6::parse("fd00::,fd00::ffff:ffff:ffff,64").unwrap();
        assert_eq!(wide.size(), 1 << 32);
        assert!(!wide.contains("fd00::ffff:ffff:ffff".parse().unwrap()));
        for bad in [
            "fd00::9,fd00::1",
            "fd00::1,10.0.0.1",
            "fd00::1,fd00::2,129",
            "fd00::1",
        ] {
            let e = bad.parse::<DhcpRange>().expect_err(bad);
            assert!(e.contains("DHCP_RANGE") && e.contains(RANGE_FORM), "{e}");
        }
    }
}
