//! Listening sockets of the TFTP and HTTP boot servers. The unspecified IPv6
//! address (`::`, the default) listens dual-stack: IPv6 clients and IPv4 ones (as
//! v4-mapped addresses), whatever `net.ipv6.bindv6only` says. On a host without
//! IPv6 it falls back to `0.0.0.0`.

use std::io;
use std::net::{Ipv4Addr, SocketAddr};

use socket2::{Domain, Protocol, Socket, Type};

/// Opens a socket of `ty` bound to `addr`, dual-stack when `addr` is `[::]`.
fn open(addr: SocketAddr, ty: Type, protocol: Protocol) -> io::Result<Socket> {
    let socket = match Socket::new(Domain::for_address(addr), ty, Some(protocol)) {
        Err(e) if addr.ip().is_unspecified() && addr.is_ipv6() => {
            tracing::info!(error = %e, "no IPv6 on this host; listening on IPv4 only");
            return open(
                SocketAddr::new(Ipv4Addr::UNSPECIFIED.into(), addr.port()),
                ty,
                protocol,
            );
        }
        other => other?,
    };
    if addr.is_ipv6() {
        socket.set_only_v6(!addr.ip().is_unspecified())?;
    }
    if ty == Type::STREAM {
        socket.set_reuse_address(true)?;
    }
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    Ok(socket)
}

/// A TCP listener on `addr` (dual-stack for `[::]`).
pub fn tcp_listener(addr: SocketAddr) -> io::Result<tokio::net::TcpListener> {
    let socket = open(addr, Type::STREAM, Protocol::TCP)?;
    socket.listen(1024)?;
    tokio::net::TcpListener::from_std(socket.into())
}

/// A UDP socket on `addr` (dual-stack for `[::]`).
pub fn udp_socket(addr: SocketAddr) -> io::Result<tokio::net::UdpSocket> {
    tokio::net::UdpSocket::from_std(open(addr, Type::DGRAM, Protocol::UDP)?.into())
}

/// `peer` with a v4-mapped IPv6 address turned back into IPv4.
pub fn canonical(peer: SocketAddr) -> SocketAddr {
    SocketAddr::new(peer.ip().to_canonical(), peer.port())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_unspecified_v6_address_takes_v4_and_v6_clients() {
        let l = tcp_listener("[::]:0".parse().unwrap()).unwrap();
        let port = l.local_addr().unwrap().port();
        for client in ["127.0.0.1", "::1"] {
            let addr = SocketAddr::new(client.parse().unwrap(), port);
            let _c = tokio::net::TcpStream::connect(addr).await.unwrap();
            let (_, peer) = l.accept().await.unwrap();
            assert_eq!(canonical(peer).ip(), addr.ip());
        }
        let u = udp_socket("[::]:0".parse().unwrap()).unwrap();
        let port = u.local_addr().unwrap().port();
        let c = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        c.send_to(b"x", ("127.0.0.1", port)).unwrap();
        let mut buf = [0u8; 4];
        let (_, peer) = u.recv_from(&mut buf).await.unwrap();
        assert_eq!(canonical(peer).ip().to_string(), "127.0.0.1");
        u.send_to(b"y", canonical(peer)).await.unwrap();
        assert_eq!(c.recv(&mut buf).unwrap(), 1);
    }
}
