use proptest::prelude::*;
use serde_json::{Value, json};

use super::*;
use crate::credentials::SecretString;

fn creds() -> Credentials {
    Credentials {
        username: "admin".into(),
        password: SecretString::new("pw"),
    }
}

fn info(address: &str) -> Map<String, Value> {
    BmcAddress::parse(address)
        .unwrap_or_else(|e| panic!("{address}: {e}"))
        .driver_info(&creds(), false)
}

/// (scheme, driver, boot, raid, needs MAC, ISO boot) for every scheme, as the
/// upstream table has them.
const TABLE: &[(&str, &str, &str, &str, bool, bool)] = &[
    ("ipmi", "ipmi", "ipxe", "no-raid", false, false),
    ("libvirt", "ipmi", "ipxe", "no-raid", true, false),
    ("redfish", "redfish", "ipxe", "redfish", false, false),
    ("redfish+http", "redfish", "ipxe", "redfish", false, false),
    ("redfish+https", "redfish", "ipxe", "redfish", false, false),
    ("ilo5-redfish", "redfish", "ipxe", "redfish", false, false),
    (
        "ilo5-redfish+http",
        "redfish",
        "ipxe",
        "redfish",
        false,
        false,
    ),
    (
        "ilo5-redfish+https",
        "redfish",
        "ipxe",
        "redfish",
        false,
        false,
    ),
    (
        "idrac-redfish",
        "idrac",
        "ipxe",
        "idrac-redfish",
        false,
        false,
    ),
    (
        "idrac-redfish+http",
        "idrac",
        "ipxe",
        "idrac-redfish",
        false,
        false,
    ),
    (
        "idrac-redfish+https",
        "idrac",
        "ipxe",
        "idrac-redfish",
        false,
        false,
    ),
    (
        "redfish-virtualmedia",
        "redfish",
        "redfish-virtual-media",
        "redfish",
        false,
        true,
    ),
    (
        "redfish-virtualmedia+http",
        "redfish",
        "redfish-virtual-media",
        "redfish",
        false,
        true,
    ),
    (
        "redfish-virtualmedia+https",
        "redfish",
        "redfish-virtual-media",
        "redfish",
        false,
        true,
    ),
    (
        "ilo5-virtualmedia",
        "redfish",
        "redfish-virtual-media",
        "redfish",
        false,
        true,
    ),
    (
        "ilo5-virtualmedia+http",
        "redfish",
        "redfish-virtual-media",
        "redfish",
        false,
        true,
    ),
    (
        "ilo5-virtualmedia+https",
        "redfish",
        "redfish-virtual-media",
        "redfish",
        false,
        true,
    ),
    (
        "idrac-virtualmedia",
        "idrac",
        "idrac-redfish-virtual-media",
        "idrac-redfish",
        false,
        true,
    ),
    (
        "idrac-virtualmedia+http",
        "idrac",
        "idrac-redfish-virtual-media",
        "idrac-redfish",
        false,
        true,
    ),
    (
        "idrac-virtualmedia+https",
        "idrac",
        "idrac-redfish-virtual-media",
        "idrac-redfish",
        false,
        true,
    ),
    (
        "redfish-uefihttp",
        "redfish",
        "redfish-https",
        "redfish",
        false,
        true,
    ),
    (
        "redfish-uefihttp+http",
        "redfish",
        "redfish-https",
        "redfish",
        false,
        true,
    ),
    (
        "redfish-uefihttp+https",
        "redfish",
        "redfish-https",
        "redfish",
        false,
        true,
    ),
    ("fake", "fake-hardware", "fake", "fake", false, false),
];

#[test]
fn every_scheme_maps_to_its_driver_and_interfaces() {
    assert_eq!(TABLE.len(), SCHEMES.len(), "every scheme is in the table");
    for &(scheme, driver, boot, raid, needs_mac, iso) in TABLE {
        let addr = BmcAddress::parse(&format!("{scheme}://192.0.2.1/redfish/v1/Systems/1"))
            .unwrap_or_else(|e| panic!("{scheme}: {e}"));
        let settings = addr.driver_settings(false);
        assert_eq!(settings.driver, driver, "{scheme}");
        assert_eq!(settings.interfaces.boot, Some(boot), "{scheme}");
        assert_eq!(settings.interfaces.raid, Some(raid), "{scheme}");
        assert_eq!(addr.kind.needs_boot_mac(), needs_mac, "{scheme}");
        assert_eq!(addr.kind.supports_iso_boot(), iso, "{scheme}");
        assert_eq!(
            addr.kind.needs_provisioning_network(),
            !iso && scheme != "fake",
            "{scheme}"
        );
        // The scheme's upper-case spelling is the same scheme.
        let upper = BmcAddress::parse(&format!("{}://192.0.2.1", scheme.to_uppercase())).unwrap();
        assert_eq!(upper.kind, addr.kind, "{scheme}");
    }
}

#[test]
fn idrac_uses_idrac_interfaces_everywhere() {
    let s = BmcAddress::parse("idrac-virtualmedia://10.0.0.1/redfish/v1/Systems/System.Embedded.1")
        .unwrap()
        .driver_settings(false);
    let i = s.interfaces;
    assert_eq!(
        (i.bios, i.management, i.power, i.vendor, i.firmware),
        (
            Some("idrac-redfish"),
            Some("idrac-redfish"),
            Some("idrac-redfish"),
            Some("idrac-redfish"),
            Some("redfish")
        )
    );
}

/// The `driver_info` of `address` has each (key, value) of `expected`.
fn assert_info(address: &str, expected: &[(&str, &str)]) {
    let info = info(address);
    for (key, value) in expected {
        assert_eq!(info[*key], *value, "{address}: {key}");
    }
}

#[test]
fn ipmi_driver_info_defaults_port_and_privilege() {
    assert_info(
        "ipmi://192.0.2.10",
        &[
            ("ipmi_address", "192.0.2.10"),
            ("ipmi_port", "623"),
            ("ipmi_priv_level", "ADMINISTRATOR"),
            ("ipmi_username", "admin"),
            ("ipmi_password", "pw"),
        ],
    );
    assert_info(
        "ipmi://192.0.2.10:6230?privilegelevel=OPERATOR",
        &[("ipmi_port", "6230"), ("ipmi_priv_level", "OPERATOR")],
    );
}

#[test]
fn bare_host_and_host_port_mean_ipmi() {
    for (address, host, port) in [
        ("192.0.2.10", "192.0.2.10", "623"),
        ("192.0.2.10:6231", "192.0.2.10", "6231"),
        ("bmc-1.example.com", "bmc-1.example.com", "623"),
        ("bmc-1.example.com:6232", "bmc-1.example.com", "6232"),
        ("[fd00::10]:6233", "fd00::10", "6233"),
        ("fd00::10", "fd00::10", "623"),
        ("ipmi:192.0.2.10", "192.0.2.10", "623"),
        ("ipmi:192.0.2.10:777", "192.0.2.10", "777"),
    ] {
        let addr = BmcAddress::parse(address).unwrap_or_else(|e| panic!("{address}: {e}"));
        assert_eq!(addr.kind, BmcType::Ipmi, "{address}");
        let i = addr.driver_info(&creds(), false);
        assert_eq!(i["ipmi_address"], host, "{address}");
        assert_eq!(i["ipmi_port"], port, "{address}");
    }
}

#[test]
fn libvirt_is_ipmi_through_virtualbmc() {
    assert_info(
        "libvirt://192.168.122.1:6233/",
        &[("ipmi_address", "192.168.122.1"), ("ipmi_port", "6233")],
    );
}

#[test]
fn redfish_address_keeps_transport_port_and_system_id() {
    let address = "redfish://10.0.0.5:8443/redfish/v1/Systems/1";
    assert_info(
        address,
        &[
            ("redfish_address", "https://10.0.0.5:8443"),
            ("redfish_system_id", "/redfish/v1/Systems/1"),
            ("redfish_username", "admin"),
            ("redfish_password", "pw"),
        ],
    );
    assert!(!info(address).contains_key("redfish_verify_ca"));

    assert_info(
        "redfish+http://bmc.example.com/redfish/v1/Systems/abc",
        &[("redfish_address", "http://bmc.example.com")],
    );
    assert_info(
        "idrac-virtualmedia+https://[fd00::5]:443/redfish/v1/Systems/System.Embedded.1",
        &[
            ("redfish_address", "https://[fd00::5]:443"),
            ("redfish_system_id", "/redfish/v1/Systems/System.Embedded.1"),
        ],
    );
    assert_info(
        "redfish:10.0.0.5",
        &[("redfish_address", "https://10.0.0.5")],
    );
}

#[test]
fn redfish_root_path_is_not_a_system_id() {
    for address in [
        "redfish://10.0.0.5",
        "redfish://10.0.0.5/",
        "redfish://10.0.0.5/redfish/v1",
        "redfish://10.0.0.5/redfish/v1/",
    ] {
        assert!(
            !info(address).contains_key("redfish_system_id"),
            "{address}"
        );
    }
    // UEFI HTTP always passes the path.
    assert_eq!(
        info("redfish-uefihttp://10.0.0.5/")["redfish_system_id"],
        "/"
    );
}

#[test]
fn disable_certificate_verification_sets_verify_ca_false_for_redfish_only() {
    let addr = BmcAddress::parse("redfish://10.0.0.5/redfish/v1/Systems/1").unwrap();
    assert_eq!(
        addr.driver_info(&creds(), true)["redfish_verify_ca"],
        json!(false)
    );
    let addr = BmcAddress::parse("ipmi://10.0.0.5").unwrap();
    assert!(
        !addr
            .driver_info(&creds(), true)
            .contains_key("ipmi_verify_ca")
    );
}

#[test]
fn fake_scheme_is_fake_hardware_without_credentials() {
    let addr = BmcAddress::parse("fake://rack1-host07").unwrap();
    assert_eq!(addr.kind, BmcType::Fake);
    let s = addr.driver_settings(false);
    assert_eq!(s.driver, "fake-hardware");
    let i = s.interfaces;
    for iface in [
        i.boot,
        i.bios,
        i.management,
        i.power,
        i.raid,
        i.vendor,
        i.firmware,
    ] {
        assert_eq!(iface, Some("fake"));
    }
    assert!(addr.driver_info(&creds(), false).is_empty());
}

#[test]
fn driver_settings_never_contain_credentials() {
    for scheme in SCHEMES {
        let addr = BmcAddress::parse(&format!("{scheme}://192.0.2.1")).unwrap();
        let shown = serde_json::to_string(&addr.driver_settings(true)).unwrap();
        assert!(!shown.contains("\"pw\""), "{scheme}: {shown}");
        assert!(!shown.contains("admin"), "{scheme}: {shown}");
    }
}

/// Each address is refused with an error `is_expected` accepts, whose message
/// contains the text paired with the address and never the password.
fn assert_refused(is_expected: fn(&BmcAddressError) -> bool, cases: &[(&str, &str)]) {
    for (address, text) in cases {
        let err = BmcAddress::parse(address).expect_err(address);
        assert!(is_expected(&err), "{address:?}: wrong error {err:?}");
        let message = err.to_string();
        assert!(
            message.contains(text),
            "{address:?}: {message:?} lacks {text:?}"
        );
        assert!(
            !message.contains("pw@"),
            "{address:?}: message repeats the password"
        );
    }
}

#[test]
fn empty_or_unknown_bmc_types_say_what_is_wrong() {
    use BmcAddressError as E;
    assert_refused(
        |e| matches!(e, E::Empty),
        &[("", "empty"), ("   ", "empty")],
    );
    assert_refused(
        |e| matches!(e, E::UnknownScheme { .. }),
        &[
            ("foo://10.0.0.1", "unknown BMC type 'foo'"),
            ("ipmi+https://10.0.0.1", "accepted: ipmi, libvirt"),
            ("redfish+ftp://10.0.0.1", "redfish+ftp"),
            ("ilo4://10.0.0.1", "ilo4"),
        ],
    );
}

#[test]
fn addresses_without_a_host_or_with_a_bad_port_say_so() {
    use BmcAddressError as E;
    assert_refused(
        |e| matches!(e, E::MissingHost { .. }),
        &[
            ("redfish://", "has no host"),
            ("redfish:///redfish/v1/Systems/1", "has no host"),
            ("ipmi://:623", "has no host"),
            ("redfish://[]:443", "has no host"),
        ],
    );
    assert_refused(
        |e| matches!(e, E::BadPort { .. }),
        &[
            ("redfish://10.0.0.1:abc", "invalid port 'abc'"),
            ("redfish://10.0.0.1:", "invalid port ''"),
            ("10.0.0.1:0", "1 to 65535"),
            ("10.0.0.1:65536", "65536"),
            ("redfish://[fd00::1]:99999", "99999"),
        ],
    );
}

#[test]
fn bad_hosts_say_what_is_wrong() {
    use BmcAddressError as E;
    assert_refused(
        |e| matches!(e, E::BadHost { .. }),
        &[
            ("redfish://10.0.0.300", "invalid host '10.0.0.300'"),
            ("redfish://bmc_1.example.com", "bmc_1"),
            ("redfish://-bmc.example.com", "-bmc"),
            ("redfish://bmc..example.com", "invalid host"),
            ("redfish://[fd00::zz]", "fd00::zz"),
            ("redfish://[fd00::1", "invalid host"),
            ("redfish://[fd00::1]x", "invalid host"),
            ("redfish://fd00::1:443", "in brackets"),
        ],
    );
}

#[test]
fn credentials_and_whitespace_in_addresses_are_refused() {
    use BmcAddressError as E;
    assert_refused(
        |e| matches!(e, E::CredentialsInAddress { .. }),
        &[
            ("redfish://admin:pw@10.0.0.1", "credentialsName"),
            ("foo://admin:pw@10.0.0.1", "foo://***@10.0.0.1"),
        ],
    );
    assert_refused(
        |e| matches!(e, E::BadCharacters { .. }),
        &[("redfish://10.0.0.1/a b", "whitespace")],
    );
}

/// Spellings a hostile or careless user might write; none may come back in a message.
const HOSTILE_ADDRESSES: &[(&str, &str)] = &[
    ("redfish://admin:pa/Secret@10.0.0.1/", "pa/Secret"),
    ("ipmi://u:p4ssw0rd@host:99999", "p4ssw0rd"),
    ("  redfish://admin:hunter2@10.0.0.1  ", "hunter2"),
    ("redfish://admin:hun ter2@10.0.0.1", "hun ter2"),
    ("redfish://admin:hunter2\t@10.0.0.1", "hunter2"),
    ("redfish://admin:hun\nter2@", "hun"),
    ("redfish://admin:p?q#r@10.0.0.1", "p?q#r"),
    ("redfish://admin:p@ss@word@bmc_1:abc/", "ss@word"),
    ("admin:pw://x@10.0.0.1", "pw://x"),
    ("ipmi:admin:s3cr3t@10.0.0.1:623", "s3cr3t"),
    ("irmc://admin:s3cr3t@10.0.0.1", "s3cr3t"),
    ("redfish://:s3cr3t@[fd00::1", "s3cr3t"),
    ("redfish://admin:s3cr3t@", "s3cr3t"),
    ("redfish://10.0.0.1/x?user=admin:s3cr3t@y", "s3cr3t"),
    ("redfish://admin%3Apass%40host/", "%3Apass"),
    ("redfish://admin%3Apass%40host/", "%3A"),
    ("redfish://admin%3As3cr3t/redfish/v1", "s3cr3t"),
    ("ipmi://admin%3As3cr3t:623", "s3cr3t"),
    ("admin%3As3cr3t%40[fd00::1]:623", "s3cr3t"),
    ("redfish+https://admin%3Ahunter2%40%5Bfd00::1%5D", "hunter2"),
];

#[test]
fn no_error_repeats_the_userinfo_of_an_address() {
    for (address, secret) in HOSTILE_ADDRESSES {
        let err = BmcAddress::parse(address).expect_err(address);
        let message = err.to_string();
        assert!(
            !message.contains(secret),
            "{address:?}: {message:?} repeats {secret:?}"
        );
        assert!(!message.contains("admin"), "{address:?}: {message:?}");
        let redacted = crate::bmc::redact_userinfo(address);
        assert!(!redacted.contains(secret), "{address:?}: {redacted:?}");
    }
}

/// [`crate::bmc::redact_userinfo`] turns each address into the one paired with it.
fn assert_redacted(cases: &[(&str, &str)]) {
    for (address, redacted) in cases {
        assert_eq!(crate::bmc::redact_userinfo(address), *redacted, "{address}");
    }
}

#[test]
fn an_at_sign_anywhere_is_refused_as_credentials() {
    use BmcAddressError as E;
    assert_refused(
        |e| matches!(e, E::CredentialsInAddress { .. }),
        &[
            ("redfish://admin:pa/Secret@10.0.0.1/", "credentialsName"),
            ("redfish://10.0.0.1/x?user=a@b", "credentialsName"),
        ],
    );
    assert_redacted(&[
        (
            "redfish://admin:pa/Secret@10.0.0.1/",
            "redfish://***@10.0.0.1/",
        ),
        ("redfish://10.0.0.1/", "redfish://10.0.0.1/"),
    ]);
}

#[test]
fn percent_encoded_userinfo_is_refused_as_credentials_and_never_repeated() {
    use BmcAddressError as E;
    assert_refused(
        |e| matches!(e, E::CredentialsInAddress { .. }),
        &[("redfish://admin%3Apass%40host/", "credentialsName")],
    );
    assert_refused(
        |e| matches!(e, E::EncodedHost { .. }),
        &[("redfish://admin%3Apass/", "percent-encoding")],
    );
    assert_redacted(&[
        ("redfish://admin%3Apass%40host/", "redfish://***%40host/"),
        (
            "redfish://admin%3Apass/redfish/v1",
            "redfish://***/redfish/v1",
        ),
        // A path may hold percent-encoding; only the host part is hidden.
        (
            "redfish://10.0.0.1/Systems/a%2Fb",
            "redfish://10.0.0.1/Systems/a%2Fb",
        ),
    ]);
}

#[test]
fn a_bare_bracketed_ipv6_address_is_refused_as_upstream_does() {
    assert_refused(
        |e| matches!(e, BmcAddressError::BracketedIpv6WithoutPort { .. }),
        &[("[2001:db8::1]", ":623"), ("[fd00::10]", ":623")],
    );
    // With a port or a scheme, and without brackets, it is an IPMI address.
    for address in ["[2001:db8::1]:623", "ipmi://[2001:db8::1]", "2001:db8::1"] {
        let parsed = BmcAddress::parse(address).unwrap_or_else(|e| panic!("{address}: {e}"));
        assert_eq!(parsed.kind, BmcType::Ipmi, "{address}");
    }
}

#[test]
fn macs_are_normalised_or_refused() {
    assert_eq!(parse_mac("52:54:00:AB:cd:01").unwrap(), "52:54:00:ab:cd:01");
    assert_eq!(parse_mac("52-54-00-ab-cd-01").unwrap(), "52:54:00:ab:cd:01");
    for bad in [
        "",
        "52:54:00:ab:cd",
        "52:54:00:ab:cd:01:02",
        "52:54:00:ab:cd:0g",
        "5254.00ab.cd01",
        "525:4:00:ab:cd:01",
    ] {
        let err = parse_mac(bad).expect_err(bad).to_string();
        assert!(err.contains("not a MAC address"), "{bad}: {err}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4000))]

    #[test]
    fn parser_never_panics_on_any_string(s in ".{0,80}") {
        let _ = BmcAddress::parse(&s).map(|a| a.driver_info(&creds(), true));
    }

    #[test]
    fn parser_never_panics_on_address_like_strings(
        s in "(ipmi|redfish|fake|idrac-virtualmedia\\+http|x)?(:|://)?\\[?[0-9a-f:.\\]\\[@%-]{0,30}(:[0-9]{0,6})?(/[a-z0-9/]{0,10})?(\\?[a-z=&]{0,10})?"
    ) {
        let _ = BmcAddress::parse(&s).map(|a| a.driver_info(&creds(), true));
    }

    #[test]
    fn every_accepted_address_keeps_its_host_and_port(
        scheme_index in 0..SCHEMES.len(),
        a in 1u8..255, b in 0u8..255, port in 1u16..,
    ) {
        let scheme = SCHEMES[scheme_index];
        let addr = BmcAddress::parse(&format!("{scheme}://10.{a}.{b}.1:{port}/x")).unwrap();
        prop_assert_eq!(addr.port, Some(port));
        prop_assert_eq!(addr.host.to_string(), format!("10.{a}.{b}.1"));
    }
}
