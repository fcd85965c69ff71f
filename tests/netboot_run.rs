//! `bmo run` against the real stack starts the HTTP boot server on Ironic's
//! `http_root`, and the generated fallback script points at the detected
//! provisioning IP and bmo's own port — no hard-coded address. Loopback only.

// Tests and benchmarks may panic on what they set up themselves.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod netboot_common;
mod support;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use netboot_common::{ChildGuard, TempDir};
use support::Stack;

const BMO: &str = env!("CARGO_BIN_EXE_bmo");

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn get(url: &str) -> Option<(u16, String)> {
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

#[test]
fn bmo_run_serves_ironic_http_root_and_derives_urls_from_its_own_ip() {
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
        Command::new(BMO)
            .arg("run")
            .env("KUBECONFIG", &stack.kubeconfig)
            .env("IRONIC_ENDPOINT", stack.ironic_endpoint.as_str())
            .env("BMO_HEALTH_ADDR", format!("127.0.0.1:{health}"))
            .env("BMO_HTTP_BIND", "127.0.0.1")
            .env("HTTP_PORT", http.to_string())
            .env("BMO_HTTP_ROOT", &http_root)
            .env("BMO_IMAGES_DIR", dir.path())
            .env("BMO_LEASE_FILE", dir.path().join("leases.json"))
            .env("PROVISIONING_INTERFACE", "lo")
            .env_remove("PROVISIONING_IP")
            .env_remove("DEPLOY_KERNEL_URL")
            .env_remove("DEPLOY_RAMDISK_URL")
            .stdin(Stdio::null())
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
