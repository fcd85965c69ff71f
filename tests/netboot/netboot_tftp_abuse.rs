//! bmo's TFTP server against hostile clients (issue 36): sessions held by
//! acknowledging only the first block, stale-ACK floods, repeated options and
//! spoofed requests that never acknowledge anything. Server and clients in their own
//! network namespaces.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bmo::netboot::leases::LeaseTable;
use tokio::net::UdpSocket;

use crate::support::netboot::{TempDir, TestNet, config, require, write_random};

const SERVER: &str = "10.77.0.1:69";

/// A read request for `file` with `options` (name, value).
pub(crate) fn rrq(file: &str, options: &[(&str, &str)]) -> Vec<u8> {
    let mut b = vec![0, 1];
    let mut parts = vec![file, "octet"];
    for (k, v) in options {
        parts.extend([*k, *v]);
    }
    for part in parts {
        b.extend_from_slice(part.as_bytes());
        b.push(0);
    }
    b
}

fn ack(block: u16) -> [u8; 4] {
    let b = block.to_be_bytes();
    [0, 4, b[0], b[1]]
}

fn opcode(pkt: &[u8]) -> u16 {
    pkt.get(..2).map_or(0, |b| u16::from_be_bytes([b[0], b[1]]))
}

fn block(pkt: &[u8]) -> u16 {
    pkt.get(2..4)
        .map_or(0, |b| u16::from_be_bytes([b[0], b[1]]))
}

/// Starts bmo's TFTP in the server namespace, with 4 MiB files at
/// `images/ramdisk.img` and `r`, and runs `body` in the client namespace, which also has
/// the addresses 10.77.0.3 to 10.77.0.`2 + extra`.
fn with_server<F, Fut>(extra: u8, body: F)
where
    F: FnOnce(String) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()>,
{
    require(&["tftp", "ip"]);
    let net = TestNet::new(true);
    if extra > 0 {
        net.add_client_addresses(3..=2 + extra);
    }
    let dir = TempDir::new("tftp-abuse");
    let mut cfg = config(dir.path());
    cfg.tftp = true;
    write_random(&cfg.images_dir.join("ramdisk.img"), 4 << 20, 5);
    // A short name: the smallest requests, the largest answer for their size.
    write_random(&cfg.tftp_root.join("r"), 4 << 20, 6);
    let client = net.client.handle();
    let client_name = net.client.name.clone();
    net.server.block_on(move || async move {
        let nb = bmo::netboot::start(&cfg, LeaseTable::in_memory())
            .await
            .expect("start");
        tokio::task::spawn_blocking(move || client.block_on(move || body(client_name)))
            .await
            .expect("client");
        drop(nb);
        drop(dir);
    });
}

/// Everything that arrives on `sock` within `quiet` of the previous packet.
async fn drain(sock: &UdpSocket, quiet: Duration) -> Vec<Vec<u8>> {
    let mut got = Vec::new();
    let mut buf = vec![0u8; 65536];
    while let Ok(Ok((n, _))) = tokio::time::timeout(quiet, sock.recv_from(&mut buf)).await {
        got.push(buf[..n].to_vec());
    }
    got
}

/// One holder of the probe's pattern: asks for the file, acknowledges the OACK and
/// the first block, then answers every later packet with a stale ACK of block 1, and
/// asks again as soon as a session ends or is refused.
async fn hold(source: String, stop: Arc<AtomicBool>, held: Arc<AtomicUsize>) {
    let request = rrq("images/ramdisk.img", &[("blksize", "512")]);
    let mut buf = vec![0u8; 2048];
    while !stop.load(Ordering::Relaxed) {
        let Ok(sock) = UdpSocket::bind(format!("{source}:0")).await else {
            return;
        };
        let _ = sock.send_to(&request, SERVER).await;
        let mut got_first = false;
        loop {
            let Ok(Ok((n, from))) =
                tokio::time::timeout(Duration::from_millis(500), sock.recv_from(&mut buf)).await
            else {
                break;
            };
            match (opcode(&buf[..n]), block(&buf[..n])) {
                (6, _) => {
                    let _ = sock.send_to(&ack(0), from).await;
                }
                (3, 1) if !got_first => {
                    got_first = true;
                    held.fetch_add(1, Ordering::Relaxed);
                    let _ = sock.send_to(&ack(1), from).await;
                }
                (3, _) => {
                    let _ = sock.send_to(&ack(1), from).await;
                }
                _ => break,
            }
            if stop.load(Ordering::Relaxed) {
                return;
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[test]
fn sessions_held_from_sixteen_addresses_leave_room_for_a_real_client() {
    let _shared = crate::support::shared();
    with_server(16, |client_ns| async move {
        let stop = Arc::new(AtomicBool::new(false));
        let held = Arc::new(AtomicUsize::new(0));
        let mut holders = Vec::new();
        for n in 3..=18 {
            for _ in 0..4 {
                let source = format!("10.77.0.{n}");
                holders.push(tokio::spawn(hold(source, stop.clone(), held.clone())));
            }
        }
        // Let the holders take what they can.
        let deadline = Instant::now() + Duration::from_secs(10);
        while held.load(Ordering::Relaxed) < 32 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        // The pattern is in place (2 per address), else the real client proves nothing.
        let taken = held.load(Ordering::Relaxed);
        assert!(taken >= 32, "the holders took {taken} sessions");
        let got = std::env::temp_dir().join(format!("bmo-tftp-held-{}", std::process::id()));
        let started = Instant::now();
        let out = tokio::process::Command::new("ip")
            .args([
                "netns", "exec", &client_ns, "timeout", "5", "tftp", "-m", "binary",
            ])
            .args(["10.77.0.1", "-c", "get", "images/ramdisk.img"])
            .arg(&got)
            .output()
            .await
            .expect("tftp-hpa");
        let took = started.elapsed();
        stop.store(true, Ordering::Relaxed);
        let size = std::fs::metadata(&got).map(|m| m.len()).unwrap_or(0);
        let _ = std::fs::remove_file(&got);
        println!(
            "hold pattern (16 addresses x 4 requests, {} sessions taken): a real client got {size} bytes in {took:?}",
            held.load(Ordering::Relaxed)
        );
        assert!(
            out.status.success() && size == 4 << 20,
            "tftp-hpa under the hold pattern: {size} bytes, {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(took < Duration::from_secs(5), "served in {took:?}");
        for h in holders {
            let _ = h.await;
        }
    });
}

#[test]
fn a_session_without_progress_ends_within_30_s() {
    let _shared = crate::support::shared();
    with_server(0, |_| async move {
        let sock = UdpSocket::bind("10.77.0.2:0").await.expect("bind");
        // A long timeout asked for, which would stretch every retry.
        let request = rrq("images/ramdisk.img", &[("timeout", "255"), ("tsize", "0")]);
        sock.send_to(&request, SERVER).await.expect("send");
        let mut buf = vec![0u8; 2048];
        let wait = Duration::from_secs(3);
        let (n, from) = tokio::time::timeout(wait, sock.recv_from(&mut buf))
            .await
            .expect("OACK in time")
            .expect("OACK");
        assert_eq!(opcode(&buf[..n]), 6, "OACK");
        // Connected: once the session's socket is gone, the next receive says so.
        sock.connect(from).await.expect("connect");
        sock.send(&ack(0)).await.expect("ack 0");
        let n = tokio::time::timeout(wait, sock.recv(&mut buf))
            .await
            .expect("block 1 in time")
            .expect("block 1");
        assert_eq!((opcode(&buf[..n]), block(&buf[..n])), (3, 1));
        sock.send(&ack(1)).await.expect("ack 1");
        let progress = Instant::now();
        // A stale ACK every 900 ms, each before the server's retry timer runs out.
        while progress.elapsed() < Duration::from_secs(40) {
            let gone =
                match tokio::time::timeout(Duration::from_millis(900), sock.recv(&mut buf)).await {
                    Ok(Err(e)) => e.kind() == std::io::ErrorKind::ConnectionRefused,
                    Ok(Ok(_)) | Err(_) => false,
                };
            if gone || sock.send(&ack(1)).await.is_err() {
                break;
            }
        }
        let held = progress.elapsed();
        println!("a session fed a stale ACK every 900 ms ended {held:?} after its last progress");
        assert!(held <= Duration::from_secs(30), "held for {held:?}");
    });
}

/// Bytes in and out of one stale-ACK flood session: the client asks for a window of
/// 16 blocks of 1,468 bytes, acknowledges the OACK, then answers with ACKs of block
/// 0 (before the window) every millisecond until the server stops.
async fn stale_ack_session() -> (usize, usize) {
    let sock = UdpSocket::bind("10.77.0.2:0").await.expect("bind");
    let request = rrq(
        "images/ramdisk.img",
        &[("blksize", "1468"), ("windowsize", "16"), ("tsize", "0")],
    );
    sock.send_to(&request, SERVER).await.expect("send");
    let (mut sent, mut received) = (request.len(), 0);
    let mut buf = vec![0u8; 65536];
    let mut server = None;
    let mut quiet_since = Instant::now();
    let started = Instant::now();
    while quiet_since.elapsed() < Duration::from_secs(2)
        && started.elapsed() < Duration::from_secs(10)
    {
        match tokio::time::timeout(Duration::from_millis(1), sock.recv_from(&mut buf)).await {
            Ok(Ok((n, from))) => {
                received += n;
                quiet_since = Instant::now();
                match opcode(&buf[..n]) {
                    6 => {
                        server = Some(from);
                        sent += 4;
                        let _ = sock.send_to(&ack(0), from).await;
                    }
                    5 => break,
                    _ => {}
                }
            }
            Ok(Err(_)) => break,
            Err(_) => {
                if let Some(from) = server {
                    sent += 4;
                    let _ = sock.send_to(&ack(0), from).await;
                }
            }
        }
    }
    (sent, received)
}

#[test]
fn a_stale_ack_flood_brings_back_at_most_two_windows_a_session() {
    let _shared = crate::support::shared();
    with_server(0, |_| async move {
        let (mut sent, mut received) = (0, 0);
        for _ in 0..3 {
            let (s, r) = stale_ack_session().await;
            // OACK, the window, and the window once more for the first stale ACK.
            let window = 16 * (4 + 1468);
            assert!(r <= 2 * window + 64, "{r} bytes out for one session");
            sent += s;
            received += r;
        }
        let ratio = received as f64 / sent as f64;
        println!(
            "stale-ACK flood: {sent} bytes in, {received} bytes out over 3 sessions: amplification {ratio:.1}"
        );
        assert!(ratio < 100.0, "amplification {ratio:.1}");
    });
}

#[test]
fn before_the_first_ack_bmo_sends_at_most_three_times_the_request() {
    let _shared = crate::support::shared();
    with_server(0, |_| async move {
        let requests = [
            rrq("r", &[("tsize", "0")]),
            rrq("r", &[("blksize", "8"), ("windowsize", "64")]),
            rrq("r", &[("tsize", "0"), ("timeout", "1")]),
            rrq("r", &[("tsize", "0"), ("tsize", "0"), ("tsize", "0")]),
            rrq("r", &[("tsize", "0"), ("TSIZE", "1")]),
            rrq("missing", &[("tsize", "0")]),
            rrq("../../etc/passwd", &[("tsize", "0")]),
        ];
        for request in requests {
            let sock = UdpSocket::bind("10.77.0.2:0").await.expect("bind");
            sock.send_to(&request, SERVER).await.expect("send");
            let got = drain(&sock, Duration::from_secs(3)).await;
            let bytes: usize = got.iter().map(Vec::len).sum();
            assert!(!got.is_empty(), "no answer to {request:?}");
            assert!(
                bytes <= 3 * request.len(),
                "{bytes} bytes in {} packets for a {}-byte request {request:?}",
                got.len(),
                request.len()
            );
        }
    });
}

#[test]
fn repeated_options_are_refused_with_an_error() {
    let _shared = crate::support::shared();
    with_server(0, |_| async move {
        let sock = UdpSocket::bind("10.77.0.2:0").await.expect("bind");
        let request = rrq(
            "images/ramdisk.img",
            &[("blksize", "512"), ("blksize", "1468")],
        );
        sock.send_to(&request, SERVER).await.expect("send");
        let got = drain(&sock, Duration::from_secs(2)).await;
        assert_eq!(got.len(), 1, "{got:?}");
        assert_eq!((opcode(&got[0]), block(&got[0])), (5, 8), "{got:?}");
    });
}

#[test]
fn a_request_without_an_oack_gets_its_first_block_once() {
    let _shared = crate::support::shared();
    with_server(0, |_| async move {
        // An option bmo does not know, and one it refuses: answered as RFC 1350 asks.
        // A long one makes a request whose 3x budget holds the first block: the block
        // is still sent once, not again for free when the budget runs short.
        let long = "p".repeat(180);
        for options in [[("foo", "1")], [("blksize", "4")], [("foo", long.as_str())]] {
            let sock = UdpSocket::bind("10.77.0.2:0").await.expect("bind");
            sock.send_to(&rrq("r", &options), SERVER)
                .await
                .expect("send");
            let got = drain(&sock, Duration::from_secs(3)).await;
            let blocks: Vec<(u16, u16, usize)> =
                got.iter().map(|p| (opcode(p), block(p), p.len())).collect();
            assert_eq!(blocks, [(3, 1, 516)], "{options:?}");
        }
    });
}
