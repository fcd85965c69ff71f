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
