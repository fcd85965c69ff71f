//! `bmo run` under a descriptor limit of 1,024 (issue 36): clients holding 1,100 idle
//! connections to the health listener and 1,200 to the HTTP boot server from 40
//! addresses, reopened as bmo closes them, do not take the descriptors bmo needs:
//! `/healthz` answers within a second and a host applied meanwhile provisions.
//! Against the stack, on loopback only (127.0.0.x).

use std::io::Read;
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use bmo::api::{BareMetalHost, ProvisioningState};

use crate::netboot_run::{bmo_run, fds_of, free_port, raise_fd_limit, timed_get};
use crate::support::netboot::{ChildGuard, TempDir};
use crate::support::{Stack, create_fake_host, installed_namespace, wait_for_state};

/// The descriptor limit (soft and hard) `bmo run` gets.
const LIMIT: libc::rlim_t = 1024;
const HEALTH_CONNECTIONS: usize = 1_100;
const BOOT_CONNECTIONS: usize = 1_200;
const BOOT_ADDRESSES: u8 = 40;

/// A connection from `source` to 127.0.0.1:`port`; `None` if it cannot be made
/// within a second (a full accept queue).
fn connect_from(source: Ipv4Addr, port: u16) -> Option<TcpStream> {
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).ok()?;
    socket.bind(&SocketAddr::from((source, 0)).into()).ok()?;
    let server = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    socket
        .connect_timeout(&server.into(), Duration::from_secs(1))
        .ok()?;
    let stream: TcpStream = socket.into();
    stream.set_nonblocking(true).ok()?;
    Some(stream)
}

/// Whether bmo has closed (or answered and closed) `stream`.
fn closed(stream: &mut TcpStream) -> bool {
    let mut buf = [0u8; 512];
    !matches!(stream.read(&mut buf), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
}

/// Stops the connection holders when dropped, also when an assertion fails.
struct StopOnDrop(Arc<AtomicBool>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// `bmo run` against the stack, watching `ns`, under `LIMIT` descriptors (soft and
/// hard, set in the child before it runs bmo), logging to `log`.
fn start_bmo(ns: &str, dir: &Path, health: u16, http: u16, log: &Path) -> ChildGuard {
    let stack = Stack::get();
    let mut command = bmo_run(stack, health, http, dir, dir);
    command
        .env("WATCH_NAMESPACE", ns)
        .env(
            "METAL3_AUTH_ROOT_DIR",
            stack.var("METAL3_AUTH_ROOT_DIR").unwrap_or_default(),
        )
        .stderr(std::fs::File::create(log).expect("log file"));
    let limit = libc::rlimit {
        rlim_cur: LIMIT,
        rlim_max: LIMIT,
    };
    // SAFETY: setrlimit is async-signal-safe and reads only the struct it is given.
    unsafe {
        command.pre_exec(move || {
            if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) == 0 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        });
    }
    ChildGuard(command.spawn().expect("start bmo run"))
}

/// What the probes saw: the slowest `/healthz`, how many were timed, the most
/// descriptors bmo held, and each boot server answer with its time.
#[derive(Debug, Default)]
struct Probed {
    slowest: f64,
    samples: usize,
    most_fds: usize,
    boot: Vec<(Option<u16>, f64)>,
}

/// Times `/healthz` on both listeners each second until `done` and at least `least`
/// from now; panics, with bmo's log, on a `/healthz` that is not answered 200.
async fn probe_until(
    done: impl Fn() -> bool,
    least: Duration,
    (health, http): (u16, u16),
    pid: u32,
    log: &Path,
) -> Probed {
    let started = Instant::now();
    let mut probed = Probed::default();
    while !done() || started.elapsed() < least {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let (status, secs) = tokio::task::spawn_blocking(move || {
            timed_get(&format!("http://127.0.0.1:{health}/healthz"))
        })
        .await
        .expect("probe");
        let log = std::fs::read_to_string(log).unwrap_or_default();
        assert_eq!(status, Some(200), "/healthz after {probed:?}:\n{log}");
        probed.slowest = probed.slowest.max(secs);
        probed.samples += 1;
        probed.most_fds = probed.most_fds.max(fds_of(pid));
        let boot = tokio::task::spawn_blocking(move || {
            timed_get(&format!("http://127.0.0.1:{http}/healthz"))
        })
        .await
        .expect("boot probe");
        probed.boot.push(boot);
    }
    probed
}

/// Keeps `count` idle connections to `port` open, spread over `sources`, reopening
/// every one bmo closed each other second until `stop`; returns the most open at once
/// on the client's side.
fn hold(
    port: u16,
    sources: Vec<Ipv4Addr>,
    count: usize,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<usize> {
    std::thread::spawn(move || {
        let mut held: Vec<Option<TcpStream>> = (0..count).map(|_| None).collect();
        let mut most = 0;
        while !stop.load(Ordering::Relaxed) {
            for (i, slot) in held.iter_mut().enumerate() {
                if slot.as_mut().is_none_or(closed) {
                    *slot = connect_from(sources[i % sources.len()], port);
                }
            }
            most = most.max(held.iter().filter(|s| s.is_some()).count());
            std::thread::sleep(Duration::from_secs(2));
        }
        most
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_1024_descriptors_probes_answer_and_a_host_provisions_while_connections_are_held() {
    // Opens thousands of sockets: nothing else in this process may open files meanwhile.
    let _alone = crate::support::exclusive("netboot_run descriptors");
    let want = HEALTH_CONNECTIONS + BOOT_CONNECTIONS;
    assert_eq!(
        raise_fd_limit(want),
        want,
        "this test needs {want} descriptors"
    );
    let (client, ns) = installed_namespace("fds").await;
    let dir = TempDir::new("run-fds");
    let (health, http) = (free_port(), free_port());
    let log = dir.path().join("bmo.log");
    let bmo = start_bmo(&ns, dir.path(), health, http, &log);
    let deadline = Instant::now() + Duration::from_secs(90);
    while timed_get(&format!("http://127.0.0.1:{health}/readyz")).0 != Some(200) {
        assert!(Instant::now() < deadline, "bmo run did not become ready");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let bmo_log = || std::fs::read_to_string(&log).unwrap_or_default();
    let caps = bmo_log()
        .lines()
        .find(|l| l.contains("caps lowered to fit"))
        .map(str::to_owned);

    let stop = StopOnDrop(Arc::new(AtomicBool::new(false)));
    let health_sources = vec![Ipv4Addr::new(127, 0, 0, 2)];
    let health_holder = hold(health, health_sources, HEALTH_CONNECTIONS, stop.0.clone());
    let boot_sources = (0..BOOT_ADDRESSES)
        .map(|n| Ipv4Addr::new(127, 0, 0, 10 + n))
        .collect();
    let boot_holder = hold(http, boot_sources, BOOT_CONNECTIONS, stop.0.clone());
    // The clients' first round of connections, then a host applied meanwhile; the
    // probes are timed while it provisions, and for at least 20 s (the boot server's
    // header timeout twice over, so that closed connections are reopened).
    tokio::time::sleep(Duration::from_secs(5)).await;
    let name = "fds-host";
    create_fake_host(&client, &ns, name).await;
    let hosts = kube::Api::<BareMetalHost>::namespaced(client.clone(), &ns);
    let provisioned = tokio::spawn(async move {
        let state = ProvisioningState::Provisioned;
        wait_for_state(&hosts, name, state, Duration::from_secs(240)).await
    });
    let least = Duration::from_secs(20);
    let done = || provisioned.is_finished();
    let probed = probe_until(done, least, (health, http), bmo.0.id(), &log).await;
    let host = provisioned.await;
    drop(stop);
    let most_health = health_holder.join().expect("health holder");
    let most_boot = boot_holder.join().expect("boot holder");
    let Probed {
        slowest,
        samples,
        most_fds,
        boot,
    } = probed;
    let slowest_boot = boot.iter().map(|(_, s)| *s).fold(0.0, f64::max);
    let statuses: Vec<Option<u16>> = boot.iter().map(|(s, _)| *s).collect();
    println!(
        "under {LIMIT} descriptors ({}): up to {most_health} health and {most_boot} boot connections open on the client's side; \
         /healthz slowest {slowest:.3} s over {samples} samples; boot /healthz slowest {slowest_boot:.3} s \
         ({statuses:?}); bmo held {most_fds} descriptors at most",
        caps.as_deref().unwrap_or("caps not lowered"),
    );
    assert!(host.is_ok(), "the host provisions: {host:?}\n{}", bmo_log());
    assert!(slowest < 1.0, "/healthz took {slowest:.3} s");
    assert!(
        boot.iter()
            .all(|(status, secs)| matches!(status, Some(200 | 503)) && *secs < 1.0),
        "the boot server answers within a second: {boot:?}"
    );
    assert!(most_fds < LIMIT as usize, "bmo held {most_fds} descriptors");
    // The probe really ran: bmo lowered its caps, and the clients held more connections
    // than the caps asked for (128 health, 1,024 boot) would admit.
    assert!(caps.is_some(), "no warning that the caps were lowered");
    assert!(
        most_health > 128 && most_boot > 1024,
        "held {most_health} health and {most_boot} boot connections"
    );
}
