//! DHCPv6 sockets on the provisioning interface. Requests are read from a packet
//! socket (AF_PACKET, filtered in the kernel to UDP port 547), because the lease
//! table is keyed by MAC and only the frame says which MAC sent a message: UEFI
//! and iPXE send DUID-LLT or DUID-UUID, and a link-local source address need not
//! be derived from the MAC. Replies go out of the same packet socket, addressed to
//! that MAC: no neighbour discovery, so a flood of made-up clients (whose replies
//! would fill the neighbour table with unresolved entries) cannot keep a real
//! client's reply from leaving. A UDP socket holds port 547 (no ICMP "port
//! unreachable" to clients) and joins All_DHCP_Relay_Agents_and_Servers
//! (ff02::1:2) so the NIC accepts requests.

use std::io;
use std::mem::{size_of, zeroed};
use std::net::{IpAddr, Ipv6Addr, SocketAddr, SocketAddrV6};
use std::os::fd::AsRawFd;

use dhcproto::v6::{DhcpOption, Message, OptionCode};
use dhcproto::{Encodable, Encoder};
use socket2::{Domain, Protocol, SockFilter, Socket, Type};
use tokio::io::unix::AsyncFd;
use tokio::net::UdpSocket;
use tokio::sync::watch;

use super::packet6::{ClientRequest6, parse_request6};
use super::policy6::{Mode6, Policy6};
use super::relay6::{RELAY_FORW, Relays6, parse_relay_forward, wrap_reply};
use crate::netboot::address::Choice;
use crate::netboot::boot_log::{BootLog, BootStep};
use crate::netboot::leases::LeaseTable;
use crate::netboot::mac::MacAddr;

const ETH_P_IPV6: u16 = 0x86dd;
const SERVER_PORT: u16 = 547;
const CLIENT_PORT: u16 = 546;
const RECV_BUFFER: usize = 4 << 20;
/// All_DHCP_Relay_Agents_and_Servers.
const ALL_SERVERS: Ipv6Addr = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 1, 2);

/// The DHCPv6 server's sockets on one interface.
pub struct Sockets6 {
    packet: AsyncFd<Socket>,
    udp: UdpSocket,
    ifindex: u32,
    /// The interface's MAC, for bmo's DUID.
    pub mac: MacAddr,
    /// The interface's link-local address: the source of replies to link-local
    /// clients.
    link_local: Option<Ipv6Addr>,
}

impl Sockets6 {
    /// bmo's DUID: DUID-LL (type 3) of the interface's MAC.
    pub fn server_duid(&self) -> Vec<u8> {
        let mut d = vec![0, 3, 0, 1];
        d.extend_from_slice(&self.mac.0);
        d
    }
}

/// Keeps UDP to port 547 in IPv6 frames without extension headers (offsets from
/// the network header, as an AF_PACKET/SOCK_DGRAM socket sees frames).
fn port_547_filter() -> [SockFilter; 6] {
    let op = SockFilter::new;
    let (ld_b, ld_h) = (0x30, 0x28); // BPF_LD|BPF_B|BPF_ABS, BPF_LD|BPF_H|BPF_ABS
    let (jeq, ret) = (0x15, 0x06); // BPF_JMP|BPF_JEQ|BPF_K, BPF_RET|BPF_K
    [
        op(ld_b, 0, 0, 6),
        op(jeq, 0, 3, 17),
        op(ld_h, 0, 0, 42),
        op(jeq, 0, 1, u32::from(SERVER_PORT)),
        op(ret, 0, 0, 0xffff),
        op(ret, 0, 0, 0),
    ]
}

/// Opens the packet socket and the UDP socket on `interface`.
pub fn bind6(interface: &str) -> io::Result<Sockets6> {
    let ifindex = crate::netboot::address::interface_index(interface)?;
    // Protocol 0 until bound: nothing is queued before the filter is on.
    let packet = Socket::new(Domain::PACKET, Type::DGRAM, Some(Protocol::from(0)))?;
    let filter = port_547_filter();
    packet.attach_filter(&filter)?;
    packet.set_recv_buffer_size(RECV_BUFFER)?;
    // SAFETY: sockaddr_ll is plain data; all-zero is a valid value.
    let mut sll: libc::sockaddr_ll = unsafe { zeroed() };
    sll.sll_family = libc::AF_PACKET as u16;
    sll.sll_protocol = ETH_P_IPV6.to_be();
    sll.sll_ifindex = ifindex as i32;
    // SAFETY: bind with a pointer to an initialised sockaddr_ll and its size.
    let rc = unsafe {
        libc::bind(
            packet.as_raw_fd(),
            (&raw const sll).cast(),
            size_of::<libc::sockaddr_ll>() as u32,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    let mac = local_mac(&packet)?;
    packet.set_nonblocking(true)?;

    let udp = Socket::new(Domain::IPV6, Type::DGRAM, Some(Protocol::UDP))?;
    udp.set_only_v6(true)?;
    udp.set_reuse_address(true)?;
    udp.bind_device(Some(interface.as_bytes()))?;
    udp.set_nonblocking(true)?;
    udp.bind(
        &SocketAddr::from(SocketAddrV6::new(Ipv6Addr::UNSPECIFIED, SERVER_PORT, 0, 0)).into(),
    )?;
    udp.join_multicast_v6(&ALL_SERVERS, ifindex)?;
    // Replies are multicast-free; copies of requests read here are dropped.
    udp.set_recv_buffer_size(1)?;
    // SAFETY: the AsyncFd owns the socket, so the fd stays open while registered.
    let packet = unsafe { AsyncFd::register(packet)? };
    let link_local = crate::netboot::address::snapshot().ok().and_then(|snap| {
        snap.addrs.into_iter().find_map(|a| match a.ip {
            IpAddr::V6(v6) if a.interface == interface && v6.is_unicast_link_local() => Some(v6),
            _ => None,
        })
    });
    Ok(Sockets6 {
        packet,
        udp: UdpSocket::from_std(udp.into())?,
        ifindex,
        mac,
        link_local,
    })
}

/// The hardware address of the interface a packet socket is bound to.
fn local_mac(packet: &Socket) -> io::Result<MacAddr> {
    // SAFETY: getsockname fills at most `len` bytes of a zeroed sockaddr_ll.
    let mut sll: libc::sockaddr_ll = unsafe { zeroed() };
    let mut len = size_of::<libc::sockaddr_ll>() as u32;
    let rc = unsafe { libc::getsockname(packet.as_raw_fd(), (&raw mut sll).cast(), &mut len) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    let mut mac = [0u8; 6];
    if sll.sll_halen == 6 {
        mac.copy_from_slice(&sll.sll_addr[..6]);
    }
    Ok(MacAddr(mac))
}

/// Reads one frame: its bytes (from the IPv6 header) and the sender's MAC.
/// Frames bmo sent itself (PACKET_OUTGOING) come back as `None`.
fn recv_frame(packet: &Socket, buf: &mut [u8]) -> io::Result<Option<(usize, MacAddr)>> {
    // SAFETY: as in local_mac; recvfrom writes at most buf.len() bytes into buf.
    let mut sll: libc::sockaddr_ll = unsafe { zeroed() };
    let mut len = size_of::<libc::sockaddr_ll>() as u32;
    let n = unsafe {
        libc::recvfrom(
            packet.as_raw_fd(),
            buf.as_mut_ptr().cast(),
            buf.len(),
            0,
            (&raw mut sll).cast(),
            &mut len,
        )
    };
    let n = usize::try_from(n).map_err(|_| io::Error::last_os_error())?;
    if sll.sll_pkttype == libc::PACKET_OUTGOING || sll.sll_halen != 6 {
        return Ok(None);
    }
    let mut mac = [0u8; 6];
    mac.copy_from_slice(&sll.sll_addr[..6]);
    Ok(Some((n, MacAddr(mac))))
}

/// An IPv6 packet carrying `payload` in UDP from `from` to `to`, checksummed.
pub fn udp_datagram(from: (Ipv6Addr, u16), to: (Ipv6Addr, u16), payload: &[u8]) -> Vec<u8> {
    let udp_len = (8 + payload.len()) as u16;
    let mut p = Vec::with_capacity(48 + payload.len());
    p.extend_from_slice(&[0x60, 0, 0, 0]);
    p.extend_from_slice(&udp_len.to_be_bytes());
    p.extend_from_slice(&[17, 64]);
    p.extend_from_slice(&from.0.octets());
    p.extend_from_slice(&to.0.octets());
    p.extend_from_slice(&from.1.to_be_bytes());
    p.extend_from_slice(&to.1.to_be_bytes());
    p.extend_from_slice(&udp_len.to_be_bytes());
    p.extend_from_slice(&[0, 0]);
    p.extend_from_slice(payload);
    // The checksum covers a pseudo-header (addresses, length, next header) and UDP.
    let mut sum: u32 = u32::from(udp_len) + 17;
    for chunk in p[8..40].chunks(2).chain(p[40..].chunks(2)) {
        let word = [chunk[0], chunk.get(1).copied().unwrap_or(0)];
        sum += u32::from(u16::from_be_bytes(word));
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    let checksum = match !(sum as u16) {
        0 => 0xffff,
        c => c,
    };
    p[46..48].copy_from_slice(&checksum.to_be_bytes());
    p
}

/// Sends an IPv6 packet to `mac` on the interface (non-blocking; a full queue
/// drops it, as a busy link would).
fn send_frame(packet: &Socket, ifindex: u32, mac: MacAddr, datagram: &[u8]) -> io::Result<()> {
    // SAFETY: sockaddr_ll is plain data; all-zero is a valid value.
    let mut sll: libc::sockaddr_ll = unsafe { zeroed() };
    sll.sll_family = libc::AF_PACKET as u16;
    sll.sll_protocol = ETH_P_IPV6.to_be();
    sll.sll_ifindex = ifindex as i32;
    sll.sll_halen = 6;
    sll.sll_addr[..6].copy_from_slice(&mac.0);
    // SAFETY: sendto reads `datagram` and an initialised sockaddr_ll of its size.
    let n = unsafe {
        libc::sendto(
            packet.as_raw_fd(),
            datagram.as_ptr().cast(),
            datagram.len(),
            0,
            (&raw const sll).cast(),
            size_of::<libc::sockaddr_ll>() as u32,
        )
    };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The source address and port and the UDP payload of an IPv6 frame to port 547
/// (no extension headers); `None` for anything else.
pub fn udp_payload(frame: &[u8]) -> Option<(Ipv6Addr, u16, &[u8])> {
    let header = frame.get(..48)?;
    if header[0] >> 4 != 6 || header[6] != 17 {
        return None;
    }
    let src: [u8; 16] = header[8..24].try_into().ok()?;
    let src_port = u16::from_be_bytes([header[40], header[41]]);
    let dst_port = u16::from_be_bytes([header[42], header[43]]);
    let udp_len = usize::from(u16::from_be_bytes([header[44], header[45]]));
    if dst_port != SERVER_PORT || udp_len < 8 {
        return None;
    }
    let src = Ipv6Addr::from(src);
    if src.is_multicast() || src.is_unspecified() {
        return None;
    }
    Some((src, src_port, frame.get(48..40 + udp_len)?))
}

/// Answers DHCPv6 requests until the task is dropped. The policy's address follows
/// the provisioning IP; relayed messages get addresses from their link's range in
/// `relays`.
pub async fn serve6(
    sockets: Sockets6,
    mut policy: Policy6,
    relays: Relays6,
    mut address: watch::Receiver<Choice>,
    leases: LeaseTable,
    boot_log: BootLog,
) {
    let mut buf = vec![0u8; 65536];
    let mut drain = [0u8; 16];
    let mut out = Vec::with_capacity(1024);
    loop {
        let frame = tokio::select! {
            r = sockets.packet.readable() => match r {
                Ok(mut guard) => match guard.try_io(|s| recv_frame(s.get_ref(), &mut buf)) {
                    Ok(r) => r,
                    Err(_would_block) => continue,
                },
                Err(e) => Err(e),
            },
            _ = sockets.udp.recv_from(&mut drain) => continue,
            changed = address.changed() => {
                if changed.is_ok()
                    && let IpAddr::V6(v6) = address.borrow_and_update().ip
                {
                    policy.server_ip = v6;
                }
                continue;
            }
        };
        let (len, mac) = match frame {
            Ok(Some(f)) => f,
            Ok(None) => continue,
            Err(e) => {
                tracing::warn!(error = %e, "DHCPv6 receive failed");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        let Some((src, src_port, payload)) = udp_payload(&buf[..len]) else {
            continue;
        };
        let answering = Answering {
            policy: &policy,
            relays: &relays,
            leases: &leases,
            boot_log: &boot_log,
        };
        if !answering.respond(payload, mac, src, &mut out) {
            continue;
        }
        let from = match sockets.link_local {
            Some(ll) if src.is_unicast_link_local() => ll,
            _ => policy.server_ip,
        };
        let port = if src_port == 0 { CLIENT_PORT } else { src_port };
        let datagram = udp_datagram((from, SERVER_PORT), (src, port), &out);
        if let Err(e) = send_frame(sockets.packet.get_ref(), sockets.ifindex, mac, &datagram) {
            tracing::debug!(%mac, %src, error = %e, "DHCPv6 reply not sent");
        }
    }
}

/// What a message is answered with and where its exchange is recorded.
struct Answering<'a> {
    policy: &'a Policy6,
    relays: &'a Relays6,
    leases: &'a LeaseTable,
    boot_log: &'a BootLog,
}

impl Answering<'_> {
    /// Puts the answer to `payload`, sent from `mac` at `src`, into `out`: bmo's
    /// reply, wrapped in Relay-Replies when the message was relayed. False when
    /// there is nothing to send.
    fn respond(&self, payload: &[u8], mac: MacAddr, src: Ipv6Addr, out: &mut Vec<u8>) -> bool {
        out.clear();
        let relayed = payload.first() == Some(&RELAY_FORW);
        let parsed = if relayed {
            parse_relay_forward(payload).map(|r| (r.client.clone(), Some(r)))
        } else {
            parse_request6(payload).map(|r| (r, None))
        };
        let (req, relayed) = match parsed {
            Ok(r) => r,
            Err(e) => {
                tracing::debug!(%src, %mac, error = %e, "malformed DHCPv6 message dropped");
                return false;
            }
        };
        let (client, range) = match &relayed {
            None => (mac, None),
            Some(r) => {
                let Some(client) = r.client_mac() else {
                    tracing::debug!(relay = %src, "relayed DHCPv6 message without the client's MAC (no option 79, no Ethernet DUID); not answered");
                    return false;
                };
                if matches!(self.policy.mode, Mode6::Proxy) {
                    (client, None)
                } else {
                    let Some(range) = self.relays.range_for(r, src) else {
                        self.boot_log.dhcp(client, exchange6(&req, None));
                        return false;
                    };
                    (client, Some(range))
                }
            }
        };
        let reply = self
            .policy
            .answer_in(&req, client, self.leases, range.as_ref());
        self.boot_log.dhcp(client, exchange6(&req, reply.as_ref()));
        let Some(reply) = reply else {
            return false;
        };
        if let Err(e) = reply.encode(&mut Encoder::new(out)) {
            tracing::warn!(%client, error = %e, "cannot encode DHCPv6 reply");
            return false;
        }
        let Some(relayed) = relayed else {
            return true;
        };
        match wrap_reply(&relayed.hops, std::mem::take(out)) {
            Some(wrapped) => {
                *out = wrapped;
                true
            }
            None => false,
        }
    }
}

/// What the boot log records of a DHCPv6 exchange.
fn exchange6(req: &ClientRequest6, reply: Option<&Message>) -> BootStep {
    let kind = |t: dhcproto::v6::MessageType| format!("{t:?}").to_uppercase();
    let address = reply.and_then(|m| match m.opts().get(OptionCode::IANA) {
        Some(DhcpOption::IANA(ia)) => match ia.opts.get(OptionCode::IAAddr) {
            Some(DhcpOption::IAAddr(a)) => Some(IpAddr::V6(a.addr)),
            _ => None,
        },
        _ => None,
    });
    let boot_file = reply.and_then(|m| {
        m.opts().iter().find_map(|o| match o {
            DhcpOption::Unknown(u) if u16::from(u.code()) == 59 => {
                Some(String::from_utf8_lossy(u.data()).into_owned())
            }
            _ => None,
        })
    });
    BootStep::Dhcp {
        request: kind(req.msg_type),
        reply: reply.map(|m| kind(m.msg_type())),
        address,
        boot_file,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(next: u8, dport: u16, payload: &[u8]) -> Vec<u8> {
        let mut f = vec![0x60, 0, 0, 0, 0, 0, next, 255];
        f.extend_from_slice(&"fe80::5054:ff:fe00:1".parse::<Ipv6Addr>().unwrap().octets());
        f.extend_from_slice(&ALL_SERVERS.octets());
        f.extend_from_slice(&546u16.to_be_bytes());
        f.extend_from_slice(&dport.to_be_bytes());
        f.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
        f.extend_from_slice(&[0, 0]);
        f.extend_from_slice(payload);
        f
    }

    #[test]
    fn replies_are_checksummed_as_the_kernel_checks() {
        let from: Ipv6Addr = "fe80::1".parse().unwrap();
        let to: Ipv6Addr = "fe80::5054:ff:fe00:1".parse().unwrap();
        let d = udp_datagram((from, 547), (to, 546), b"odd");
        assert_eq!(d.len(), 51);
        // Summing everything the checksum covers, checksum included, gives 0xffff.
        let mut sum: u32 = u32::from(u16::from_be_bytes([d[44], d[45]])) + 17;
        for c in d[8..].chunks(2) {
            sum += u32::from(u16::from_be_bytes([c[0], c.get(1).copied().unwrap_or(0)]));
        }
        while sum > 0xffff {
            sum = (sum & 0xffff) + (sum >> 16);
        }
        assert_eq!(sum, 0xffff);
        let (src, port, payload) = {
            // Read back as a request would be, with the ports swapped.
            let mut r = d.clone();
            r[42..44].copy_from_slice(&547u16.to_be_bytes());
            let (s, p, pl) = udp_payload(&r)
                .map(|(s, p, pl)| (s, p, pl.to_vec()))
                .unwrap();
            (s, p, pl)
        };
        assert_eq!((src, port, payload.as_slice()), (from, 547, &b"odd"[..]));
    }

    #[test]
    fn udp_payload_takes_only_udp_to_547_and_trusts_no_length() {
        let f = frame(17, 547, b"abcd");
        let (src, port, p) = udp_payload(&f).unwrap();
        assert_eq!(
            (src.to_string().as_str(), port, p),
            ("fe80::5054:ff:fe00:1", 546, &b"abcd"[..])
        );
        assert!(udp_payload(&frame(6, 547, b"abcd")).is_none());
        assert!(udp_payload(&frame(17, 546, b"abcd")).is_none());
        let mut long = frame(17, 547, b"abcd");
        long[44..46].copy_from_slice(&100u16.to_be_bytes());
        assert!(udp_payload(&long).is_none());
        assert!(udp_payload(&long[..30]).is_none());
    }
}
