//! The error fields a failed operation sets and a success clears.

use super::*;
use serde_json::json;

#[test]
fn failures_set_the_error_type_of_the_operation() {
    let cases = [
        (Operation::Register, "registering", ErrorType::Registration),
        (
            Operation::Inspect { refresh: false },
            "inspecting",
            ErrorType::Inspection,
        ),
        (Operation::Prepare, "preparing", ErrorType::Preparation),
        (
            Operation::Deprovision,
            "deprovisioning",
            ErrorType::Provisioning,
        ),
        (Operation::PowerOn, "available", ErrorType::PowerManagement),
        (
            Operation::Adopt,
            "provisioned",
            ErrorType::ProvisionedRegistration,
        ),
        (Operation::Detach, "provisioned", ErrorType::Detach),
    ];
    for (op, state, kind) in cases {
        let h = host(json!({}), state, json!({}));
        let u = after(&h, op, &CallResult::Failed("it broke".into()));
        assert_eq!(u.error, ErrorChange::Set(kind, "it broke".into()), "{op:?}");
        assert!(
            u.event.as_ref().is_some_and(|e| e.2),
            "failure events are warnings"
        );
    }
    let h = host(json!({}), "inspecting", json!({}));
    let u = after(
        &h,
        Operation::Inspect { refresh: false },
        &CallResult::InProgress {
            after: Duration::from_secs(10),
            changed: true,
        },
    );
    assert_eq!(
        (u.state, u.requeue),
        (None, Requeue::After(Duration::from_secs(10)))
    );
}

#[test]
fn success_clears_the_error() {
    let h = host(
        json!({}),
        "preparing",
        json!({"operationalStatus": "error", "errorType": "preparation error", "errorMessage": "x", "errorCount": 2}),
    );
    let u = after(&h, Operation::Prepare, &CallResult::Done);
    let status = applied(&h, &u);
    assert_eq!(
        (
            status.error_type,
            status.error_count,
            status.operational_status
        ),
        (None, 0, OperationalStatus::Ok)
    );
    assert!(status.error_message.is_empty());
}
