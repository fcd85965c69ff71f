//! The packaged forms of bmo, shared by the appliance tests: the static executable
//! (one `scripts/build-static` per suite run: later calls find it built), the
//! container image (`scripts/build-image`, once per test binary), podman, and a
//! forwarder that makes the stack's loopback ports appear inside a network namespace
//! with no route out.
#![allow(dead_code)] // each test binary uses a different part of this module

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock, mpsc};
use std::time::{Duration, Instant};

pub const ROOT: &str = env!("CARGO_MANIFEST_DIR");
/// The tag scripts/build-image gives the image, as docs/install.md and
/// deploy/kustomization.yaml name it.
pub const IMAGE: &str = concat!("localhost/bmo:", env!("CARGO_PKG_VERSION"));
/// The flags `podman run` needs on this machine (docs/install.md, "Container image").
pub const PODMAN_RUN_FLAGS: &[&str] = &[
    "--runtime",
    "/usr/sbin/runc",
    "--ulimit",
    "nofile=1024:1024",
    "--ulimit",
    "nproc=1024:1024",
];

/// Runs `cmd`, panicking with its output when it fails; returns stdout.
pub fn run(cmd: &mut Command) -> String {
    let out = output(cmd);
    assert!(
        out.status.success(),
        "{cmd:?} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

pub fn output(cmd: &mut Command) -> Output {
    cmd.output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"))
}

/// A command of scripts/ with the environment a shipped build needs: a coverage run
/// (cargo llvm-cov) instruments through these variables; the shipped binary must not be.
pub fn script(name: &str) -> Command {
    let mut cmd = Command::new(Path::new(ROOT).join("scripts").join(name));
    cmd.current_dir(ROOT)
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .env_remove("LLVM_PROFILE_FILE")
        .env_remove("RUSTC_WRAPPER");
    cmd
}

/// The static executable of scripts/build-static (built once per suite run).
pub fn static_binary() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            run(&mut script("build-static"));
            Path::new(ROOT).join("target/static/x86_64-unknown-linux-gnu/release/bmo")
        })
        .clone()
}

/// Installs podman and Debian's runc when missing.
pub fn ensure_podman() {
    static DONE: OnceLock<()> = OnceLock::new();
    DONE.get_or_init(|| {
        let have = |p: &str| Path::new(p).exists();
        if have("/usr/bin/podman") && have("/usr/sbin/runc") {
            return;
        }
        run(Command::new("apt-get").args(["update", "-qq"]));
        run(Command::new("apt-get")
            .env("DEBIAN_FRONTEND", "noninteractive")
            .args([
                "install",
                "-y",
                "-qq",
                "--no-install-recommends",
                "podman",
                "runc",
            ]));
    });
}

/// `podman kube play` builds its pod's pause image from catatonit.
pub fn ensure_kube_play() {
    ensure_podman();
    static DONE: OnceLock<()> = OnceLock::new();
    DONE.get_or_init(|| {
        if Path::new("/usr/bin/catatonit").exists()
            || Path::new("/usr/libexec/podman/catatonit").exists()
        {
            return;
        }
        run(Command::new("apt-get")
            .env("DEBIAN_FRONTEND", "noninteractive")
            .args([
                "install",
                "-y",
                "-qq",
                "--no-install-recommends",
                "catatonit",
            ]));
    });
}

/// The containers.conf that gives `podman kube play` (which takes no `--runtime` or
/// `--ulimit`) what PODMAN_RUN_FLAGS give `podman run`; docs/install.md shows it.
pub const CONTAINERS_CONF: &str = "[containers]
default_ulimits = [\"nofile=1024:1024\", \"nproc=1024:1024\"]
[engine]
runtime = \"runc\"
";

/// `podman` run in the network namespace `netns` (by nsenter: `ip netns exec`
/// remounts /sys, where podman needs the host's cgroup hierarchy), with
/// CONTAINERS_CONF.
pub fn podman_in(netns: &str) -> Command {
    static CONF: OnceLock<PathBuf> = OnceLock::new();
    let conf = CONF.get_or_init(|| {
        let path = std::env::temp_dir().join(format!("bmo-containers-{}.conf", std::process::id()));
        std::fs::write(&path, CONTAINERS_CONF).expect("write containers.conf");
        path
    });
    let mut cmd = Command::new("nsenter");
    cmd.arg(format!("--net=/var/run/netns/{netns}"))
        .arg("podman")
        .env("CONTAINERS_CONF", conf);
    cmd
}

/// The image of scripts/build-image (built once per test binary) and the size it
/// reported.
pub fn image() -> &'static str {
    static SIZE: OnceLock<String> = OnceLock::new();
    SIZE.get_or_init(|| {
        static_binary();
        ensure_podman();
        let out = run(&mut script("build-image"));
        let size = out
            .lines()
            .find(|l| l.starts_with("image size: "))
            .unwrap_or_else(|| panic!("build-image printed no size:\n{out}"))
            .to_owned();
        // Shown with --nocapture; docs/install.md quotes it.
        println!("{size}");
        size
    });
    IMAGE
}

/// `podman ARGS`.
pub fn podman(args: &[&str]) -> Command {
    let mut cmd = Command::new("podman");
    cmd.args(args);
    cmd
}

/// Polls `check` until it returns `Some`, or panics after `timeout` naming `what` and
/// the last observation.
pub fn wait_for<T>(
    what: &str,
    timeout: Duration,
    mut check: impl FnMut() -> Result<T, String>,
) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        match check() {
            Ok(v) => return v,
            Err(last) if Instant::now() >= deadline => {
                panic!("timed out after {timeout:?} waiting for {what}; last seen: {last}")
            }
            Err(_) => std::thread::sleep(Duration::from_millis(250)),
        }
    }
}

/// `curl URL` run by `cmd` (e.g. `ip netns exec NS curl`): (status, body).
pub fn curl(mut cmd: Command, url: &str) -> Result<(u16, Vec<u8>), String> {
    let out = cmd
        .args([
            "-sS",
            "--max-time",
            "5",
            "-o",
            "-",
            "-w",
            "\n%{http_code}",
            url,
        ])
        .output()
        .map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    let split = out
        .stdout
        .iter()
        .rposition(|b| *b == b'\n')
        .ok_or("no status line")?;
    let code = String::from_utf8_lossy(&out.stdout[split + 1..])
        .trim()
        .parse()
        .map_err(|e| format!("status: {e}"))?;
    Ok((code, out.stdout[..split].to_vec()))
}

/// Where the stack's kube-apiserver and Ironic listen (loopback addresses).
pub fn stack_addresses(stack: &crate::support::Stack) -> Vec<SocketAddr> {
    let kubeconfig = std::fs::read_to_string(&stack.kubeconfig).expect("read kubeconfig");
    let server = kubeconfig
        .lines()
        .find_map(|l| l.trim().strip_prefix("server: "))
        .expect("kubeconfig names a server");
    let mut addrs = Vec::new();
    for url in [server, stack.ironic_endpoint.as_str()] {
        let url = url::Url::parse(url).expect("URL");
        let addr = url.socket_addrs(|| None).expect("address of a stack URL");
        addrs.push(addr[0]);
    }
    addrs
}

/// Makes `addrs` (loopback addresses of this namespace) reachable at the same
/// addresses inside the network namespace `netns`, which needs no route: the test
/// process holds a listener inside and a connection outside, and copies between
/// them. Stops accepting when dropped.
pub struct Forwarder {
    stop: Arc<AtomicBool>,
}

impl Forwarder {
    pub fn start(netns: &str, addrs: &[SocketAddr]) -> Forwarder {
        let stop = Arc::new(AtomicBool::new(false));
        for &addr in addrs {
            let (accepted_tx, accepted_rx) = mpsc::channel::<TcpStream>();
            let (bound_tx, bound_rx) = mpsc::channel::<Result<(), String>>();
            let ns_path = format!("/var/run/netns/{netns}");
            let stop_inside = stop.clone();
            std::thread::spawn(move || {
                let listener = enter_netns(&ns_path)
                    .and_then(|()| TcpListener::bind(addr).map_err(|e| e.to_string()))
                    .and_then(|l| {
                        l.set_nonblocking(true)
                            .map(|()| l)
                            .map_err(|e| e.to_string())
                    });
                let listener = match listener {
                    Ok(l) => {
                        let _ = bound_tx.send(Ok(()));
                        l
                    }
                    Err(e) => {
                        let _ = bound_tx.send(Err(e));
                        return;
                    }
                };
                while !stop_inside.load(Ordering::SeqCst) {
                    match listener.accept() {
                        Ok((stream, _)) => {
                            let _ = stream.set_nonblocking(false);
                            if accepted_tx.send(stream).is_err() {
                                return;
                            }
                        }
                        Err(e) if e.kind() == ErrorKind::WouldBlock => {
                            std::thread::sleep(Duration::from_millis(20));
                        }
                        Err(_) => return,
                    }
                }
            });
            bound_rx
                .recv()
                .expect("forwarder thread")
                .unwrap_or_else(|e| panic!("cannot listen on {addr} in {netns}: {e}"));
            // Connections out are opened by this thread, which stays in the test's
            // own namespace.
            std::thread::spawn(move || {
                for inside in accepted_rx {
                    if let Ok(outside) = TcpStream::connect(addr) {
                        pipe(inside, outside);
                    }
                }
            });
        }
        Forwarder { stop }
    }
}

impl Drop for Forwarder {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

fn enter_netns(path: &str) -> Result<(), String> {
    use std::os::fd::AsRawFd;
    let f = std::fs::File::open(path).map_err(|e| format!("{path}: {e}"))?;
    // SAFETY: setns on a valid fd; affects only the calling thread.
    let rc = unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error().to_string())
    }
}

/// Copies both ways until either side closes.
fn pipe(a: TcpStream, b: TcpStream) {
    let (Ok(a2), Ok(b2)) = (a.try_clone(), b.try_clone()) else {
        return;
    };
    std::thread::spawn(move || copy_then_close(a, b2));
    std::thread::spawn(move || copy_then_close(b, a2));
}

fn copy_then_close(mut from: TcpStream, mut to: TcpStream) {
    let mut buf = [0u8; 16 * 1024];
    loop {
        match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if to.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
        }
    }
    let _ = to.shutdown(Shutdown::Write);
}
