//! IPv6 router advertisements on the provisioning interface
//! (`BMO_ROUTER_ADVERTISEMENTS`, off by default). iPXE starts DHCPv6 only after an
//! advertisement: the managed flag (bmo's full mode) makes it ask for an address,
//! other-config (proxy mode) makes it configure itself by SLAAC and ask only for
//! boot information. bmo advertises the prefix and says it is not a default router
//! (router lifetime 0): it routes nothing. Sent a few times at start, then
//! periodically, and in answer to Router Solicitations, at most once per
//! [`MIN_DELAY`] whatever the solicitations' rate.

use std::io;
use std::net::{Ipv6Addr, SocketAddrV6};
use std::os::fd::AsRawFd;
use std::time::Duration;

use socket2::{Domain, Protocol, Socket, Type};
use tokio::io::unix::AsyncFd;
use tokio::time::Instant;

use super::mac::MacAddr;

/// All-nodes and all-routers link-local multicast groups.
const ALL_NODES: Ipv6Addr = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 1);
const ALL_ROUTERS: Ipv6Addr = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 2);
const ROUTER_SOLICITATION: u8 = 133;
const ROUTER_ADVERTISEMENT: u8 = 134;
/// Advertisements sent at the start, [`INITIAL_INTERVAL`] apart (RFC 4861 allows
/// three, at most 16 s apart).
const INITIAL_ADVERTISEMENTS: u32 = 3;
const INITIAL_INTERVAL: Duration = Duration::from_secs(4);
/// Then one every this long (within RFC 4861's 4–1800 s).
pub const INTERVAL: Duration = Duration::from_secs(200);
/// Advertisements on the link at most this close (RFC 4861's MIN_DELAY_BETWEEN_RAS).
pub const MIN_DELAY: Duration = Duration::from_secs(3);
/// Lifetimes of the advertised prefix.
const VALID_LIFETIME: u32 = 86_400;
const PREFERRED_LIFETIME: u32 = 14_400;
/// `ICMP6_FILTER` of `<netinet/icmp6.h>` (libc does not name it).
const ICMP6_FILTER: libc::c_int = 1;

/// What bmo advertises.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Advert {
    /// M: addresses from DHCPv6 (full mode).
    pub managed: bool,
    /// O: other configuration (boot information) from DHCPv6 (proxy mode).
    pub other: bool,
    pub prefix: Ipv6Addr,
    pub prefix_len: u8,
    /// A: clients may form addresses from the prefix themselves (SLAAC).
    pub autonomous: bool,
    /// The interface's MAC, for the source link-layer address option.
    pub mac: MacAddr,
}

impl Advert {
    /// The ICMPv6 message (checksum left to the kernel).
    pub fn message(&self) -> Vec<u8> {
        let mut m = vec![ROUTER_ADVERTISEMENT, 0, 0, 0, 64];
        m.push(u8::from(self.managed) << 7 | u8::from(self.other) << 6);
        m.extend_from_slice(&0u16.to_be_bytes()); // router lifetime: not a default router
        m.extend_from_slice(&[0; 8]); // reachable time, retransmission timer: unspecified
        m.extend_from_slice(&[1, 1]); // source link-layer address
        m.extend_from_slice(&self.mac.0);
        let mask = u128::MAX
            .checked_shl(128 - u32::from(self.prefix_len.min(128)))
            .unwrap_or(0);
        let prefix = Ipv6Addr::from(u128::from(self.prefix) & mask);
        m.extend_from_slice(&[3, 4, self.prefix_len]);
        m.push(0x80 | u8::from(self.autonomous) << 6); // on-link, autonomous
        m.extend_from_slice(&VALID_LIFETIME.to_be_bytes());
        m.extend_from_slice(&PREFERRED_LIFETIME.to_be_bytes());
        m.extend_from_slice(&[0; 4]);
        m.extend_from_slice(&prefix.octets());
        m
    }
}

/// The advertiser's socket: raw ICMPv6 on the interface, hop limit 255, receiving
/// only Router Solicitations.
pub struct RaSocket {
    socket: AsyncFd<Socket>,
    ifindex: u32,
}

/// Opens the socket on `interface` and joins all-routers for solicitations.
pub fn bind(interface: &str) -> io::Result<RaSocket> {
    let ifindex = super::address::interface_index(interface)?;
    let s = Socket::new(Domain::IPV6, Type::RAW, Some(Protocol::ICMPV6))?;
    // Block every ICMPv6 type but Router Solicitation (a set bit blocks).
    let mut filter = [u32::MAX; 8];
    filter[usize::from(ROUTER_SOLICITATION >> 5)] &= !(1 << (ROUTER_SOLICITATION & 31));
    // SAFETY: setsockopt reads `filter`, a plain array of the size passed.
    let rc = unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::IPPROTO_ICMPV6,
            ICMP6_FILTER,
            filter.as_ptr().cast(),
            std::mem::size_of_val(&filter) as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    s.bind_device(Some(interface.as_bytes()))?;
    s.set_multicast_hops_v6(255)?;
    s.set_unicast_hops_v6(255)?;
    s.set_multicast_loop_v6(false)?;
    s.set_multicast_if_v6(ifindex)?;
    s.join_multicast_v6(&ALL_ROUTERS, ifindex)?;
    s.set_recv_buffer_size(64 << 10)?;
    s.set_nonblocking(true)?;
    // SAFETY: the AsyncFd owns the socket, so the fd stays open while registered.
    let socket = unsafe { AsyncFd::register(s)? };
    Ok(RaSocket { socket, ifindex })
}

impl RaSocket {
    fn send(&self, message: &[u8]) {
        let to = SocketAddrV6::new(ALL_NODES, 0, 0, self.ifindex);
        if let Err(e) = self.socket.get_ref().send_to(message, &to.into()) {
            // The link-local address may still be tentative just after start.
            tracing::debug!(error = %e, "router advertisement not sent");
        }
    }

    /// Reads waiting datagrams; true when one is a Router Solicitation.
    fn solicited(&self) -> bool {
        let mut buf = [std::mem::MaybeUninit::<u8>::uninit(); 512];
        let mut any = false;
        while let Ok((n, _)) = self.socket.get_ref().recv_from(&mut buf) {
            // SAFETY: recv_from initialised the first `n` bytes.
            let first = (n >= 8).then(|| unsafe { buf[0].assume_init() });
            any |= first == Some(ROUTER_SOLICITATION);
        }
        any
    }
}

/// Sends `advert` on `socket` until the task is dropped.
pub async fn advertise(socket: RaSocket, advert: Advert) {
    let message = advert.message();
    let mut sent: u32 = 0;
    let mut last: Option<Instant> = None;
    let mut due = Instant::now();
    loop {
        tokio::select! {
            () = tokio::time::sleep_until(due) => {
                socket.send(&message);
                sent = sent.saturating_add(1);
                let now = Instant::now();
                last = Some(now);
                let every = if sent < INITIAL_ADVERTISEMENTS { INITIAL_INTERVAL } else { INTERVAL };
                due = now + every;
            }
            ready = socket.socket.readable() => {
                let Ok(mut guard) = ready else {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                };
                let solicited = socket.solicited();
                guard.clear_ready();
                if solicited {
                    // Answer soon, but never closer than MIN_DELAY to the last one.
                    let soonest = last.map_or_else(Instant::now, |l| l + MIN_DELAY).max(Instant::now());
                    due = due.min(soonest);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_message_carries_the_flags_the_prefix_and_the_mac() {
        let a = Advert {
            managed: true,
            other: false,
            prefix: "fd77::100".parse().unwrap(),
            prefix_len: 64,
            autonomous: false,
            mac: MacAddr([2, 0, 0, 0, 0, 1]),
        };
        let m = a.message();
        assert_eq!(m.len(), 16 + 8 + 32);
        assert_eq!((m[0], m[5], &m[6..8]), (134, 0x80, &[0u8, 0][..]));
        assert_eq!(&m[16..24], &[1, 1, 2, 0, 0, 0, 0, 1]);
        assert_eq!((m[24], m[25], m[26], m[27]), (3, 4, 64, 0x80));
        let prefix: [u8; 16] = m[40..56].try_into().unwrap();
        assert_eq!(
            Ipv6Addr::from(prefix),
            "fd77::".parse::<Ipv6Addr>().unwrap()
        );
        let proxy = Advert {
            managed: false,
            other: true,
            autonomous: true,
            ..a
        };
        let m = proxy.message();
        assert_eq!((m[5], m[27]), (0x40, 0xc0));
    }
}
