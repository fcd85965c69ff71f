//! A packet watch on the lab's bridge: every frame `br0` carries (from the VMs' taps
//! and from the namespace's own stack, bmo included) is read from a raw `AF_PACKET`
//! socket inside the lab's namespace and sorted: DHCP and DHCPv6 replies (UDP from
//! port 67 or 547), DHCP and DHCPv6 requests (UDP to port 67 or 547), and frames
//! from a given MAC. A test proves with it that nothing answered DHCP while its VM
//! was busy on the network (the frames from the VM show the watch saw it).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use crate::support::netboot::NsRef;

const ETH_P_ALL: u16 = 0x0003;
const ETH_P_IP: u16 = 0x0800;
const ETH_P_IPV6: u16 = 0x86dd;
const UDP: u8 = 17;

#[derive(Debug, Default, Clone)]
pub struct Seen {
    /// Each DHCP or DHCPv6 reply: "source MAC, UDP ports, message type".
    pub replies: Vec<String>,
    /// Each DHCP or DHCPv6 request, the same way.
    pub requests: Vec<String>,
    /// Frames whose source is the watched MAC.
    pub from_mac: u64,
    pub frames: u64,
}

pub struct DhcpWatch {
    stop: Arc<AtomicBool>,
    seen: Arc<Mutex<Seen>>,
    thread: Option<JoinHandle<()>>,
}

impl DhcpWatch {
    /// Starts watching `iface` inside `ns`; counts the frames whose source is `mac`.
    pub fn start(ns: NsRef, iface: &str, mac: &str) -> DhcpWatch {
        let mac = parse_mac(mac);
        let stop = Arc::new(AtomicBool::new(false));
        let seen = Arc::new(Mutex::new(Seen::default()));
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let iface = iface.to_owned();
        let thread = {
            let (stop, seen) = (stop.clone(), seen.clone());
            std::thread::spawn(move || {
                ns.enter();
                let fd = packet_socket(&iface);
                ready_tx.send(()).expect("signal the watch is ready");
                let mut buf = vec![0u8; 65536];
                while !stop.load(Ordering::Relaxed) {
                    // SAFETY: reads into a buffer of the length given, from our socket.
                    let n = unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), 0) };
                    if n <= 0 {
                        continue; // the receive timeout: look at `stop` again
                    }
                    let frame = &buf[..n as usize];
                    let mut seen = seen.lock().expect("watch state");
                    seen.frames += 1;
                    if frame.len() >= 12 && frame[6..12] == mac {
                        seen.from_mac += 1;
                    }
                    if let Some((reply, what)) = classify(frame) {
                        if reply {
                            seen.replies.push(what);
                        } else {
                            seen.requests.push(what);
                        }
                    }
                }
                // SAFETY: our own descriptor, closed once.
                unsafe { libc::close(fd) };
            })
        };
        ready_rx.recv().expect("the watch started");
        DhcpWatch {
            stop,
            seen,
            thread: Some(thread),
        }
    }

    pub fn seen(&self) -> Seen {
        self.seen.lock().expect("watch state").clone()
    }
}

impl Drop for DhcpWatch {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A raw socket bound to `iface` that receives every frame on it, in and out, with a
/// receive timeout of 200 ms.
fn packet_socket(iface: &str) -> libc::c_int {
    let name = std::ffi::CString::new(iface).expect("interface name");
    // SAFETY: plain libc calls on values we own; each result is checked.
    unsafe {
        let fd = libc::socket(
            libc::AF_PACKET,
            libc::SOCK_RAW,
            libc::c_int::from(ETH_P_ALL.to_be()),
        );
        assert!(
            fd >= 0,
            "AF_PACKET socket: {}",
            std::io::Error::last_os_error()
        );
        let index = libc::if_nametoindex(name.as_ptr());
        assert!(index > 0, "no interface {iface}");
        let mut addr: libc::sockaddr_ll = std::mem::zeroed();
        addr.sll_family = libc::AF_PACKET as u16;
        addr.sll_protocol = ETH_P_ALL.to_be();
        addr.sll_ifindex = index as i32;
        let rc = libc::bind(
            fd,
            std::ptr::addr_of!(addr).cast(),
            std::mem::size_of::<libc::sockaddr_ll>() as u32,
        );
        assert_eq!(
            rc,
            0,
            "bind to {iface}: {}",
            std::io::Error::last_os_error()
        );
        let timeout = libc::timeval {
            tv_sec: 0,
            tv_usec: 200_000,
        };
        let rc = libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_RCVTIMEO,
            std::ptr::addr_of!(timeout).cast(),
            std::mem::size_of::<libc::timeval>() as u32,
        );
        assert_eq!(rc, 0, "SO_RCVTIMEO: {}", std::io::Error::last_os_error());
        fd
    }
}

/// `Some((is_reply, description))` for a DHCP or DHCPv6 message in an Ethernet frame.
fn classify(frame: &[u8]) -> Option<(bool, String)> {
    let ethertype = u16::from_be_bytes([*frame.get(12)?, *frame.get(13)?]);
    let ip = frame.get(14..)?;
    let udp = match ethertype {
        ETH_P_IP if ip.first()? >> 4 == 4 && *ip.get(9)? == UDP => {
            ip.get(usize::from(ip[0] & 0x0f) * 4..)?
        }
        // Only a UDP header right after the fixed one: DHCPv6 carries no extensions.
        ETH_P_IPV6 if *ip.get(6)? == UDP => ip.get(40..)?,
        _ => return None,
    };
    let src = u16::from_be_bytes([*udp.first()?, *udp.get(1)?]);
    let dst = u16::from_be_bytes([*udp.get(2)?, *udp.get(3)?]);
    let payload = udp.get(8..)?;
    let source = frame[6..12]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":");
    let kind = match (src, dst) {
        (67, 68) | (67, 67) | (68, 67) => dhcp4_type(payload),
        (547, _) | (_, 547) => format!("DHCPv6 type {}", payload.first().copied().unwrap_or(0)),
        _ => return None,
    };
    let reply = src == 67 || src == 547;
    Some((reply, format!("{source} {src}->{dst} {kind}")))
}

/// DHCP's message type (option 53) by name.
fn dhcp4_type(bootp: &[u8]) -> String {
    let mut options = bootp.get(240..).unwrap_or_default();
    while let [code, rest @ ..] = options {
        match code {
            0 => options = rest,
            255 => break,
            _ => {
                let Some((&len, rest)) = rest.split_first() else {
                    break;
                };
                let (value, rest) = rest.split_at(usize::from(len).min(rest.len()));
                if *code == 53 {
                    let name = match value.first() {
                        Some(1) => "DISCOVER",
                        Some(2) => "OFFER",
                        Some(3) => "REQUEST",
                        Some(5) => "ACK",
                        Some(6) => "NAK",
                        _ => "other",
                    };
                    return format!("DHCP {name}");
                }
                options = rest;
            }
        }
    }
    "BOOTP".to_owned()
}

fn parse_mac(mac: &str) -> [u8; 6] {
    let bytes: Vec<u8> = mac
        .split(':')
        .map(|b| u8::from_str_radix(b, 16).expect("a MAC"))
        .collect();
    bytes.try_into().expect("six bytes in a MAC")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An Ethernet + IPv4 + UDP frame from `src` to `dst` port with `payload`.
    fn frame(src: u16, dst: u16, payload: &[u8]) -> Vec<u8> {
        let mut f = vec![0xff; 6];
        f.extend([0x52, 0x54, 0, 0x7e, 0, 9]);
        f.extend(ETH_P_IP.to_be_bytes());
        let mut ip = vec![0x45, 0, 0, 0, 0, 0, 0, 0, 64, UDP];
        ip.resize(20, 0);
        f.extend(ip);
        f.extend(src.to_be_bytes());
        f.extend(dst.to_be_bytes());
        f.extend([0, 0, 0, 0]);
        f.extend(payload);
        f
    }

    fn bootp(message_type: u8) -> Vec<u8> {
        let mut p = vec![0u8; 236];
        p.extend([99, 130, 83, 99, 53, 1, message_type, 255]);
        p
    }

    #[test]
    fn an_offer_is_a_reply_and_a_discover_a_request() {
        let _shared = crate::support::shared();
        let (reply, what) = classify(&frame(67, 68, &bootp(2))).unwrap();
        assert!(reply);
        assert_eq!(what, "52:54:00:7e:00:09 67->68 DHCP OFFER");
        let (reply, what) = classify(&frame(68, 67, &bootp(1))).unwrap();
        assert!(!reply);
        assert!(what.ends_with("DHCP DISCOVER"), "{what}");
        assert!(classify(&frame(1234, 80, b"GET /")).is_none());
    }
}
