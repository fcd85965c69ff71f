//! The real CAPM3 controller manager (built from its Go module by tests/env/stack)
//! drives bmo: it claims hosts for Machines, bmo provisions them with CAPM3's user
//! and meta data, and scaling down or deleting the cluster releases them.
//!
//! The Cluster API core manager does not run in this test (controller_capi runs it):
//! the test writes what core would write, in the steps marked "core's part"
//! (docs/api.md, "With Cluster API"), and plays the kubelet where the workload
//! cluster's Node would register itself.

use std::time::{Duration, Instant};

use crate::support::capi::{
    self, CAPI, CLUSTER_LABEL, INFRA, Manager, api, create, create_cluster_secrets,
    create_pool_host, install_crds, merge, merge_status, released,
};
use crate::support::{bmo_run, eventually, installed_namespace, wait_for_state};
use bmo::api::{BareMetalHost, ProvisioningState};
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::{DeleteParams, DynamicObject, Patch, PatchParams};
use serde_json::{Value, json};

const MACHINE_FINALIZER: &str = "machine.cluster.x-k8s.io";
const CLUSTER_FINALIZER: &str = "cluster.cluster.x-k8s.io";

fn owner(object: &DynamicObject, api_version: &str, kind: &str) -> Value {
    json!({
        "apiVersion": api_version, "kind": kind,
        "name": object.metadata.name, "uid": object.metadata.uid,
        "controller": true, "blockOwnerDeletion": true,
    })
}

/// The host CAPM3 claimed for Metal3Machine `m3m`, once it is provisioned.
async fn provisioned_host_of(
    hosts: &Api<BareMetalHost>,
    m3m: &str,
    capm3: &Manager,
) -> BareMetalHost {
    eventually(
        &format!("a host provisioned for Metal3Machine {m3m}"),
        Duration::from_secs(240),
        || async {
            let list = hosts
                .list(&Default::default())
                .await
                .map_err(|e| e.to_string())?;
            let host = list
                .items
                .into_iter()
                .find(|h| {
                    h.spec.consumer_ref.as_ref().is_some_and(|r| {
                        r.kind.as_deref() == Some("Metal3Machine") && r.name.as_deref() == Some(m3m)
                    })
                })
                .ok_or_else(|| format!("no host claimed; capm3 log: {}", capm3.log()))?;
            match host.provisioning_state() {
                ProvisioningState::Provisioned => Ok(host),
                other => Err(format!(
                    "{} is {other}",
                    host.metadata.name.unwrap_or_default()
                )),
            }
        },
    )
    .await
}

/// Core's part when a Machine goes (scale down, cluster deletion): the Machine is
/// marked deleted, its Metal3Machine deleted and, once CAPM3 let that go, the Machine's
/// finalizer removed.
async fn delete_machine(
    machines: &Api<DynamicObject>,
    m3ms: &Api<DynamicObject>,
    name: &str,
    capm3: &Manager,
) {
    machines
        .delete(name, &DeleteParams::default())
        .await
        .expect("delete Machine");
    m3ms.delete(name, &DeleteParams::default())
        .await
        .expect("delete Metal3Machine");
    eventually(
        &format!("CAPM3 to let Metal3Machine {name} go"),
        Duration::from_secs(240),
        || async {
            match m3ms.get_opt(name).await.map_err(|e| e.to_string())? {
                None => Ok(()),
                Some(m) => Err(format!(
                    "{:?}; capm3 log: {}",
                    m.data.get("status"),
                    capm3.log()
                )),
            }
        },
    )
    .await;
    merge(machines, name, json!({"metadata": {"finalizers": null}})).await;
}

#[tokio::test]
async fn capm3_claims_provisions_and_releases_hosts_through_bmo() {
    let _shared = crate::support::shared();
    let (client, ns) = installed_namespace("capm3").await;
    install_crds();
    let (bmo, _) = bmo_run(&ns, &[]);
    let capm3 = Manager::start(capi::CAPM3, &ns);
    let hosts: Api<BareMetalHost> = Api::namespaced(client.clone(), &ns);
    for (name, ip) in [
        ("pool-0", "192.0.2.20"),
        ("pool-1", "192.0.2.21"),
        ("spare-0", "192.0.2.22"),
    ] {
        create_pool_host(&client, &ns, name, ip).await;
    }
    // A host outside the template's selector is never claimed.
    merge_host_labels(&hosts, "spare-0").await;
    // The pool is ready before the Machines come (else CAPM3 finds no host and
    // looks again 30 s later, which the timing below would include).
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
    let m3clusters = api(&client, &ns, INFRA, "Metal3Cluster");
    let m3ms = api(&client, &ns, INFRA, "Metal3Machine");
    let endpoint = json!({"host": "127.0.0.1", "port": 6443});
    let cluster = create(&clusters, json!({
        "apiVersion": CAPI, "kind": "Cluster",
        "metadata": {"name": cluster_name, "finalizers": [CLUSTER_FINALIZER]},
        "spec": {
            "controlPlaneEndpoint": endpoint,
            "infrastructureRef": {"apiVersion": INFRA, "kind": "Metal3Cluster", "name": cluster_name},
        },
    }))
    .await;
    // Core's part: the Cluster owns its infrastructure cluster.
    create(
        &m3clusters,
        json!({
            "apiVersion": INFRA, "kind": "Metal3Cluster",
            "metadata": {"name": cluster_name, "labels": {CLUSTER_LABEL: cluster_name},
                         "ownerReferences": [owner(&cluster, CAPI, "Cluster")]},
            "spec": {"controlPlaneEndpoint": endpoint, "noCloudProvider": true},
        }),
    )
    .await;
    eventually(
        "CAPM3 to make the Metal3Cluster ready",
        Duration::from_secs(60),
        || async {
            let m = m3clusters
                .get(cluster_name)
                .await
                .map_err(|e| e.to_string())?;
            if !capm3.running() {
                panic!("the CAPM3 manager exited; log: {}", capm3.log());
            }
            match m.data["status"]["ready"].as_bool() {
                Some(true) => Ok(()),
                _ => Err(format!("{}; capm3 log: {}", m.data["status"], capm3.log())),
            }
        },
    )
    .await;
    // Core's part: the Cluster's infrastructure is ready once the Metal3Cluster is.
    merge_status(
        &clusters,
        cluster_name,
        json!({"infrastructureReady": true, "phase": "Provisioned"}),
    )
    .await;

    create(&api(&client, &ns, INFRA, "Metal3DataTemplate"), json!({
        "apiVersion": INFRA, "kind": "Metal3DataTemplate",
        "metadata": {"name": "workers", "labels": {CLUSTER_LABEL: cluster_name}},
        "spec": {"clusterName": cluster_name, "metaData": {
            "strings": [{"key": "role", "value": "worker"}],
            "objectNames": [{"key": "machine", "object": "machine"}, {"key": "host", "object": "baremetalhost"}],
        }},
    }))
    .await;
    let template_spec = json!({
        "image": {
            "url": "http://127.0.0.1/images/node.qcow2",
            "checksum": "8a4f1e2d3c5b6a7988796a5b4c3d2e1f0a9b8c7d6e5f4a3b2c1d0e9f8a7b6c5d",
            "checksumType": "sha256",
            "format": "qcow2",
        },
        "dataTemplate": {"name": "workers"},
        "hostSelector": {"matchLabels": {"pool": "capm3"}},
    });
    create(
        &api(&client, &ns, INFRA, "Metal3MachineTemplate"),
        json!({
            "apiVersion": INFRA, "kind": "Metal3MachineTemplate",
            "metadata": {"name": "workers", "labels": {CLUSTER_LABEL: cluster_name}},
            "spec": {"template": {"spec": template_spec}},
        }),
    )
    .await;

    let names = ["workers-0", "workers-1"];
    let mut created = Vec::new();
    for name in names {
        let machine = create(&machines, json!({
            "apiVersion": CAPI, "kind": "Machine",
            "metadata": {"name": name, "labels": {CLUSTER_LABEL: cluster_name},
                         "finalizers": [MACHINE_FINALIZER]},
            "spec": {
                "clusterName": cluster_name,
                "bootstrap": {"dataSecretName": "bootstrap-data"},
                "infrastructureRef": {"apiVersion": INFRA, "kind": "Metal3Machine", "name": name},
            },
        }))
        .await;
        created.push(Instant::now());
        // Core's part (its MachineSet controller): the Metal3Machine cloned from the
        // template, owned by the Machine; the bootstrap data is ready as given.
        create(&m3ms, json!({
            "apiVersion": INFRA, "kind": "Metal3Machine",
            "metadata": {"name": name, "labels": {CLUSTER_LABEL: cluster_name},
                         "annotations": {"cluster.x-k8s.io/cloned-from-name": "workers",
                                         "cluster.x-k8s.io/cloned-from-groupkind": "Metal3MachineTemplate.infrastructure.cluster.x-k8s.io"},
                         "ownerReferences": [owner(&machine, CAPI, "Machine")]},
            "spec": template_spec,
        }))
        .await;
        merge_status(
            &machines,
            name,
            json!({"bootstrapReady": true, "phase": "Provisioning"}),
        )
        .await;
    }

    let mut claimed = Vec::new();
    let mut nodes = Vec::new();
    let node_api: Api<Node> = Api::all(client.clone());
    for (name, t0) in names.iter().zip(&created) {
        let host = provisioned_host_of(&hosts, name, &capm3).await;
        let provisioned = t0.elapsed();
        let host_name = host.metadata.name.clone().expect("name");
        assert!(
            host_name.starts_with("pool-"),
            "{host_name} is outside the selector"
        );
        let spec = &host.spec;
        assert_eq!(
            spec.user_data.as_ref().and_then(|r| r.name.as_deref()),
            Some("bootstrap-data")
        );
        assert!(
            spec.meta_data
                .as_ref()
                .and_then(|r| r.name.as_ref())
                .is_some(),
            "CAPM3 names a metaData Secret"
        );
        assert!(spec.online);
        let image = spec.image.as_ref().expect("image");
        assert_eq!(image.url, "http://127.0.0.1/images/node.qcow2");
        capi::assert_config_drive_from_capm3(&host, name).await;
        let node_name = capi::register_node(&client, &host, "capm3-node").await;
        nodes.push(node_name.clone());

        let provider_id = format!("metal3://{ns}/{host_name}/{name}");
        let m3m = eventually(
            &format!("CAPM3 to set {name}'s provider ID and addresses"),
            Duration::from_secs(120),
            || async {
                let m = m3ms.get(name).await.map_err(|e| e.to_string())?;
                let ready = m.data["status"]["ready"].as_bool() == Some(true);
                if ready && m.data["spec"]["providerID"] == provider_id.as_str() {
                    Ok(m)
                } else {
                    Err(format!("{}; capm3 log: {}", m.data, capm3.log()))
                }
            },
        )
        .await;
        let elapsed = t0.elapsed();
        let addresses = m3m.data["status"]["addresses"].clone();
        capi::assert_addresses_of(&addresses, &host_name);
        let node = node_api.get(&node_name).await.expect("node");
        assert_eq!(
            node.spec.and_then(|s| s.provider_id).as_deref(),
            Some(provider_id.as_str())
        );
        // Core's part: the Machine takes the provider ID and addresses and, its node
        // being there, runs.
        merge(
            &machines,
            name,
            json!({"spec": {"providerID": provider_id}}),
        )
        .await;
        merge_status(
            &machines,
            name,
            json!({
                "infrastructureReady": true, "addresses": addresses, "phase": "Running",
                "nodeRef": {"apiVersion": "v1", "kind": "Node", "name": node_name},
            }),
        )
        .await;
        eprintln!(
            "capm3: Machine {name} created -> host provisioned in {provisioned:?}, -> running (Metal3Machine ready) in {elapsed:?}"
        );
        claimed.push(host_name);
    }
    assert_ne!(claimed[0], claimed[1], "two Machines, two hosts");
    let spare = hosts.get("spare-0").await.expect("spare");
    assert_eq!(spare.spec.consumer_ref, None);

    // Scale down 2 -> 1: one Machine goes, its host is deprovisioned and freed.
    delete_machine(&machines, &m3ms, names[1], &capm3).await;
    released(&hosts, &claimed[1]).await;
    let kept = hosts.get(&claimed[0]).await.expect("host");
    assert_eq!(kept.provisioning_state(), ProvisioningState::Provisioned);
    assert!(kept.spec.consumer_ref.is_some());

    // Deleting the cluster (core's part: its Machines, then its infrastructure, then
    // the Cluster's own finalizer).
    clusters
        .delete(cluster_name, &DeleteParams::default())
        .await
        .expect("delete Cluster");
    delete_machine(&machines, &m3ms, names[0], &capm3).await;
    m3clusters
        .delete(cluster_name, &DeleteParams::default())
        .await
        .expect("delete Metal3Cluster");
    released(&hosts, &claimed[0]).await;
    eventually(
        "CAPM3 to let the Metal3Cluster go",
        Duration::from_secs(60),
        || async {
            match m3clusters
                .get_opt(cluster_name)
                .await
                .map_err(|e| e.to_string())?
            {
                None => Ok(()),
                Some(m) => Err(format!("{}", m.data)),
            }
        },
    )
    .await;
    merge(
        &clusters,
        cluster_name,
        json!({"metadata": {"finalizers": null}}),
    )
    .await;
    eventually("the Cluster to go", Duration::from_secs(30), || async {
        match clusters
            .get_opt(cluster_name)
            .await
            .map_err(|e| e.to_string())?
        {
            None => Ok(()),
            Some(c) => Err(format!("{:?}", c.metadata.finalizers)),
        }
    })
    .await;
    for node in nodes {
        let _ = node_api.delete(&node, &DeleteParams::default()).await;
    }
    assert!(capm3.running(), "CAPM3 exited; log: {}", capm3.log());
    drop(bmo);
}

async fn merge_host_labels(hosts: &Api<BareMetalHost>, name: &str) {
    hosts
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"pool": "other"}}})),
        )
        .await
        .expect("relabel host");
}
