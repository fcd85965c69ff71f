//! What wakes a host: spec, annotation and finalizer changes, DHCP clients.

use super::*;

#[test]
fn only_spec_annotation_and_finalizer_changes_wake_a_host() {
    let wakes = |h: &BareMetalHost| host_change_predicate().hash_property(h);
    let mut h = host("w", json!({}));
    h.metadata.generation = Some(1);
    let before = wakes(&h);

    let mut status_only = h.clone();
    status_only.status = Some(crate::api::BareMetalHostStatus {
        error_count: 7,
        ..Default::default()
    });
    status_only.metadata.resource_version = Some("99".into());
    assert_eq!(wakes(&status_only), before, "bmo's own status write");

    let mut spec = h.clone();
    spec.metadata.generation = Some(2);
    assert_ne!(wakes(&spec), before, "a spec change");

    let mut annotated = h.clone();
    annotated
        .annotations_mut()
        .insert("reboot.metal3.io".into(), String::new());
    assert_ne!(wakes(&annotated), before, "an annotation");

    let mut finalized = h.clone();
    finalized.finalizers_mut().push(FINALIZER.into());
    assert_ne!(wakes(&finalized), before, "a finalizer");
}

#[test]
fn a_dhcp_client_wakes_the_hosts_that_boot_from_or_have_its_mac() {
    let booting = host("a", json!({"bootMACAddress": "52:54:00:AA:00:01"}));
    let mut inspected = host("b", json!({"bootMACAddress": "52:54:00:aa:00:02"}));
    let mut status = crate::api::BareMetalHostStatus::default();
    let mut details = crate::api::HardwareDetails::default();
    details.nics.push(crate::api::Nic {
        mac: Some("52:54:00:aa:00:01".into()),
        ..Default::default()
    });
    status.hardware = Some(details);
    inspected.status = Some(status);
    let other = host("c", json!({"bootMACAddress": "52:54:00:aa:00:03"}));
    let hosts: Vec<_> = [booting, inspected, other]
        .into_iter()
        .map(std::sync::Arc::new)
        .collect();
    let mac = "52:54:00:aa:00:01".parse().expect("MAC");
    let woken: Vec<String> = super::run::hosts_with_mac(&hosts, &mac)
        .into_iter()
        .map(|r| r.name)
        .collect();
    assert_eq!(woken, ["a", "b"]);
}
