//! The real CAPM3 controller manager (built from its Go module by tests/env/stack)
//! drives bmo: it claims hosts for Machines, bmo provisions them with CAPM3's user
//! and meta data, and scaling down or deleting the cluster releases them.
//!
//! The Cluster API core manager does not run here (docs/api.md, "With Cluster API"):
//! the test writes what core would write, in the steps marked "core's part", and
//! plays the kubelet where the workload cluster's Node would register itself.

use std::time::{Duration, Instant};

use crate::support::capi::{self, Manager, install_crds};
use crate::support::{
    Stack, bmo_run, create_bmc_secret, eventually, fake_host, installed_namespace,
    stored_config_drive, unique_mac, unique_name, wait_for_state,
};
use bmo::api::{BareMetalHost, ProvisioningState};
use k8s_openapi::api::core::v1::{Node, Secret};
use kube::api::{ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams};
use kube::{Api, Client};
use serde_json::{Value, json};

const CAPI: &str = "cluster.x-k8s.io/v1beta1";
const INFRA: &str = "infrastructure.cluster.x-k8s.io/v1beta1";
const CLUSTER_LABEL: &str = "cluster.x-k8s.io/cluster-name";
const MACHINE_FINALIZER: &str = "machine.cluster.x-k8s.io";
const CLUSTER_FINALIZER: &str = "cluster.cluster.x-k8s.io";
const USER_DATA: &str = "#cloud-config\nruncmd:\n- echo joined by capm3\n";

fn api(client: &Client, ns: &str, api_version: &str, kind: &str) -> Api<DynamicObject> {
    let (group, version) = api_version.split_once('/').expect("group/version");
    let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind));
    Api::namespaced_with(client.clone(), ns, &resource)
}

async fn create(api: &Api<DynamicObject>, manifest: Value) -> DynamicObject {
    let object: DynamicObject = serde_json::from_value(manifest).expect("object");
    api.create(&Default::default(), &object)
        .await
        .unwrap_or_else(|e| panic!("create {:?}: {e}", object.metadata.name))
}

async fn merge_status(api: &Api<DynamicObject>, name: &str, status: Value) {
    api.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({ "status": status })),
    )
    .await
    .unwrap_or_else(|e| panic!("status of {name}: {e}"));
}

async fn merge(api: &Api<DynamicObject>, name: &str, patch: Value) {
    api.patch(name, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .unwrap_or_else(|e| panic!("patch {name}: {e}"));
}

fn owner(object: &DynamicObject, api_version: &str, kind: &str) -> Value {
    json!({
        "apiVersion": api_version, "kind": kind,
        "name": object.metadata.name, "uid": object.metadata.uid,
        "controller": true, "blockOwnerDeletion": true,
    })
}

/// A fake-hardware host CAPM3 may pick: available, no image; its hardware details
/// (inspection disabled) give the addresses CAPM3 copies to the Metal3Machine.
async fn create_pool_host(client: &Client, ns: &str, name: &str, ip: &str) {
    let mut manifest = fake_host(name, &unique_mac());
    manifest["spec"]
        .as_object_mut()
        .expect("spec")
        .remove("image");
    manifest["metadata"]["labels"] = json!({"pool": "capm3"});
    manifest["metadata"]["annotations"] = json!({
        "inspect.metal3.io": "disabled",
        "inspect.metal3.io/hardwaredetails": json!({
            "hostname": name,
            "nics": [{"name": "eth0", "mac": unique_mac(), "ip": ip}],
        }).to_string(),
    });
    create_bmc_secret(client, ns, &format!("{name}-bmc"), "admin", "password").await;
    let host: BareMetalHost = serde_json::from_value(manifest).expect("host");
    Api::<BareMetalHost>::namespaced(client.clone(), ns)
        .create(&Default::default(), &host)
        .await
        .expect("create host");
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

/// Waits until `host` is available again with no consumer.
async fn released(hosts: &Api<BareMetalHost>, host: &str) {
    let h = wait_for_state(
        hosts,
        host,
        ProvisioningState::Available,
        Duration::from_secs(240),
    )
    .await;
    assert_eq!(h.spec.consumer_ref, None, "{host} still has a consumer");
    assert_eq!(h.spec.image, None, "{host} still has an image");
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
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    // The workload cluster is the stack's own apiserver.
    let kubeconfig = std::fs::read_to_string(&Stack::get().kubeconfig).expect("kubeconfig");
    for (name, data) in [
        (
            format!("{cluster_name}-kubeconfig"),
            json!({"value": kubeconfig}),
        ),
        (
            "bootstrap-data".to_owned(),
            json!({"value": USER_DATA, "format": "cloud-config"}),
        ),
    ] {
        let secret: Secret = serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {CLUSTER_LABEL: cluster_name}},
            "stringData": data,
        }))
        .expect("secret");
        secrets
            .create(&Default::default(), &secret)
            .await
            .expect("secret");
    }

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
        let meta_secret = spec
            .meta_data
            .as_ref()
            .and_then(|r| r.name.clone())
            .expect("metaData");
        assert!(spec.online);
        let image = spec.image.as_ref().expect("image");
        assert_eq!(image.url, "http://127.0.0.1/images/node.qcow2");
        let status = host.status.clone().expect("status");
        let drive = stored_config_drive(&status.provisioning.id).await;
        assert_eq!(drive["user_data"].as_str(), Some(USER_DATA), "{drive}");
        assert_eq!(
            drive["meta_data"]["role"], "worker",
            "{meta_secret}: {drive}"
        );
        assert_eq!(drive["meta_data"]["machine"], *name, "{drive}");
        assert_eq!(drive["meta_data"]["host"], host_name.as_str(), "{drive}");

        // The kubelet's part: the node registers with the label CAPM3's cloud-init
        // templates give it (metal3.io/uuid = the host's UID).
        let node_name = unique_name("capm3-node");
        let node: Node = serde_json::from_value(json!({
            "metadata": {"name": node_name, "labels": {"metal3.io/uuid": host.metadata.uid}},
        }))
        .expect("node");
        node_api
            .create(&Default::default(), &node)
            .await
            .expect("node");
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
        let listed: Vec<(&str, &str)> = addresses
            .as_array()
            .expect("addresses")
            .iter()
            .map(|a| {
                (
                    a["type"].as_str().unwrap_or(""),
                    a["address"].as_str().unwrap_or(""),
                )
            })
            .collect();
        assert!(
            listed.contains(&("Hostname", host_name.as_str())),
            "{addresses}"
        );
        assert!(
            listed
                .iter()
                .any(|(t, a)| *t == "InternalIP" && a.starts_with("192.0.2.2")),
            "{addresses}"
        );
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
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    // The workload cluster is the stack's own apiserver.
    let kubeconfig = std::fs::read_to_string(&Stack::get().kubeconfig).expect("kubeconfig");
    for (name, data) in [
        (
            format!("{cluster_name}-kubeconfig"),
            json!({"value": kubeconfig}),
        ),
        (
            "bootstrap-data".to_owned(),
            json!({"value": USER_DATA, "format": "cloud-config"}),
        ),
    ] {
        let secret: Secret = serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {CLUSTER_LABEL: cluster_name}},
            "stringData": data,
        }))
        .expect("secret");
        secrets
            .create(&Default::default(), &secret)
            .await
            .expect("secret");
    }

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
        let drive =
            stored_config_drive(&host.status.clone().expect("status").provisioning.id).await;
        assert_eq!(drive["user_data"].as_str(), Some(USER_DATA), "{drive}");
        assert_eq!(drive["meta_data"]["role"], "worker", "{drive}");
        assert_eq!(
            drive["meta_data"]["machine"],
            machine_name.as_str(),
            "{drive}"
        );
        assert_eq!(drive["meta_data"]["host"], host_name.as_str(), "{drive}");

        // The kubelet's part: the node registers with the label CAPM3's cloud-init
        // templates give it (metal3.io/uuid = the host's UID).
        let node_name = unique_name("capi-node");
        let node: Node = serde_json::from_value(json!({
            "metadata": {"name": node_name, "labels": {"metal3.io/uuid": host.metadata.uid}},
        }))
        .expect("node");
        node_api
            .create(&Default::default(), &node)
            .await
            .expect("node");
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
        let listed: Vec<(&str, &str)> = addresses
            .as_array()
            .expect("addresses")
            .iter()
            .map(|a| {
                (
                    a["type"].as_str().unwrap_or(""),
                    a["address"].as_str().unwrap_or(""),
                )
            })
            .collect();
        assert!(
            listed.contains(&("Hostname", host_name.as_str())),
            "{addresses}"
        );
        assert!(
            listed
                .iter()
                .any(|(t, a)| *t == "InternalIP" && a.starts_with("192.0.2.2")),
            "{addresses}"
        );
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
