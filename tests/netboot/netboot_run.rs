//! `bmo run` against the real stack starts the HTTP boot server on Ironic's
//! `http_root`, and the generated fallback script points at the detected
//! provisioning IP and bmo's own port — no hard-coded address. Loopback only.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::Stack;
use crate::support::netboot::{ChildGuard, TempDir};

const BMO: &str = env!("CARGO_BIN_EXE_bmo");

pub(crate) fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

pub(crate) fn get(url: &str) -> Option<(u16, String)> {
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "5", "-w", "\n%{http_code}", url])
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n')?;
    Some((code.parse().ok()?, body.to_owned()))
}

/// `bmo run` against `stack` on loopback: health probes on `health`, the HTTP boot
/// server on `http` serving `http_root` and `images`, its lease file in `images`,
/// the provisioning IP detected on `lo`.
pub(crate) fn bmo_run(
    stack: &Stack,
    health: u16,
    http: u16,
    http_root: &std::path::Path,
    images: &std::path::Path,
) -> Command {
    let mut command = Command::new(BMO);
    command
        .arg("run")
        .env("KUBECONFIG", &stack.kubeconfig)
        .env("IRONIC_ENDPOINT", stack.ironic_endpoint.as_str())
        .env("BMO_HEALTH_ADDR", format!("127.0.0.1:{health}"))
        .env("BMO_HTTP_BIND", "127.0.0.1")
        .env("HTTP_PORT", http.to_string())
        .env("BMO_HTTP_ROOT", http_root)
        .env("BMO_IMAGES_DIR", images)
        .env("BMO_LEASE_FILE", images.join("leases.json"))
        .env("PROVISIONING_INTERFACE", "lo")
        .env_remove("PROVISIONING_IP")
        .env_remove("DEPLOY_KERNEL_URL")
        .env_remove("DEPLOY_RAMDISK_URL")
        .stdin(Stdio::null());
    command
}

#[test]
fn bmo_run_serves_ironic_http_root_and_derives_urls_from_its_own_ip() {
    let _shared = crate::support::shared();
    let stack = Stack::get();
    let dir = TempDir::new("run");
    let http_root = stack
        .var("IRONIC_HTTP_ROOT")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| dir.path().join("html"));
    std::fs::create_dir_all(&http_root).unwrap();
    let marker = format!("bmo-run-{}.txt", std::process::id());
    std::fs::write(http_root.join(&marker), b"from Ironic's http_root").unwrap();
    let (health, http) = (free_port(), free_port());
    let _bmo = ChildGuard(
        bmo_run(stack, health, http, &http_root, dir.path())
            .spawn()
            .expect("start bmo run"),
    );
    let base = format!("http://127.0.0.1:{http}");
    let deadline = Instant::now() + Duration::from_secs(60);
    while get(&format!("{base}/healthz")).is_none() {
        assert!(
            Instant::now() < deadline,
            "bmo run's HTTP boot server did not come up"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(
        get(&format!("{base}/{marker}")),
        Some((200, "from Ironic's http_root".to_owned()))
    );
    let (code, script) = get(&format!("{base}/inspector.ipxe")).unwrap();
    assert_eq!(code, 200);
    assert!(
        script.contains(&format!("{base}/images/ironic-python-agent.kernel")),
        "{script}"
    );
    assert!(
        script.contains(&format!("{base}/images/ironic-python-agent.initramfs")),
        "{script}"
    );
    let _ = std::fs::remove_file(http_root.join(&marker));
}

/// Open descriptors of process `pid`.
pub(crate) fn fds_of(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count())
}

/// `(status, seconds)` of a GET with a 5 s limit.
pub(crate) fn timed_get(url: &str) -> (Option<u16>, f64) {
    let started = Instant::now();
    let status = get(url).map(|(code, _)| code);
    (status, started.elapsed().as_secs_f64())
}

/// Raises this process's descriptor limit to hold `want` sockets and a margin; returns
/// how many sockets the limit then allows (fewer than `want` only when the limit cannot
/// be raised, as without root).
pub(crate) fn raise_fd_limit(want: usize) -> usize {
    const MARGIN: usize = 500;
    let target = (want + MARGIN) as libc::rlim_t;
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit with a valid resource and a valid struct.
    unsafe {
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit);
        if limit.rlim_cur < target {
            let raised = libc::rlimit {
                rlim_cur: target,
                rlim_max: limit.rlim_max.max(target),
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                limit = raised;
            }
        }
    }
    (limit.rlim_cur as usize).saturating_sub(MARGIN).min(want)
}

#[test]
fn probes_answer_while_one_client_holds_thousands_of_connections() {
    // Raises the process's descriptor limit and then uses all of it: nothing else in the
    // process may open a file meanwhile.
    let _alone = crate::support::exclusive("netboot_run descriptors");
    let connections = raise_fd_limit(20_000);
    let stack = Stack::get();
    let dir = TempDir::new("run-conns");
    let (health, http) = (free_port(), free_port());
    let bmo = ChildGuard(
        bmo_run(stack, health, http, dir.path(), dir.path())
            .spawn()
            .expect("start bmo run"),
    );
    let pid = bmo.0.id();
    let probe = format!("http://127.0.0.1:{health}");
    let deadline = Instant::now() + Duration::from_secs(90);
    while get(&format!("{probe}/readyz")).map(|(c, _)| c) != Some(200) {
        assert!(Instant::now() < deadline, "bmo run did not become ready");
        std::thread::sleep(Duration::from_millis(200));
    }
    let fds_before = fds_of(pid);
    // One client opens connections to the HTTP boot server and never sends a byte.
    let mut held = Vec::with_capacity(connections);
    let started = Instant::now();
    for _ in 0..connections {
        match std::net::TcpStream::connect(("127.0.0.1", http)) {
            Ok(s) => held.push(s),
            Err(e) => panic!("connect #{}: {e}", held.len()),
        }
    }
    let opened = started.elapsed();
    let fds_during = fds_of(pid);
    let (healthz, healthz_secs) = timed_get(&format!("{probe}/healthz"));
    let (readyz, readyz_secs) = timed_get(&format!("{probe}/readyz"));
    let (boot_healthz, _) = timed_get(&format!("http://127.0.0.1:{http}/healthz"));
    println!(
        "{connections} connections opened by one client in {opened:.1?}; bmo fds {fds_before} -> {fds_during}; \
         /healthz {healthz:?} in {healthz_secs:.3} s, /readyz {readyz:?} in {readyz_secs:.3} s; \
         the same client's next boot request: {boot_healthz:?}"
    );
    assert_eq!(healthz, Some(200));
    assert_eq!(readyz, Some(200));
    assert!(healthz_secs < 1.0 && readyz_secs < 1.0);
    // Whether this client's next request is over its cap depends on how many of its
    // connections the header timeout has closed meanwhile (opening them all takes
    // minutes on a loaded machine); tests/netboot/netboot_http.rs checks the cap itself.
    assert!(
        matches!(boot_healthz, Some(200 | 503)),
        "the boot server answers: {boot_healthz:?}"
    );
    assert!(
        fds_during < fds_before + 100,
        "bmo holds {fds_during} descriptors (from {fds_before})"
    );
    drop(held);
}
