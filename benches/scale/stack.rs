//! The test stack the runs use: its env file, an empty Ironic of a run's own, a
//! sushy-emulator of a run's own for the Redfish work, the bmo process, the admin
//! client and the CRDs.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use kube::api::{Api, PostParams};
use serde_json::json;

use crate::Ctx;
use crate::measure::group_cpu_seconds;
use crate::workload::{Work, mac};

/// `export KEY=value` lines of the stack's env file.
pub struct StackEnv {
    vars: HashMap<String, String>,
}

impl StackEnv {
    pub fn load(repo: &Path) -> Result<StackEnv> {
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

    pub fn get(&self, key: &str) -> Result<&str> {
        self.vars
            .get(key)
            .map(String::as_str)
            .with_context(|| format!("the stack env file has no {key}"))
    }
}

/// An empty Ironic of our own, stopped when dropped: one process on SQLite
/// (`private-ironic`), or scaled out as ironic-standalone-operator runs it (`ha-ironic`:
/// ironic-api and `conductors` conductors on MariaDB).
pub struct PrivateIronic {
    script: PathBuf,
    command: &'static str,
    dir: PathBuf,
    pub endpoint: String,
    /// The name and process group of each of its processes, as the script lists them.
    processes: Vec<(String, u32)>,
}

impl PrivateIronic {
    /// `conductors`: 0 for the one-process Ironic, 1 or 2 for the scaled-out one.
    pub fn start(
        repo: &Path,
        stack_dir: &Path,
        name: &str,
        conf: &[String],
        conductors: usize,
    ) -> Result<Self> {
        let script = repo.join("tests/env/stack");
        let command = if conductors == 0 {
            "private-ironic"
        } else {
            "ha-ironic"
        };
        let dir = stack_dir.join(name);
        let out = Command::new(&script)
            .args([command, "start"])
            .arg(&dir)
            .args(conf)
            .env("BMO_HA_CONDUCTORS", conductors.to_string())
            .stderr(Stdio::inherit())
            .output()
            .with_context(|| format!("run tests/env/stack {command} start"))?;
        if !out.status.success() {
            bail!("{command} start failed ({})", out.status);
        }
        let endpoint = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::trim)
            .rfind(|l| l.ends_with("/v1/"))
            .unwrap_or_default()
            .to_owned();
        let pids = std::fs::read_to_string(dir.join("pids")).context("private Ironic pids")?;
        // `pid name` lines; the scaled-out Ironic's database counts as Ironic's work.
        let processes: Vec<(String, u32)> = pids
            .lines()
            .filter_map(|l| {
                let (pid, name) = l.trim().split_once(' ')?;
                Some((name.to_owned(), pid.parse().ok()?))
            })
            .filter(|(name, _)| name.starts_with("ironic") || name == "mariadb")
            .collect();
        if processes.is_empty() {
            bail!("no Ironic process in {}", dir.join("pids").display());
        }
        Ok(PrivateIronic {
            script,
            command,
            dir,
            endpoint,
            processes,
        })
    }

    pub fn cpu_seconds(&self) -> f64 {
        self.cpu_by_process().iter().map(|(_, cpu)| cpu).sum()
    }

    /// CPU seconds of each process (with its workers), by the script's names.
    pub fn cpu_by_process(&self) -> Vec<(String, f64)> {
        self.processes
            .iter()
            .map(|(name, pgid)| (name.clone(), group_cpu_seconds(*pgid)))
            .collect()
    }
}

impl Drop for PrivateIronic {
    fn drop(&mut self) {
        let _ = Command::new(&self.script)
            .args([self.command, "stop"])
            .arg(&self.dir)
            .status();
    }
}

/// A sushy-emulator of our own with `n` fake systems (its fake driver, as the stack
/// runs it: no VMs, power and boot kept in memory), the stack's Redfish user; stopped
/// when dropped.
pub struct Sushy {
    child: Child,
    port: u16,
    ids: Vec<String>,
    pub username: String,
    pub password: String,
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
    pub fn address(&self, i: usize) -> String {
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

pub struct BmoChild(pub Child);

impl Drop for BmoChild {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The run's own sushy-emulator with `n` systems, answering, for the Redfish work;
/// none for the fake-hardware work.
pub async fn start_sushy(
    ctx: &Ctx,
    work: Work,
    name: &str,
    run: usize,
    n: usize,
) -> Result<Option<Sushy>> {
    match work {
        Work::Fake => Ok(None),
        Work::Redfish => {
            let sushy = Sushy::start(ctx, name, run, n)?;
            sushy.ready().await?;
            Ok(Some(sushy))
        }
    }
}

pub async fn admin_client(kubeconfig: &Path) -> Result<kube::Client> {
    let raw = kube::config::Kubeconfig::read_from(kubeconfig)
        .with_context(|| format!("read {}", kubeconfig.display()))?;
    let config = kube::Config::from_custom_kubeconfig(raw, &Default::default()).await?;
    Ok(kube::Client::try_from(config)?)
}

/// The admin kubeconfig with the server replaced by the counting proxy (plain HTTP).
pub fn proxied_kubeconfig(admin: &Path, port: u16, out: &Path) -> Result<()> {
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

pub async fn ensure_crds(ctx: &Ctx, admin: &kube::Client) -> Result<()> {
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

pub async fn create_namespace(admin: &kube::Client, ns: &str) -> Result<()> {
    let api: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(admin.clone());
    let obj = serde_json::from_value(json!({"metadata": {"name": ns}}))?;
    api.create(&PostParams::default(), &obj)
        .await
        .with_context(|| format!("create namespace {ns}"))?;
    Ok(())
}
