//! The boot activity page, `/activity` on the health and metrics listener: hosts by
//! state, each host's state, error and last operations, each client's recent boot
//! timeline (DHCP, TFTP, HTTP), the lease table and whether Ironic answers. Read-only,
//! reloaded by the browser, and bounded: it shows what the boot log keeps
//! (`netboot::boot_log`). `/activity.json` is the same as JSON.
//!
//! The listener usually listens on every address, the provisioning network's too;
//! requests that reach it through the provisioning IP are refused unless
//! `BMO_ACTIVITY_ON_PROVISIONING_NETWORK` allows them.

pub mod metrics;
pub mod page;
pub mod snapshot;

use std::net::IpAddr;
use std::sync::{Arc, OnceLock};

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use clap::Args;
use kube::runtime::reflector::Store;
use tokio::sync::watch;

use crate::api::BareMetalHost;
use crate::ironic::Reachability;
use crate::netboot::address::Choice;
use crate::netboot::boot_log::{BootLog, Totals};
use crate::netboot::http_server::Local;
use crate::netboot::leases::{Lease, LeaseTable};
use snapshot::Snapshot;

/// The page's settings.
#[derive(Debug, Clone, Args)]
pub struct ActivitySettings {
    /// Serve `/activity` and `/activity.json` on the health listener.
    #[arg(long = "activity-page", env = "BMO_ACTIVITY_PAGE", default_value_t = true, action = clap::ArgAction::Set)]
    pub page: bool,

    /// Also answer requests that reach the listener through the provisioning IP,
    /// that is from the machines being provisioned.
    #[arg(long, env = "BMO_ACTIVITY_ON_PROVISIONING_NETWORK", default_value_t = false, action = clap::ArgAction::Set)]
    pub activity_on_provisioning_network: bool,
}

/// What the network boot services share with the page.
struct Netboot {
    leases: LeaseTable,
    boot_log: BootLog,
    address: watch::Receiver<Choice>,
}

/// The page's sources, filled in as `bmo run` starts its parts. Clones share them.
#[derive(Clone, Default)]
pub struct Activity {
    hosts: Arc<OnceLock<Store<BareMetalHost>>>,
    netboot: Arc<OnceLock<Netboot>>,
    ironic: Arc<OnceLock<Reachability>>,
    on_provisioning_network: bool,
    /// Whether network boot services will start (and so a provisioning IP be known).
    netboot_expected: bool,
}

impl Activity {
    /// `netboot_expected`: whether `bmo run` starts network boot services, whose
    /// provisioning IP the page must know before it answers.
    pub fn new(settings: &ActivitySettings, netboot_expected: bool) -> Self {
        Self {
            on_provisioning_network: settings.activity_on_provisioning_network,
            netboot_expected,
            ..Self::default()
        }
    }

    /// The watched hosts (the controllers' shared cache).
    pub fn set_hosts(&self, hosts: Store<BareMetalHost>) {
        let _ = self.hosts.set(hosts);
    }

    /// The lease table, the boot log and the provisioning address.
    pub fn set_netboot(&self, netboot: &crate::netboot::Netboot) {
        let _ = self.netboot.set(Netboot {
            leases: netboot.leases.clone(),
            boot_log: netboot.boot_log.clone(),
            address: netboot.address.clone(),
        });
    }

    pub fn set_ironic(&self, ironic: Reachability) {
        let _ = self.ironic.set(ironic);
    }

    /// `/activity` and `/activity.json`, to merge into the health listener's routes.
    pub fn routes<S: Clone + Send + Sync + 'static>(&self) -> Router<S> {
        Router::new()
            .route("/activity", get(html))
            .route("/activity.json", get(json))
            .with_state(self.clone())
    }

    /// What the page shows now.
    pub fn snapshot(&self) -> Snapshot {
        let mut missing = Vec::new();
        let hosts: Vec<BareMetalHost> = match self.hosts.get() {
            Some(store) => store.state().iter().map(|h| (**h).clone()).collect(),
            None => {
                missing.push("hosts: the controllers have not started yet");
                Vec::new()
            }
        };
        let (rows, states) = snapshot::hosts(&hosts);
        let (timelines, leases) = match self.netboot.get() {
            Some(n) => (n.boot_log.timelines(), n.leases.list()),
            None => {
                missing.push("boot timelines and leases: no network boot service runs");
                (Vec::new(), Vec::new())
            }
        };
        Snapshot {
            at_unix: crate::netboot::leases::now_unix(),
            ironic: self.ironic.get().and_then(Reachability::last),
            states,
            timelines: snapshot::named(timelines, &rows),
            hosts: rows,
            leases,
            missing,
        }
    }

    /// The hosts' rows, for `/metrics`; `None` before the controllers start.
    pub fn host_rows(&self) -> Option<Vec<snapshot::HostRow>> {
        let store = self.hosts.get()?;
        Some(
            store
                .state()
                .iter()
                .map(|h| snapshot::HostRow::of(h))
                .collect(),
        )
    }

    /// The leases and the boot log's totals, for `/metrics`; `None` without netboot.
    pub fn netboot_counts(&self) -> Option<(Vec<Lease>, Totals)> {
        let n = self.netboot.get()?;
        Some((n.leases.list(), n.boot_log.totals()))
    }

    /// The last Ironic probe; `None` before the first.
    pub fn ironic(&self) -> Option<crate::ironic::Probe> {
        self.ironic.get().and_then(Reachability::last)
    }

    /// Whether `request` may be answered: not when it came in through the
    /// provisioning IP (unless allowed), nor while that IP is not known yet.
    fn admission(&self, request: &Request) -> Option<(StatusCode, &'static str)> {
        if self.on_provisioning_network {
            return None;
        }
        let Some(netboot) = self.netboot.get() else {
            return self
                .netboot_expected
                .then_some((StatusCode::SERVICE_UNAVAILABLE, STARTING));
        };
        let local = request
            .extensions()
            .get::<Local>()
            .map(|l| l.0.ip().to_canonical());
        let provisioning = canonical(netboot.address.borrow().ip);
        (local == Some(provisioning)).then_some((StatusCode::FORBIDDEN, REFUSED))
    }
}

fn canonical(ip: IpAddr) -> IpAddr {
    ip.to_canonical()
}

const STARTING: &str = "the boot activity page answers once the provisioning IP is known\n";

const REFUSED: &str = "the boot activity page is not served on the provisioning network \
                       (BMO_ACTIVITY_ON_PROVISIONING_NETWORK)\n";

async fn html(State(activity): State<Activity>, request: Request) -> Response {
    if let Some(refusal) = activity.admission(&request) {
        return refusal.into_response();
    }
    let body = page::render(&activity.snapshot());
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        body,
    )
        .into_response()
}

async fn json(State(activity): State<Activity>, request: Request) -> Response {
    if let Some(refusal) = activity.admission(&request) {
        return refusal.into_response();
    }
    axum::Json(activity.snapshot()).into_response()
}

#[cfg(test)]
mod tests;
