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
//!   BMO_SCALE_IRONIC_CONDUCTORS  0: one Ironic process on SQLite (default); 1 or 2:
//!                                ironic-api and that many conductors on MariaDB, as
//!                                `tests/env/stack ha-ironic` runs them (CPU printed
//!                                by process)
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
//!
//! The modules: `settings` (the environment above), `workload` (the hosts applied and
//! watched), `stack` (the stack's pieces a run starts), `proxy` (the counting
//! proxies), `bmo_run` and `direct` (the two drivers of the same work), `measure`
//! (CPU, memory, spreads, what a run measured), `report` (table, CSV) and `plot`
//! (the SVG).

// Tests and benchmarks may panic on what they set up themselves.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod bmo_run;
mod direct;
mod measure;
mod plot;
mod proxy;
mod report;
mod settings;
mod stack;
mod workload;

use std::path::PathBuf;

use anyhow::{Context, Result};

use crate::measure::RunResult;
use crate::settings::Settings;
use crate::stack::{StackEnv, admin_client, ensure_crds};
use crate::workload::Work;

fn main() -> Result<()> {
    bmo::tls::install_crypto_provider();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("start the tokio runtime")?;
    runtime.block_on(run())
}

/// What every run shares: the repository, the stack, the bmo binary, the settings.
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

impl Ctx {
    fn load() -> Result<Ctx> {
        let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
        let settings = Settings::from_env()?;
        let stack = StackEnv::load(&repo)?;
        let stack_dir = PathBuf::from(stack.get("BMO_STACK_DIR")?);
        let admin_kubeconfig = PathBuf::from(stack.get("KUBECONFIG")?);
        let ca_pem = std::fs::read(stack_dir.join("pki/ca.crt")).context("the stack's CA")?;
        Ok(Ctx {
            apiserver: stack.get("KUBE_APISERVER_URL")?.to_owned(),
            repo,
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
        })
    }
}

/// The halves the settings ask for, for `n` hosts of `work`.
async fn measure(
    ctx: &Ctx,
    admin: &kube::Client,
    run: usize,
    n: usize,
    work: Work,
) -> Result<RunResult> {
    let mut r = RunResult {
        n,
        work,
        ..Default::default()
    };
    if ctx.settings.run_bmo {
        eprintln!("scale: N={n} {}: bmo run", work.label());
        bmo_run::run_bmo(ctx, admin, run, n, &mut r).await?;
    }
    if ctx.settings.run_direct {
        eprintln!("scale: N={n} {}: direct-Ironic run", work.label());
        let direct = direct::run_direct(ctx, run, n, work, false).await?;
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
        r.as_bmo = Some(direct::run_direct(ctx, run, n, work, true).await?);
    }
    Ok(r)
}

/// The CSV and the plot of the results so far.
fn write_files(ctx: &Ctx, csv_path: &std::path::Path, results: &[RunResult]) -> Result<()> {
    std::fs::write(csv_path, report::csv(results))
        .with_context(|| format!("write {}", csv_path.display()))?;
    if let Some(svg_path) = &ctx.settings.svg {
        std::fs::write(svg_path, plot::svg(results))
            .with_context(|| format!("write {}", svg_path.display()))?;
    }
    Ok(())
}

async fn run() -> Result<()> {
    let ctx = Ctx::load()?;
    let admin = admin_client(&ctx.admin_kubeconfig).await?;
    ensure_crds(&ctx, &admin).await?;
    let mut results = Vec::new();
    let csv_path = ctx.repo.join("target/scale-bench.csv");
    let runs: Vec<(usize, Work)> = ctx
        .settings
        .hosts
        .iter()
        .flat_map(|&n| ctx.settings.works.iter().map(move |&w| (n, w)))
        .collect();
    for (run, (n, work)) in runs.into_iter().enumerate() {
        results.push(measure(&ctx, &admin, run, n, work).await?);
        write_files(&ctx, &csv_path, &results)?;
        eprintln!("scale: table so far:\n{}", report::table(&results));
    }
    println!(
        "bmo scale benchmark: concurrency {}, provisioning limit {}, direct poll {} ms, idle window {} s\n",
        ctx.settings.concurrency,
        ctx.settings.limit,
        ctx.settings.direct_poll.as_millis(),
        ctx.settings.idle.as_secs()
    );
    println!("{}", report::table(&results));
    println!("CSV: {}", csv_path.display());
    if let Some(svg_path) = &ctx.settings.svg {
        println!("plot: {}", svg_path.display());
    }
    Ok(())
}
