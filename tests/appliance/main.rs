//! What ships and how users install it: the static executable, the container image, the
//! offline bundle, the manifests, RBAC, OLM bundle, systemd notify and the user docs.
//!
//! One test binary per area (docs/testing.md, "Test layout"): each module is one former test file,
//! so a test's path names where it lives (`appliance_bundle::...`).

// Tests may panic on what they set up themselves.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../support/mod.rs"]
mod support;

mod appliance_bundle;
mod appliance_docs;
mod appliance_image;
mod appliance_manifests;
mod appliance_monitoring;
mod appliance_notify;
mod appliance_olm;
mod appliance_rbac;
mod appliance_static;
