//! Relayed DHCPv4: which subnet a request is for. A relay agent sets giaddr to its
//! own address on the client's subnet (or names the subnet in option 82's link
//! selection sub-option); the request gets an address from the `DHCP_RANGE` whose
//! subnet holds that address, and the reply goes back to the relay. A request from
//! a subnet no range covers gets no answer, and the relay is named once in the log.

use std::collections::HashSet;
use std::net::Ipv4Addr;
use std::sync::{Arc, Mutex};

use dhcproto::v4::Message;
use dhcproto::{Encodable, Encoder};

use super::packet::ClientRequest;
use super::policy::{Destination, Mode, Policy, Subnet};
use super::range::Range;
use crate::netboot::leases::LeaseTable;

/// Relays named in the log at most; past this, unknown relays are logged at debug
/// level only (a flood of made-up giaddrs cannot grow the set).
const MAX_WARNED: usize = 256;

/// Relays whose subnet no range covers, logged once each.
#[derive(Debug, Default)]
pub struct WarnOnce {
    seen: Mutex<HashSet<std::net::IpAddr>>,
}

impl WarnOnce {
    /// True the first time `relay` is seen (and while the set has room).
    pub fn first(&self, relay: std::net::IpAddr) -> bool {
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        seen.len() < MAX_WARNED && seen.insert(relay)
    }
}

#[derive(Debug)]
struct Shared {
    ranges: Vec<Range>,
    /// The last relay address seen on each range's subnet: the router handed to a
    /// client of that subnet renewing straight with bmo.
    routers: Mutex<Vec<Option<Ipv4Addr>>>,
    warned: WarnOnce,
}

/// The ranges of every subnet DHCP serves, for relayed requests. Clones share one
/// state.
#[derive(Debug, Clone)]
pub struct Relays {
    shared: Arc<Shared>,
}

impl Relays {
    /// `ranges`: every IPv4 range of `DHCP_RANGE`, the provisioning link's included.
    pub fn new(ranges: Vec<Range>) -> Relays {
        let routers = Mutex::new(vec![None; ranges.len()]);
        Relays {
            shared: Arc::new(Shared {
                ranges,
                routers,
                warned: WarnOnce::default(),
            }),
        }
    }

    /// The reply to `req`: from the range of the relay's subnet when relayed, else
    /// as [`Policy::answer`] gives it.
    pub fn answer(
        &self,
        policy: &Policy,
        req: &ClientRequest,
        leases: &LeaseTable,
        on_proxy_port: bool,
    ) -> Option<(Message, Destination)> {
        let Mode::Full { range: local } = &policy.mode else {
            return policy.answer(req, leases, on_proxy_port);
        };
        let giaddr = req.msg.giaddr();
        if giaddr.is_unspecified() {
            // A relayed client renewing with bmo directly: its address says its subnet.
            let ciaddr = req.msg.ciaddr();
            let subnet = (!ciaddr.is_unspecified())
                .then(|| self.subnet_of(ciaddr, None, policy))
                .flatten()
                .filter(|s| s.range != *local);
            return policy.answer_in(req, leases, on_proxy_port, subnet.as_ref());
        }
        let link = req.link_selection.unwrap_or(giaddr);
        match self.subnet_of(link, Some(giaddr), policy) {
            Some(subnet) => policy.answer_in(req, leases, on_proxy_port, Some(&subnet)),
            None => {
                if self.shared.warned.first(giaddr.into()) {
                    tracing::warn!(relay = %giaddr, subnet = %link, mac = %req.mac,
                        "DHCP request relayed from a subnet no DHCP_RANGE covers; not answered (add a range on that subnet to DHCP_RANGE, `;`-separated)");
                } else {
                    tracing::debug!(relay = %giaddr, subnet = %link, mac = %req.mac, "relayed DHCP request from a subnet without a range; not answered");
                }
                None
            }
        }
    }

    /// The subnet holding `link`, with its router: the provisioning link's own
    /// router for its range, else the relay (`giaddr`, when on that subnet), else
    /// the last relay seen there.
    fn subnet_of(
        &self,
        link: Ipv4Addr,
        giaddr: Option<Ipv4Addr>,
        policy: &Policy,
    ) -> Option<Subnet> {
        let i = self
            .shared
            .ranges
            .iter()
            .position(|r| r.subnet_holds(link, policy.netmask))?;
        let range = self.shared.ranges[i];
        if matches!(policy.mode, Mode::Full { range: local } if local == range) {
            return Some(Subnet {
                range,
                router: policy.router,
            });
        }
        let mut routers = self
            .shared
            .routers
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if let Some(g) = giaddr.filter(|g| range.subnet_holds(*g, policy.netmask)) {
            routers[i] = Some(g);
        }
        Some(Subnet {
            range,
            router: routers[i],
        })
    }
}

/// Encodes `reply` into `out`, with the relay agent information of `req` (option
/// 82) echoed last, as RFC 3046 asks of a server. (Written raw: dhcproto would
/// encode an option 82 it holds undecoded twice.)
pub fn encode_reply(
    reply: &Message,
    req: &ClientRequest,
    out: &mut Vec<u8>,
) -> Result<(), dhcproto::error::EncodeError> {
    reply.encode(&mut Encoder::new(out))?;
    let Some(info) = &req.relay_agent_info else {
        return Ok(());
    };
    if out.last() == Some(&255) {
        out.pop();
    }
    for chunk in info.chunks(255) {
        out.push(82);
        out.push(chunk.len() as u8);
        out.extend_from_slice(chunk);
    }
    out.push(255);
    Ok(())
}

/// The provisioning link's range among `ranges`: the one whose subnet holds the
/// provisioning IP, else the first.
pub fn local_range(ranges: &[Range], server_ip: Ipv4Addr, netmask: Ipv4Addr) -> Option<Range> {
    ranges
        .iter()
        .find(|r| r.subnet_holds(server_ip, netmask))
        .or(ranges.first())
        .copied()
}

#[cfg(test)]
#[path = "relay_tests.rs"]
mod tests;
