//! bmo: bare-metal host provisioning for Kubernetes.
//!
//! The library holds everything the `bmo` binary does; `main.rs` only parses the
//! command line and calls in here. See `docs/architecture.md` for the map.

pub mod activity;
pub mod api;
pub mod bmc;
pub mod config;
pub mod controller;
pub mod credentials;
pub mod ironic;
pub mod leader;
pub mod make_host;
pub mod malloc;
pub mod metrics;
pub mod netboot;
pub mod notify;
pub mod provisioner;
pub mod run;
pub mod secure_metrics;
pub mod telemetry;
pub mod tls;
pub mod version;
