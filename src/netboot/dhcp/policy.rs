//! What to answer: addresses (full mode), boot options (both modes). Pure over the
//! request, the settings and the lease table, so it is tested without sockets.

use std::net::{Ipv4Addr, SocketAddrV4};

#[cfg(test)]
use dhcproto::v4::OptionCode;
use dhcproto::v4::{DhcpOption, Message, MessageType, Opcode};

use super::packet::ClientRequest;
use super::range::Range;
use crate::netboot::hosts::{HostDirectory, KnownHost, KnownHosts};
use crate::netboot::leases::{LeaseState, LeaseTable, Sighting};

/// Seconds an offered address is held for the client's REQUEST. When the range is
/// full, offers are given to the next client sooner (oldest first).
const OFFER_HOLD_SECS: u64 = 30;

/// The mode-specific part of the settings.
#[derive(Debug, Clone)]
pub enum Mode {
    Full { range: Range },
    Proxy,
}

/// Everything the policy needs besides the request.
#[derive(Debug, Clone)]
pub struct Policy {
    pub mode: Mode,
    /// Our address: server identifier, next-server (TFTP).
    pub server_ip: Ipv4Addr,
    pub netmask: Ipv4Addr,
    pub router: Option<Ipv4Addr>,
    pub dns: Option<Ipv4Addr>,
    pub lease_secs: u32,
    /// `http://IP:PORT` of bmo's HTTP server.
    pub http_base: String,
    /// The known hosts: fixed addresses, names for the logs.
    pub hosts: HostDirectory,
    /// Answer known hosts only (`DHCP_IGNORE=tag:!known`); others are recorded, not
    /// answered.
    pub known_only: bool,
}

/// What a full-mode answer to a DISCOVER or REQUEST works from.
struct Ask<'a> {
    req: &'a ClientRequest,
    /// The client's fixed address (a known host's), if any.
    fixed: Option<Ipv4Addr>,
    boot: Option<Boot>,
    subnet: &'a Subnet,
}

/// The subnet an address is leased on: its range and the router handed out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Subnet {
    pub range: Range,
    pub router: Option<Ipv4Addr>,
}

/// Where a reply goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Destination {
    /// 255.255.255.255:68 on the provisioning interface.
    Broadcast,
    Unicast(SocketAddrV4),
}

/// The boot program for a client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Boot {
    /// A loader name on bmo's TFTP server.
    Tftp(&'static str),
    /// A URL (iPXE script or UEFI HTTP boot image).
    Http(String),
}

/// Picks the boot program from the client's architecture (option 93), vendor class
/// (option 60) and whether it is iPXE already.
pub fn boot_for(req: &ClientRequest, http_base: &str) -> Option<Boot> {
    if req.ipxe {
        return Some(Boot::Http(format!("{http_base}/boot.ipxe")));
    }
    if req.is_http_client() {
        return match req.arch {
            Some(16) => Some(Boot::Http(format!("{http_base}/ipxe/ipxe-x86_64.efi"))),
            Some(19) => Some(Boot::Http(format!("{http_base}/ipxe/snponly-arm64.efi"))),
            _ => None,
        };
    }
    if !req.is_pxe() && req.arch.is_none() {
        return None;
    }
    match req.arch.unwrap_or(0) {
        0 => Some(Boot::Tftp("undionly.kpxe")),
        7 | 9 => Some(Boot::Tftp("snponly-x86_64.efi")),
        11 => Some(Boot::Tftp("snponly-arm64.efi")),
        _ => None,
    }
}

impl Policy {
    /// The reply to `req`, if any. `on_proxy_port` is true for port 4011 requests.
    pub fn answer(
        &self,
        req: &ClientRequest,
        leases: &LeaseTable,
        on_proxy_port: bool,
    ) -> Option<(Message, Destination)> {
        self.answer_in(req, leases, on_proxy_port, None)
    }

    /// The reply to `req`, with addresses (full mode) from `relayed`'s range, or
    /// from the provisioning link's (`Mode::Full`) when `None`.
    pub fn answer_in(
        &self,
        req: &ClientRequest,
        leases: &LeaseTable,
        on_proxy_port: bool,
        relayed: Option<&Subnet>,
    ) -> Option<(Message, Destination)> {
        if !req.mac.is_unicast() {
            tracing::debug!(mac = %req.mac, "all-zero or group hardware address; not answered");
            return None;
        }
        if !self.record(req, leases) {
            tracing::debug!(mac = %req.mac, "lease table full of live leases; new client not answered (BMO_DHCP_MAX_LEASES)");
            return None;
        }
        let known = self.hosts.lookup(&req.mac);
        if self.known_only && known.is_none() {
            tracing::debug!(mac = %req.mac, "not a known host; not answered (DHCP_IGNORE=tag:!known)");
            return None;
        }
        let boot = boot_for(req, &self.http_base);
        let reply = match &self.mode {
            Mode::Proxy => self.answer_proxy(req, boot, on_proxy_port),
            Mode::Full { range } => {
                let local = Subnet {
                    range: *range,
                    router: self.router,
                };
                let subnet = relayed.unwrap_or(&local);
                self.answer_full(req, known.as_ref(), boot, leases, subnet)
            }
        };
        if let (Some(host), Some((reply, _))) = (&known, &reply) {
            log_known(req, host, reply);
        }
        reply
    }

    /// Records what `req` says about its client; false when the table is full. A
    /// RELEASE, DECLINE or INFORM from a MAC without a record makes none: the client
    /// holds no lease of bmo's.
    fn record(&self, req: &ClientRequest, leases: &LeaseTable) -> bool {
        let no_lease_asked = matches!(
            req.msg_type,
            MessageType::Release | MessageType::Decline | MessageType::Inform
        );
        if no_lease_asked && leases.get(&req.mac).is_none() {
            return true;
        }
        let vendor_class = req.vendor_class.as_deref();
        let sighting = Sighting::new(req.hostname_raw.clone(), req.arch, vendor_class, req.ipxe);
        leases.see(req.mac, sighting, matches!(self.mode, Mode::Proxy))
    }

    fn answer_proxy(
        &self,
        req: &ClientRequest,
        boot: Option<Boot>,
        on_proxy_port: bool,
    ) -> Option<(Message, Destination)> {
        // Only netboot clients, and only with something to boot.
        let boot = boot?;
        if !(req.is_pxe() || req.is_http_client() || req.ipxe) {
            return None;
        }
        let reply_type = match (req.msg_type, on_proxy_port) {
            (MessageType::Discover, false) => MessageType::Offer,
            (MessageType::Request, true) | (MessageType::Inform, _) => MessageType::Ack,
            _ => return None,
        };
        let mut reply = self.reply_base(req, reply_type, Ipv4Addr::UNSPECIFIED);
        self.add_boot(&mut reply, req, &boot, true);
        let dest = if on_proxy_port && !req.msg.ciaddr().is_unspecified() {
            Destination::Unicast(SocketAddrV4::new(req.msg.ciaddr(), 68))
        } else {
            self.destination(req, false)
        };
        Some((reply, dest))
    }

    fn answer_full(
        &self,
        req: &ClientRequest,
        known: Option<&KnownHost>,
        boot: Option<Boot>,
        leases: &LeaseTable,
        subnet: &Subnet,
    ) -> Option<(Message, Destination)> {
        let fixed = known.and_then(|h| h.fixed_ip);
        match req.msg_type {
            MessageType::Discover | MessageType::Request => {
                let ask = Ask {
                    req,
                    fixed,
                    boot,
                    subnet,
                };
                if req.msg_type == MessageType::Discover {
                    self.offer(ask, leases)
                } else {
                    self.acknowledge(ask, leases)
                }
            }
            MessageType::Inform => {
                let mut reply = self.reply_base(req, MessageType::Ack, Ipv4Addr::UNSPECIFIED);
                reply.opts_mut().insert(DhcpOption::SubnetMask(
                    subnet.range.netmask.unwrap_or(self.netmask),
                ));
                if let Some(b) = &boot {
                    self.add_boot(&mut reply, req, b, false);
                }
                Some((reply, self.destination(req, false)))
            }
            MessageType::Release | MessageType::Decline => {
                leases.release(req.mac);
                None
            }
            _ => None,
        }
    }

    /// DISCOVER in full mode: an address from the range (or the fixed one), held for
    /// the client as offered.
    fn offer(&self, ask: Ask<'_>, leases: &LeaseTable) -> Option<(Message, Destination)> {
        let range = &ask.subnet.range;
        let reserved_for = |ip| self.hosts.reserved_for(ip);
        let Some(ip) = leases.allocate(
            ask.req.mac,
            ask.fixed,
            ask.req.requested_ip,
            (range.start, range.end),
            &reserved_for,
        ) else {
            tracing::warn!(mac = %ask.req.mac, "DHCP range exhausted; no offer made (widen DHCP_RANGE)");
            return None;
        };
        leases.assign(ask.req.mac, ip, LeaseState::Offered, OFFER_HOLD_SECS);
        Some(self.lease_reply(ask.req, MessageType::Offer, ip, ask.subnet, ask.boot))
    }

    /// REQUEST in full mode: ACK the address asked for if the client may have it,
    /// NAK otherwise; nothing when the client took another server's offer.
    fn acknowledge(&self, ask: Ask<'_>, leases: &LeaseTable) -> Option<(Message, Destination)> {
        let range = &ask.subnet.range;
        if let Some(sid) = ask.req.server_id
            && sid != self.server_ip
        {
            // The client took another server's offer.
            if leases
                .get(&ask.req.mac)
                .is_some_and(|l| l.state == LeaseState::Offered)
            {
                leases.release(ask.req.mac);
            }
            return None;
        }
        let reserved_for = |ip| self.hosts.reserved_for(ip);
        let wanted = ask
            .req
            .requested_ip
            .or_else(|| (!ask.req.msg.ciaddr().is_unspecified()).then(|| ask.req.msg.ciaddr()));
        let ok = wanted.filter(|ip| {
            let in_range =
                (u32::from(range.start)..=u32::from(range.end)).contains(&u32::from(*ip));
            (ask.fixed == Some(*ip) || (ask.fixed.is_none() && in_range))
                && leases.may_bind(ask.req.mac, *ip, &reserved_for)
        });
        match ok {
            Some(ip) => {
                leases.assign(
                    ask.req.mac,
                    ip,
                    LeaseState::Bound,
                    u64::from(self.lease_secs),
                );
                Some(self.lease_reply(ask.req, MessageType::Ack, ip, ask.subnet, ask.boot))
            }
            None => {
                tracing::debug!(mac = %ask.req.mac, requested = ?wanted, "DHCP request refused (NAK)");
                let reply = self.reply_base(ask.req, MessageType::Nak, Ipv4Addr::UNSPECIFIED);
                Some((reply, self.destination(ask.req, true)))
            }
        }
    }

    /// An OFFER or ACK of `ip`, with the lease options and the boot options if any.
    fn lease_reply(
        &self,
        req: &ClientRequest,
        ty: MessageType,
        ip: Ipv4Addr,
        subnet: &Subnet,
        boot: Option<Boot>,
    ) -> (Message, Destination) {
        let mut reply = self.reply_base(req, ty, ip);
        self.add_lease_options(&mut reply, subnet);
        if let Some(b) = &boot {
            self.add_boot(&mut reply, req, b, false);
        }
        (reply, self.destination(req, false))
    }

    fn reply_base(&self, req: &ClientRequest, ty: MessageType, yiaddr: Ipv4Addr) -> Message {
        let mut m = Message::new_with_id(
            req.msg.xid(),
            if ty == MessageType::Nak {
                Ipv4Addr::UNSPECIFIED
            } else {
                req.msg.ciaddr()
            },
            yiaddr,
            Ipv4Addr::UNSPECIFIED,
            req.msg.giaddr(),
            &req.mac.0,
        );
        m.set_opcode(Opcode::BootReply);
        m.set_flags(req.msg.flags());
        m.opts_mut().insert(DhcpOption::MessageType(ty));
        m.opts_mut()
            .insert(DhcpOption::ServerIdentifier(self.server_ip));
        m
    }

    fn add_lease_options(&self, m: &mut Message, subnet: &Subnet) {
        let secs = self.lease_secs;
        m.opts_mut().insert(DhcpOption::AddressLeaseTime(secs));
        m.opts_mut().insert(DhcpOption::Renewal(secs / 2));
        m.opts_mut().insert(DhcpOption::Rebinding(secs / 8 * 7));
        m.opts_mut().insert(DhcpOption::SubnetMask(
            subnet.range.netmask.unwrap_or(self.netmask),
        ));
        if let Some(r) = subnet.router {
            m.opts_mut().insert(DhcpOption::Router(vec![r]));
        }
        if let Some(d) = self.dns {
            m.opts_mut().insert(DhcpOption::DomainNameServer(vec![d]));
        }
    }

    fn add_boot(&self, m: &mut Message, req: &ClientRequest, boot: &Boot, proxy: bool) {
        let file = match boot {
            Boot::Tftp(name) => {
                m.set_siaddr(self.server_ip);
                m.opts_mut().insert(DhcpOption::TFTPServerName(
                    self.server_ip.to_string().into_bytes(),
                ));
                (*name).to_owned()
            }
            Boot::Http(url) => {
                m.set_siaddr(self.server_ip);
                url.clone()
            }
        };
        if file.len() < 128 {
            m.set_fname(file.as_bytes());
        }
        m.opts_mut()
            .insert(DhcpOption::BootfileName(file.into_bytes()));
        if req.is_http_client() {
            m.opts_mut()
                .insert(DhcpOption::ClassIdentifier(b"HTTPClient".to_vec()));
        } else if proxy {
            m.opts_mut()
                .insert(DhcpOption::ClassIdentifier(b"PXEClient".to_vec()));
        }
        // A full-mode offer carries no `PXEClient`: with it and no PXE vendor
        // options, UEFI firmware (EDK2/OVMF) takes the offer for a BINL one and asks
        // a boot server on port 4011 for the file; without it, the offer is plain
        // DHCP with a boot file, which every PXE client boots from.
        if proxy && req.is_pxe() {
            // PXE vendor options: discovery control = 8, boot from the file name.
            m.opts_mut()
                .insert(DhcpOption::VendorExtensions(vec![6, 1, 8, 255]));
        }
    }

    fn destination(&self, req: &ClientRequest, nak: bool) -> Destination {
        let giaddr = req.msg.giaddr();
        if !giaddr.is_unspecified() {
            return Destination::Unicast(SocketAddrV4::new(giaddr, 67));
        }
        let ciaddr = req.msg.ciaddr();
        if !nak && !ciaddr.is_unspecified() {
            return Destination::Unicast(SocketAddrV4::new(ciaddr, 68));
        }
        Destination::Broadcast
    }
}

/// Logs an answer to a known host with the host's name: a lease bound or boot
/// options given (offers and refusals stay at debug level).
fn log_known(req: &ClientRequest, host: &KnownHost, reply: &Message) {
    let ty = reply.opts().msg_type();
    match (ty, reply.yiaddr().is_unspecified()) {
        (Some(MessageType::Ack), false) => {
            tracing::info!(mac = %req.mac, ip = %reply.yiaddr(), host = %host.name, "DHCP lease bound for a known host");
        }
        // Proxy mode's offer and acknowledgement, an INFORM's answer.
        (Some(MessageType::Offer | MessageType::Ack), true) => {
            tracing::info!(mac = %req.mac, host = %host.name, "boot options given to a known host");
        }
        _ => {
            tracing::debug!(mac = %req.mac, host = %host.name, reply = ?ty, "DHCP answer to a known host");
        }
    }
}

#[cfg(test)]
#[path = "policy_tests.rs"]
mod tests;
