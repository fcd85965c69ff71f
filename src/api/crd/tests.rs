use super::*;

fn schema_of(crd: &CustomResourceDefinition) -> Value {
    let mut value = serde_json::to_value(crd).unwrap();
    value
        .pointer_mut("/spec/versions/0/schema/openAPIV3Schema")
        .unwrap()
        .take()
}

#[test]
fn names_scope_and_subresources_match_upstream() {
    let crd = baremetalhost_crd().unwrap();
    assert_eq!(
        crd.metadata.name.as_deref(),
        Some("baremetalhosts.metal3.io")
    );
    assert_eq!(crd.spec.scope, "Namespaced");
    assert_eq!(
        crd.spec.names.short_names,
        Some(vec!["bmh".into(), "bmhost".into()])
    );
    assert_eq!(
        crd.spec.names.list_kind.as_deref(),
        Some("BareMetalHostList")
    );
    let version = &crd.spec.versions[0];
    assert!(version.subresources.as_ref().unwrap().status.is_some());
    let columns: Vec<_> = version
        .additional_printer_columns
        .as_ref()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c.name.as_str(),
                c.json_path.as_str(),
                c.priority.unwrap_or(0),
            )
        })
        .collect();
    assert_eq!(
        columns,
        [
            ("Status", ".status.operationalStatus", 1),
            ("State", ".status.provisioning.state", 0),
            ("Consumer", ".spec.consumerRef.name", 0),
            ("BMC", ".spec.bmc.address", 1),
            ("Online", ".spec.online", 0),
            ("Error", ".status.errorType", 0),
            ("Age", ".metadata.creationTimestamp", 0),
        ]
    );

    let hd = hardwaredata_crd().unwrap();
    assert_eq!(hd.metadata.name.as_deref(), Some("hardwaredata.metal3.io"));
    assert_eq!(hd.spec.names.short_names, Some(vec!["hd".into()]));
    assert!(hd.spec.versions[0].subresources.is_none());
}

#[test]
fn required_lists_match_upstream() {
    let schema = schema_of(&baremetalhost_crd().unwrap());
    let required = |pointer: &str| -> Vec<String> {
        let mut list: Vec<String> =
            serde_json::from_value(schema.pointer(pointer).unwrap().clone()).unwrap();
        list.sort();
        list
    };
    assert_eq!(required("/properties/spec/required"), ["online"]);
    assert_eq!(
        required("/properties/spec/properties/bmc/required"),
        ["address", "credentialsName"]
    );
    assert_eq!(
        required("/properties/spec/properties/image/required"),
        ["url"]
    );
    assert_eq!(
        required("/properties/status/required"),
        [
            "errorCount",
            "errorMessage",
            "operationalStatus",
            "poweredOn",
            "provisioning",
            "provisioningFailCount"
        ]
    );
    assert_eq!(
        required("/properties/status/properties/provisioning/required"),
        ["ID", "state"]
    );
}

#[test]
fn enums_and_defaults_match_upstream() {
    let schema = schema_of(&baremetalhost_crd().unwrap());
    let at = |pointer: &str| schema.pointer(pointer).unwrap().clone();
    assert_eq!(
        at("/properties/spec/properties/automatedCleaningMode/default"),
        json!("metadata")
    );
    assert_eq!(
        at("/properties/status/properties/errorCount/default"),
        json!(0)
    );
    let error_types = at("/properties/status/properties/errorType/enum");
    assert!(
        error_types
            .as_array()
            .unwrap()
            .contains(&json!("detach error"))
    );
    assert_eq!(
        at(
            "/properties/spec/properties/raid/properties/hardwareRAIDVolumes/items/properties/level/enum"
        ),
        json!(["0", "1", "2", "5", "6", "1+0", "5+0", "6+0"])
    );
    assert_eq!(
        at("/properties/status/properties/operationalStatus/enum"),
        json!([
            "",
            "OK",
            "discovered",
            "error",
            "delayed",
            "detached",
            "servicing"
        ])
    );
    assert!(
        schema
            .pointer("/properties/spec/properties/image/nullable")
            .is_none()
    );
}

#[test]
fn every_rule_has_a_message_naming_a_field() {
    for rule in baremetalhost_rules() {
        assert!(
            rule.message.starts_with("spec.") || rule.message.starts_with("metadata."),
            "{rule:?}"
        );
    }
}

#[test]
fn rendering_is_stable() {
    assert_eq!(render_all().unwrap(), render_all().unwrap());
}
