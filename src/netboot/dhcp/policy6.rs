//! What to answer a DHCPv6 client: IA_NA addresses (full mode) and the boot file
//! URL (both modes). Pure over the request, the client's MAC, the settings and the
//! lease table, so it is tested without sockets.

use std::net::Ipv6Addr;

use dhcproto::v6::{
    DhcpOption, DhcpOptions, IAAddr, IANA, Message, MessageType, OptionCode, Status, StatusCode,
    UnknownOption, VendorClass,
};

use super::packet6::ClientRequest6;
use super::range::Range6;
use crate::netboot::hosts::{HostDirectory, KnownHosts};
use crate::netboot::leases::{LeaseState, LeaseTable, Sighting};
use crate::netboot::mac::MacAddr;

/// Seconds an advertised address is held for the client's REQUEST.
const OFFER_HOLD_SECS: u64 = 30;

/// Enterprise number of the PXE vendor class (Intel), RFC 5970.
const PXE_ENTERPRISE: u32 = 343;

/// The mode-specific part of the settings.
#[derive(Debug, Clone)]
pub enum Mode6 {
    Full { range: Range6 },
    Proxy,
}

/// Everything the DHCPv6 policy needs besides the request.
#[derive(Debug, Clone)]
pub struct Policy6 {
    pub mode: Mode6,
    /// bmo's DUID (option 2).
    pub server_duid: Vec<u8>,
    /// Our provisioning address: TFTP and HTTP URLs.
    pub server_ip: Ipv6Addr,
    pub http_port: u16,
    pub dns: Option<Ipv6Addr>,
    pub lease_secs: u32,
    pub hosts: HostDirectory,
    pub known_only: bool,
}

/// The boot program for a DHCPv6 client, as the URL of option 59.
pub fn boot_url6(req: &ClientRequest6, server: Ipv6Addr, http_port: u16) -> Option<String> {
    let http = format!("http://[{server}]:{http_port}");
    if req.ipxe {
        return Some(format!("{http}/boot.ipxe"));
    }
    let loader = |name: &str| format!("tftp://[{server}]/{name}");
    // RFC 5970 / IANA processor architecture types.
    match req.arch? {
        7 | 9 if !req.is_http_client() => Some(loader("snponly-x86_64.efi")),
        11 if !req.is_http_client() => Some(loader("snponly-arm64.efi")),
        16 | 7 | 9 => Some(format!("{http}/ipxe/ipxe-x86_64.efi")),
        19 | 11 => Some(format!("{http}/ipxe/snponly-arm64.efi")),
        _ => None,
    }
}

impl Policy6 {
    /// The reply to `req` from the client on `mac`, if any.
    pub fn answer(
        &self,
        req: &ClientRequest6,
        mac: MacAddr,
        leases: &LeaseTable,
    ) -> Option<Message> {
        self.answer_in(req, mac, leases, None)
    }

    /// The reply to `req`, with addresses (full mode) from `relayed`, the range of
    /// a relayed client's link, or from the provisioning link's when `None`.
    pub fn answer_in(
        &self,
        req: &ClientRequest6,
        mac: MacAddr,
        leases: &LeaseTable,
        relayed: Option<&Range6>,
    ) -> Option<Message> {
        if !mac.is_unicast() {
            return None;
        }
        if req
            .server_id
            .as_ref()
            .is_some_and(|s| *s != self.server_duid)
        {
            return None; // meant for another server
        }
        if !self.record(req, mac, leases) {
            tracing::debug!(%mac, "lease table full of live leases; new DHCPv6 client not answered (BMO_DHCP_MAX_LEASES)");
            return None;
        }
        if self.known_only && self.hosts.lookup(&mac).is_none() {
            tracing::debug!(%mac, "not a known host; DHCPv6 not answered (DHCP_IGNORE=tag:!known)");
            return None;
        }
        let boot = boot_url6(req, self.server_ip, self.http_port);
        let mut reply = match &self.mode {
            Mode6::Proxy => self.answer_proxy(req, boot.as_deref())?,
            Mode6::Full { range } => {
                self.answer_full(req, mac, leases, relayed.unwrap_or(range))?
            }
        };
        if let Some(url) = &boot {
            self.add_boot(&mut reply, req, url);
        }
        Some(reply)
    }

    /// Records the client; false when the table is full.
    fn record(&self, req: &ClientRequest6, mac: MacAddr, leases: &LeaseTable) -> bool {
        let releasing = matches!(req.msg_type, MessageType::Release | MessageType::Decline);
        if releasing && leases.get(&mac).is_none() {
            return true;
        }
        let vendor_class = req.vendor_class.as_deref();
        let sighting = Sighting::new(req.fqdn.clone(), req.arch, vendor_class, req.ipxe);
        let proxy = matches!(self.mode, Mode6::Proxy);
        if req.duid.is_empty() {
            return leases.see(mac, sighting, proxy);
        }
        leases.see6(mac, &req.duid, sighting, proxy)
    }

    fn base(&self, req: &ClientRequest6, kind: MessageType) -> Message {
        let mut m = Message::new_with_id(kind, req.msg.xid());
        m.opts_mut()
            .insert(DhcpOption::ServerId(self.server_duid.clone()));
        if !req.duid.is_empty() {
            m.opts_mut().insert(DhcpOption::ClientId(req.duid.clone()));
        }
        if let Some(dns) = self.dns {
            m.opts_mut()
                .insert(DhcpOption::DomainNameServers(vec![dns]));
        }
        m
    }

    /// proxy mode: boot information, never an address.
    fn answer_proxy(&self, req: &ClientRequest6, boot: Option<&str>) -> Option<Message> {
        boot?;
        let kind = match req.msg_type {
            MessageType::Solicit => MessageType::Advertise,
            MessageType::Request | MessageType::InformationRequest => MessageType::Reply,
            _ => return None,
        };
        let mut m = self.base(req, kind);
        if let Some(ia) = &req.ia_na {
            m.opts_mut()
                .insert(self.ia_status(ia.iaid, Status::NoAddrsAvail));
        }
        Some(m)
    }

    fn answer_full(
        &self,
        req: &ClientRequest6,
        mac: MacAddr,
        leases: &LeaseTable,
        range: &Range6,
    ) -> Option<Message> {
        match req.msg_type {
            MessageType::Solicit => {
                let bind = req.rapid_commit;
                let kind = if bind {
                    MessageType::Reply
                } else {
                    MessageType::Advertise
                };
                let mut m = self.base(req, kind);
                if bind {
                    m.opts_mut().insert(DhcpOption::RapidCommit);
                }
                self.add_address(&mut m, req, mac, leases, range, bind);
                Some(m)
            }
            MessageType::Request | MessageType::Renew | MessageType::Rebind => {
                let mut m = self.base(req, MessageType::Reply);
                self.add_address(&mut m, req, mac, leases, range, true);
                Some(m)
            }
            MessageType::Confirm => {
                let on_link = req
                    .ia_na
                    .as_ref()
                    .is_some_and(|ia| ia.addrs.iter().all(|a| range.contains(*a)));
                let mut m = self.base(req, MessageType::Reply);
                let status = if on_link {
                    Status::Success
                } else {
                    Status::NotOnLink
                };
                m.opts_mut().insert(status_option(status));
                Some(m)
            }
            MessageType::Release | MessageType::Decline => {
                if leases.get(&mac).is_some() {
                    leases.release(mac);
                }
                let mut m = self.base(req, MessageType::Reply);
                m.opts_mut().insert(status_option(Status::Success));
                Some(m)
            }
            MessageType::InformationRequest => Some(self.base(req, MessageType::Reply)),
            _ => None,
        }
    }

    /// Adds the IA_NA with an address for the client (bound when `bind`), or with
    /// NoAddrsAvail when the range has none.
    fn add_address(
        &self,
        m: &mut Message,
        req: &ClientRequest6,
        mac: MacAddr,
        leases: &LeaseTable,
        range: &Range6,
        bind: bool,
    ) {
        let Some(ia) = &req.ia_na else {
            return;
        };
        let addr = leases
            .allocate6(mac, &ia.addrs, range.pool())
            .filter(|ip| !bind || leases.may_bind6(mac, *ip));
        let Some(addr) = addr else {
            m.opts_mut()
                .insert(self.ia_status(ia.iaid, Status::NoAddrsAvail));
            return;
        };
        let (state, secs) = if bind {
            (LeaseState::Bound, u64::from(self.lease_secs))
        } else {
            (LeaseState::Offered, OFFER_HOLD_SECS)
        };
        leases.assign6(mac, addr, state, secs);
        let life = self.lease_secs;
        let mut opts = DhcpOptions::new();
        opts.insert(DhcpOption::IAAddr(IAAddr {
            addr,
            preferred_life: life,
            valid_life: life,
            opts: DhcpOptions::new(),
        }));
        m.opts_mut().insert(DhcpOption::IANA(IANA {
            id: ia.iaid,
            t1: life / 2,
            t2: life / 5 * 4,
            opts,
        }));
    }

    fn ia_status(&self, iaid: u32, status: Status) -> DhcpOption {
        let mut opts = DhcpOptions::new();
        opts.insert(status_option(status));
        DhcpOption::IANA(IANA {
            id: iaid,
            t1: 0,
            t2: 0,
            opts,
        })
    }

    /// Option 59 (boot file URL) and, for UEFI HTTP boot, option 16 `HTTPClient`,
    /// without which OVMF ignores the answer. Never option 60 (boot file
    /// parameters), though OVMF asks for it: its PXE reads the first parameter as
    /// the boot file's size in 512-byte blocks (one to five decimal digits) and
    /// abandons the boot on anything else ("PXE-E53: No boot filename received").
    fn add_boot(&self, m: &mut Message, req: &ClientRequest6, url: &str) {
        m.opts_mut().insert(DhcpOption::Unknown(UnknownOption::new(
            OptionCode::from(59u16),
            url.as_bytes().to_vec(),
        )));
        if req.is_http_client() && !req.ipxe {
            m.opts_mut().insert(DhcpOption::VendorClass(VendorClass {
                num: PXE_ENTERPRISE,
                data: vec![b"HTTPClient".to_vec()],
            }));
        }
    }
}

fn status_option(status: Status) -> DhcpOption {
    DhcpOption::StatusCode(StatusCode {
        status,
        msg: String::new(),
    })
}

#[cfg(test)]
#[path = "policy6_tests.rs"]
mod tests;
