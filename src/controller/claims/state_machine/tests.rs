//! Table tests of the claim decisions.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::SecretReference;
use serde_json::json;

use super::*;

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).into(), (*v).into()))
        .collect()
}

fn policy(ns: &str, namespaces: serde_json::Value) -> HostDeployPolicy {
    serde_json::from_value(json!({
        "apiVersion": "metal3.io/v1alpha1", "kind": "HostDeployPolicy",
        "metadata": {"name": "policy", "namespace": ns},
        "spec": {"hostClaimNamespaces": namespaces},
    }))
    .expect("policy")
}

fn claim(spec: serde_json::Value) -> HostClaim {
    serde_json::from_value(json!({
        "apiVersion": "metal3.io/v1alpha1", "kind": "HostClaim",
        "metadata": {"name": "web", "namespace": "tenant", "uid": "claim-uid"},
        "spec": spec,
    }))
    .expect("claim")
}

fn host(ns: &str, name: &str, state: &str, host_labels: serde_json::Value) -> BareMetalHost {
    let mut host: BareMetalHost = serde_json::from_value(json!({
        "apiVersion": "metal3.io/v1alpha1", "kind": "BareMetalHost",
        "metadata": {"name": name, "namespace": ns, "labels": host_labels},
        "spec": {"online": false},
    }))
    .expect("host");
    let mut status = crate::api::BareMetalHostStatus::default();
    status.provisioning.state = serde_json::from_value(json!(state)).expect("state");
    host.status = Some(status);
    host
}

#[test]
fn policies_admit_by_names_regex_and_labels_all_of_them() {
    let prod = labels(&[("team", "a"), ("env", "prod")]);
    let cases: &[(serde_json::Value, &str, bool)] = &[
        (json!({}), "tenant", true),
        (json!({"names": ["tenant", "x"]}), "tenant", true),
        (json!({"names": ["x"]}), "tenant", false),
        // Go's MatchString: anywhere in the name unless anchored.
        (json!({"nameMatches": "ena"}), "tenant", true),
        (json!({"nameMatches": "^ena"}), "tenant", false),
        (json!({"hasLabels": [{"name": "team"}]}), "tenant", true),
        (
            json!({"hasLabels": [{"name": "team", "value": "a"}, {"name": "env", "value": "prod"}]}),
            "tenant",
            true,
        ),
        (
            json!({"hasLabels": [{"name": "team", "value": "b"}]}),
            "tenant",
            false,
        ),
        (json!({"hasLabels": [{"name": "missing"}]}), "tenant", false),
        // Every criterion given must hold.
        (
            json!({"names": ["tenant"], "hasLabels": [{"name": "missing"}]}),
            "tenant",
            false,
        ),
    ];
    for (namespaces, ns, admitted) in cases {
        let p = policy("infra", namespaces.clone());
        assert_eq!(
            admits(&p, ns, &prod),
            Ok(*admitted),
            "{namespaces} for {ns}"
        );
    }
    let without: HostDeployPolicy = serde_json::from_value(json!({
        "apiVersion": "metal3.io/v1alpha1", "kind": "HostDeployPolicy",
        "metadata": {"name": "p", "namespace": "infra"}, "spec": {}}))
    .expect("policy");
    assert_eq!(
        admits(&without, "tenant", &prod),
        Ok(false),
        "no hostClaimNamespaces opens nothing"
    );
    let bad = policy("infra", json!({"nameMatches": "("}));
    assert!(matches!(
        admits(&bad, "tenant", &prod),
        Err(SelectionError::BadRegex { .. })
    ));
}

#[test]
fn open_namespaces_lists_each_admitting_namespace_once() {
    let policies = [
        policy("infra-b", json!({})),
        policy("infra-a", json!({"names": ["tenant"]})),
        policy("infra-a", json!({})),
        policy("closed", json!({"names": ["other"]})),
    ];
    assert_eq!(
        open_namespaces(&policies, "tenant", &BTreeMap::new()),
        Ok(vec!["infra-a".to_owned(), "infra-b".to_owned()])
    );
}

#[test]
fn selector_operators_follow_kubernetes_label_selectors() {
    let l = labels(&[("size", "large"), ("cpus", "64")]);
    let cases: &[(serde_json::Value, Result<bool, ()>)] = &[
        (json!({}), Ok(true)),
        (json!({"matchLabels": {"size": "large"}}), Ok(true)),
        (json!({"matchLabels": {"size": "small"}}), Ok(false)),
        (
            json!({"matchExpressions": [{"key": "size", "operator": "In", "values": ["large", "xl"]}]}),
            Ok(true),
        ),
        (
            json!({"matchExpressions": [{"key": "size", "operator": "notin", "values": ["large"]}]}),
            Ok(false),
        ),
        (
            json!({"matchExpressions": [{"key": "gpu", "operator": "notin", "values": ["yes"]}]}),
            Ok(true),
        ),
        (
            json!({"matchExpressions": [{"key": "size", "operator": "!=", "values": ["small"]}]}),
            Ok(true),
        ),
        (
            json!({"matchExpressions": [{"key": "size", "operator": "==", "values": ["large"]}]}),
            Ok(true),
        ),
        (
            json!({"matchExpressions": [{"key": "gpu", "operator": "exists", "values": []}]}),
            Ok(false),
        ),
        (
            json!({"matchExpressions": [{"key": "gpu", "operator": "!", "values": []}]}),
            Ok(true),
        ),
        (
            json!({"matchExpressions": [{"key": "cpus", "operator": "Gt", "values": ["32"]}]}),
            Ok(true),
        ),
        (
            json!({"matchExpressions": [{"key": "cpus", "operator": "lt", "values": ["32"]}]}),
            Ok(false),
        ),
        (
            json!({"matchExpressions": [{"key": "size", "operator": "=", "values": ["a", "b"]}]}),
            Err(()),
        ),
        (
            json!({"matchExpressions": [{"key": "size", "operator": "near", "values": []}]}),
            Err(()),
        ),
    ];
    for (selector, expected) in cases {
        let selector: HostSelector = serde_json::from_value(selector.clone()).expect("selector");
        assert_eq!(
            selector_matches(Some(&selector), &l).map_err(|_| ()),
            *expected,
            "{selector:?}"
        );
    }
}

#[test]
fn choose_takes_a_free_matching_host_and_prefers_the_failure_domain() {
    let c = claim(
        json!({"poweredOn": true, "hostSelector": {"matchLabels": {"size": "large"}},
                         "failureDomain": "rack-2"}),
    );
    let mut paused = host("infra", "paused", "available", json!({"size": "large"}));
    paused.metadata.annotations = Some([(PAUSED_ANNOTATION.to_owned(), String::new())].into());
    let mut taken = host("infra", "taken", "available", json!({"size": "large"}));
    taken.spec.consumer_ref = Some(ObjectReference {
        name: Some("other".into()),
        ..Default::default()
    });
    let mut failed = host("infra", "failed", "available", json!({"size": "large"}));
    if let Some(s) = failed.status.as_mut() {
        s.error_message = "broken".into();
    }
    let hosts = vec![
        paused,
        taken,
        failed,
        host("infra", "small", "available", json!({"size": "small"})),
        host("infra", "busy", "provisioned", json!({"size": "large"})),
        host(
            "infra",
            "rack1",
            "available",
            json!({"size": "large", FAILURE_DOMAIN_LABEL: "rack-1"}),
        ),
        host(
            "infra",
            "rack2",
            "ready",
            json!({"size": "large", FAILURE_DOMAIN_LABEL: "rack-2"}),
        ),
    ];
    let chosen = choose(&c, &hosts).expect("valid").expect("a host");
    assert_eq!(chosen.name_any(), "rack2");
    // Without a host in the domain, any free matching host.
    let chosen = choose(&c, &hosts[..6]).expect("valid").expect("a host");
    assert_eq!(chosen.name_any(), "rack1");
    assert_eq!(choose(&c, &hosts[..5]), Ok(None), "nothing free matches");
}

#[test]
fn choose_finds_the_host_already_bound_to_the_claim_first() {
    let c = claim(json!({"poweredOn": false}));
    let mut mine = host("infra", "mine", "provisioned", json!({}));
    mine.spec.consumer_ref = Some(consumer_ref(&c));
    let hosts = vec![host("infra", "free", "available", json!({})), mine];
    assert_eq!(
        choose(&c, &hosts).expect("valid").map(|h| h.name_any()),
        Some("mine".into())
    );
}

#[test]
fn claims_copy_only_secrets_of_their_own_namespace() {
    let own = claim(json!({"poweredOn": true, "userData": {"name": "ud"},
                           "networkData": {"name": "nd", "namespace": "tenant"},
                           "metaData": {"name": "md", "namespace": "other-tenant"}}));
    assert_eq!(
        source_secret(DataKind::UserData, &own),
        Ok(Some("ud".into()))
    );
    assert_eq!(
        source_secret(DataKind::NetworkData, &own),
        Ok(Some("nd".into()))
    );
    assert!(source_secret(DataKind::MetaData, &own).is_err());
    let none = claim(json!({"poweredOn": true}));
    assert_eq!(source_secret(DataKind::UserData, &none), Ok(None));
}

#[test]
fn the_host_spec_follows_the_claim_with_secret_copies_next_to_the_host() {
    let c = claim(json!({"poweredOn": true, "userData": {"name": "ud"},
                         "image": {"url": "http://i/x.qcow2", "checksum": "abc"}}));
    let h = host("infra", "bm-0", "available", json!({}));
    let wanted = Drive::wanted(&c, &h);
    assert!(wanted.online);
    assert_eq!(
        wanted.image.as_ref().map(|i| i.url.as_str()),
        Some("http://i/x.qcow2")
    );
    assert_eq!(
        wanted.user_data,
        Some(SecretReference {
            name: Some("bm-0-userdata".into()),
            namespace: Some("infra".into())
        })
    );
    assert_eq!(wanted.network_data, None);
    assert_ne!(Drive::current(&h), wanted);
}

#[test]
fn release_deprovisions_waits_then_unbinds() {
    let c = claim(json!({"poweredOn": true}));
    let mut h = host("infra", "bm-0", "provisioned", json!({}));
    h.spec.consumer_ref = Some(consumer_ref(&c));
    h.spec.online = true;
    h.spec.image = Some(Image {
        url: "http://i/x".into(),
        ..Default::default()
    });
    assert_eq!(release(&c, Some(&h)), Release::Deprovision);
    h.spec.online = false;
    h.spec.image = None;
    for (state, step) in [
        ("provisioned", Release::Wait),
        ("deprovisioning", Release::Wait),
        ("available", Release::Unbind),
        ("registering", Release::Unbind),
    ] {
        let mut h = h.clone();
        if let Some(s) = h.status.as_mut() {
            s.provisioning.state = serde_json::from_value(json!(state)).expect("state");
        }
        assert_eq!(release(&c, Some(&h)), step, "{state}");
    }
    let mut other = h.clone();
    other.spec.consumer_ref = None;
    assert_eq!(
        release(&c, Some(&other)),
        Release::Done,
        "not ours: nothing to undo"
    );
    assert_eq!(release(&c, None), Release::Done);
}

#[test]
fn provisioned_reasons_are_the_state_in_one_word() {
    for (state, reason) in [
        (ProvisioningState::None, "unknown"),
        (ProvisioningState::Available, "available"),
        (
            ProvisioningState::ExternallyProvisioned,
            "externallyProvisioned",
        ),
        (
            ProvisioningState::PoweringOffBeforeDelete,
            "poweringOffBeforeDelete",
        ),
    ] {
        assert_eq!(state_reason(state), reason);
    }
}
