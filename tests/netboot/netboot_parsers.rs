//! Property tests: random and mutated datagrams fed to the DHCP and TFTP parsers
//! (and, when a DHCP request parses, to the reply policy and encoder) never panic.

use bmo::netboot::dhcp::packet::parse_request;
use bmo::netboot::dhcp::policy::{Mode, Policy};
use bmo::netboot::dhcp::range::Range;
use bmo::netboot::leases::LeaseTable;
use bmo::netboot::tftp::packet;
use dhcproto::{Encodable, Encoder};
use proptest::prelude::*;

fn policy(proxy: bool) -> Policy {
    Policy {
        mode: if proxy {
            Mode::Proxy
        } else {
            Mode::Full {
                range: Range::parse("10.0.0.10,10.0.0.20,24").unwrap(),
            }
        },
        server_ip: "10.0.0.1".parse().unwrap(),
        netmask: "255.255.255.0".parse().unwrap(),
        router: Some("10.0.0.254".parse().unwrap()),
        dns: None,
        lease_secs: 600,
        http_base: "http://10.0.0.1:6180".into(),
        hosts: Default::default(),
        known_only: false,
    }
}

/// A BOOTREQUEST header with the magic cookie, followed by `options`.
fn dhcp_with_options(mac: [u8; 6], options: &[u8]) -> Vec<u8> {
    let mut b = vec![0u8; 236];
    b[0] = 1;
    b[1] = 1;
    b[2] = 6;
    b[28..34].copy_from_slice(&mac);
    b.extend_from_slice(&[99, 130, 83, 99]);
    b.extend_from_slice(options);
    b
}

fn option_bytes() -> impl Strategy<Value = Vec<u8>> {
    // Mostly well-formed TLVs with a message type, sometimes garbage.
    let tlv = (any::<u8>(), proptest::collection::vec(any::<u8>(), 0..40)).prop_map(|(code, v)| {
        let mut o = vec![code, v.len() as u8];
        o.extend(v);
        o
    });
    (
        1u8..=8,
        proptest::collection::vec(tlv, 0..12),
        proptest::collection::vec(any::<u8>(), 0..8),
    )
        .prop_map(|(ty, tlvs, tail)| {
            let mut o = vec![53, 1, ty];
            for t in tlvs {
                o.extend(t);
            }
            o.extend(tail);
            o
        })
}

fn exercise_dhcp(bytes: &[u8]) {
    if let Ok(req) = parse_request(bytes) {
        for proxy in [false, true] {
            for port in [false, true] {
                let leases = LeaseTable::in_memory();
                if let Some((reply, _)) = policy(proxy).answer(&req, &leases, port) {
                    let mut out = Vec::new();
                    reply
                        .encode(&mut Encoder::new(&mut out))
                        .expect("replies encode");
                    assert!(
                        parse_request(&out).is_err(),
                        "a reply must not parse as a request"
                    );
                }
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 3000, ..ProptestConfig::default() })]

    #[test]
    fn dhcp_random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
        let _shared = crate::support::shared();
        exercise_dhcp(&bytes);
    }

    #[test]
    fn dhcp_random_header_never_panics(header in proptest::collection::vec(any::<u8>(), 236), options in option_bytes()) {
        let _shared = crate::support::shared();
        let mut b = header;
        b.extend_from_slice(&[99, 130, 83, 99]);
        b.extend_from_slice(&options);
        exercise_dhcp(&b);
    }

    #[test]
    fn dhcp_random_options_never_panic(mac in any::<[u8; 6]>(), options in option_bytes()) {
        let _shared = crate::support::shared();
        exercise_dhcp(&dhcp_with_options(mac, &options));
    }

    #[test]
    fn tftp_random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
        let _shared = crate::support::shared();
        if let Ok(packet::Packet::Read(req)) = packet::parse(&bytes) {
            let n = packet::negotiate(&req, 1 << 20, packet::MAX_BLKSIZE);
            prop_assert!((8..=packet::MAX_BLKSIZE).contains(&n.blksize));
            prop_assert!((1..=packet::MAX_WINDOW).contains(&n.windowsize));
        }
    }

    #[test]
    fn tftp_requests_with_random_options_never_panic(
        name in "[a-z./]{0,20}",
        opts in proptest::collection::vec(("(blksize|tsize|timeout|windowsize|[a-z]{1,8})", "[0-9a-z-]{0,8}"), 0..6),
        truncate in any::<usize>(),
    ) {
        let _shared = crate::support::shared();
        let mut b = vec![0, 1];
        b.extend_from_slice(name.as_bytes());
        b.extend_from_slice(b"\0octet\0");
        for (k, v) in &opts {
            b.extend_from_slice(k.as_bytes());
            b.push(0);
            b.extend_from_slice(v.as_bytes());
            b.push(0);
        }
        let full = packet::parse(&b);
        prop_assert!(matches!(full, Ok(packet::Packet::Read(_))), "{full:?}");
        let cut = truncate % (b.len() + 1);
        let _ = packet::parse(&b[..cut]);
        if let Ok(packet::Packet::Read(req)) = full {
            let n = packet::negotiate(&req, 42, 1468);
            prop_assert!(n.blksize <= 1468);
        }
    }
}

/// Relay agent information (option 82) sub-options: mostly well-formed, with link
/// selections of every length, sometimes cut short.
fn relay_agent_info() -> impl Strategy<Value = Vec<u8>> {
    let sub = (
        prop_oneof![Just(1u8), Just(2), Just(5), any::<u8>()],
        proptest::collection::vec(any::<u8>(), 0..8),
    )
        .prop_map(|(code, v)| {
            let mut o = vec![code, v.len() as u8];
            o.extend(v);
            o
        });
    (proptest::collection::vec(sub, 0..5), any::<usize>()).prop_map(|(subs, cut)| {
        let all: Vec<u8> = subs.concat();
        let keep = if cut % 4 == 0 {
            cut % (all.len() + 1)
        } else {
            all.len()
        };
        all[..keep].to_vec()
    })
}

fn relays_v4() -> bmo::netboot::dhcp::relay::Relays {
    bmo::netboot::dhcp::relay::Relays::new(
        [
            "10.0.0.10,10.0.0.20,24",
            "10.88.0.10,10.88.0.20,24",
            "10.89.0.10,10.89.0.20",
        ]
        .iter()
        .map(|r| Range::parse(r).unwrap())
        .collect(),
    )
}

/// A nested DHCPv6 Relay-Forward: `depth` relays around `inner`, each with random
/// extra options (Interface-Id, option 79 of any length, others).
fn relay_forward6(depth: usize, inner: Vec<u8>, extras: &[Vec<(u16, Vec<u8>)>]) -> Vec<u8> {
    let mut m = inner;
    for level in 0..depth {
        let mut b = vec![12, level as u8];
        let link: std::net::Ipv6Addr = if level == 0 { "fd88::1" } else { "::" }.parse().unwrap();
        b.extend_from_slice(&link.octets());
        b.extend_from_slice(&"fe80::1".parse::<std::net::Ipv6Addr>().unwrap().octets());
        let mut push = |code: u16, v: &[u8]| {
            b.extend_from_slice(&code.to_be_bytes());
            b.extend_from_slice(&(v.len() as u16).to_be_bytes());
            b.extend_from_slice(v);
        };
        for (code, v) in extras.get(level).map(Vec::as_slice).unwrap_or(&[]) {
            push(*code, v);
        }
        push(9, &m);
        m = b;
    }
    m
}

fn relay_option6() -> impl Strategy<Value = (u16, Vec<u8>)> {
    (
        prop_oneof![Just(18u16), Just(79), Just(9), Just(37), any::<u16>()],
        proptest::collection::vec(any::<u8>(), 0..12),
    )
}

fn exercise_relay6(bytes: &[u8]) {
    use bmo::netboot::dhcp::relay6::{MAX_HOPS, Relays6, parse_relay_forward, wrap_reply};
    let Ok(relayed) = parse_relay_forward(bytes) else {
        return;
    };
    assert!(!relayed.hops.is_empty() && relayed.hops.len() <= MAX_HOPS);
    let relays = Relays6::new(vec![
        bmo::netboot::dhcp::range::Range6::parse("fd77::10,fd77::30").unwrap(),
        bmo::netboot::dhcp::range::Range6::parse("fd88::10,fd88::30").unwrap(),
    ]);
    let range = relays.range_for(&relayed, "fd77::2".parse().unwrap());
    if let (Some(mac), Some(range)) = (relayed.client_mac(), range) {
        let leases = LeaseTable::in_memory();
        if let Some(reply) = policy6().answer_in(&relayed.client, mac, &leases, Some(&range)) {
            let mut out = Vec::new();
            reply
                .encode(&mut Encoder::new(&mut out))
                .expect("replies encode");
            let wrapped = wrap_reply(&relayed.hops, out).expect("a small reply fits");
            assert_eq!(wrapped[0], 13);
            assert!(
                parse_relay_forward(&wrapped).is_err(),
                "a Relay-Reply is no request"
            );
        }
    }
}

fn policy6() -> bmo::netboot::dhcp::policy6::Policy6 {
    use bmo::netboot::dhcp::policy6::{Mode6, Policy6};
    Policy6 {
        mode: Mode6::Full {
            range: bmo::netboot::dhcp::range::Range6::parse("fd77::10,fd77::30").unwrap(),
        },
        server_duid: vec![0, 3, 0, 1, 2, 0, 0, 0, 0, 1],
        server_ip: "fd77::1".parse().unwrap(),
        http_port: 6180,
        dns: None,
        lease_secs: 600,
        hosts: Default::default(),
        known_only: false,
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn relayed_dhcp_with_random_relay_addresses_and_option_82_never_panics(
        mac in any::<[u8; 6]>(),
        giaddr in prop_oneof![Just([10u8, 88, 0, 1]), Just([10, 0, 0, 7]), any::<[u8; 4]>()],
        ciaddr in prop_oneof![Just([0u8; 4]), Just([10, 88, 0, 12]), any::<[u8; 4]>()],
        info in relay_agent_info(),
        options in option_bytes(),
    ) {
        let _shared = crate::support::shared();
        let mut b = dhcp_with_options(mac, &[]);
        b[12..16].copy_from_slice(&ciaddr);
        b[24..28].copy_from_slice(&giaddr);
        b.extend_from_slice(&[82, info.len() as u8]);
        b.extend_from_slice(&info);
        b.extend_from_slice(&options);
        let Ok(req) = parse_request(&b) else {
            return Ok(());
        };
        let relays = relays_v4();
        for proxy in [false, true] {
            let leases = LeaseTable::in_memory();
            let Some((reply, dest)) = relays.answer(&policy(proxy), &req, &leases, false) else {
                continue;
            };
            let mut out = Vec::new();
            bmo::netboot::dhcp::relay::encode_reply(&reply, &req, &mut out).expect("replies encode");
            prop_assert!(parse_request(&out).is_err(), "a reply must not parse as a request");
            if giaddr != [0; 4] {
                let to = std::net::SocketAddrV4::new(giaddr.into(), 67);
                prop_assert_eq!(dest, bmo::netboot::dhcp::policy::Destination::Unicast(to));
            }
            for ip in leases.list().iter().filter_map(|l| l.ip) {
                let [a, b, _, _] = ip.octets();
                prop_assert!((a, b) == (10, 0) || (a, b) == (10, 88) || (a, b) == (10, 89), "{ip}");
            }
        }
    }

    #[test]
    fn dhcpv6_relay_forwards_nested_at_random_never_panic(
        depth in 0usize..12,
        kind in prop_oneof![Just(1u8), Just(3), Just(12), any::<u8>()],
        extras in proptest::collection::vec(proptest::collection::vec(relay_option6(), 0..4), 0..12),
        duid in prop_oneof![
            Just(vec![0u8, 1, 0, 1, 0, 0, 0, 1, 0x52, 0x54, 0, 0, 0, 1]),
            Just(vec![0u8, 4, 1, 2, 3, 4]),
            proptest::collection::vec(any::<u8>(), 0..20),
        ],
        tail in proptest::collection::vec(any::<u8>(), 0..16),
        cut in any::<usize>(),
    ) {
        let _shared = crate::support::shared();
        let mut inner = vec![kind, 1, 2, 3, 0, 1];
        inner.extend_from_slice(&(duid.len() as u16).to_be_bytes());
        inner.extend_from_slice(&duid);
        inner.extend_from_slice(&[0, 3, 0, 12, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0]);
        inner.extend_from_slice(&tail);
        let b = relay_forward6(depth, inner, &extras);
        exercise_relay6(&b);
        exercise_relay6(&b[..cut % (b.len() + 1)]);
    }

    #[test]
    fn dhcpv6_relay_random_bytes_never_panic(mut bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
        let _shared = crate::support::shared();
        if let Some(first) = bytes.first_mut() {
            *first = 12;
        }
        exercise_relay6(&bytes);
    }
}
