//! bmo's own `bmo_*` series on `/metrics`, read from the page's sources at each
//! scrape: the hosts' states and errors, Ironic's reachability, the DHCP pool's use
//! and the boot log's totals (DHCP exchanges, TFTP and HTTP transfers). What the
//! alert rules in deploy/monitoring/ read. A series is absent while its source has
//! not started (no hosts watched yet, no network boot service, no Ironic probe).

use std::net::Ipv4Addr;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;

use super::Activity;
use crate::netboot::boot_log::Totals;
use crate::netboot::dhcp::range::Range;
use crate::netboot::leases::{Lease, LeaseState, now_unix};

/// The `bmo_*` series' collector, to register on the metrics' registry.
#[derive(Clone)]
pub struct BmoSeries {
    activity: Activity,
    /// Full mode's address pool.
    pool: Option<Range>,
}

impl BmoSeries {
    /// Reads `activity` (filled in as `bmo run` starts its parts); `pool` is full
    /// mode's `DHCP_RANGE`.
    pub fn new(activity: Activity, pool: Option<Range>) -> Self {
        Self { activity, pool }
    }
}

impl std::fmt::Debug for BmoSeries {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BmoSeries")
            .field("pool", &self.pool)
            .finish_non_exhaustive()
    }
}

type Labels = Vec<(&'static str, String)>;

/// Writes one metric of `kind` with a value per label set; nothing when `rows` is
/// empty.
fn write(
    encoder: &mut DescriptorEncoder,
    (name, help, kind): (&str, &str, MetricType),
    rows: &[(Labels, f64)],
) -> std::fmt::Result {
    if rows.is_empty() {
        return Ok(());
    }
    let mut metric = encoder.encode_descriptor(name, help, None, kind)?;
    for (labels, value) in rows {
        if labels.is_empty() {
            value_of(&mut metric, kind, *value)?;
        } else {
            value_of(&mut metric.encode_family(labels)?, kind, *value)?;
        }
    }
    Ok(())
}

fn value_of(metric: &mut MetricEncoder, kind: MetricType, value: f64) -> std::fmt::Result {
    match kind {
        MetricType::Counter => metric.encode_counter::<NoLabelSet, _, f64>(&value, None),
        _ => metric.encode_gauge(&value),
    }
}

fn gauge<'a>(name: &'a str, help: &'a str) -> (&'a str, &'a str, MetricType) {
    (name, help, MetricType::Gauge)
}

fn counter<'a>(name: &'a str, help: &'a str) -> (&'a str, &'a str, MetricType) {
    (name, help, MetricType::Counter)
}

fn one(labels: Labels, value: impl Into<f64>) -> Vec<(Labels, f64)> {
    vec![(labels, value.into())]
}

impl Collector for BmoSeries {
    fn encode(&self, mut encoder: DescriptorEncoder) -> std::fmt::Result {
        if let Some(hosts) = self.activity.host_rows() {
            write_hosts(&mut encoder, &hosts)?;
        }
        if let Some(probe) = self.activity.ironic() {
            let up = gauge("bmo_ironic_up", "Whether Ironic answered bmo's last probe");
            write(&mut encoder, up, &one(vec![], u8::from(probe.reachable)))?;
        }
        if let Some((leases, totals)) = self.activity.netboot_counts() {
            if let Some(pool) = self.pool {
                write_pool(&mut encoder, pool, &leases)?;
            }
            write_totals(&mut encoder, &totals)?;
        }
        Ok(())
    }
}

fn write_hosts(
    encoder: &mut DescriptorEncoder,
    hosts: &[super::snapshot::HostRow],
) -> std::fmt::Result {
    let key = |h: &super::snapshot::HostRow| -> Labels {
        vec![("namespace", h.namespace.clone()), ("host", h.name.clone())]
    };
    let with = |mut labels: Labels, name, value: &str| {
        labels.push((name, value.to_owned()));
        (labels, 1.0)
    };
    let states: Vec<_> = hosts
        .iter()
        .map(|h| with(key(h), "state", &h.state))
        .collect();
    let errors: Vec<_> = hosts
        .iter()
        .filter(|h| h.operational_status == "error")
        .map(|h| with(key(h), "error_type", h.error_type.as_deref().unwrap_or("")))
        .collect();
    let state = gauge(
        "bmo_host_provisioning_state",
        "1 for each host, labelled with its provisioning state",
    );
    write(encoder, state, &states)?;
    let error = gauge(
        "bmo_host_error",
        "1 for each host whose operational status is error, labelled with its error type",
    );
    write(encoder, error, &errors)
}

/// Addresses of `pool` and how many of them live leases hold.
fn pool_use(pool: Range, leases: &[Lease], now: u64) -> (u32, u32) {
    let (start, end) = (u32::from(pool.start), u32::from(pool.end));
    let in_pool = |ip: Ipv4Addr| (start..=end).contains(&u32::from(ip));
    let leased = leases
        .iter()
        .filter(|l| l.state == LeaseState::Bound && l.expires_unix > now)
        .filter(|l| l.ip.is_some_and(in_pool))
        .count();
    let size = end.saturating_sub(start).saturating_add(1);
    (size, u32::try_from(leased).unwrap_or(u32::MAX))
}

fn write_pool(encoder: &mut DescriptorEncoder, pool: Range, leases: &[Lease]) -> std::fmt::Result {
    let (size, leased) = pool_use(pool, leases, now_unix());
    let size_metric = gauge(
        "bmo_dhcp_pool_size",
        "Addresses in the DHCP pool (DHCP_RANGE)",
    );
    write(encoder, size_metric, &one(vec![], size))?;
    let leased_metric = gauge(
        "bmo_dhcp_pool_leased",
        "Addresses of the DHCP pool held by a bound, unexpired lease",
    );
    write(encoder, leased_metric, &one(vec![], leased))
}

/// The boot log's counters: (name, help) and the rows of each.
const TOTALS: [(&str, &str); 6] = [
    (
        "bmo_boot_events",
        "Boot events recorded: DHCP exchanges, TFTP and HTTP transfers",
    ),
    (
        "bmo_dhcp_exchanges",
        "DHCP requests by message type and bmo's reply (none: not answered)",
    ),
    (
        "bmo_tftp_transfers",
        "TFTP transfers by outcome (sent or failed)",
    ),
    ("bmo_tftp_sent_bytes", "Bytes sent over TFTP"),
    (
        "bmo_http_transfers",
        "HTTP boot server responses by status class and whether the whole body was sent",
    ),
    (
        "bmo_http_sent_bytes",
        "Bytes of response bodies sent by the HTTP boot server",
    ),
];

// Counts fit an f64 exactly up to 2^53.
#[allow(clippy::cast_precision_loss)]
fn write_totals(encoder: &mut DescriptorEncoder, totals: &Totals) -> std::fmt::Result {
    let labelled = |pairs: &[(&'static str, &str)]| -> Labels {
        pairs.iter().map(|(k, v)| (*k, (*v).to_owned())).collect()
    };
    let dhcp = (totals.dhcp.iter())
        .map(|((request, reply), n)| {
            (
                labelled(&[("request", request), ("reply", reply)]),
                *n as f64,
            )
        })
        .collect();
    let tftp = (totals.tftp.iter())
        .map(|(outcome, (n, _))| (labelled(&[("outcome", outcome)]), *n as f64))
        .collect();
    let http = (totals.http.iter())
        .map(|((code, complete), (n, _))| {
            let complete = complete.to_string();
            (
                labelled(&[("code", code), ("complete", &complete)]),
                *n as f64,
            )
        })
        .collect();
    let tftp_bytes: u64 = totals.tftp.values().map(|(_, b)| b).sum();
    let http_bytes: u64 = totals.http.values().map(|(_, b)| b).sum();
    let events = [
        ("dhcp", totals.dhcp.values().sum::<u64>()),
        ("tftp", totals.tftp.values().map(|(n, _)| n).sum()),
        ("http", totals.http.values().map(|(n, _)| n).sum()),
    ]
    .map(|(kind, n)| (labelled(&[("kind", kind)]), n as f64))
    .to_vec();
    let bytes = |b: u64, rows: &Vec<(Labels, f64)>| {
        if rows.is_empty() {
            Vec::new()
        } else {
            one(vec![], b as f64)
        }
    };
    let tftp_bytes = bytes(tftp_bytes, &tftp);
    let http_bytes = bytes(http_bytes, &http);
    let rows = [events, dhcp, tftp, tftp_bytes, http, http_bytes];
    for ((name, help), rows) in TOTALS.into_iter().zip(rows) {
        write(encoder, counter(name, help), &rows)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::BareMetalHost;

    fn host(name: &str, state: &str, error: Option<&str>) -> BareMetalHost {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "metal3.io/v1alpha1", "kind": "BareMetalHost",
            "metadata": {"name": name, "namespace": "site", "uid": name},
            "spec": {"online": true},
            "status": {
                "operationalStatus": if error.is_some() { "error" } else { "OK" },
                "errorType": error, "errorMessage": "", "poweredOn": false,
                "errorCount": 0, "provisioningFailCount": 0,
                "provisioning": {"state": state, "ID": ""},
            },
        }))
        .expect("host")
    }

    #[test]
    fn hosts_states_and_errors_once_the_hosts_are_watched() {
        let activity = Activity::default();
        let series = BmoSeries::new(activity.clone(), None);
        let mut registry = prometheus_client::registry::Registry::default();
        registry.register_collector(Box::new(series));
        let render = |registry: &prometheus_client::registry::Registry| {
            let mut text = String::new();
            prometheus_client::encoding::text::encode(&mut text, registry).expect("encode");
            text
        };
        assert!(
            !render(&registry).contains("bmo_"),
            "nothing before the sources"
        );
        let (store, mut writer) = kube::runtime::reflector::store::<BareMetalHost>();
        for h in [
            host("a", "available", None),
            host("b", "registering", Some("registration error")),
        ] {
            writer.apply_watcher_event(&kube::runtime::watcher::Event::Apply(h));
        }
        activity.set_hosts(store);
        let text = render(&registry);
        for line in [
            r#"bmo_host_provisioning_state{namespace="site",host="a",state="available"} 1.0"#,
            r#"bmo_host_provisioning_state{namespace="site",host="b",state="registering"} 1.0"#,
            r#"bmo_host_error{namespace="site",host="b",error_type="registration error"} 1.0"#,
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "missing {line:?} in\n{text}"
            );
        }
        assert!(
            !text.contains(r#"bmo_host_error{namespace="site",host="a""#),
            "{text}"
        );
        assert!(!text.contains("bmo_ironic_up"), "no probe yet: {text}");
    }

    #[test]
    fn pool_use_counts_live_leases_inside_the_pool() {
        let pool = Range::parse("172.22.0.10,172.22.0.19").expect("range");
        let lease = |last: u8, state, expires_unix| Lease {
            ip: Some(Ipv4Addr::new(172, 22, 0, last)),
            expires_unix,
            ..Lease::new(
                crate::netboot::mac::MacAddr([2, 0, 0, 0, 0, last]),
                state,
                0,
            )
        };
        let leases = [
            lease(10, LeaseState::Bound, 200),
            lease(19, LeaseState::Bound, 200),
            lease(11, LeaseState::Bound, 50),
            lease(12, LeaseState::Offered, 200),
            lease(30, LeaseState::Bound, 200),
        ];
        assert_eq!(pool_use(pool, &leases, 100), (10, 2));
    }
}
