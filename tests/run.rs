//! `bmo run` against the real stack: starts, reports readiness, stops cleanly on
//! SIGTERM, and fails with a readable message when a peer is missing.

// Tests and benchmarks may panic on what they set up themselves.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use support::{BmoProcess, Stack, eventually, free_port};

fn stack_env(stack: &Stack) -> Vec<(&'static str, String)> {
    vec![
        ("KUBECONFIG", stack.kubeconfig.display().to_string()),
        ("IRONIC_ENDPOINT", stack.ironic_endpoint.to_string()),
        (
            "METAL3_AUTH_ROOT_DIR",
            stack
                .var("METAL3_AUTH_ROOT_DIR")
                .unwrap_or_default()
                .to_owned(),
        ),
    ]
}

fn as_refs<'a>(env: &'a [(&'static str, String)]) -> Vec<(&'static str, &'a str)> {
    env.iter().map(|(k, v)| (*k, v.as_str())).collect()
}

#[tokio::test]
async fn bmo_run_becomes_ready_and_stops_on_sigterm() {
    let stack = Stack::get();
    let port = free_port();
    let mut env = stack_env(stack);
    env.push(("BMO_HEALTH_ADDR", format!("127.0.0.1:{port}")));
    let mut bmo = BmoProcess::start(&["run"], &as_refs(&env));

    let http = reqwest::Client::new();
    let url = format!("http://127.0.0.1:{port}/readyz");
    eventually("bmo to report ready", Duration::from_secs(30), || async {
        match http.get(&url).send().await {
            Ok(r) if r.status() == 200 => Ok(()),
            Ok(r) => Err(format!("HTTP {}", r.status())),
            Err(e) => Err(format!("{e}; log: {}", bmo.log())),
        }
    })
    .await;
    let log = bmo.log();
    assert!(
        log.contains(&format!("bmo {}", env!("CARGO_PKG_VERSION"))),
        "no version line: {log}"
    );
    assert!(log.contains("connected to Kubernetes"), "{log}");
    assert!(log.contains("connected to Ironic"), "{log}");

    bmo.signal("TERM");
    let status = bmo.wait_exit(Duration::from_secs(15)).await;
    assert!(status.success(), "exit {status}; log: {}", bmo.log());
    assert!(bmo.log().contains("SIGTERM received"), "{}", bmo.log());
}

#[tokio::test]
async fn bmo_run_names_an_unreachable_ironic() {
    let stack = Stack::get();
    let dead = format!("http://127.0.0.1:{}/v1/", free_port());
    let mut env = stack_env(stack);
    env.retain(|(k, _)| *k != "IRONIC_ENDPOINT");
    env.push(("IRONIC_ENDPOINT", dead.clone()));
    env.push(("BMO_HEALTH_ADDR", format!("127.0.0.1:{}", free_port())));
    let mut bmo = BmoProcess::start(&["run"], &as_refs(&env));
    let status = bmo.wait_exit(Duration::from_secs(30)).await;
    assert!(!status.success());
    let log = bmo.log();
    assert!(
        log.contains(&format!("cannot reach Ironic at {dead}")),
        "{log}"
    );
    assert!(!log.contains("panicked"), "{log}");
}

#[tokio::test]
async fn bmo_run_refuses_discovery_without_its_dhcp_server() {
    let mut bmo = BmoProcess::start(
        &["run"],
        &[
            ("BMO_DISCOVERY", "true"),
            ("BMO_DHCP_MODE", "off"),
            ("BMO_HEALTH_ADDR", &format!("127.0.0.1:{}", free_port())),
        ],
    );
    let status = bmo.wait_exit(Duration::from_secs(30)).await;
    assert!(!status.success());
    let log = bmo.log();
    assert!(
        log.contains("BMO_DISCOVERY needs bmo's DHCP server")
            && log.contains("set BMO_DHCP_MODE to full or proxy"),
        "{log}"
    );
    assert!(!log.contains("panicked"), "{log}");
}

#[tokio::test]
async fn bmo_run_exits_at_once_on_a_bad_dhcp_range_naming_it_and_its_form() {
    // No cluster and no Ironic: the settings are checked before any connection.
    let mut bmo = BmoProcess::start(
        &["run"],
        &[
            ("KUBECONFIG", "/nonexistent/kubeconfig"),
            ("BMO_DHCP_MODE", "full"),
            ("DHCP_RANGE", "172.22.0.10-172.22.0.100"),
        ],
    );
    let status = bmo.wait_exit(Duration::from_secs(5)).await;
    assert_eq!(status.code(), Some(2), "log: {}", bmo.log());
    let log = bmo.log();
    assert!(
        log.contains("DHCP_RANGE") && log.contains("START,END[,PREFIXLEN|NETMASK]"),
        "{log}"
    );
    assert!(!log.contains("panicked"), "{log}");
}

#[tokio::test]
async fn bmo_run_exits_at_once_when_full_dhcp_has_no_range() {
    let mut bmo = BmoProcess::start(
        &["run"],
        &[
            ("KUBECONFIG", "/nonexistent/kubeconfig"),
            ("BMO_DHCP_MODE", "full"),
            ("BMO_HEALTH_ADDR", &format!("127.0.0.1:{}", free_port())),
        ],
    );
    let status = bmo.wait_exit(Duration::from_secs(5)).await;
    assert!(!status.success());
    let log = bmo.log();
    assert!(
        log.contains("BMO_DHCP_MODE=full needs DHCP_RANGE=START,END"),
        "{log}"
    );
    assert!(!log.contains("Kubernetes"), "{log}");
}

#[tokio::test]
async fn bmo_version_prints_the_four_facts() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_bmo"))
        .arg("version")
        .output()
        .expect("run bmo version");
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    for fact in [
        "bmo 0.",
        "git commit: ",
        "build date: 20",
        "rustc:      rustc 1.",
    ] {
        assert!(text.contains(fact), "missing {fact:?} in:\n{text}");
    }
}
