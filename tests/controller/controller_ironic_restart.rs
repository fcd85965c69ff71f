//! Ironic restarted with an empty database while hosts are provisioned: bmo notices at
//! its next look at each host, enrols the node again and adopts it, so every host is
//! back to a provisioned, active node without being deployed again.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use bmo::api::{BareMetalHost, ProvisioningState};
use kube::Api;

use crate::support::{PrivateIronic, Stack, bmo_run, create_fake_host, eventually, new_namespace};

const HOSTS: usize = 3;

#[tokio::test]
async fn provisioned_hosts_are_adopted_again_after_ironic_loses_its_database() {
    // Restarts an Ironic with an empty database; recovery is bounded by the 60 s steady
    // poll, which load beside it would stretch: alone.
    let _alone = crate::support::exclusive("controller_ironic_restart");
    let stack = Stack::get();
    let client = stack.kube_client().await;
    bmo::api::install::install(&client, Duration::from_secs(60))
        .await
        .expect("install CRDs");
    let ns = new_namespace(&client, "ironic-wipe").await;

    let ironic = PrivateIronic::start("wipe-e2e", &[]);
    let (bmo, _health) = bmo_run(
        &ns,
        &[
            ("IRONIC_ENDPOINT", ironic.endpoint.as_str()),
            ("RUST_LOG", "info,bmo=debug"),
        ],
    );
    let hosts: Api<BareMetalHost> = Api::namespaced(client.clone(), &ns);
    for i in 0..HOSTS {
        create_fake_host(&client, &ns, &format!("node-{i}")).await;
    }

    let provisioned = |hosts: Api<BareMetalHost>| async move {
        let list = hosts
            .list(&Default::default())
            .await
            .map_err(|e| e.to_string())?;
        let states: BTreeMap<String, ProvisioningState> = list
            .items
            .iter()
            .map(|h| {
                (
                    h.metadata.name.clone().unwrap_or_default(),
                    h.provisioning_state(),
                )
            })
            .collect();
        if states.len() == HOSTS
            && states
                .values()
                .all(|s| *s == ProvisioningState::Provisioned)
        {
            Ok(list.items)
        } else {
            Err(format!("{states:?}"))
        }
    };
    eventually("all hosts provisioned", Duration::from_secs(240), || {
        provisioned(hosts.clone())
    })
    .await;

    let ironic_client = ironic.client().await;
    let before_wipe: BTreeSet<String> = ironic_client
        .list_nodes()
        .await
        .expect("list nodes")
        .into_iter()
        .map(|n| n.uuid)
        .collect();
    assert_eq!(before_wipe.len(), HOSTS);
    let log_before_wipe = bmo.log().len();
    ironic.wipe();
    // Connections pooled before the restart are dead: talk to the new process afresh.
    // bmo may already be enrolling again (a retry from the outage): only the old
    // nodes must be gone.
    let ironic_client = ironic.client().await;
    let left: Vec<String> = ironic_client
        .list_nodes()
        .await
        .expect("list nodes")
        .into_iter()
        .map(|n| n.uuid)
        .filter(|uuid| before_wipe.contains(uuid))
        .collect();
    assert!(left.is_empty(), "the wipe left nodes behind: {left:?}");

    // Every node comes back, active, through adoption; the hosts never leave
    // `provisioned` and no deployment runs again.
    let states_seen = std::sync::Mutex::new(BTreeSet::new());
    let (bmo, states_seen_ref, ironic_ref) = (&bmo, &states_seen, &ironic_client);
    let nodes = eventually(
        "Ironic to hold an active node per host again",
        Duration::from_secs(180),
        || {
            let hosts = hosts.clone();
            async move {
                for h in hosts
                    .list(&Default::default())
                    .await
                    .map_err(|e| e.to_string())?
                    .items
                {
                    if let Ok(mut seen) = states_seen_ref.lock() {
                        seen.insert(h.provisioning_state().as_str().to_owned());
                    }
                }
                let nodes = ironic_ref.list_nodes().await.map_err(|e| e.to_string())?;
                let active = nodes
                    .iter()
                    .filter(|n| n.provision_state() == "active")
                    .count();
                if nodes.len() == HOSTS && active == HOSTS {
                    Ok(nodes)
                } else {
                    Err(format!(
                        "{} nodes, {active} active; bmo log tail: {}",
                        nodes.len(),
                        bmo.log()
                            .lines()
                            .rev()
                            .take(3)
                            .collect::<Vec<_>>()
                            .join(" | ")
                    ))
                }
            }
        },
    )
    .await;
    let states_seen = states_seen.into_inner().expect("lock");
    assert_eq!(
        states_seen,
        BTreeSet::from(["provisioned".to_owned()]),
        "hosts left provisioned while Ironic recovered"
    );
    let log = bmo.log();
    let after_wipe = log.get(log_before_wipe..).unwrap_or_default();
    assert!(
        !after_wipe.contains("to=provisioning"),
        "a host was provisioned again:\n{after_wipe}"
    );
    assert!(
        after_wipe.matches("registered with Ironic").count() >= HOSTS,
        "the nodes were not enrolled again:\n{after_wipe}"
    );
    let hosts_now = provisioned(hosts.clone()).await.expect("still provisioned");
    let ids: BTreeSet<String> = hosts_now
        .iter()
        .filter_map(|h| h.status.as_ref().map(|s| s.provisioning.id.clone()))
        .collect();
    let node_ids: BTreeSet<String> = nodes.iter().map(|n| n.uuid.clone()).collect();
    assert_eq!(ids, node_ids, "status.provisioning.ID names the new nodes");
}
