use super::*;
use crate::netboot::dhcp::packet::parse_request;
use crate::netboot::dhcp::policy::Mode;
use crate::netboot::hosts::HostDirectory;
use dhcproto::v4::{DhcpOption, MessageType, OptionCode};
use dhcproto::{Encodable, Encoder};

const LOCAL: &str = "10.9.0.10,10.9.0.20,24";
const REMOTE: &str = "10.88.0.50,10.88.0.60,24";

fn setup() -> (Policy, Relays) {
    let ranges: Vec<Range> = [LOCAL, REMOTE, "10.89.0.50,10.89.0.60"]
        .iter()
        .map(|r| Range::parse(r).unwrap())
        .collect();
    let local = local_range(
        &ranges,
        "10.9.0.1".parse().unwrap(),
        "255.255.255.0".parse().unwrap(),
    );
    let policy = Policy {
        mode: Mode::Full {
            range: local.unwrap(),
        },
        server_ip: "10.9.0.1".parse().unwrap(),
        netmask: "255.255.255.0".parse().unwrap(),
        router: Some("10.9.0.254".parse().unwrap()),
        dns: None,
        lease_secs: 600,
        http_base: "http://10.9.0.1:6180".into(),
        hosts: HostDirectory::default(),
        known_only: false,
    };
    (policy, Relays::new(ranges))
}

/// A `ty` message from `mac` through relay `giaddr` (unspecified: not relayed),
/// from a client at `ciaddr`, with raw option 82 `info`.
fn request(
    mac: u8,
    ty: MessageType,
    giaddr: &str,
    ciaddr: &str,
    info: Option<&[u8]>,
) -> ClientRequest {
    let mut m = Message::new(
        ciaddr.parse().unwrap(),
        Ipv4Addr::UNSPECIFIED,
        Ipv4Addr::UNSPECIFIED,
        giaddr.parse().unwrap(),
        &[2, 0, 0, 0, 0, mac],
    );
    m.opts_mut().insert(DhcpOption::MessageType(ty));
    let mut b = Vec::new();
    m.encode(&mut Encoder::new(&mut b)).unwrap();
    if let Some(info) = info {
        assert_eq!(b.pop(), Some(255));
        b.extend_from_slice(&[82, info.len() as u8]);
        b.extend_from_slice(info);
        b.push(255);
    }
    parse_request(&b).unwrap()
}

fn router(m: &Message) -> Option<Ipv4Addr> {
    match m.opts().get(OptionCode::Router) {
        Some(DhcpOption::Router(r)) => r.first().copied(),
        _ => None,
    }
}

#[test]
fn a_relayed_request_gets_its_subnets_range_and_goes_back_to_the_relay() {
    let (p, relays) = setup();
    let leases = LeaseTable::in_memory();
    let info: &[u8] = &[1, 3, b'e', b't', b'h'];
    let req = request(1, MessageType::Discover, "10.88.0.1", "0.0.0.0", Some(info));
    let (m, dest) = relays.answer(&p, &req, &leases, false).unwrap();
    assert_eq!(m.yiaddr().to_string(), "10.88.0.50");
    assert_eq!(m.giaddr().to_string(), "10.88.0.1");
    assert_eq!(dest, Destination::Unicast("10.88.0.1:67".parse().unwrap()));
    assert_eq!(
        router(&m),
        Some("10.88.0.1".parse().unwrap()),
        "the relay routes its subnet"
    );
    let mut wire = Vec::new();
    encode_reply(&m, &req, &mut wire).unwrap();
    let raw = crate::netboot::dhcp::packet::raw_options(&wire).unwrap();
    assert!(
        raw.iter().any(|(c, v)| *c == 82 && v == info),
        "option 82 echoed: {raw:?}"
    );
    let req = request(1, MessageType::Request, "10.88.0.1", "0.0.0.0", None);
    let mut req = req;
    req.requested_ip = Some("10.88.0.50".parse().unwrap());
    let (m, _) = relays.answer(&p, &req, &leases, false).unwrap();
    assert_eq!(m.opts().msg_type(), Some(MessageType::Ack));
    let lease = leases.get(&"02:00:00:00:00:01".parse().unwrap()).unwrap();
    assert_eq!(
        lease.ip.map(|ip| ip.to_string()).as_deref(),
        Some("10.88.0.50")
    );

    // Renewing straight with bmo later (unicast, no relay): still its subnet's range.
    let mut renew = request(1, MessageType::Request, "0.0.0.0", "10.88.0.50", None);
    renew.requested_ip = None;
    let (m, dest) = relays.answer(&p, &renew, &leases, false).unwrap();
    assert_eq!(
        (m.opts().msg_type(), m.yiaddr().to_string()),
        (Some(MessageType::Ack), "10.88.0.50".into())
    );
    assert_eq!(router(&m), Some("10.88.0.1".parse().unwrap()));
    assert_eq!(dest, Destination::Unicast("10.88.0.50:68".parse().unwrap()));
}

#[test]
fn link_selection_names_the_subnet_and_the_reply_still_goes_to_giaddr() {
    let (p, relays) = setup();
    let leases = LeaseTable::in_memory();
    // The relay's own address is on the provisioning subnet; sub-option 5 names 10.89.0.0.
    let info: &[u8] = &[5, 4, 10, 89, 0, 0];
    let req = request(2, MessageType::Discover, "10.9.0.7", "0.0.0.0", Some(info));
    let (m, dest) = relays.answer(&p, &req, &leases, false).unwrap();
    assert_eq!(m.yiaddr().to_string(), "10.89.0.50");
    assert_eq!(dest, Destination::Unicast("10.9.0.7:67".parse().unwrap()));
    assert_eq!(router(&m), None, "the relay is not on the client's subnet");
}

#[test]
fn a_relay_on_no_ranges_subnet_gets_nothing_and_plain_requests_are_unchanged() {
    let (p, relays) = setup();
    let leases = LeaseTable::in_memory();
    for _ in 0..3 {
        let req = request(3, MessageType::Discover, "192.168.5.1", "0.0.0.0", None);
        assert!(relays.answer(&p, &req, &leases, false).is_none());
    }
    assert!(
        !relays
            .shared
            .warned
            .first("192.168.5.1".parse::<Ipv4Addr>().unwrap().into())
    );
    let req = request(4, MessageType::Discover, "0.0.0.0", "0.0.0.0", None);
    let (m, dest) = relays.answer(&p, &req, &leases, false).unwrap();
    assert_eq!(m.yiaddr().to_string(), "10.9.0.10");
    assert_eq!(router(&m), Some("10.9.0.254".parse().unwrap()));
    assert_eq!(dest, Destination::Broadcast);
    assert_eq!(
        Some((m, dest)),
        p.answer(&req, &LeaseTable::in_memory(), false)
    );
}

#[test]
fn the_warned_set_is_bounded() {
    let w = WarnOnce::default();
    let firsts = (0..1000u32)
        .filter(|n| w.first(Ipv4Addr::from(*n).into()))
        .count();
    assert_eq!(firsts, MAX_WARNED);
}
