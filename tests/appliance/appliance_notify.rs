//! `bmo run` under systemd's `Type=notify` protocol: READY=1 only once it serves its
//! probes, WATCHDOG=1 pings while it runs, STOPPING=1 on SIGTERM. The test plays
//! systemd's side: it binds the notify socket and sets the variables systemd sets.

use std::os::unix::net::UnixDatagram;
use std::time::{Duration, Instant};

use crate::support::{BmoProcess, Stack, free_port, unique_name};

fn receive(socket: &UnixDatagram, deadline: Instant) -> Option<String> {
    let mut buf = [0u8; 4096];
    let left = deadline.checked_duration_since(Instant::now())?;
    socket.set_read_timeout(Some(left)).ok()?;
    let n = socket.recv(&mut buf).ok()?;
    Some(String::from_utf8_lossy(&buf[..n]).into_owned())
}

/// Whether GET `url` answers 200 (a bare HTTP/1.0 request; no client crate needed).
fn http_ok(addr: &str, path: &str) -> bool {
    use std::io::{Read, Write};
    let Ok(mut stream) = std::net::TcpStream::connect(addr) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    if write!(stream, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").is_err() {
        return false;
    }
    let mut response = String::new();
    let _ = stream.read_to_string(&mut response);
    response.starts_with("HTTP/1.0 200") || response.starts_with("HTTP/1.1 200")
}

#[tokio::test]
async fn bmo_run_speaks_sd_notify_ready_watchdog_and_stopping() {
    let _shared = crate::support::shared();
    let stack = Stack::get();
    let dir = std::env::temp_dir().join(unique_name("bmo-notify"));
    std::fs::create_dir_all(&dir).unwrap();
    let socket_path = dir.join("notify.sock");
    let socket = UnixDatagram::bind(&socket_path).expect("bind notify socket");

    let kubeconfig = stack.kubeconfig.display().to_string();
    let health = format!("127.0.0.1:{}", free_port());
    let ns = unique_name("notify");
    let socket_env = socket_path.display().to_string();
    let mut bmo = BmoProcess::start(
        &["run"],
        &[
            ("KUBECONFIG", &kubeconfig),
            ("IRONIC_ENDPOINT", stack.ironic_endpoint.as_str()),
            (
                "METAL3_AUTH_ROOT_DIR",
                stack.var("METAL3_AUTH_ROOT_DIR").unwrap_or_default(),
            ),
            ("WATCH_NAMESPACE", &ns),
            ("BMO_HEALTH_ADDR", &health),
            ("NOTIFY_SOCKET", &socket_env),
            // 1 s: pings every 0.5 s.
            ("WATCHDOG_USEC", "1000000"),
        ],
    );

    let deadline = Instant::now() + Duration::from_secs(60);
    let first = receive(&socket, deadline)
        .unwrap_or_else(|| panic!("no notification within 60 s; log:\n{}", bmo.log()));
    assert!(
        first.starts_with("READY=1\n") && first.contains("STATUS="),
        "first message is READY=1 with a status, got {first:?}"
    );
    // READY means ready: the probes answer by the time systemd hears it.
    assert!(
        http_ok(&health, "/readyz"),
        "READY=1 sent before /readyz answers 200"
    );

    let deadline = Instant::now() + Duration::from_secs(10);
    let mut pings = 0;
    while pings < 3 {
        match receive(&socket, deadline) {
            Some(m) if m == "WATCHDOG=1" => pings += 1,
            Some(other) => panic!("unexpected notification {other:?} while running"),
            None => panic!("only {pings} watchdog pings in 10 s (expected one per 0.5 s)"),
        }
    }

    bmo.signal("TERM");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match receive(&socket, deadline) {
            Some(m) if m == "STOPPING=1" => break,
            Some(m) if m == "WATCHDOG=1" => continue,
            Some(other) => panic!("unexpected notification {other:?} after SIGTERM"),
            None => panic!("no STOPPING=1 within 10 s of SIGTERM; log:\n{}", bmo.log()),
        }
    }
    let status = bmo.wait_exit(Duration::from_secs(30)).await;
    assert!(
        status.success(),
        "bmo exited with {status}; log:\n{}",
        bmo.log()
    );
    let _ = std::fs::remove_dir_all(&dir);
}
