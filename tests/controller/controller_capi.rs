//! Cluster API core and CAPM3, both real controller managers built from their Go
//! modules by tests/env/stack, scale a MachineDeployment on hosts bmo provisions
//! (docs/api.md, "With Cluster API"). The test plays the kubelet (each Node
//! registers), a bootstrap provider (`status.bootstrapReady`) and the garbage
//! collector, which the stack does not run.

use std::time::{Duration, Instant};

use crate::support::capi::{
    self, CAPI, CLUSTER_LABEL, INFRA, Manager, api, create, create_cluster_secrets,
    create_pool_host, install_crds, merge, merge_status, released,
};
use crate::support::{bmo_run, eventually, installed_namespace, wait_for_state};
use bmo::api::{BareMetalHost, ProvisioningState};
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::{DeleteParams, DynamicObject};
use serde_json::{Value, json};

/// The Machines of MachineDeployment `deployment`, by name.
async fn machines_of(machines: &Api<DynamicObject>, deployment: &str) -> Vec<DynamicObject> {
    let selector = format!("cluster.x-k8s.io/deployment-name={deployment}");
    machines
        .list(&kube::api::ListParams::default().labels(&selector))
        .await
        .expect("list Machines")
        .items
}

#[tokio::test]
async fn cluster_api_core_and_capm3_scale_a_machine_deployment_on_bmo_hosts() {
    let _shared = crate::support::shared();
    let (client, ns) = installed_namespace("capi").await;
    install_crds();
    let (bmo, _) = bmo_run(&ns, &[]);
    let capm3 = Manager::start(capi::CAPM3, &ns);
    let core = Manager::start(capi::CORE, &ns);
    let logs = || format!("core log: {}\ncapm3 log: {}", core.log(), capm3.log());
    let hosts: Api<BareMetalHost> = Api::namespaced(client.clone(), &ns);
    for (name, ip) in [("pool-0", "192.0.2.20"), ("pool-1", "192.0.2.21")] {
        create_pool_host(&client, &ns, name, ip).await;
    }
    for name in ["pool-0", "pool-1"] {
        wait_for_state(
            &hosts,
            name,
            ProvisioningState::Available,
            Duration::from_secs(120),
        )
        .await;
    }

    let cluster_name = "c1";
    create_cluster_secrets(&client, &ns, cluster_name).await;

    let clusters = api(&client, &ns, CAPI, "Cluster");
    let machines = api(&client, &ns, CAPI, "Machine");
    let deployments = api(&client, &ns, CAPI, "MachineDeployment");
    let m3ms = api(&client, &ns, INFRA, "Metal3Machine");
    let endpoint = json!({"host": "127.0.0.1", "port": 6443});
    create(&clusters, json!({
        "apiVersion": CAPI, "kind": "Cluster",
        "metadata": {"name": cluster_name},
        "spec": {
            "controlPlaneEndpoint": endpoint,
            "infrastructureRef": {"apiVersion": INFRA, "kind": "Metal3Cluster", "name": cluster_name},
        },
    }))
    .await;
    create(
        &api(&client, &ns, INFRA, "Metal3Cluster"),
        json!({
            "apiVersion": INFRA, "kind": "Metal3Cluster",
            "metadata": {"name": cluster_name},
            "spec": {"controlPlaneEndpoint": endpoint, "noCloudProvider": true},
        }),
    )
    .await;
    create(&api(&client, &ns, INFRA, "Metal3DataTemplate"), json!({
        "apiVersion": INFRA, "kind": "Metal3DataTemplate",
        "metadata": {"name": "workers"},
        "spec": {"clusterName": cluster_name, "metaData": {
            "strings": [{"key": "role", "value": "worker"}],
            "objectNames": [{"key": "machine", "object": "machine"}, {"key": "host", "object": "baremetalhost"}],
        }},
    }))
    .await;
    create(
        &api(&client, &ns, INFRA, "Metal3MachineTemplate"),
        json!({
            "apiVersion": INFRA, "kind": "Metal3MachineTemplate",
            "metadata": {"name": "workers"},
            "spec": {"template": {"spec": {
                "image": {
                    "url": "http://127.0.0.1/images/node.qcow2",
                    "checksum": "8a4f1e2d3c5b6a7988796a5b4c3d2e1f0a9b8c7d6e5f4a3b2c1d0e9f8a7b6c5d",
                    "checksumType": "sha256",
                    "format": "qcow2",
                },
                "dataTemplate": {"name": "workers"},
                "hostSelector": {"matchLabels": {"pool": "capm3"}},
            }}},
        }),
    )
    .await;
    eventually(
        "core to see the cluster's infrastructure ready",
        Duration::from_secs(60),
        || async {
            let c = clusters
                .get(cluster_name)
                .await
                .map_err(|e| e.to_string())?;
            match c.data["status"]["infrastructureReady"].as_bool() {
                Some(true) => Ok(()),
                _ => Err(format!("{}; {}", c.data["status"], logs())),
            }
        },
    )
    .await;

    // What the webhooks would default is written out: the apiserver does not call them.
    let labels =
        json!({CLUSTER_LABEL: cluster_name, "cluster.x-k8s.io/deployment-name": "workers"});
    let t0 = Instant::now();
    create(&deployments, json!({
        "apiVersion": CAPI, "kind": "MachineDeployment",
        "metadata": {"name": "workers", "labels": {CLUSTER_LABEL: cluster_name}},
        "spec": {
            "clusterName": cluster_name,
            "replicas": 2,
            "revisionHistoryLimit": 1,
            "progressDeadlineSeconds": 600,
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "clusterName": cluster_name,
                    "bootstrap": {"dataSecretName": "bootstrap-data"},
                    "infrastructureRef": {"apiVersion": INFRA, "kind": "Metal3MachineTemplate", "name": "workers"},
                },
            },
        },
    }))
    .await;

    let node_api: Api<Node> = Api::all(client.clone());
    let mut nodes = Vec::new();
    let mut claimed = Vec::new();
    let mut machine_names = Vec::new();
    for _ in 0..2 {
        // The next Machine whose host bmo provisioned, with its Metal3Machine's name.
        let (machine, host) = eventually(
            "a Machine's host to be provisioned",
            Duration::from_secs(240),
            || async {
                for m in machines_of(&machines, "workers").await {
                    let name = m.metadata.name.clone().unwrap_or_default();
                    // The bootstrap provider's part: core 1.7 marks a Machine's
                    // bootstrap ready only from a bootstrap config object, never from a
                    // bare dataSecretName, and CAPM3 waits for it.
                    if m.data["status"]["bootstrapReady"].as_bool() != Some(true) {
                        merge_status(&machines, &name, json!({"bootstrapReady": true})).await;
                    }
                    if machine_names.contains(&name) {
                        continue;
                    }
                    let m3m = m.data["spec"]["infrastructureRef"]["name"]
                        .as_str()
                        .unwrap_or("")
                        .to_owned();
                    if m3m.is_empty() {
                        continue;
                    }
                    let list = hosts
                        .list(&Default::default())
                        .await
                        .map_err(|e| e.to_string())?;
                    if let Some(h) = list.items.into_iter().find(|h| {
                        h.spec.consumer_ref.as_ref().and_then(|r| r.name.as_deref())
                            == Some(m3m.as_str())
                            && h.provisioning_state() == ProvisioningState::Provisioned
                    }) {
                        return Ok((m, h));
                    }
                }
                let m3m_status: Vec<Value> = m3ms
                    .list(&Default::default())
                    .await
                    .map_err(|e| e.to_string())?
                    .items
                    .into_iter()
                    .map(|m| m.data["status"].clone())
                    .collect();
                let host_states: Vec<String> = hosts
                    .list(&Default::default())
                    .await
                    .map_err(|e| e.to_string())?
                    .items
                    .iter()
                    .map(|h| {
                        format!(
                            "{:?}: {} {:?}",
                            h.metadata.name,
                            h.provisioning_state(),
                            h.spec.consumer_ref
                        )
                    })
                    .collect();
                Err(format!(
                    "Metal3Machines: {m3m_status:?}; hosts: {host_states:?}"
                ))
            },
        )
        .await;
        let machine_name = machine.metadata.name.clone().expect("name");
        let m3m = machine.data["spec"]["infrastructureRef"]["name"]
            .as_str()
            .expect("m3m")
            .to_owned();
        let host_name = host.metadata.name.clone().expect("host");
        capi::assert_config_drive_from_capm3(&host, &machine_name).await;
        let node_name = capi::register_node(&client, &host, "capi-node").await;
        nodes.push(node_name.clone());

        let provider_id = format!("metal3://{ns}/{host_name}/{m3m}");
        let running = eventually(
            &format!("Machine {machine_name} to run"),
            Duration::from_secs(120),
            || async {
                let m = machines
                    .get(&machine_name)
                    .await
                    .map_err(|e| e.to_string())?;
                if m.data["status"]["phase"] == "Running"
                    && m.data["spec"]["providerID"] == provider_id.as_str()
                {
                    Ok(m)
                } else {
                    Err(format!("{}; {}", m.data, logs()))
                }
            },
        )
        .await;
        eprintln!(
            "capi: MachineDeployment created -> Machine {machine_name} Running in {:?}",
            t0.elapsed()
        );
        assert_eq!(
            running.data["status"]["nodeRef"]["name"],
            node_name.as_str()
        );
        let addresses = &running.data["status"]["addresses"];
        capi::assert_addresses_of(addresses, &host_name);
        machine_names.push(machine_name);
        claimed.push(host_name);
    }
    assert_ne!(claimed[0], claimed[1], "two Machines, two hosts");

    // Scale down 2 -> 1: core deletes one Machine, CAPM3 frees its host, bmo
    // deprovisions it.
    merge(&deployments, "workers", json!({"spec": {"replicas": 1}})).await;
    let (gone, kept) = eventually("one Machine to go", Duration::from_secs(240), || async {
        let left: Vec<String> = machines_of(&machines, "workers")
            .await
            .into_iter()
            .filter_map(|m| m.metadata.name)
            .collect();
        match left.as_slice() {
            [one] => {
                let kept = machine_names
                    .iter()
                    .position(|n| n == one)
                    .ok_or("a new Machine")?;
                Ok((1 - kept, kept))
            }
            _ => Err(format!("{left:?}; {}", logs())),
        }
    })
    .await;
    released(&hosts, &claimed[gone]).await;
    let still = hosts.get(&claimed[kept]).await.expect("host");
    assert_eq!(still.provisioning_state(), ProvisioningState::Provisioned);
    assert!(still.spec.consumer_ref.is_some());

    // Deleting the cluster releases the rest.
    clusters
        .delete(cluster_name, &DeleteParams::default())
        .await
        .expect("delete Cluster");
    let sets = api(&client, &ns, CAPI, "MachineSet");
    eventually("the Cluster to go", Duration::from_secs(240), || async {
        // The garbage collector's part (the stack runs no kube-controller-manager):
        // core deletes the MachineDeployment and counts on it for the rest.
        collect_orphans(&sets, &deployments).await;
        collect_orphans(&machines, &sets).await;
        match clusters
            .get_opt(cluster_name)
            .await
            .map_err(|e| e.to_string())?
        {
            None => Ok(()),
            Some(c) => Err(format!("{}; {}", c.data, logs())),
        }
    })
    .await;
    released(&hosts, &claimed[kept]).await;
    for node in nodes {
        let _ = node_api.delete(&node, &DeleteParams::default()).await;
    }
    assert!(core.running() && capm3.running(), "{}", logs());
    drop(bmo);
}

/// Deletes each object of `objects` whose owner in `owners` is gone, as Kubernetes'
/// garbage collector would.
async fn collect_orphans(objects: &Api<DynamicObject>, owners: &Api<DynamicObject>) {
    let Ok(list) = objects.list(&Default::default()).await else {
        return;
    };
    for object in list.items {
        let owner = object
            .metadata
            .owner_references
            .iter()
            .flatten()
            .find(|r| r.controller == Some(true));
        let Some(owner) = owner else { continue };
        if matches!(owners.get_opt(&owner.name).await, Ok(None)) {
            let name = object.metadata.name.clone().unwrap_or_default();
            let _ = objects.delete(&name, &DeleteParams::default()).await;
        }
    }
}
