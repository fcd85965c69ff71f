//! The metal3.io API: the Rust types, the generated CRDs and admission policies, upstream's
//! schemas, and all of it against the stack's real kube-apiserver.
//!
//! One test binary per area (docs/testing.md, "Test layout"): each module is one former test file,
//! so a test's path names where it lives (`api_cluster::...`).

// Tests may panic on what they set up themselves.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../support/mod.rs"]
mod support;

mod api_cluster;
mod api_generated;
mod api_kinds_cluster;
mod api_link_local;
mod api_serde;
mod api_upstream_schema;
