use std::net::Ipv4Addr;

use super::*;
use crate::netboot::mac::MacAddr;

fn mac(n: u8) -> MacAddr {
    MacAddr([0x52, 0x54, 0, 0, 0, n])
}

/// No address is fixed for anyone.
fn none_fixed(_: Ipv4Addr) -> Option<MacAddr> {
    None
}

#[test]
fn allocation_skips_live_leases_and_reservations() {
    let t = LeaseTable::in_memory();
    let (start, end) = ("10.0.0.10".parse().unwrap(), "10.0.0.12".parse().unwrap());
    let fixed: Ipv4Addr = "10.0.0.10".parse().unwrap();
    let reserved_for = |ip: Ipv4Addr| (ip == fixed).then_some(mac(9));
    t.see(mac(1), Sighting::default(), false);
    let a = t
        .allocate(mac(1), None, None, (start, end), &reserved_for)
        .unwrap();
    assert_eq!(a.to_string(), "10.0.0.11");
    t.assign(mac(1), a, LeaseState::Bound, 60);
    t.see(mac(2), Sighting::default(), false);
    assert_eq!(
        t.allocate(mac(2), None, Some(a), (start, end), &reserved_for)
            .unwrap()
            .to_string(),
        "10.0.0.12"
    );
    assert_eq!(
        t.allocate(mac(1), None, None, (start, end), &reserved_for),
        Some(a),
        "a client keeps its address"
    );
    assert_eq!(
        t.allocate(mac(9), Some(fixed), None, (start, end), &reserved_for)
            .unwrap()
            .to_string(),
        "10.0.0.10"
    );
    t.assign(mac(2), "10.0.0.12".parse().unwrap(), LeaseState::Bound, 60);
    t.see(mac(3), Sighting::default(), false);
    assert_eq!(
        t.allocate(mac(3), None, None, (start, end), &reserved_for),
        None,
        "range exhausted"
    );
    assert!(
        !t.may_bind(mac(3), fixed, &reserved_for),
        "a fixed address is never bound to another MAC"
    );
    t.release(mac(2));
    assert_eq!(
        t.allocate(mac(3), None, None, (start, end), &reserved_for)
            .unwrap()
            .to_string(),
        "10.0.0.12"
    );
}

#[test]
fn a_full_range_of_mere_offers_still_serves_a_new_client() {
    let t = LeaseTable::in_memory();
    let (start, end) = ("10.0.0.10".parse().unwrap(), "10.0.0.11".parse().unwrap());
    // Two flooding MACs hold every address with offers they never request.
    for n in 1..=2 {
        t.see(mac(n), Sighting::default(), false);
        let ip = t
            .allocate(mac(n), None, None, (start, end), &none_fixed)
            .unwrap();
        t.assign(mac(n), ip, LeaseState::Offered, 30);
    }
    // A real client still gets an offer, and its REQUEST beats the offer.
    t.see(mac(7), Sighting::default(), false);
    let ip = t
        .allocate(mac(7), None, None, (start, end), &none_fixed)
        .expect("an offer");
    assert!(t.may_bind(mac(7), ip, &none_fixed));
    t.assign(mac(7), ip, LeaseState::Bound, 60);
    let loser = (1..=2)
        .map(|n| t.get(&mac(n)).unwrap())
        .find(|l| l.state == LeaseState::Released)
        .expect("the offer given away");
    assert_eq!(loser.ip, None);
    // A bound lease is never taken by a later client.
    t.see(mac(8), Sighting::default(), false);
    assert_ne!(
        t.allocate(mac(8), None, None, (start, end), &none_fixed),
        Some(ip)
    );
    assert!(!t.may_bind(mac(8), ip, &none_fixed));
}

#[test]
fn a_full_table_makes_room_from_records_without_live_leases_only() {
    let t = LeaseTable::in_memory();
    t.set_limits(LeaseLimits {
        max_leases: 20,
        retention_secs: 3600,
    });
    let ip = |n: u8| Ipv4Addr::new(10, 0, 0, n);
    for n in 0..20 {
        assert!(t.see(mac(n), Sighting::default(), false));
        t.assign(mac(n), ip(n), LeaseState::Bound, 600);
    }
    assert!(
        !t.see(mac(100), Sighting::default(), false),
        "a table full of live leases takes no new client"
    );
    t.release(mac(3));
    assert!(t.see(mac(100), Sighting::default(), false));
    assert!(t.get(&mac(3)).is_none(), "the released record made room");
    assert_eq!(t.len(), 20);
}

#[tokio::test]
async fn persists_across_reopen() {
    let dir = std::env::temp_dir().join(format!("bmo-leases-{}", std::process::id()));
    let path = dir.join("leases.json");
    let _ = std::fs::remove_file(&path);
    let t = LeaseTable::open(&path).unwrap();
    t.see(
        mac(1),
        Sighting {
            arch: Some(7),
            ..Default::default()
        },
        false,
    );
    t.assign(mac(1), "10.0.0.5".parse().unwrap(), LeaseState::Bound, 600);
    assert!(t.mark_discovered(&mac(1)));
    assert!(!t.mark_discovered(&mac(2)), "an unknown MAC is not marked");
    t.flush().await.unwrap();
    let again = LeaseTable::open(&path).unwrap();
    let l = again.get(&mac(1)).unwrap();
    assert_eq!(
        (l.ip, l.arch, l.state),
        (
            Some("10.0.0.5".parse().unwrap()),
            Some(7),
            LeaseState::Bound
        )
    );
    assert!(l.discovered_unix.is_some(), "discovery's record survives");
    let _ = std::fs::remove_dir_all(dir);
}

// Host names (option 12) as the table keeps them: see `netboot::hostname`.

#[test]
fn only_valid_host_names_are_kept() {
    let t = LeaseTable::in_memory();
    let mac = MacAddr([2, 0, 0, 0, 0, 1]);
    let see = |name: &[u8]| {
        let hostname_raw = Some(name.to_vec());
        t.see(
            mac,
            Sighting {
                hostname_raw,
                ..Default::default()
            },
            false,
        )
    };
    see(b"node-1");
    // Control characters, invalid UTF-8 or too long: dropped, the valid one stays.
    for bad in [&b"node\xff1"[..], b"a\nb", b"\x1b[31mred", &[b'a'; 300]] {
        see(bad);
        assert_eq!(t.get(&mac).unwrap().hostname.as_deref(), Some("node-1"));
    }
    let json = serde_json::to_string(&t.get(&mac).unwrap()).unwrap();
    assert!(json.contains("\"hostname_raw\":\"6e6f64652d31\""), "{json}");
}

#[test]
fn invalid_host_names_in_an_older_lease_file_are_dropped_on_load() {
    let dir = std::env::temp_dir().join(format!("bmo-hostname-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("leases.json");
    // "a\nb" and "ok-1", hex as the file keeps them.
    let lease = |mac: &str, hex: &str| {
        format!(
            r#"{{"mac":"{mac}","ip":null,"state":"released","expires_unix":0,"hostname_raw":"{hex}","arch":null,"vendor_class":null,"ipxe":false,"first_seen_unix":1,"last_seen_unix":1}}"#
        )
    };
    let file = format!(
        r#"{{"version":1,"leases":[{},{}]}}"#,
        lease("02:00:00:00:00:01", "610a62"),
        lease("02:00:00:00:00:02", "6f6b2d31")
    );
    std::fs::write(&path, file).unwrap();
    let t = LeaseTable::open(&path).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let names: Vec<Option<String>> = t.list().into_iter().map(|l| l.hostname).collect();
    assert_eq!(names, [None, Some("ok-1".to_owned())]);
}
