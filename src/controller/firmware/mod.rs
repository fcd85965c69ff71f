//! The firmware controllers. HostFirmwareSettings: each BareMetalHost with an Ironic node gets a
//! HostFirmwareSettings of the same name (owned by the host) whose status holds the
//! BIOS settings Ironic read from the BMC, and a FirmwareSchema (named by a hash of the
//! settings' schema, shared by hosts of the same model) describing them. `spec.settings`
//! is checked against the schema (conditions `Valid` and `ChangeDetected`, an event per
//! refused setting). Objects upstream's operator left are adopted, never duplicated.
//! HostFirmwareComponents: see [`components`]; both run on the same watch of hosts,
//! as does [`policy`], which makes each host an owner of its HostUpdatePolicy.
//!
//! The same shape as the host controller: [`state_machine`] decides (pure), the
//! provisioner reads ([`crate::provisioner::FirmwareReader`]), the runtime's store and
//! [`store`] write, and [`settings::reconcile`] only loops over them; what the three
//! share is in [`context`].

pub mod components;
pub mod context;
pub mod policy;
mod run;
pub mod settings;
pub mod state_machine;
pub mod store;

pub use context::{FirmwareContext, FirmwareError, PROVISIONER_RETRY};
pub use run::{run, same_name};
pub use settings::reconcile;
pub use store::FirmwareStore;
