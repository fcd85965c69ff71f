//! DHCPv6 relay messages (RFC 8415 section 9). A relay agent wraps a client's
//! message in a Relay-Forward (and a second relay wraps that one again); bmo
//! unwraps at most [`MAX_HOPS`] levels, answers the client's message with an
//! address from the range whose subnet holds the relay's link address, and wraps
//! the answer in Relay-Replies nested the same way, each echoing its relay's
//! Interface-Id. The client's MAC, which keys the lease table, comes from the
//! client link-layer address a relay adds (option 79, RFC 6939), else from a
//! DUID built from a MAC (DUID-LLT or DUID-LL on Ethernet).

use std::net::Ipv6Addr;
use std::sync::Arc;

use super::packet6::{ClientRequest6, Dhcp6ParseError, parse_request6, raw_options};
use super::range::Range6;
use super::relay::WarnOnce;
use crate::netboot::mac::MacAddr;

/// RELAY-FORW and RELAY-REPL message types.
pub const RELAY_FORW: u8 = 12;
const RELAY_REPL: u8 = 13;
/// Relays unwrapped at most (RFC 8415's HOP_COUNT_LIMIT).
pub const MAX_HOPS: usize = 8;
/// Option codes: Relay Message, Interface-Id, Client Link-Layer Address.
const OPTION_RELAY_MSG: u16 = 9;
const OPTION_INTERFACE_ID: u16 = 18;
const OPTION_CLIENT_LINKLAYER: u16 = 79;
/// Largest reply that still fits a UDP datagram with its headers.
const MAX_REPLY: usize = 65_000;

/// One relay's part of a Relay-Forward.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RelayHop {
    pub hop_count: u8,
    /// The relay's address on the client's link (unspecified when it has none).
    pub link_address: Ipv6Addr,
    pub peer_address: Ipv6Addr,
    /// Option 18, echoed in the Relay-Reply.
    pub interface_id: Option<Vec<u8>>,
    /// Option 79 on Ethernet.
    pub client_mac: Option<MacAddr>,
}

/// A relayed client message: the relays, outermost first, and the client's message.
#[derive(Debug, Clone)]
pub struct Relayed6 {
    pub hops: Vec<RelayHop>,
    pub client: ClientRequest6,
}

/// Option 79: hardware type (2 bytes), then the address; Ethernet's is a MAC.
fn read_client_linklayer(value: &[u8]) -> Result<Option<MacAddr>, Dhcp6ParseError> {
    let (kind, addr) = value
        .split_first_chunk::<2>()
        .ok_or(Dhcp6ParseError::BadLength(OPTION_CLIENT_LINKLAYER))?;
    if u16::from_be_bytes(*kind) != 1 {
        return Ok(None);
    }
    let mac: [u8; 6] = addr
        .try_into()
        .map_err(|_| Dhcp6ParseError::BadLength(OPTION_CLIENT_LINKLAYER))?;
    Ok(Some(MacAddr(mac)))
}

/// Reads one Relay-Forward level: the hop and the message it carries.
fn read_hop(buf: &[u8]) -> Result<(RelayHop, &[u8]), Dhcp6ParseError> {
    let header = buf.get(..34).ok_or(Dhcp6ParseError::Short)?;
    let addr = |at: usize| -> Result<Ipv6Addr, Dhcp6ParseError> {
        let octets: [u8; 16] = header[at..at + 16]
            .try_into()
            .map_err(|_| Dhcp6ParseError::Short)?;
        Ok(Ipv6Addr::from(octets))
    };
    let mut hop = RelayHop {
        hop_count: header[1],
        link_address: addr(2)?,
        peer_address: addr(18)?,
        interface_id: None,
        client_mac: None,
    };
    let mut message = None;
    for (code, value) in raw_options(&buf[34..])? {
        match code {
            OPTION_RELAY_MSG if message.is_none() => message = Some(value),
            OPTION_RELAY_MSG => return Err(Dhcp6ParseError::BadLength(code)),
            OPTION_INTERFACE_ID => hop.interface_id = Some(value.to_vec()),
            OPTION_CLIENT_LINKLAYER => hop.client_mac = read_client_linklayer(value)?,
            _ => {}
        }
    }
    let message = message.ok_or(Dhcp6ParseError::NoRelayMessage)?;
    Ok((hop, message))
}

/// Unwraps a Relay-Forward down to the client's message. Never panics, whatever
/// the bytes; more than [`MAX_HOPS`] levels is an error.
pub fn parse_relay_forward(buf: &[u8]) -> Result<Relayed6, Dhcp6ParseError> {
    let mut hops = Vec::new();
    let mut message = buf;
    while message.first() == Some(&RELAY_FORW) {
        if hops.len() == MAX_HOPS {
            return Err(Dhcp6ParseError::TooManyRelays);
        }
        let (hop, inner) = read_hop(message)?;
        hops.push(hop);
        message = inner;
    }
    if hops.is_empty() {
        return Err(Dhcp6ParseError::NotClientMessage(
            buf.first().copied().unwrap_or(0),
        ));
    }
    Ok(Relayed6 {
        hops,
        client: parse_request6(message)?,
    })
}

impl Relayed6 {
    /// The client's link: the link address of the relay closest to the client
    /// that set one (a relay may leave it unspecified, RFC 8415 section 19.1.1).
    pub fn link_address(&self) -> Option<Ipv6Addr> {
        self.hops
            .iter()
            .rev()
            .map(|h| h.link_address)
            .find(|a| !a.is_unspecified() && !a.is_unicast_link_local())
    }

    /// The client's MAC: option 79 from the relay closest to the client that sent
    /// one, else the MAC in an Ethernet DUID-LLT or DUID-LL.
    pub fn client_mac(&self) -> Option<MacAddr> {
        self.hops
            .iter()
            .rev()
            .find_map(|h| h.client_mac)
            .or_else(|| mac_of_duid(&self.client.duid))
    }
}

/// The MAC in a DUID-LLT (type 1) or DUID-LL (type 3) of hardware type 1.
pub fn mac_of_duid(duid: &[u8]) -> Option<MacAddr> {
    let mac = match duid {
        [0, 1, 0, 1, _, _, _, _, mac @ ..] | [0, 3, 0, 1, mac @ ..] => mac,
        _ => return None,
    };
    <[u8; 6]>::try_from(mac).ok().map(MacAddr)
}

/// Wraps bmo's encoded `reply` in one Relay-Reply per hop (outermost first in
/// `hops`), each echoing its relay's Interface-Id. `None` when the result would
/// not fit a datagram.
pub fn wrap_reply(hops: &[RelayHop], reply: Vec<u8>) -> Option<Vec<u8>> {
    let mut message = reply;
    for hop in hops.iter().rev() {
        let mut m = Vec::with_capacity(message.len() + 64);
        m.push(RELAY_REPL);
        m.push(hop.hop_count);
        m.extend_from_slice(&hop.link_address.octets());
        m.extend_from_slice(&hop.peer_address.octets());
        if let Some(id) = &hop.interface_id {
            push_option(&mut m, OPTION_INTERFACE_ID, id)?;
        }
        push_option(&mut m, OPTION_RELAY_MSG, &message)?;
        if m.len() > MAX_REPLY {
            return None;
        }
        message = m;
    }
    Some(message)
}

fn push_option(m: &mut Vec<u8>, code: u16, value: &[u8]) -> Option<()> {
    let len = u16::try_from(value.len()).ok()?;
    m.extend_from_slice(&code.to_be_bytes());
    m.extend_from_slice(&len.to_be_bytes());
    m.extend_from_slice(value);
    Some(())
}

/// The IPv6 ranges of every subnet DHCPv6 serves, for relayed messages. Clones
/// share one state.
#[derive(Debug, Clone, Default)]
pub struct Relays6 {
    ranges: Arc<Vec<Range6>>,
    warned: Arc<WarnOnce>,
}

impl Relays6 {
    /// `ranges`: every IPv6 range of `DHCP_RANGE`, the provisioning link's included.
    pub fn new(ranges: Vec<Range6>) -> Relays6 {
        Relays6 {
            ranges: Arc::new(ranges),
            warned: Arc::default(),
        }
    }

    /// The range for `relayed`'s client, sent by the relay at `relay`; `None`
    /// (logged once per relay) when no range's subnet holds its link address.
    pub fn range_for(&self, relayed: &Relayed6, relay: Ipv6Addr) -> Option<Range6> {
        let link = relayed.link_address();
        let found = link.and_then(|l| self.ranges.iter().find(|r| r.subnet_holds(l)));
        if found.is_none() {
            let link = link.map(|l| l.to_string()).unwrap_or_else(|| "none".into());
            if self.warned.first(relay.into()) {
                tracing::warn!(%relay, %link, "DHCPv6 message relayed from a link no DHCP_RANGE covers; not answered (add a range on the relay's link-address prefix to DHCP_RANGE, `;`-separated)");
            } else {
                tracing::debug!(%relay, %link, "relayed DHCPv6 message from a link without a range; not answered");
            }
        }
        found.copied()
    }
}

/// The provisioning link's range among `ranges`: the one whose subnet holds the
/// provisioning IP, else the first.
pub fn local_range6(ranges: &[Range6], server_ip: Ipv6Addr) -> Option<Range6> {
    ranges
        .iter()
        .find(|r| r.subnet_holds(server_ip))
        .or(ranges.first())
        .copied()
}

#[cfg(test)]
#[path = "relay6_tests.rs"]
mod tests;
