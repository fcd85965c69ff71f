//! bmo behind real DHCP relays (issue 39): three namespaces, bmo's (`srv0`,
//! 10.77.0.1/24, fd77::1/64), a relay's with two links (`up0` toward bmo, `down0`
//! 10.88.0.1/24 and fd88::1/64 on the client's subnet) and a client's (`cli0`).
//! ISC dhcrelay relays DHCPv4 (with option 82) and DHCPv6 (with an Interface-Id),
//! dnsmasq relays DHCPv6 with the client's link-layer address (option 79); dhclient
//! and dhclient -6 get an address of their own subnet's range, recorded in bmo's
//! lease table under the client's MAC. A relay from a subnet no range covers is
//! not answered and is named once in the log. Router advertisements reach a real
//! client (rdisc6, and the kernel) when asked, and nothing is sent when not.

use std::net::{IpAddr, Ipv6Addr};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use bmo::netboot::boot_log::{BootStep, Client};
use bmo::netboot::config::{DhcpMode, NetbootConfig};
use bmo::netboot::leases::{Lease, LeaseState, LeaseTable};
use bmo::netboot::mac::MacAddr;

use crate::netboot_dhcp6::{config6, mac_of, wait_dad};
use crate::support::netboot::{
    ChildGuard, Netns, NsRef, TempDir, TestNet, config, eventually, ip, require, run, spawn,
};

/// bmo's namespace, the relay's and the client's.
struct RelayNet {
    server: Netns,
    relay: Netns,
    client: Netns,
}

impl RelayNet {
    fn new() -> RelayNet {
        let net = RelayNet {
            server: Netns::new("s"),
            relay: Netns::new("r"),
            client: Netns::new("c"),
        };
        let (s, r, c) = (&net.server.name, &net.relay.name, &net.client.name);
        ip(&[
            "-n", s, "link", "add", "srv0", "type", "veth", "peer", "name", "up0", "netns", r,
        ]);
        ip(&[
            "-n", r, "link", "add", "down0", "type", "veth", "peer", "name", "cli0", "netns", c,
        ]);
        for (ns, dev, v4, v6) in [
            (s, "srv0", "10.77.0.1/24", "fd77::1/64"),
            (r, "up0", "10.77.0.2/24", "fd77::2/64"),
            (r, "down0", "10.88.0.1/24", "fd88::1/64"),
        ] {
            ip(&["-n", ns, "addr", "add", v4, "dev", dev]);
            ip(&["-n", ns, "addr", "add", v6, "dev", dev, "nodad"]);
            ip(&["-n", ns, "link", "set", dev, "up"]);
        }
        ip(&["-n", c, "link", "set", "cli0", "up"]);
        // bmo's routes back to the client subnet go through the relay.
        ip(&["-n", s, "route", "add", "10.88.0.0/24", "via", "10.77.0.2"]);
        ip(&["-n", s, "-6", "route", "add", "fd88::/64", "via", "fd77::2"]);
        for key in ["net.ipv4.ip_forward=1", "net.ipv6.conf.all.forwarding=1"] {
            run(net.relay.command("sysctl").args(["-qw", key]));
        }
        for (ns, dev) in [(s, "srv0"), (r, "up0"), (r, "down0"), (c, "cli0")] {
            wait_dad(ns, dev);
        }
        net
    }
}

/// Netboot settings with a range on bmo's link and one on the relayed subnet.
fn config_v4(dir: &Path, ranges: &str) -> NetbootConfig {
    let mut cfg = config(dir);
    cfg.dhcp_mode = DhcpMode::Full;
    cfg.dhcp_range = Some(ranges.parse().unwrap());
    cfg
}

/// dhclient (v4) on `cli0`, configuring nothing; returns it and its lease file.
fn dhclient4(ns: &NsRef, dir: &Path) -> (ChildGuard, PathBuf) {
    let conf = dir.join("dhclient.conf");
    std::fs::write(&conf, "request subnet-mask, routers;\n").unwrap();
    let leases = dir.join("dhclient.leases");
    let guard = spawn(ns.command("dhclient").args([
        "-4",
        "-d",
        "-v",
        "-cf",
        conf.to_str().unwrap(),
        "-lf",
        leases.to_str().unwrap(),
        "-pf",
        dir.join("dhclient.pid").to_str().unwrap(),
        "-sf",
        "/bin/true",
        "cli0",
    ]));
    (guard, leases)
}

/// dhclient -6 on `cli0` (stateful), configuring nothing. `duid`, when given, is
/// written to its lease file first as the DUID it must use.
fn dhclient6(ns: &NsRef, dir: &Path, duid: Option<&[u8]>) -> (ChildGuard, PathBuf) {
    let conf = dir.join("dhclient6.conf");
    std::fs::write(&conf, "send dhcp6.client-arch-type 7;\n").unwrap();
    let leases = dir.join("dhclient6.leases");
    if let Some(duid) = duid {
        let octal: String = duid.iter().map(|b| format!("\\{b:03o}")).collect();
        std::fs::write(&leases, format!("default-duid \"{octal}\";\n")).unwrap();
    }
    let guard = spawn(ns.command("dhclient").args([
        "-6",
        "-d",
        "-v",
        "-cf",
        conf.to_str().unwrap(),
        "-lf",
        leases.to_str().unwrap(),
        "-pf",
        dir.join("dhclient6.pid").to_str().unwrap(),
        "-sf",
        "/bin/true",
        "cli0",
    ]));
    (guard, leases)
}

/// The file at `path` once it holds `needle`.
async fn file_with(path: &Path, needle: &str) -> String {
    eventually(
        &format!("{needle:?} in {}", path.display()),
        Duration::from_secs(30),
        || {
            std::fs::read_to_string(path)
                .ok()
                .filter(|s| s.contains(needle))
        },
    )
    .await
}

/// `mac`'s lease once bound.
async fn bound(leases: &LeaseTable, mac: MacAddr) -> Lease {
    eventually(
        "the relayed client's lease",
        Duration::from_secs(40),
        || leases.get(&mac).filter(|l| l.state == LeaseState::Bound),
    )
    .await
}

fn in_v6(ip: Ipv6Addr, start: &str, end: &str) -> bool {
    let (s, e): (Ipv6Addr, Ipv6Addr) = (start.parse().unwrap(), end.parse().unwrap());
    (u128::from(s)..=u128::from(e)).contains(&u128::from(ip))
}

#[test]
fn dhclient_behind_dhcrelay_gets_an_address_of_its_subnet_and_the_reply_goes_through_the_relay() {
    let _shared = crate::support::shared();
    require(&["dhclient", "dhcrelay", "ip"]);
    let net = RelayNet::new();
    let dir = TempDir::new("relay4");
    let cfg = config_v4(
        dir.path(),
        "10.77.0.50,10.77.0.60,24;10.88.0.50,10.88.0.60,24",
    );
    let cli_mac = mac_of(&net.client, "cli0");
    let (relay, client, dirp) = (
        net.relay.handle(),
        net.client.handle(),
        dir.path().to_owned(),
    );
    net.server.block_on(move || async move {
        let nb = bmo::netboot::start(&cfg, LeaseTable::in_memory())
            .await
            .expect("start");
        // -a: the relay adds option 82 (circuit id: its interface), which bmo echoes.
        let _relay = spawn(relay.command("dhcrelay").args([
            "-4",
            "-d",
            "-a",
            "--no-pid",
            "-iu",
            "up0",
            "-id",
            "down0",
            "10.77.0.1",
        ]));
        let (_dhclient, client_leases) = dhclient4(&client, &dirp);
        let lease = bound(&nb.leases, cli_mac).await;
        let leased = lease.ip.expect("an IPv4 address").to_string();
        let octet: u8 = leased
            .strip_prefix("10.88.0.")
            .and_then(|o| o.parse().ok())
            .unwrap_or_else(|| panic!("{leased} is not on the relayed subnet"));
        assert!((50..=60).contains(&octet), "{leased} outside its range");
        // What the client took, through the relay: the address, the relay as its
        // router, bmo as the server.
        let text = file_with(&client_leases, &format!("fixed-address {leased};")).await;
        assert!(text.contains("option routers 10.88.0.1;"), "{text}");
        assert!(
            text.contains("option dhcp-server-identifier 10.77.0.1;"),
            "{text}"
        );
        assert!(text.contains("option subnet-mask 255.255.255.0;"), "{text}");
    });
}

#[test]
fn a_relay_on_a_subnet_without_a_range_gets_no_answer_and_is_logged_once() {
    let _shared = crate::support::shared();
    require(&["dhclient", "dhcrelay", "ip"]);
    let log = crate::netboot_host::captured_log();
    // The capture's filter decides per call site when the site is first hit: the
    // warning's site may have been hit already while nothing captured (the property
    // tests send relayed requests from nowhere), so its interest is asked again.
    tracing::callsite::rebuild_interest_cache();
    let net = RelayNet::new();
    let dir = TempDir::new("relay4-none");
    // ironic-image's single range: bmo's own link only.
    let cfg = config_v4(dir.path(), "10.77.0.50,10.77.0.60,24");
    let cli_mac = mac_of(&net.client, "cli0");
    let (relay, client, dirp) = (
        net.relay.handle(),
        net.client.handle(),
        dir.path().to_owned(),
    );
    net.server.block_on(move || async move {
        let nb = bmo::netboot::start(&cfg, LeaseTable::in_memory())
            .await
            .expect("start");
        let _relay = spawn(relay.command("dhcrelay").args([
            "-4",
            "-d",
            "--no-pid",
            "-iu",
            "up0",
            "-id",
            "down0",
            "10.77.0.1",
        ]));
        let (_dhclient, _) = dhclient4(&client, &dirp);
        // dhclient retries: three relayed DISCOVERs, none answered.
        let unanswered = eventually(
            "three relayed DISCOVERs in the boot log",
            Duration::from_secs(40),
            || {
                let steps: Vec<BootStep> = nb
                    .boot_log
                    .timelines()
                    .into_iter()
                    .filter(|t| t.client == Client::Mac(cli_mac))
                    .flat_map(|t| t.events)
                    .map(|e| e.step)
                    .collect();
                (steps.len() >= 3).then_some(steps)
            },
        )
        .await;
        assert!(
            unanswered
                .iter()
                .all(|s| matches!(s, BootStep::Dhcp { reply: None, .. })),
            "{unanswered:?}"
        );
        assert!(nb.leases.get(&cli_mac).is_none(), "no record, no lease");
    });
    let text = log.text();
    let warnings: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("no DHCP_RANGE covers") && l.contains("relay=10.88.0.1"))
        .collect();
    assert_eq!(warnings.len(), 1, "{text}");
    assert!(
        warnings[0].contains("add a range on that subnet to DHCP_RANGE"),
        "{}",
        warnings[0]
    );
}

/// bmo serving fd77::/64 and the relayed fd88::/64.
fn config_v6(dir: &Path) -> NetbootConfig {
    let mut cfg = config6(dir, DhcpMode::Full);
    cfg.dhcp_range = Some(
        "fd77::100,fd77::1ff,64;fd88::100,fd88::1ff,64"
            .parse()
            .unwrap(),
    );
    cfg
}

#[test]
fn dhclient6_behind_dhcrelay_6_gets_an_address_of_its_link_keyed_by_its_mac() {
    let _shared = crate::support::shared();
    require(&["dhclient", "dhcrelay", "ip"]);
    let net = RelayNet::new();
    let dir = TempDir::new("relay6");
    let cfg = config_v6(dir.path());
    let cli_mac = mac_of(&net.client, "cli0");
    let (relay, client, dirp) = (
        net.relay.handle(),
        net.client.handle(),
        dir.path().to_owned(),
    );
    net.server.block_on(move || async move {
        let nb = bmo::netboot::start(&cfg, LeaseTable::in_memory())
            .await
            .expect("start");
        // -I: the relay sends an Interface-Id, which must come back in the Relay-Reply.
        let _relay = spawn(relay.command("dhcrelay").args([
            "-6",
            "-d",
            "--no-pid",
            "-I",
            "-l",
            "down0",
            "-u",
            "fd77::1%up0",
        ]));
        // dhclient's DUID-LLT carries its MAC; ISC's relay adds no option 79.
        let (_dhclient, client_leases) = dhclient6(&client, &dirp, None);
        let lease = bound(&nb.leases, cli_mac).await;
        let leased = lease.ip6.expect("an IPv6 address");
        assert!(in_v6(leased, "fd88::100", "fd88::1ff"), "{leased}");
        assert_eq!(lease.arch, Some(7));
        let text = file_with(&client_leases, &format!("iaaddr {leased}")).await;
        assert!(
            text.contains("tftp://[fd77::1]/snponly-x86_64.efi"),
            "{text}"
        );
    });
}

#[test]
fn dhclient6_behind_dnsmasq_relay_is_keyed_by_the_mac_the_relay_adds() {
    let _shared = crate::support::shared();
    require(&["dhclient", "dnsmasq", "ip"]);
    let net = RelayNet::new();
    let dir = TempDir::new("relay6-dnsmasq");
    let cfg = config_v6(dir.path());
    let cli_mac = mac_of(&net.client, "cli0");
    let (relay, client, dirp) = (
        net.relay.handle(),
        net.client.handle(),
        dir.path().to_owned(),
    );
    net.server.block_on(move || async move {
        let nb = bmo::netboot::start(&cfg, LeaseTable::in_memory())
            .await
            .expect("start");
        let _relay = spawn(relay.command("dnsmasq").args([
            "--keep-in-foreground",
            "--no-daemon",
            "--port=0",
            "--log-facility=-",
            "--interface=down0",
            "--interface=up0",
            "--dhcp-relay=fd88::1,fd77::1",
            "--pid-file=",
            "--conf-file=/dev/null",
        ]));
        // A DUID-UUID, as OVMF and iPXE send: no MAC in it, so the lease's key
        // can only come from the relay's option 79.
        let mut uuid_duid = vec![0, 4];
        uuid_duid.extend_from_slice(b"relayed-uuid-123");
        let (_dhclient, client_leases) = dhclient6(&client, &dirp, Some(&uuid_duid));
        let lease = bound(&nb.leases, cli_mac).await;
        let leased = lease.ip6.expect("an IPv6 address");
        assert!(in_v6(leased, "fd88::100", "fd88::1ff"), "{leased}");
        assert_eq!(lease.duid.as_deref(), Some(&uuid_duid[..]));
        file_with(&client_leases, &format!("iaaddr {leased}")).await;
    });
}

/// ICMPv6 router advertisements the namespace `ns` has received.
fn advertisements_received(ns: &NsRef) -> u64 {
    let snmp = run(ns.command("cat").arg("/proc/net/snmp6"));
    snmp.lines()
        .find_map(|l| l.strip_prefix("Icmp6InRouterAdvertisements"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// rdisc6's report of one solicitation round, whitespace squeezed; `None` when no
/// router answered.
async fn rdisc6(ns: &NsRef) -> Option<String> {
    let mut cmd = ns.command("rdisc6");
    cmd.args(["-1", "-r", "6", "-w", "1000", "cli0"]);
    let out = tokio::process::Command::from(cmd)
        .output()
        .await
        .expect("rdisc6");
    let text = String::from_utf8_lossy(&out.stdout);
    let squeezed: Vec<String> = text
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect();
    out.status.success().then(|| squeezed.join("\n"))
}

fn client_net() -> TestNet {
    let net = TestNet::new(false);
    // The client's kernel solicits no more: what it receives is sent unasked.
    run(net
        .client
        .command("sysctl")
        .args(["-qw", "net.ipv6.conf.cli0.router_solicitations=0"]));
    wait_dad(&net.server.name, "srv0");
    wait_dad(&net.client.name, "cli0");
    net
}

#[test]
fn router_advertisements_reach_a_real_client_only_when_asked() {
    let _shared = crate::support::shared();
    require(&["rdisc6", "ip"]);
    let net = client_net();
    let dir = TempDir::new("ra");
    let client = net.client.handle();
    let mut cfg = config6(dir.path(), DhcpMode::Full);
    net.server.block_on(move || async move {
        // Off (the default): a client soliciting gets no answer.
        assert!(!cfg.router_advertisements);
        let nb = bmo::netboot::start(&cfg, LeaseTable::in_memory())
            .await
            .expect("start");
        assert_eq!(rdisc6(&client).await, None, "an advertisement while off");
        assert_eq!(advertisements_received(&client), 0);
        drop(nb);

        cfg.router_advertisements = true;
        let _nb = bmo::netboot::start(&cfg, LeaseTable::in_memory())
            .await
            .expect("start");
        // Unsolicited: the advertisements bmo sends at start.
        eventually(
            "two unsolicited advertisements",
            Duration::from_secs(15),
            || (advertisements_received(&client) >= 2).then_some(()),
        )
        .await;
        // The kernel took the prefix as on-link, for the advertised lifetime.
        let routes = run(Command::new("ip").args(["-n", &client.name, "-6", "route"]));
        assert!(
            routes
                .lines()
                .any(|l| l.starts_with("fd77::/64") && l.contains("expires 86")),
            "{routes}"
        );
        assert!(
            !routes.contains("default"),
            "bmo is no default router: {routes}"
        );
        // Solicited: rdisc6's Router Solicitation is answered.
        let report = rdisc6(&client).await.expect("an answer to rdisc6");
        for line in [
            "Stateful address conf. : Yes",
            "Stateful other conf. : No",
            "Router lifetime : 0",
            "Prefix : fd77::/64",
            "Autonomous address conf.: No",
        ] {
            assert!(report.contains(line), "{line:?} in {report}");
        }
    });
}

#[test]
fn router_advertisements_in_proxy_mode_say_other_config_and_let_the_client_use_slaac() {
    let _shared = crate::support::shared();
    require(&["rdisc6", "ip"]);
    let net = client_net();
    let dir = TempDir::new("ra-proxy");
    let client = net.client.handle();
    let mut cfg = config6(dir.path(), DhcpMode::Proxy);
    cfg.dhcp_range = None;
    cfg.router_advertisements = true;
    let cli_mac = mac_of(&net.client, "cli0");
    net.server.block_on(move || async move {
        let _nb = bmo::netboot::start(&cfg, LeaseTable::in_memory())
            .await
            .expect("start");
        let report = rdisc6(&client).await.expect("an answer to rdisc6");
        for line in [
            "Stateful address conf. : No",
            "Stateful other conf. : Yes",
            "Prefix : fd77::/64",
            "Autonomous address conf.: Yes",
        ] {
            assert!(report.contains(line), "{line:?} in {report}");
        }
        // The kernel forms its SLAAC address from the prefix and the MAC.
        let b = cli_mac.0;
        let eui64 = Ipv6Addr::new(
            0xfd77,
            0,
            0,
            0,
            u16::from_be_bytes([b[0] ^ 2, b[1]]),
            u16::from_be_bytes([b[2], 0xff]),
            u16::from_be_bytes([0xfe, b[3]]),
            u16::from_be_bytes([b[4], b[5]]),
        );
        eventually(
            "the client's SLAAC address",
            Duration::from_secs(15),
            || {
                let addrs = run(Command::new("ip").args([
                    "-n",
                    &client.name,
                    "-6",
                    "addr",
                    "show",
                    "dev",
                    "cli0",
                ]));
                addrs
                    .contains(&format!("{}/64", IpAddr::V6(eui64)))
                    .then_some(())
            },
        )
        .await;
    });
}
