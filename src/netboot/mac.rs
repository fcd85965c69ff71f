//! Ethernet hardware addresses.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A 48-bit MAC address, written `aa:bb:cc:dd:ee:ff`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MacAddr(pub [u8; 6]);

impl MacAddr {
    /// Whether this can be one client's own address: not all-zero and not a group
    /// address (multicast, broadcast included). DHCP gives others no lease.
    pub fn is_unicast(&self) -> bool {
        self.0 != [0; 6] && self.0[0] & 1 == 0
    }

    /// `aa-bb-cc-dd-ee-ff`, the form in Ironic's `pxelinux.cfg/` file names.
    pub fn hyphenated(&self) -> String {
        self.to_string().replace(':', "-")
    }
}

impl fmt::Display for MacAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let [a, b, c, d, e, g] = self.0;
        write!(f, "{a:02x}:{b:02x}:{c:02x}:{d:02x}:{e:02x}:{g:02x}")
    }
}

impl FromStr for MacAddr {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let parts: Vec<&str> = s.trim().split([':', '-']).collect();
        let bad = || format!("{s:?} is not a MAC address (expected aa:bb:cc:dd:ee:ff)");
        if parts.len() != 6 {
            return Err(bad());
        }
        let mut mac = [0u8; 6];
        for (dst, p) in mac.iter_mut().zip(parts) {
            if p.len() != 2 {
                return Err(bad());
            }
            *dst = u8::from_str_radix(p, 16).map_err(|_| bad())?;
        }
        Ok(MacAddr(mac))
    }
}

impl Serialize for MacAddr {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for MacAddr {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let m: MacAddr = "52:54:00:AB:cd:0f".parse().unwrap();
        assert_eq!(m.to_string(), "52:54:00:ab:cd:0f");
        assert_eq!(m.hyphenated(), "52-54-00-ab-cd-0f");
        assert_eq!("52-54-00-ab-cd-0f".parse::<MacAddr>().unwrap(), m);
        assert!("52:54:00:ab:cd".parse::<MacAddr>().is_err());
        assert!("52:54:00:ab:cd:0g".parse::<MacAddr>().is_err());
    }
}
