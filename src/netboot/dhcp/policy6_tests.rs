use super::*;
use crate::netboot::dhcp::packet6::parse_request6;
use crate::netboot::dhcp::packet6::tests::{ia_na, message6};
use crate::netboot::hosts::StaticHosts;

const MAC: MacAddr = MacAddr([0x52, 0x54, 0, 0, 0, 1]);

/// A policy in `mode` and an empty lease table, as each test starts.
fn setup(mode: Mode6) -> (Policy6, LeaseTable) {
    let policy = Policy6 {
        mode,
        server_duid: vec![0, 3, 0, 1, 2, 0, 0, 0, 0, 9],
        server_ip: "fd00::1".parse().unwrap(),
        http_port: 6180,
        dns: None,
        lease_secs: 3600,
        hosts: HostDirectory::new(StaticHosts::new(None)),
        known_only: false,
    };
    (policy, LeaseTable::in_memory())
}

fn full() -> Mode6 {
    Mode6::Full {
        range: Range6::parse("fd00::10,fd00::20").unwrap(),
    }
}

fn vendor(class: &[u8]) -> Vec<u8> {
    let mut v = 343u32.to_be_bytes().to_vec();
    v.extend_from_slice(&(class.len() as u16).to_be_bytes());
    v.extend_from_slice(class);
    v
}

fn unknown(m: &Message, code: u16) -> Option<String> {
    m.opts().iter().find_map(|o| match o {
        DhcpOption::Unknown(u) if u16::from(u.code()) == code => {
            Some(String::from_utf8_lossy(u.data()).into_owned())
        }
        _ => None,
    })
}

fn address(m: &Message) -> Option<Ipv6Addr> {
    match m.opts().get(OptionCode::IANA) {
        Some(DhcpOption::IANA(ia)) => match ia.opts.get(OptionCode::IAAddr) {
            Some(DhcpOption::IAAddr(a)) => Some(a.addr),
            _ => None,
        },
        _ => None,
    }
}

fn ask(p: &Policy6, leases: &LeaseTable, kind: u8, extra: &[(u16, &[u8])]) -> Option<Message> {
    let req = parse_request6(&message6(kind, b"\x00\x04client-uuid-1234", extra)).unwrap();
    p.answer(&req, MAC, leases)
}

#[test]
fn uefi_pxe_gets_an_address_then_binds_it_with_the_tftp_loader() {
    let (p, leases) = setup(full());
    let pxe = vendor(b"PXEClient:Arch:00007:UNDI:003016");
    let ia = ia_na(1, &[]);
    let sol: &[(u16, &[u8])] = &[(3, &ia), (6, &[0, 59, 0, 60]), (16, &pxe), (61, &[0, 7])];
    let adv = ask(&p, &leases, 1, sol).unwrap();
    assert_eq!(adv.msg_type(), MessageType::Advertise);
    let addr = address(&adv).unwrap();
    assert_eq!(addr.to_string(), "fd00::10");
    assert_eq!(
        unknown(&adv, 59).as_deref(),
        Some("tftp://[fd00::1]/snponly-x86_64.efi")
    );
    // OVMF asks for option 60 but reads it as the loader's size: an answer it
    // cannot parse makes it give up the boot (seen on a VM, tests/vm/vm_ipv6.rs).
    assert_eq!(unknown(&adv, 60), None, "no boot file parameters");
    assert_eq!(leases.get(&MAC).unwrap().state, LeaseState::Offered);

    let ia = ia_na(1, &[addr]);
    let sid = p.server_duid.clone();
    let req: &[(u16, &[u8])] = &[(2, &sid), (3, &ia), (16, &pxe), (61, &[0, 7])];
    let reply = ask(&p, &leases, 3, req).unwrap();
    assert_eq!(
        (reply.msg_type(), address(&reply)),
        (MessageType::Reply, Some(addr))
    );
    let lease = leases.get(&MAC).unwrap();
    assert_eq!((lease.state, lease.ip6), (LeaseState::Bound, Some(addr)));
    assert_eq!(leases.mac_of_duid(b"\x00\x04client-uuid-1234"), Some(MAC));

    // A REQUEST for another server is not ours.
    let other: &[(u16, &[u8])] = &[(2, b"\x00\x03other"), (3, &ia)];
    assert!(ask(&p, &leases, 3, other).is_none());
}

#[test]
fn http_boot_and_ipxe_get_http_urls_with_the_vendor_class_echoed() {
    let (p, leases) = setup(full());
    let http = vendor(b"HTTPClient:Arch:00016:UNDI:003001");
    let ia = ia_na(1, &[]);
    let adv = ask(&p, &leases, 1, &[(3, &ia), (16, &http), (61, &[0, 16])]).unwrap();
    assert_eq!(
        unknown(&adv, 59).as_deref(),
        Some("http://[fd00::1]:6180/ipxe/ipxe-x86_64.efi")
    );
    assert!(matches!(
        adv.opts().get(OptionCode::VendorClass),
        Some(DhcpOption::VendorClass(v)) if v.num == 343 && v.data == vec![b"HTTPClient".to_vec()]
    ));
    assert_eq!(unknown(&adv, 60), None, "not asked for");
    let ipxe: &[(u16, &[u8])] = &[
        (3, &ia),
        (15, &[0, 4, b'i', b'P', b'X', b'E']),
        (61, &[0, 7]),
    ];
    let adv = ask(&p, &leases, 1, ipxe).unwrap();
    assert_eq!(
        unknown(&adv, 59).as_deref(),
        Some("http://[fd00::1]:6180/boot.ipxe")
    );
    // A plain client gets an address but no boot file.
    let adv = ask(&p, &leases, 1, &[(3, &ia)]).unwrap();
    assert!(address(&adv).is_some() && unknown(&adv, 59).is_none());
}

#[test]
fn proxy_mode_gives_boot_information_and_no_address() {
    let (p, leases) = setup(Mode6::Proxy);
    let ia = ia_na(1, &[]);
    let sol: &[(u16, &[u8])] = &[(3, &ia), (61, &[0, 7])];
    let adv = ask(&p, &leases, 1, sol).unwrap();
    assert_eq!(address(&adv), None);
    assert!(unknown(&adv, 59).is_some());
    assert_eq!(leases.get(&MAC).unwrap().state, LeaseState::Proxy);
    let info = ask(&p, &leases, 11, &[(61, &[0, 7])]).unwrap();
    assert_eq!(info.msg_type(), MessageType::Reply);
    assert!(unknown(&info, 59).is_some());
    assert!(
        ask(&p, &leases, 1, &[(3, &ia)]).is_none(),
        "not a netboot client"
    );
}

#[test]
fn fqdn_becomes_the_hostname_only_when_valid_and_the_cap_holds() {
    let (mut p, leases) = setup(full());
    let ia = ia_na(1, &[]);
    ask(&p, &leases, 1, &[(3, &ia), (39, b"\x00\x05bad\x1b!")]).unwrap();
    assert_eq!(leases.get(&MAC).unwrap().hostname, None);
    ask(
        &p,
        &leases,
        1,
        &[(3, &ia), (39, b"\x00\x06node-1\x03lab\x00")],
    )
    .unwrap();
    assert_eq!(
        leases.get(&MAC).unwrap().hostname.as_deref(),
        Some("node-1.lab")
    );

    // Full table of live leases: a new DUID on a new MAC is not answered.
    leases.set_limits(crate::netboot::leases::LeaseLimits {
        max_leases: 16,
        retention_secs: 3600,
    });
    p.mode = Mode6::Full {
        range: Range6::parse("fd00::10,fd00::100").unwrap(),
    };
    let sid = p.server_duid.clone();
    for n in 0..20u8 {
        let duid = [0, 4, n];
        let mac = MacAddr([2, 0, 0, 0, 1, n]);
        let req = parse_request6(&message6(3, &duid, &[(2, &sid), (3, &ia)])).unwrap();
        let answered = p.answer(&req, mac, &leases).is_some();
        // 16 records: the first client's mere offer makes room for the 16th.
        assert_eq!(answered, n < 16, "client {n}");
    }
    assert_eq!(leases.len(), 16);
}
