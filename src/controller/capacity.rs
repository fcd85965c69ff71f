//! `PROVISIONING_LIMIT`: how many hosts may inspect, provision or deprovision at once.

use std::collections::HashSet;
use std::sync::{Mutex, PoisonError};

use crate::api::ProvisioningState as State;

/// The hosts holding a provisioning slot, by `namespace/name`.
#[derive(Debug, Default)]
pub struct Slots {
    busy: Mutex<HashSet<String>>,
}

/// States that hold a slot while the host is in them.
fn consumes(state: State) -> bool {
    matches!(
        state,
        State::Inspecting | State::Provisioning | State::Deprovisioning
    )
}

impl Slots {
    /// Whether `host` (in `state`) may start or keep a slot-consuming operation while
    /// at most `limit` hosts hold one.
    pub fn has_capacity(&self, host: &str, state: State, limit: usize) -> bool {
        let mut busy = self.busy.lock().unwrap_or_else(PoisonError::into_inner);
        if !consumes(state) {
            busy.remove(host);
        }
        busy.contains(host) || busy.len() < limit
    }

    /// Records that `host` is now in `state`: takes or frees its slot.
    pub fn claim(&self, host: &str, state: State) {
        let mut busy = self.busy.lock().unwrap_or_else(PoisonError::into_inner);
        if consumes(state) {
            busy.insert(host.to_owned());
        } else {
            busy.remove(host);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slot_is_kept_by_its_host_and_freed_when_it_moves_on() {
        let slots = Slots::default();
        assert!(slots.has_capacity("a", State::Inspecting, 1));
        slots.claim("a", State::Inspecting);
        assert!(!slots.has_capacity("b", State::Available, 1));
        assert!(
            slots.has_capacity("a", State::Inspecting, 1),
            "a keeps its slot"
        );
        slots.claim("a", State::Available);
        assert!(slots.has_capacity("b", State::Available, 1));
    }
}
