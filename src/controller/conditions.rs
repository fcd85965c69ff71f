//! Standard conditions computed from the status, so `kubectl wait
//! --for=condition=Provisioned` works and consumers have one readiness signal.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

use crate::api::{BareMetalHostStatus, OperationalStatus, ProvisioningState as State};

fn cond(type_: &str, ok: bool, reason: &str, message: String) -> (String, bool, String, String) {
    (type_.to_owned(), ok, reason.to_owned(), message)
}

/// The conditions for `status`, keeping each one's transition time when its status
/// did not change. `progress` is what is happening now (e.g. the clean step).
pub fn compute(
    status: &BareMetalHostStatus,
    generation: Option<i64>,
    progress: Option<&str>,
    now: &Time,
) -> Vec<Condition> {
    let state = status.provisioning.state;
    let op = status.operational_status;
    let manageable = match state {
        State::None | State::Unmanaged => {
            cond("Manageable", false, "NotManaged", "no BMC details".into())
        }
        State::Registering if op == OperationalStatus::Error => cond(
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
    };
    let available = matches!(state, State::Available | State::Ready);
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
    let mut ready = if provisioned {
        cond("Ready", true, "Provisioned", format!("host is {state}"))
    } else {
        cond(
            "Ready",
            false,
            "NotProvisioned",
            format!("host is {}", display_state(state)),
        )
    };
    let mut progressing = match progressing_reason {
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
    match op {
        OperationalStatus::Error => {
            ready = cond("Ready", false, "Error", status.error_message.clone());
        }
        OperationalStatus::Servicing => {
            ready = cond(
                "Ready",
                false,
                "Servicing",
                "firmware changes in progress".into(),
            )
        }
        OperationalStatus::Detached => {
            ready = cond(
                "Ready",
                false,
                "Detached",
                "detached from the provisioner".into(),
            );
            progressing = cond(
                "Progressing",
                false,
                "Detached",
                "detached from the provisioner".into(),
            );
        }
        _ => {}
    }
    let healthy = if op == OperationalStatus::Error {
        cond("Healthy", false, "Error", status.error_message.clone())
    } else {
        cond("Healthy", true, "Healthy", "no errors".into())
    };
    let wanted = [
        manageable,
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
        let c = compute(&st, Some(3), None, &now());
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
        let c = compute(&st, None, None, &now());
        assert_eq!(get(&c, "Manageable").reason, "RegistrationFailed");
        assert_eq!(get(&c, "Ready").reason, "Error");
        assert_eq!(get(&c, "Healthy").status, "False");
        assert_eq!(get(&c, "Progressing").status, "True");
    }

    #[test]
    fn transition_time_is_kept_while_status_is_unchanged() {
        let mut st = BareMetalHostStatus::default();
        st.provisioning.state = State::Available;
        let first = compute(&st, None, None, &now());
        st.conditions = first.clone();
        let later = Time(k8s_openapi::jiff::Timestamp::from_second(1000).expect("valid"));
        let second = compute(&st, None, Some("cleaning"), &later);
        assert_eq!(
            get(&second, "AvailableForProvisioning").last_transition_time,
            now()
        );
        st.provisioning.state = State::Provisioning;
        let third = compute(&st, None, Some("deploying"), &later);
        assert_eq!(
            get(&third, "AvailableForProvisioning").last_transition_time,
            later
        );
        assert_eq!(get(&third, "Progressing").message, "deploying");
    }
}
