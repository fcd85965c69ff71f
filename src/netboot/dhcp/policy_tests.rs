use super::*;
use crate::netboot::dhcp::packet::parse_request;
use crate::netboot::dhcp::packet::tests::discover;

fn policy(mode: Mode) -> Policy {
    Policy {
        mode,
        server_ip: "10.9.0.1".parse().unwrap(),
        netmask: "255.255.255.0".parse().unwrap(),
        router: None,
        dns: None,
        lease_secs: 600,
        http_base: "http://10.9.0.1:6180".into(),
        hosts: HostDirectory::default(),
        known_only: false,
    }
}

fn full() -> Mode {
    Mode::Full {
        range: Range::parse("10.9.0.10,10.9.0.20,24").unwrap(),
    }
}

fn bootfile(m: &Message) -> Option<String> {
    match m.opts().get(OptionCode::BootfileName) {
        Some(DhcpOption::BootfileName(b)) => Some(String::from_utf8_lossy(b).into_owned()),
        _ => None,
    }
}

#[test]
fn arch_picks_loader() {
    let p = policy(full());
    let leases = LeaseTable::in_memory();
    for (arch, want) in [
        (0u16, "undionly.kpxe"),
        (7, "snponly-x86_64.efi"),
        (9, "snponly-x86_64.efi"),
        (11, "snponly-arm64.efi"),
    ] {
        let vc = format!("PXEClient:Arch:{arch:05}:UNDI:003016");
        let b = discover(
            [0x52, 0, 0, 0, 0, arch as u8],
            &[(93, &arch.to_be_bytes()), (60, vc.as_bytes())],
        );
        let (m, _) = p
            .answer(&parse_request(&b).unwrap(), &leases, false)
            .unwrap();
        assert_eq!(bootfile(&m).as_deref(), Some(want), "arch {arch}");
        assert_eq!(m.siaddr().to_string(), "10.9.0.1");
        assert!(
            m.opts().get(OptionCode::ClassIdentifier).is_none(),
            "arch {arch}: a full-mode offer with PXEClient sends UEFI firmware to port 4011"
        );
        assert!(!m.yiaddr().is_unspecified());
    }
}

#[test]
fn ipxe_gets_the_script_and_plain_clients_no_bootfile() {
    let p = policy(full());
    let leases = LeaseTable::in_memory();
    let b = discover(
        [2, 2, 3, 4, 5, 6],
        &[
            (175, &[19, 1, 1]),
            (60, b"PXEClient:Arch:00000:UNDI:002001"),
        ],
    );
    let (m, _) = p
        .answer(&parse_request(&b).unwrap(), &leases, false)
        .unwrap();
    assert_eq!(
        bootfile(&m).as_deref(),
        Some("http://10.9.0.1:6180/boot.ipxe")
    );
    let b = discover([2, 2, 3, 4, 5, 7], &[(12, b"plain")]);
    let (m, d) = p
        .answer(&parse_request(&b).unwrap(), &leases, false)
        .unwrap();
    assert_eq!(bootfile(&m), None);
    assert_eq!(d, Destination::Broadcast);
}

#[test]
fn uefi_http_boot_gets_a_url() {
    let p = policy(full());
    let b = discover(
        [2, 2, 3, 4, 5, 8],
        &[
            (93, &16u16.to_be_bytes()),
            (60, b"HTTPClient:Arch:00016:UNDI:003001"),
        ],
    );
    let (m, _) = p
        .answer(&parse_request(&b).unwrap(), &LeaseTable::in_memory(), false)
        .unwrap();
    assert_eq!(
        bootfile(&m).as_deref(),
        Some("http://10.9.0.1:6180/ipxe/ipxe-x86_64.efi")
    );
    assert!(
        matches!(m.opts().get(OptionCode::ClassIdentifier), Some(DhcpOption::ClassIdentifier(v)) if v == b"HTTPClient")
    );
}

#[test]
fn proxy_mode_offers_no_address_and_ignores_plain_clients() {
    let p = policy(Mode::Proxy);
    let leases = LeaseTable::in_memory();
    let b = discover(
        [8, 9, 9, 9, 9, 9],
        &[
            (93, &7u16.to_be_bytes()),
            (60, b"PXEClient:Arch:00007:UNDI:003016"),
        ],
    );
    let (m, _) = p
        .answer(&parse_request(&b).unwrap(), &leases, false)
        .unwrap();
    assert!(m.yiaddr().is_unspecified());
    assert_eq!(bootfile(&m).as_deref(), Some("snponly-x86_64.efi"));
    assert!(m.opts().get(OptionCode::AddressLeaseTime).is_none());
    assert!(
        matches!(m.opts().get(OptionCode::VendorExtensions), Some(DhcpOption::VendorExtensions(v)) if v == &vec![6, 1, 8, 255])
    );
    let b = discover([8, 9, 9, 9, 9, 8], &[(12, b"plain")]);
    assert!(
        p.answer(&parse_request(&b).unwrap(), &leases, false)
            .is_none()
    );
    assert!(
        leases.get(&"08:09:09:09:09:08".parse().unwrap()).is_some(),
        "still recorded"
    );
}

#[test]
fn known_only_answers_dhcp_hosts_and_attached_hosts_and_records_the_rest() {
    use crate::netboot::hosts::StaticHosts;

    struct Cluster;
    impl KnownHosts for Cluster {
        fn lookup(&self, mac: &crate::netboot::mac::MacAddr) -> Option<KnownHost> {
            (mac.0 == [2, 0, 0, 0, 0, 2]).then(|| KnownHost {
                name: "ns/booting".into(),
                fixed_ip: None,
            })
        }
    }
    let fixed: crate::netboot::config::DhcpHosts =
        "02:00:00:00:00:01,10.9.0.200;02:00:00:00:00:04,10.9.0.15"
            .parse()
            .unwrap();
    let mut p = policy(full());
    p.hosts = HostDirectory::new(StaticHosts::new(Some(&fixed)));
    p.known_only = true;
    let leases = LeaseTable::in_memory();
    let offer = |p: &Policy, mac: [u8; 6], extra: &[(u8, &[u8])]| {
        p.answer(
            &parse_request(&discover(mac, extra)).unwrap(),
            &leases,
            false,
        )
        .map(|(m, _)| m.yiaddr().to_string())
    };

    assert_eq!(
        offer(&p, [2, 0, 0, 0, 0, 1], &[]).as_deref(),
        Some("10.9.0.200"),
        "DHCP_HOSTS: its fixed address, outside the range"
    );
    assert_eq!(offer(&p, [2, 0, 0, 0, 0, 2], &[]), None, "not attached yet");
    p.hosts.attach(std::sync::Arc::new(Cluster));
    assert_eq!(
        offer(&p, [2, 0, 0, 0, 0, 2], &[]).as_deref(),
        Some("10.9.0.10"),
        "a cluster host: an address from the range"
    );
    assert_eq!(offer(&p, [2, 0, 0, 0, 0, 3], &[]), None, "unknown");
    assert!(
        leases.get(&"02:00:00:00:00:03".parse().unwrap()).is_some(),
        "an unknown client is still recorded (discovery sees it)"
    );

    p.known_only = false;
    assert_eq!(
        offer(&p, [2, 0, 0, 0, 0, 3], &[(50, &[10, 9, 0, 15])]).as_deref(),
        Some("10.9.0.11"),
        "answered without known-only, but never with another host's fixed address"
    );
}

/// A client message of type `ty` from `mac`, with hostname `name` if given.
fn message(mac: [u8; 6], ty: MessageType) -> Vec<u8> {
    use dhcproto::{Encodable, Encoder};
    let unspecified = Ipv4Addr::UNSPECIFIED;
    let mut msg = Message::new(unspecified, unspecified, unspecified, unspecified, &mac);
    msg.opts_mut().insert(DhcpOption::MessageType(ty));
    let mut buf = Vec::new();
    msg.encode(&mut Encoder::new(&mut buf)).unwrap();
    buf
}

#[test]
fn zero_broadcast_and_multicast_hardware_addresses_get_nothing() {
    for mode in [full(), Mode::Proxy] {
        let p = policy(mode);
        let leases = LeaseTable::in_memory();
        let pxe: &[(u8, &[u8])] = &[(60, b"PXEClient:Arch:00000:UNDI:002001")];
        for mac in [
            [0; 6],
            [0xff; 6],
            [1, 0, 0x5e, 0, 0, 1],
            [0x33, 0x33, 0, 0, 0, 1],
        ] {
            let req = parse_request(&discover(mac, pxe)).unwrap();
            assert!(p.answer(&req, &leases, false).is_none(), "{mac:?}");
        }
        assert!(leases.is_empty(), "{:?}", leases.list());
        let req = parse_request(&discover([2, 0, 0, 0, 0, 1], pxe)).unwrap();
        assert!(
            p.answer(&req, &leases, false).is_some(),
            "a unicast MAC is answered"
        );
    }
}

#[test]
fn release_decline_and_inform_from_unknown_macs_make_no_record() {
    let p = policy(full());
    let leases = LeaseTable::in_memory();
    for ty in [
        MessageType::Release,
        MessageType::Decline,
        MessageType::Inform,
    ] {
        let req = parse_request(&message([2, 0, 0, 0, 0, 9], ty)).unwrap();
        p.answer(&req, &leases, false);
    }
    assert!(leases.is_empty(), "{:?}", leases.list());
    // A known client's RELEASE still gives its address back.
    let offered = p.answer(
        &parse_request(&discover([2, 0, 0, 0, 0, 9], &[])).unwrap(),
        &leases,
        false,
    );
    assert!(offered.is_some());
    let req = parse_request(&message([2, 0, 0, 0, 0, 9], MessageType::Release)).unwrap();
    p.answer(&req, &leases, false);
    let lease = leases.get(&"02:00:00:00:00:09".parse().unwrap()).unwrap();
    assert_eq!(lease.state, LeaseState::Released);
}

#[test]
fn only_valid_client_host_names_are_recorded() {
    let p = policy(full());
    let leases = LeaseTable::in_memory();
    for (n, name) in [&b"node\n1"[..], b"\x1b[31mred\x07", "a\u{202e}b".as_bytes()]
        .into_iter()
        .enumerate()
    {
        let req = parse_request(&discover([2, 0, 0, 0, 1, n as u8], &[(12, name)])).unwrap();
        assert!(p.answer(&req, &leases, false).is_some(), "still answered");
    }
    assert!(
        leases.list().iter().all(|l| l.hostname.is_none()),
        "{:?}",
        leases.list()
    );
    let req = parse_request(&discover([2, 0, 0, 0, 2, 0], &[(12, b"worker-1")])).unwrap();
    p.answer(&req, &leases, false);
    let lease = leases.get(&"02:00:00:00:02:00".parse().unwrap()).unwrap();
    assert_eq!(lease.hostname.as_deref(), Some("worker-1"));
}
