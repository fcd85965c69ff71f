//! The IPA kernel and ramdisk bmo serves on its HTTP server, and their URLs, which
//! follow the provisioning IP.
//!
//! Below both the HTTP server (which serves the files) and the per-host ramdisks
//! (which start with the IPA ramdisk), so neither depends on the other for them.

use tokio::sync::watch;

use super::address::Choice;

/// Default names of the IPA images under `/images/` (upstream ironic-image's).
pub const DEFAULT_KERNEL: &str = "ironic-python-agent.kernel";
pub const DEFAULT_RAMDISK: &str = "ironic-python-agent.initramfs";

/// The IPA kernel and ramdisk URLs on bmo's own HTTP server. They follow the
/// provisioning IP: each call gives the URL on the address in use now.
#[derive(Debug, Clone)]
pub struct DeployImages {
    address: watch::Receiver<Choice>,
    port: u16,
}

impl DeployImages {
    /// URLs on the address `address` holds, at HTTP port `port`.
    pub fn new(address: watch::Receiver<Choice>, port: u16) -> Self {
        Self { address, port }
    }

    pub fn kernel_url(&self) -> String {
        self.url(DEFAULT_KERNEL)
    }

    pub fn ramdisk_url(&self) -> String {
        self.url(DEFAULT_RAMDISK)
    }

    fn url(&self, file: &str) -> String {
        self.http_url(&format!("/images/{file}"))
    }

    /// The URL of `path` (starting with `/`) on bmo's HTTP server, on the
    /// provisioning IP in use now.
    pub fn http_url(&self, path: &str) -> String {
        let base = self.address.borrow().http_base(self.port);
        format!("{base}{path}")
    }

    /// Resolves when the provisioning IP changed since the last call; `false` once
    /// the services stopped and it can change no more.
    pub async fn changed(&mut self) -> bool {
        self.address.changed().await.is_ok()
    }
}
