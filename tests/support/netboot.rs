//! Network namespaces for the netboot tests and benchmarks: the server and the
//! clients each live in a namespace the test creates, joined by veth pairs, so no
//! packet touches the machine's own interfaces. Everything is removed on drop,
//! also when a test fails.
#![allow(dead_code)] // each test binary uses a different part of this module

use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use bmo::netboot::config::{DhcpMode, IpFamily, NetbootConfig, ProvisioningNetwork};

/// Debian packages of the real peers, by the command each provides.
pub const PEERS: &[(&str, &str)] = &[
    ("dhclient", "isc-dhcp-client"),
    ("busybox", "busybox-static"),
    ("tftp", "tftp-hpa"),
    ("atftp", "atftp"),
    ("dnsmasq", "dnsmasq-base"),
    ("curl", "curl"),
    ("ip", "iproute2"),
    ("qemu-system-x86_64", "qemu-system-x86"),
    ("cpio", "cpio"),
    ("nginx", "nginx-light"),
    ("perfdhcp", "kea-admin"),
    ("dhcrelay", "isc-dhcp-relay"),
    ("rdisc6", "ndisc6"),
];

pub fn have(cmd: &str) -> bool {
    Command::new("sh")
        .args([
            "-c",
            &format!("command -v {cmd} >/dev/null 2>&1 || test -x /usr/sbin/{cmd}"),
        ])
        .status()
        .is_ok_and(|s| s.success())
}

/// Makes sure the given peer commands exist, installing them through the stack
/// script's install step (`tests/env/stack netboot-peers`) when missing.
pub fn require(cmds: &[&str]) {
    if cmds.iter().all(|c| have(c)) {
        return;
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/env/stack");
    let status = Command::new(&script).arg("netboot-peers").status();
    assert!(
        status.is_ok_and(|s| s.success()),
        "installing the netboot test peers failed; run `{} netboot-peers` as root",
        script.display()
    );
    for c in cmds {
        assert!(
            have(c),
            "{c} is still missing after `tests/env/stack netboot-peers`"
        );
    }
}

pub fn run(cmd: &mut Command) -> String {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

pub fn ip(args: &[&str]) {
    run(Command::new("ip").args(args));
}

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// A non-owning name of a namespace, to use from other threads.
#[derive(Debug, Clone)]
pub struct NsRef {
    pub name: String,
}

impl NsRef {
    /// `ip netns exec NAME PROGRAM`.
    pub fn command(&self, program: &str) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.name, program]);
        c
    }

    /// Runs `f` on a fresh thread inside this namespace, with a tokio runtime
    /// whose sockets are all created there.
    pub fn block_on<F, Fut, T>(&self, f: F) -> T
    where
        F: FnOnce() -> Fut + Send + 'static,
        Fut: std::future::Future<Output = T>,
        T: Send + 'static,
    {
        let ns = self.clone();
        std::thread::spawn(move || {
            ns.enter();
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime")
                .block_on(f())
        })
        .join()
        .unwrap_or_else(|p| std::panic::resume_unwind(p))
    }

    /// Moves the calling thread into this namespace.
    pub fn enter(&self) {
        let f = File::open(format!("/var/run/netns/{}", self.name)).expect("open netns");
        // SAFETY: setns on a valid fd; affects only the calling thread.
        let rc = unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) };
        assert_eq!(
            rc,
            0,
            "setns into {}: {}",
            self.name,
            std::io::Error::last_os_error()
        );
    }
}

/// A network namespace, deleted on drop.
pub struct Netns {
    pub name: String,
}

impl Netns {
    pub fn new(role: &str) -> Netns {
        let n = COUNTER.fetch_add(1, Ordering::SeqCst);
        let name = format!("bmo{}-{role}{n}", std::process::id());
        ip(&["netns", "add", &name]);
        let ns = Netns { name };
        ip(&["-n", &ns.name, "link", "set", "lo", "up"]);
        ns
    }

    pub fn handle(&self) -> NsRef {
        NsRef {
            name: self.name.clone(),
        }
    }

    /// `ip netns exec NAME PROGRAM`.
    pub fn command(&self, program: &str) -> Command {
        self.handle().command(program)
    }

    /// Moves the calling thread into this namespace.
    pub fn enter(&self) {
        self.handle().enter()
    }

    /// Runs `f` on a fresh thread inside this namespace, with a tokio runtime
    /// whose sockets are all created there.
    pub fn block_on<F, Fut, T>(&self, f: F) -> T
    where
        F: FnOnce() -> Fut + Send + 'static,
        Fut: std::future::Future<Output = T>,
        T: Send + 'static,
    {
        self.handle().block_on(f)
    }

    /// A std UDP socket bound inside this namespace.
    pub fn udp_socket(&self, addr: &str) -> std::net::UdpSocket {
        let ns = self.handle();
        let addr = addr.to_owned();
        std::thread::spawn(move || {
            ns.enter();
            std::net::UdpSocket::bind(&addr).expect("bind in netns")
        })
        .join()
        .expect("socket thread")
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        // Stop whatever a test left running inside, then remove the namespace.
        let _ = Command::new("ip")
            .args(["netns", "pids", &self.name])
            .output()
            .map(|o| {
                for pid in String::from_utf8_lossy(&o.stdout).split_whitespace() {
                    let _ = Command::new("kill").args(["-9", pid]).status();
                }
            });
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
    }
}

/// A server namespace and a client namespace joined by a veth pair:
/// server `srv0` 10.77.0.1/24 (fd77::1/64), client `cli0` (no address unless asked).
pub struct TestNet {
    pub server: Netns,
    pub client: Netns,
    pub server_ip: &'static str,
    pub client_ip: &'static str,
}

impl TestNet {
    /// Gives the client's `cli0` more addresses, 10.77.0.N/24 for each N in `hosts`,
    /// so that one namespace can act as many clients.
    pub fn add_client_addresses(&self, hosts: std::ops::RangeInclusive<u8>) {
        for n in hosts {
            ip(&[
                "-n",
                &self.client.name,
                "addr",
                "add",
                &format!("10.77.0.{n}/24"),
                "dev",
                "cli0",
            ]);
        }
    }

    /// `client_addr`: give the client 10.77.0.2/24 (for HTTP/TFTP tests); DHCP
    /// tests leave it unconfigured.
    pub fn new(client_addr: bool) -> TestNet {
        let server = Netns::new("s");
        let client = Netns::new("c");
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
            "10.77.0.1/24",
            "dev",
            "srv0",
        ]);
        ip(&[
            "-n",
            &server.name,
            "addr",
            "add",
            "fd77::1/64",
            "dev",
            "srv0",
            "nodad",
        ]);
        ip(&["-n", &server.name, "link", "set", "srv0", "up"]);
        if client_addr {
            ip(&[
                "-n",
                &client.name,
                "addr",
                "add",
                "10.77.0.2/24",
                "dev",
                "cli0",
            ]);
        }
        ip(&["-n", &client.name, "link", "set", "cli0", "up"]);
        TestNet {
            server,
            client,
            server_ip: "10.77.0.1",
            client_ip: "10.77.0.2",
        }
    }
}

/// A child process killed on drop.
pub struct ChildGuard(pub Child);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub fn spawn(cmd: &mut Command) -> ChildGuard {
    ChildGuard(
        cmd.stdin(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {cmd:?}: {e}")),
    )
}

/// A temporary directory, removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(prefix: &str) -> TempDir {
        let n = COUNTER.fetch_add(1, Ordering::SeqCst);
        let p = std::env::temp_dir().join(format!("bmo-{prefix}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).expect("temp dir");
        TempDir(p)
    }
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Netboot settings for tests: provisioning interface `srv0`, HTTP on an
/// ephemeral port, TFTP on 69, DHCP off; directories below `dir`.
pub fn config(dir: &Path) -> NetbootConfig {
    for d in ["html", "images", "tftpboot", "ipxe"] {
        std::fs::create_dir_all(dir.join(d)).expect("dir");
    }
    NetbootConfig {
        provisioning: ProvisioningNetwork {
            provisioning_ip: None,
            provisioning_interface: Some("srv0".into()),
            provisioning_macs: vec![],
            provisioning_cidr: None,
            provisioning_ip_family: IpFamily::Ipv4,
            provisioning_ip_wait_secs: 10,
        },
        deploy_kernel_url: None,
        deploy_ramdisk_url: None,
        http: true,
        http_bind: "0.0.0.0".parse().expect("ip"),
        http_port: 0,
        http_header_timeout_secs: 10,
        http_idle_timeout_secs: 60,
        http_max_connections: 1024,
        http_max_connections_per_client: 32,
        http_leases: bmo::netboot::http::LeasesAccess::Localhost,
        http_root: dir.join("html"),
        images_dir: dir.join("images"),
        tftp: false,
        tftp_addr: "0.0.0.0:69".parse().expect("addr"),
        tftp_max_sessions: 64,
        tftp_max_sessions_per_client: 4,
        tftp_root: dir.join("tftpboot"),
        ipxe_dir: dir.join("ipxe"),
        ipxe_kernel_params: "ipa-insecure=1".into(),
        dhcp_mode: DhcpMode::Off,
        dhcp_range: None,
        dhcp_hosts: None,
        dhcp_ignore: None,
        gateway_ip: None,
        dns_ip: None,
        router_advertisements: false,
        dhcp_lease_secs: 600,
        dhcp_max_leases: 4096,
        dhcp_lease_retention_secs: 7 * 24 * 3600,
        lease_file: dir.join("leases.json"),
    }
}

/// Polls `f` until it returns `Some` or `timeout` passes.
pub async fn eventually<T>(what: &str, timeout: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Writes `len` pseudo-random bytes to `path` (deterministic, incompressible).
pub fn write_random(path: &Path, len: usize, seed: u64) {
    use std::io::Write;
    let mut f = std::io::BufWriter::new(File::create(path).expect("create"));
    let mut x = seed | 1;
    let mut buf = vec![0u8; 1 << 16];
    let mut left = len;
    while left > 0 {
        for b in buf.iter_mut() {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            *b = x as u8;
        }
        let n = left.min(buf.len());
        f.write_all(&buf[..n]).expect("write");
        left -= n;
    }
}
