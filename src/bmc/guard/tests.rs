use std::net::IpAddr;

use super::*;
use crate::api::{BareMetalHostSpec, BmcDetails, Image};

/// Every spelling of a refused address the resolver (glibc's `inet_aton` and IPv6
/// parser) turns into one.
const REFUSED: &[(&str, &str)] = &[
    ("169.254.169.254", "169.254.169.254"),
    ("169.254.0.1", "169.254.0.1"),
    ("0xa9.0xfe.0xa9.0xfe", "169.254.169.254"),
    ("0XA9.0XFE.0XA9.0XFE", "169.254.169.254"),
    ("0xa9fea9fe", "169.254.169.254"),
    ("2852039166", "169.254.169.254"),
    ("0251.0376.0251.0376", "169.254.169.254"),
    ("025177524776", "169.254.169.254"),
    ("169.254.43518", "169.254.169.254"),
    ("169.16689662", "169.254.169.254"),
    ("0xa9.0xfe.43518", "169.254.169.254"),
    ("[::ffff:169.254.169.254]", "::ffff:169.254.169.254"),
    ("::ffff:a9fe:a9fe", "::ffff:169.254.169.254"),
    ("0:0:0:0:0:ffff:a9fe:a9fe", "::ffff:169.254.169.254"),
    ("::169.254.169.254", "::169.254.169.254"),
    ("[64:ff9b::a9fe:a9fe]", "64:ff9b::a9fe:a9fe"),
    ("2002:a9fe:a9fe::1", "2002:a9fe:a9fe::1"),
    ("fe80::1", "fe80::1"),
    ("[fe80::1%25eth0]", "fe80::1"),
    ("FEBF::ffff", "febf::ffff"),
    ("fd00:ec2::254", "fd00:ec2::254"),
    ("100.100.100.200", "100.100.100.200"),
];

/// Addresses that stay allowed: loopback (the test stack's), private, documentation.
const ALLOWED: &[&str] = &[
    "127.0.0.1",
    "127.0.0.2",
    "0x7f.1",
    "2130706433",
    "::1",
    "10.0.0.5",
    "192.0.2.1",
    "169.253.255.255",
    "169.255.0.0",
    "fd00::5",
    "fec0::1",
    "::ffff:10.0.0.1",
];

#[test]
fn every_resolver_spelling_of_a_refused_address_is_refused() {
    let guard = AddressGuard::default();
    for (host, meant) in REFUSED {
        let ip = resolver_literal(host).unwrap_or_else(|| panic!("{host} is not read"));
        assert_eq!(ip, meant.parse::<IpAddr>().expect("test address"), "{host}");
        assert!(guard.refused(ip).is_some(), "{host} ({ip}) is let through");
    }
    for host in ALLOWED {
        let ip = resolver_literal(host).unwrap_or_else(|| panic!("{host} is not read"));
        assert_eq!(guard.refused(ip), None, "{host} ({ip})");
    }
}

#[test]
fn names_are_not_taken_for_numbers() {
    for host in [
        "bmc.example.com",
        "0xdead.example.com",
        "08.1.2.3",
        "1.2.3.4.5",
        "256.1.1.1",
        "1.2.0x1000000",
        "4294967296",
        "",
        ".",
        "1..2",
    ] {
        assert_eq!(resolver_literal(host), None, "{host}");
    }
    assert_eq!(
        resolver_literal("0x"),
        Some(IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED))
    );
}

#[test]
fn the_allowed_cidrs_let_their_addresses_through_and_only_those() {
    let guard = AddressGuard::allowing(vec![
        "169.254.10.0/24".parse().expect("cidr"),
        "fe80::/64".parse().expect("cidr"),
    ]);
    for host in [
        "169.254.10.5",
        "0xa9.0xfe.0x0a.5",
        "::ffff:169.254.10.5",
        "fe80::5",
    ] {
        let ip = resolver_literal(host).expect("address");
        assert_eq!(guard.refused(ip), None, "{host}");
    }
    for host in ["169.254.169.254", "fe80:0:0:1::5"] {
        let ip = resolver_literal(host).expect("address");
        assert!(guard.refused(ip).is_some(), "{host}");
    }
}

fn host(bmc: &str, image: Option<(&str, Option<&str>)>) -> BareMetalHost {
    BareMetalHost::new(
        "h",
        BareMetalHostSpec {
            bmc: Some(BmcDetails {
                address: bmc.into(),
                credentials_name: "c".into(),
                ..Default::default()
            }),
            image: image.map(|(url, checksum)| Image {
                url: url.into(),
                checksum: checksum.map(str::to_owned),
                ..Default::default()
            }),
            ..Default::default()
        },
    )
}

async fn refusal(host: &BareMetalHost) -> AddressRefused {
    AddressGuard::default()
        .check(host)
        .await
        .expect_err("refused")
}

#[tokio::test]
async fn bmc_addresses_are_refused_naming_the_field_and_host() {
    for (address, shown) in [
        ("169.254.169.254", "169.254.169.254"),
        ("ipmi://169.254.169.254:623", "169.254.169.254"),
        (
            "redfish://0xa9.0xfe.0xa9.0xfe/redfish/v1",
            "0xa9.0xfe.0xa9.0xfe",
        ),
        (
            "redfish+http://[::ffff:169.254.169.254]:8000",
            "::ffff:169.254.169.254",
        ),
        ("idrac-virtualmedia://[fe80::1]/", "fe80::1"),
        ("ipmi://[64:ff9b::a9fe:a9fe]", "64:ff9b::a9fe:a9fe"),
        (
            "redfish://metadata.google.internal/",
            "metadata.google.internal",
        ),
        ("ilo5-redfish://METADATA.goog/", "METADATA.goog"),
    ] {
        let refused = refusal(&host(address, None)).await;
        assert_eq!(refused.field, "spec.bmc.address", "{address}");
        assert_eq!(refused.host, shown, "{address}");
        let message = refused.to_string();
        assert!(
            message.starts_with("spec.bmc.address: host ")
                && message.contains(shown)
                && message.contains(ALLOWED_CIDRS_VARIABLE),
            "{address}: {message}"
        );
    }
    // The spellings the BMC parser refuses itself never reach Ironic either.
    for address in [
        "2852039166",
        "169.254.43518",
        "0251.0376.0251.0376",
        "redfish://0251.0376.0251.0376/",
    ] {
        assert!(BmcAddress::parse(address).is_err(), "{address}");
    }
}

#[tokio::test]
async fn image_urls_are_refused_naming_the_field_and_never_the_userinfo() {
    for (url, field) in [
        ("http://169.254.169.254/latest/meta-data/", "spec.image.url"),
        ("http://0xa9.0xfe.0xa9.0xfe/img.qcow2", "spec.image.url"),
        ("http://2852039166/img.qcow2", "spec.image.url"),
        ("https://169.254.43518/img.qcow2", "spec.image.url"),
        ("http://[::ffff:a9fe:a9fe]:8080/img", "spec.image.url"),
        ("http://[fe80::1%25eth0]/img", "spec.image.url"),
        ("oci://0251.0376.0251.0376/repo/image", "spec.image.url"),
        ("http://admin:s3cr3t@169.254.169.254/img", "spec.image.url"),
        ("ftp://metadata.google.internal./img", "spec.image.url"),
        ("http://169.254.169.254./img", "spec.image.url"),
        ("http://0xa9fea9fe./img", "spec.image.url"),
    ] {
        let refused = refusal(&host("fake://h", Some((url, Some("abc"))))).await;
        assert_eq!(refused.field, field, "{url}");
        assert!(
            url.contains(&refused.host),
            "{url}: shown as {}",
            refused.host
        );
        let message = refused.to_string();
        assert!(
            message.starts_with("spec.image.url: host "),
            "{url}: {message}"
        );
        assert!(
            !message.contains("s3cr3t") && !message.contains("admin"),
            "{message}"
        );
    }
    let refused = refusal(&host(
        "fake://h",
        Some((
            "http://127.0.0.1/img",
            Some("http://169.254.169.254/img.sha256"),
        )),
    ))
    .await;
    assert_eq!(refused.field, "spec.image.checksum");
}

#[tokio::test]
async fn loopback_private_names_and_fake_hosts_pass() {
    let guard = AddressGuard::default();
    for (bmc, image) in [
        (
            "redfish+http://127.0.0.1:8000/redfish/v1/Systems/1",
            "http://127.0.0.1:6180/img",
        ),
        ("ipmi://[::1]:6230", "http://[::1]/img"),
        ("192.0.2.10", "https://localhost/img"),
        ("fake://metadata", "http://10.0.0.9/img"),
        ("redfish://localhost/", "oci://127.0.0.1:5000/repo"),
    ] {
        let host = host(bmc, Some((image, Some("0123abcd"))));
        assert_eq!(guard.check(&host).await, Ok(()), "{bmc} {image}");
    }
}

#[tokio::test]
async fn a_host_being_deleted_is_not_checked() {
    let mut deleting = host("169.254.169.254", None);
    deleting.metadata.deletion_timestamp =
        Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
        ));
    let guard = AddressGuard::default();
    assert_eq!(guard.checked(&deleting, Ok::<_, String>(7)).await, Ok(7));
    let live = host("169.254.169.254", None);
    let message = guard
        .checked(&live, Ok::<_, String>(7))
        .await
        .expect_err("refused");
    assert!(
        message.starts_with("spec.bmc.address: host 169.254.169.254 is 169.254.169.254"),
        "{message}"
    );
    assert_eq!(
        guard.checked(&live, Err::<u8, _>("earlier".into())).await,
        Err("earlier".into())
    );
}

#[tokio::test]
async fn names_are_resolved_and_refused_when_an_answer_is() {
    // The system resolver answers for localhost from /etc/hosts, without DNS.
    let localhost = resolve("localhost").await;
    assert!(
        !localhost.is_empty() && localhost.iter().all(IpAddr::is_loopback),
        "{localhost:?}"
    );
    let guard = AddressGuard::default();
    let metadata: IpAddr = "169.254.169.254".parse().expect("address");
    let loopback: IpAddr = "127.0.0.1".parse().expect("address");
    let refused = guard
        .check_resolved("spec.bmc.address", "bmc.example.com", &[loopback, metadata])
        .expect_err("one answer is the metadata address");
    assert_eq!(
        refused.to_string(),
        "spec.bmc.address: host bmc.example.com resolves to 169.254.169.254, a link-local address (169.254.0.0/16); bmo does not let Ironic connect there (list the range in BMO_ALLOWED_LINK_LOCAL_CIDRS if this site needs it)"
    );
    let mapped: IpAddr = "::ffff:169.254.169.254".parse().expect("address");
    assert!(
        guard
            .check_resolved("spec.image.url", "images", &[mapped])
            .is_err()
    );
    assert_eq!(
        guard.check_resolved("spec.bmc.address", "bmc", &[loopback]),
        Ok(())
    );
    assert_eq!(
        guard.check_resolved("spec.bmc.address", "gone", &[]),
        Ok(())
    );
    let allowing = AddressGuard::allowing(vec!["169.254.169.254/32".parse().expect("cidr")]);
    assert_eq!(
        allowing.check_resolved("spec.bmc.address", "bmc", &[metadata]),
        Ok(())
    );
}

#[derive(Debug, clap::Parser)]
struct Cli {
    #[command(flatten)]
    addresses: AddressSettings,
}

#[test]
fn the_setting_is_a_comma_separated_list_of_cidrs_checked_at_parse_time() {
    use clap::Parser;
    let cli = Cli::try_parse_from([
        "bmo",
        "--allowed-link-local-cidrs",
        "169.254.10.0/24,fe80::/64",
    ])
    .expect("two CIDRs");
    let guard = cli.addresses.guard();
    assert_eq!(
        guard.refused("169.254.10.9".parse().expect("address")),
        None
    );
    assert!(
        guard
            .refused("169.254.169.254".parse().expect("address"))
            .is_some()
    );
    let none = Cli::try_parse_from(["bmo"]).expect("no setting");
    assert_eq!(none.addresses.guard(), AddressGuard::default());
    let error = Cli::try_parse_from(["bmo", "--allowed-link-local-cidrs", "169.254.0.0"])
        .expect_err("not a CIDR")
        .to_string();
    assert!(error.contains("not a CIDR"), "{error}");
}
