//! DHCP sockets: UDP 67 (and 4011 in proxy mode) bound to the provisioning
//! interface only (SO_BINDTODEVICE), replies broadcast on it or unicast to a relay
//! or a configured client.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};

use dhcproto::v4::{DhcpOption, Message, OptionCode};
use socket2::{Domain, Protocol, Socket, Type};
use tokio::net::UdpSocket;
use tokio::sync::watch;

use super::packet::{ClientRequest, parse_request};
use super::policy::{Destination, Policy};
use super::relay::{Relays, encode_reply};
use crate::netboot::address::Choice;
use crate::netboot::boot_log::{BootLog, BootStep};
use crate::netboot::leases::LeaseTable;

/// Receive buffer of the DHCP sockets.
const RECV_BUFFER: usize = 4 << 20;

/// Opens a UDP socket on `port` bound to `interface`.
pub fn bind(interface: &str, port: u16) -> std::io::Result<UdpSocket> {
    let s = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP))?;
    s.set_reuse_address(true)?;
    s.set_broadcast(true)?;
    // Room for bursts (the kernel caps it at net.core.rmem_max).
    s.set_recv_buffer_size(RECV_BUFFER)?;
    s.bind_device(Some(interface.as_bytes()))?;
    s.set_nonblocking(true)?;
    s.bind(&SocketAddr::from(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, port)).into())?;
    UdpSocket::from_std(s.into())
}

/// What a DHCP socket answers with: the policy, the ranges of relayed subnets, and
/// the HTTP boot server's port (for URLs that follow the provisioning IP).
#[derive(Debug, Clone)]
pub struct Answers {
    pub policy: Policy,
    pub relays: Relays,
    pub http_port: u16,
}

/// Answers requests on `socket` until the task is dropped. The policy's server
/// address follows the provisioning IP; relayed requests get addresses from their
/// subnet's range.
pub async fn serve(
    socket: UdpSocket,
    answers: Answers,
    mut address: watch::Receiver<Choice>,
    leases: LeaseTable,
    boot_log: BootLog,
    proxy_port: bool,
) {
    let Answers {
        mut policy,
        relays,
        http_port,
    } = answers;
    let mut buf = vec![0u8; 4096];
    let mut out = Vec::with_capacity(1024);
    loop {
        let received = tokio::select! {
            r = socket.recv_from(&mut buf) => r,
            changed = address.changed() => {
                if changed.is_ok() {
                    let choice = address.borrow_and_update().clone();
                    if let std::net::IpAddr::V4(v4) = choice.ip {
                        policy.server_ip = v4;
                        policy.http_base = choice.http_base(http_port);
                    }
                }
                continue;
            }
        };
        let (len, peer) = match received {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(error = %e, "DHCP receive failed");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        let req = match parse_request(&buf[..len]) {
            Ok(r) => r,
            Err(e) => {
                tracing::debug!(%peer, error = %e, "malformed DHCP packet dropped");
                continue;
            }
        };
        let answer = relays.answer(&policy, &req, &leases, proxy_port);
        boot_log.dhcp(
            req.mac,
            exchange(&req, answer.as_ref().map(|(reply, _)| reply)),
        );
        let Some((reply, dest)) = answer else {
            continue;
        };
        out.clear();
        if let Err(e) = encode_reply(&reply, &req, &mut out) {
            tracing::warn!(mac = %req.mac, error = %e, "cannot encode DHCP reply");
            continue;
        }
        let to: SocketAddr = match dest {
            Destination::Broadcast => SocketAddrV4::new(Ipv4Addr::BROADCAST, 68).into(),
            Destination::Unicast(a) => a.into(),
        };
        let to = if proxy_port && matches!(dest, Destination::Broadcast) {
            peer
        } else {
            to
        };
        if let Err(e) = socket.send_to(&out, to).await {
            tracing::debug!(mac = %req.mac, %to, error = %e, "DHCP reply not sent");
        }
    }
}

/// What the boot log records of an exchange: the request's type and, when bmo
/// answered, the answer's type, address and boot file.
fn exchange(req: &ClientRequest, reply: Option<&Message>) -> BootStep {
    let kind = |t: dhcproto::v4::MessageType| format!("{t:?}").to_uppercase();
    let reply_type = reply.and_then(|m| match m.opts().get(OptionCode::MessageType) {
        Some(DhcpOption::MessageType(t)) => Some(kind(*t)),
        _ => None,
    });
    let boot_file = reply.and_then(|m| match m.opts().get(OptionCode::BootfileName) {
        Some(DhcpOption::BootfileName(b)) => Some(String::from_utf8_lossy(b).into_owned()),
        _ => None,
    });
    BootStep::Dhcp {
        request: kind(req.msg_type),
        reply: reply.map(|_| reply_type.unwrap_or_else(|| "REPLY".into())),
        address: reply
            .map(Message::yiaddr)
            .filter(|ip| !ip.is_unspecified())
            .map(std::net::IpAddr::V4),
        boot_file,
    }
}
