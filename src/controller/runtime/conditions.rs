//! Conditions set one by one, as most kinds keep them.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

/// Sets condition `type_` in `conditions` (observed at `generation`), keeping its
/// transition time while its status does not change; shared by the kinds whose
/// conditions are set one by one (HostClaim, PreprovisioningImage).
pub fn set_condition(
    conditions: &mut Vec<Condition>,
    generation: Option<i64>,
    type_: &str,
    ok: bool,
    reason: &str,
    message: &str,
    now: &Time,
) {
    let wanted = if ok { "True" } else { "False" };
    match conditions.iter_mut().find(|c| c.type_ == type_) {
        Some(c) => {
            if c.status != wanted {
                c.last_transition_time = now.clone();
            }
            c.status = wanted.into();
            c.reason = reason.into();
            c.message = message.into();
            c.observed_generation = generation;
        }
        None => conditions.push(Condition {
            type_: type_.into(),
            status: wanted.into(),
            reason: reason.into(),
            message: message.into(),
            observed_generation: generation,
            last_transition_time: now.clone(),
        }),
    }
}

/// A status whose conditions are set one by one.
pub trait HasConditions {
    fn conditions_mut(&mut self) -> &mut Vec<Condition>;
}

/// [`set_condition`] in `object`'s `status`, observed at the object's generation.
pub fn set_in<S: HasConditions, K: kube::Resource>(
    status: &mut S,
    object: &K,
    type_: &str,
    ok: bool,
    reason: &str,
    message: &str,
    now: &Time,
) {
    let generation = object.meta().generation;
    set_condition(
        status.conditions_mut(),
        generation,
        type_,
        ok,
        reason,
        message,
        now,
    );
}

/// What of a kind's conditions wakes the objects that read them: each condition's type,
/// status and observed generation (not its time or message).
pub fn conditions_fingerprint<'a>(
    conditions: impl IntoIterator<Item = &'a Condition>,
) -> Option<u64> {
    let seen: Vec<_> = conditions
        .into_iter()
        .map(|c| (&c.type_, &c.status, c.observed_generation))
        .collect();
    super::controller::fingerprint(seen)
}
