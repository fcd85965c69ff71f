//! The page as HTML: plain tables, no script, refreshed by the browser every few
//! seconds. Every value is escaped.

use std::fmt::Write;

use super::snapshot::{HostRow, NamedTimeline, Snapshot};
use crate::netboot::boot_log::{BootEvent, BootStep, EVENTS_PER_CLIENT};
use crate::netboot::leases::Lease;

/// Seconds between the browser's reloads of the page.
pub const REFRESH_SECS: u32 = 5;

const STYLE: &str = "body{font-family:sans-serif;margin:1.5em;color:#222}\
table{border-collapse:collapse;margin-bottom:1.5em}\
th,td{border:1px solid #ccc;padding:.25em .6em;text-align:left;vertical-align:top}\
th{background:#f0f0f0}.error{color:#a00}.ok{color:#070}.muted{color:#777}\
h2{margin-top:1.5em}code{font-size:.95em}";

/// The whole page.
pub fn render(snapshot: &Snapshot) -> String {
    let mut html = String::with_capacity(16 * 1024);
    let _ = write!(
        html,
        "<!DOCTYPE html><html><head><meta charset=\"utf-8\">\
         <meta http-equiv=\"refresh\" content=\"{REFRESH_SECS}\">\
         <title>bmo boot activity</title><style>{STYLE}</style></head><body>\
         <h1>bmo boot activity</h1><p class=\"muted\">{} · refreshed every {REFRESH_SECS} s · \
         <a href=\"activity.json\">JSON</a></p>",
        escape(&crate::version::BUILD.to_string()),
    );
    ironic(&mut html, snapshot);
    for missing in &snapshot.missing {
        let _ = write!(html, "<p class=\"muted\">{}</p>", escape(missing));
    }
    states(&mut html, snapshot);
    hosts(&mut html, &snapshot.hosts);
    timelines(&mut html, &snapshot.timelines);
    leases(&mut html, &snapshot.leases);
    html.push_str("</body></html>");
    html
}

fn ironic(html: &mut String, snapshot: &Snapshot) {
    html.push_str("<h2>Ironic</h2><p id=\"ironic\">");
    match &snapshot.ironic {
        None => html.push_str("<span class=\"muted\">not checked yet</span>"),
        Some(p) if p.reachable => {
            let _ = write!(
                html,
                "<span class=\"ok\">reachable</span> ({} ms)",
                p.millis
            );
        }
        Some(p) => {
            let why = p.error.as_deref().unwrap_or("no answer");
            let _ = write!(
                html,
                "<span class=\"error\">unreachable</span>: {}",
                escape(why)
            );
        }
    }
    html.push_str("</p>");
}

fn states(html: &mut String, snapshot: &Snapshot) {
    html.push_str(
        "<h2>Hosts by state</h2><table id=\"states\"><tr><th>state</th><th>hosts</th></tr>",
    );
    for (state, count) in &snapshot.states {
        let _ = write!(html, "<tr><td>{}</td><td>{count}</td></tr>", shown(state));
    }
    html.push_str("</table>");
}

fn hosts(html: &mut String, hosts: &[HostRow]) {
    html.push_str(
        "<h2>Hosts</h2><table id=\"hosts\"><tr><th>host</th><th>state</th><th>status</th>\
         <th>power</th><th>BMC</th><th>boot MAC</th><th>error</th><th>operations</th></tr>",
    );
    for h in hosts {
        let error = match &h.error_type {
            Some(kind) => format!(
                "<span class=\"error\">{}</span>: {}",
                escape(kind),
                escape(&h.error_message)
            ),
            None => String::new(),
        };
        let operations: Vec<String> = h
            .operations
            .iter()
            .map(|o| {
                let end = o.end.as_deref().unwrap_or("running");
                let start = o.start.as_deref().unwrap_or_default();
                format!("{} {} → {}", o.name, escape(start), escape(end))
            })
            .collect();
        let _ = write!(
            html,
            "<tr data-host=\"{}/{}\"><td>{}/{}</td><td class=\"state\">{}</td><td>{}</td>\
             <td>{}</td><td><code>{}</code></td><td><code>{}</code></td><td>{error}</td><td>{}</td></tr>",
            escape(&h.namespace),
            escape(&h.name),
            escape(&h.namespace),
            escape(&h.name),
            shown(&h.state),
            escape(&h.operational_status),
            if h.powered_on { "on" } else { "off" },
            escape(&h.bmc),
            escape(h.boot_mac.as_deref().unwrap_or_default()),
            operations.join("<br>"),
        );
    }
    html.push_str("</table>");
}

fn timelines(html: &mut String, timelines: &[NamedTimeline]) {
    let _ = write!(
        html,
        "<h2>Boot timelines</h2><p class=\"muted\">The last {EVENTS_PER_CLIENT} events of each \
         client, newest client first; a client is named by its MAC once DHCP saw it.</p>"
    );
    for t in timelines {
        let client = t.timeline.client.to_string();
        let host = t.host.as_deref().map(|h| format!(" ({})", escape(h)));
        let _ = write!(
            html,
            "<h3>{}{}</h3><table class=\"timeline\" data-client=\"{}\">\
             <tr><th>time (UTC)</th><th>what</th><th>detail</th></tr>",
            escape(&client),
            host.unwrap_or_default(),
            escape(&client),
        );
        for event in &t.timeline.events {
            event_row(html, event);
        }
        html.push_str("</table>");
    }
}

fn event_row(html: &mut String, event: &BootEvent) {
    let at = i64::try_from(event.at_unix_ms)
        .ok()
        .and_then(|ms| k8s_openapi::jiff::Timestamp::from_millisecond(ms).ok())
        .map(|t| t.to_string())
        .unwrap_or_default();
    let (what, detail) = match &event.step {
        BootStep::Dhcp {
            request,
            reply,
            address,
            boot_file,
        } => {
            let mut detail = match reply {
                Some(reply) => format!("{request} → {reply}"),
                None => format!("{request} → not answered"),
            };
            if let Some(ip) = address {
                let _ = write!(detail, ", address {ip}");
            }
            if let Some(file) = boot_file {
                let _ = write!(detail, ", boot file {file}");
            }
            ("DHCP", detail)
        }
        BootStep::Tftp {
            file,
            bytes,
            millis,
            outcome,
        } => (
            "TFTP",
            format!("{file}: {outcome}, {bytes} bytes in {millis} ms"),
        ),
        BootStep::Http {
            path,
            status,
            bytes,
            millis,
            complete,
        } => {
            let ended = if *complete { "" } else { ", cut short" };
            (
                "HTTP",
                format!("GET {path}: {status}, {bytes} bytes in {millis} ms{ended}"),
            )
        }
    };
    let _ = write!(
        html,
        "<tr><td>{}</td><td>{what}</td><td>{}</td></tr>",
        escape(&at),
        escape(&detail)
    );
}

fn leases(html: &mut String, leases: &[Lease]) {
    html.push_str(
        "<h2>Leases</h2><table id=\"leases\"><tr><th>MAC</th><th>address</th><th>state</th>\
         <th>hostname</th><th>arch</th><th>vendor class</th><th>iPXE</th></tr>",
    );
    for l in leases {
        let ip = (l.ip.map(|ip| ip.to_string()))
            .or(l.ip6.map(|ip| ip.to_string()))
            .unwrap_or_default();
        let state = serde_json::to_value(l.state)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default();
        let _ = write!(
            html,
            "<tr><td><code>{}</code></td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            l.mac,
            escape(&ip),
            escape(&state),
            escape(l.hostname.as_deref().unwrap_or_default()),
            l.arch.map(|a| a.to_string()).unwrap_or_default(),
            escape(l.vendor_class.as_deref().unwrap_or_default()),
            if l.ipxe { "yes" } else { "" },
        );
    }
    html.push_str("</table>");
}

/// A state as shown: the empty (new) state reads `(none)`.
fn shown(state: &str) -> String {
    if state.is_empty() {
        "(none)".to_owned()
    } else {
        escape(state)
    }
}

/// `text` safe inside HTML text and attribute values.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}
