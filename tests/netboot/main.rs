//! The network boot services (DHCP, TFTP, HTTP, address detection) against real clients
//! in network namespaces the tests make, and their seams with the controller.
//!
//! One test binary per area (docs/testing.md, "Test layout"): each module is one former test file,
//! so a test's path names where it lives (`netboot_address::...`).

// Tests may panic on what they set up themselves.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../support/mod.rs"]
mod support;

mod netboot_address;
mod netboot_descriptors;
mod netboot_dhcp;
mod netboot_dhcp6;
mod netboot_dhcp6_abuse;
mod netboot_dhcp_abuse;
mod netboot_host;
mod netboot_http;
mod netboot_parsers;
mod netboot_qemu;
mod netboot_relay;
mod netboot_run;
mod netboot_tftp;
mod netboot_tftp_abuse;
