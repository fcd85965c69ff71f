//! The benchmark's settings, read from the environment (listed in main.rs).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result, bail};

use crate::workload::Work;

pub struct Settings {
    pub hosts: Vec<usize>,
    pub works: Vec<Work>,
    pub run_bmo: bool,
    pub run_direct: bool,
    pub svg: Option<PathBuf>,
    pub idle: Duration,
    pub timeout: Duration,
    pub concurrency: usize,
    pub limit: usize,
    pub direct_poll: Duration,
    /// A second direct run that also does the Ironic work bmo's features add.
    pub run_direct_as_bmo: bool,
    pub ironic_conf: Vec<String>,
    /// 0: the one-process Ironic on SQLite; 1 or 2: ironic-api and that many
    /// conductors on MariaDB (`tests/env/stack ha-ironic`).
    pub ironic_conductors: usize,
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
    pub fn from_env() -> Result<Settings> {
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
        let ironic_conductors = env_or("BMO_SCALE_IRONIC_CONDUCTORS", 0)?;
        if ironic_conductors > 2 {
            bail!("BMO_SCALE_IRONIC_CONDUCTORS: 0 (one process), 1 or 2");
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
            ironic_conductors,
        })
    }
}
