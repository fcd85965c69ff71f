use super::*;
use crate::netboot::dhcp::packet6::tests::{ia_na, message6};

const CLIENT_MAC: [u8; 6] = [0x52, 0x54, 0, 0xaa, 0, 1];

/// A Relay-Forward of `inner` from a relay on `link`, with raw extra options.
fn forward(hops: u8, link: &str, inner: &[u8], extra: &[(u16, &[u8])]) -> Vec<u8> {
    let mut b = vec![RELAY_FORW, hops];
    b.extend_from_slice(&link.parse::<Ipv6Addr>().unwrap().octets());
    b.extend_from_slice(&"fe80::5054:ff:feaa:1".parse::<Ipv6Addr>().unwrap().octets());
    for (code, v) in extra {
        b.extend_from_slice(&code.to_be_bytes());
        b.extend_from_slice(&(v.len() as u16).to_be_bytes());
        b.extend_from_slice(v);
    }
    b.extend_from_slice(&9u16.to_be_bytes());
    b.extend_from_slice(&(inner.len() as u16).to_be_bytes());
    b.extend_from_slice(inner);
    b
}

fn solicit() -> Vec<u8> {
    message6(1, b"\x00\x04uuid-of-client-1", &[(3, &ia_na(1, &[]))])
}

#[test]
fn unwraps_nested_relays_and_takes_the_innermost_link_and_mac() {
    let mut lladdr = vec![0, 1];
    lladdr.extend_from_slice(&CLIENT_MAC);
    let inner = forward(0, "fd88::1", &solicit(), &[(18, b"eth1"), (79, &lladdr)]);
    let outer = forward(1, "::", &inner, &[(18, b"up0")]);
    let r = parse_relay_forward(&outer).unwrap();
    assert_eq!(r.hops.len(), 2);
    assert_eq!(r.link_address(), Some("fd88::1".parse().unwrap()));
    assert_eq!(r.client_mac(), Some(MacAddr(CLIENT_MAC)));
    assert_eq!(r.client.duid, b"\x00\x04uuid-of-client-1");

    // The reply nests the same way, each level echoing its Interface-Id.
    let wrapped = wrap_reply(&r.hops, b"\x07\x12\x34\x56".to_vec()).unwrap();
    assert_eq!(&wrapped[..2], &[13, 1]);
    let (outer_hop, middle) = read_hop(&wrapped).unwrap();
    assert_eq!(outer_hop.interface_id.as_deref(), Some(&b"up0"[..]));
    assert_eq!(middle[0], 13);
    let (inner_hop, reply) = read_hop(middle).unwrap();
    assert_eq!(inner_hop.interface_id.as_deref(), Some(&b"eth1"[..]));
    assert_eq!(
        inner_hop.link_address,
        "fd88::1".parse::<Ipv6Addr>().unwrap()
    );
    assert_eq!(reply, b"\x07\x12\x34\x56");
}

#[test]
fn without_option_79_the_mac_comes_from_an_ethernet_duid() {
    let mut llt = vec![0, 1, 0, 1, 1, 2, 3, 4];
    llt.extend_from_slice(&CLIENT_MAC);
    let msg = message6(1, &llt, &[]);
    let r = parse_relay_forward(&forward(0, "fd88::1", &msg, &[])).unwrap();
    assert_eq!(r.client_mac(), Some(MacAddr(CLIENT_MAC)));
    let r = parse_relay_forward(&forward(0, "fd88::1", &solicit(), &[])).unwrap();
    assert_eq!(r.client_mac(), None, "a DUID-UUID names no MAC");
    let mut ll = vec![0, 3, 0, 1];
    ll.extend_from_slice(&CLIENT_MAC);
    assert_eq!(mac_of_duid(&ll), Some(MacAddr(CLIENT_MAC)));
    assert_eq!(mac_of_duid(&[0, 3, 0, 6, 1, 2, 3, 4, 5, 6]), None);
}

#[test]
fn garbage_and_deep_nesting_are_refused() {
    let mut m = solicit();
    for _ in 0..MAX_HOPS {
        m = forward(0, "fd88::1", &m, &[]);
    }
    assert!(
        parse_relay_forward(&m).is_ok(),
        "{MAX_HOPS} relays are fine"
    );
    let too_deep = forward(0, "fd88::1", &m, &[]);
    assert_eq!(
        parse_relay_forward(&too_deep).unwrap_err(),
        Dhcp6ParseError::TooManyRelays
    );
    let mut no_msg = forward(0, "fd88::1", &solicit(), &[]);
    no_msg.truncate(34);
    assert_eq!(
        parse_relay_forward(&no_msg).unwrap_err(),
        Dhcp6ParseError::NoRelayMessage
    );
    assert_eq!(
        parse_relay_forward(&[RELAY_FORW, 0, 1]).unwrap_err(),
        Dhcp6ParseError::Short
    );
    let bad_79 = forward(0, "fd88::1", &solicit(), &[(79, &[0, 1, 2])]);
    assert_eq!(
        parse_relay_forward(&bad_79).unwrap_err(),
        Dhcp6ParseError::BadLength(79)
    );
    let two_msgs = forward(0, "fd88::1", &solicit(), &[(9, &solicit())]);
    assert!(parse_relay_forward(&two_msgs).is_err());
    // A relayed message that is not a client's (a Relay-Reply, an ADVERTISE).
    let reply = forward(0, "fd88::1", &message6(2, b"dd", &[]), &[]);
    assert!(parse_relay_forward(&reply).is_err());
    let mut cut = forward(0, "fd88::1", &solicit(), &[]);
    cut.pop();
    assert!(parse_relay_forward(&cut).is_err());
}

#[test]
fn the_range_is_the_one_holding_the_link_address() {
    let ranges = vec![
        Range6::parse("fd77::100,fd77::1ff,64").unwrap(),
        Range6::parse("fd88::100,fd88::1ff,64").unwrap(),
    ];
    assert_eq!(
        local_range6(&ranges, "fd77::1".parse().unwrap()),
        Some(ranges[0])
    );
    assert_eq!(
        local_range6(&ranges, "fd99::1".parse().unwrap()),
        Some(ranges[0])
    );
    let relays = Relays6::new(ranges.clone());
    let relay: Ipv6Addr = "fd77::2".parse().unwrap();
    let r = parse_relay_forward(&forward(0, "fd88::1", &solicit(), &[])).unwrap();
    assert_eq!(relays.range_for(&r, relay), Some(ranges[1]));
    let r = parse_relay_forward(&forward(0, "fd99::1", &solicit(), &[])).unwrap();
    assert_eq!(relays.range_for(&r, relay), None);
    let r = parse_relay_forward(&forward(0, "::", &solicit(), &[])).unwrap();
    assert_eq!(relays.range_for(&r, relay), None, "no link address at all");
}

#[test]
fn a_reply_that_would_not_fit_a_datagram_is_not_built() {
    let hop = RelayHop {
        hop_count: 0,
        link_address: Ipv6Addr::UNSPECIFIED,
        peer_address: Ipv6Addr::UNSPECIFIED,
        interface_id: Some(vec![0; 40_000]),
        client_mac: None,
    };
    assert!(wrap_reply(std::slice::from_ref(&hop), vec![0; 100]).is_some());
    assert!(wrap_reply(&[hop.clone(), hop], vec![0; 100]).is_none());
}
