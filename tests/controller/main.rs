//! The host controller and its Ironic provisioner end to end against the stack's real
//! kube-apiserver and Ironic: lifecycle, restarts, outages, backoff, leader election,
//! migration from upstream, and the deploy image URLs following the provisioning IP.
//!
//! One test binary per area (docs/testing.md, "Test layout"): each module is one former test file,
//! so a test's path names where it lives (`controller_apiserver_outage::...`).

// Tests may panic on what they set up themselves.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../support/mod.rs"]
mod support;

mod controller_activity_page;
mod controller_alerts;
mod controller_apiserver_outage;
mod controller_backoff;
mod controller_capi;
mod controller_capm3;
mod controller_claims;
mod controller_config_drive;
mod controller_dataimage;
mod controller_deploy_images;
mod controller_detach_network_data;
mod controller_drift;
mod controller_event_subscriptions;
mod controller_firmware;
mod controller_firmware_components;
mod controller_firmware_map;
mod controller_ha_ironic;
mod controller_ironic_outage;
mod controller_ironic_restart;
mod controller_leader;
mod controller_lifecycle;
mod controller_link_local;
mod controller_metrics_secured;
mod controller_migration;
mod controller_pivot;
mod controller_preprov_image;
mod controller_restart;
mod controller_stack_isolation;
mod controller_switches;
mod controller_tenants;
mod controller_upstream_migration;
mod controller_upstream_scenarios;
mod ironic_provisioner;
