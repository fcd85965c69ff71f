//! What every controller runs on, and imports no controller: a kind's controller on
//! kube-runtime ([`controller`]: its own watch, a span per reconcile, the error
//! policy, the stop at shutdown), the watches shared between controllers
//! ([`shared_watch`]), the namespaces watched, the backoff of a failed watch and the
//! shutdown grace ([`watch`]), turns in line for reconciles ([`turns`]), the store
//! helpers every kind's store uses ([`store`]), conditions ([`conditions`]),
//! controller-runtime's reconcile series ([`observed`]), a reconcile in steps
//! ([`steps`]) and the seams where one controller acts for another kind
//! ([`seams`]).

pub mod conditions;
pub mod controller;
pub mod observed;
pub mod seams;
pub mod shared_watch;
pub mod steps;
pub mod store;
pub mod turns;
pub mod watch;

use std::hash::{BuildHasher, Hasher};
use std::time::Duration;

use kube::ResourceExt;
use kube::runtime::controller::Action;

use crate::api::BareMetalHost;
use crate::provisioner::{HostId, NodeRef};

/// When to look at an object again (unless a watch event comes first).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    After(Duration),
    OnChange,
}

impl From<Next> for Action {
    fn from(next: Next) -> Self {
        match next {
            Next::After(d) => Action::requeue(d),
            Next::OnChange => Action::await_change(),
        }
    }
}

/// `2^min(count, 9)` minutes less up to half of it, capped at `max`.
pub fn backoff(error_count: i64, max: Duration) -> Duration {
    let exp = u32::try_from(error_count.clamp(0, 9)).unwrap_or(9);
    let full = Duration::from_secs(60 * (1u64 << exp)).min(max);
    let random = std::hash::RandomState::new().build_hasher().finish();
    let fraction = 0.5 + (random % 500) as f64 / 1000.0;
    full.mul_f64(fraction).max(Duration::from_secs(1))
}

/// "BMC address of BareMetalHost namespace/name", as messages name a host's BMC: the
/// address without the credentials a user may have put in it (the address guard's
/// rule).
pub fn bmc_of(host: &BareMetalHost) -> String {
    let address = host.spec.bmc.as_ref().map_or("", |b| b.address.as_str());
    let address = crate::bmc::redact_userinfo(address);
    format!("BMC {address} of BareMetalHost {}", store::name_of(host))
}

/// The host's Ironic node as the provisioner names it: by the host, and by its
/// node's UUID once registered.
pub fn node_of(host: &BareMetalHost) -> NodeRef {
    NodeRef {
        id: HostId::new(host.namespace().unwrap_or_default(), host.name_any()),
        provisioning_id: host
            .status
            .as_ref()
            .map(|s| s.provisioning.id.clone())
            .filter(|id| !id.is_empty()),
    }
}
