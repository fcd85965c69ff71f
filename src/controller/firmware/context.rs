//! What the firmware controllers (settings, components, policy) share: their
//! context and their error.

pub use crate::controller::runtime::steps::PROVISIONER_RETRY;
use crate::controller::runtime::store::{KubeClient, ObjectError};

/// What the firmware controllers share.
pub struct FirmwareContext<P, S = KubeClient> {
    pub provisioner: P,
    pub store: S,
    /// `WATCH_NAMESPACE`: only hosts in this namespace; all when `None`.
    pub namespace: Option<String>,
}

/// Why a reconcile could not finish; retried after [`PROVISIONER_RETRY`].
pub type FirmwareError = ObjectError;
