//! The kube-apiserver goes away for 25 s (every connection closed, new ones refused)
//! and comes back: bmo watches again within seconds, so a host created after the
//! return gets its status at once rather than after a long watch backoff.

use std::time::{Duration, Instant};

use bmo::api::BareMetalHost;
use bmo::api::host::FINALIZER;
use kube::{Api, ResourceExt};

use crate::support::{
    Forwarder, Stack, authority, bmo_run, create_fake_host, eventually, kubeconfig_pointing_at,
    new_namespace,
};

const OUTAGE: Duration = Duration::from_secs(25);
/// From the API server's return until bmo has seen the new host (its finalizer is
/// bmo's first write): bmo watches again at least every 4 s.
const SEEN_WITHIN: Duration = Duration::from_secs(8);
/// ... and until the host has a status, which needs Ironic as well.
const STATUS_WITHIN: Duration = Duration::from_secs(15);

async fn has_finalizer(hosts: &Api<BareMetalHost>, name: &str) -> Result<(), String> {
    let h = hosts.get(name).await.map_err(|e| e.to_string())?;
    if h.finalizers().iter().any(|f| f == FINALIZER) {
        Ok(())
    } else {
        Err(format!("finalizers {:?}", h.finalizers()))
    }
}

async fn has_status(hosts: &Api<BareMetalHost>, name: &str) -> Result<(), String> {
    let h = hosts.get(name).await.map_err(|e| e.to_string())?;
    match h.status {
        Some(s) if !s.provisioning.state.as_str().is_empty() || !s.conditions.is_empty() => Ok(()),
        other => Err(format!("{other:?}")),
    }
}

#[tokio::test]
async fn watches_come_back_within_seconds_of_the_api_servers_return() {
    // Times bmo's return to within seconds of the API server's: alone.
    let _alone = crate::support::exclusive("controller_apiserver_outage");
    let stack = Stack::get();
    let client = stack.kube_client().await;
    bmo::api::install::install(&client, Duration::from_secs(60))
        .await
        .expect("install CRDs");
    let ns = new_namespace(&client, "apiserver-outage").await;

    // bmo reaches the API server through a forwarder the test can cut; the test
    // itself talks to the API server directly.
    let server = std::fs::read_to_string(&stack.kubeconfig).unwrap();
    let server = server
        .lines()
        .find_map(|l| l.trim().strip_prefix("server:"))
        .map(|s| s.trim().trim_matches('"').to_owned())
        .expect("a server in the kubeconfig");
    let forwarder = Forwarder::start(&authority(&server)).await;
    let (kubeconfig, _) =
        kubeconfig_pointing_at(&stack.kubeconfig, &format!("https://{}", forwarder.addr));
    let kubeconfig_env = kubeconfig.display().to_string();
    let (bmo, _health) = bmo_run(&ns, &[("KUBECONFIG", kubeconfig_env.as_str())]);

    let hosts: Api<BareMetalHost> = Api::namespaced(client.clone(), &ns);
    create_fake_host(&client, &ns, "before").await;
    eventually(
        "a status for the first host",
        Duration::from_secs(60),
        || has_status(&hosts, "before"),
    )
    .await;

    forwarder.cut();
    // The outage itself: a fixed time, not a wait for something.
    tokio::time::sleep(OUTAGE).await;
    forwarder.restore().await;
    let back = Instant::now();

    create_fake_host(&client, &ns, "after").await;
    eventually(
        "bmo to see the host created after the return",
        SEEN_WITHIN,
        || has_finalizer(&hosts, "after"),
    )
    .await;
    let seen = back.elapsed();
    eventually(
        "a status for the host created after the return",
        STATUS_WITHIN.saturating_sub(seen),
        || has_status(&hosts, "after"),
    )
    .await;
    println!(
        "after a {OUTAGE:?} outage, the new host was seen {seen:?} and had a status {:?} after the API server returned",
        back.elapsed()
    );
    let log = bmo.log();
    let outage_line = log
        .lines()
        .find(|l| l.contains("watch of BareMetalHosts failed"))
        .unwrap_or_else(|| panic!("the outage is not in the log:\n{log}"));
    println!("{outage_line}");
    assert!(!log.contains("panicked"), "{log}");
    let _ = std::fs::remove_file(kubeconfig);
}
