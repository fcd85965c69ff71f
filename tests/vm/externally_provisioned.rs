//! Upstream's `externally_provisioned`, its third case, on a real machine: an
//! available host, inspected by the agent, is marked externally provisioned. As
//! upstream's adoption does, bmo leaves its node `available`, deploys nothing, and the
//! host stays externally provisioned without an error through the reconciles after.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::watch::{Watch, state_is};

/// How long the host is watched for a late error once it is externally provisioned.
/// The annotation change makes bmo look at once; before the fix, the error showed
/// within 10 s even without it.
const SETTLED_FOR: Duration = Duration::from_secs(10);

/// Marks the available host externally provisioned and checks that nothing was
/// deployed, the node was left as it was, and no error followed.
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
    // An annotation change makes bmo reconcile the host again at once: the reconcile
    // that checks the registration and the node's state.
    watch
        .patch(json!({"metadata": {"annotations": {"test.bmo/poke": "1"}}}))
        .await;
    let deadline = Instant::now() + SETTLED_FOR;
    while Instant::now() < deadline {
        let status = watch
            .until("one look", Duration::from_secs(5), |_| true)
            .await;
        assert_eq!(
            status["provisioning"]["state"], "externally provisioned",
            "{status}"
        );
        assert!(status["errorType"].is_null(), "no error: {status}");
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let node = watch
        .ironic
        .get_node(&watch.node)
        .await
        .expect("Ironic answers")
        .expect("the node");
    assert_eq!(
        node.provision_state(),
        "available",
        "the node is left as it was"
    );
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
    watch.mark("externally provisioned, node available, no error");
}
