//! `PROVISIONING_LIMIT`: how many hosts may inspect, provision or deprovision at once,
//! and in which order waiting hosts get a slot.

use std::collections::{HashSet, VecDeque};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::broadcast;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;

use crate::api::BareMetalHost;
use crate::api::ProvisioningState as State;

/// A waiting host asks again at least this often (its `Delayed` requeue is 60 s, and
/// a freed slot wakes it sooner); one that stopped asking (deleted, no longer needs a
/// slot) leaves the queue after this long.
const FORGET_WAITING_AFTER: Duration = Duration::from_secs(150);

/// The hosts holding a provisioning slot and those waiting for one, by
/// `namespace/name`. Slots go to waiting hosts in the order they started waiting.
#[derive(Debug)]
pub struct Slots {
    limit: usize,
    inner: Mutex<Inner>,
    /// The waiting hosts a freed slot is for: the controller wakes them at once.
    freed: broadcast::Sender<String>,
}

#[derive(Debug, Default)]
struct Inner {
    busy: HashSet<String>,
    /// Waiting hosts, first come first; each with when it last asked.
    waiting: VecDeque<(String, Instant)>,
}

/// States that hold a slot while the host is in them.
fn consumes(state: State) -> bool {
    matches!(
        state,
        State::Inspecting | State::Provisioning | State::Deprovisioning
    )
}

/// Whether `host` is in a state that holds a slot: its reconciles go first
/// ([`super::turns::Turns`]), since each step it finishes sooner frees its slot
/// sooner for the hosts waiting.
pub fn holds_slot(host: &crate::api::BareMetalHost) -> bool {
    host.status
        .as_ref()
        .is_some_and(|s| consumes(s.provisioning.state))
}

impl Inner {
    fn free(&self, limit: usize) -> usize {
        limit.saturating_sub(self.busy.len())
    }

    fn release(&mut self, host: &str, limit: usize, freed: &broadcast::Sender<String>) {
        if self.busy.remove(host) {
            for (waiting, _) in self.waiting.iter().take(self.free(limit)) {
                // Nobody listening (tests, shutdown): the host asks again on its own.
                let _ = freed.send(waiting.clone());
            }
        }
    }
}

impl Slots {
    /// At most `limit` hosts hold a slot at once.
    pub fn new(limit: usize) -> Self {
        Self {
            limit,
            inner: Mutex::default(),
            freed: broadcast::channel(1024).0,
        }
    }

    /// Whether `host` (in `state`) may start or keep a slot-consuming operation: it
    /// holds a slot, or a slot is free and no host that waits longer is left
    /// without one.
    pub fn has_capacity(&self, host: &str, state: State) -> bool {
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        inner
            .waiting
            .retain(|(_, asked)| now.duration_since(*asked) < FORGET_WAITING_AFTER);
        if !consumes(state) {
            inner.release(host, self.limit, &self.freed);
        }
        if inner.busy.contains(host) {
            return true;
        }
        let ahead = inner
            .waiting
            .iter()
            .position(|(h, _)| h == host)
            .unwrap_or(inner.waiting.len());
        ahead < inner.free(self.limit)
    }

    /// Whether `host` waits for a slot and one is free for it: it is next in line.
    pub fn offered(&self, host: &str) -> bool {
        let inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        inner
            .waiting
            .iter()
            .take(inner.free(self.limit))
            .any(|(waiting, _)| waiting == host)
    }

    /// Records that `host` was told to wait for a slot: it joins the end of the
    /// queue, or keeps its place there.
    pub fn wait(&self, host: &str) {
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        match inner.waiting.iter_mut().find(|(h, _)| h == host) {
            Some((_, asked)) => *asked = now,
            None => inner.waiting.push_back((host.to_owned(), now)),
        }
    }

    /// Records that `host` is now in `state`: takes or frees its slot.
    pub fn claim(&self, host: &str, state: State) {
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        if consumes(state) {
            inner.waiting.retain(|(h, _)| h != host);
            inner.busy.insert(host.to_owned());
        } else {
            inner.release(host, self.limit, &self.freed);
        }
    }

    /// The waiting hosts (`namespace/name`) a slot was freed for, as slots free up.
    pub fn freed(&self) -> broadcast::Receiver<String> {
        self.freed.subscribe()
    }
}

/// Where a host's reconcile stands in the host controller's line (see
/// [`crate::controller::runtime::turns`] for why).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum HostRank {
    /// Holding a provisioning slot, or next in line for one that is free: a slot
    /// stays held for the host it is offered to until that host takes it.
    SlotHolder,
    /// Never reconciled: no state yet.
    New,
    /// Any other host, by creation time, then namespace and name.
    ByAge(Option<Time>, String, String),
}

impl HostRank {
    pub fn of(host: &BareMetalHost, slots: &Slots) -> Self {
        if holds_slot(host) || slots.offered(&host.namespaced_name()) {
            return Self::SlotHolder;
        }
        if host.provisioning_state() == crate::api::ProvisioningState::None {
            return Self::New;
        }
        Self::ByAge(
            host.metadata.creation_timestamp.clone(),
            host.namespace().unwrap_or_default(),
            host.name_any(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slot_is_kept_by_its_host_and_freed_when_it_moves_on() {
        let slots = Slots::new(1);
        assert!(slots.has_capacity("a", State::Inspecting));
        slots.claim("a", State::Inspecting);
        assert!(!slots.has_capacity("b", State::Available));
        assert!(
            slots.has_capacity("a", State::Inspecting),
            "a keeps its slot"
        );
        slots.claim("a", State::Available);
        assert!(slots.has_capacity("b", State::Available));
    }

    #[test]
    fn waiting_hosts_get_slots_in_the_order_they_started_waiting() {
        let slots = Slots::new(2);
        let mut freed = slots.freed();
        slots.claim("a", State::Provisioning);
        slots.claim("b", State::Provisioning);
        for host in ["c", "d", "e"] {
            assert!(!slots.has_capacity(host, State::Available));
            slots.wait(host);
        }
        slots.claim("a", State::Provisioned);
        assert_eq!(freed.try_recv().ok().as_deref(), Some("c"));
        assert!(
            !slots.has_capacity("e", State::Available),
            "e waits behind c"
        );
        assert!(
            !slots.has_capacity("new", State::Available),
            "a newcomer waits behind the queue"
        );
        assert!(slots.has_capacity("c", State::Available));
        slots.claim("c", State::Provisioning);
        slots.claim("b", State::Provisioned);
        assert_eq!(freed.try_recv().ok().as_deref(), Some("d"));
        assert!(!slots.has_capacity("e", State::Available));
        assert!(slots.has_capacity("d", State::Available));
    }

    #[test]
    fn slot_holders_and_hosts_offered_a_slot_go_first_then_new_hosts_then_the_oldest() {
        use crate::api::BareMetalHostStatus;
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
        use k8s_openapi::jiff::Timestamp;
        use kube::ResourceExt;
        let in_state = |name: &str, created: i64, state: State| {
            let mut host = BareMetalHost::new(name, Default::default());
            host.metadata.namespace = Some("ns".into());
            host.metadata.creation_timestamp = Timestamp::from_second(created).ok().map(Time);
            let mut status = BareMetalHostStatus::default();
            status.provisioning.state = state;
            host.status = Some(status);
            host
        };
        let mut line = [
            in_state("young", 20, State::Registering),
            in_state("old-b", 10, State::Available),
            in_state("new", 30, State::None),
            in_state("old-a", 10, State::Preparing),
            in_state("holder", 40, State::Provisioning),
        ];
        let slots = Slots::new(2);
        slots.claim("ns/holder", State::Provisioning);
        slots.wait("ns/young");
        line.sort_by_key(|host| HostRank::of(host, &slots));
        let order: Vec<_> = line.iter().map(|h| h.name_any()).collect();
        assert_eq!(
            order,
            ["young", "holder", "new", "old-a", "old-b"],
            "a free slot waits for young, which ranks with the holder (then first come)"
        );
        slots.claim("ns/other", State::Inspecting);
        line.sort_by_key(|host| HostRank::of(host, &slots));
        let order: Vec<_> = line.iter().map(|h| h.name_any()).collect();
        assert_eq!(order, ["holder", "new", "old-a", "old-b", "young"]);
    }
}
