//! The real-machine test, a binary of its own because it runs alone: only one VM test
//! fits on a machine (docs/try-on-a-vm.md). `vm_e2e` is the test, `lab` its network and
//! daemons.

// Tests may panic on what they set up themselves.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../support/mod.rs"]
mod support;

mod lab;
mod vm_e2e;
mod vm_servicing;
