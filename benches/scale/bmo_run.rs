//! The bmo run: bmo (the release build) against an empty Ironic of its own and a new
//! namespace, both servers behind counting proxies; the N hosts applied at once, the
//! times until each is available and provisioned, bmo's CPU and memory, the requests
//! it makes while working and once idle.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use crate::Ctx;
use crate::measure::{RunResult, cpu_seconds, spread, status_kib};
use crate::proxy::{Flavor, Proxy, diff, start_proxy};
use crate::report::print_breakdown;
use crate::stack::{
    BmoChild, PrivateIronic, Sushy, create_namespace, proxied_kubeconfig, start_sushy,
};
use crate::workload::{Progress, Work, apply_hosts, watch_hosts};

/// What a bmo run sets up, stopped when dropped: the benchmark's watch, bmo, its
/// Ironic and sushy-emulator, then the proxies.
struct BmoRun {
    watch_task: tokio::task::JoinHandle<()>,
    child: BmoChild,
    ironic: PrivateIronic,
    sushy: Option<Sushy>,
    kube_proxy: Proxy,
    ironic_proxy: Proxy,
    progress: Arc<Mutex<Progress>>,
    ns: String,
    log_path: PathBuf,
}

impl Drop for BmoRun {
    fn drop(&mut self) {
        self.watch_task.abort();
    }
}

/// The requests counted by both proxies (in all and by kind) and bmo's CPU seconds,
/// at one moment.
struct Snapshot {
    kube: u64,
    kube_kinds: BTreeMap<String, u64>,
    ironic: u64,
    ironic_kinds: BTreeMap<String, u64>,
    bmo_cpu: f64,
}

/// How long after the last host reached the target the benchmark waits for the
/// firmware objects to be filled.
const FIRMWARE_WAIT: Duration = Duration::from_secs(600);

/// `bmo run` for the namespace, talking to both servers through the proxies.
fn spawn_bmo(
    ctx: &Ctx,
    kubeconfig: &Path,
    ironic_port: u16,
    ns: &str,
    log_path: &Path,
) -> Result<BmoChild> {
    let s = &ctx.settings;
    let log = std::fs::File::create(log_path)?;
    Ok(BmoChild(
        Command::new(&ctx.bmo)
            .arg("run")
            .env("KUBECONFIG", kubeconfig)
            .env(
                "IRONIC_ENDPOINT",
                format!("http://127.0.0.1:{ironic_port}/v1/"),
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
            .env("WATCH_NAMESPACE", ns)
            .env("BMO_CONCURRENCY", s.concurrency.to_string())
            .env("PROVISIONING_LIMIT", s.limit.to_string())
            // A fresh Ironic holds no request of a killed predecessor: the settling
            // after start (10 s by default) is a cost per start, not per host.
            .env("BMO_START_SETTLE", "0")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .context("start bmo")?,
    ))
}

impl BmoRun {
    /// The sushy-emulator (Redfish work), the namespace, the Ironic, the proxies, bmo
    /// and the benchmark's watch of the namespace's hosts.
    async fn start(
        ctx: &Ctx,
        admin: &kube::Client,
        run: usize,
        n: usize,
        work: Work,
    ) -> Result<BmoRun> {
        let ns = format!("scale-{n}-{}-{}", ctx.stamp, run);
        let sushy_name = format!("scale-{}-{n}-bmo-sushy", ctx.stamp);
        let sushy = start_sushy(ctx, work, &sushy_name, run, n).await?;
        create_namespace(admin, &ns).await?;
        let ironic = PrivateIronic::start(
            &ctx.repo,
            &ctx.stack_dir,
            &format!("scale-{}-{n}-{run}-bmo", ctx.stamp),
            &ctx.settings.ironic_conf,
            ctx.settings.ironic_conductors,
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
        let child = spawn_bmo(ctx, &kubeconfig, ironic_proxy.port, &ns, &log_path)?;
        let (progress, watch_task) = watch_hosts(admin.clone(), &ns);
        Ok(BmoRun {
            watch_task,
            child,
            ironic,
            sushy,
            kube_proxy,
            ironic_proxy,
            progress,
            ns,
            log_path,
        })
    }

    /// Ready when bmo watches its hosts and our own watch has listed.
    async fn wait_until_watching(&self) -> Result<()> {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let (_, kinds) = self.kube_proxy.counts.snapshot();
            let bmo_watching = kinds.contains_key("WATCH baremetalhosts");
            let synced = self.progress.lock().map(|p| p.synced).unwrap_or(false);
            if bmo_watching && synced {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!(
                    "bmo did not start watching hosts within 60 s; see {}",
                    self.log_path.display()
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// bmo's process id.
    fn pid(&self) -> u32 {
        self.child.0.id()
    }

    fn snapshot(&self) -> Snapshot {
        let (kube, kube_kinds) = self.kube_proxy.counts.snapshot();
        let (ironic, ironic_kinds) = self.ironic_proxy.counts.snapshot();
        Snapshot {
            kube,
            kube_kinds,
            ironic,
            ironic_kinds,
            bmo_cpu: cpu_seconds(self.pid()),
        }
    }

    /// Waits until all `n` hosts are in the work's target state, reporting every
    /// 30 s; bmo's highest RSS sampled on the way (KiB).
    async fn wait_for_target(
        &self,
        n: usize,
        work: Work,
        t0: Instant,
        timeout: Duration,
    ) -> Result<u64> {
        let mut peak_rss = 0u64;
        let mut last_report = Instant::now();
        let mut all_stated = false;
        loop {
            peak_rss = peak_rss.max(status_kib(self.pid(), "VmRSS").unwrap_or(0));
            let (available, provisioned, errors) = match self.progress.lock() {
                Ok(p) => {
                    if !all_stated && p.stated.len() >= n {
                        all_stated = true;
                        let latest = spread(first_state_latencies(&p)).max;
                        eprintln!(
                            "scale: N={n}: {:.1} s: every host shows a state, each within {latest:.2} s of its creation",
                            t0.elapsed().as_secs_f64()
                        );
                    }
                    (p.available.len(), p.provisioned.len(), p.errors.len())
                }
                Err(_) => bail!("progress lock poisoned"),
            };
            let done = match work {
                Work::Fake => provisioned,
                Work::Redfish => available,
            };
            if done >= n {
                return Ok(peak_rss);
            }
            if last_report.elapsed() > Duration::from_secs(30) {
                last_report = Instant::now();
                eprintln!(
                    "scale: N={n}: {:.0} s: {available} available, {provisioned} provisioned, {errors} with errors, RSS {} MiB",
                    t0.elapsed().as_secs_f64(),
                    peak_rss / 1024
                );
            }
            if t0.elapsed() > timeout {
                bail!(
                    "N={n}: only {done} of {n} {} after {:?}",
                    work.target(),
                    timeout
                );
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// Waits (up to `FIRMWARE_WAIT` after the target) until every host's
    /// HostFirmwareSettings and every HostFirmwareComponents is filled; the seconds
    /// from `t0` until then, `None` if they were not; bmo's highest RSS on the way
    /// (KiB).
    async fn wait_for_firmware(&self, n: usize, t0: Instant) -> Result<(Option<f64>, u64)> {
        let deadline = Instant::now() + FIRMWARE_WAIT;
        let mut peak_rss = 0u64;
        loop {
            peak_rss = peak_rss.max(status_kib(self.pid(), "VmRSS").unwrap_or(0));
            let (settings, components, all, last) = match self.progress.lock() {
                Ok(p) => (
                    p.settings.filled.len(),
                    format!(
                        "{} of {}",
                        p.components.filled.len(),
                        p.components.seen.len()
                    ),
                    p.settings.filled.len() >= n && p.components.all_filled(),
                    p.settings
                        .filled
                        .values()
                        .chain(p.components.filled.values())
                        .max()
                        .map(|t| t.duration_since(t0).as_secs_f64()),
                ),
                Err(_) => bail!("progress lock poisoned"),
            };
            if all {
                eprintln!(
                    "scale: N={n}: firmware objects filled at {:.1} s: {settings} HostFirmwareSettings, HostFirmwareComponents {components}",
                    last.unwrap_or_default()
                );
                return Ok((last, peak_rss));
            }
            if Instant::now() > deadline {
                eprintln!(
                    "scale: N={n}: after {FIRMWARE_WAIT:?} more, {settings} of {n} HostFirmwareSettings and HostFirmwareComponents {components} filled"
                );
                return Ok((None, peak_rss));
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// Each host's time from `t0` to available and provisioned, and the hosts that
    /// reported an error (the first three printed).
    fn record_times(&self, t0: Instant, n: usize, r: &mut RunResult) -> Result<()> {
        let p = self
            .progress
            .lock()
            .map_err(|_| anyhow::anyhow!("progress lock poisoned"))?;
        let since = |m: &HashMap<String, Instant>| {
            m.values()
                .map(|t| t.duration_since(t0).as_secs_f64())
                .collect::<Vec<_>>()
        };
        r.bmo_first_state = spread(first_state_latencies(&p));
        r.bmo_available = spread(since(&p.available));
        r.bmo_provisioned = spread(since(&p.provisioned));
        r.errors = p.errors.len();
        for (host, msg) in p.errors.iter().take(3) {
            eprintln!("scale: N={n}: {host} reported: {msg}");
        }
        Ok(())
    }

    /// Keeps bmo running with every host at rest for `idle` and records the requests
    /// and CPU of that window; bmo's highest RSS sampled in it (KiB).
    async fn idle(&self, idle: Duration, done: &Snapshot, r: &mut RunResult) -> u64 {
        let mut peak_rss = 0u64;
        let idle_start = Instant::now();
        while idle_start.elapsed() < idle {
            peak_rss = peak_rss.max(status_kib(self.pid(), "VmRSS").unwrap_or(0));
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        let now = self.snapshot();
        r.idle_minutes = idle_start.elapsed().as_secs_f64() / 60.0;
        r.kube_idle = now.kube - done.kube;
        r.ironic_idle = now.ironic - done.ironic;
        r.bmo_cpu_idle = now.bmo_cpu - done.bmo_cpu;
        let kube_idle_kinds = diff(&now.kube_kinds, &done.kube_kinds);
        let ironic_idle_kinds = diff(&now.ironic_kinds, &done.ironic_kinds);
        r.kube_idle_firmware = count(&kube_idle_kinds, |k| {
            k.contains("hostfirmwaresettings")
                || k.contains("hostfirmwarecomponents")
                || k.contains("firmwareschemas")
        });
        r.ironic_idle_firmware = count(&ironic_idle_kinds, |k| {
            k.ends_with("/bios") || k.ends_with("/firmware")
        });
        print_breakdown("kube requests, idle", &kube_idle_kinds);
        print_breakdown("Ironic requests, idle", &ironic_idle_kinds);
        peak_rss
    }
}

/// Per host, the seconds from the watch's first sight of it to its first state.
fn first_state_latencies(p: &Progress) -> Vec<f64> {
    p.stated
        .iter()
        .filter_map(|(host, stated)| Some(stated.duration_since(*p.seen.get(host)?).as_secs_f64()))
        .collect()
}

/// The requests of the kinds `firmware` picks (the firmware controllers' reads).
fn count(kinds: &BTreeMap<String, u64>, firmware: impl Fn(&str) -> bool) -> u64 {
    kinds
        .iter()
        .filter(|(kind, _)| firmware(kind))
        .map(|(_, n)| n)
        .sum()
}

/// The requests of start-up and of the way to the target state, by kind.
fn print_breakdowns(work: Work, start: &Snapshot, done: &Snapshot) {
    print_breakdown("kube requests, start-up", &start.kube_kinds);
    print_breakdown(
        &format!("kube requests, apply → {}", work.target()),
        &diff(&done.kube_kinds, &start.kube_kinds),
    );
    print_breakdown("Ironic requests, start-up", &start.ironic_kinds);
    print_breakdown(
        &format!("Ironic requests, apply → {}", work.target()),
        &diff(&done.ironic_kinds, &start.ironic_kinds),
    );
}

/// One bmo run of `n` hosts of `r.work`; fills in bmo's half of `r`.
pub async fn run_bmo(
    ctx: &Ctx,
    admin: &kube::Client,
    run: usize,
    n: usize,
    r: &mut RunResult,
) -> Result<()> {
    let s = &ctx.settings;
    let work = r.work;
    let bmo = BmoRun::start(ctx, admin, run, n, work).await?;
    bmo.wait_until_watching().await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let start = bmo.snapshot();
    r.kube_startup = start.kube;
    let ironic_cpu_start = bmo.ironic.cpu_by_process();

    let t0 = Instant::now();
    apply_hosts(admin, &bmo.ns, work, bmo.sushy.as_ref(), run, n).await?;
    eprintln!(
        "scale: N={n}: applied {n} hosts and Secrets in {:.1} s",
        t0.elapsed().as_secs_f64()
    );
    let mut peak_rss = bmo.wait_for_target(n, work, t0, s.timeout).await?;
    let (filled, rss) = bmo.wait_for_firmware(n, t0).await?;
    peak_rss = peak_rss.max(rss);
    r.bmo_firmware_filled = filled;
    let done = bmo.snapshot();
    r.ironic_cpu_bmo = print_ironic_cpu(n, &ironic_cpu_start, &bmo.ironic.cpu_by_process());
    bmo.record_times(t0, n, r)?;
    r.kube_provisioning = done.kube - start.kube;
    r.ironic_provisioning = done.ironic - start.ironic;
    r.bmo_cpu_provisioning = done.bmo_cpu - start.bmo_cpu;
    eprintln!(
        "scale: N={n}: all {} after {:.1} s; idle for {} s",
        work.target(),
        r.bmo_target().max,
        s.idle.as_secs()
    );
    print_breakdowns(work, &start, &done);
    if !s.idle.is_zero() {
        peak_rss = peak_rss.max(bmo.idle(s.idle, &done, r).await);
    }
    let hwm = status_kib(bmo.pid(), "VmHWM").unwrap_or(0);
    r.bmo_peak_rss_mib = peak_rss.max(hwm) as f64 / 1024.0;
    Ok(())
}

/// Prints the Ironic processes' CPU seconds between `start` and `end` (by process when
/// Ironic is scaled out) and returns their sum.
fn print_ironic_cpu(n: usize, start: &[(String, f64)], end: &[(String, f64)]) -> f64 {
    let used: Vec<(&str, f64)> = end
        .iter()
        .map(|(name, cpu)| {
            let before = start
                .iter()
                .find(|(s, _)| s == name)
                .map_or(0.0, |(_, c)| *c);
            (name.as_str(), cpu - before)
        })
        .collect();
    let total = used.iter().map(|(_, cpu)| cpu).sum();
    if used.len() > 1 {
        let parts: Vec<String> = used
            .iter()
            .map(|(name, cpu)| format!("{name} {cpu:.0} s"))
            .collect();
        eprintln!(
            "scale: N={n}: Ironic CPU {total:.0} s: {}",
            parts.join(", ")
        );
    }
    total
}
