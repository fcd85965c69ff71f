//! bmo's DHCP server against dhclient and busybox udhcpc, and against raw
//! firmware-like requests, server and clients in their own network namespaces:
//! leases with the hostname each client sent (only valid host names), leases
//! kept across a restart, the loader per client architecture, the iPXE script,
//! and proxyDHCP beside dnsmasq handing out the addresses.

use std::net::Ipv4Addr;
use std::process::Command;
use std::time::Duration;

use bmo::netboot::boot_log::{self, BootStep, Client};
use bmo::netboot::config::{DhcpMode, NetbootConfig};
use bmo::netboot::leases::{LeaseState, LeaseTable};
use bmo::netboot::mac::MacAddr;
use dhcproto::v4::{DhcpOption, Message, MessageType, OptionCode};
use dhcproto::{Decodable, Decoder, Encodable, Encoder};

use crate::support::netboot::{
    self, Netns, NsRef, TempDir, TestNet, config, eventually, require, run, spawn,
};

pub(crate) fn full_config(dir: &std::path::Path) -> NetbootConfig {
    let mut cfg = config(dir);
    cfg.dhcp_mode = DhcpMode::Full;
    cfg.dhcp_range = Some("10.77.0.50,10.77.0.60".parse().unwrap());
    cfg
}

/// Runs dhclient on `iface`, sending `hostname` as option 12 byte for byte.
fn dhclient(
    ns: &NsRef,
    dir: &std::path::Path,
    iface: &str,
    hostname: &[u8],
) -> netboot::ChildGuard {
    let conf = dir.join(format!("dhclient-{iface}.conf"));
    // Declared as a string option so that any bytes can be sent, as hex octets.
    let hex: Vec<String> = hostname.iter().map(|b| format!("{b:02x}")).collect();
    std::fs::write(
        &conf,
        format!("option raw-host-name code 12 = string;\nsend raw-host-name {};\nrequest subnet-mask, routers;\n", hex.join(":")),
    )
    .unwrap();
    spawn(
        ns.command("dhclient").args([
            "-d",
            "-1",
            "-v",
            "-cf",
            conf.to_str().unwrap(),
            "-lf",
            dir.join(format!("dhclient-{iface}.leases"))
                .to_str()
                .unwrap(),
            "-pf",
            dir.join(format!("dhclient-{iface}.pid")).to_str().unwrap(),
            "-sf",
            "/bin/true",
            iface,
        ]),
    )
}

fn mac_of(ns: &Netns, iface: &str) -> MacAddr {
    let out = run(Command::new("ip").args(["-n", &ns.name, "-br", "link", "show", iface]));
    out.split_whitespace()
        .nth(2)
        .expect("mac")
        .parse()
        .expect("mac parse")
}

#[test]
fn dhclient_and_udhcpc_get_leases_with_their_hostnames_kept_across_restart() {
    let _shared = crate::support::shared();
    require(&["dhclient", "busybox", "ip"]);
    let net = TestNet::new(false);
    let dir = TempDir::new("dhcp");
    let cfg = full_config(dir.path());
    let client = net.client.handle();
    let cli_mac = mac_of(&net.client, "cli0");
    // A second client interface for udhcpc: another veth pair in the same namespaces.
    run(Command::new("ip").args([
        "-n",
        &net.server.name,
        "link",
        "add",
        "srv1",
        "type",
        "veth",
        "peer",
        "name",
        "cli1",
        "netns",
        &net.client.name,
    ]));
    run(Command::new("ip").args(["-n", &net.server.name, "link", "set", "srv1", "up"]));
    run(Command::new("ip").args(["-n", &net.client.name, "link", "set", "cli1", "up"]));
    run(Command::new("ip").args([
        "-n",
        &net.server.name,
        "link",
        "add",
        "br0",
        "type",
        "bridge",
    ]));
    for l in ["srv0", "srv1"] {
        run(Command::new("ip").args(["-n", &net.server.name, "link", "set", l, "master", "br0"]));
    }
    run(Command::new("ip").args(["-n", &net.server.name, "addr", "flush", "dev", "srv0"]));
    run(Command::new("ip").args([
        "-n",
        &net.server.name,
        "addr",
        "add",
        "10.77.0.1/24",
        "dev",
        "br0",
    ]));
    run(Command::new("ip").args(["-n", &net.server.name, "link", "set", "br0", "up"]));
    let cli1_mac = mac_of(&net.client, "cli1");
    let mut cfg = cfg;
    cfg.provisioning.provisioning_interface = Some("br0".into());
    let lease_file = cfg.lease_file.clone();
    let dirp = dir.path().to_owned();

    net.server.block_on(move || async move {
        let leases = LeaseTable::open(&lease_file).expect("lease file");
        let nb = bmo::netboot::start(&cfg, leases.clone())
            .await
            .expect("start");

        // dhclient sends a hostname that is no host name: an escape sequence, a newline,
        // a bell and a byte that is not UTF-8. bmo drops it (issue 36).
        let _dhclient = dhclient(&client, &dirp, "cli0", b"node\x1b[31m\n-\x07\xff");
        let l = eventually("dhclient's lease", Duration::from_secs(30), || {
            leases
                .get(&cli_mac)
                .filter(|l| l.state == LeaseState::Bound)
        })
        .await;
        assert_eq!((l.hostname_raw, l.hostname), (None, None));
        let ip = l.ip.expect("ip");
        assert!(
            (50..=60).contains(&ip.octets()[3]),
            "{ip} outside DHCP_RANGE"
        );
        // The boot activity page's timeline of the client: its exchange, as answered.
        let timeline = nb
            .boot_log
            .timelines()
            .into_iter()
            .find(|t| t.client == Client::Mac(cli_mac));
        let steps: Vec<BootStep> = timeline
            .expect("the client's timeline")
            .events
            .into_iter()
            .map(|e| e.step)
            .collect();
        let acked = steps.iter().any(|s| {
            matches!(s,
            BootStep::Dhcp { request, reply: Some(reply), address: Some(a), .. }
                if request == "REQUEST" && reply == "ACK" && *a == std::net::IpAddr::V4(ip))
        });
        assert!(acked, "no REQUEST → ACK with {ip} in {steps:?}");

        // udhcpc on the other interface, with a UTF-8 hostname.
        let o = tokio::process::Command::new("ip")
            .args([
                "netns",
                "exec",
                &client.name,
                "busybox",
                "udhcpc",
                "-f",
                "-q",
                "-n",
                "-t",
                "5",
                "-T",
                "2",
                "-i",
                "cli1",
                "-s",
                "/bin/true",
                "-x",
                "hostname:udhcpc-node",
            ])
            .output()
            .await
            .expect("udhcpc");
        assert!(
            o.status.success(),
            "udhcpc: {}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        let l2 = leases.get(&cli1_mac).expect("udhcpc lease");
        assert_eq!(
            (l2.state, l2.hostname.as_deref()),
            (LeaseState::Bound, Some("udhcpc-node"))
        );
        assert_ne!(l2.ip, Some(ip), "two clients got one address");
        let text =
            String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr);
        assert!(
            text.contains(&l2.ip.unwrap().to_string()),
            "udhcpc did not report its lease: {text}"
        );

        // The lease table over HTTP.
        let port = nb.http_addr.unwrap().port();
        let o = tokio::process::Command::new("curl")
            .args(["-sS", &format!("http://127.0.0.1:{port}/bmo/v1/leases")])
            .output()
            .await
            .expect("curl");
        let json: serde_json::Value = serde_json::from_slice(&o.stdout).expect("leases json");
        let entry = json
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["mac"] == cli_mac.to_string())
            .expect("listed");
        assert!(entry.get("hostname_raw").is_none(), "{entry}");
        assert_eq!(entry["ip"], ip.to_string());

        // Restart: the leases come back from the file.
        nb.shutdown().await.expect("flush");
        drop(leases);
        let leases = LeaseTable::open(&lease_file).expect("reopen");
        let back = leases.get(&cli_mac).expect("lease survived the restart");
        assert_eq!((back.ip, back.hostname_raw.as_deref()), (Some(ip), None));
        assert_eq!(
            leases.get(&cli1_mac).and_then(|l| l.hostname),
            Some("udhcpc-node".into())
        );
        let _nb = bmo::netboot::start(&cfg, leases.clone())
            .await
            .expect("restart");
        // The restarted server still knows the address is taken: udhcpc asking
        // for dhclient's address gets another one.
        let o = tokio::process::Command::new("ip")
            .args([
                "netns",
                "exec",
                &client.name,
                "busybox",
                "udhcpc",
                "-f",
                "-q",
                "-n",
                "-t",
                "5",
                "-T",
                "2",
                "-i",
                "cli1",
                "-s",
                "/bin/true",
                "-r",
                &ip.to_string(),
            ])
            .output()
            .await
            .expect("udhcpc");
        assert!(o.status.success());
        let l3 = leases.get(&cli1_mac).unwrap();
        assert_ne!(l3.ip, Some(ip));
        assert_eq!(l3.ip, l2.ip, "a known client keeps its address");
    });
}

/// A firmware-like client: sends one DISCOVER (or the message type in `extra`) from
/// the client namespace and collects the offers that arrive within `wait`.
pub(crate) fn discover(
    ns: &NsRef,
    iface: &str,
    mac: [u8; 6],
    extra: Vec<DhcpOption>,
    raw: Vec<(u8, Vec<u8>)>,
    wait: Duration,
) -> Vec<Message> {
    let ns = ns.clone();
    let iface = iface.to_owned();
    std::thread::spawn(move || {
        ns.enter();
        let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::DGRAM, None).unwrap();
        s.set_reuse_address(true).unwrap();
        s.set_broadcast(true).unwrap();
        s.bind_device(Some(iface.as_bytes())).unwrap();
        s.bind(&std::net::SocketAddr::from((Ipv4Addr::UNSPECIFIED, 68)).into())
            .unwrap();
        let s: std::net::UdpSocket = s.into();
        let mut m = Message::new_with_id(
            0x5eed,
            Ipv4Addr::UNSPECIFIED,
            Ipv4Addr::UNSPECIFIED,
            Ipv4Addr::UNSPECIFIED,
            Ipv4Addr::UNSPECIFIED,
            &mac,
        );
        m.set_flags(dhcproto::v4::Flags::default().set_broadcast());
        m.opts_mut()
            .insert(DhcpOption::MessageType(MessageType::Discover));
        for o in extra {
            m.opts_mut().insert(o);
        }
        let mut buf = Vec::new();
        m.encode(&mut Encoder::new(&mut buf)).unwrap();
        buf.pop();
        for (code, v) in raw {
            buf.push(code);
            buf.push(v.len() as u8);
            buf.extend_from_slice(&v);
        }
        buf.push(255);
        s.send_to(&buf, (Ipv4Addr::BROADCAST, 67)).unwrap();
        let deadline = std::time::Instant::now() + wait;
        let mut offers = Vec::new();
        let mut rbuf = [0u8; 2048];
        while let Some(left) = deadline.checked_duration_since(std::time::Instant::now()) {
            s.set_read_timeout(Some(left.max(Duration::from_millis(1))))
                .unwrap();
            let Ok(n) = s.recv(&mut rbuf) else { break };
            if let Ok(msg) = Message::decode(&mut Decoder::new(&rbuf[..n]))
                && msg.xid() == 0x5eed
                && msg.chaddr().get(..6) == Some(&mac[..])
            {
                offers.push(msg);
            }
        }
        offers
    })
    .join()
    .unwrap()
}

fn bootfile(m: &Message) -> Option<String> {
    match m.opts().get(OptionCode::BootfileName) {
        Some(DhcpOption::BootfileName(b)) => Some(String::from_utf8_lossy(b).into_owned()),
        _ => m
            .fname()
            .map(|f| String::from_utf8_lossy(f).trim_end_matches('\0').to_owned()),
    }
}

pub(crate) fn pxe(arch: u16) -> Vec<(u8, Vec<u8>)> {
    vec![
        (
            60,
            format!("PXEClient:Arch:{arch:05}:UNDI:003016").into_bytes(),
        ),
        (93, arch.to_be_bytes().to_vec()),
        (97, vec![0; 17]),
    ]
}

#[test]
fn firmware_gets_the_loader_for_its_architecture_and_ipxe_gets_the_script() {
    let _shared = crate::support::shared();
    require(&["ip"]);
    let net = TestNet::new(false);
    let dir = TempDir::new("dhcp-arch");
    let cfg = full_config(dir.path());
    let client = net.client.handle();
    net.server.block_on(move || async move {
        let nb = bmo::netboot::start(&cfg, LeaseTable::in_memory())
            .await
            .expect("start");
        let port = nb.http_addr.unwrap().port();
        for (i, (arch, want)) in [
            (0u16, "undionly.kpxe"),
            (7, "snponly-x86_64.efi"),
            (9, "snponly-x86_64.efi"),
            (11, "snponly-arm64.efi"),
        ]
        .into_iter()
        .enumerate()
        {
            let mac = [0x52, 0x54, 0, 0x77, 1, i as u8];
            let c = client.clone();
            let offers = tokio::task::spawn_blocking(move || {
                discover(&c, "cli0", mac, vec![], pxe(arch), Duration::from_secs(3))
            })
            .await
            .unwrap();
            let offer = offers
                .first()
                .unwrap_or_else(|| panic!("no offer for arch {arch}"));
            assert_eq!(bootfile(offer).as_deref(), Some(want), "arch {arch}");
            assert_eq!(offer.siaddr().to_string(), "10.77.0.1");
            assert!(!offer.yiaddr().is_unspecified());
            let lease = nb.leases.get(&MacAddr(mac)).expect("recorded");
            assert_eq!(lease.arch, Some(arch));
        }
        // iPXE identifies itself with option 175 (and user class "iPXE").
        let c = client.clone();
        let offers = tokio::task::spawn_blocking(move || {
            let mut raw = pxe(0);
            raw.push((175, vec![19, 1, 1]));
            raw.push((77, b"iPXE".to_vec()));
            discover(
                &c,
                "cli0",
                [0x52, 0x54, 0, 0x77, 2, 0],
                vec![],
                raw,
                Duration::from_secs(3),
            )
        })
        .await
        .unwrap();
        assert_eq!(
            bootfile(&offers[0]),
            Some(format!("http://10.77.0.1:{port}/boot.ipxe"))
        );
    });
}

#[test]
fn proxy_mode_adds_boot_options_beside_dnsmasq() {
    let _shared = crate::support::shared();
    require(&["dnsmasq", "dhclient", "ip"]);
    // Three namespaces on one segment: bmo (proxy), dnsmasq (addresses), and the
    // client, whose bridge joins the other two.
    let bmo_ns = Netns::new("p");
    let dns_ns = Netns::new("d");
    let cli_ns = Netns::new("k");
    let ipc = |args: &[&str]| run(Command::new("ip").args(args));
    ipc(&["-n", &cli_ns.name, "link", "add", "br0", "type", "bridge"]);
    for (peer_ns, inside, port, addr) in [
        (&bmo_ns, "srv0", "pb", "10.77.0.1/24"),
        (&dns_ns, "dns0", "pd", "10.77.0.3/24"),
    ] {
        ipc(&[
            "-n",
            &cli_ns.name,
            "link",
            "add",
            port,
            "type",
            "veth",
            "peer",
            "name",
            inside,
            "netns",
            &peer_ns.name,
        ]);
        ipc(&["-n", &cli_ns.name, "link", "set", port, "master", "br0"]);
        ipc(&["-n", &cli_ns.name, "link", "set", port, "up"]);
        ipc(&["-n", &peer_ns.name, "addr", "add", addr, "dev", inside]);
        ipc(&["-n", &peer_ns.name, "link", "set", inside, "up"]);
    }
    ipc(&["-n", &cli_ns.name, "link", "set", "br0", "up"]);
    let dir = TempDir::new("proxy");
    let _dnsmasq = spawn(dns_ns.command("dnsmasq").args([
        "--keep-in-foreground",
        "--no-daemon",
        "--port=0",
        "--interface=dns0",
        "--bind-interfaces",
        "--no-ping",
        "--log-facility=-",
        "--dhcp-range=10.77.0.100,10.77.0.150,255.255.255.0,1h",
        &format!(
            "--dhcp-leasefile={}",
            dir.path().join("dnsmasq.leases").display()
        ),
        "--pid-file=",
        "--conf-file=/dev/null",
    ]));
    let mut cfg = config(dir.path());
    cfg.dhcp_mode = DhcpMode::Proxy;
    let cli = cli_ns.handle();
    let dirp = dir.path().to_owned();
    bmo_ns.block_on(move || async move {
        let nb = bmo::netboot::start(&cfg, LeaseTable::in_memory()).await.expect("start");
        fn from<'a>(offers: &'a [Message], ip: &str) -> Option<&'a Message> {
            offers.iter().find(|o| matches!(o.opts().get(OptionCode::ServerIdentifier), Some(DhcpOption::ServerIdentifier(s)) if s.to_string() == ip))
        }
        // Like firmware, retransmit the DISCOVER until both servers answered
        // (dnsmasq may still be starting).
        let mut offers = Vec::new();
        for _ in 0..8 {
            let c = cli.clone();
            offers = tokio::task::spawn_blocking(move || discover(&c, "br0", [0x52, 0x54, 0, 0x77, 3, 7], vec![], pxe(7), Duration::from_secs(2)))
                .await
                .unwrap();
            if from(&offers, "10.77.0.1").is_some() && from(&offers, "10.77.0.3").is_some() {
                break;
            }
        }
        let from = |ip: &str| from(&offers, ip);
        let ours = from("10.77.0.1").unwrap_or_else(|| panic!("no proxy offer from bmo among {} offers", offers.len()));
        assert!(ours.yiaddr().is_unspecified(), "proxyDHCP must not hand out addresses");
        assert_eq!(bootfile(ours).as_deref(), Some("snponly-x86_64.efi"));
        assert!(matches!(ours.opts().get(OptionCode::ClassIdentifier), Some(DhcpOption::ClassIdentifier(v)) if v == b"PXEClient"));
        let theirs = from("10.77.0.3").expect("no offer from dnsmasq");
        assert!((100..=150).contains(&theirs.yiaddr().octets()[3]));

        // A plain client gets its address from dnsmasq; bmo stays silent but
        // records the hostname it sent.
        let _dh = dhclient(&cli, &dirp, "br0", b"proxied-node");
        let mac = {
            let out = run(Command::new("ip").args(["-n", &cli.name, "-br", "link", "show", "br0"]));
            out.split_whitespace().nth(2).unwrap().parse::<MacAddr>().unwrap()
        };
        let lease = eventually("the hostname in bmo's table", Duration::from_secs(30), || {
            nb.leases.get(&mac).filter(|l| l.hostname.is_some())
        })
        .await;
        assert_eq!((lease.hostname.as_deref(), lease.ip, lease.state), (Some("proxied-node"), None, LeaseState::Proxy));
        eventually("dnsmasq's lease for dhclient", Duration::from_secs(30), || {
            std::fs::read_to_string(dirp.join("dnsmasq.leases")).ok().filter(|t| t.contains(&mac.to_string()))
        })
        .await;
    });
}

/// Sends DISCOVERs from random MACs on `iface` of `ns`, about `per_second` of them,
/// until `stop` is set; returns how many were sent.
fn flood_discovers(
    ns: NsRef,
    iface: &'static str,
    per_second: u32,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> std::thread::JoinHandle<u64> {
    std::thread::spawn(move || {
        ns.enter();
        let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::DGRAM, None).unwrap();
        s.set_broadcast(true).unwrap();
        s.bind_device(Some(iface.as_bytes())).unwrap();
        s.bind(&std::net::SocketAddr::from((Ipv4Addr::UNSPECIFIED, 6868)).into())
            .unwrap();
        let s: std::net::UdpSocket = s.into();
        // One DISCOVER encoded once; each send patches its xid and client MAC in place
        // (BOOTP fixed header: xid at 4..8, chaddr at 28..34), so the sender, not the
        // encoder, sets the pace.
        let mut template = Message::new_with_id(
            0,
            Ipv4Addr::UNSPECIFIED,
            Ipv4Addr::UNSPECIFIED,
            Ipv4Addr::UNSPECIFIED,
            Ipv4Addr::UNSPECIFIED,
            &[0x02, 0, 0, 0, 0, 0],
        );
        template
            .opts_mut()
            .insert(DhcpOption::MessageType(MessageType::Discover));
        let mut packet = Vec::new();
        template.encode(&mut Encoder::new(&mut packet)).unwrap();
        let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut sent = 0u64;
        let started = std::time::Instant::now();
        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
            // xorshift64: a fresh locally administered unicast MAC each time.
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let b = state.to_le_bytes();
            packet[4..8].copy_from_slice(&b[4..8]);
            packet[29..34].copy_from_slice(&b[0..5]);
            let _ = s.send_to(&packet, (Ipv4Addr::BROADCAST, 67));
            sent += 1;
            // Pace to the target rate, sleeping only when a millisecond or more ahead
            // (shorter sleeps overshoot and would hold the rate below the target).
            let due = Duration::from_secs_f64(sent as f64 / f64::from(per_second));
            if let Some(ahead) = due.checked_sub(started.elapsed())
                && ahead >= Duration::from_millis(1)
            {
                std::thread::sleep(ahead);
            }
        }
        sent
    })
}

#[test]
fn a_real_client_gets_a_lease_during_a_flood_of_discovers_from_random_macs() {
    // Measures the rate it floods at (10,000 DISCOVERs/s): alone.
    let _alone = crate::support::exclusive("netboot_dhcp flood");
    require(&["dhclient", "ip"]);
    // The rate the issue's flood must reach; the sender aims a little above it.
    const RATE: u32 = 10_000;
    const MAX_LEASES: usize = 1000;
    let net = TestNet::new(false);
    let dir = TempDir::new("dhcp-flood");
    let mut cfg = full_config(dir.path());
    cfg.dhcp_max_leases = MAX_LEASES as u32;
    let client = net.client.handle();
    let cli_mac = mac_of(&net.client, "cli0");
    let lease_file = cfg.lease_file.clone();
    let dirp = dir.path().to_owned();
    net.server.block_on(move || async move {
        let leases = LeaseTable::open(&lease_file).expect("lease file");
        let nb = bmo::netboot::start(&cfg, leases.clone())
            .await
            .expect("start");
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flood = flood_discovers(client.clone(), "cli0", RATE + RATE / 20, stop.clone());
        // Let the flood fill the 11-address range and the table first.
        let mut biggest = 0;
        for _ in 0..20 {
            tokio::time::sleep(Duration::from_millis(100)).await;
            biggest = biggest.max(leases.len());
        }
        let started = std::time::Instant::now();
        let _dhclient = dhclient(&client, &dirp, "cli0", b"real-client");
        let lease = eventually("dhclient's lease during the flood", Duration::from_secs(60), || {
            biggest = biggest.max(leases.len());
            leases
                .get(&cli_mac)
                .filter(|l| l.state == LeaseState::Bound)
        })
        .await;
        let waited = started.elapsed();
        // The flood goes on a little longer: the bound lease is not taken away.
        tokio::time::sleep(Duration::from_secs(2)).await;
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let flood_started = started - Duration::from_secs(2);
        let sent = tokio::task::spawn_blocking(move || flood.join().expect("flood thread"))
            .await
            .expect("join");
        let rate = sent as f64 / flood_started.elapsed().as_secs_f64();
        biggest = biggest.max(leases.len());
        let timelines = nb.boot_log.timelines();
        nb.shutdown().await.expect("flush");
        let file = std::fs::read(&lease_file).expect("lease file");
        let in_file = serde_json::from_slice::<serde_json::Value>(&file).expect("JSON")["leases"]
            .as_array()
            .map_or(0, Vec::len);
        println!(
            "{sent} DISCOVERs from random MACs (~{rate:.0}/s); dhclient bound {:?} after {waited:.1?}; \
             lease table at most {biggest} records (cap {MAX_LEASES}), {in_file} in the file ({} bytes)",
            lease.ip,
            file.len()
        );
        let still = leases.get(&cli_mac).expect("the real client's lease");
        assert_eq!(still.state, LeaseState::Bound, "the real client kept its lease");
        assert_eq!(still.ip, lease.ip);
        assert!(waited < Duration::from_secs(20), "dhclient waited {waited:?}");
        assert!(biggest <= MAX_LEASES, "{biggest} records");
        assert!(timelines.len() <= boot_log::CLIENTS, "{} timelines", timelines.len());
        assert!(
            timelines.iter().any(|t| t.client == Client::Mac(cli_mac)),
            "the real client's timeline was kept"
        );
        assert!(in_file <= MAX_LEASES, "{in_file} records in the file");
        assert!(
            rate >= f64::from(RATE),
            "the flood reached only {rate:.0} DISCOVERs/s, not {RATE}/s"
        );
    });
}

#[test]
fn old_lease_records_are_pruned_and_the_table_is_capped_on_reload() {
    let _shared = crate::support::shared();
    let dir = TempDir::new("dhcp-prune");
    let path = dir.path().join("leases.json");
    let now = bmo::netboot::leases::now_unix();
    let lease = |n: u32, state: &str, last_seen: u64, expires: u64| {
        serde_json::json!({
            "mac": format!("02:00:00:00:{:02x}:{:02x}", n >> 8, n & 0xff),
            "ip": null, "state": state, "expires_unix": expires,
            "arch": null, "vendor_class": null, "ipxe": false,
            "first_seen_unix": last_seen, "last_seen_unix": last_seen,
        })
    };
    let mut records = vec![
        // Expired and unseen for two days: past a one-day retention.
        lease(1, "bound", now - 2 * 86_400, now - 86_400),
        // An offer never requested, unseen for ten minutes.
        lease(2, "offered", now - 600, now - 570),
        // A live lease, whatever its age: kept.
        lease(3, "bound", now - 2 * 86_400, now + 3_600),
    ];
    // 500 recent records of a past flood.
    records.extend((100..600).map(|n| lease(n, "proxy", now - 60, 0)));
    std::fs::write(
        &path,
        serde_json::to_vec(&serde_json::json!({"version": 1, "leases": records})).unwrap(),
    )
    .unwrap();
    let table = LeaseTable::open(&path).expect("open");
    assert_eq!(table.len(), 503);
    table.set_limits(bmo::netboot::leases::LeaseLimits {
        max_leases: 100,
        retention_secs: 86_400,
    });
    let mac = |n: u32| -> MacAddr {
        format!("02:00:00:00:{:02x}:{:02x}", n >> 8, n & 0xff)
            .parse()
            .unwrap()
    };
    assert!(
        table.get(&mac(1)).is_none(),
        "expired record past retention"
    );
    assert!(table.get(&mac(2)).is_none(), "offer never requested");
    assert!(table.get(&mac(3)).is_some(), "live lease kept");
    assert!(table.len() <= 100, "{} records over the cap", table.len());
}
