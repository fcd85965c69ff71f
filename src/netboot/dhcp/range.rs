//! The address pool of full mode: `DHCP_RANGE`.

use std::net::Ipv4Addr;

/// The accepted form of `DHCP_RANGE`, for error messages.
pub const RANGE_FORM: &str = "START,END[,PREFIXLEN|NETMASK], e.g. 172.22.0.10,172.22.0.100,24";

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
}
