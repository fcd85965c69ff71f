//! Standard conditions computed from the status, so `kubectl wait
//! --for=condition=Provisioned` works and consumers have one readiness signal.
//!
//! One condition is not computed from the status: [`PROVISIONER_REACHABLE`], present
//! (and `False`) only while the provisioner (Ironic) cannot be reached. It is set by
//! [`set_unreachable`] when a provisioner call finds no answer, kept by [`compute`]
//! until a reconcile reaches the provisioner again, and dropped then.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

use crate::api::{BareMetalHostStatus, OperationalStatus, ProvisioningState as State};

/// Condition type saying the provisioner cannot be reached; only ever `False`.
pub const PROVISIONER_REACHABLE: &str = "ProvisionerReachable";
/// Its reason.
pub const IRONIC_UNREACHABLE: &str = "IronicUnreachable";

/// A condition as `compute` builds it: type, status, reason, message.
type Wanted = (String, bool, String, String);

fn cond(type_: &str, ok: bool, reason: &str, message: String) -> Wanted {
    (type_.to_owned(), ok, reason.to_owned(), message)
}

/// The conditions for `status`, keeping each one's transition time when its status
/// did not change. `progress` is what is happening now (e.g. the clean step).
/// `provisioner_reached`: this reconcile had an answer from the provisioner, so a
/// [`PROVISIONER_REACHABLE`] condition is dropped rather than kept.
pub fn compute(
    status: &BareMetalHostStatus,
    generation: Option<i64>,
    progress: Option<&str>,
    provisioner_reached: bool,
    now: &Time,
) -> Vec<Condition> {
    let state = status.provisioning.state;
    let available = matches!(state, State::Available | State::Ready);
    let provisioned = matches!(state, State::Provisioned | State::ExternallyProvisioned);
    let (ready, progressing) = ready_and_progressing(status, progress);
    let healthy = if status.operational_status == OperationalStatus::Error {
        cond("Healthy", false, "Error", status.error_message.clone())
    } else {
        cond("Healthy", true, "Healthy", "no errors".into())
    };
    let wanted = [
        manageable(status),
        cond(
            "AvailableForProvisioning",
            available,
            if available {
                "Available"
            } else {
                "NotAvailable"
            },
            format!("host is {}", display_state(state)),
        ),
        cond(
            "Provisioned",
            provisioned,
            if provisioned {
                "Provisioned"
            } else {
                "NotProvisioned"
            },
            format!("host is {}", display_state(state)),
        ),
        ready,
        progressing,
        healthy,
    ];
    let unreachable = unreachable(status)
        .filter(|_| !provisioner_reached)
        .cloned();
    wanted
        .into_iter()
        .map(|(type_, ok, reason, message)| {
            let status_str = if ok { "True" } else { "False" }.to_owned();
            let previous = status.conditions.iter().find(|c| c.type_ == type_);
            let last_transition_time = match previous {
                Some(p) if p.status == status_str => p.last_transition_time.clone(),
                _ => now.clone(),
            };
            Condition {
                type_,
                status: status_str,
                reason,
                // Kubernetes requires a message under 32 KiB.
                message: message.chars().take(1024).collect(),
                last_transition_time,
                observed_generation: generation,
            }
        })
        .chain(unreachable)
        .collect()
}

/// The Manageable condition: whether Ironic can reach the host's BMC.
fn manageable(status: &BareMetalHostStatus) -> Wanted {
    match status.provisioning.state {
        State::None | State::Unmanaged => {
            cond("Manageable", false, "NotManaged", "no BMC details".into())
        }
        State::Registering if status.operational_status == OperationalStatus::Error => cond(
            "Manageable",
            false,
            "RegistrationFailed",
            status.error_message.clone(),
        ),
        State::Registering => cond(
            "Manageable",
            false,
            "Registering",
            "checking BMC access".into(),
        ),
        _ => cond("Manageable", true, "Manageable", "the BMC answers".into()),
    }
}

/// The Ready and Progressing conditions: by the state, unless the operational
/// status (error, servicing, detached) overrides it.
fn ready_and_progressing(status: &BareMetalHostStatus, progress: Option<&str>) -> (Wanted, Wanted) {
    let state = status.provisioning.state;
    let provisioned = matches!(state, State::Provisioned | State::ExternallyProvisioned);
    let progressing_reason = match state {
        State::Registering => Some("Registering"),
        State::Inspecting | State::MatchProfile => Some("Inspecting"),
        State::Preparing => Some("Preparing"),
        State::Provisioning => Some("Provisioning"),
        State::Deprovisioning => Some("Deprovisioning"),
        State::PoweringOffBeforeDelete => Some("PoweringOffBeforeDelete"),
        State::Deleting => Some("Deleting"),
        _ => None,
    };
    let ready = if provisioned {
        cond("Ready", true, "Provisioned", format!("host is {state}"))
    } else {
        cond(
            "Ready",
            false,
            "NotProvisioned",
            format!("host is {}", display_state(state)),
        )
    };
    let progressing = match progressing_reason {
        Some(reason) => cond(
            "Progressing",
            true,
            reason,
            progress
                .map(str::to_owned)
                .unwrap_or_else(|| format!("host is {state}")),
        ),
        None => cond(
            "Progressing",
            false,
            "NotProgressing",
            format!("host is {}", display_state(state)),
        ),
    };
    match status.operational_status {
        OperationalStatus::Error => (
            cond("Ready", false, "Error", status.error_message.clone()),
            progressing,
        ),
        OperationalStatus::Servicing => (
            cond(
                "Ready",
                false,
                "Servicing",
                "firmware changes in progress".into(),
            ),
            progressing,
        ),
        OperationalStatus::Detached => (
            cond(
                "Ready",
                false,
                "Detached",
                "detached from the provisioner".into(),
            ),
            cond(
                "Progressing",
                false,
                "Detached",
                "detached from the provisioner".into(),
            ),
        ),
        _ => (ready, progressing),
    }
}

/// The [`PROVISIONER_REACHABLE`] condition of `status`, while the provisioner cannot
/// be reached.
pub fn unreachable(status: &BareMetalHostStatus) -> Option<&Condition> {
    status
        .conditions
        .iter()
        .find(|c| c.type_ == PROVISIONER_REACHABLE)
}

/// `conditions` with [`PROVISIONER_REACHABLE`] `False` saying `message`; its transition
/// time is kept when it was already there.
pub fn set_unreachable(
    conditions: &[Condition],
    message: &str,
    generation: Option<i64>,
    now: &Time,
) -> Vec<Condition> {
    let previous = conditions.iter().find(|c| c.type_ == PROVISIONER_REACHABLE);
    let condition = Condition {
        type_: PROVISIONER_REACHABLE.to_owned(),
        status: "False".to_owned(),
        reason: IRONIC_UNREACHABLE.to_owned(),
        message: message.chars().take(1024).collect(),
        last_transition_time: previous
            .map(|p| p.last_transition_time.clone())
            .unwrap_or_else(|| now.clone()),
        observed_generation: generation,
    };
    conditions
        .iter()
        .filter(|c| c.type_ != PROVISIONER_REACHABLE)
        .cloned()
        .chain([condition])
        .collect()
}

fn display_state(state: State) -> &'static str {
    match state {
        State::None => "new",
        other => other.as_str(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> Time {
        Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH)
    }

    fn get<'a>(conds: &'a [Condition], t: &str) -> &'a Condition {
        conds
            .iter()
            .find(|c| c.type_ == t)
            .expect("condition present")
    }

    #[test]
    fn provisioned_host_is_ready_and_provisioned() {
        let mut st = BareMetalHostStatus::default();
        st.provisioning.state = State::Provisioned;
        st.operational_status = OperationalStatus::Ok;
        let c = compute(&st, Some(3), None, false, &now());
        assert_eq!(get(&c, "Provisioned").status, "True");
        assert_eq!(get(&c, "Ready").status, "True");
        assert_eq!(get(&c, "Progressing").status, "False");
        assert_eq!(get(&c, "Manageable").status, "True");
        assert_eq!(get(&c, "Ready").observed_generation, Some(3));
    }

    #[test]
    fn error_overrides_ready_and_registration_error_blocks_manageable() {
        let mut st = BareMetalHostStatus::default();
        st.provisioning.state = State::Registering;
        st.operational_status = OperationalStatus::Error;
        st.error_message = "BMC refused the credentials".into();
        let c = compute(&st, None, None, false, &now());
        assert_eq!(get(&c, "Manageable").reason, "RegistrationFailed");
        assert_eq!(get(&c, "Ready").reason, "Error");
        assert_eq!(get(&c, "Healthy").status, "False");
        assert_eq!(get(&c, "Progressing").status, "True");
    }

    #[test]
    fn transition_time_is_kept_while_status_is_unchanged() {
        let mut st = BareMetalHostStatus::default();
        st.provisioning.state = State::Available;
        let first = compute(&st, None, None, false, &now());
        st.conditions = first.clone();
        let later = Time(k8s_openapi::jiff::Timestamp::from_second(1000).expect("valid"));
        let second = compute(&st, None, Some("cleaning"), false, &later);
        assert_eq!(
            get(&second, "AvailableForProvisioning").last_transition_time,
            now()
        );
        st.provisioning.state = State::Provisioning;
        let third = compute(&st, None, Some("deploying"), false, &later);
        assert_eq!(
            get(&third, "AvailableForProvisioning").last_transition_time,
            later
        );
        assert_eq!(get(&third, "Progressing").message, "deploying");
    }

    #[test]
    fn unreachable_provisioner_is_kept_until_it_answers() {
        let mut st = BareMetalHostStatus::default();
        st.provisioning.state = State::Available;
        st.conditions = compute(&st, None, None, false, &now());
        let message = "cannot reach Ironic at http://ironic:6385/v1/";
        st.conditions = set_unreachable(&st.conditions, message, Some(2), &now());
        assert_eq!(st.conditions.len(), 7);
        let c = get(&st.conditions, PROVISIONER_REACHABLE);
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            ("False", IRONIC_UNREACHABLE)
        );
        assert_eq!(c.message, message);

        // Again later: one condition, its first transition time.
        let later = Time(k8s_openapi::jiff::Timestamp::from_second(1000).expect("valid"));
        let again = set_unreachable(&st.conditions, message, Some(2), &later);
        assert_eq!(again.len(), 7);
        assert_eq!(
            get(&again, PROVISIONER_REACHABLE).last_transition_time,
            now()
        );

        // Other updates keep it until the provisioner answers.
        let kept = compute(&st, None, None, false, &later);
        assert_eq!(get(&kept, PROVISIONER_REACHABLE).message, message);
        let answered = compute(&st, None, None, true, &later);
        assert!(answered.iter().all(|c| c.type_ != PROVISIONER_REACHABLE));
        assert_eq!(answered.len(), 6);
    }
}
