//! Why a reconcile of a host could not finish.

use super::store::StoreError;
use crate::api::BareMetalHost;
use crate::provisioner::ProvisionerError;

/// Why a reconcile could not finish; retried with backoff by the controller.
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    #[error("host {host}: {source}")]
    Store {
        host: String,
        #[source]
        source: StoreError,
    },
    #[error(transparent)]
    Provisioner(#[from] ProvisionerError),
}

impl ReconcileError {
    /// A write lost a race with another writer: the watch brings the newer object.
    pub fn is_conflict(&self) -> bool {
        matches!(
            self,
            ReconcileError::Store {
                source: StoreError::Conflict,
                ..
            }
        )
    }
}

/// Wraps a store error with the host it concerns.
pub(super) fn store_err(host: &BareMetalHost) -> impl FnOnce(StoreError) -> ReconcileError + '_ {
    move |source| ReconcileError::Store {
        host: host.namespaced_name(),
        source,
    }
}
