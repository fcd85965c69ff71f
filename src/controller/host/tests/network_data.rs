//! `spec.preprovisioningNetworkDataName`: the static address the agent comes up on
//! where no DHCP serves the provisioning network.

use super::*;

const STATIC_ADDRESS: &str = r#"{"links": [{"id": "eth0", "type": "phy", "ethernet_mac_address": "52:54:00:00:00:01"}],
 "networks": [{"id": "prov", "network_id": "prov", "link": "eth0", "type": "ipv4", "ip_address": "192.168.111.20", "netmask": "255.255.255.0"}],
 "services": []}"#;

fn error_of(ctx: &TestContext, name: &str) -> (Option<String>, String, i64) {
    let status = ctx
        .store
        .host(NS, name)
        .and_then(|h| h.status)
        .unwrap_or_default();
    (
        status.error_type.map(|t| t.to_string()),
        status.error_message,
        status.error_count,
    )
}

#[tokio::test]
async fn a_missing_network_data_secret_is_a_registration_error_until_it_appears() {
    let ctx = site("n", json!({"preprovisioningNetworkDataName": "n-net"}));
    drive(&ctx, "n", in_state(State::Registering)).await;
    let next = step(&ctx, "n").await;
    let (error_type, message, count) = error_of(&ctx, "n");
    assert_eq!(error_type.as_deref(), Some("registration error"));
    assert!(
        message.contains("spec.preprovisioningNetworkDataName")
            && message.contains("ns/n-net")
            && message.contains("networkData"),
        "{message}"
    );
    assert_eq!(count, 1);
    assert!(
        matches!(next, Next::After(d) if d > Duration::ZERO),
        "looks again on the error backoff, not only on a change: {next:?}"
    );
    assert!(ctx.provisioner.host("ns~n").is_none(), "not registered");

    // The Secret appears: the host registers with its data and the error clears.
    ctx.store.put(network_data_secret("n-net", STATIC_ADDRESS));
    drive(&ctx, "n", in_state(State::Available)).await;
    let record = ctx.provisioner.host("ns~n").expect("registered");
    assert_eq!(
        record.network_data.as_deref(),
        Some(STATIC_ADDRESS.as_bytes())
    );
    assert_eq!(error_of(&ctx, "n").0, None);
}

#[tokio::test]
async fn malformed_network_data_names_the_secret_and_the_key() {
    for (data, says) in [
        ("links: [eth0-secret-value", "neither JSON nor YAML"),
        ("just a string", "not a mapping"),
    ] {
        let ctx = site("m", json!({"preprovisioningNetworkDataName": "m-net"}));
        ctx.store.put(network_data_secret("m-net", data));
        drive(&ctx, "m", in_state(State::Registering)).await;
        step(&ctx, "m").await;
        let (error_type, message, _) = error_of(&ctx, "m");
        assert_eq!(error_type.as_deref(), Some("registration error"));
        assert!(
            message.contains("ns/m-net")
                && message.contains("key networkData")
                && message.contains(says),
            "{message}"
        );
        assert!(
            !message.contains("secret-value"),
            "the data stays out of the status"
        );
    }
    let ctx = site("k", json!({"preprovisioningNetworkDataName": "k-net"}));
    ctx.store.put(bmc_secret("k-net"));
    drive(&ctx, "k", in_state(State::Registering)).await;
    step(&ctx, "k").await;
    let message = error_of(&ctx, "k").1;
    assert!(message.contains("has no key networkData"), "{message}");
}

#[tokio::test]
async fn a_host_whose_network_data_is_gone_is_still_deleted_with_its_node() {
    let ctx = site(
        "d",
        json!({"preprovisioningNetworkDataName": "d-net", "image": null}),
    );
    ctx.store.put(network_data_secret("d-net", STATIC_ADDRESS));
    drive(&ctx, "d", in_state(State::Available)).await;
    let mut emptied = network_data_secret("d-net", "");
    emptied.data = None;
    ctx.store.put(emptied);
    ctx.store.delete_host(NS, "d");
    drive(&ctx, "d", |h| h.is_none()).await;
    assert!(
        ctx.provisioner.host("ns~d").is_none(),
        "the node was removed"
    );
}
