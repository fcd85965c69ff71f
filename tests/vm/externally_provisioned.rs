//! Upstream's `externally_provisioned`, its third case, on a real machine: an
//! available host, inspected by the agent, is marked externally provisioned. Its node
//! is adopted as it stands (`active`), with no deployment, and it stays that way.

use std::time::Duration;

use serde_json::json;

use crate::watch::{Watch, state_is};

/// Marks the available host externally provisioned and checks that Ironic adopted
/// its node without deploying anything.
pub async fn externally_provisioned_from_available(watch: &mut Watch<'_>) {
    let status = watch
        .until("available", Duration::from_secs(60), state_is("available"))
        .await;
    assert!(
        status["operationHistory"]["inspect"]["end"].is_string(),
        "inspected first: {status}"
    );
    watch.mark("marked externally provisioned");
    let start = watch.at("marked externally provisioned", None);
    watch
        .patch(json!({"spec": {"externallyProvisioned": true}}))
        .await;
    watch
        .until(
            "externally provisioned",
            Duration::from_secs(300),
            state_is("externally provisioned"),
        )
        .await;
    let node = watch
        .ironic
        .get_node(&watch.node)
        .await
        .expect("Ironic answers")
        .expect("the node");
    assert_eq!(node.provision_state(), "active", "the node was adopted");
    for deploying in [
        "ironic: deploying",
        "ironic: wait call-back",
        "host: provisioning",
    ] {
        assert_eq!(
            watch.at(deploying, start),
            None,
            "nothing was deployed ({deploying}): {:?}",
            watch.marks
        );
    }
    watch.mark("externally provisioned, node active");
}
