//! The report: the markdown table (a column per N and work), the CSV (a row per N and
//! work) and the request breakdowns printed on the way.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::measure::{DirectRun, RunResult, Spread};
use crate::workload::Work;

fn fmt_spread(s: Spread) -> String {
    format!("{:.1} / {:.1} / {:.1}", s.p50, s.p95, s.max)
}

/// A markdown table with a column per run, built a row at a time.
struct Table<'a> {
    results: &'a [RunResult],
    out: String,
}

impl<'a> Table<'a> {
    fn new(results: &'a [RunResult]) -> Table<'a> {
        let mut out = String::from("| | ");
        out += &results
            .iter()
            .map(|r| format!("N = {} {}", r.n, r.work.label()))
            .collect::<Vec<_>>()
            .join(" | ");
        out += " |\n|---|";
        out += &"---:|".repeat(results.len());
        out.push('\n');
        Table { results, out }
    }

    fn row(&mut self, label: &str, cell: impl Fn(&RunResult) -> String) {
        let cells: Vec<String> = self.results.iter().map(cell).collect();
        let _ = writeln!(self.out, "| {label} | {} |", cells.join(" | "));
    }
}

/// The cell for a figure about provisioning: the Redfish work ends at available.
fn provisioned(r: &RunResult, text: String) -> String {
    if r.work == Work::Fake {
        text
    } else {
        "–".to_owned()
    }
}

/// The cell for a figure of the `direct-as-bmo` half, when the run had one.
fn as_bmo(r: &RunResult, cell: impl Fn(&DirectRun) -> String) -> String {
    r.as_bmo.as_ref().map_or_else(|| "–".to_owned(), cell)
}

/// Times to available and provisioned, bmo and direct Ironic, and their ratio.
fn time_rows(t: &mut Table) {
    t.row("bmo: all available (s)", |r| {
        format!("{:.1}", r.bmo_available.max)
    });
    t.row("bmo: all provisioned (s)", |r| {
        provisioned(r, format!("{:.1}", r.bmo_provisioned.max))
    });
    t.row(
        "bmo: per host, creation to first state, p50 / p95 / max (s)",
        |r| fmt_spread(r.bmo_first_state),
    );
    t.row(
        "bmo: every HostFirmwareSettings and HostFirmwareComponents filled, from the start / after the last host reached the target (s)",
        |r| match r.bmo_firmware_filled {
            Some(t) => format!("{t:.1} / {:.1}", t - r.bmo_target().max),
            None => "not all".to_owned(),
        },
    );
    t.row("bmo: per host to available, p50 / p95 / max (s)", |r| {
        fmt_spread(r.bmo_available)
    });
    t.row("bmo: per host to provisioned, p50 / p95 / max (s)", |r| {
        provisioned(r, fmt_spread(r.bmo_provisioned))
    });
    t.row("direct Ironic: all available (s)", |r| {
        format!("{:.1}", r.direct_available.max)
    });
    t.row("direct Ironic: all provisioned (s)", |r| {
        provisioned(r, format!("{:.1}", r.direct_provisioned.max))
    });
    t.row(
        "direct Ironic: per host to available, p50 / p95 / max (s)",
        |r| fmt_spread(r.direct_available),
    );
    t.row(
        "direct Ironic: per host to provisioned, p50 / p95 / max (s)",
        |r| provisioned(r, fmt_spread(r.direct_provisioned)),
    );
    t.row(
        "**time to all in the target state (fake-hardware: provisioned, Redfish: available), bmo / direct Ironic**",
        |r| format!("**{:.2}×**", r.ratio()),
    );
}

/// The `direct-as-bmo` half's time, ratio, Ironic CPU and requests.
fn as_bmo_rows(t: &mut Table) {
    t.row(
        "direct Ironic doing bmo's Ironic work too: all in the target state (s)",
        |r| as_bmo(r, |d| format!("{:.1}", d.target(r.work).max)),
    );
    t.row(
        "time to all in the target state, bmo / direct Ironic doing bmo's Ironic work too",
        |r| {
            as_bmo(r, |d| {
                format!("{:.2}×", r.bmo_target().max / d.target(r.work).max)
            })
        },
    );
    t.row(
        "direct Ironic doing bmo's Ironic work too: Ironic CPU seconds / requests per host",
        |r| {
            as_bmo(r, |d| {
                format!(
                    "{:.0} / {:.1}",
                    d.ironic_cpu,
                    d.ironic_requests as f64 / r.n as f64
                )
            })
        },
    );
}

/// What the way to the target state cost: tail, memory, CPU, requests.
fn cost_rows(t: &mut Table) {
    t.row("bmo: last host / median host, to the target state", |r| {
        format!("{:.2}", r.tail())
    });
    t.row("bmo peak RSS (MiB)", |r| {
        format!("{:.1}", r.bmo_peak_rss_mib)
    });
    t.row("bmo CPU seconds, apply → target state", |r| {
        format!("{:.1}", r.bmo_cpu_provisioning)
    });
    t.row("Ironic CPU seconds, bmo run / direct run", |r| {
        format!("{:.0} / {:.0}", r.ironic_cpu_bmo, r.ironic_cpu_direct)
    });
    t.row(
        "kube-apiserver requests by bmo: start-up / apply → target state",
        |r| format!("{} / {}", r.kube_startup, r.kube_provisioning),
    );
    t.row(
        "Ironic requests, apply → target state: bmo / direct",
        |r| format!("{} / {}", r.ironic_provisioning, r.ironic_direct),
    );
    t.row("Ironic requests per host: bmo / direct", |r| {
        format!(
            "{:.1} / {:.1}",
            r.ironic_provisioning as f64 / r.n as f64,
            r.ironic_direct as f64 / r.n as f64
        )
    });
}

/// What hosts at rest cost, and the hosts that reported an error.
fn idle_rows(t: &mut Table) {
    t.row("idle: kube-apiserver requests per host per minute", |r| {
        format!("{:.2}", r.per_host_min(r.kube_idle))
    });
    t.row("idle: Ironic requests per host per minute", |r| {
        format!("{:.2}", r.per_host_min(r.ironic_idle))
    });
    t.row(
        "idle, host controller alone (without the firmware controllers' reads): kube-apiserver / Ironic requests per host per minute",
        |r| {
            format!(
                "{:.2} / {:.2}",
                r.per_host_min(r.kube_idle - r.kube_idle_firmware),
                r.per_host_min(r.ironic_idle - r.ironic_idle_firmware)
            )
        },
    );
    t.row("idle: bmo CPU seconds per minute", |r| {
        if r.idle_minutes > 0.0 {
            format!("{:.2}", r.bmo_cpu_idle / r.idle_minutes)
        } else {
            "-".into()
        }
    });
    t.row("hosts that reported an error on the way", |r| {
        r.errors.to_string()
    });
}

pub fn table(results: &[RunResult]) -> String {
    let mut t = Table::new(results);
    time_rows(&mut t);
    if results.iter().any(|r| r.as_bmo.is_some()) {
        as_bmo_rows(&mut t);
    }
    cost_rows(&mut t);
    idle_rows(&mut t);
    t.out
}

pub fn csv(results: &[RunResult]) -> String {
    let mut out = String::from(
        "work,hosts,bmo_available_p50_s,bmo_available_p95_s,bmo_available_max_s,bmo_provisioned_p50_s,bmo_provisioned_p95_s,bmo_provisioned_max_s,direct_available_p50_s,direct_available_p95_s,direct_available_max_s,direct_provisioned_p50_s,direct_provisioned_p95_s,direct_provisioned_max_s,ratio_target,bmo_peak_rss_mib,bmo_cpu_provisioning_s,bmo_cpu_idle_s,ironic_cpu_bmo_s,ironic_cpu_direct_s,kube_requests_startup,kube_requests_provisioning,ironic_requests_provisioning,ironic_requests_direct,idle_minutes,kube_requests_idle,ironic_requests_idle,kube_idle_per_host_min,ironic_idle_per_host_min,kube_idle_firmware,ironic_idle_firmware,hosts_with_errors,direct_as_bmo_target_max_s,ratio_target_as_bmo,ironic_cpu_direct_as_bmo_s,ironic_requests_direct_as_bmo,bmo_first_state_p50_s,bmo_first_state_p95_s,bmo_first_state_max_s,bmo_firmware_filled_s\n",
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
            "{},{},{},{},{},{},{:.3},{:.1},{:.2},{:.2},{:.2},{:.2},{},{},{},{},{:.2},{},{},{:.3},{:.3},{},{},{},{as_bmo},{},{}",
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
            s(r.bmo_first_state),
            r.bmo_firmware_filled
                .map_or_else(String::new, |t| format!("{t:.3}")),
        );
    }
    out
}

pub fn print_breakdown(what: &str, map: &BTreeMap<String, u64>) {
    eprintln!("scale:   {what}:");
    let mut items: Vec<_> = map.iter().collect();
    items.sort_by(|a, b| b.1.cmp(a.1));
    for (kind, count) in items {
        eprintln!("scale:     {count:>8}  {kind}");
    }
}
