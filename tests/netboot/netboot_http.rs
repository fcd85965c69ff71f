//! bmo's HTTP boot server against curl, server and client in their own network
//! namespaces: whole files, HEAD, ranges, conditional requests, the iPXE scripts,
//! the embedded loaders, the lease table, and refusal of paths outside the roots.

use std::process::Output;
use std::time::Duration;

use std::net::{Ipv4Addr, SocketAddr};
use std::time::Instant;

use bmo::netboot::http::LeasesAccess;
use bmo::netboot::leases::LeaseTable;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

use crate::support::netboot::{TempDir, TestNet, config, require, write_random};

async fn curl(ns: &str, args: &[&str]) -> Output {
    tokio::process::Command::new("ip")
        .args(["netns", "exec", ns, "curl", "-sS", "--max-time", "30"])
        .args(args)
        .output()
        .await
        .expect("run curl")
}

/// `(status, headers, body)` of one request.
async fn fetch(ns: &str, args: &[&str]) -> (u16, String, Vec<u8>) {
    let dir = TempDir::new("curl");
    let headers = dir.path().join("h");
    let mut all = vec!["-D", headers.to_str().unwrap(), "-o", "-"];
    all.extend_from_slice(args);
    let out = curl(ns, &all).await;
    assert!(
        out.status.success(),
        "curl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let h = std::fs::read_to_string(&headers).unwrap();
    let status = h.split_whitespace().nth(1).unwrap().parse().unwrap();
    (status, h.to_ascii_lowercase(), out.stdout)
}

fn header<'a>(headers: &'a str, name: &str) -> Option<&'a str> {
    headers
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{name}: ")).map(str::trim))
}

#[test]
fn http_serves_files_scripts_and_refuses_traversal() {
    let _shared = crate::support::shared();
    require(&["curl", "ip"]);
    let net = TestNet::new(true);
    let dir = TempDir::new("http");
    let cfg = config(dir.path());
    write_random(
        &cfg.images_dir.join("ironic-python-agent.initramfs"),
        8 << 20,
        7,
    );
    std::fs::write(dir.path().join("secret"), b"outside").unwrap();
    std::os::unix::fs::symlink(dir.path().join("secret"), cfg.images_dir.join("escape")).unwrap();
    std::fs::create_dir_all(cfg.http_root.join("pxelinux.cfg")).unwrap();
    std::fs::write(
        cfg.http_root.join("pxelinux.cfg/52-54-00-00-00-01"),
        b"#!ipxe\necho node\n",
    )
    .unwrap();
    let ramdisk = std::fs::read(cfg.images_dir.join("ironic-python-agent.initramfs")).unwrap();
    let client = net.client.name.clone();
    let server_ip = net.server_ip;
    let http_root = cfg.http_root.clone();

    net.server.block_on(move || async move {
        let nb = bmo::netboot::start(&cfg, LeaseTable::in_memory())
            .await
            .expect("start");
        let base = format!("http://{server_ip}:{}", nb.http_addr.unwrap().port());
        let url = |p: &str| format!("{base}{p}");

        // Whole file, byte for byte, with validators.
        let (status, h, body) =
            fetch(&client, &[&url("/images/ironic-python-agent.initramfs")]).await;
        assert_eq!(status, 200);
        assert!(body == ramdisk, "ramdisk differs");
        let etag = header(&h, "etag").expect("etag").to_owned();
        assert!(header(&h, "last-modified").is_some());
        assert_eq!(header(&h, "accept-ranges"), Some("bytes"));

        // HEAD: headers, no body.
        let (status, h, body) = fetch(
            &client,
            &["-I", &url("/images/ironic-python-agent.initramfs")],
        )
        .await;
        assert_eq!(status, 200);
        assert_eq!(header(&h, "content-length"), Some("8388608"));
        assert!(body.is_empty() || String::from_utf8_lossy(&body).starts_with("HTTP/"));

        // Ranges.
        let (status, h, body) = fetch(
            &client,
            &[
                "-r",
                "100-199",
                &url("/images/ironic-python-agent.initramfs"),
            ],
        )
        .await;
        assert_eq!(status, 206);
        assert_eq!(body, &ramdisk[100..200]);
        assert_eq!(header(&h, "content-range"), Some("bytes 100-199/8388608"));
        let (status, _, body) = fetch(
            &client,
            &["-r", "-10", &url("/images/ironic-python-agent.initramfs")],
        )
        .await;
        assert_eq!((status, &body[..]), (206, &ramdisk[ramdisk.len() - 10..]));
        let (status, h, _) = fetch(
            &client,
            &[
                "-r",
                "9000000-",
                &url("/images/ironic-python-agent.initramfs"),
            ],
        )
        .await;
        assert_eq!(status, 416);
        assert_eq!(header(&h, "content-range"), Some("bytes */8388608"));
        // A stale If-Range gets the whole file.
        let (status, _, body) = fetch(
            &client,
            &[
                "-r",
                "0-9",
                "-H",
                "If-Range: \"stale\"",
                &url("/images/ironic-python-agent.initramfs"),
            ],
        )
        .await;
        assert_eq!((status, body.len()), (200, ramdisk.len()));

        // Conditional requests.
        let inm = format!("If-None-Match: {etag}");
        let (status, _, body) = fetch(
            &client,
            &["-H", &inm, &url("/images/ironic-python-agent.initramfs")],
        )
        .await;
        assert_eq!((status, body.len()), (304, 0));

        // Traversal, raw and percent-encoded, and a symlink out of the root.
        for p in [
            "/images/../secret",
            "/images/%2e%2e/secret",
            "/../secret",
            "/images/escape",
        ] {
            let (status, _, body) = fetch(&client, &["--path-as-is", &url(p)]).await;
            assert_eq!(status, 403, "{p}: {}", String::from_utf8_lossy(&body));
        }
        let (status, _, _) = fetch(&client, &[&url("/images/missing")]).await;
        assert_eq!(status, 404);

        // iPXE scripts: bmo's boot.ipxe until Ironic writes one, the fallback
        // inspection script pointing at this server, Ironic's per-MAC configs.
        let (status, _, body) = fetch(&client, &[&url("/boot.ipxe")]).await;
        assert_eq!(status, 200);
        let text = String::from_utf8(body).unwrap();
        assert!(
            text.starts_with("#!ipxe")
                && text.contains("pxelinux.cfg/${net${idx}/mac:hexhyp}")
                && text.contains("inspector.ipxe"),
            "{text}"
        );
        std::fs::write(
            http_root.join("boot.ipxe"),
            b"#!ipxe\n# written by Ironic\n",
        )
        .unwrap();
        let (_, _, body) = fetch(&client, &[&url("/boot.ipxe")]).await;
        assert_eq!(body, b"#!ipxe\n# written by Ironic\n");
        let (_, _, body) = fetch(&client, &[&url("/inspector.ipxe")]).await;
        let text = String::from_utf8(body).unwrap();
        assert!(
            text.contains(&format!(
                "kernel --timeout 60000 {base}/images/ironic-python-agent.kernel"
            )),
            "{text}"
        );
        assert!(
            text.contains(&format!("{base}/images/ironic-python-agent.initramfs")),
            "{text}"
        );
        let (status, _, body) = fetch(&client, &[&url("/pxelinux.cfg/52-54-00-00-00-01")]).await;
        assert_eq!((status, &body[..]), (200, &b"#!ipxe\necho node\n"[..]));

        // Embedded loaders for UEFI HTTP boot.
        let (status, _, body) = fetch(&client, &[&url("/ipxe/undionly.kpxe")]).await;
        assert_eq!(status, 200);
        assert!(
            body == std::fs::read("/usr/lib/ipxe/undionly.kpxe").unwrap(),
            "undionly.kpxe differs from Debian's"
        );
        let (status, h, _) = fetch(&client, &["-I", &url("/ipxe/snponly-x86_64.efi")]).await;
        assert_eq!(status, 200);
        let len: u64 = header(&h, "content-length").unwrap().parse().unwrap();
        assert_eq!(
            len,
            std::fs::metadata("/usr/lib/ipxe/snponly.efi")
                .unwrap()
                .len()
        );

        // Health; the lease table is for this machine only by default.
        let (status, _, body) = fetch(&client, &[&url("/healthz")]).await;
        assert_eq!((status, &body[..]), (200, &b"ok"[..]));
        let (status, _, _) = fetch(&client, &[&url("/bmo/v1/leases")]).await;
        assert_eq!(status, 403);

        // Writes are not accepted.
        let (status, _, _) =
            fetch(&client, &["-X", "PUT", "--data", "x", &url("/images/new")]).await;
        assert_eq!(status, 405);
        drop(nb);
        tokio::time::sleep(Duration::from_millis(10)).await;
    });
}

#[test]
fn the_lease_table_is_read_only_and_served_as_configured() {
    let _shared = crate::support::shared();
    require(&["curl", "ip"]);
    let net = TestNet::new(true);
    let dir = TempDir::new("http-leases");
    let client = net.client.handle();
    let server = net.server.handle();
    let server_ip = net.server_ip;
    for (access, from_client, from_server) in [
        (LeasesAccess::All, 200, 200),
        (LeasesAccess::Localhost, 403, 200),
        (LeasesAccess::Off, 403, 403),
    ] {
        let mut cfg = config(dir.path());
        cfg.http_leases = access;
        let (client, server) = (client.clone(), server.clone());
        net.server.block_on(move || async move {
            let nb = bmo::netboot::start(&cfg, LeaseTable::in_memory())
                .await
                .expect("start");
            let port = nb.http_addr.unwrap().port();
            let remote = format!("http://{server_ip}:{port}/bmo/v1/leases");
            let local = format!("http://127.0.0.1:{port}/bmo/v1/leases");
            let (status, _, _) = fetch(&client.name, &[&remote]).await;
            assert_eq!(status, from_client, "{access:?} from the client");
            let (status, _, body) = fetch(&server.name, &[&local]).await;
            assert_eq!(status, from_server, "{access:?} from the server itself");
            if status == 200 {
                assert_eq!(
                    serde_json::from_slice::<serde_json::Value>(&body).unwrap(),
                    serde_json::json!([])
                );
            }
            // Read-only whatever the setting.
            for method in ["PUT", "POST", "DELETE"] {
                let (status, _, _) = fetch(&server.name, &["-X", method, &local]).await;
                assert_eq!(status, 405, "{method} {access:?}");
            }
            drop(nb);
        });
    }
}

/// A TCP connection from `src` (an address of the client namespace) to `dst`.
async fn connect_from(src: Ipv4Addr, dst: SocketAddr) -> TcpStream {
    let socket = TcpSocket::new_v4().expect("socket");
    socket
        .bind(SocketAddr::new(src.into(), 0))
        .expect("bind source address");
    socket.connect(dst).await.expect("connect")
}

/// What became of a connection that sent nothing.
#[derive(Debug, PartialEq, Eq)]
enum Fate {
    /// Still open, nothing received.
    Held,
    /// Answered 503 by the connection cap.
    Refused,
    /// Closed without a word.
    Closed,
}

fn fate(stream: &TcpStream) -> Fate {
    let mut buf = [0u8; 64];
    match stream.try_read(&mut buf) {
        Ok(0) => Fate::Closed,
        Ok(n) if buf[..n].starts_with(b"HTTP/1.1 503") => Fate::Refused,
        Ok(n) => panic!("unexpected answer {:?}", String::from_utf8_lossy(&buf[..n])),
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Fate::Held,
        Err(_) => Fate::Closed,
    }
}

/// Seconds until the server closes `stream`, reading whatever it sends.
async fn seconds_until_closed(mut stream: TcpStream) -> f64 {
    let start = Instant::now();
    let mut buf = [0u8; 1024];
    loop {
        match tokio::time::timeout(Duration::from_secs(30), stream.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return start.elapsed().as_secs_f64(),
            Ok(Ok(_)) => {}
            Err(_) => panic!("connection still open after 30 s"),
        }
    }
}

#[test]
fn half_sent_headers_and_idle_connections_are_closed() {
    // Times each close to within seconds; runs with this file's flood tests only, as when
    // this file was a binary of its own.
    let _alone = crate::support::exclusive("netboot_http");
    require(&["ip"]);
    let net = TestNet::new(true);
    let dir = TempDir::new("http-timeouts");
    let mut cfg = config(dir.path());
    cfg.http_header_timeout_secs = 1;
    cfg.http_idle_timeout_secs = 2;
    write_random(&cfg.images_dir.join("big.img"), 64 << 20, 5);
    let client = net.client.handle();
    let server_ip: Ipv4Addr = net.server_ip.parse().unwrap();
    let client_ip: Ipv4Addr = net.client_ip.parse().unwrap();
    net.server.block_on(move || async move {
        let nb = bmo::netboot::start(&cfg, LeaseTable::in_memory())
            .await
            .expect("start");
        let dst = SocketAddr::new(server_ip.into(), nb.http_addr.unwrap().port());
        // From another thread: this one runs the server.
        let waited = tokio::task::spawn_blocking(move || {
            client.block_on(move || async move {
                let idle = connect_from(client_ip, dst).await;
                let mut half = connect_from(client_ip, dst).await;
                half.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
                    .await
                    .unwrap();
                // A kept-alive connection after one complete request.
                let mut kept = connect_from(client_ip, dst).await;
                kept.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
                    .await
                    .unwrap();
                // A download the client stops reading: once the socket buffers are
                // full the server makes no progress and gives up after the idle timeout.
                let mut stalled = connect_from(client_ip, dst).await;
                stalled
                    .write_all(b"GET /images/big.img HTTP/1.1\r\nHost: x\r\n\r\n")
                    .await
                    .unwrap();
                let times = tokio::join!(
                    seconds_until_closed(idle),
                    seconds_until_closed(half),
                    seconds_until_closed(kept)
                );
                tokio::time::sleep(Duration::from_secs(4)).await;
                let mut received = Vec::new();
                let read = tokio::time::timeout(
                    Duration::from_secs(10),
                    stalled.read_to_end(&mut received),
                )
                .await;
                assert!(read.is_ok(), "the stalled download was not closed");
                assert!(
                    received.len() < 64 << 20,
                    "the whole file arrived ({} bytes): the server did not give up",
                    received.len()
                );
                times
            })
        })
        .await
        .expect("client thread");
        for (what, secs) in [
            ("idle", waited.0),
            ("half-sent header", waited.1),
            ("kept-alive", waited.2),
        ] {
            assert!(
                (0.5..5.0).contains(&secs),
                "{what} connection closed after {secs:.1} s, expected ~1 s"
            );
        }
        drop(nb);
    });
}

#[test]
fn connections_are_capped_per_client_and_in_total() {
    // Holds 5,000 descriptors in this process and times the 503: with this file's tests
    // only, as when this file was a binary of its own.
    let _alone = crate::support::exclusive("netboot_http");
    require(&["ip"]);
    const PER_CLIENT: usize = 100;
    const TOTAL: usize = 2000;
    const CLIENTS: usize = 30;
    let net = TestNet::new(true);
    // Thirty client addresses, 10.77.0.2 to 10.77.0.31, and one more to probe with.
    net.add_client_addresses(3..=40);
    let dir = TempDir::new("http-caps");
    let mut cfg = config(dir.path());
    cfg.http_max_connections = TOTAL as u32;
    cfg.http_max_connections_per_client = PER_CLIENT as u32;
    // Held connections send nothing; they must outlive the test's own slowness (3,050
    // connects, instrumented builds), which the header timeout would otherwise cut short.
    cfg.http_header_timeout_secs = 600;
    cfg.http_idle_timeout_secs = 600;
    let client = net.client.handle();
    let server_ip: Ipv4Addr = net.server_ip.parse().unwrap();
    net.server.block_on(move || async move {
        let nb = bmo::netboot::start(&cfg, LeaseTable::in_memory())
            .await
            .expect("start");
        let dst = SocketAddr::new(server_ip.into(), nb.http_addr.unwrap().port());
        let fds_before = open_fds();
        let clients = move || client.block_on(move || async move {
            let source = |n: usize| Ipv4Addr::new(10, 77, 0, 2 + n as u8);
            // The first client tries 150; then 29 more try 100 each: 3,050 in all.
            let mut streams: Vec<(usize, TcpStream)> = Vec::new();
            for _ in 0..150 {
                streams.push((0, connect_from(source(0), dst).await));
            }
            for c in 1..CLIENTS {
                for _ in 0..PER_CLIENT {
                    streams.push((c, connect_from(source(c), dst).await));
                }
            }
            // Every connection either held or refused, none left undecided.
            let deadline = Instant::now() + Duration::from_secs(120);
            // A stream is read until its fate is known, then left alone.
            let mut fates: Vec<(usize, Fate)> = streams.iter().map(|(c, _)| (*c, Fate::Held)).collect();
            loop {
                for ((_, f), (_, s)) in fates.iter_mut().zip(&streams) {
                    if *f == Fate::Held {
                        *f = fate(s);
                    }
                }
                let refused = fates.iter().filter(|(_, f)| *f == Fate::Refused).count();
                if refused + TOTAL >= streams.len() || Instant::now() > deadline {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            let fds_held = open_fds();
            // Over the total cap, a new client is turned away at once, with a 503.
            let probe = Ipv4Addr::new(10, 77, 0, 40);
            let started = Instant::now();
            let full = connect_from(probe, dst).await;
            let mut answer = String::new();
            let mut full = full;
            tokio::time::timeout(Duration::from_secs(5), full.read_to_string(&mut answer))
                .await
                .expect("an answer within 5 s")
                .ok();
            let healthz_full = (answer, started.elapsed());
            // The first client lets go: its slots are free again at once.
            streams.retain(|(c, _)| *c != 0);
            let started = Instant::now();
            let healthz_after = loop {
                let mut s = connect_from(probe, dst).await;
                s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                    .await
                    .unwrap();
                let mut answer = String::new();
                let _ = s.read_to_string(&mut answer).await;
                if answer.starts_with("HTTP/1.1 200") || started.elapsed() > Duration::from_secs(5) {
                    break (answer, started.elapsed());
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            };
            (fates, fds_held, healthz_full, healthz_after)
        });
        // From another thread: this one runs the server.
        let (fates, fds_held, healthz_full, healthz_after) =
            tokio::task::spawn_blocking(clients).await.expect("client thread");
        let held = |c: usize| fates.iter().filter(|(k, f)| *k == c && *f == Fate::Held).count();
        let total_held: usize = (0..CLIENTS).map(held).sum();
        let closed = fates.iter().filter(|(_, f)| *f == Fate::Closed).count();
        println!(
            "{} connections tried: {total_held} held, {} refused with 503, {closed} closed; server fds {fds_before} -> {fds_held} (client sockets included)",
            fates.len(),
            fates.len() - total_held - closed,
        );
        assert_eq!(held(0), PER_CLIENT, "the first client holds its share only");
        assert_eq!(total_held, TOTAL, "connections held in total");
        assert_eq!(closed, 0);
        assert!(
            healthz_full.0.starts_with("HTTP/1.1 503") && healthz_full.1 < Duration::from_secs(1),
            "over the total cap: {:?} after {:?}",
            healthz_full.0,
            healthz_full.1
        );
        assert!(
            healthz_after.0.starts_with("HTTP/1.1 200") && healthz_after.1 < Duration::from_secs(2),
            "/healthz once slots are free: {:?} after {:?}",
            healthz_after.0,
            healthz_after.1
        );
        drop(nb);
    });
}

/// File descriptors open in this process.
fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count())
}

/// Sends `GET path` on a kept-alive connection and reads the answer: `(status, body)`.
async fn get_kept_alive(
    stream: &mut tokio::io::BufReader<TcpStream>,
    path: &str,
) -> std::io::Result<(u16, Vec<u8>)> {
    use tokio::io::AsyncBufReadExt;
    let request = format!("GET {path} HTTP/1.1\r\nHost: boot\r\n\r\n");
    stream.get_mut().write_all(request.as_bytes()).await?;
    let mut status = 0;
    let mut length = 0usize;
    let mut line = String::new();
    loop {
        line.clear();
        if stream.read_line(&mut line).await? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        let l = line.trim_end();
        if l.is_empty() {
            break;
        }
        if let Some(rest) = l.strip_prefix("HTTP/1.1 ") {
            status = rest.get(..3).and_then(|s| s.parse().ok()).unwrap_or(0);
        } else if let Some((name, value)) = l.split_once(':')
            && name.eq_ignore_ascii_case("content-length")
        {
            length = value.trim().parse().unwrap_or(0);
        }
    }
    let mut body = vec![0; length];
    stream.read_exact(&mut body).await?;
    Ok((status, body))
}

/// The race the issue found (a directory inside the root swapped for a symlink to one
/// outside between a check and the open): over HTTP, with the swap done atomically and
/// as fast as it can go, no request is ever answered with the outside file.
#[test]
fn a_directory_swapped_for_a_symlink_never_serves_outside_content() {
    // 12,000 requests against 2 million renames: with this file's tests only, as when
    // this file was a binary of its own.
    let _alone = crate::support::exclusive("netboot_http");
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    require(&["ip"]);
    const CONNECTIONS: usize = 4;
    const REQUESTS: usize = 3_000;
    let net = TestNet::new(true);
    let dir = TempDir::new("http-swap");
    let cfg = config(dir.path());
    std::fs::create_dir_all(cfg.images_dir.join("d")).unwrap();
    std::fs::write(cfg.images_dir.join("d/f"), b"inside").unwrap();
    std::fs::create_dir_all(dir.path().join("outside")).unwrap();
    std::fs::write(dir.path().join("outside/f"), b"outside").unwrap();
    std::os::unix::fs::symlink(dir.path().join("outside"), dir.path().join("spare")).unwrap();

    let stop = Arc::new(AtomicBool::new(false));
    let swapper = {
        let stop = stop.clone();
        let a = CString::new(cfg.images_dir.join("d").as_os_str().as_bytes()).unwrap();
        let b = CString::new(dir.path().join("spare").as_os_str().as_bytes()).unwrap();
        std::thread::spawn(move || {
            let mut swaps = 0u64;
            while !stop.load(Ordering::Relaxed) {
                // SAFETY: two valid NUL-terminated paths; RENAME_EXCHANGE swaps them.
                let rc = unsafe {
                    libc::renameat2(
                        libc::AT_FDCWD,
                        a.as_ptr(),
                        libc::AT_FDCWD,
                        b.as_ptr(),
                        libc::RENAME_EXCHANGE,
                    )
                };
                assert_eq!(rc, 0, "{}", std::io::Error::last_os_error());
                swaps += 1;
            }
            swaps
        })
    };
    let client = net.client.handle();
    let server_ip: Ipv4Addr = net.server_ip.parse().unwrap();
    let (inside, refused, outside) = net.server.block_on(move || async move {
        let nb = bmo::netboot::start(&cfg, LeaseTable::in_memory())
            .await
            .expect("start");
        let dst = SocketAddr::new(server_ip.into(), nb.http_addr.unwrap().port());
        let counts = tokio::task::spawn_blocking(move || {
            client.block_on(move || async move {
                let mut tasks = Vec::new();
                for _ in 0..CONNECTIONS {
                    tasks.push(tokio::spawn(async move {
                        let mut stream = tokio::io::BufReader::new(
                            TcpStream::connect(dst).await.expect("connect"),
                        );
                        let (mut inside, mut refused, mut outside) = (0u32, 0u32, 0u32);
                        for _ in 0..REQUESTS {
                            match get_kept_alive(&mut stream, "/images/d/f")
                                .await
                                .expect("answer")
                            {
                                (200, body) if body == b"inside" => inside += 1,
                                // 403: the open file turned out to be outside the root.
                                (403 | 404, _) => refused += 1,
                                _ => outside += 1,
                            }
                        }
                        (inside, refused, outside)
                    }));
                }
                let mut sum = (0, 0, 0);
                for t in tasks {
                    let (i, n, o) = t.await.expect("client task");
                    sum = (sum.0 + i, sum.1 + n, sum.2 + o);
                }
                sum
            })
        })
        .await
        .expect("clients");
        drop(nb);
        counts
    });
    stop.store(true, Ordering::Relaxed);
    let swaps = swapper.join().expect("swapper");
    println!(
        "{} requests while the directory was swapped {swaps} times: {inside} served the inside file, \
         {refused} refused (403 or 404), {outside} anything else",
        CONNECTIONS * REQUESTS
    );
    assert_eq!(
        outside, 0,
        "outside content or an unexpected answer was served"
    );
    assert!(inside > 0 && swaps > 100, "{inside} served, {swaps} swaps");
}
