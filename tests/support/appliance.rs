//! The packaged forms of bmo, shared by the appliance tests: the `sh` blocks of
//! docs/install.md (read and run as they are, with paths under a test root), the
//! static executable and the container image built by them, and a forwarder that
//! makes the stack's loopback ports appear inside a network namespace with no route
//! out.
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
/// Where docs/install.md installs to, and its `podman run` mounts from; the tests
/// use a root of their own instead of `/` (under_root).
pub const INSTALL_PATHS: &[&str] = &[
    "/usr/local/bin",
    "/etc/systemd/system",
    "/etc/bmo",
    "/shared",
    "/var/lib/bmo",
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

/// What a coverage run (cargo llvm-cov) sets to instrument cargo's builds.
const COVERAGE_VARS: [&str; 5] = [
    "CARGO_TARGET_DIR",
    "RUSTFLAGS",
    "CARGO_ENCODED_RUSTFLAGS",
    "LLVM_PROFILE_FILE",
    "RUSTC_WRAPPER",
];

/// The static executable, built by docs/install.md's "build-static" block (once per
/// test binary; later runs of scripts/build-static find it built).
pub fn static_binary() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            run_build_block("build-static");
            Path::new(ROOT).join("target/static/x86_64-unknown-linux-gnu/release/bmo")
        })
        .clone()
}

/// Runs the block `name` of docs/install.md in the repository. Its `apt-get install`
/// lines run as written, after `apt-get update`, when one of their packages is
/// missing; when all are installed, as a simulation (`-s`: resolved, but no dpkg
/// lock, which another apt-get on the machine may hold, and no network).
pub fn run_build_block(name: &str) -> String {
    let script = doc_script(name);
    let missing = script
        .lines()
        .filter_map(|l| l.trim().strip_prefix("apt-get install "))
        .flat_map(|args| args.split_whitespace().filter(|a| !a.starts_with('-')))
        .any(|pkg| {
            !output(Command::new("dpkg").args(["-s", pkg]))
                .status
                .success()
        });
    let script = if missing {
        run(Command::new("apt-get").args(["update", "-qq"]));
        script
    } else {
        script.replace("apt-get install ", "apt-get install -s ")
    };
    run_script(
        None,
        Path::new(ROOT),
        &script,
        &[("DEBIAN_FRONTEND", "noninteractive")],
    )
}

/// Where scripts/build-static builds for the tests: release artefacts kept across
/// clones (CI builds in a fresh one each time), so a run rebuilds bmo only, not its
/// dependencies.
fn static_build_cache() -> PathBuf {
    std::env::var("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|_| std::env::var("HOME").map(|home| Path::new(&home).join(".cache")))
        .unwrap_or_else(|_| Path::new(ROOT).join("target"))
        .join("bmo-build/static")
}

/// `$PATH` with the stack's kubectl in front, as its env file sets it.
pub fn stack_path(stack: &super::Stack) -> String {
    stack
        .var("PATH")
        .unwrap_or("$PATH")
        .replace("$PATH", &std::env::var("PATH").unwrap_or_default())
}

/// The image, built by docs/install.md's "build-image" block (once per test binary,
/// after the static executable), which also installs podman and runc.
pub fn image() -> &'static str {
    static SIZE: OnceLock<String> = OnceLock::new();
    SIZE.get_or_init(|| {
        static_binary();
        let out = run_build_block("build-image");
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
pub fn stack_addresses(stack: &super::Stack) -> Vec<SocketAddr> {
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

/// A `sh` block of docs/install.md: the name its `<!-- commands: NAME -->` marker
/// gives it (empty when it has none) and its text.
pub struct DocBlock {
    pub name: String,
    /// Why no test runs it (`<!-- commands: NAME, not run: WHY -->`).
    pub not_run: Option<String>,
    pub script: String,
}

/// Every `sh` block of docs/install.md, in order.
pub fn doc_blocks() -> Vec<DocBlock> {
    let doc = std::fs::read_to_string(Path::new(ROOT).join("docs/install.md"))
        .expect("read docs/install.md");
    let mut blocks = Vec::new();
    let mut name = String::new();
    let mut not_run = None;
    let mut lines = doc.lines();
    while let Some(line) = lines.next() {
        if let Some(marker) = line
            .strip_prefix("<!-- commands: ")
            .and_then(|m| m.strip_suffix(" -->"))
        {
            // `NAME` or `NAME, not run: WHY`.
            let (n, why) = marker.split_once(',').unwrap_or((marker, ""));
            name = n.trim().to_owned();
            not_run = why
                .trim()
                .strip_prefix("not run:")
                .map(|w| w.trim().to_owned());
            continue;
        }
        if line.trim() == "```sh" {
            let script: Vec<&str> = lines.by_ref().take_while(|l| l.trim() != "```").collect();
            blocks.push(DocBlock {
                name: std::mem::take(&mut name),
                not_run: not_run.take(),
                script: script.join("\n") + "\n",
            });
        } else if !line.trim().is_empty() {
            // A marker names only the block right after it.
            name.clear();
            not_run = None;
        }
    }
    blocks
}

/// The text of the block `name` of docs/install.md, to run with `sh -e`.
pub fn doc_script(name: &str) -> String {
    doc_blocks()
        .into_iter()
        .find(|b| b.name == name)
        .unwrap_or_else(|| panic!("docs/install.md has no block `<!-- commands: {name} -->`"))
        .script
}

/// `script` with each absolute path of `paths` that starts a word (after a blank,
/// `=` or the start of a line, so not the container side of `-v HOST:CONTAINER`)
/// moved under `root`: docs/install.md's commands install into `/`, the tests into
/// a directory of their own.
pub fn under_root(script: &str, root: &Path, paths: &[&str]) -> String {
    let mut out = String::with_capacity(script.len());
    let mut rest = script;
    'scan: while !rest.is_empty() {
        let at_word_start = out.is_empty() || out.ends_with([' ', '\t', '\n', '=']);
        if at_word_start {
            for path in paths {
                let Some(after) = rest.strip_prefix(path) else {
                    continue;
                };
                // Whole path components only: /etc/bmo, not /etc/bmod.
                if after.is_empty() || after.starts_with(['/', ' ', '\n', ':', '"', '\'']) {
                    out.push_str(&root.display().to_string());
                    out.push_str(path);
                    rest = after;
                    continue 'scan;
                }
            }
        }
        let mut chars = rest.chars();
        if let Some(c) = chars.next() {
            out.push(c);
        }
        rest = chars.as_str();
    }
    out
}

/// `sh -e -c SCRIPT` in `dir`, inside the network namespace `netns` when given (by
/// nsenter: `ip netns exec` remounts /sys, where podman needs the host's cgroup
/// hierarchy); panics with its output when it fails; returns stdout.
pub fn run_script(netns: Option<&str>, dir: &Path, script: &str, envs: &[(&str, &str)]) -> String {
    let mut cmd = match netns {
        Some(ns) => {
            let mut cmd = Command::new("nsenter");
            cmd.arg(format!("--net=/var/run/netns/{ns}")).arg("sh");
            cmd
        }
        None => Command::new("sh"),
    };
    // A coverage run (cargo llvm-cov) instruments through these; the shipped binary
    // that scripts/ build must not be.
    for var in COVERAGE_VARS {
        cmd.env_remove(var);
    }
    // Every script that builds the static binary (build-static, build-bundle) builds
    // it there.
    cmd.env("BMO_STATIC_BUILD_DIR", static_build_cache());
    run(cmd
        .current_dir(dir)
        .envs(envs.iter().copied())
        .args(["-e", "-c", script]))
}
