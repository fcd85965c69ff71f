//! `bmo detect-ip` inside a network namespace the test creates: every way of
//! naming the provisioning network, the bounded wait, and the failure message.

use std::process::Command;
use std::time::Duration;

use crate::support::netboot::{Netns, TestNet, run};

const BMO: &str = env!("CARGO_BIN_EXE_bmo");

fn detect(ns: &Netns, args: &[&str]) -> std::process::Output {
    let mut c = ns.command(BMO);
    c.arg("detect-ip").args(args);
    for v in [
        "PROVISIONING_IP",
        "PROVISIONING_INTERFACE",
        "PROVISIONING_MACS",
        "BMO_PROVISIONING_CIDR",
        "BMO_PROVISIONING_IP_FAMILY",
        "BMO_PROVISIONING_IP_WAIT",
    ] {
        c.env_remove(v);
    }
    c.output().expect("run bmo detect-ip")
}

fn detect_ok(ns: &Netns, args: &[&str]) -> String {
    let out = detect(ns, args);
    assert!(
        out.status.success(),
        "bmo detect-ip {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn detect_ip_follows_each_setting() {
    let _shared = crate::support::shared();
    let net = TestNet::new(false);
    let ns = &net.server;
    run(Command::new("ip").args([
        "-n",
        &ns.name,
        "link",
        "set",
        "srv0",
        "address",
        "52:54:00:77:00:01",
    ]));

    let out = detect_ok(ns, &["--provisioning-interface", "srv0"]);
    assert!(out.starts_with("10.77.0.1\n"), "{out}");
    assert!(
        out.contains("interface: srv0") && out.contains("PROVISIONING_INTERFACE srv0"),
        "{out}"
    );

    let out = detect_ok(
        ns,
        &["--provisioning-macs", "aa:bb:cc:dd:ee:ff,52:54:00:77:00:01"],
    );
    assert!(
        out.starts_with("10.77.0.1\n") && out.contains("PROVISIONING_MACS"),
        "{out}"
    );

    let out = detect_ok(ns, &["--provisioning-cidr", "fd77::/64"]);
    assert!(out.starts_with("fd77::1\n"), "{out}");

    let out = detect_ok(
        ns,
        &[
            "--provisioning-interface",
            "srv0",
            "--provisioning-ip-family",
            "ipv6",
        ],
    );
    assert!(out.starts_with("fd77::1\n"), "{out}");

    let out = detect_ok(ns, &["--provisioning-ip", "10.77.0.1", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&out).expect("json");
    assert_eq!(v["ip"], "10.77.0.1");
    assert_eq!(v["interface"], "srv0");

    // Nothing configured and no default route: a clear error, after the wait.
    let out = detect(ns, &["--provisioning-ip-wait", "0"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("no default route") && err.contains("PROVISIONING_INTERFACE"),
        "{err}"
    );

    // With a default route, its interface is chosen.
    run(Command::new("ip").args([
        "-n",
        &ns.name,
        "route",
        "add",
        "default",
        "via",
        "10.77.0.254",
        "dev",
        "srv0",
    ]));
    let out = detect_ok(ns, &[]);
    assert!(
        out.starts_with("10.77.0.1\n") && out.contains("default route"),
        "{out}"
    );
}

#[test]
fn detect_ip_waits_for_the_address_to_appear() {
    let _shared = crate::support::shared();
    let ns = Netns::new("w");
    run(Command::new("ip").args([
        "-n", &ns.name, "link", "add", "prov0", "type", "veth", "peer", "name", "prov1",
    ]));
    run(Command::new("ip").args(["-n", &ns.name, "link", "set", "prov0", "up"]));
    let mut child = ns
        .command(BMO)
        .args([
            "detect-ip",
            "--provisioning-ip",
            "10.88.0.5",
            "--provisioning-ip-wait",
            "30",
        ])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    std::thread::sleep(Duration::from_millis(1500));
    assert!(
        child.try_wait().expect("wait").is_none(),
        "detect-ip returned before the address existed"
    );
    run(Command::new("ip").args([
        "-n",
        &ns.name,
        "addr",
        "add",
        "10.88.0.5/24",
        "dev",
        "prov0",
    ]));
    let out = child.wait_with_output().expect("output");
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.starts_with("10.88.0.5\n") && text.contains("prov0"),
        "{text}"
    );

    let out = detect(
        &ns,
        &[
            "--provisioning-ip",
            "10.88.0.99",
            "--provisioning-ip-wait",
            "1",
        ],
    );
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("PROVISIONING_IP 10.88.0.99 is on no interface")
    );
}
