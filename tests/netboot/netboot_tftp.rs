//! bmo's TFTP server against tftp-hpa, curl and atftp, server and clients in their
//! own network namespaces: the embedded iPXE loaders and a 64 MiB ramdisk byte for
//! byte, with and without blksize, windowsize (RFC 7440) with atftp, path traversal
//! and writes refused.

use std::path::Path;
use std::process::Output;

use bmo::netboot::leases::LeaseTable;

use crate::support::netboot::{TempDir, TestNet, config, require, write_random};

async fn in_client(ns: &str, program: &str, args: &[&str]) -> Output {
    tokio::process::Command::new("ip")
        .args(["netns", "exec", ns, program])
        .args(args)
        .output()
        .await
        .expect("run TFTP client")
}

fn assert_same(got: &Path, want: &Path) {
    let (g, w) = (
        std::fs::read(got).unwrap_or_default(),
        std::fs::read(want).expect("want"),
    );
    assert!(
        g.len() == w.len() && g == w,
        "{} ({} bytes) differs from {} ({} bytes)",
        got.display(),
        g.len(),
        want.display(),
        w.len()
    );
}

fn ok(out: &Output, what: &str) {
    assert!(
        out.status.success(),
        "{what} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Starts bmo's TFTP (and HTTP) in the server namespace and runs `body` there.
fn with_server<F, Fut>(files: impl FnOnce(&bmo::netboot::config::NetbootConfig), body: F)
where
    F: FnOnce(String, TempDir) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()>,
{
    require(&["tftp", "curl", "atftp", "ip"]);
    let net = TestNet::new(true);
    let dir = TempDir::new("tftp");
    let mut cfg = config(dir.path());
    cfg.tftp = true;
    files(&cfg);
    let client = net.client.name.clone();
    net.server.block_on(move || async move {
        let nb = bmo::netboot::start(&cfg, LeaseTable::in_memory())
            .await
            .expect("start");
        body(client, dir).await;
        drop(nb);
    });
}

#[test]
fn tftp_serves_each_loader_to_tftp_hpa_and_curl() {
    let _shared = crate::support::shared();
    with_server(
        |_| {},
        |client, dir| async move {
            for (name, debian) in [
                ("undionly.kpxe", "undionly.kpxe"),
                ("snponly-x86_64.efi", "snponly.efi"),
                ("ipxe-x86_64.efi", "ipxe.efi"),
            ] {
                let want = Path::new("/usr/lib/ipxe").join(debian);
                let out_hpa = dir.path().join(format!("hpa-{name}"));
                let o = in_client(
                    &client,
                    "tftp",
                    &[
                        "-m",
                        "binary",
                        "10.77.0.1",
                        "-c",
                        "get",
                        name,
                        out_hpa.to_str().unwrap(),
                    ],
                )
                .await;
                ok(&o, "tftp-hpa get");
                assert_same(&out_hpa, &want);
                for blksize in [None, Some("1468")] {
                    let out = dir.path().join(format!("curl-{name}-{blksize:?}"));
                    let mut args = vec!["-sS", "--max-time", "60", "-o", out.to_str().unwrap()];
                    if let Some(b) = blksize {
                        args.extend(["--tftp-blksize", b]);
                    }
                    let url = format!("tftp://10.77.0.1/{name}");
                    args.push(&url);
                    let o = in_client(&client, "curl", &args).await;
                    ok(&o, "curl tftp");
                    assert_same(&out, &want);
                }
            }
        },
    );
}

#[test]
fn tftp_streams_a_64_mib_ramdisk_with_every_client_and_option() {
    let _shared = crate::support::shared();
    let size = 64 << 20;
    with_server(
        |cfg| write_random(&cfg.images_dir.join("ramdisk.img"), size, 64),
        move |client, dir| async move {
            let want = dir.path().join("images/ramdisk.img");
            // tftp-hpa: 512-byte blocks, so the block number rolls over twice.
            let got = dir.path().join("hpa.img");
            let o = in_client(
                &client,
                "tftp",
                &[
                    "-m",
                    "binary",
                    "10.77.0.1",
                    "-c",
                    "get",
                    "images/ramdisk.img",
                    got.to_str().unwrap(),
                ],
            )
            .await;
            ok(&o, "tftp-hpa get 64 MiB");
            assert_same(&got, &want);
            std::fs::remove_file(&got).unwrap();

            // curl with blksize (RFC 2348) and tsize.
            let got = dir.path().join("curl.img");
            let o = in_client(
                &client,
                "curl",
                &[
                    "-sS",
                    "--max-time",
                    "120",
                    "--tftp-blksize",
                    "1468",
                    "-o",
                    got.to_str().unwrap(),
                    "tftp://10.77.0.1/images/ramdisk.img",
                ],
            )
            .await;
            ok(&o, "curl 64 MiB blksize 1468");
            assert_same(&got, &want);
            std::fs::remove_file(&got).unwrap();

            // atftp offering blksize, tsize and windowsize (RFC 7440): the server
            // must acknowledge the window, so the client ACKs once per 16 blocks.
            let got = dir.path().join("atftp.img");
            let o = in_client(
                &client,
                "atftp",
                &[
                    "--option",
                    "blksize 1468",
                    "--option",
                    "windowsize 16",
                    "--option",
                    "tsize 0",
                    "--trace",
                    "-g",
                    "-r",
                    "images/ramdisk.img",
                    "-l",
                    got.to_str().unwrap(),
                    "10.77.0.1",
                ],
            )
            .await;
            ok(&o, "atftp 64 MiB windowsize 16");
            assert_same(&got, &want);
            let trace = format!(
                "{}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            );
            assert!(
                trace.contains("windowsize") && trace.contains("OACK"),
                "no windowsize in the OACK:\n{}",
                &trace[..trace.len().min(2000)]
            );
            let acks = trace.lines().filter(|l| l.contains("sent ACK")).count();
            let blocks = size.div_ceil(1468);
            assert!(
                acks > 0 && acks < blocks / 8,
                "{acks} ACKs for {blocks} blocks: window not used"
            );
        },
    );
}

#[test]
fn tftp_refuses_traversal_writes_and_missing_files() {
    let _shared = crate::support::shared();
    with_server(
        |cfg| {
            std::fs::write(cfg.tftp_root.join("pxelinux.0"), b"inside").unwrap();
            std::fs::write(cfg.tftp_root.parent().unwrap().join("secret"), b"outside").unwrap();
        },
        |client, dir| async move {
            let got = dir.path().join("in");
            let o = in_client(
                &client,
                "tftp",
                &[
                    "-m",
                    "binary",
                    "10.77.0.1",
                    "-c",
                    "get",
                    "pxelinux.0",
                    got.to_str().unwrap(),
                ],
            )
            .await;
            ok(&o, "tftp-hpa get from tftp_root");
            assert_eq!(std::fs::read(&got).unwrap(), b"inside");
            for path in ["../secret", "images/../../secret", "/../secret"] {
                let got = dir.path().join("out");
                let o = in_client(
                    &client,
                    "tftp",
                    &[
                        "-m",
                        "binary",
                        "10.77.0.1",
                        "-c",
                        "get",
                        path,
                        got.to_str().unwrap(),
                    ],
                )
                .await;
                let text = format!(
                    "{}{}",
                    String::from_utf8_lossy(&o.stdout),
                    String::from_utf8_lossy(&o.stderr)
                );
                assert!(
                    text.contains("Error code 2") && text.contains("outside"),
                    "{path}: {text}"
                );
                assert!(
                    std::fs::read(&got).map(|b| b.is_empty()).unwrap_or(true),
                    "{path}: content leaked"
                );
            }
            let o = in_client(
                &client,
                "tftp",
                &[
                    "-m",
                    "binary",
                    "10.77.0.1",
                    "-c",
                    "get",
                    "nope",
                    dir.path().join("n").to_str().unwrap(),
                ],
            )
            .await;
            let text = String::from_utf8_lossy(&o.stderr).into_owned()
                + &String::from_utf8_lossy(&o.stdout);
            assert!(text.contains("Error code 1"), "{text}");
            let o = in_client(
                &client,
                "tftp",
                &[
                    "-m",
                    "binary",
                    "10.77.0.1",
                    "-c",
                    "put",
                    got.to_str().unwrap(),
                    "new",
                ],
            )
            .await;
            let text = String::from_utf8_lossy(&o.stderr).into_owned()
                + &String::from_utf8_lossy(&o.stdout);
            assert!(
                text.contains("Error code 2") && text.contains("read-only"),
                "{text}"
            );
            assert!(!dir.path().join("tftpboot/new").exists());
        },
    );
}

/// Resident memory of this process (server and flooding client), in MiB.
fn rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

/// Heap memory this process has allocated and not yet freed, over every arena and
/// mapping, in MiB: what the server still holds, whatever the allocator keeps
/// resident for reuse.
fn heap_in_use_mib() -> f64 {
    // SAFETY: mallinfo2 takes no arguments; it only sums the allocator's counters.
    let info = unsafe { libc::mallinfo2() };
    (info.uordblks + info.hblkhd) as f64 / (1024.0 * 1024.0)
}

/// Sends `requests` read requests for `file` to `server` from 200 sockets (source
/// ports) over 30 addresses (`source_prefix` followed by 3 to 32). Each acknowledges
/// the OACK, so that the server reads the file and fills its largest window, and then
/// never acknowledges a block: the most memory a transfer holds. Returns how long
/// sending took and how many OACKs were acknowledged.
async fn flood_unacknowledged(
    server: &str,
    source_prefix: &str,
    file: &str,
    requests: usize,
) -> (std::time::Duration, usize) {
    let acked = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut sockets = Vec::new();
    for n in 0..200u16 {
        let address = format!("{source_prefix}{}:0", 3 + n % 30);
        let socket = std::sync::Arc::new(tokio::net::UdpSocket::bind(address).await.expect("bind"));
        let (s, acked) = (socket.clone(), acked.clone());
        tokio::spawn(async move {
            let mut buf = [0u8; 512];
            while let Ok((len, from)) = s.recv_from(&mut buf).await {
                if len >= 2 && buf[..2] == [0, 6] {
                    let _ = s.send_to(&[0, 4, 0, 0], from).await;
                    acked.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
            }
        });
        sockets.push(socket);
    }
    let packet = rrq(file);
    let started = std::time::Instant::now();
    for i in 0..requests {
        let _ = sockets[i % sockets.len()].send_to(&packet, server).await;
        if i % 2000 == 1999 {
            // ~10,000 requests per second; give the server's runtime a moment.
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        }
    }
    (
        started.elapsed(),
        acked.load(std::sync::atomic::Ordering::Relaxed),
    )
}

/// A read request for `file` asking for the largest blocks and window (the most
/// memory a transfer may hold).
fn rrq(file: &str) -> Vec<u8> {
    let options = [("blksize", "65464"), ("windowsize", "64"), ("tsize", "0")];
    crate::netboot_tftp_abuse::rrq(file, &options)
}

#[test]
fn a_flood_of_unacknowledged_read_requests_stays_bounded() {
    // Measures this process's memory: alone, even among this file's tests (the 64 MiB
    // transfer alone moves RSS by more than the bound).
    let _alone = crate::support::exclusive("netboot_tftp memory");
    require(&["tftp", "ip"]);
    const FLOODERS: u8 = 30;
    const REQUESTS: usize = 24_000;
    // At the peak 64 transfers hold a 512 KiB window each (32 MiB).
    const HEAP_LEFT_MIB: f64 = 4.0;
    let net = TestNet::new(true);
    net.add_client_addresses(3..=2 + FLOODERS);
    let dir = TempDir::new("tftp-flood");
    let mut cfg = config(dir.path());
    cfg.tftp = true;
    cfg.tftp_addr = "0.0.0.0:69".parse().unwrap();
    write_random(&cfg.images_dir.join("ramdisk.img"), 4 << 20, 3);
    let max_sessions = cfg.tftp_max_sessions as usize;
    let client = net.client.handle();
    let client_name = net.client.name.clone();
    net.server.block_on(move || async move {
        let nb = bmo::netboot::start(&cfg, LeaseTable::in_memory())
            .await
            .expect("start");
        let sessions = nb.tftp_sessions.clone().expect("TFTP on");
        let rss_before = rss_mib();
        let heap_before = heap_in_use_mib();
        let flood = tokio::task::spawn_blocking(move || {
            client.block_on(|| async move {
                flood_unacknowledged("10.77.0.1:69", "10.77.0.", "images/ramdisk.img", REQUESTS)
                    .await
            })
        });
        let mut peak_sessions = 0;
        let mut peak_rss = rss_before;
        let mut peak_heap = heap_before;
        while !flood.is_finished() {
            peak_sessions = peak_sessions.max(sessions.in_use());
            peak_rss = peak_rss.max(rss_mib());
            peak_heap = peak_heap.max(heap_in_use_mib());
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        let (took, oacks_acked) = flood.await.expect("flood");
        // Unacknowledged transfers give up within a few seconds.
        let drained = std::time::Instant::now();
        while sessions.in_use() > 0 && drained.elapsed() < std::time::Duration::from_secs(10) {
            peak_rss = peak_rss.max(rss_mib());
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        let drain_secs = drained.elapsed().as_secs_f64();
        // Every transfer's window is freed once the transfers are over; give the
        // last tasks a moment to end.
        let mut heap_after = heap_in_use_mib();
        for _ in 0..50 {
            if heap_after - heap_before < HEAP_LEFT_MIB {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            heap_after = heap_in_use_mib();
        }
        let rss_after = rss_mib();
        println!(
            "{REQUESTS} RRQs in {took:?}, {oacks_acked} OACKs acknowledged, no block ever: at most {peak_sessions} sessions (cap {max_sessions}), \
             all gone {drain_secs:.1} s after the flood; RSS {rss_before:.1} MiB before, {peak_rss:.1} MiB at peak, {rss_after:.1} MiB after; \
             heap in use {heap_before:.1} MiB before, {peak_heap:.1} MiB at peak, {heap_after:.1} MiB after"
        );
        assert!(peak_sessions <= max_sessions, "{peak_sessions} sessions");
        assert_eq!(sessions.in_use(), 0, "sessions left {drain_secs:.1} s after the flood");
        assert!(
            peak_rss - rss_before < 100.0,
            "RSS grew by {:.1} MiB",
            peak_rss - rss_before
        );
        // Asserted on the heap in use, not on RSS: here the server runs on a thread of
        // the test process, whose allocations may sit in a thread's own glibc arena,
        // and malloc_trim does not shrink such an arena's top, so RSS stays up by
        // 30 MiB or more (bmo itself runs with the main arena only, src/malloc.rs).
        assert!(
            peak_heap - heap_before > 4.0 * HEAP_LEFT_MIB,
            "the flood's windows show in the heap in use ({heap_before:.1} MiB before, {peak_heap:.1} MiB at peak)"
        );
        assert!(
            heap_after - heap_before < HEAP_LEFT_MIB,
            "{:.1} MiB of heap still in use after the flood",
            heap_after - heap_before
        );
        // A real client is served once the flood is over.
        let got = std::env::temp_dir().join(format!("bmo-tftp-after-flood-{}", std::process::id()));
        let o = in_client(
            &client_name,
            "tftp",
            &["-m", "binary", "10.77.0.1", "-c", "get", "images/ramdisk.img", got.to_str().unwrap()],
        )
        .await;
        ok(&o, "tftp-hpa get after the flood");
        assert_eq!(std::fs::metadata(&got).map(|m| m.len()).unwrap_or(0), 4 << 20);
        let _ = std::fs::remove_file(got);
        drop(nb);
    });
}
