//! The host lifecycle as pure functions: no I/O, no clock, no randomness.
//!
//! [`next`] looks at a host and what the reconciler learned about it so far
//! ([`Facts`]) and names the one thing to do now ([`Step`]): a spec error, the
//! registration check every registered host gets, what that check leads to, and then
//! the state's own step ([`plan`]). When a step asks the provisioner, the reconciler
//! makes the call and either adds its answer to the facts and asks again (the
//! registration check, re-adoption) or hands the result to [`after`], which says how
//! the status changes ([`Update`]). The reconciler only loads, calls and saves.

mod after;
mod apply;
mod checks;
mod facts;
mod next;
mod plan;
mod queries;
pub mod servicing;
mod step;

pub use after::after;
pub use apply::apply;
pub use checks::{
    Gate, gate, moved_away, observed_power, reboot_request, release, restart_on_failure, spec_error,
};
pub use facts::{
    CredentialsCheck, Facts, PendingSettings, PendingUpdates, RebootRequest, RegistrationCheck,
    ServicingAllowed, SpecProblem,
};
pub use next::next;
pub use plan::{first_state, plan};
pub use queries::{
    delete_delayed_by_detach, hardware_profile, needs_provisioning, needs_registration,
    provisioning_cancelled, root_device_hints, with_reported_power,
};
pub use servicing::{servicing_under_way, wants_servicing_facts};
pub use step::{
    CallResult, DELETE_RETRY_LIMIT, ErrorChange, FIRMWARE_WAIT, MAX_PROVISIONING_RETRIES,
    Operation, Requeue, SLOW_POLL, STEADY_POLL, Step, Update,
};

#[cfg(test)]
mod tests;
