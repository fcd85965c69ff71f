//! The host controller's settings.

use std::time::Duration;

use crate::provisioner::DeployRamdisk;

/// Settings of the controller, from the one [`crate::config::Config`].
#[derive(Debug, Clone)]
pub struct ControllerSettings {
    /// `WATCH_NAMESPACE`: only hosts in this namespace; all when `None`.
    pub namespace: Option<String>,
    /// `BMO_CONCURRENCY`: hosts reconciled at once.
    pub concurrency: u16,
    /// `PROVISIONING_LIMIT`: hosts inspecting, provisioning or deprovisioning at once.
    pub provisioning_limit: usize,
    /// Cap of the error backoff.
    pub max_backoff: Duration,
    /// `BMO_STEADY_POLL`: how often hosts at rest are checked for changes made
    /// behind bmo's back (one list of nodes for all of them).
    pub steady_poll: Duration,
    /// `BMO_START_SETTLE`: how long after start no change is asked of the
    /// provisioner (requests of a killed predecessor land first).
    pub start_settle: Duration,
    pub deploy_ramdisk: DeployRamdisk,
}
