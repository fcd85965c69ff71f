//! What the page shows, gathered from bmo's running parts at one instant. Built from
//! values, never from a Secret: a BMC address is shown with its userinfo redacted.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::api::BareMetalHost;
use crate::api::host::OperationMetric;
use crate::ironic::Probe;
use crate::netboot::boot_log::{Client, Timeline};
use crate::netboot::leases::Lease;
use crate::netboot::mac::MacAddr;

/// Everything the page shows.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Snapshot {
    /// Unix seconds.
    pub at_unix: u64,
    /// `None` before the first probe (or without Ironic yet).
    pub ironic: Option<Probe>,
    /// Provisioning state → hosts in it.
    pub states: BTreeMap<String, usize>,
    pub hosts: Vec<HostRow>,
    pub timelines: Vec<NamedTimeline>,
    pub leases: Vec<Lease>,
    /// What this bmo does not run (no network boot services, no hosts watched yet).
    pub missing: Vec<&'static str>,
}

/// One host as the page lists it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HostRow {
    pub namespace: String,
    pub name: String,
    pub state: String,
    pub operational_status: String,
    pub error_type: Option<String>,
    pub error_message: String,
    pub powered_on: bool,
    pub bmc: String,
    pub boot_mac: Option<String>,
    /// Operation → (start, end), RFC 3339.
    pub operations: Vec<Operation>,
}

/// One operation of `status.operationHistory`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Operation {
    pub name: &'static str,
    pub start: Option<String>,
    pub end: Option<String>,
}

/// A client's timeline and the host whose boot MAC it is, if any.
#[derive(Debug, Clone, Serialize)]
pub struct NamedTimeline {
    pub host: Option<String>,
    #[serde(flatten)]
    pub timeline: Timeline,
}

impl HostRow {
    pub fn of(host: &BareMetalHost) -> Self {
        let status = host.status.clone().unwrap_or_default();
        let history = status.operation_history.clone().unwrap_or_default();
        let operation = |name, metric: Option<OperationMetric>| {
            let metric = metric.unwrap_or_default();
            Operation {
                name,
                start: metric.start.map(|t| t.0.to_string()),
                end: metric.end.map(|t| t.0.to_string()),
            }
        };
        let operations = [
            operation("register", history.register),
            operation("inspect", history.inspect),
            operation("provision", history.provision),
            operation("deprovision", history.deprovision),
        ];
        let bmc = host.spec.bmc.as_ref().map_or("", |b| b.address.as_str());
        Self {
            namespace: host.metadata.namespace.clone().unwrap_or_default(),
            name: host.metadata.name.clone().unwrap_or_default(),
            state: to_text(&status.provisioning.state),
            operational_status: to_text(&status.operational_status),
            error_type: status.error_type.as_ref().map(to_text),
            error_message: status.error_message,
            powered_on: status.powered_on,
            bmc: crate::bmc::redact_userinfo(bmc),
            boot_mac: host.spec.boot_mac_address.clone(),
            operations: operations
                .into_iter()
                .filter(|o| o.start.is_some())
                .collect(),
        }
    }
}

/// The hosts' rows (by namespace and name) and their count per state.
pub fn hosts(hosts: &[BareMetalHost]) -> (Vec<HostRow>, BTreeMap<String, usize>) {
    let mut rows: Vec<HostRow> = hosts.iter().map(HostRow::of).collect();
    rows.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    let mut states = BTreeMap::new();
    for row in &rows {
        *states.entry(row.state.clone()).or_default() += 1;
    }
    (rows, states)
}

/// Names each timeline by the host whose boot MAC it is.
pub fn named(timelines: Vec<Timeline>, hosts: &[HostRow]) -> Vec<NamedTimeline> {
    let by_mac: BTreeMap<MacAddr, String> = hosts
        .iter()
        .filter_map(|h| {
            let mac = h.boot_mac.as_deref()?.parse().ok()?;
            Some((mac, format!("{}/{}", h.namespace, h.name)))
        })
        .collect();
    timelines
        .into_iter()
        .map(|timeline| NamedTimeline {
            host: match timeline.client {
                Client::Mac(mac) => by_mac.get(&mac).cloned(),
                Client::Address(_) => None,
            },
            timeline,
        })
        .collect()
}

/// An enum's JSON name (`available`, `OK`, `registration error`).
fn to_text<T: Serialize>(value: &T) -> String {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::String(s)) => s,
        _ => String::new(),
    }
}
