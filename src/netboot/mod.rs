//! Provisioning network services: bmo's own address, DHCP with hostname capture,
//! TFTP and HTTP boot, and the lease table shared with the host controller.
//!
//! See `docs/netboot.md`.

pub mod address;
pub mod boot_log;
pub mod config;
pub mod cpio;
pub mod deploy_images;
pub mod descriptors;
pub mod dhcp;
pub mod files;
pub mod host_ramdisks;
pub mod hostname;
pub mod hosts;
pub mod http;
pub mod http_activity;
pub mod http_server;
pub mod ipxe;
pub mod leases;
pub mod listen;
pub mod mac;
pub mod ra;
pub mod services;
pub mod slots;
pub mod tftp;

pub use deploy_images::DeployImages;
pub use services::{Netboot, NetbootError, start};
