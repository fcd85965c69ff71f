//! Network boot throughput: bmo beside dnsmasq (DHCP, TFTP) and nginx (HTTP), each
//! in the same pair of network namespaces joined by a veth pair, with real load
//! generators (perfdhcp -4 and -6, curl, atftp). Prints tables; figures are for
//! comparison within one run (2 cores shared by server and clients).
//!
//!   cargo bench --bench netboot            (as root)
//!   BMO_BENCH_QUICK=1 cargo bench --bench netboot   (shorter runs)
//!   BMO_BENCH_ONLY=dhcp,dhcp6 cargo bench --bench netboot   (some services: dhcp,
//!   dhcp6, tftp, http)

// Tests and benchmarks may panic on what they set up themselves.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../tests/support/netboot.rs"]
mod netboot_support;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use bmo::netboot::config::{DhcpMode, IpFamily};
use bmo::netboot::leases::{LeaseState, LeaseTable};
use netboot_support::{ChildGuard, NsRef, TempDir, config, require, run, spawn, write_random};

struct Net {
    server: netboot_support::Netns,
    client: netboot_support::Netns,
}

fn net() -> Net {
    let server = netboot_support::Netns::new("bs");
    let client = netboot_support::Netns::new("bc");
    let ip = |args: &[&str]| run(Command::new("ip").args(args));
    ip(&[
        "-n",
        &server.name,
        "link",
        "add",
        "srv0",
        "type",
        "veth",
        "peer",
        "name",
        "cli0",
        "netns",
        &client.name,
    ]);
    ip(&[
        "-n",
        &server.name,
        "addr",
        "add",
        "10.77.0.1/16",
        "dev",
        "srv0",
    ]);
    ip(&[
        "-n",
        &client.name,
        "addr",
        "add",
        "10.77.255.2/16",
        "dev",
        "cli0",
    ]);
    ip(&["-n", &server.name, "link", "set", "srv0", "up"]);
    ip(&["-n", &client.name, "link", "set", "cli0", "up"]);
    Net { server, client }
}

/// A multi-threaded runtime whose worker threads all live in `ns`.
fn runtime_in(ns: &NsRef) -> tokio::runtime::Runtime {
    let ns = ns.clone();
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .on_thread_start(move || ns.enter())
        .build()
        .expect("runtime")
}

fn start_bmo(
    rt: &tokio::runtime::Runtime,
    cfg: bmo::netboot::config::NetbootConfig,
) -> bmo::netboot::Netboot {
    rt.block_on(rt.spawn(async move { bmo::netboot::start(&cfg, LeaseTable::in_memory()).await }))
        .expect("join")
        .expect("start bmo")
}

fn wait_port(ns: &NsRef, proto: &str, port: u16) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        let out = Command::new("ip")
            .args(["netns", "exec", &ns.name, "ss", "-lnH", proto])
            .output()
            .expect("ss");
        if String::from_utf8_lossy(&out.stdout).contains(&format!(":{port} ")) {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("nothing listens on {proto} port {port} in {}", ns.name);
}

fn dnsmasq(ns: &NsRef, dir: &Path, extra: &[&str]) -> ChildGuard {
    let mut c = ns.command("dnsmasq");
    c.args([
        "--keep-in-foreground",
        "--no-daemon",
        "--port=0",
        "--interface=srv0",
        "--bind-interfaces",
        "--log-facility=/dev/null",
        "--pid-file=",
        "--conf-file=/dev/null",
    ])
    .arg(format!(
        "--dhcp-leasefile={}",
        dir.join("dnsmasq.leases").display()
    ))
    .args(extra)
    .stderr(std::process::Stdio::null());
    spawn(&mut c)
}

// ------------------------------------------------------------------ DHCP

/// What one perfdhcp run measured.
struct Perf {
    /// Completed exchanges (DORA or SARR) per second.
    rate: f64,
    /// Drops of the first message (DISCOVER or SOLICIT), % of those sent.
    first_drop_pct: f64,
    /// Drops of both messages together, % of all sent.
    all_drop_pct: f64,
    /// What perfdhcp counts as rejected leases and non-unique addresses (the
    /// latter only with its -u, not given).
    bad_leases: f64,
}

/// Runs perfdhcp at `rate` for `secs` against `server` with the family's `args`.
fn perfdhcp_run(client: &NsRef, args: &[&str], server: &str, rate: u32, secs: u32) -> Perf {
    let out = client
        .command("perfdhcp")
        .args(args)
        .args([
            "-r",
            &rate.to_string(),
            "-p",
            &secs.to_string(),
            "-R",
            "60000",
            "-W",
            "500000",
            server,
        ])
        .output()
        .expect("perfdhcp");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    let num_after = |key: &str| -> Vec<f64> {
        text.lines()
            .filter(|l| l.trim_start().starts_with(key))
            .filter_map(|l| l.split(':').nth(1)?.split_whitespace().next()?.parse().ok())
            .collect()
    };
    let Some(rate) = num_after("Rate").first().copied() else {
        panic!("cannot read perfdhcp's output:\n{text}");
    };
    let sent = num_after("sent packets");
    let drops = num_after("drops");
    let pct = |s: f64, d: f64| if s > 0.0 { 100.0 * d / s } else { f64::NAN };
    Perf {
        rate,
        first_drop_pct: match (sent.first(), drops.first()) {
            (Some(s), Some(d)) => pct(*s, *d),
            _ => f64::NAN,
        },
        all_drop_pct: pct(sent.iter().sum(), drops.iter().sum()),
        bad_leases: ["rejected leases", "non unique addresses"]
            .iter()
            .flat_map(|k| num_after(k))
            .sum(),
    }
}

/// Runs `perfdhcp -4` at `rate` for `secs`; returns (completed exchanges/s, drop %).
fn perfdhcp(client: &NsRef, rate: u32, secs: u32) -> (f64, f64) {
    let p = perfdhcp_run(client, &["-4", "-l", "cli0"], "10.77.0.1", rate, secs);
    (p.rate, p.first_drop_pct)
}

fn bench_dhcp(quick: bool) -> Vec<(String, String, String)> {
    let secs = if quick { 3 } else { 8 };
    let rates: &[u32] = if quick {
        &[2000, 8000]
    } else {
        &[1000, 4000, 8000, 12000]
    };
    let mut rows = Vec::new();
    let mut bmo_results = Vec::new();
    {
        let n = net();
        let dir = TempDir::new("bench-dhcp");
        let mut cfg = config(dir.path());
        cfg.http = false;
        cfg.dhcp_mode = DhcpMode::Full;
        cfg.dhcp_range = Some("10.77.1.0,10.77.250.255,16".parse().unwrap());
        // The runs offer up to 60,000 distinct MACs, as for dnsmasq, whose lease table
        // has no cap; at bmo's default cap (4096) new clients go unanswered.
        cfg.dhcp_max_leases = 1_000_000;
        let rt = runtime_in(&n.server.handle());
        // Leases persisted to a file, as in production (dnsmasq writes its lease file too).
        let leases = LeaseTable::open(&cfg.lease_file).expect("lease file");
        let nb = rt
            .block_on(rt.spawn(async move { bmo::netboot::start(&cfg, leases).await }))
            .expect("join")
            .expect("start bmo");
        for &r in rates {
            bmo_results.push(perfdhcp(&n.client.handle(), r, secs));
        }
        drop(nb);
        drop(rt);
    }
    let dnsmasq_run = |extra: &[&str]| {
        let n = net();
        let dir = TempDir::new("bench-dnsmasq");
        let mut args = vec![
            "--no-ping",
            "--dhcp-range=10.77.1.0,10.77.250.255,255.255.0.0,1h",
            "--dhcp-lease-max=100000",
        ];
        args.extend_from_slice(extra);
        let _d = dnsmasq(&n.server.handle(), dir.path(), &args);
        wait_port(&n.server.handle(), "-u", 67);
        rates
            .iter()
            .map(|&r| perfdhcp(&n.client.handle(), r, secs))
            .collect::<Vec<_>>()
    };
    let dns_results = dnsmasq_run(&[]);
    let dns_ro_results = dnsmasq_run(&["--leasefile-ro"]);
    for (i, r) in rates.iter().enumerate() {
        let f = |(rate, drop): (f64, f64)| format!("{rate:.0}/s ({drop:.1}% dropped)");
        rows.push((
            format!("DHCP DORA, offered {r}/s, {secs} s"),
            f(bmo_results[i]),
            format!(
                "{}; with --leasefile-ro: {}",
                f(dns_results[i]),
                f(dns_ro_results[i])
            ),
        ));
    }
    rows
}

// ------------------------------------------------------------------ DHCPv6

/// [`net`] with IPv6 on the link: `srv0` fd77::1/64, `cli0` fd77::2/64, link-local
/// addresses past duplicate address detection.
fn net6() -> Net {
    let n = net();
    for (ns, dev, addr) in [
        (&n.server, "srv0", "fd77::1/64"),
        (&n.client, "cli0", "fd77::2/64"),
    ] {
        run(Command::new("ip").args(["-n", &ns.name, "addr", "add", addr, "dev", dev, "nodad"]));
    }
    for (ns, dev) in [(&n.server, "srv0"), (&n.client, "cli0")] {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let out =
                run(Command::new("ip").args(["-n", &ns.name, "-6", "addr", "show", "dev", dev]));
            if out.contains("fe80") && !out.contains("tentative") {
                break;
            }
            assert!(Instant::now() < deadline, "DAD on {dev}: {out}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    n
}

/// `perfdhcp -6 -A1`: each SOLICIT and REQUEST in a Relay-Forward from fd77::2
/// (link address fd77::2, no option 79). perfdhcp sends every simulated client from
/// `cli0`'s one MAC, varying only the MAC inside each client's DUID-LLT; bmo keys
/// leases by MAC and takes a directly sent message's MAC from the frame, so only
/// relayed messages, whose MAC comes from the DUID, are distinct clients to it.
/// dnsmasq gets the same relayed traffic.
fn perfdhcp6(client: &NsRef, rate: u32, secs: u32) -> Perf {
    perfdhcp_run(client, &["-6", "-A1", "-l", "cli0"], "fd77::1", rate, secs)
}

/// The same range for both servers, on fd77::/64 (more addresses than clients).
const RANGE6: &str = "fd77::1:0,fd77::fffe:ffff";

fn bmo_dhcp6(rates: &[u32], secs: u32) -> Vec<Perf> {
    let n = net6();
    let dir = TempDir::new("bench-dhcp6");
    let mut cfg = config(dir.path());
    cfg.http = false;
    cfg.provisioning.provisioning_ip_family = IpFamily::Ipv6;
    cfg.dhcp_mode = DhcpMode::Full;
    cfg.dhcp_range = Some(format!("{RANGE6},64").parse().unwrap());
    // As for DHCPv4: up to 60,000 distinct clients per run, no cap for dnsmasq.
    cfg.dhcp_max_leases = 1_000_000;
    let rt = runtime_in(&n.server.handle());
    let leases = LeaseTable::open(&cfg.lease_file).expect("lease file");
    let table = leases.clone();
    let nb = rt
        .block_on(rt.spawn(async move { bmo::netboot::start(&cfg, leases).await }))
        .expect("join")
        .expect("start bmo");
    let results = rates
        .iter()
        .map(|&r| perfdhcp6(&n.client.handle(), r, secs))
        .collect();
    // perfdhcp checks uniqueness only with -u, which assumes no client comes back
    // (its 60,000 do at 8000/s), so the table says whether the simulated clients
    // were distinct hosts with distinct addresses.
    let bound: Vec<_> = table
        .list()
        .into_iter()
        .filter(|l| l.state == LeaseState::Bound)
        .filter_map(|l| l.ip6)
        .collect();
    let distinct: std::collections::HashSet<_> = bound.iter().collect();
    eprintln!(
        "bmo DHCPv6: {} clients bound, {} distinct addresses",
        bound.len(),
        distinct.len()
    );
    assert_eq!(bound.len(), distinct.len(), "an address bound twice");
    drop(nb);
    drop(rt);
    results
}

fn dnsmasq_dhcp6(rates: &[u32], secs: u32, extra: &[&str]) -> Vec<Perf> {
    let n = net6();
    let dir = TempDir::new("bench-dnsmasq6");
    let range = format!("--dhcp-range={RANGE6},64,1h");
    let mut args = vec![range.as_str(), "--dhcp-lease-max=100000"];
    args.extend_from_slice(extra);
    let _d = dnsmasq(&n.server.handle(), dir.path(), &args);
    wait_port(&n.server.handle(), "-u", 547);
    rates
        .iter()
        .map(|&r| perfdhcp6(&n.client.handle(), r, secs))
        .collect()
}

fn bench_dhcp6(quick: bool) -> Vec<(String, String, String)> {
    let secs = if quick { 3 } else { 8 };
    // dnsmasq's DHCPv6 saturates near 250/s here, hence the low rates.
    let rates: &[u32] = if quick {
        &[250, 2000]
    } else {
        &[250, 500, 1000, 4000, 8000]
    };
    let bmo = bmo_dhcp6(rates, secs);
    let dns = dnsmasq_dhcp6(rates, secs, &[]);
    let dns_ro = dnsmasq_dhcp6(rates, secs, &["--leasefile-ro"]);
    let f = |p: &Perf| {
        let bad = if p.bad_leases > 0.0 {
            format!(", {:.0} leases rejected or not unique", p.bad_leases)
        } else {
            String::new()
        };
        format!("{:.0}/s ({:.1}% dropped{bad})", p.rate, p.all_drop_pct)
    };
    rates
        .iter()
        .enumerate()
        .map(|(i, r)| {
            (
                format!("DHCPv6 SARR relayed, offered {r}/s, {secs} s"),
                f(&bmo[i]),
                format!("{}; with --leasefile-ro: {}", f(&dns[i]), f(&dns_ro[i])),
            )
        })
        .collect()
}

// ------------------------------------------------------------------ TFTP

fn timed(n: usize, bytes: u64, mut f: impl FnMut()) -> f64 {
    let t = Instant::now();
    for _ in 0..n {
        f();
    }
    (n as u64 * bytes) as f64 / (1 << 20) as f64 / t.elapsed().as_secs_f64()
}

fn tftp_clients(client: &NsRef, dir: &Path, n: usize, size: u64) -> Vec<f64> {
    let out = dir.join("fetched");
    let o = out.to_str().unwrap().to_owned();
    let check = |o: &str| {
        let got = std::fs::metadata(o).map(|m| m.len()).unwrap_or(0);
        assert_eq!(got, size, "TFTP fetch incomplete");
        let _ = std::fs::remove_file(o);
    };
    let curl = |extra: &[&str]| {
        let o = o.clone();
        let extra: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
        timed(n, size, || {
            run(client
                .command("curl")
                .args(["-sS", "-o", &o])
                .args(&extra)
                .arg("tftp://10.77.0.1/loader.bin"));
            check(&o);
        })
    };
    let plain = curl(&[]);
    let blk = curl(&["--tftp-blksize", "1468"]);
    let win = timed(n, size, || {
        run(client.command("atftp").args([
            "--option",
            "blksize 1468",
            "--option",
            "windowsize 16",
            "-g",
            "-r",
            "loader.bin",
            "-l",
            &o,
            "10.77.0.1",
        ]));
        check(&o);
    });
    vec![plain, blk, win]
}

fn bench_tftp(quick: bool) -> Vec<(String, String, String)> {
    let size: u64 = 1 << 20;
    let n = if quick { 5 } else { 20 };
    let bmo = {
        let net = net();
        let dir = TempDir::new("bench-tftp");
        let mut cfg = config(dir.path());
        cfg.http = false;
        cfg.tftp = true;
        write_random(&cfg.tftp_root.join("loader.bin"), size as usize, 1);
        let rt = runtime_in(&net.server.handle());
        let _nb = start_bmo(&rt, cfg);
        tftp_clients(&net.client.handle(), dir.path(), n, size)
    };
    let dns = {
        let net = net();
        let dir = TempDir::new("bench-tftp-dnsmasq");
        let root = dir.path().join("tftpboot");
        std::fs::create_dir_all(&root).unwrap();
        write_random(&root.join("loader.bin"), size as usize, 1);
        let _d = dnsmasq(
            &net.server.handle(),
            dir.path(),
            &["--enable-tftp", &format!("--tftp-root={}", root.display())],
        );
        wait_port(&net.server.handle(), "-u", 69);
        tftp_clients(&net.client.handle(), dir.path(), n, size)
    };
    let names = [
        "curl, 512-byte blocks",
        "curl, blksize 1468",
        "atftp, blksize 1468 + windowsize 16",
    ];
    names
        .iter()
        .enumerate()
        .map(|(i, name)| {
            (
                format!("TFTP 1 MiB loader ×{n}, {name}"),
                format!("{:.1} MiB/s", bmo[i]),
                format!("{:.1} MiB/s", dns[i]),
            )
        })
        .collect()
}

// ------------------------------------------------------------------ HTTP

fn http_clients(client: &NsRef, url: &str, clients: usize, size: u64) -> f64 {
    let script = format!(
        "fail=0; for i in $(seq {clients}); do curl -s -o /dev/null -w '%{{size_download}}\\n' {url} & done; wait"
    );
    let t = Instant::now();
    let out = run(client.command("sh").args(["-c", &script]));
    let secs = t.elapsed().as_secs_f64();
    let sizes: Vec<u64> = out.lines().filter_map(|l| l.trim().parse().ok()).collect();
    assert!(
        sizes.len() == clients && sizes.iter().all(|s| *s == size),
        "incomplete downloads: {sizes:?}"
    );
    (clients as u64 * size) as f64 / (1 << 20) as f64 / secs
}

fn bench_http(quick: bool) -> Vec<(String, String, String)> {
    let size: u64 = if quick { 64 << 20 } else { 512 << 20 };
    let clients = 50;
    let data = TempDir::new("bench-http-data");
    let file = data.path().join("image.img");
    write_random(&file, size as usize, 5);
    let bmo = {
        let net = net();
        let dir = TempDir::new("bench-http");
        let mut cfg = config(dir.path());
        cfg.http_port = 8080;
        // All the clients come from one address; bmo answers connections over its
        // per-client cap (32 by default) with a 503.
        cfg.http_max_connections_per_client = clients as u32;
        std::fs::hard_link(&file, cfg.images_dir.join("image.img")).unwrap();
        let rt = runtime_in(&net.server.handle());
        let _nb = start_bmo(&rt, cfg);
        http_clients(
            &net.client.handle(),
            "http://10.77.0.1:8080/images/image.img",
            clients,
            size,
        )
    };
    let nginx = {
        let net = net();
        let dir = TempDir::new("bench-nginx");
        let conf = dir.path().join("nginx.conf");
        std::fs::write(
            &conf,
            format!(
                "user root;\nworker_processes 2;\ndaemon off;\npid {d}/nginx.pid;\nerror_log {d}/error.log;\nevents {{ worker_connections 1024; }}\nhttp {{\n  access_log off;\n  sendfile on;\n  tcp_nopush on;\n  client_body_temp_path {d};\n  proxy_temp_path {d};\n  fastcgi_temp_path {d};\n  uwsgi_temp_path {d};\n  scgi_temp_path {d};\n  server {{ listen 10.77.0.1:8080; root {root}; }}\n}}\n",
                d = dir.path().display(),
                root = data.path().display()
            ),
        )
        .unwrap();
        let _n = spawn(net.server.command("nginx").args([
            "-c",
            conf.to_str().unwrap(),
            "-p",
            dir.path().to_str().unwrap(),
        ]));
        wait_port(&net.server.handle(), "-t", 8080);
        http_clients(
            &net.client.handle(),
            "http://10.77.0.1:8080/image.img",
            clients,
            size,
        )
    };
    vec![(
        format!("HTTP {} MiB file, {clients} concurrent curl", size >> 20),
        format!("{bmo:.0} MiB/s"),
        format!("{nginx:.0} MiB/s"),
    )]
}

fn main() {
    // `cargo bench` passes `--bench`; anything else (e.g. `cargo test --benches`)
    // only checks that the program builds.
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    require(&["perfdhcp", "dnsmasq", "curl", "atftp", "nginx", "ip"]);
    let quick = std::env::var_os("BMO_BENCH_QUICK").is_some();
    let only = std::env::var("BMO_BENCH_ONLY").unwrap_or_default();
    let picked = |k: &str| only.is_empty() || only.split(',').any(|s| s.trim() == k);
    let mut rows = Vec::new();
    if picked("dhcp") {
        rows.extend(bench_dhcp(quick).into_iter().map(|r| (r, "dnsmasq")));
    }
    if picked("dhcp6") {
        rows.extend(bench_dhcp6(quick).into_iter().map(|r| (r, "dnsmasq")));
    }
    if picked("tftp") {
        rows.extend(bench_tftp(quick).into_iter().map(|r| (r, "dnsmasq")));
    }
    if picked("http") {
        rows.extend(bench_http(quick).into_iter().map(|r| (r, "nginx")));
    }
    println!();
    println!("| benchmark | bmo | reference | reference server |");
    println!("|---|---:|---:|---|");
    for ((name, bmo, reference), server) in rows {
        println!("| {name} | {bmo} | {reference} | {server} |");
    }
}
