use serde_json::{Value, json};

use super::*;

fn config(v: Option<bool>, smt: Option<bool>, sriov: Option<bool>) -> FirmwareConfig {
    FirmwareConfig {
        virtualization_enabled: v,
        simultaneous_multithreading_enabled: smt,
        sriov_enabled: sriov,
    }
}

fn names(mapped: &[Mapped]) -> Vec<(&'static str, &'static str)> {
    mapped.iter().map(|m| (m.setting, m.value)).collect()
}

/// Each vendor's names for virtualization, SMT and SR-IOV, as its BMC spells them.
const VENDOR_NAMES: [(Vendor, [&str; 3]); 2] = [
    (
        Vendor::Dell,
        ["ProcVirtualization", "LogicalProc", "SriovGlobalEnable"],
    ),
    (
        Vendor::Hpe,
        ["ProcVirtualization", "ProcHyperthreading", "Sriov"],
    ),
];

#[test]
fn dell_and_hpe_name_the_switches_as_idrac_and_ilo_do() {
    for (vendor, [virt, smt, sriov]) in VENDOR_NAMES {
        let every = |value| vec![(virt, value), (smt, value), (sriov, value)];
        let table = [
            (config(Some(true), Some(true), Some(true)), every("Enabled")),
            (
                config(Some(false), Some(false), Some(false)),
                every("Disabled"),
            ),
            (config(None, Some(false), None), vec![(smt, "Disabled")]),
            (config(None, None, Some(true)), vec![(sriov, "Enabled")]),
            (config(None, None, None), vec![]),
        ];
        for (config, expected) in table {
            let mapped = map(vendor, &config).expect("the vendor is mapped");
            assert_eq!(names(&mapped), expected, "{vendor:?} {config:?}");
        }
    }
}

#[test]
fn fujitsu_has_no_names_bmo_could_send() {
    for config in [
        config(Some(true), None, None),
        config(None, Some(false), None),
        config(None, None, Some(true)),
    ] {
        assert_eq!(map(Vendor::Fujitsu, &config), None, "{config:?}");
    }
    // Nothing asked, nothing to refuse.
    assert_eq!(
        map(Vendor::Fujitsu, &config(None, None, None)),
        Some(vec![])
    );
}

#[test]
fn the_vendor_comes_from_the_driver_first_then_the_manufacturer() {
    use Vendor::{Dell, Fujitsu, Hpe};
    let table: [(&str, Option<&str>, Option<Vendor>); 13] = [
        ("idrac-redfish://bmc/s/1", None, Some(Dell)),
        (
            "idrac-virtualmedia+https://bmc/s/1",
            Some("HPE"),
            Some(Dell),
        ),
        ("ilo5-redfish://bmc/s/1", None, Some(Hpe)),
        ("ilo5-virtualmedia://bmc/s/1", Some("Dell Inc."), Some(Hpe)),
        // A Dell behind plain Redfish names its settings the Dell way.
        ("redfish://bmc/s/1", Some("Dell Inc."), Some(Dell)),
        ("redfish-virtualmedia://bmc/s/1", Some("HPE"), Some(Hpe)),
        (
            "redfish://bmc/s/1",
            Some("Hewlett Packard Enterprise"),
            Some(Hpe),
        ),
        ("ipmi://bmc", Some("HP"), Some(Hpe)),
        ("redfish://bmc/s/1", Some("FUJITSU"), Some(Fujitsu)),
        ("fake://h", Some("Dell Inc."), Some(Dell)),
        ("redfish://bmc/s/1", Some("Supermicro"), None),
        // "Shpe" is not HPE: whole words only.
        ("ipmi://bmc", Some("Shpe Delling"), None),
        ("fake://h", None, None),
    ];
    for (address, manufacturer, expected) in table {
        let h = host(address, manufacturer, "preparing", None);
        assert_eq!(vendor_of(&h).ok(), expected, "{address} {manufacturer:?}");
    }
}

#[test]
fn an_unknown_vendor_is_refused_naming_host_field_and_fix() {
    let refusal = |address, manufacturer, firmware| {
        let h = host(address, Some(manufacturer), "preparing", Some(firmware));
        match pending(&h, None) {
            PendingSettings::Refused(message) => message,
            other => panic!("not refused: {other:?}"),
        }
    };
    let message = refusal("redfish://bmc/s/1", "Acme", json!({"sriovEnabled": true}));
    for part in [
        "host ns/h",
        "spec.firmware",
        "BMC driver redfish",
        "\"Acme\"",
        "HostFirmwareSettings spec.settings",
    ] {
        assert!(message.contains(part), "{part:?} missing in {message}");
    }
    let message = refusal(
        "fake://h",
        "FUJITSU",
        json!({"virtualizationEnabled": false}),
    );
    assert!(
        message.contains("Fujitsu") && message.contains("iRMC"),
        "{message}"
    );
}

fn host(
    address: &str,
    manufacturer: Option<&str>,
    state: &str,
    firmware: Option<Value>,
) -> BareMetalHost {
    let mut status = json!({
        "operationalStatus": "OK", "errorMessage": "", "poweredOn": false,
        "errorCount": 0, "provisioningFailCount": 0,
        "provisioning": {"state": state, "ID": "node-1"}
    });
    if let Some(m) = manufacturer {
        status["hardware"] = json!({"systemVendor": {"manufacturer": m}});
    }
    let mut spec =
        json!({"online": false, "bmc": {"address": address, "credentialsName": "h-bmc"}});
    if let Some(f) = firmware {
        spec["firmware"] = f;
    }
    serde_json::from_value(json!({
        "apiVersion": "metal3.io/v1alpha1", "kind": "BareMetalHost",
        "metadata": {"name": "h", "namespace": "ns"},
        "spec": spec, "status": status
    }))
    .expect("valid host")
}

/// The host's HostFirmwareSettings at generation 1, judged; `read` says whether the
/// BIOS was read (a schema is named).
fn hfs(spec: Value, bios: Value, changed: bool, read: bool) -> HostFirmwareSettings {
    let cond = |kind: &str, status: bool| {
        json!({"type": kind, "status": if status {"True"} else {"False"}, "reason": "Success",
               "message": "", "observedGeneration": 1, "lastTransitionTime": "2027-01-01T00:00:00Z"})
    };
    let mut status = json!({"settings": bios,
        "conditions": [cond("ChangeDetected", changed), cond("Valid", true)]});
    if read {
        status["schema"] = json!({"name": "schema-1", "namespace": "ns"});
    }
    serde_json::from_value(json!({
        "apiVersion": "metal3.io/v1alpha1", "kind": "HostFirmwareSettings",
        "metadata": {"name": "h", "namespace": "ns", "generation": 1},
        "spec": {"settings": spec}, "status": status
    }))
    .expect("valid settings")
}

fn dell_bios() -> Value {
    json!({"ProcVirtualization": "Disabled", "LogicalProc": "Enabled",
           "SriovGlobalEnable": "Disabled", "BootRetries": "3"})
}

/// A Dell host (Redfish) in `state` with `spec.firmware` set to `firmware`.
fn dell(state: &str, firmware: Option<Value>) -> BareMetalHost {
    host(
        "redfish://bmc/redfish/v1/Systems/1",
        Some("Dell Inc."),
        state,
        firmware,
    )
}

/// The BIOS settings `pairs`, to be applied.
fn apply(pairs: &[(&str, Value)]) -> PendingSettings {
    PendingSettings::Apply(
        pairs
            .iter()
            .map(|(n, v)| ((*n).to_owned(), v.clone()))
            .collect(),
    )
}

#[test]
fn preparing_adds_the_mapped_settings_the_bios_lacks() {
    let all_on = json!({"virtualizationEnabled": true, "simultaneousMultithreadingEnabled": true,
                        "sriovEnabled": true});
    let quiet = hfs(json!({}), dell_bios(), false, true);
    let boot = hfs(json!({"BootRetries": 5}), dell_bios(), true, true);
    let table: Vec<(
        &str,
        BareMetalHost,
        Option<HostFirmwareSettings>,
        PendingSettings,
    )> = vec![
        (
            "only what differs from the BIOS read",
            dell("preparing", Some(all_on.clone())),
            Some(quiet.clone()),
            apply(&[
                ("ProcVirtualization", json!("Enabled")),
                ("SriovGlobalEnable", json!("Enabled")),
            ]),
        ),
        (
            "after the HostFirmwareSettings' own",
            dell("preparing", Some(all_on.clone())),
            Some(boot.clone()),
            apply(&[
                ("BootRetries", json!(5)),
                ("ProcVirtualization", json!("Enabled")),
                ("SriovGlobalEnable", json!("Enabled")),
            ]),
        ),
        (
            "already in place",
            dell(
                "preparing",
                Some(json!({"simultaneousMultithreadingEnabled": true})),
            ),
            Some(quiet.clone()),
            PendingSettings::None,
        ),
        (
            "no switch set: HostFirmwareSettings alone",
            dell("preparing", Some(json!({}))),
            Some(boot.clone()),
            apply(&[("BootRetries", json!(5))]),
        ),
        (
            "outside preparing: HostFirmwareSettings alone",
            dell("available", Some(all_on.clone())),
            Some(quiet.clone()),
            PendingSettings::None,
        ),
        (
            "no HostFirmwareSettings yet: wait for it",
            dell("preparing", Some(all_on.clone())),
            None,
            PendingSettings::NotReady,
        ),
        (
            "BIOS not read yet: wait",
            dell("preparing", Some(all_on.clone())),
            Some(hfs(json!({}), json!({}), false, false)),
            PendingSettings::NotReady,
        ),
    ];
    for (case, host, settings, expected) in table {
        assert_eq!(pending(&host, settings.as_ref()), expected, "{case}");
    }
}

#[test]
fn a_setting_named_twice_or_missing_from_the_bios_is_refused() {
    let h = host(
        "idrac-redfish://bmc/redfish/v1/Systems/1",
        None,
        "preparing",
        Some(json!({"simultaneousMultithreadingEnabled": false})),
    );
    // HostFirmwareSettings names LogicalProc too, even with the same value.
    let both = hfs(json!({"LogicalProc": "Disabled"}), dell_bios(), true, true);
    let PendingSettings::Refused(message) = pending(&h, Some(&both)) else {
        panic!("a setting named twice was not refused");
    };
    assert_eq!(
        message,
        "host ns/h: spec.firmware.simultaneousMultithreadingEnabled sets the BIOS setting \
         LogicalProc, which HostFirmwareSettings ns/h spec.settings sets too; remove it from \
         one of them"
    );
    // A BMC that reports no such setting.
    let bare = hfs(json!({}), json!({"BootRetries": "3"}), false, true);
    let PendingSettings::Refused(message) = pending(&h, Some(&bare)) else {
        panic!("a setting the BMC lacks was not refused");
    };
    assert!(
        message.starts_with(
            "host ns/h: spec.firmware.simultaneousMultithreadingEnabled maps to the Dell BIOS \
             setting LogicalProc, which the BMC does not report"
        ),
        "{message}"
    );
}
