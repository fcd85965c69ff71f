//! One lease record and what the DHCP server reports about a client: the data the
//! table holds, with its JSON form (the lease file, `/bmo/v1/leases`).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use serde::{Deserialize, Serialize};

use crate::netboot::mac::MacAddr;

/// Where a lease stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LeaseState {
    /// Offered, not yet requested; expires quickly.
    Offered,
    /// Acknowledged.
    Bound,
    /// Given back by the client.
    Released,
    /// Seen in proxyDHCP mode: boot options only, no address from bmo.
    Proxy,
}

/// One client, as the DHCP server saw it last.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lease {
    pub mac: MacAddr,
    pub ip: Option<Ipv4Addr>,
    /// The DHCPv6 (IA_NA) address bmo leased or offered this MAC.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ip6: Option<Ipv6Addr>,
    /// The DUID the MAC's DHCPv6 client sent last (option 1), as hex: how DHCPv6
    /// clients are told apart, mapped to the MAC the packet came from.
    #[serde(with = "hex_bytes", default, skip_serializing_if = "Option::is_none")]
    pub duid: Option<Vec<u8>>,
    pub state: LeaseState,
    /// Unix seconds at which the address may be given to someone else.
    pub expires_unix: u64,
    /// Option 12 exactly as the client sent it (it need not be UTF-8), as hex; for a
    /// DHCPv6 client, the name of its FQDN (option 39) in dotted form.
    #[serde(with = "hex_bytes", default, skip_serializing_if = "Option::is_none")]
    pub hostname_raw: Option<Vec<u8>>,
    /// Option 12 for display: invalid UTF-8 replaced by U+FFFD. Derived, not read back.
    #[serde(default, skip_deserializing, skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
    /// Client system architecture (option 93): 0 BIOS, 7/9 x86-64 UEFI, 11 arm64 UEFI…
    pub arch: Option<u16>,
    /// Vendor class identifier (option 60), e.g. `PXEClient:Arch:00007:UNDI:003016`.
    pub vendor_class: Option<String>,
    /// Whether the last request came from iPXE (option 175 or user class `iPXE`).
    pub ipxe: bool,
    pub first_seen_unix: u64,
    pub last_seen_unix: u64,
    /// Unix seconds at which discovery made (or found) a BareMetalHost for this MAC;
    /// discovery never acts on the MAC again, even if that host is deleted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub discovered_unix: Option<u64>,
}

impl Lease {
    /// A record of `mac` first seen at `now` (Unix seconds), holding no address yet.
    pub fn new(mac: MacAddr, state: LeaseState, now: u64) -> Self {
        Self {
            mac,
            ip: None,
            ip6: None,
            duid: None,
            state,
            expires_unix: 0,
            hostname_raw: None,
            hostname: None,
            arch: None,
            vendor_class: None,
            ipxe: false,
            first_seen_unix: now,
            last_seen_unix: now,
            discovered_unix: None,
        }
    }

    /// Whether the lease holds its address now (bound and not expired).
    pub(super) fn is_live(&self, now: u64) -> bool {
        self.state == LeaseState::Bound && self.expires_unix > now
    }

    /// The hostname the client sent, lossily decoded for display.
    pub fn hostname_lossy(&self) -> Option<String> {
        self.hostname_raw
            .as_deref()
            .map(|b| String::from_utf8_lossy(b).into_owned())
    }

    pub(super) fn with_display(mut self) -> Self {
        self.hostname = self.hostname_lossy();
        self
    }
}

/// What a DHCP exchange tells the table about a client.
#[derive(Debug, Clone, Default)]
pub struct Sighting {
    pub hostname_raw: Option<Vec<u8>>,
    pub arch: Option<u16>,
    pub vendor_class: Option<String>,
    pub ipxe: bool,
}

impl Sighting {
    /// What a DHCPv4 or DHCPv6 request shows: its raw host name, architecture, vendor
    /// class (as text, invalid UTF-8 replaced) and whether iPXE sent it.
    pub fn new(
        hostname_raw: Option<Vec<u8>>,
        arch: Option<u16>,
        vendor_class: Option<&[u8]>,
        ipxe: bool,
    ) -> Self {
        Self {
            hostname_raw,
            arch,
            vendor_class: vendor_class.map(|v| String::from_utf8_lossy(v).into_owned()),
            ipxe,
        }
    }
}

/// A change the controller may react to (e.g. discovery of unknown MACs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaseEvent {
    /// A MAC the table had never seen.
    NewClient(MacAddr),
    /// A lease (DHCPv4 or DHCPv6) was acknowledged or renewed.
    Bound(MacAddr, IpAddr),
}

mod hex_bytes {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &Option<Vec<u8>>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            Some(b) => s.serialize_str(&b.iter().map(|x| format!("{x:02x}")).collect::<String>()),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<u8>>, D::Error> {
        let Some(s) = Option::<String>::deserialize(d)? else {
            return Ok(None);
        };
        if s.len() % 2 != 0 {
            return Err(serde::de::Error::custom("odd number of hex digits"));
        }
        (0..s.len())
            .step_by(2)
            .map(|i| {
                s.get(i..i + 2)
                    .and_then(|h| u8::from_str_radix(h, 16).ok())
                    .ok_or_else(|| serde::de::Error::custom("not hex"))
            })
            .collect::<Result<Vec<u8>, _>>()
            .map(Some)
    }
}
