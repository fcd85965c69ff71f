//! The measurements: CPU seconds and resident memory read from `/proc`, the spread of
//! per-host times, and what one run measured.

use crate::workload::Work;

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
pub fn group_cpu_seconds(pgid: u32) -> f64 {
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
pub fn status_kib(pid: u32, key: &str) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// User+system CPU seconds of a live process (0 once it is gone).
pub fn cpu_seconds(pid: u32) -> f64 {
    proc_stat(pid).map(|(_, c)| c).unwrap_or(0.0)
}

#[derive(Debug, Default, Clone, Copy)]
pub struct Spread {
    pub p50: f64,
    pub p95: f64,
    pub max: f64,
}

pub fn spread(mut values: Vec<f64>) -> Spread {
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
pub struct RunResult {
    pub n: usize,
    pub work: Work,
    pub bmo_available: Spread,
    pub bmo_provisioned: Spread,
    /// Per host, from its creation to its first provisioning state (bmo).
    pub bmo_first_state: Spread,
    /// From the start until every host's HostFirmwareSettings and
    /// HostFirmwareComponents was filled (bmo), if all were.
    pub bmo_firmware_filled: Option<f64>,
    pub direct_available: Spread,
    pub direct_provisioned: Spread,
    pub bmo_peak_rss_mib: f64,
    pub bmo_cpu_provisioning: f64,
    pub bmo_cpu_idle: f64,
    pub ironic_cpu_bmo: f64,
    pub ironic_cpu_direct: f64,
    pub kube_startup: u64,
    pub kube_provisioning: u64,
    pub ironic_provisioning: u64,
    pub ironic_direct: u64,
    pub idle_minutes: f64,
    pub kube_idle: u64,
    pub ironic_idle: u64,
    /// Of the idle requests, the firmware controller's (BIOS settings re-read every
    /// few minutes; HostFirmwareSettings and FirmwareSchema reads).
    pub kube_idle_firmware: u64,
    pub ironic_idle_firmware: u64,
    pub errors: usize,
    /// The direct driver doing bmo's Ironic work too (`direct-as-bmo`).
    pub as_bmo: Option<DirectRun>,
}

/// What one direct-Ironic run measured.
#[derive(Debug, Default, Clone, Copy)]
pub struct DirectRun {
    pub available: Spread,
    pub provisioned: Spread,
    pub ironic_cpu: f64,
    pub ironic_requests: u64,
}

impl DirectRun {
    pub fn target(&self, work: Work) -> Spread {
        match work {
            Work::Fake => self.provisioned,
            Work::Redfish => self.available,
        }
    }
}

impl RunResult {
    /// bmo's times to the work's target state.
    pub fn bmo_target(&self) -> Spread {
        match self.work {
            Work::Fake => self.bmo_provisioned,
            Work::Redfish => self.bmo_available,
        }
    }

    pub fn direct_target(&self) -> Spread {
        match self.work {
            Work::Fake => self.direct_provisioned,
            Work::Redfish => self.direct_available,
        }
    }

    pub fn ratio(&self) -> f64 {
        if self.direct_target().max > 0.0 {
            self.bmo_target().max / self.direct_target().max
        } else {
            0.0
        }
    }

    /// The last host's time over the median host's (bmo).
    pub fn tail(&self) -> f64 {
        let t = self.bmo_target();
        if t.p50 > 0.0 { t.max / t.p50 } else { 0.0 }
    }

    pub fn per_host_min(&self, count: u64) -> f64 {
        if self.idle_minutes > 0.0 {
            count as f64 / self.n as f64 / self.idle_minutes
        } else {
            0.0
        }
    }
}
