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
            Mode::Full { range } => self.answer_full(req, known.as_ref(), boot, leases, range),
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
        let sighting = Sighting {
            hostname_raw: req.hostname_raw.clone(),
            arch: req.arch,
            vendor_class: req.vendor_class_str(),
            ipxe: req.ipxe,
        };
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
        range: &Range,
    ) -> Option<(Message, Destination)> {
        let fixed = known.and_then(|h| h.fixed_ip);
        match req.msg_type {
            MessageType::Discover => self.offer(req, fixed, boot, leases, range),
            MessageType::Request => self.acknowledge(req, fixed, boot, leases, range),
            MessageType::Inform => {
                let mut reply = self.reply_base(req, MessageType::Ack, Ipv4Addr::UNSPECIFIED);
                reply.opts_mut().insert(DhcpOption::SubnetMask(
                    range.netmask.unwrap_or(self.netmask),
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
    fn offer(
        &self,
        req: &ClientRequest,
        fixed: Option<Ipv4Addr>,
        boot: Option<Boot>,
        leases: &LeaseTable,
        range: &Range,
    ) -> Option<(Message, Destination)> {
        let reserved_for = |ip| self.hosts.reserved_for(ip);
        let Some(ip) = leases.allocate(
            req.mac,
            fixed,
            req.requested_ip,
            (range.start, range.end),
            &reserved_for,
        ) else {
            tracing::warn!(mac = %req.mac, "DHCP range exhausted; no offer made (widen DHCP_RANGE)");
            return None;
        };
        leases.assign(req.mac, ip, LeaseState::Offered, OFFER_HOLD_SECS);
        Some(self.lease_reply(req, MessageType::Offer, ip, range, boot))
    }

    /// REQUEST in full mode: ACK the address asked for if the client may have it,
    /// NAK otherwise; nothing when the client took another server's offer.
    fn acknowledge(
        &self,
        req: &ClientRequest,
        fixed: Option<Ipv4Addr>,
        boot: Option<Boot>,
        leases: &LeaseTable,
        range: &Range,
    ) -> Option<(Message, Destination)> {
        if let Some(sid) = req.server_id
            && sid != self.server_ip
        {
            // The client took another server's offer.
            if leases
                .get(&req.mac)
                .is_some_and(|l| l.state == LeaseState::Offered)
            {
                leases.release(req.mac);
            }
            return None;
        }
        let reserved_for = |ip| self.hosts.reserved_for(ip);
        let wanted = req
            .requested_ip
            .or_else(|| (!req.msg.ciaddr().is_unspecified()).then(|| req.msg.ciaddr()));
        let ok = wanted.filter(|ip| {
            let in_range =
                (u32::from(range.start)..=u32::from(range.end)).contains(&u32::from(*ip));
            (fixed == Some(*ip) || (fixed.is_none() && in_range))
                && leases.may_bind(req.mac, *ip, &reserved_for)
        });
        match ok {
            Some(ip) => {
                leases.assign(req.mac, ip, LeaseState::Bound, u64::from(self.lease_secs));
                Some(self.lease_reply(req, MessageType::Ack, ip, range, boot))
            }
            None => {
                tracing::debug!(mac = %req.mac, requested = ?wanted, "DHCP request refused (NAK)");
                let reply = self.reply_base(req, MessageType::Nak, Ipv4Addr::UNSPECIFIED);
                Some((reply, self.destination(req, true)))
            }
        }
    }

    /// An OFFER or ACK of `ip`, with the lease options and the boot options if any.
    fn lease_reply(
        &self,
        req: &ClientRequest,
        ty: MessageType,
        ip: Ipv4Addr,
        range: &Range,
        boot: Option<Boot>,
    ) -> (Message, Destination) {
        let mut reply = self.reply_base(req, ty, ip);
        self.add_lease_options(&mut reply, range);
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

    fn add_lease_options(&self, m: &mut Message, range: &Range) {
        let secs = self.lease_secs;
        m.opts_mut().insert(DhcpOption::AddressLeaseTime(secs));
        m.opts_mut().insert(DhcpOption::Renewal(secs / 2));
        m.opts_mut().insert(DhcpOption::Rebinding(secs / 8 * 7));
        m.opts_mut().insert(DhcpOption::SubnetMask(
            range.netmask.unwrap_or(self.netmask),
        ));
        if let Some(r) = self.router {
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
mod tests {
    use super::*;
    use crate::netboot::dhcp::packet::parse_request;
    use crate::netboot::dhcp::packet::tests::discover;

    fn policy(mode: Mode) -> Policy {
        Policy {
            mode,
            server_ip: "10.9.0.1".parse().unwrap(),
            netmask: "255.255.255.0".parse().unwrap(),
            router: None,
            dns: None,
            lease_secs: 600,
            http_base: "http://10.9.0.1:6180".into(),
            hosts: HostDirectory::default(),
            known_only: false,
        }
    }

    fn full() -> Mode {
        Mode::Full {
            range: Range::parse("10.9.0.10,10.9.0.20,24").unwrap(),
        }
    }

    fn bootfile(m: &Message) -> Option<String> {
        match m.opts().get(OptionCode::BootfileName) {
            Some(DhcpOption::BootfileName(b)) => Some(String::from_utf8_lossy(b).into_owned()),
            _ => None,
        }
    }

    #[test]
    fn arch_picks_loader() {
        let p = policy(full());
        let leases = LeaseTable::in_memory();
        for (arch, want) in [
            (0u16, "undionly.kpxe"),
            (7, "snponly-x86_64.efi"),
            (9, "snponly-x86_64.efi"),
            (11, "snponly-arm64.efi"),
        ] {
            let vc = format!("PXEClient:Arch:{arch:05}:UNDI:003016");
            let b = discover(
                [0x52, 0, 0, 0, 0, arch as u8],
                &[(93, &arch.to_be_bytes()), (60, vc.as_bytes())],
            );
            let (m, _) = p
                .answer(&parse_request(&b).unwrap(), &leases, false)
                .unwrap();
            assert_eq!(bootfile(&m).as_deref(), Some(want), "arch {arch}");
            assert_eq!(m.siaddr().to_string(), "10.9.0.1");
            assert!(
                m.opts().get(OptionCode::ClassIdentifier).is_none(),
                "arch {arch}: a full-mode offer with PXEClient sends UEFI firmware to port 4011"
            );
            assert!(!m.yiaddr().is_unspecified());
        }
    }

    #[test]
    fn ipxe_gets_the_script_and_plain_clients_no_bootfile() {
        let p = policy(full());
        let leases = LeaseTable::in_memory();
        let b = discover(
            [2, 2, 3, 4, 5, 6],
            &[
                (175, &[19, 1, 1]),
                (60, b"PXEClient:Arch:00000:UNDI:002001"),
            ],
        );
        let (m, _) = p
            .answer(&parse_request(&b).unwrap(), &leases, false)
            .unwrap();
        assert_eq!(
            bootfile(&m).as_deref(),
            Some("http://10.9.0.1:6180/boot.ipxe")
        );
        let b = discover([2, 2, 3, 4, 5, 7], &[(12, b"plain")]);
        let (m, d) = p
            .answer(&parse_request(&b).unwrap(), &leases, false)
            .unwrap();
        assert_eq!(bootfile(&m), None);
        assert_eq!(d, Destination::Broadcast);
    }

    #[test]
    fn uefi_http_boot_gets_a_url() {
        let p = policy(full());
        let b = discover(
            [2, 2, 3, 4, 5, 8],
            &[
                (93, &16u16.to_be_bytes()),
                (60, b"HTTPClient:Arch:00016:UNDI:003001"),
            ],
        );
        let (m, _) = p
            .answer(&parse_request(&b).unwrap(), &LeaseTable::in_memory(), false)
            .unwrap();
        assert_eq!(
            bootfile(&m).as_deref(),
            Some("http://10.9.0.1:6180/ipxe/ipxe-x86_64.efi")
        );
        assert!(
            matches!(m.opts().get(OptionCode::ClassIdentifier), Some(DhcpOption::ClassIdentifier(v)) if v == b"HTTPClient")
        );
    }

    #[test]
    fn proxy_mode_offers_no_address_and_ignores_plain_clients() {
        let p = policy(Mode::Proxy);
        let leases = LeaseTable::in_memory();
        let b = discover(
            [8, 9, 9, 9, 9, 9],
            &[
                (93, &7u16.to_be_bytes()),
                (60, b"PXEClient:Arch:00007:UNDI:003016"),
            ],
        );
        let (m, _) = p
            .answer(&parse_request(&b).unwrap(), &leases, false)
            .unwrap();
        assert!(m.yiaddr().is_unspecified());
        assert_eq!(bootfile(&m).as_deref(), Some("snponly-x86_64.efi"));
        assert!(m.opts().get(OptionCode::AddressLeaseTime).is_none());
        assert!(
            matches!(m.opts().get(OptionCode::VendorExtensions), Some(DhcpOption::VendorExtensions(v)) if v == &vec![6, 1, 8, 255])
        );
        let b = discover([8, 9, 9, 9, 9, 8], &[(12, b"plain")]);
        assert!(
            p.answer(&parse_request(&b).unwrap(), &leases, false)
                .is_none()
        );
        assert!(
            leases.get(&"08:09:09:09:09:08".parse().unwrap()).is_some(),
            "still recorded"
        );
    }

    #[test]
    fn known_only_answers_dhcp_hosts_and_attached_hosts_and_records_the_rest() {
        use crate::netboot::hosts::StaticHosts;

        struct Cluster;
        impl KnownHosts for Cluster {
            fn lookup(&self, mac: &crate::netboot::mac::MacAddr) -> Option<KnownHost> {
                (mac.0 == [2, 0, 0, 0, 0, 2]).then(|| KnownHost {
                    name: "ns/booting".into(),
                    fixed_ip: None,
                })
            }
        }
        let fixed: crate::netboot::config::DhcpHosts =
            "02:00:00:00:00:01,10.9.0.200;02:00:00:00:00:04,10.9.0.15"
                .parse()
                .unwrap();
        let mut p = policy(full());
        p.hosts = HostDirectory::new(StaticHosts::new(Some(&fixed)));
        p.known_only = true;
        let leases = LeaseTable::in_memory();
        let offer = |p: &Policy, mac: [u8; 6], extra: &[(u8, &[u8])]| {
            p.answer(
                &parse_request(&discover(mac, extra)).unwrap(),
                &leases,
                false,
            )
            .map(|(m, _)| m.yiaddr().to_string())
        };

        assert_eq!(
            offer(&p, [2, 0, 0, 0, 0, 1], &[]).as_deref(),
            Some("10.9.0.200"),
            "DHCP_HOSTS: its fixed address, outside the range"
        );
        assert_eq!(offer(&p, [2, 0, 0, 0, 0, 2], &[]), None, "not attached yet");
        p.hosts.attach(std::sync::Arc::new(Cluster));
        assert_eq!(
            offer(&p, [2, 0, 0, 0, 0, 2], &[]).as_deref(),
            Some("10.9.0.10"),
            "a cluster host: an address from the range"
        );
        assert_eq!(offer(&p, [2, 0, 0, 0, 0, 3], &[]), None, "unknown");
        assert!(
            leases.get(&"02:00:00:00:00:03".parse().unwrap()).is_some(),
            "an unknown client is still recorded (discovery sees it)"
        );

        p.known_only = false;
        assert_eq!(
            offer(&p, [2, 0, 0, 0, 0, 3], &[(50, &[10, 9, 0, 15])]).as_deref(),
            Some("10.9.0.11"),
            "answered without known-only, but never with another host's fixed address"
        );
    }

    /// A client message of type `ty` from `mac`, with hostname `name` if given.
    fn message(mac: [u8; 6], ty: MessageType) -> Vec<u8> {
        use dhcproto::{Encodable, Encoder};
        let unspecified = Ipv4Addr::UNSPECIFIED;
        let mut msg = Message::new(unspecified, unspecified, unspecified, unspecified, &mac);
        msg.opts_mut().insert(DhcpOption::MessageType(ty));
        let mut buf = Vec::new();
        msg.encode(&mut Encoder::new(&mut buf)).unwrap();
        buf
    }

    #[test]
    fn zero_broadcast_and_multicast_hardware_addresses_get_nothing() {
        for mode in [full(), Mode::Proxy] {
            let p = policy(mode);
            let leases = LeaseTable::in_memory();
            let pxe: &[(u8, &[u8])] = &[(60, b"PXEClient:Arch:00000:UNDI:002001")];
            for mac in [
                [0; 6],
                [0xff; 6],
                [1, 0, 0x5e, 0, 0, 1],
                [0x33, 0x33, 0, 0, 0, 1],
            ] {
                let req = parse_request(&discover(mac, pxe)).unwrap();
                assert!(p.answer(&req, &leases, false).is_none(), "{mac:?}");
            }
            assert!(leases.is_empty(), "{:?}", leases.list());
            let req = parse_request(&discover([2, 0, 0, 0, 0, 1], pxe)).unwrap();
            assert!(
                p.answer(&req, &leases, false).is_some(),
                "a unicast MAC is answered"
            );
        }
    }

    #[test]
    fn release_decline_and_inform_from_unknown_macs_make_no_record() {
        let p = policy(full());
        let leases = LeaseTable::in_memory();
        for ty in [
            MessageType::Release,
            MessageType::Decline,
            MessageType::Inform,
        ] {
            let req = parse_request(&message([2, 0, 0, 0, 0, 9], ty)).unwrap();
            p.answer(&req, &leases, false);
        }
        assert!(leases.is_empty(), "{:?}", leases.list());
        // A known client's RELEASE still gives its address back.
        let offered = p.answer(
            &parse_request(&discover([2, 0, 0, 0, 0, 9], &[])).unwrap(),
            &leases,
            false,
        );
        assert!(offered.is_some());
        let req = parse_request(&message([2, 0, 0, 0, 0, 9], MessageType::Release)).unwrap();
        p.answer(&req, &leases, false);
        let lease = leases.get(&"02:00:00:00:00:09".parse().unwrap()).unwrap();
        assert_eq!(lease.state, LeaseState::Released);
    }

    #[test]
    fn only_valid_client_host_names_are_recorded() {
        let p = policy(full());
        let leases = LeaseTable::in_memory();
        for (n, name) in [&b"node\n1"[..], b"\x1b[31mred\x07", "a\u{202e}b".as_bytes()]
            .into_iter()
            .enumerate()
        {
            let req = parse_request(&discover([2, 0, 0, 0, 1, n as u8], &[(12, name)])).unwrap();
            assert!(p.answer(&req, &leases, false).is_some(), "still answered");
        }
        assert!(
            leases.list().iter().all(|l| l.hostname.is_none()),
            "{:?}",
            leases.list()
        );
        let req = parse_request(&discover([2, 0, 0, 0, 2, 0], &[(12, b"worker-1")])).unwrap();
        p.answer(&req, &leases, false);
        let lease = leases.get(&"02:00:00:00:02:00".parse().unwrap()).unwrap();
        assert_eq!(lease.hostname.as_deref(), Some("worker-1"));
    }
}
