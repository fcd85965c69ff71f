//! `bmo bmc ADDRESS`: what a person checking an address sees.

use std::process::Command;

use serde_json::Value;

fn bmo(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_bmo"))
        .args(args)
        .env_remove("RUST_BACKTRACE")
        .output()
        .expect("run bmo");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn prints_driver_interfaces_and_driver_info_as_json() {
    let _shared = crate::support::shared();
    let (code, stdout, stderr) = bmo(&[
        "bmc",
        "idrac-virtualmedia+https://[fd00::20]:8443/redfish/v1/Systems/System.Embedded.1",
        "--disable-certificate-verification",
        "--json",
    ]);
    assert_eq!(code, 0, "{stderr}");
    let v: Value = serde_json::from_str(&stdout).expect("JSON");
    assert_eq!(v["driver"], "idrac");
    assert_eq!(v["interfaces"]["boot"], "idrac-redfish-virtual-media");
    assert_eq!(
        v["driver_info"]["redfish_address"],
        "https://[fd00::20]:8443"
    );
    assert_eq!(
        v["driver_info"]["redfish_system_id"],
        "/redfish/v1/Systems/System.Embedded.1"
    );
    assert_eq!(v["driver_info"]["redfish_verify_ca"], false);
    assert_eq!(v["credential_keys"][1], "redfish_password");
    assert!(v["driver_info"].get("redfish_password").is_none());
    assert_eq!(v["supports_iso_boot"], true);
    assert_eq!(v["touches_hardware"], true);
}

#[test]
fn prints_a_readable_summary_for_ipmi_and_fake() {
    let _shared = crate::support::shared();
    let (code, stdout, _) = bmo(&["bmc", "192.0.2.10:6230"]);
    assert_eq!(code, 0);
    assert!(
        stdout.contains("ironic driver:") && stdout.contains("ipmi"),
        "{stdout}"
    );
    assert!(
        stdout.contains("driver_info.ipmi_port:") && stdout.contains("6230"),
        "{stdout}"
    );
    assert!(
        stdout.contains("(password from the credentials secret)"),
        "{stdout}"
    );

    let (code, stdout, _) = bmo(&["bmc", "fake://demo-01"]);
    assert_eq!(code, 0);
    assert!(stdout.contains("fake-hardware"), "{stdout}");
    assert!(
        stdout.contains("touches hardware:") && stdout.contains("no"),
        "{stdout}"
    );
}

#[test]
fn a_bad_address_exits_2_with_one_line_saying_why() {
    let _shared = crate::support::shared();
    for (address, says) in [
        ("ilo4://10.0.0.1", "unknown BMC type 'ilo4'"),
        ("redfish://10.0.0.1:70000", "invalid port '70000'"),
        ("redfish://", "has no host"),
        ("redfish://admin:hunter2@10.0.0.1", "credentialsName"),
    ] {
        let (code, stdout, stderr) = bmo(&["bmc", address]);
        assert_eq!(code, 2, "{address}");
        assert!(stdout.is_empty(), "{address}: {stdout}");
        assert!(stderr.contains(says), "{address}: {stderr}");
        assert_eq!(stderr.trim().lines().count(), 1, "{address}: {stderr}");
        assert!(!stderr.contains("hunter2"), "{stderr}");
    }
}

#[test]
fn no_error_repeats_a_password_written_into_the_address() {
    let _shared = crate::support::shared();
    for (address, secret) in [
        ("redfish://admin:pa/Secret@10.0.0.1/", "pa/Secret"),
        ("ipmi://u:p4ssw0rd@host:99999", "p4ssw0rd"),
        (" redfish://admin:hunter2@10.0.0.1 ", "hunter2"),
        ("redfish://admin:hun ter2@10.0.0.1", "hun ter2"),
        ("redfish://admin:hunter2@", "hunter2"),
        ("redfish://admin:p?q#r@bmc_1:abc/", "p?q#r"),
        ("redfish://admin%3Apass%40host/", "%3Apass"),
        ("redfish://admin%3Apass%40host/", "admin"),
    ] {
        let (code, stdout, stderr) = bmo(&["bmc", address]);
        assert_eq!(code, 2, "{address}");
        assert!(stdout.is_empty(), "{address}: {stdout}");
        assert!(stderr.contains("credentialsName"), "{address}: {stderr}");
        assert!(!stderr.contains(secret), "{address}: {stderr}");
    }
}

#[test]
fn no_error_repeats_a_percent_encoded_host_that_may_hold_a_password() {
    let _shared = crate::support::shared();
    for address in ["redfish://admin%3As3cr3t/", "ipmi://admin%3As3cr3t:623"] {
        let (code, stdout, stderr) = bmo(&["bmc", address]);
        assert_eq!(code, 2, "{address}");
        assert!(stdout.is_empty(), "{address}: {stdout}");
        assert!(stderr.contains("percent-encoding"), "{address}: {stderr}");
        assert!(!stderr.contains("s3cr3t"), "{address}: {stderr}");
    }
}

#[test]
fn a_bare_bracketed_ipv6_address_is_refused_as_an_ipmi_address() {
    let _shared = crate::support::shared();
    let (code, stdout, stderr) = bmo(&["bmc", "[2001:db8::1]"]);
    assert_eq!(code, 2, "{stdout}");
    assert!(stdout.is_empty(), "{stdout}");
    assert!(
        stderr.contains("[2001:db8::1]:623") && stderr.contains("ipmi://[2001:db8::1]"),
        "{stderr}"
    );
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    let (code, stdout, _) = bmo(&["bmc", "[2001:db8::1]:623"]);
    assert_eq!(code, 0);
    assert!(
        stdout.contains("ipmi_address:") && stdout.contains("2001:db8::1"),
        "{stdout}"
    );
}
