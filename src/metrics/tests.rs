use super::*;

fn host() -> HostLabels {
    HostLabels {
        namespace: "ns".into(),
        host: "node-0".into(),
    }
}

#[test]
fn exports_upstream_names_and_labels() {
    let metrics = Metrics::new();
    metrics.reconcile(&host(), "uid-0", false);
    metrics.host_error("RegistrationError");
    metrics.power_change(&host(), false);
    metrics.delayed(&host(), false);
    metrics.state_change("registering", "inspecting");
    metrics.operation_duration(&host(), TimedOperation::Provision, 42.0);
    metrics.count(Event::CredentialsMissing);
    let text = metrics.render();
    for line in [
        r#"metal3_reconcile_total{namespace="ns",host="node-0"} 1"#,
        r#"metal3_host_error_total{error_type="RegistrationError"} 1"#,
        r#"metal3_operation_power_change_total{namespace="ns",host="node-0",on_off="off"} 1"#,
        r#"metal3_delayed__provisioning_total{namespace="ns",host="node-0"} 1"#,
        r#"metal3_provisioning_state_change_total{prev_state="registering",new_state="inspecting"} 1"#,
        r#"metal3_operation_provision_duration_seconds_bucket{le="90.0",namespace="ns",host="node-0"} 1"#,
        r#"metal3_operation_provision_duration_seconds_bucket{le="30.0",namespace="ns",host="node-0"} 0"#,
        "metal3_credentials_missing_total 1",
        "metal3_credentials_invalid_total 0",
        "metal3_delete_delayed_for_detached_total 0",
    ] {
        assert!(
            text.lines().any(|l| l == line),
            "missing {line:?} in\n{text}"
        );
    }
}

#[test]
fn forgetting_a_host_drops_its_series() {
    let metrics = Metrics::new();
    metrics.reconcile(&host(), "uid-0", false);
    metrics.operation_duration(&host(), TimedOperation::Register, 0.2);
    metrics.reconcile(&host(), "uid-0", true);
    metrics.forget_host(&host(), "uid-0");
    // A reconcile after the deletion is done (a wake-up by the host's Secret),
    // even of the host as it was before its deletion, does not bring the series
    // back.
    metrics.reconcile(&host(), "uid-0", true);
    metrics.reconcile(&host(), "uid-0", false);
    let text = metrics.render();
    assert!(!text.contains("node-0"), "{text}");
    assert!(text.contains("metal3_reconcile_error_total 0"), "{text}");
    // A new host of the same name is counted.
    metrics.reconcile(&host(), "uid-1", false);
    assert!(
        metrics
            .render()
            .contains(r#"metal3_reconcile_total{namespace="ns",host="node-0"} 1"#)
    );
}

#[test]
fn certificate_expiry_appears_once_the_secured_endpoint_has_one() {
    let metrics = Metrics::new();
    let text = metrics.render();
    assert!(!text.contains("bmo_"), "{text}");
    metrics.set_certificate_not_after(1_930_348_800);
    let text = metrics.render();
    assert!(
        text.lines()
            .any(|l| l == "bmo_metrics_certificate_expiry_timestamp_seconds 1930348800"),
        "{text}"
    );
    assert!(text.contains("metal3_reconcile_error_total 0"), "{text}");
}
