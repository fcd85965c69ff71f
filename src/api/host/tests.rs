use super::*;

#[test]
fn enum_strings_match_their_json() {
    fn check<T: serde::Serialize + Copy>(all: &[T], as_str: fn(T) -> &'static str) {
        for &value in all {
            assert_eq!(
                serde_json::to_value(value).unwrap(),
                serde_json::json!(as_str(value))
            );
        }
    }
    check(ProvisioningState::ALL, ProvisioningState::as_str);
    check(ErrorType::ALL, ErrorType::as_str);
    check(OperationalStatus::ALL, OperationalStatus::as_str);
    check(StepKind::ALL, StepKind::as_str);
}

#[test]
fn a_host_without_spec_reads_as_the_default_spec() {
    for text in [
        r#"{"apiVersion":"metal3.io/v1alpha1","kind":"BareMetalHost","metadata":{"name":"demo-discovered"}}"#,
        r#"{"apiVersion":"metal3.io/v1alpha1","kind":"BareMetalHost","metadata":{"name":"demo-discovered"},"spec":null}"#,
    ] {
        let host: BareMetalHost = serde_json::from_str(text).expect(text);
        assert_eq!(host.spec, BareMetalHostSpec::default());
    }
    let host: BareMetalHost = serde_json::from_str(
        r#"{"apiVersion":"metal3.io/v1alpha1","kind":"BareMetalHost","metadata":{"name":"h"},"spec":{"online":true}}"#,
    )
    .expect("a host with spec");
    assert!(host.spec.online);
    let written = serde_json::to_value(&host.spec).expect("serialize");
    assert_eq!(written["online"], serde_json::json!(true));
}

#[test]
fn inline_user_data_is_hidden_from_debug() {
    let spec = BareMetalHostSpec {
        inline_user_data: Some(InlineUserData::new("#cloud-config\npassword: hunter2")),
        ..Default::default()
    };
    let printed = format!("{spec:?}");
    assert!(!printed.contains("hunter2"), "{printed}");
    assert!(printed.contains("***"));
}

#[test]
fn provisioning_predicates_follow_spec_and_status() {
    let image = Image {
        url: "http://images.example/os.qcow2".into(),
        checksum: Some("abc".into()),
        ..Default::default()
    };
    let mut host = BareMetalHost::new(
        "h",
        BareMetalHostSpec {
            online: true,
            image: Some(image.clone()),
            ..Default::default()
        },
    );
    assert!(host.needs_provisioning() && !host.was_provisioned());
    host.spec.online = false;
    assert!(!host.needs_provisioning());
    host.spec.online = true;
    host.status = Some(BareMetalHostStatus {
        provisioning: ProvisionStatus {
            image: Some(image),
            ..Default::default()
        },
        ..Default::default()
    });
    assert!(!host.needs_provisioning() && host.was_provisioned());
    host.spec.custom_deploy = Some(CustomDeploy {
        method: "install_coreos".into(),
    });
    assert!(host.needs_provisioning());
    host.spec.externally_provisioned = true;
    assert!(!host.was_provisioned());
}

#[test]
fn oci_and_live_iso_are_recognised() {
    let oci = Image {
        url: "OCI://registry.example/os:1".into(),
        ..Default::default()
    };
    assert!(oci.is_oci());
    let iso = Image {
        url: "https://example/boot.iso".into(),
        format: Some(ImageFormat::LiveIso),
        ..Default::default()
    };
    assert!(iso.is_live_iso() && !iso.is_oci());
}
