//! bmo's DHCPv6 server against ISC dhclient -6, server and client in their own
//! network namespaces on an IPv6-only link: a stateful IA_NA lease from an IPv6
//! DHCP_RANGE with the boot file URL by client architecture and the FQDN kept as
//! the host name, keyed by the client's MAC and kept across a restart; proxy mode
//! answering an INFORMATION-REQUEST with boot information and no address, and beside
//! dnsmasq's stateful DHCPv6 advertising the boot file while the client binds
//! dnsmasq's address; TFTP and HTTP over IPv6 on the dual-stack listeners.

use std::net::Ipv6Addr;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use bmo::netboot::boot_log::{BootStep, Client};
use bmo::netboot::config::{DhcpMode, IpFamily, NetbootConfig};
use bmo::netboot::leases::{LeaseState, LeaseTable};
use bmo::netboot::mac::MacAddr;

use crate::support::netboot::{
    self, Netns, NsRef, TempDir, TestNet, config, eventually, require, run, spawn,
};

/// Netboot settings on the IPv6 address of `srv0` (fd77::1/64).
pub(crate) fn config6(dir: &Path, mode: DhcpMode) -> NetbootConfig {
    let mut cfg = config(dir);
    cfg.provisioning.provisioning_ip_family = IpFamily::Ipv6;
    cfg.dhcp_mode = mode;
    cfg.dhcp_range = Some("fd77::100,fd77::1ff".parse().unwrap());
    cfg.http_bind = "::".parse().unwrap();
    cfg.tftp_addr = "[::]:69".parse().unwrap();
    cfg
}

/// Waits until no address on `iface` in `ns` is tentative (DAD done): dhclient -6
/// binds the link-local address, and bmo answers from its own.
pub(crate) fn wait_dad(ns: &str, iface: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let out = run(Command::new("ip").args(["-n", ns, "-6", "addr", "show", "dev", iface]));
        if out.contains("fe80") && !out.contains("tentative") {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "DAD on {iface}: {out}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

pub(crate) fn mac_of(ns: &Netns, iface: &str) -> MacAddr {
    let out = run(Command::new("ip").args(["-n", &ns.name, "-br", "link", "show", iface]));
    out.split_whitespace()
        .nth(2)
        .expect("mac")
        .parse()
        .expect("mac parse")
}

/// Runs `dhclient -6` on `iface` (stateful, or `-S` for an INFORMATION-REQUEST),
/// sending architecture type `arch` and the FQDN `fqdn`. Returns the guard, the
/// lease file and the file where its script writes the environment it was given.
fn dhclient6(
    ns: &NsRef,
    dir: &Path,
    iface: &str,
    stateless: bool,
    arch: u16,
    fqdn: &str,
) -> (netboot::ChildGuard, std::path::PathBuf, std::path::PathBuf) {
    let conf = dir.join(format!("dhclient6-{iface}.conf"));
    std::fs::write(
        &conf,
        format!(
            "send dhcp6.client-arch-type {arch};\nsend fqdn.fqdn \"{fqdn}\";\nalso request dhcp6.bootfile-url, dhcp6.bootfile-param;\n"
        ),
    )
    .unwrap();
    let leases = dir.join(format!("dhclient6-{iface}.leases"));
    let env = dir.join(format!("dhclient6-{iface}.env"));
    let script = dir.join(format!("dhclient6-{iface}.sh"));
    std::fs::write(&script, format!("#!/bin/sh\nenv >> {}\n", env.display())).unwrap();
    run(Command::new("chmod").args(["+x", script.to_str().unwrap()]));
    let mut cmd = ns.command("dhclient");
    cmd.args(["-6", "-d", "-v"]);
    if stateless {
        cmd.arg("-S");
    }
    cmd.args([
        "-cf",
        conf.to_str().unwrap(),
        "-lf",
        leases.to_str().unwrap(),
        "-pf",
        dir.join(format!("dhclient6-{iface}.pid")).to_str().unwrap(),
        "-sf",
        script.to_str().unwrap(),
        iface,
    ]);
    (spawn(&mut cmd), leases, env)
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

#[test]
fn dhclient6_gets_an_ia_na_lease_and_the_boot_file_url_keyed_by_its_mac() {
    let _shared = crate::support::shared();
    require(&["dhclient", "ip", "curl"]);
    let net = TestNet::new(false);
    wait_dad(&net.server.name, "srv0");
    wait_dad(&net.client.name, "cli0");
    let dir = TempDir::new("dhcp6");
    let mut cfg = config6(dir.path(), DhcpMode::Full);
    cfg.tftp = true;
    let client = net.client.handle();
    let cli_mac = mac_of(&net.client, "cli0");
    let dirp = dir.path().to_owned();
    let lease_file = cfg.lease_file.clone();

    net.server.block_on(move || async move {
        let leases = LeaseTable::open(&lease_file).expect("lease file");
        let nb = bmo::netboot::start(&cfg, leases.clone())
            .await
            .expect("start");
        let (_dhclient, client_leases, env) =
            dhclient6(&client, &dirp, "cli0", false, 7, "node-6.lab");
        let l = eventually("dhclient -6's lease", Duration::from_secs(30), || {
            leases
                .get(&cli_mac)
                .filter(|l| l.state == LeaseState::Bound)
        })
        .await;
        let ip = l.ip6.expect("an IPv6 address");
        let range = u128::from("fd77::100".parse::<Ipv6Addr>().unwrap())
            ..=u128::from("fd77::1ff".parse::<Ipv6Addr>().unwrap());
        assert!(range.contains(&u128::from(ip)), "{ip} outside DHCP_RANGE");
        assert_eq!(l.hostname.as_deref(), Some("node-6.lab"));
        assert_eq!(l.arch, Some(7));
        let duid = l.duid.clone().expect("DUID recorded");
        assert_eq!(leases.mac_of_duid(&duid), Some(cli_mac));

        // What dhclient took: the address and the TFTP loader's URL.
        let text = file_with(&client_leases, &format!("iaaddr {ip}")).await;
        assert!(
            text.contains("tftp://[fd77::1]/snponly-x86_64.efi"),
            "{text}"
        );
        let env = file_with(&env, "BOUND6").await;
        assert!(env.contains("tftp://[fd77::1]/snponly-x86_64.efi"), "{env}");

        // TFTP and HTTP over IPv6 on the dual-stack listeners, and the iPXE script
        // with bracketed URLs. (dhclient's script here configures nothing: the client
        // gets a static address for this.)
        let ip_cmd = [
            "-n",
            &client.name,
            "addr",
            "add",
            "fd77::2/64",
            "dev",
            "cli0",
            "nodad",
        ];
        run(Command::new("ip").args(ip_cmd));
        let port = nb.http_addr.expect("http").port();
        let curl = async |url: String| {
            let mut cmd = client.command("curl");
            cmd.args(["-gsS", "--max-time", "20", "-o", "-", &url]);
            let o = tokio::process::Command::from(cmd)
                .output()
                .await
                .expect("curl");
            assert!(
                o.status.success(),
                "{url}: {}",
                String::from_utf8_lossy(&o.stderr)
            );
            o.stdout
        };
        let script =
            String::from_utf8(curl(format!("http://[fd77::1]:{port}/inspector.ipxe")).await)
                .unwrap();
        assert!(
            script.contains(&format!(
                "http://[fd77::1]:{port}/images/ironic-python-agent.kernel"
            )),
            "{script}"
        );
        let loader = curl("tftp://[fd77::1]/snponly-x86_64.efi".into()).await;
        assert!(loader.len() > 100_000, "{} bytes", loader.len());

        // The lease, its DUID and FQDN survive a restart.
        nb.shutdown().await.expect("flush");
        drop(leases);
        let back = LeaseTable::open(&lease_file).expect("reopen");
        let l = back.get(&cli_mac).expect("lease survived");
        assert_eq!(
            (l.ip6, l.hostname.as_deref()),
            (Some(ip), Some("node-6.lab"))
        );
        assert_eq!(back.mac_of_duid(&duid), Some(cli_mac));
    });
}

#[test]
fn proxy_mode_answers_an_information_request_with_boot_information_only() {
    let _shared = crate::support::shared();
    require(&["dhclient", "ip"]);
    let net = TestNet::new(false);
    wait_dad(&net.server.name, "srv0");
    wait_dad(&net.client.name, "cli0");
    let dir = TempDir::new("dhcp6-proxy");
    let mut cfg = config6(dir.path(), DhcpMode::Proxy);
    cfg.dhcp_range = None;
    let client = net.client.handle();
    let cli_mac = mac_of(&net.client, "cli0");
    let dirp = dir.path().to_owned();

    net.server.block_on(move || async move {
        let leases = LeaseTable::in_memory();
        let nb = bmo::netboot::start(&cfg, leases.clone())
            .await
            .expect("start");
        let port = nb.http_addr.expect("http").port();
        // UEFI HTTP boot's architecture type (16): the HTTP URL of the iPXE loader.
        let (_dhclient, _, env) = dhclient6(&client, &dirp, "cli0", true, 16, "proxied");
        let text = file_with(&env, "bootfile_url").await;
        assert!(
            text.contains(&format!("http://[fd77::1]:{port}/ipxe/ipxe-x86_64.efi")),
            "{text}"
        );
        assert!(!text.contains("iaaddr"), "{text}");
        let l = leases.get(&cli_mac).expect("recorded");
        assert_eq!((l.state, l.ip6), (LeaseState::Proxy, None));
        drop(nb);
    });
}

#[test]
fn proxy_mode_beside_dnsmasq_dhcpv6_leaves_the_address_to_dnsmasq() {
    let _shared = crate::support::shared();
    require(&["dnsmasq", "dhclient", "ip"]);
    // Three namespaces on one segment: bmo (proxy), dnsmasq (stateful DHCPv6), and
    // the client, whose bridge joins the other two.
    let bmo_ns = Netns::new("p");
    let dns_ns = Netns::new("d");
    let cli_ns = Netns::new("k");
    let ipc = |args: &[&str]| run(Command::new("ip").args(args));
    ipc(&["-n", &cli_ns.name, "link", "add", "br0", "type", "bridge"]);
    for (peer_ns, inside, port, addr) in [
        (&bmo_ns, "srv0", "pb", "fd77::1/64"),
        (&dns_ns, "dns0", "pd", "fd77::3/64"),
    ] {
        let veth = ["link", "add", port, "type", "veth", "peer", "name", inside];
        ipc(&[&["-n", &cli_ns.name][..], &veth, &["netns", &peer_ns.name]].concat());
        ipc(&["-n", &cli_ns.name, "link", "set", port, "master", "br0"]);
        ipc(&["-n", &cli_ns.name, "link", "set", port, "up"]);
        ipc(&[
            "-n",
            &peer_ns.name,
            "addr",
            "add",
            addr,
            "dev",
            inside,
            "nodad",
        ]);
        ipc(&["-n", &peer_ns.name, "link", "set", inside, "up"]);
    }
    ipc(&["-n", &cli_ns.name, "link", "set", "br0", "up"]);
    wait_dad(&bmo_ns.name, "srv0");
    wait_dad(&dns_ns.name, "dns0");
    wait_dad(&cli_ns.name, "br0");
    let dir = TempDir::new("dhcp6-beside");
    let dns_leases = dir.path().join("dnsmasq.leases");
    let _dnsmasq = spawn(dns_ns.command("dnsmasq").args([
        "--keep-in-foreground",
        "--no-daemon",
        "--port=0",
        "--interface=dns0",
        "--bind-interfaces",
        "--log-facility=-",
        "--dhcp-range=fd77::100,fd77::1ff,64,1h",
        &format!("--dhcp-leasefile={}", dns_leases.display()),
        "--pid-file=",
        "--conf-file=/dev/null",
    ]));
    let mut cfg = config6(dir.path(), DhcpMode::Proxy);
    cfg.dhcp_range = None;
    let cli = cli_ns.handle();
    let mac = mac_of(&cli_ns, "br0");
    let dirp = dir.path().to_owned();
    bmo_ns.block_on(move || async move {
        let nb = bmo::netboot::start(&cfg, LeaseTable::in_memory())
            .await
            .expect("start");
        // A UEFI-like client (architecture 7): bmo advertises the boot file and no
        // address; the client binds dnsmasq's address all the same.
        let (_dh, client_leases, _) = dhclient6(&cli, &dirp, "br0", false, 7, "beside");
        let text = file_with(&client_leases, "iaaddr fd77::1").await;
        let lease = eventually(
            "bmo's record of the client",
            Duration::from_secs(10),
            || nb.leases.get(&mac).filter(|l| l.arch == Some(7)),
        )
        .await;
        assert_eq!(
            (lease.state, lease.ip6, lease.hostname.as_deref()),
            (LeaseState::Proxy, None, Some("beside")),
            "{text}"
        );
        // bmo did answer: an ADVERTISE with the TFTP loader's URL and no address.
        let steps: Vec<_> = nb
            .boot_log
            .timelines()
            .into_iter()
            .filter(|t| t.client == Client::Mac(mac))
            .flat_map(|t| t.events)
            .map(|e| e.step)
            .collect();
        assert!(
            steps.iter().any(|s| matches!(s, BootStep::Dhcp { request, reply: Some(reply), address: None, boot_file: Some(f) }
                if request == "SOLICIT" && reply == "ADVERTISE" && f == "tftp://[fd77::1]/snponly-x86_64.efi")),
            "{steps:?}"
        );
        let theirs = file_with(&dns_leases, "fd77::1").await;
        assert!(theirs.contains("fd77::1"), "{theirs}");
    });
}
