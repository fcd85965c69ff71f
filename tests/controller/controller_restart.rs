//! `bmo run` killed with SIGKILL at arbitrary points while hosts provision: after a
//! restart every host ends provisioned and Ironic holds exactly one node per host.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use bmo::api::{BareMetalHost, ProvisioningState};
use kube::Api;
use kube::api::PostParams;
use serde_json::json;

use crate::support::{BmoProcess, Stack, bmo_run, create_bmc_secret, new_namespace, unique_mac};

const HOSTS: usize = 10;

fn start_bmo(ns: &str) -> BmoProcess {
    bmo_run(ns, &[]).0
}

async fn states(hosts: &Api<BareMetalHost>) -> HashMap<String, ProvisioningState> {
    hosts
        .list(&Default::default())
        .await
        .expect("list hosts")
        .items
        .into_iter()
        .map(|h| {
            (
                h.metadata.name.clone().unwrap_or_default(),
                h.provisioning_state(),
            )
        })
        .collect()
}

#[tokio::test]
async fn sigkilled_bmo_restarts_and_every_host_ends_provisioned_without_duplicate_nodes() {
    let _shared = crate::support::shared();
    let stack = Stack::get();
    let client = stack.kube_client().await;
    bmo::api::install::install(&client, Duration::from_secs(60))
        .await
        .expect("install CRDs");
    let ns = new_namespace(&client, "restart").await;
    create_bmc_secret(&client, &ns, "bmc", "admin", "pw").await;

    let hosts: Api<BareMetalHost> = Api::namespaced(client.clone(), &ns);
    for i in 0..HOSTS {
        let host: BareMetalHost = serde_json::from_value(json!({
            "apiVersion": "metal3.io/v1alpha1", "kind": "BareMetalHost",
            "metadata": {"name": format!("node-{i}")},
            "spec": {
                "online": true, "bootMACAddress": unique_mac(),
                "bmc": {"address": format!("fake://node-{i}"), "credentialsName": "bmc"},
                "image": {"url": "http://127.0.0.1/os.qcow2", "checksum": "0123456789abcdef0123456789abcdef", "checksumType": "md5"}
            }
        }))
        .expect("host");
        hosts
            .create(&PostParams::default(), &host)
            .await
            .expect("create host");
    }

    // Kill bmo at points spread over the lifecycle: quickly after start, and later.
    let kill_after = [
        Duration::from_millis(700),
        Duration::from_millis(1900),
        Duration::from_millis(3100),
        Duration::from_millis(5300),
    ];
    let mut kills = 0;
    for delay in kill_after {
        let mut bmo = start_bmo(&ns);
        tokio::time::sleep(delay).await; // the kill point itself is what is under test
        bmo.signal("KILL");
        bmo.wait_exit(Duration::from_secs(10)).await;
        kills += 1;
    }
    let bmo = start_bmo(&ns);
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let now = states(&hosts).await;
        if now.values().all(|s| *s == ProvisioningState::Provisioned) && now.len() == HOSTS {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "after {kills} kills not all provisioned: {now:?}\nlog: {}",
            bmo.log()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    let ironic = stack.ironic().await;
    let nodes = ironic.list_nodes().await.expect("list nodes");
    for i in 0..HOSTS {
        let name = format!("{ns}~node-{i}");
        let count = nodes
            .iter()
            .filter(|n| n.name.as_deref() == Some(name.as_str()))
            .count();
        assert_eq!(count, 1, "{name} has {count} Ironic nodes");
    }
    for h in hosts.list(&Default::default()).await.expect("list").items {
        let id = h
            .status
            .as_ref()
            .map(|s| s.provisioning.id.clone())
            .unwrap_or_default();
        let node = nodes
            .iter()
            .find(|n| n.uuid == id)
            .unwrap_or_else(|| panic!("{} points to no node", h.namespaced_name()));
        assert_eq!(node.provision_state(), "active");
    }
}
