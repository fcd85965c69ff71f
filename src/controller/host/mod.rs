//! The host controller: a kube-runtime reconciler around the pure state machine.
//!
//! Each reconcile ([`reconcile`]) is load → decide → act → store:
//! - load ([`load`]): the host (from the watch), its BMC Secret ([`secrets`]), and
//!   what the every-reconcile registration check tells about the hardware;
//! - decide: [`state_machine`] picks one [`state_machine::Step`] and says how the
//!   status changes;
//! - act: a provisioner call ([`act`]), when the step is one;
//! - store: every Kubernetes write goes through a [`Store`] ([`save`] for the status,
//!   event and requeue).
//!
//! Nothing about the lifecycle is decided here. The files are layered: this one only
//! names its children and what the rest of bmo uses of them; [`settings`],
//! [`errors`] and [`state_machine`] use none of their siblings that use them.

pub mod act;
pub mod capacity;
pub mod conditions;
mod context;
pub mod errors;
pub mod known_hosts;
pub mod lease_details;
pub mod legacy_firmware;
mod load;
pub mod node_owners;
pub mod preprov_image;
mod reconcile;
pub mod request;
pub(crate) mod run;
pub mod save;
pub mod secrets;
pub mod settings;
pub mod state_machine;
pub mod status_annotations;
pub mod steady;
pub mod store;
#[cfg(test)]
mod tests;

pub use crate::controller::runtime::Next;
pub use context::Context;
pub use errors::ReconcileError;
use reconcile::reconcile;
pub use reconcile::reconcile_host;
pub use run::{run, run_with};
pub use settings::ControllerSettings;
pub use state_machine::MAX_PROVISIONING_RETRIES;
pub use store::{KubeStore, SECRET_LABEL, Store, StoreError};
