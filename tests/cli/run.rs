//! `bmo run` against the real stack: starts, reports readiness, stops cleanly on
//! SIGTERM, and waits with a readable message while a peer is missing.

use std::time::Duration;

use crate::support::{BmoProcess, Stack, authority, eventually, free_port, kubeconfig_pointing_at};

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
    let _shared = crate::support::shared();
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

    // With or without the CRDs (this stack may be fresh): a prompt, clean exit.
    bmo.signal("TERM");
    let status = bmo.wait_exit(Duration::from_secs(5)).await;
    assert!(status.success(), "exit {status}; log: {}", bmo.log());
    assert!(bmo.log().contains("SIGTERM received"), "{}", bmo.log());
}

/// Whatever keeps the first list of hosts failing (the CRDs not installed yet, the
/// API server refusing), SIGTERM stops bmo at once. Here the list is refused: bmo runs
/// as `bmo-operator`, which has no rights in the watched namespace, so the test does
/// not depend on whether this shared stack has the CRDs.
#[tokio::test]
async fn bmo_run_stops_on_sigterm_at_once_while_its_first_list_of_hosts_fails() {
    let _shared = crate::support::shared();
    let stack = Stack::get();
    let admin = stack.kube_client().await;
    let ns = crate::support::new_namespace(&admin, "no-rights").await;
    let watched = ns.clone();
    let port = free_port();
    let mut env = stack_env(stack);
    env.retain(|(k, _)| *k != "KUBECONFIG");
    env.extend([
        (
            "KUBECONFIG",
            stack.operator_kubeconfig.display().to_string(),
        ),
        ("WATCH_NAMESPACE", watched),
        ("BMO_HEALTH_ADDR", format!("127.0.0.1:{port}")),
        ("RUST_LOG", "info,bmo=debug".to_owned()),
    ]);
    // The list bmo starts with is refused.
    let operator = crate::support::kube_client_from(&stack.operator_kubeconfig).await;
    let refused = kube::Api::<bmo::api::BareMetalHost>::namespaced(operator, &ns)
        .list(&Default::default())
        .await
        .expect_err("bmo-operator has no rights in the namespace");
    assert!(refused.to_string().contains("forbidden"), "{refused}");

    let mut bmo = BmoProcess::start(&["run"], &as_refs(&env));
    let http = reqwest::Client::new();
    assert_becomes_ready(&bmo, &http, port).await;
    // bmo's own line, not kube-runtime's "forbidden" warning, which comes first.
    eventually(
        "bmo's list of hosts refused",
        Duration::from_secs(30),
        || async {
            let log = bmo.log();
            if log.contains("watch of BareMetalHosts failed") {
                Ok(())
            } else {
                Err(log)
            }
        },
    )
    .await;

    let signalled = std::time::Instant::now();
    bmo.signal("TERM");
    let status = bmo.wait_exit(Duration::from_secs(5)).await;
    println!("exited {:?} after SIGTERM", signalled.elapsed());
    assert!(status.success(), "exit {status}; log: {}", bmo.log());
    let log = bmo.log();
    assert!(
        log.contains("host controller stopped before its first list of hosts succeeded"),
        "{log}"
    );
}

/// Forwards every TCP connection made to `listen` to `target`, from the moment it is
/// called: a dependency that "comes back" at an address bmo was already trying.
fn forward(listen: &str, target: String) -> tokio::task::JoinHandle<()> {
    let listen = listen.to_owned();
    tokio::spawn(async move {
        let listener = tokio::net::TcpListener::bind(&listen)
            .await
            .expect("bind the forwarder");
        while let Ok((mut inbound, _)) = listener.accept().await {
            let target = target.clone();
            tokio::spawn(async move {
                if let Ok(mut outbound) = tokio::net::TcpStream::connect(&target).await {
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                }
            });
        }
    })
}

async fn probe(http: &reqwest::Client, port: u16, path: &str) -> Result<u16, String> {
    http.get(format!("http://127.0.0.1:{port}{path}"))
        .send()
        .await
        .map(|r| r.status().as_u16())
        .map_err(|e| e.to_string())
}

/// Waits until bmo logs `line`, then checks it is alive but not ready.
async fn assert_waiting(bmo: &BmoProcess, http: &reqwest::Client, port: u16, line: &str) {
    eventually(
        "bmo to say what it waits for",
        Duration::from_secs(30),
        || async {
            let log = bmo.log();
            if log.contains(line) { Ok(()) } else { Err(log) }
        },
    )
    .await;
    assert_eq!(
        probe(http, port, "/healthz").await,
        Ok(200),
        "{}",
        bmo.log()
    );
    assert_eq!(probe(http, port, "/readyz").await, Ok(503), "{}", bmo.log());
}

async fn assert_becomes_ready(bmo: &BmoProcess, http: &reqwest::Client, port: u16) -> Duration {
    let started = std::time::Instant::now();
    eventually("bmo to become ready", Duration::from_secs(30), || async {
        match probe(http, port, "/readyz").await {
            Ok(200) => Ok(()),
            other => Err(format!("{other:?}; log: {}", bmo.log())),
        }
    })
    .await;
    started.elapsed()
}

#[tokio::test]
async fn bmo_run_waits_for_ironic_naming_it_and_is_ready_once_it_answers() {
    let _shared = crate::support::shared();
    let stack = Stack::get();
    let port = free_port();
    let dead = format!("127.0.0.1:{}", free_port());
    let mut ironic = stack.ironic_endpoint.clone();
    ironic
        .set_port(dead.rsplit(':').next().and_then(|p| p.parse().ok()))
        .expect("port");
    let ironic_url = ironic.to_string();
    let mut env = stack_env(stack);
    env.retain(|(k, _)| *k != "IRONIC_ENDPOINT");
    env.push(("IRONIC_ENDPOINT", ironic_url.clone()));
    env.push(("BMO_HEALTH_ADDR", format!("127.0.0.1:{port}")));
    let mut bmo = BmoProcess::start(&["run"], &as_refs(&env));
    let http = reqwest::Client::new();

    assert_waiting(
        &bmo,
        &http,
        port,
        &format!("waiting for Ironic at {ironic_url}: cannot reach Ironic"),
    )
    .await;
    let _ironic = forward(&dead, authority(stack.ironic_endpoint.as_str()));
    let took = assert_becomes_ready(&bmo, &http, port).await;
    println!("ready {took:?} after Ironic came");
    assert!(bmo.log().contains("connected to Ironic"), "{}", bmo.log());
    assert!(!bmo.log().contains("panicked"), "{}", bmo.log());

    bmo.signal("TERM");
    let status = bmo.wait_exit(Duration::from_secs(15)).await;
    assert!(status.success(), "exit {status}; log: {}", bmo.log());
}

#[tokio::test]
async fn bmo_run_waits_for_the_api_server_naming_it_and_stops_on_sigterm_meanwhile() {
    let _shared = crate::support::shared();
    let stack = Stack::get();
    let http = reqwest::Client::new();
    let dead = format!("127.0.0.1:{}", free_port());
    let (kubeconfig, real) = kubeconfig_pointing_at(&stack.kubeconfig, &format!("https://{dead}"));
    let mut env = stack_env(stack);
    env.retain(|(k, _)| *k != "KUBECONFIG");
    env.push(("KUBECONFIG", kubeconfig.display().to_string()));

    // Stopped while waiting: a clean exit.
    let port = free_port();
    let mut with_port = env.clone();
    with_port.push(("BMO_HEALTH_ADDR", format!("127.0.0.1:{port}")));
    let mut bmo = BmoProcess::start(&["run"], &as_refs(&with_port));
    let line = format!("waiting for the Kubernetes API server at https://{dead}/");
    assert_waiting(&bmo, &http, port, &line).await;
    bmo.signal("TERM");
    let status = bmo.wait_exit(Duration::from_secs(10)).await;
    assert!(status.success(), "exit {status}; log: {}", bmo.log());

    // The API server comes: ready.
    let port = free_port();
    let mut with_port = env.clone();
    with_port.push(("BMO_HEALTH_ADDR", format!("127.0.0.1:{port}")));
    let bmo = BmoProcess::start(&["run"], &as_refs(&with_port));
    assert_waiting(&bmo, &http, port, &line).await;
    let _api = forward(&dead, authority(&real));
    let took = assert_becomes_ready(&bmo, &http, port).await;
    println!("ready {took:?} after the API server came");
    assert!(
        bmo.log().contains("connected to Kubernetes"),
        "{}",
        bmo.log()
    );
    let _ = std::fs::remove_file(kubeconfig);
}

#[tokio::test]
async fn bmo_run_refuses_discovery_without_its_dhcp_server() {
    let _shared = crate::support::shared();
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
    let _shared = crate::support::shared();
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
    let _shared = crate::support::shared();
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
    let _shared = crate::support::shared();
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
