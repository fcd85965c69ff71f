//! The address pool of full mode: `DHCP_RANGE`, IPv4 (DHCPv4) or IPv6 (DHCPv6).

use std::net::{AddrParseError, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

/// The accepted form of `DHCP_RANGE`, for error messages.
pub const RANGE_FORM: &str = "START,END[,PREFIXLEN|NETMASK][;START,END...], e.g. 172.22.0.10,172.22.0.100,24 or fd00:1::10,fd00:1::100,64";

/// `DHCP_RANGE` as given: one range (ironic-image's form), or several separated by
/// `;`, one per subnet: the one on the provisioning network's own link and one for
/// each subnet behind a DHCP relay. Ranges of one family may not overlap.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DhcpRanges(pub Vec<DhcpRange>);

impl std::str::FromStr for DhcpRanges {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let ranges = s
            .split(';')
            .map(str::trim)
            .filter(|r| !r.is_empty())
            .map(str::parse::<DhcpRange>)
            .collect::<Result<Vec<_>, _>>()?;
        if ranges.is_empty() {
            return Err(format!("DHCP_RANGE {s:?} is empty; expected {RANGE_FORM}"));
        }
        for (i, a) in ranges.iter().enumerate() {
            if let Some(b) = ranges[i + 1..].iter().find(|b| a.overlaps(b)) {
                return Err(format!(
                    "DHCP_RANGE {s:?}: the ranges {a} and {b} overlap; give each subnet its own addresses"
                ));
            }
        }
        Ok(DhcpRanges(ranges))
    }
}

impl DhcpRanges {
    /// The IPv4 ranges, in the order given.
    pub fn v4(&self) -> Vec<Range> {
        self.by_family().0
    }

    /// The IPv6 ranges, in the order given.
    pub fn v6(&self) -> Vec<Range6> {
        self.by_family().1
    }

    /// The IPv4 and the IPv6 ranges, each in the order given.
    fn by_family(&self) -> (Vec<Range>, Vec<Range6>) {
        let (mut v4, mut v6) = (Vec::new(), Vec::new());
        for range in &self.0 {
            match range {
                DhcpRange::V4(r) => v4.push(*r),
                DhcpRange::V6(r) => v6.push(*r),
            }
        }
        (v4, v6)
    }
}

impl DhcpRange {
    fn overlaps(&self, other: &DhcpRange) -> bool {
        match (self, other) {
            (DhcpRange::V4(a), DhcpRange::V4(b)) => {
                u32::from(a.start) <= u32::from(b.end) && u32::from(b.start) <= u32::from(a.end)
            }
            (DhcpRange::V6(a), DhcpRange::V6(b)) => {
                u128::from(a.start) <= u128::from(b.end) && u128::from(b.start) <= u128::from(a.end)
            }
            _ => false,
        }
    }
}

impl std::fmt::Display for DhcpRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DhcpRange::V4(r) => write!(f, "{}-{}", r.start, r.end),
            DhcpRange::V6(r) => write!(f, "{}-{}", r.start, r.end),
        }
    }
}

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

/// The address `p` of the range `s`, or why it is none (`family`: `IPv4`, `IPv6`).
fn address<A: FromStr<Err = AddrParseError>>(s: &str, p: &str, family: &str) -> Result<A, String> {
    p.parse().map_err(|e| {
        format!("DHCP_RANGE {s:?}: {p:?} is not an {family} address ({e}); expected {RANGE_FORM}")
    })
}

/// The start, end and third field (if any) of one range `START,END[,X]`: the first of
/// `s`, a `;`-separated list. The start may not be after the end.
fn bounds<'s, A>(s: &'s str, family: &str) -> Result<(A, A, Option<&'s str>), String>
where
    A: FromStr<Err = AddrParseError> + Ord,
{
    let first = s.split(';').next().unwrap_or("").trim();
    let parts: Vec<&str> = first.split(',').map(str::trim).collect();
    let (start, end, third) = match parts.as_slice() {
        [a, b] => (a, b, None),
        [a, b, c] => (a, b, Some(*c)),
        _ => return Err(format!("DHCP_RANGE {s:?}: expected {RANGE_FORM}")),
    };
    let (start, end) = (address(s, start, family)?, address(s, end, family)?);
    if start > end {
        return Err(format!(
            "DHCP_RANGE {s:?}: start is after end; expected {RANGE_FORM}"
        ));
    }
    Ok((start, end, third))
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
    /// Parses one range, `START,END[,PREFIXLEN]`, as ironic-image's `DHCP_RANGE` for
    /// IPv6 (of a `;`-separated list, the first: [`DhcpRanges`] reads them all). A
    /// trailing lease time, as dnsmasq takes, is refused: bmo's lease time is
    /// `BMO_DHCP_LEASE_TIME`.
    pub fn parse(s: &str) -> Result<Range6, String> {
        let (start, end, third) = bounds::<Ipv6Addr>(s, "IPv6")?;
        let prefix_len = match third {
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

    /// Whether `ip` is on the range's subnet (the start's `/prefix_len`): a relay
    /// whose link address this holds serves the range's clients.
    pub fn subnet_holds(&self, ip: Ipv6Addr) -> bool {
        let mask = u128::MAX
            .checked_shl(128 - u32::from(self.prefix_len))
            .unwrap_or(0);
        u128::from(ip) & mask == u128::from(self.start) & mask
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
    /// Parses one range, `START,END[,PREFIXLEN|NETMASK]` (upstream's `DHCP_RANGE`; of
    /// a `;`-separated list, the first: [`DhcpRanges`] reads them all).
    pub fn parse(s: &str) -> Result<Range, String> {
        let (start, end, third) = bounds::<Ipv4Addr>(s, "IPv4")?;
        let netmask = match third {
            None => None,
            Some(m) if m.contains('.') => Some(address(s, m, "IPv4")?),
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

impl Range {
    /// Whether `ip` is on the range's subnet (its netmask, else `default_mask`,
    /// applied to its start): a relay whose address this holds serves the range's
    /// clients.
    pub fn subnet_holds(&self, ip: Ipv4Addr, default_mask: Ipv4Addr) -> bool {
        let mask = u32::from(self.netmask.unwrap_or(default_mask));
        u32::from(ip) & mask == u32::from(self.start) & mask
    }

    pub fn contains(&self, ip: Ipv4Addr) -> bool {
        (u32::from(self.start)..=u32::from(self.end)).contains(&u32::from(ip))
    }
}

impl std::str::FromStr for Range {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

/// Asserts that parsing each of `bad` as `T` fails with a message that names the
/// variable and the accepted form, for the tests of each of the range types.
#[cfg(test)]
pub(crate) fn assert_refused_with_form<T: FromStr<Err = String> + std::fmt::Debug>(bad: &[&str]) {
    for bad in bad {
        let e = bad.parse::<T>().expect_err(bad);
        assert!(e.contains("DHCP_RANGE") && e.contains(RANGE_FORM), "{e}");
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
    fn several_ranges_one_per_subnet_and_no_overlap() {
        let one: DhcpRanges = "172.22.0.10,172.22.0.100".parse().unwrap();
        assert_eq!(one.v4().len(), 1);
        let list: DhcpRanges =
            "172.22.0.10,172.22.0.100,24; 10.88.0.10,10.88.0.20,24;fd00:9::10,fd00:9::20,64;"
                .parse()
                .unwrap();
        let v4 = list.v4();
        assert_eq!((v4.len(), list.v6().len()), (2, 1));
        let mask: Ipv4Addr = "255.255.0.0".parse().unwrap();
        assert!(v4[1].subnet_holds("10.88.0.1".parse().unwrap(), mask));
        assert!(!v4[1].subnet_holds("10.88.1.1".parse().unwrap(), mask));
        assert!(v4[1].contains("10.88.0.20".parse().unwrap()));
        let no_mask = Range::parse("10.1.0.10,10.1.0.20").unwrap();
        assert!(no_mask.subnet_holds("10.1.3.1".parse().unwrap(), mask));
        assert!(list.v6()[0].subnet_holds("fd00:9::1".parse().unwrap()));
        assert!(!list.v6()[0].subnet_holds("fd00:8::1".parse().unwrap()));
        for bad in [
            "10.0.0.10,10.0.0.20;10.0.0.15,10.0.0.30",
            " ; ",
            "10.0.0.10,10.0.0.20;x",
        ] {
            let e = bad.parse::<DhcpRanges>().expect_err(bad);
            assert!(e.contains("DHCP_RANGE"), "{e}");
        }
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
        assert_refused_with_form::<DhcpRange>(&[
            "fd00::9,fd00::1",
            "fd00::1,10.0.0.1",
            "fd00::1,fd00::2,129",
            "fd00::1",
        ]);
    }
}
