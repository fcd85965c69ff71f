//! The `bmo` command itself: `bmo run` against the stack, `bmo bmc`, and the test stack
//! (tests/env/stack) that the other crates rely on.
//!
//! One test binary per area (docs/testing.md, "Test layout"): each module is one former test file,
//! so a test's path names where it lives (`bmc_cli::...`).

// Tests may panic on what they set up themselves.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../support/mod.rs"]
mod support;

mod bmc_cli;
mod run;
mod smoke;
mod stack;
