//! bmo's DHCP server against clients that should get nothing (issue 36): all-zero,
//! broadcast and multicast hardware addresses, and RELEASE, DECLINE and INFORM
//! from MACs bmo never leased to. Raw requests from a client network namespace.

use std::time::Duration;

use bmo::netboot::leases::LeaseTable;
use bmo::netboot::mac::MacAddr;
use dhcproto::v4::{DhcpOption, MessageType};

use crate::netboot_dhcp::{discover, full_config, pxe};
use crate::support::netboot::{TempDir, TestNet, require};

#[test]
fn zero_group_addresses_and_messages_from_strangers_make_no_lease() {
    let _shared = crate::support::shared();
    require(&["ip"]);
    let net = TestNet::new(false);
    let dir = TempDir::new("dhcp-abuse");
    let cfg = full_config(dir.path());
    let client = net.client.handle();
    net.server.block_on(move || async move {
        let nb = bmo::netboot::start(&cfg, LeaseTable::in_memory())
            .await
            .expect("start");
        let ask = |mac: [u8; 6], ty: MessageType| {
            let c = client.clone();
            tokio::task::spawn_blocking(move || {
                let extra = vec![DhcpOption::MessageType(ty)];
                discover(&c, "cli0", mac, extra, pxe(0), Duration::from_secs(1))
            })
        };
        let group = [
            [0; 6],
            [0xff; 6],
            [0x01, 0x00, 0x5e, 0, 0, 1],
            [0x33, 0x33, 0, 0, 0, 1],
        ];
        for mac in group {
            let offers = ask(mac, MessageType::Discover).await.expect("client");
            assert!(offers.is_empty(), "{mac:02x?} got {offers:?}");
        }
        let stranger = [0x52, 0x54, 0, 0x66, 0, 1];
        for ty in [
            MessageType::Release,
            MessageType::Decline,
            MessageType::Inform,
        ] {
            ask(stranger, ty).await.expect("client");
        }
        let leases = nb.leases.list();
        assert!(leases.is_empty(), "lease records made: {leases:?}");
        // A unicast client beside them is served and recorded.
        let mac = [0x52, 0x54, 0, 0x66, 0, 2];
        let offers = ask(mac, MessageType::Discover).await.expect("client");
        assert_eq!(offers.len(), 1, "{offers:?}");
        assert!(nb.leases.get(&MacAddr(mac)).is_some());
    });
}
