//! Scale benchmark (issues 8 and 18): N hosts applied at once, with their Secrets, on
//! the real test stack, in two works:
//! - fake-hardware hosts with an image: apply → `available` → `provisioned`;
//! - Redfish hosts on a sushy-emulator of the benchmark's own (fake driver, N
//!   systems), inspection and automated cleaning disabled: apply → `available`.
//!
//! For each it measures how long until all hosts reach the target state, what bmo
//! costs (peak RSS, CPU seconds) and how many requests it makes to the kube-apiserver
//! and to Ironic, while working and once idle. The same Ironic work is then driven
//! directly with the same number of hosts in flight, so the table shows bmo's
//! overhead as a ratio. Prints one markdown table, writes `target/scale-bench.csv`
//! and plots time to the target state against N, bmo and direct, in
//! `docs/scale.svg`.
//!
//!   tests/env/stack up
//!   BMO_SCALE_HOSTS=10,100,1000 cargo bench --bench scale
//!
//! Settings (environment):
//!   BMO_SCALE_HOSTS              host counts, comma-separated (10,100)
//!   BMO_SCALE_WORKS              works to run, comma-separated (fake,redfish)
//!   BMO_SCALE_SVG                where the plot goes (docs/scale.svg; empty: none)
//!   BMO_SCALE_HALVES             which runs, comma-separated (bmo,direct; also
//!                                direct-as-bmo: the direct driver also sends the
//!                                reads bmo's features make (ports, BIOS settings,
//!                                firmware components, inventory) and, on the fake
//!                                work, the power-on `online: true` asks for, which
//!                                fake-hardware's deploy leaves undone; it tells
//!                                bmo's own overhead from the Ironic work its
//!                                features add)
//!   BMO_SCALE_IDLE_SECS          idle window after all are provisioned (120)
//!   BMO_SCALE_TIMEOUT_SECS       give up on one N after this long (7200)
//!   BMO_SCALE_CONCURRENCY        bmo's BMO_CONCURRENCY (bmo's default, 8)
//!   BMO_SCALE_PROVISIONING_LIMIT bmo's PROVISIONING_LIMIT and the direct driver's
//!                                hosts in flight (bmo's default, 20)
//!   BMO_SCALE_DIRECT_POLL_MS     how often the direct driver polls a node (1000)
//!   BMO_SCALE_IRONIC_CONF        extra lines for the Ironic config, `;`-separated
//!   BMO_STACK_ENV                the stack's env file (target/test-stack.env)
//!   BMO_SCALE_BMO                the bmo binary to measure (the one cargo built), to
//!                                compare two builds with one benchmark binary
//!
//! Every run gets an empty Ironic of its own (`tests/env/stack private-ironic`) and
//! its own namespace. bmo talks to both servers through counting proxies in this
//! process (plain HTTP on loopback; the kube proxy forwards to the apiserver over
//! TLS), so the request counts are bmo's alone; the benchmark's own watch and
//! creates go straight to the apiserver and are not counted.

// Tests and benchmarks may panic on what they set up themselves.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures::{StreamExt, TryStreamExt};
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, PostParams};
use kube::runtime::watcher;
use serde_json::{Value, json};
use tokio::sync::Semaphore;

const IRONIC_VERSION_HEADER: &str = "X-OpenStack-Ironic-API-Version";
const IRONIC_MICROVERSION: &str = "1.89";
/// How long the proxies keep an idle connection to Ironic: under the 10 s after which
/// Ironic's server closes one.
const UPSTREAM_IDLE: Duration = Duration::from_secs(4);
const IMAGE_URL: &str = "http://images.example.test/ubuntu-24.04.qcow2";
const IMAGE_SHA256: &str = "8a3f7e0c2b1d4e5f6a7b8c9d0e1f2a3b4c5d6e7f8a9b0c1d2e3f4a5b6c7d8e9f";

fn main() -> Result<()> {
    bmo::tls::install_crypto_provider();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("start the tokio runtime")?;
    runtime.block_on(run())
}

// ---------------------------------------------------------------- settings

/// What the hosts are and how far they go.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum Work {
    /// fake-hardware hosts with an image: apply → provisioned.
    #[default]
    Fake,
    /// Redfish hosts on sushy-emulator, no inspection, no automated cleaning:
    /// apply → available.
    Redfish,
}

impl Work {
    fn parse(s: &str) -> Result<Work> {
        match s {
            "fake" => Ok(Work::Fake),
            "redfish" => Ok(Work::Redfish),
            other => bail!("BMO_SCALE_WORKS: unknown work {other} (fake, redfish)"),
        }
    }

    fn label(self) -> &'static str {
        match self {
            Work::Fake => "fake-hardware",
            Work::Redfish => "Redfish",
        }
    }

    fn target(self) -> &'static str {
        match self {
            Work::Fake => "provisioned",
            Work::Redfish => "available",
        }
    }
}

struct Settings {
    hosts: Vec<usize>,
    works: Vec<Work>,
    run_bmo: bool,
    run_direct: bool,
    svg: Option<PathBuf>,
    idle: Duration,
    timeout: Duration,
    concurrency: usize,
    limit: usize,
    direct_poll: Duration,
    /// A second direct run that also does the Ironic work bmo's features add.
    run_direct_as_bmo: bool,
    ironic_conf: Vec<String>,
}

fn env_or<T: std::str::FromStr>(key: &str, default: T) -> Result<T> {
    match std::env::var(key) {
        Ok(v) if !v.trim().is_empty() => v
            .trim()
            .parse()
            .map_err(|_| anyhow::anyhow!("{key}={v} is not a valid number")),
        _ => Ok(default),
    }
}

impl Settings {
    fn from_env() -> Result<Settings> {
        let hosts = std::env::var("BMO_SCALE_HOSTS").unwrap_or_else(|_| "10,100".into());
        let hosts = hosts
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(|s| {
                s.parse::<usize>()
                    .with_context(|| format!("BMO_SCALE_HOSTS: {s}"))
            })
            .collect::<Result<Vec<_>>>()?;
        if hosts.is_empty() || hosts.contains(&0) {
            bail!("BMO_SCALE_HOSTS needs positive host counts, e.g. 10,100,1000");
        }
        let works = std::env::var("BMO_SCALE_WORKS").unwrap_or_else(|_| "fake,redfish".into());
        let works = works
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(Work::parse)
            .collect::<Result<Vec<_>>>()?;
        if works.is_empty() {
            bail!("BMO_SCALE_WORKS names no work (fake, redfish)");
        }
        let svg = match std::env::var("BMO_SCALE_SVG") {
            Ok(path) if path.trim().is_empty() => None,
            Ok(path) => Some(PathBuf::from(path.trim())),
            Err(_) => Some(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("docs/scale.svg")),
        };
        let halves = std::env::var("BMO_SCALE_HALVES").unwrap_or_else(|_| "bmo,direct".into());
        let halves: Vec<&str> = halves.split(',').map(str::trim).collect();
        if let Some(unknown) = halves
            .iter()
            .find(|h| !["bmo", "direct", "direct-as-bmo"].contains(h))
        {
            bail!("BMO_SCALE_HALVES: {unknown} is not bmo, direct or direct-as-bmo");
        }
        Ok(Settings {
            hosts,
            works,
            run_bmo: halves.contains(&"bmo"),
            run_direct: halves.contains(&"direct"),
            svg,
            idle: Duration::from_secs(env_or("BMO_SCALE_IDLE_SECS", 120)?),
            timeout: Duration::from_secs(env_or("BMO_SCALE_TIMEOUT_SECS", 7200)?),
            concurrency: env_or("BMO_SCALE_CONCURRENCY", 8)?,
            limit: env_or("BMO_SCALE_PROVISIONING_LIMIT", 20)?,
            direct_poll: Duration::from_millis(env_or("BMO_SCALE_DIRECT_POLL_MS", 1000)?),
            run_direct_as_bmo: halves.contains(&"direct-as-bmo"),
            ironic_conf: std::env::var("BMO_SCALE_IRONIC_CONF")
                .unwrap_or_default()
                .split(';')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect(),
        })
    }
}

/// `export KEY=value` lines of the stack's env file.
struct StackEnv {
    vars: HashMap<String, String>,
}

impl StackEnv {
    fn load(repo: &Path) -> Result<StackEnv> {
        let file = std::env::var_os("BMO_STACK_ENV")
            .map(PathBuf::from)
            .unwrap_or_else(|| repo.join("target/test-stack.env"));
        let text = std::fs::read_to_string(&file).with_context(|| {
            format!(
                "no stack env file at {}: start the stack with `tests/env/stack up`",
                file.display()
            )
        })?;
        let vars = text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .filter_map(|l| {
                let l = l.strip_prefix("export ").unwrap_or(l);
                let (k, v) = l.split_once('=')?;
                Some((k.to_owned(), v.to_owned()))
            })
            .collect();
        Ok(StackEnv { vars })
    }

    fn get(&self, key: &str) -> Result<&str> {
        self.vars
            .get(key)
            .map(String::as_str)
            .with_context(|| format!("the stack env file has no {key}"))
    }
}

// ---------------------------------------------------------------- counting proxy

#[derive(Default)]
struct Counts {
    total: AtomicU64,
    by_kind: Mutex<BTreeMap<String, u64>>,
}

impl Counts {
    fn add(&self, kind: String) {
        self.total.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut map) = self.by_kind.lock() {
            *map.entry(kind).or_default() += 1;
        }
    }

    fn snapshot(&self) -> (u64, BTreeMap<String, u64>) {
        let map = self.by_kind.lock().map(|m| m.clone()).unwrap_or_default();
        (self.total.load(Ordering::Relaxed), map)
    }
}

fn diff(after: &BTreeMap<String, u64>, before: &BTreeMap<String, u64>) -> BTreeMap<String, u64> {
    after
        .iter()
        .map(|(k, v)| (k.clone(), v - before.get(k).copied().unwrap_or(0)))
        .filter(|(_, v)| *v > 0)
        .collect()
}

#[derive(Clone, Copy)]
enum Flavor {
    Kube,
    Ironic,
}

#[derive(Clone)]
struct ProxyState {
    upstream: String,
    client: reqwest::Client,
    counts: Arc<Counts>,
    flavor: Flavor,
}

/// A request's kind for the breakdown: verb and resource, names replaced by `{}`.
fn classify(flavor: Flavor, method: &str, path: &str, query: &str) -> String {
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    match flavor {
        Flavor::Kube => {
            let watch = query
                .split('&')
                .any(|q| q == "watch=true" || q == "watch=1");
            let verb = if watch { "WATCH" } else { method };
            match segments.iter().position(|s| *s == "namespaces") {
                Some(i) if segments.len() > i + 2 => {
                    let rest = &segments[i + 2..];
                    let verb = if verb == "GET" && rest.len() == 1 {
                        "LIST"
                    } else {
                        verb
                    };
                    match rest {
                        [resource] | [resource, _] => format!("{verb} {resource}"),
                        [resource, _, sub, ..] => format!("{verb} {resource}/{sub}"),
                        [] => format!("{verb} {path}"),
                    }
                }
                _ => {
                    let verb = if verb == "GET" && segments.len() >= 3 && !watch {
                        "LIST"
                    } else {
                        verb
                    };
                    match segments.last() {
                        Some(last) if segments.len() >= 3 => format!("{verb} {last} (all)"),
                        _ => format!("{verb} /{}", segments.join("/")),
                    }
                }
            }
        }
        Flavor::Ironic => {
            let mut out = Vec::with_capacity(segments.len());
            let mut previous = "";
            for s in &segments {
                let named = matches!(previous, "nodes" | "ports") && *s != "detail";
                out.push(if named { "{}" } else { s });
                previous = s;
            }
            format!("{method} /{}", out.join("/"))
        }
    }
}

/// An error and its causes, on one line (reqwest's own message says only which
/// request failed).
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        text += &format!(": {cause}");
        source = cause.source();
    }
    text
}

async fn forward(State(proxy): State<ProxyState>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    proxy.counts.add(classify(
        proxy.flavor,
        parts.method.as_str(),
        parts.uri.path(),
        parts.uri.query().unwrap_or_default(),
    ));
    let body = match axum::body::to_bytes(body, 256 << 20).await {
        Ok(b) => b,
        Err(e) => return (StatusCode::BAD_REQUEST, e.to_string()).into_response(),
    };
    let url = format!(
        "{}{}",
        proxy.upstream,
        parts
            .uri
            .path_and_query()
            .map(|p| p.as_str())
            .unwrap_or("/")
    );
    let mut headers: HeaderMap = parts.headers;
    for h in [
        header::HOST,
        header::CONNECTION,
        header::CONTENT_LENGTH,
        header::TRANSFER_ENCODING,
    ] {
        headers.remove(h);
    }
    let method = parts.method.clone();
    let upstream = proxy
        .client
        .request(parts.method, url)
        .headers(headers)
        .body(body)
        .send()
        .await;
    match upstream {
        Err(e) => {
            let chain = error_chain(&e);
            eprintln!("scale: proxy: {method} {}: {chain}", parts.uri.path());
            (StatusCode::BAD_GATEWAY, chain).into_response()
        }
        Ok(r) => {
            let status = r.status();
            let mut headers = r.headers().clone();
            headers.remove(header::TRANSFER_ENCODING);
            headers.remove(header::CONNECTION);
            // Streamed chunk by chunk: watches are long-lived responses.
            let stream = futures::stream::try_unfold(r, |mut r| async move {
                Ok::<_, reqwest::Error>(r.chunk().await?.map(|c| (c, r)))
            });
            let mut response = Response::new(Body::from_stream(stream));
            *response.status_mut() = status;
            *response.headers_mut() = headers;
            response
        }
    }
}

struct Proxy {
    port: u16,
    counts: Arc<Counts>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn start_proxy(upstream: &str, ca_pem: Option<&[u8]>, flavor: Flavor) -> Result<Proxy> {
    // Ironic's API server (cheroot) closes a keep-alive connection after 10 s without
    // a request. A pooled connection idle about that long could be picked just as
    // the server closed it, and the request failed with "connection closed before
    // message completed", which the proxy passed on as a 502 (the direct driver
    // then gave up: N = 100 under load). Pooled connections are dropped first.
    let mut builder = reqwest::Client::builder()
        .pool_max_idle_per_host(256)
        .pool_idle_timeout(UPSTREAM_IDLE)
        .connect_timeout(Duration::from_secs(10));
    if let Some(pem) = ca_pem {
        builder = builder.add_root_certificate(
            reqwest::Certificate::from_pem(pem).context("the stack's CA certificate")?,
        );
    }
    let counts = Arc::new(Counts::default());
    let state = ProxyState {
        upstream: upstream.trim_end_matches('/').to_owned(),
        client: builder.build().context("build the proxy's HTTP client")?,
        counts: counts.clone(),
        flavor,
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .context("bind a proxy port on loopback")?;
    let port = listener.local_addr()?.port();
    let app = axum::Router::new().fallback(forward).with_state(state);
    let task = tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            eprintln!("scale: proxy stopped: {e}");
        }
    });
    Ok(Proxy { port, counts, task })
}

// ---------------------------------------------------------------- processes

fn clock_ticks() -> f64 {
    // SAFETY: sysconf has no preconditions; it only reads a system constant.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if ticks > 0 { ticks as f64 } else { 100.0 }
}

/// (process group, user+system CPU seconds) of a live process.
fn proc_stat(pid: u32) -> Option<(u32, f64)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = after.split_whitespace().collect();
    let pgrp = fields.get(2)?.parse().ok()?;
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    Some((pgrp, (utime + stime) / clock_ticks()))
}

/// CPU seconds of every live process in a process group (Ironic and its workers).
fn group_cpu_seconds(pgid: u32) -> f64 {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return 0.0;
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(proc_stat)
        .filter(|(g, _)| *g == pgid)
        .map(|(_, cpu)| cpu)
        .sum()
}

/// A `/proc/PID/status` value in KiB (VmRSS, VmHWM).
fn status_kib(pid: u32, key: &str) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// An empty Ironic of our own, stopped when dropped.
struct PrivateIronic {
    script: PathBuf,
    dir: PathBuf,
    endpoint: String,
    pid: u32,
}

impl PrivateIronic {
    fn start(repo: &Path, stack_dir: &Path, name: &str, conf: &[String]) -> Result<Self> {
        let script = repo.join("tests/env/stack");
        let dir = stack_dir.join(name);
        let out = Command::new(&script)
            .args(["private-ironic", "start"])
            .arg(&dir)
            .args(conf)
            .stderr(Stdio::inherit())
            .output()
            .context("run tests/env/stack private-ironic start")?;
        if !out.status.success() {
            bail!("private-ironic start failed ({})", out.status);
        }
        let endpoint = String::from_utf8_lossy(&out.stdout)
            .lines()
            .last()
            .unwrap_or_default()
            .trim()
            .to_owned();
        let pids = std::fs::read_to_string(dir.join("pids")).context("private Ironic pids")?;
        let pid = pids
            .lines()
            .find_map(|l| l.strip_suffix(" ironic")?.parse().ok())
            .context("no ironic pid in the private Ironic's pids file")?;
        Ok(PrivateIronic {
            script,
            dir,
            endpoint,
            pid,
        })
    }

    fn cpu_seconds(&self) -> f64 {
        group_cpu_seconds(self.pid)
    }
}

impl Drop for PrivateIronic {
    fn drop(&mut self) {
        let _ = Command::new(&self.script)
            .args(["private-ironic", "stop"])
            .arg(&self.dir)
            .status();
    }
}

/// A sushy-emulator of our own with `n` fake systems (its fake driver, as the stack
/// runs it: no VMs, power and boot kept in memory), the stack's Redfish user; stopped
/// when dropped.
struct Sushy {
    child: Child,
    port: u16,
    ids: Vec<String>,
    username: String,
    password: String,
}

impl Sushy {
    fn start(ctx: &Ctx, name: &str, run: usize, n: usize) -> Result<Sushy> {
        // The stack's env file puts its Python venv first on PATH.
        let venv_bin = ctx
            .stack
            .get("PATH")?
            .split(':')
            .next()
            .context("the stack's PATH is empty")?
            .to_owned();
        let username = ctx.stack.get("REDFISH_USERNAME")?.to_owned();
        let password = ctx.stack.get("REDFISH_PASSWORD")?.to_owned();
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let ids: Vec<String> = (0..n)
            .map(|i| format!("5ca1e000-0000-4000-8000-{:04x}{:08x}", run & 0xffff, i))
            .collect();
        let mut systems = String::new();
        for (i, id) in ids.iter().enumerate() {
            let _ = writeln!(
                systems,
                "    {{'uuid': '{id}', 'name': 'scale-{i}', 'power_state': 'Off', 'external_notifier': False, 'nics': [{{'mac': '{}', 'ip': '192.0.2.1'}}]}},",
                mac(run, i)
            );
        }
        let conf = ctx.stack_dir.join(format!("{name}.conf"));
        std::fs::write(
            &conf,
            format!(
                "SUSHY_EMULATOR_LISTEN_IP = '127.0.0.1'\nSUSHY_EMULATOR_LISTEN_PORT = {port}\nSUSHY_EMULATOR_AUTH_FILE = '{}'\nSUSHY_EMULATOR_FAKE_DRIVER = True\nSUSHY_EMULATOR_FAKE_SYSTEMS = [\n{systems}]\n",
                ctx.stack_dir.join("sushy-users").display()
            ),
        )?;
        let log = std::fs::File::create(ctx.stack_dir.join(format!("{name}.log")))?;
        let child = Command::new(Path::new(&venv_bin).join("sushy-emulator"))
            .arg("--config")
            .arg(&conf)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .context("start sushy-emulator")?;
        Ok(Sushy {
            child,
            port,
            ids,
            username,
            password,
        })
    }

    /// Waits until the emulator answers.
    async fn ready(&self) -> Result<()> {
        let http = reqwest::Client::new();
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let answer = http
                .get(format!("http://127.0.0.1:{}/redfish/v1/Systems", self.port))
                .basic_auth(&self.username, Some(&self.password))
                .send()
                .await;
            if answer.is_ok_and(|a| a.status().is_success()) {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("sushy-emulator did not answer within 60 s");
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// System `i`'s BMC address, as a BareMetalHost names it.
    fn address(&self, i: usize) -> String {
        format!(
            "redfish+http://127.0.0.1:{}/redfish/v1/Systems/{}",
            self.port, self.ids[i]
        )
    }
}

impl Drop for Sushy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

struct BmoChild(Child);

impl Drop for BmoChild {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

// ---------------------------------------------------------------- kube side

fn host_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("metal3.io", "v1alpha1", "BareMetalHost"),
        "baremetalhosts",
    )
}

async fn admin_client(kubeconfig: &Path) -> Result<kube::Client> {
    let raw = kube::config::Kubeconfig::read_from(kubeconfig)
        .with_context(|| format!("read {}", kubeconfig.display()))?;
    let config = kube::Config::from_custom_kubeconfig(raw, &Default::default()).await?;
    Ok(kube::Client::try_from(config)?)
}

/// The admin kubeconfig with the server replaced by the counting proxy (plain HTTP).
fn proxied_kubeconfig(admin: &Path, port: u16, out: &Path) -> Result<()> {
    let text = std::fs::read_to_string(admin)?;
    let mut lines = Vec::new();
    for line in text.lines() {
        if line.trim_start().starts_with("server:") {
            lines.push(format!("    server: http://127.0.0.1:{port}"));
        } else if line.trim_start().starts_with("certificate-authority:") {
            continue;
        } else {
            lines.push(line.to_owned());
        }
    }
    std::fs::write(out, lines.join("\n") + "\n")?;
    Ok(())
}

fn mac(run: usize, i: usize) -> String {
    format!(
        "02:5c:{:02x}:{:02x}:{:02x}:{:02x}",
        run & 0xff,
        (i >> 16) & 0xff,
        (i >> 8) & 0xff,
        i & 0xff
    )
}

fn host_name(i: usize) -> String {
    format!("host-{i:04}")
}

/// The BareMetalHost and its Secret's credentials for host `i` of `work`.
fn host_spec(
    work: Work,
    sushy: Option<&Sushy>,
    run: usize,
    i: usize,
) -> Result<(Value, String, String)> {
    let name = host_name(i);
    Ok(match (work, sushy) {
        (Work::Fake, _) => (
            json!({
                "online": true,
                "bootMACAddress": mac(run, i),
                "bmc": {"address": format!("fake://{name}"), "credentialsName": format!("{name}-bmc")},
                "image": {"url": IMAGE_URL, "checksum": IMAGE_SHA256, "checksumType": "sha256"},
            }),
            "admin".to_owned(),
            "not-used-by-fake-hosts".to_owned(),
        ),
        (Work::Redfish, Some(sushy)) => (
            json!({
                "online": false,
                "bootMACAddress": mac(run, i),
                "inspectionMode": "disabled",
                "automatedCleaningMode": "disabled",
                "bmc": {"address": sushy.address(i), "credentialsName": format!("{name}-bmc")},
            }),
            sushy.username.clone(),
            sushy.password.clone(),
        ),
        (Work::Redfish, None) => bail!("the Redfish work needs a sushy-emulator"),
    })
}

async fn apply_hosts(
    client: &kube::Client,
    ns: &str,
    work: Work,
    sushy: Option<&Sushy>,
    run: usize,
    n: usize,
) -> Result<()> {
    let secrets: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        ns,
        &ApiResource::from_gvk(&GroupVersionKind::gvk("", "v1", "Secret")),
    );
    let hosts: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &host_resource());
    futures::stream::iter(0..n)
        .map(|i| {
            let (secrets, hosts) = (secrets.clone(), hosts.clone());
            async move {
                let name = host_name(i);
                let (spec, username, password) = host_spec(work, sushy, run, i)?;
                let secret: DynamicObject = serde_json::from_value(json!({
                    "apiVersion": "v1", "kind": "Secret",
                    "metadata": {"name": format!("{name}-bmc")},
                    "type": "Opaque",
                    "stringData": {"username": username, "password": password},
                }))?;
                secrets.create(&PostParams::default(), &secret).await?;
                let host: DynamicObject = serde_json::from_value(json!({
                    "apiVersion": "metal3.io/v1alpha1", "kind": "BareMetalHost",
                    "metadata": {"name": name},
                    "spec": spec,
                }))?;
                hosts.create(&PostParams::default(), &host).await?;
                anyhow::Ok(())
            }
        })
        .buffer_unordered(16)
        .try_collect::<Vec<()>>()
        .await?;
    Ok(())
}

#[derive(Default)]
struct Progress {
    available: HashMap<String, Instant>,
    provisioned: HashMap<String, Instant>,
    errors: HashMap<String, String>,
    synced: bool,
}

/// Watches the namespace's hosts and records when each first reaches available (or
/// later) and provisioned.
fn watch_hosts(
    client: kube::Client,
    ns: &str,
) -> (Arc<Mutex<Progress>>, tokio::task::JoinHandle<()>) {
    let progress = Arc::new(Mutex::new(Progress::default()));
    let api: Api<DynamicObject> = Api::namespaced_with(client, ns, &host_resource());
    let p = progress.clone();
    let task = tokio::spawn(async move {
        let mut stream = watcher(api, watcher::Config::default()).boxed();
        while let Some(event) = stream.next().await {
            let now = Instant::now();
            let obj = match event {
                Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) => o,
                Ok(watcher::Event::InitDone) => {
                    if let Ok(mut p) = p.lock() {
                        p.synced = true;
                    }
                    continue;
                }
                Ok(_) => continue,
                Err(e) => {
                    eprintln!("scale: watch error (retrying): {e}");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    continue;
                }
            };
            let name = obj.metadata.name.clone().unwrap_or_default();
            let status = &obj.data["status"];
            let state = status["provisioning"]["state"].as_str().unwrap_or_default();
            let Ok(mut p) = p.lock() else { return };
            if matches!(
                state,
                "available" | "ready" | "provisioning" | "provisioned"
            ) {
                p.available.entry(name.clone()).or_insert(now);
            }
            if state == "provisioned" {
                p.provisioned.entry(name.clone()).or_insert(now);
            }
            if let Some(msg) = status["errorMessage"].as_str().filter(|m| !m.is_empty()) {
                p.errors.insert(name, msg.to_owned());
            }
        }
    });
    (progress, task)
}

// ---------------------------------------------------------------- direct Ironic

struct Direct {
    http: reqwest::Client,
    base: String,
    poll: Duration,
    kernel: String,
    ramdisk: String,
    /// The BMC addresses and credentials of the Redfish work.
    redfish: Option<(Vec<String>, bmo::credentials::Credentials)>,
    /// Also the reads (and the power-on) bmo's features add (the `direct-as-bmo` run).
    as_bmo: bool,
}

impl Direct {
    async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> Result<Value> {
        let mut request = self
            .http
            .request(method.clone(), format!("{}{path}", self.base))
            .header(IRONIC_VERSION_HEADER, IRONIC_MICROVERSION);
        if let Some(body) = body {
            request = request.json(&body);
        }
        // A node locked by the conductor answers 409: look again shortly.
        for _ in 0..600 {
            let response = request
                .try_clone()
                .context("clone an Ironic request")?
                .send()
                .await?;
            let status = response.status();
            if status == StatusCode::CONFLICT {
                tokio::time::sleep(self.poll).await;
                continue;
            }
            let text = response.text().await?;
            if !status.is_success() {
                bail!("{method} {path}: {status}: {text}");
            }
            return Ok(if text.is_empty() {
                Value::Null
            } else {
                serde_json::from_str(&text)?
            });
        }
        bail!("{method} {path}: node stayed locked")
    }

    /// What bmo asks before it creates a node (when `as_bmo`): a node by its name,
    /// else one with a port of the boot MAC, to adopt.
    async fn look_for_node_as_bmo(&self, name: &str, mac: &str) -> Result<()> {
        self.read_as_bmo(&format!("nodes/{name}")).await?;
        self.read_as_bmo(&format!("ports/detail?address={mac}"))
            .await
    }

    /// A read bmo makes for a feature the direct driver does not have (when
    /// `as_bmo`): its answer is not used, and a 404 (no inventory from fake
    /// inspection) is an answer too.
    async fn read_as_bmo(&self, path: &str) -> Result<()> {
        if !self.as_bmo {
            return Ok(());
        }
        let response = self
            .http
            .get(format!("{}{path}", self.base))
            .header(IRONIC_VERSION_HEADER, IRONIC_MICROVERSION)
            .send()
            .await?;
        let status = response.status();
        if !status.is_success() && status != StatusCode::NOT_FOUND {
            bail!("GET {path}: {status}");
        }
        Ok(())
    }

    async fn set_state(&self, uuid: &str, body: Value) -> Result<()> {
        self.call(
            reqwest::Method::PUT,
            &format!("nodes/{uuid}/states/provision"),
            Some(body),
        )
        .await
        .map(drop)
    }

    /// Polls the node until it rests in `state` and `done`; the node as last read.
    async fn wait_for(
        &self,
        uuid: &str,
        state: &str,
        done: impl Fn(&Value) -> bool,
    ) -> Result<Value> {
        loop {
            let node = self
                .call(reqwest::Method::GET, &format!("nodes/{uuid}"), None)
                .await?;
            let now = node["provision_state"].as_str().unwrap_or_default();
            if now == state && node["target_provision_state"].is_null() && done(&node) {
                return Ok(node);
            }
            if now.ends_with("failed") || (now == "enroll" && !node["last_error"].is_null()) {
                bail!("node {uuid} is in {now}: {}", node["last_error"]);
            }
            tokio::time::sleep(self.poll).await;
        }
    }

    /// What bmo asks of Ironic for one Redfish host with inspection and automated
    /// cleaning disabled, up to available: create the node (bmo's driver, interfaces
    /// and `driver_info` for the address), its boot MAC's port, `manage`. A host is
    /// `available` while its node is `manageable` (as upstream's are); `provide`
    /// comes with provisioning.
    async fn redfish_host(&self, run: usize, i: usize, limit: &Semaphore) -> Result<Instant> {
        let (addresses, credentials) = self.redfish.as_ref().context("no Redfish BMCs")?;
        let address = bmo::bmc::BmcAddress::parse(&addresses[i])?;
        let settings = address.driver_settings(false);
        let mut driver_info = address.driver_info(credentials, false);
        driver_info.insert("deploy_kernel".into(), json!(self.kernel));
        driver_info.insert("deploy_ramdisk".into(), json!(self.ramdisk));
        let mut body = json!({
            "name": format!("scale~{}", host_name(i)),
            "driver": settings.driver,
            "driver_info": driver_info,
            "properties": {"capabilities": "boot_mode:uefi"},
            "inspect_interface": "no-inspect",
            "automated_clean": false,
        });
        if let Value::Object(interfaces) = serde_json::to_value(settings.interfaces)? {
            for (name, value) in interfaces {
                body[format!("{name}_interface")] = value;
            }
        }
        let _permit = limit.acquire().await?;
        self.look_for_node_as_bmo(&format!("scale~{}", host_name(i)), &mac(run, i))
            .await?;
        let node = self
            .call(reqwest::Method::POST, "nodes", Some(body))
            .await?;
        let uuid = node["uuid"]
            .as_str()
            .context("Ironic returned a node without uuid")?
            .to_owned();
        self.call(
            reqwest::Method::POST,
            "ports",
            Some(json!({"node_uuid": uuid, "address": mac(run, i)})),
        )
        .await?;
        self.set_state(&uuid, json!({"target": "manage"})).await?;
        self.wait_for(&uuid, "manageable", |_| true).await?;
        self.read_as_bmo(&format!("nodes/{uuid}/bios?detail=True"))
            .await?;
        self.read_as_bmo(&format!("nodes/{uuid}/firmware")).await?;
        Ok(Instant::now())
    }

    /// What bmo asks of Ironic for one fake-hardware host with an image.
    async fn host(&self, run: usize, i: usize, limit: &Semaphore) -> Result<(Instant, Instant)> {
        let name = host_name(i);
        let permit = limit.acquire().await?;
        self.look_for_node_as_bmo(&format!("scale~{name}"), &mac(run, i))
            .await?;
        let node = self
            .call(
                reqwest::Method::POST,
                "nodes",
                Some(json!({
                    "name": format!("scale~{name}"),
                    "driver": "fake-hardware",
                    "driver_info": {"deploy_kernel": self.kernel, "deploy_ramdisk": self.ramdisk},
                    "properties": {"capabilities": "boot_mode:uefi"},
                    "boot_interface": "fake", "deploy_interface": "fake", "inspect_interface": "fake",
                    "management_interface": "fake", "power_interface": "fake", "raid_interface": "fake",
                    "vendor_interface": "fake", "bios_interface": "fake", "firmware_interface": "fake",
                    "automated_clean": true,
                })),
            )
            .await?;
        let uuid = node["uuid"]
            .as_str()
            .context("Ironic returned a node without uuid")?
            .to_owned();
        self.call(
            reqwest::Method::POST,
            "ports",
            Some(json!({"node_uuid": uuid, "address": mac(run, i)})),
        )
        .await?;
        self.set_state(&uuid, json!({"target": "manage"})).await?;
        self.wait_for(&uuid, "manageable", |_| true).await?;
        self.read_as_bmo(&format!("nodes/{uuid}/bios?detail=True"))
            .await?;
        self.read_as_bmo(&format!("nodes/{uuid}/firmware")).await?;
        self.set_state(&uuid, json!({"target": "inspect"})).await?;
        self.wait_for(&uuid, "manageable", |n| {
            !n["inspection_finished_at"].is_null()
        })
        .await?;
        self.read_as_bmo(&format!("nodes/{uuid}/inventory")).await?;
        self.set_state(&uuid, json!({"target": "provide"})).await?;
        self.wait_for(&uuid, "available", |_| true).await?;
        let available = Instant::now();
        drop(permit);

        let permit = limit.acquire().await?;
        self.call(
            reqwest::Method::PATCH,
            &format!("nodes/{uuid}"),
            Some(json!([
                {"op": "add", "path": "/instance_info", "value": {
                    "capabilities": {}, "image_source": IMAGE_URL,
                    "image_os_hash_algo": "sha256", "image_os_hash_value": IMAGE_SHA256,
                }},
                {"op": "add", "path": "/properties/capabilities", "value": "boot_mode:uefi"},
            ])),
        )
        .await?;
        self.call(
            reqwest::Method::GET,
            &format!("nodes/{uuid}/validate"),
            None,
        )
        .await?;
        self.set_state(
            &uuid,
            json!({"target": "active", "configdrive": {
                "meta_data": {"uuid": uuid, "name": name, "hostname": name, "local-hostname": name},
            }}),
        )
        .await?;
        let node = self.wait_for(&uuid, "active", |_| true).await?;
        let provisioned = Instant::now();
        drop(permit);
        // `online: true`: fake-hardware's deploy leaves the node's power as it was.
        if self.as_bmo && node["power_state"] != "power on" {
            self.call(
                reqwest::Method::PUT,
                &format!("nodes/{uuid}/states/power"),
                Some(json!({"target": "power on"})),
            )
            .await?;
        }
        Ok((available, provisioned))
    }
}

// ---------------------------------------------------------------- results

#[derive(Debug, Default, Clone, Copy)]
struct Spread {
    p50: f64,
    p95: f64,
    max: f64,
}

fn spread(mut values: Vec<f64>) -> Spread {
    if values.is_empty() {
        return Spread::default();
    }
    values.sort_by(f64::total_cmp);
    let rank =
        |q: f64| values[((q * values.len() as f64).ceil() as usize).clamp(1, values.len()) - 1];
    Spread {
        p50: rank(0.50),
        p95: rank(0.95),
        max: values[values.len() - 1],
    }
}

#[derive(Debug, Default, Clone)]
struct RunResult {
    n: usize,
    work: Work,
    bmo_available: Spread,
    bmo_provisioned: Spread,
    direct_available: Spread,
    direct_provisioned: Spread,
    bmo_peak_rss_mib: f64,
    bmo_cpu_provisioning: f64,
    bmo_cpu_idle: f64,
    ironic_cpu_bmo: f64,
    ironic_cpu_direct: f64,
    kube_startup: u64,
    kube_provisioning: u64,
    ironic_provisioning: u64,
    ironic_direct: u64,
    idle_minutes: f64,
    kube_idle: u64,
    ironic_idle: u64,
    /// Of the idle requests, the firmware controller's (BIOS settings re-read every
    /// few minutes; HostFirmwareSettings and FirmwareSchema reads).
    kube_idle_firmware: u64,
    ironic_idle_firmware: u64,
    errors: usize,
    /// The direct driver doing bmo's Ironic work too (`direct-as-bmo`).
    as_bmo: Option<DirectRun>,
}

/// What one direct-Ironic run measured.
#[derive(Debug, Default, Clone, Copy)]
struct DirectRun {
    available: Spread,
    provisioned: Spread,
    ironic_cpu: f64,
    ironic_requests: u64,
}

impl DirectRun {
    fn target(&self, work: Work) -> Spread {
        match work {
            Work::Fake => self.provisioned,
            Work::Redfish => self.available,
        }
    }
}

impl RunResult {
    /// bmo's times to the work's target state.
    fn bmo_target(&self) -> Spread {
        match self.work {
            Work::Fake => self.bmo_provisioned,
            Work::Redfish => self.bmo_available,
        }
    }

    fn direct_target(&self) -> Spread {
        match self.work {
            Work::Fake => self.direct_provisioned,
            Work::Redfish => self.direct_available,
        }
    }

    fn ratio(&self) -> f64 {
        if self.direct_target().max > 0.0 {
            self.bmo_target().max / self.direct_target().max
        } else {
            0.0
        }
    }

    /// The last host's time over the median host's (bmo).
    fn tail(&self) -> f64 {
        let t = self.bmo_target();
        if t.p50 > 0.0 { t.max / t.p50 } else { 0.0 }
    }

    fn per_host_min(&self, count: u64) -> f64 {
        if self.idle_minutes > 0.0 {
            count as f64 / self.n as f64 / self.idle_minutes
        } else {
            0.0
        }
    }
}

fn fmt_spread(s: Spread) -> String {
    format!("{:.1} / {:.1} / {:.1}", s.p50, s.p95, s.max)
}

fn table(results: &[RunResult]) -> String {
    let mut out = String::from("| | ");
    out += &results
        .iter()
        .map(|r| format!("N = {} {}", r.n, r.work.label()))
        .collect::<Vec<_>>()
        .join(" | ");
    out += " |\n|---|";
    out += &"---:|".repeat(results.len());
    out.push('\n');
    let mut row = |label: &str, cell: &dyn Fn(&RunResult) -> String| {
        let cells: Vec<String> = results.iter().map(cell).collect();
        let _ = writeln!(out, "| {label} | {} |", cells.join(" | "));
    };
    row("bmo: all available (s)", &|r| {
        format!("{:.1}", r.bmo_available.max)
    });
    // The Redfish work ends at available.
    let provisioned = |r: &RunResult, text: String| {
        if r.work == Work::Fake {
            text
        } else {
            "–".to_owned()
        }
    };
    row("bmo: all provisioned (s)", &|r| {
        provisioned(r, format!("{:.1}", r.bmo_provisioned.max))
    });
    row("bmo: per host to available, p50 / p95 / max (s)", &|r| {
        fmt_spread(r.bmo_available)
    });
    row("bmo: per host to provisioned, p50 / p95 / max (s)", &|r| {
        provisioned(r, fmt_spread(r.bmo_provisioned))
    });
    row("direct Ironic: all available (s)", &|r| {
        format!("{:.1}", r.direct_available.max)
    });
    row("direct Ironic: all provisioned (s)", &|r| {
        provisioned(r, format!("{:.1}", r.direct_provisioned.max))
    });
    row(
        "direct Ironic: per host to available, p50 / p95 / max (s)",
        &|r| fmt_spread(r.direct_available),
    );
    row(
        "direct Ironic: per host to provisioned, p50 / p95 / max (s)",
        &|r| provisioned(r, fmt_spread(r.direct_provisioned)),
    );
    row(
        "**time to all in the target state (fake-hardware: provisioned, Redfish: available), bmo / direct Ironic**",
        &|r| format!("**{:.2}×**", r.ratio()),
    );
    if results.iter().any(|r| r.as_bmo.is_some()) {
        let as_bmo = |r: &RunResult, cell: &dyn Fn(&DirectRun) -> String| {
            r.as_bmo.as_ref().map_or_else(|| "–".to_owned(), cell)
        };
        row(
            "direct Ironic doing bmo's Ironic work too: all in the target state (s)",
            &|r| as_bmo(r, &|d| format!("{:.1}", d.target(r.work).max)),
        );
        row(
            "time to all in the target state, bmo / direct Ironic doing bmo's Ironic work too",
            &|r| {
                as_bmo(r, &|d| {
                    format!("{:.2}×", r.bmo_target().max / d.target(r.work).max)
                })
            },
        );
        row(
            "direct Ironic doing bmo's Ironic work too: Ironic CPU seconds / requests per host",
            &|r| {
                as_bmo(r, &|d| {
                    format!(
                        "{:.0} / {:.1}",
                        d.ironic_cpu,
                        d.ironic_requests as f64 / r.n as f64
                    )
                })
            },
        );
    }
    row("bmo: last host / median host, to the target state", &|r| {
        format!("{:.2}", r.tail())
    });
    row("bmo peak RSS (MiB)", &|r| {
        format!("{:.1}", r.bmo_peak_rss_mib)
    });
    row("bmo CPU seconds, apply → target state", &|r| {
        format!("{:.1}", r.bmo_cpu_provisioning)
    });
    row("Ironic CPU seconds, bmo run / direct run", &|r| {
        format!("{:.0} / {:.0}", r.ironic_cpu_bmo, r.ironic_cpu_direct)
    });
    row(
        "kube-apiserver requests by bmo: start-up / apply → target state",
        &|r| format!("{} / {}", r.kube_startup, r.kube_provisioning),
    );
    row(
        "Ironic requests, apply → target state: bmo / direct",
        &|r| format!("{} / {}", r.ironic_provisioning, r.ironic_direct),
    );
    row("Ironic requests per host: bmo / direct", &|r| {
        format!(
            "{:.1} / {:.1}",
            r.ironic_provisioning as f64 / r.n as f64,
            r.ironic_direct as f64 / r.n as f64
        )
    });
    row("idle: kube-apiserver requests per host per minute", &|r| {
        format!("{:.2}", r.per_host_min(r.kube_idle))
    });
    row("idle: Ironic requests per host per minute", &|r| {
        format!("{:.2}", r.per_host_min(r.ironic_idle))
    });
    row(
        "idle, host controller alone (without the firmware controllers' reads): kube-apiserver / Ironic requests per host per minute",
        &|r| {
            format!(
                "{:.2} / {:.2}",
                r.per_host_min(r.kube_idle - r.kube_idle_firmware),
                r.per_host_min(r.ironic_idle - r.ironic_idle_firmware)
            )
        },
    );
    row("idle: bmo CPU seconds per minute", &|r| {
        if r.idle_minutes > 0.0 {
            format!("{:.2}", r.bmo_cpu_idle / r.idle_minutes)
        } else {
            "-".into()
        }
    });
    row("hosts that reported an error on the way", &|r| {
        r.errors.to_string()
    });
    out
}

fn csv(results: &[RunResult]) -> String {
    let mut out = String::from(
        "work,hosts,bmo_available_p50_s,bmo_available_p95_s,bmo_available_max_s,bmo_provisioned_p50_s,bmo_provisioned_p95_s,bmo_provisioned_max_s,direct_available_p50_s,direct_available_p95_s,direct_available_max_s,direct_provisioned_p50_s,direct_provisioned_p95_s,direct_provisioned_max_s,ratio_target,bmo_peak_rss_mib,bmo_cpu_provisioning_s,bmo_cpu_idle_s,ironic_cpu_bmo_s,ironic_cpu_direct_s,kube_requests_startup,kube_requests_provisioning,ironic_requests_provisioning,ironic_requests_direct,idle_minutes,kube_requests_idle,ironic_requests_idle,kube_idle_per_host_min,ironic_idle_per_host_min,kube_idle_firmware,ironic_idle_firmware,hosts_with_errors,direct_as_bmo_target_max_s,ratio_target_as_bmo,ironic_cpu_direct_as_bmo_s,ironic_requests_direct_as_bmo\n",
    );
    for r in results {
        let s = |s: Spread| format!("{:.3},{:.3},{:.3}", s.p50, s.p95, s.max);
        // Empty cells when the run had no direct-as-bmo half.
        let as_bmo = r.as_bmo.map_or_else(
            || ",,,".to_owned(),
            |d| {
                let max = d.target(r.work).max;
                format!(
                    "{max:.3},{:.3},{:.2},{}",
                    r.bmo_target().max / max,
                    d.ironic_cpu,
                    d.ironic_requests
                )
            },
        );
        let _ = writeln!(
            out,
            "{},{},{},{},{},{},{:.3},{:.1},{:.2},{:.2},{:.2},{:.2},{},{},{},{},{:.2},{},{},{:.3},{:.3},{},{},{},{as_bmo}",
            r.work.label(),
            r.n,
            s(r.bmo_available),
            s(r.bmo_provisioned),
            s(r.direct_available),
            s(r.direct_provisioned),
            r.ratio(),
            r.bmo_peak_rss_mib,
            r.bmo_cpu_provisioning,
            r.bmo_cpu_idle,
            r.ironic_cpu_bmo,
            r.ironic_cpu_direct,
            r.kube_startup,
            r.kube_provisioning,
            r.ironic_provisioning,
            r.ironic_direct,
            r.idle_minutes,
            r.kube_idle,
            r.ironic_idle,
            r.per_host_min(r.kube_idle),
            r.per_host_min(r.ironic_idle),
            r.kube_idle_firmware,
            r.ironic_idle_firmware,
            r.errors,
        );
    }
    out
}

/// The plot for docs: time until all N hosts are in the target state against N, bmo
/// (solid) and direct Ironic (dashed), one colour per work; log–log, so that 10 to
/// 1000 hosts fit and equal ratios are equal distances.
fn svg(results: &[RunResult]) -> String {
    let (width, height) = (840.0, 460.0);
    let (left, right, top, bottom) = (70.0, 320.0, 50.0, 60.0);
    let (plot_w, plot_h) = (width - left - right, height - top - bottom);
    let mut series = Vec::new();
    for (work, colour) in [(Work::Fake, "#1f77b4"), (Work::Redfish, "#d62728")] {
        for (who, dashed) in [("bmo", false), ("direct Ironic", true)] {
            let points: Vec<(f64, f64)> = results
                .iter()
                .filter(|r| r.work == work)
                .map(|r| {
                    let t = if dashed {
                        r.direct_target()
                    } else {
                        r.bmo_target()
                    };
                    (r.n as f64, t.max)
                })
                .filter(|(_, secs)| *secs > 0.0)
                .collect();
            if !points.is_empty() {
                let label = format!("{who}, {} → {}", work.label(), work.target());
                series.push((label, colour, dashed, points));
            }
        }
    }
    let decades = |values: &mut dyn Iterator<Item = f64>| {
        let (lo, hi) = values.fold((f64::MAX, f64::MIN), |(lo, hi), v| {
            (lo.min(v.log10()), hi.max(v.log10()))
        });
        if lo > hi {
            return (0.0, 1.0);
        }
        let (lo, hi) = (lo.floor(), hi.ceil());
        (lo, if hi > lo { hi } else { lo + 1.0 })
    };
    let all = || series.iter().flat_map(|(_, _, _, p)| p.iter().copied());
    let (x0, x1) = decades(&mut all().map(|(n, _)| n));
    let (y0, y1) = decades(&mut all().map(|(_, secs)| secs));
    let x = |n: f64| left + (n.log10() - x0) / (x1 - x0) * plot_w;
    let y = |secs: f64| top + plot_h - (secs.log10() - y0) / (y1 - y0) * plot_h;
    let mut out = String::new();
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="13">"#
    );
    let _ = writeln!(
        out,
        r#"<rect width="{width}" height="{height}" fill="white"/>
<text x="{}" y="24" text-anchor="middle" font-size="15">Time until all N hosts are in the target state (cargo bench --bench scale)</text>"#,
        width / 2.0
    );
    for d in (x0 as i32)..=(x1 as i32) {
        let px = x(10f64.powi(d));
        let _ = writeln!(
            out,
            r##"<line x1="{px:.1}" y1="{top}" x2="{px:.1}" y2="{:.1}" stroke="#ddd"/><text x="{px:.1}" y="{:.1}" text-anchor="middle">{}</text>"##,
            top + plot_h,
            top + plot_h + 18.0,
            10u64.pow(d.max(0) as u32)
        );
    }
    for d in (y0 as i32)..=(y1 as i32) {
        let py = y(10f64.powi(d));
        let label = if d >= 0 {
            format!("{}", 10u64.pow(d as u32))
        } else {
            format!("{}", 10f64.powi(d))
        };
        let _ = writeln!(
            out,
            r##"<line x1="{left}" y1="{py:.1}" x2="{:.1}" y2="{py:.1}" stroke="#ddd"/><text x="{:.1}" y="{:.1}" text-anchor="end">{label}</text>"##,
            left + plot_w,
            left - 6.0,
            py + 4.0
        );
    }
    let _ = writeln!(
        out,
        r##"<rect x="{left}" y="{top}" width="{plot_w}" height="{plot_h}" fill="none" stroke="#444"/>
<text x="{:.1}" y="{:.1}" text-anchor="middle">hosts applied at once (N, log scale)</text>
<text x="18" y="{:.1}" text-anchor="middle" transform="rotate(-90 18 {:.1})">seconds (log scale)</text>"##,
        left + plot_w / 2.0,
        height - 14.0,
        top + plot_h / 2.0,
        top + plot_h / 2.0
    );
    for (i, (label, colour, dashed, points)) in series.iter().enumerate() {
        let dash = if *dashed {
            r#" stroke-dasharray="6 4""#
        } else {
            ""
        };
        let path: Vec<String> = points
            .iter()
            .map(|(n, secs)| format!("{:.1},{:.1}", x(*n), y(*secs)))
            .collect();
        let _ = writeln!(
            out,
            r#"<polyline points="{}" fill="none" stroke="{colour}" stroke-width="2"{dash}/>"#,
            path.join(" ")
        );
        for (n, secs) in points {
            let _ = writeln!(
                out,
                r#"<circle cx="{:.1}" cy="{:.1}" r="3.5" fill="{colour}"><title>{label}: N = {n}, {secs:.1} s</title></circle>"#,
                x(*n),
                y(*secs)
            );
        }
        let ly = top + 10.0 + 22.0 * i as f64;
        let lx = left + plot_w + 16.0;
        let _ = writeln!(
            out,
            r#"<line x1="{lx:.1}" y1="{ly:.1}" x2="{:.1}" y2="{ly:.1}" stroke="{colour}" stroke-width="2"{dash}/><text x="{:.1}" y="{:.1}">{label}</text>"#,
            lx + 28.0,
            lx + 34.0,
            ly + 4.0
        );
    }
    out.push_str("</svg>\n");
    out
}

fn print_breakdown(what: &str, map: &BTreeMap<String, u64>) {
    eprintln!("scale:   {what}:");
    let mut items: Vec<_> = map.iter().collect();
    items.sort_by(|a, b| b.1.cmp(a.1));
    for (kind, count) in items {
        eprintln!("scale:     {count:>8}  {kind}");
    }
}

// ---------------------------------------------------------------- one run

struct Ctx {
    repo: PathBuf,
    stack: StackEnv,
    stack_dir: PathBuf,
    admin_kubeconfig: PathBuf,
    apiserver: String,
    ca_pem: Vec<u8>,
    bmo: PathBuf,
    settings: Settings,
    stamp: u64,
}

async fn ensure_crds(ctx: &Ctx, admin: &kube::Client) -> Result<()> {
    let crds: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> =
        Api::all(admin.clone());
    if crds.get_opt("baremetalhosts.metal3.io").await?.is_some() {
        return Ok(());
    }
    eprintln!("scale: installing the CRDs (a bmo run with BMO_INSTALL_CRDS=true, not measured)");
    let log = std::fs::File::create(ctx.stack_dir.join("scale-crds-bmo.log"))?;
    let _child = BmoChild(
        Command::new(&ctx.bmo)
            .arg("run")
            .env("KUBECONFIG", &ctx.admin_kubeconfig)
            .env("IRONIC_ENDPOINT", ctx.stack.get("IRONIC_ENDPOINT")?)
            .env(
                "METAL3_AUTH_ROOT_DIR",
                ctx.stack.get("METAL3_AUTH_ROOT_DIR")?,
            )
            .env("BMO_INSTALL_CRDS", "true")
            .env("BMO_HTTP", "false")
            .env("BMO_HEALTH_ADDR", "127.0.0.1:0")
            .env("WATCH_NAMESPACE", "scale-crd-install")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .context("start bmo to install the CRDs")?,
    );
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if let Some(crd) = crds.get_opt("baremetalhosts.metal3.io").await? {
            let established = crd
                .status
                .and_then(|s| s.conditions)
                .unwrap_or_default()
                .iter()
                .any(|c| c.type_ == "Established" && c.status == "True");
            if established {
                // bmo installs the admission policies right after; let it finish.
                tokio::time::sleep(Duration::from_secs(3)).await;
                return Ok(());
            }
        }
        if Instant::now() > deadline {
            bail!("the CRDs did not appear within 120 s");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

async fn create_namespace(admin: &kube::Client, ns: &str) -> Result<()> {
    let api: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(admin.clone());
    let obj = serde_json::from_value(json!({"metadata": {"name": ns}}))?;
    api.create(&PostParams::default(), &obj)
        .await
        .with_context(|| format!("create namespace {ns}"))?;
    Ok(())
}

async fn run_bmo(
    ctx: &Ctx,
    admin: &kube::Client,
    run: usize,
    n: usize,
    r: &mut RunResult,
) -> Result<()> {
    let s = &ctx.settings;
    let work = r.work;
    let ns = format!("scale-{n}-{}-{}", ctx.stamp, run);
    let sushy = match work {
        Work::Fake => None,
        Work::Redfish => {
            let sushy = Sushy::start(ctx, &format!("scale-{}-{n}-bmo-sushy", ctx.stamp), run, n)?;
            sushy.ready().await?;
            Some(sushy)
        }
    };
    create_namespace(admin, &ns).await?;
    let ironic = PrivateIronic::start(
        &ctx.repo,
        &ctx.stack_dir,
        &format!("scale-{}-{n}-{run}-bmo", ctx.stamp),
        &s.ironic_conf,
    )?;
    let ironic_proxy =
        start_proxy(&ironic.endpoint.replace("/v1/", ""), None, Flavor::Ironic).await?;
    let kube_proxy = start_proxy(&ctx.apiserver, Some(&ctx.ca_pem), Flavor::Kube).await?;
    let kubeconfig = ctx.stack_dir.join(format!("scale-{n}.kubeconfig"));
    proxied_kubeconfig(&ctx.admin_kubeconfig, kube_proxy.port, &kubeconfig)?;
    let log_path = ctx
        .stack_dir
        .join(format!("scale-{}-{n}-{run}-bmo.log", ctx.stamp));
    eprintln!("scale: N={n}: bmo log {}", log_path.display());
    let log = std::fs::File::create(&log_path)?;
    let child = BmoChild(
        Command::new(&ctx.bmo)
            .arg("run")
            .env("KUBECONFIG", &kubeconfig)
            .env(
                "IRONIC_ENDPOINT",
                format!("http://127.0.0.1:{}/v1/", ironic_proxy.port),
            )
            .env(
                "METAL3_AUTH_ROOT_DIR",
                ctx.stack.get("METAL3_AUTH_ROOT_DIR")?,
            )
            .env("DEPLOY_KERNEL_URL", ctx.stack.get("DEPLOY_KERNEL_URL")?)
            .env("DEPLOY_RAMDISK_URL", ctx.stack.get("DEPLOY_RAMDISK_URL")?)
            .env("BMO_HTTP", "false")
            .env("BMO_INSTALL_CRDS", "false")
            .env("BMO_HEALTH_ADDR", "127.0.0.1:0")
            .env("WATCH_NAMESPACE", &ns)
            .env("BMO_CONCURRENCY", s.concurrency.to_string())
            .env("PROVISIONING_LIMIT", s.limit.to_string())
            // A fresh Ironic holds no request of a killed predecessor: the settling
            // after start (10 s by default) is a cost per start, not per host.
            .env("BMO_START_SETTLE", "0")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .context("start bmo")?,
    );
    let pid = child.0.id();

    let (progress, watch_task) = watch_hosts(admin.clone(), &ns);
    // Ready when bmo watches its hosts and our own watch has listed.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (_, kinds) = kube_proxy.counts.snapshot();
        let bmo_watching = kinds.contains_key("WATCH baremetalhosts");
        let synced = progress.lock().map(|p| p.synced).unwrap_or(false);
        if bmo_watching && synced {
            break;
        }
        if Instant::now() > deadline {
            bail!(
                "bmo did not start watching hosts within 60 s; see {}",
                log_path.display()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (kube_start, kube_start_kinds) = kube_proxy.counts.snapshot();
    let (ironic_start, ironic_start_kinds) = ironic_proxy.counts.snapshot();
    r.kube_startup = kube_start;
    let cpu_start = proc_stat(pid).map(|(_, c)| c).unwrap_or(0.0);
    let ironic_cpu_start = ironic.cpu_seconds();

    let t0 = Instant::now();
    apply_hosts(admin, &ns, work, sushy.as_ref(), run, n).await?;
    eprintln!(
        "scale: N={n}: applied {n} hosts and Secrets in {:.1} s",
        t0.elapsed().as_secs_f64()
    );
    let mut peak_rss = 0u64;
    let mut last_report = Instant::now();
    loop {
        peak_rss = peak_rss.max(status_kib(pid, "VmRSS").unwrap_or(0));
        let (available, provisioned, errors) = match progress.lock() {
            Ok(p) => (p.available.len(), p.provisioned.len(), p.errors.len()),
            Err(_) => bail!("progress lock poisoned"),
        };
        let done = match work {
            Work::Fake => provisioned,
            Work::Redfish => available,
        };
        if done >= n {
            break;
        }
        if last_report.elapsed() > Duration::from_secs(30) {
            last_report = Instant::now();
            eprintln!(
                "scale: N={n}: {:.0} s: {available} available, {provisioned} provisioned, {errors} with errors, RSS {} MiB",
                t0.elapsed().as_secs_f64(),
                peak_rss / 1024
            );
        }
        if t0.elapsed() > s.timeout {
            bail!(
                "N={n}: only {done} of {n} {} after {:?}",
                work.target(),
                s.timeout
            );
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let (kube_done, kube_done_kinds) = kube_proxy.counts.snapshot();
    let (ironic_done, ironic_done_kinds) = ironic_proxy.counts.snapshot();
    let cpu_done = proc_stat(pid).map(|(_, c)| c).unwrap_or(0.0);
    r.ironic_cpu_bmo = ironic.cpu_seconds() - ironic_cpu_start;
    {
        let p = progress
            .lock()
            .map_err(|_| anyhow::anyhow!("progress lock poisoned"))?;
        let since = |m: &HashMap<String, Instant>| {
            m.values()
                .map(|t| t.duration_since(t0).as_secs_f64())
                .collect::<Vec<_>>()
        };
        r.bmo_available = spread(since(&p.available));
        r.bmo_provisioned = spread(since(&p.provisioned));
        r.errors = p.errors.len();
        for (host, msg) in p.errors.iter().take(3) {
            eprintln!("scale: N={n}: {host} reported: {msg}");
        }
    }
    r.kube_provisioning = kube_done - kube_start;
    r.ironic_provisioning = ironic_done - ironic_start;
    r.bmo_cpu_provisioning = cpu_done - cpu_start;
    eprintln!(
        "scale: N={n}: all {} after {:.1} s; idle for {} s",
        work.target(),
        r.bmo_target().max,
        s.idle.as_secs()
    );
    print_breakdown("kube requests, start-up", &kube_start_kinds);
    print_breakdown(
        &format!("kube requests, apply → {}", work.target()),
        &diff(&kube_done_kinds, &kube_start_kinds),
    );
    print_breakdown("Ironic requests, start-up", &ironic_start_kinds);
    print_breakdown(
        &format!("Ironic requests, apply → {}", work.target()),
        &diff(&ironic_done_kinds, &ironic_start_kinds),
    );

    if !s.idle.is_zero() {
        let idle_start = Instant::now();
        while idle_start.elapsed() < s.idle {
            peak_rss = peak_rss.max(status_kib(pid, "VmRSS").unwrap_or(0));
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        let (kube_idle, kube_idle_kinds) = kube_proxy.counts.snapshot();
        let (ironic_idle, ironic_idle_kinds) = ironic_proxy.counts.snapshot();
        r.idle_minutes = idle_start.elapsed().as_secs_f64() / 60.0;
        r.kube_idle = kube_idle - kube_done;
        r.ironic_idle = ironic_idle - ironic_done;
        r.bmo_cpu_idle = proc_stat(pid).map(|(_, c)| c).unwrap_or(0.0) - cpu_done;
        let kube_idle_kinds = diff(&kube_idle_kinds, &kube_done_kinds);
        let ironic_idle_kinds = diff(&ironic_idle_kinds, &ironic_done_kinds);
        let count = |kinds: &BTreeMap<String, u64>, firmware: &dyn Fn(&str) -> bool| {
            kinds
                .iter()
                .filter(|(kind, _)| firmware(kind))
                .map(|(_, n)| n)
                .sum()
        };
        r.kube_idle_firmware = count(&kube_idle_kinds, &|k| {
            k.contains("hostfirmwaresettings")
                || k.contains("hostfirmwarecomponents")
                || k.contains("firmwareschemas")
        });
        r.ironic_idle_firmware = count(&ironic_idle_kinds, &|k| {
            k.ends_with("/bios") || k.ends_with("/firmware")
        });
        print_breakdown("kube requests, idle", &kube_idle_kinds);
        print_breakdown("Ironic requests, idle", &ironic_idle_kinds);
    }
    let hwm = status_kib(pid, "VmHWM").unwrap_or(0);
    r.bmo_peak_rss_mib = peak_rss.max(hwm) as f64 / 1024.0;
    watch_task.abort();
    drop(child);
    drop(ironic);
    drop(sushy);
    Ok(())
}

async fn run_direct(
    ctx: &Ctx,
    run: usize,
    n: usize,
    work: Work,
    as_bmo: bool,
) -> Result<DirectRun> {
    let s = &ctx.settings;
    let name = if as_bmo { "direct-as-bmo" } else { "direct" };
    let sushy = match work {
        Work::Fake => None,
        Work::Redfish => {
            let sushy = Sushy::start(
                ctx,
                &format!("scale-{}-{n}-{name}-sushy", ctx.stamp),
                run,
                n,
            )?;
            sushy.ready().await?;
            Some(sushy)
        }
    };
    let ironic = PrivateIronic::start(
        &ctx.repo,
        &ctx.stack_dir,
        &format!("scale-{}-{n}-{run}-{name}", ctx.stamp),
        &s.ironic_conf,
    )?;
    let proxy = start_proxy(&ironic.endpoint.replace("/v1/", ""), None, Flavor::Ironic).await?;
    let direct = Arc::new(Direct {
        http: reqwest::Client::builder()
            .timeout(Duration::from_secs(60))
            .build()?,
        base: format!("http://127.0.0.1:{}/v1/", proxy.port),
        poll: s.direct_poll,
        kernel: ctx.stack.get("DEPLOY_KERNEL_URL")?.to_owned(),
        ramdisk: ctx.stack.get("DEPLOY_RAMDISK_URL")?.to_owned(),
        redfish: sushy.as_ref().map(|sushy| {
            (
                (0..n).map(|i| sushy.address(i)).collect(),
                bmo::credentials::Credentials {
                    username: sushy.username.clone(),
                    password: bmo::credentials::SecretString::new(sushy.password.clone()),
                },
            )
        }),
        as_bmo,
    });
    let limit = Arc::new(Semaphore::new(s.limit.max(1)));
    let cpu_start = ironic.cpu_seconds();
    let t0 = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..n {
        let (direct, limit) = (direct.clone(), limit.clone());
        tasks.spawn(async move {
            match work {
                Work::Fake => direct.host(run, i, &limit).await,
                Work::Redfish => {
                    let available = direct.redfish_host(run, i, &limit).await?;
                    Ok((available, available))
                }
            }
        });
    }
    let (mut available, mut provisioned) = (Vec::new(), Vec::new());
    while let Some(done) = tasks.join_next().await {
        let (a, p) = done.context("a direct-Ironic task panicked")??;
        available.push(a.duration_since(t0).as_secs_f64());
        provisioned.push(p.duration_since(t0).as_secs_f64());
        if provisioned.len() % 100 == 0 {
            eprintln!(
                "scale: N={n} {name}: {} done after {:.0} s",
                provisioned.len(),
                t0.elapsed().as_secs_f64()
            );
        }
    }
    let (ironic_requests, kinds) = proxy.counts.snapshot();
    let result = DirectRun {
        available: spread(available),
        provisioned: spread(provisioned),
        ironic_cpu: ironic.cpu_seconds() - cpu_start,
        ironic_requests,
    };
    eprintln!(
        "scale: N={n} {name}: all {} after {:.1} s",
        work.target(),
        result.target(work).max
    );
    print_breakdown(&format!("Ironic requests, {name}"), &kinds);
    Ok(result)
}

async fn run() -> Result<()> {
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let settings = Settings::from_env()?;
    let stack = StackEnv::load(&repo)?;
    let stack_dir = PathBuf::from(stack.get("BMO_STACK_DIR")?);
    let admin_kubeconfig = PathBuf::from(stack.get("KUBECONFIG")?);
    let ca_pem = std::fs::read(stack_dir.join("pki/ca.crt")).context("the stack's CA")?;
    let ctx = Ctx {
        apiserver: stack.get("KUBE_APISERVER_URL")?.to_owned(),
        repo: repo.clone(),
        stack_dir,
        admin_kubeconfig,
        ca_pem,
        bmo: std::env::var_os("BMO_SCALE_BMO")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_bmo"))),
        settings,
        stamp: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs() % 100_000)
            .unwrap_or(0),
        stack,
    };
    let admin = admin_client(&ctx.admin_kubeconfig).await?;
    ensure_crds(&ctx, &admin).await?;
    let mut results = Vec::new();
    let csv_path = repo.join("target/scale-bench.csv");
    let runs: Vec<(usize, Work)> = ctx
        .settings
        .hosts
        .iter()
        .flat_map(|&n| ctx.settings.works.iter().map(move |&w| (n, w)))
        .collect();
    for (run, (n, work)) in runs.into_iter().enumerate() {
        let mut r = RunResult {
            n,
            work,
            ..Default::default()
        };
        if ctx.settings.run_bmo {
            eprintln!("scale: N={n} {}: bmo run", work.label());
            run_bmo(&ctx, &admin, run, n, &mut r).await?;
        }
        if ctx.settings.run_direct {
            eprintln!("scale: N={n} {}: direct-Ironic run", work.label());
            let direct = run_direct(&ctx, run, n, work, false).await?;
            r.direct_available = direct.available;
            if work == Work::Fake {
                r.direct_provisioned = direct.provisioned;
            }
            r.ironic_cpu_direct = direct.ironic_cpu;
            r.ironic_direct = direct.ironic_requests;
        }
        if ctx.settings.run_direct_as_bmo {
            eprintln!(
                "scale: N={n} {}: direct-Ironic run doing bmo's Ironic work",
                work.label()
            );
            r.as_bmo = Some(run_direct(&ctx, run, n, work, true).await?);
        }
        results.push(r);
        std::fs::write(&csv_path, csv(&results))
            .with_context(|| format!("write {}", csv_path.display()))?;
        if let Some(svg_path) = &ctx.settings.svg {
            std::fs::write(svg_path, svg(&results))
                .with_context(|| format!("write {}", svg_path.display()))?;
        }
        eprintln!("scale: table so far:\n{}", table(&results));
    }
    println!(
        "bmo scale benchmark: concurrency {}, provisioning limit {}, direct poll {} ms, idle window {} s\n",
        ctx.settings.concurrency,
        ctx.settings.limit,
        ctx.settings.direct_poll.as_millis(),
        ctx.settings.idle.as_secs()
    );
    println!("{}", table(&results));
    println!("CSV: {}", csv_path.display());
    if let Some(svg_path) = &ctx.settings.svg {
        println!("plot: {}", svg_path.display());
    }
    Ok(())
}
