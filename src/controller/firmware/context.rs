//! What the firmware controllers (settings, components, policy) share: their
//! context, their error, and how far one reconcile goes.

use std::time::Duration;

use crate::controller::runtime::store::{KubeClient, ObjectError};

/// Look again this soon after the provisioner could not answer (upstream's delay).
pub const PROVISIONER_RETRY: Duration = Duration::from_secs(30);

/// Steps one reconcile takes at most (each a read or a write); more means objects
/// keep changing under it, and it looks again shortly.
pub const MAX_STEPS: usize = 10;

/// What the firmware controllers share.
pub struct FirmwareContext<P, S = KubeClient> {
    pub provisioner: P,
    pub store: S,
    /// `WATCH_NAMESPACE`: only hosts in this namespace; all when `None`.
    pub namespace: Option<String>,
}

/// Why a reconcile could not finish; retried after [`PROVISIONER_RETRY`].
pub type FirmwareError = ObjectError;
