//! A pivot (`clusterctl move`) of provisioned hosts from one namespace to another, with
//! one bmo watching each namespace and both sharing the stack's Ironic: the hosts are
//! taken over where they land without inspection, deployment or deprovisioning.
//!
//! The steps are those CAPM3 (cluster-api-provider-metal3, baremetal/
//! metal3machine_manager.go) and clusterctl (cluster-api, cmd/clusterctl/client/
//! cluster/mover.go) take, in their order; docs/migration.md lists them.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bmo::api::{BareMetalHost, HardwareData, ProvisioningState};
use bmo::ironic::IronicClient;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{Event, Secret};
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams,
};
use kube::{Api, ResourceExt};
use serde_json::{Value, json};

use crate::support::{
    Stack, bmo_run, create_bmc_secret, eventually, fake_host, new_namespace, unique_mac,
    wait_for_state,
};

/// The paused annotation's value CAPM3 writes (`PausedAnnotationKey`); it removes only
/// this value when the cluster is resumed.
const CAPM3_PAUSE: &str = "metal3.io/capm3";
const PAUSED: &str = "baremetalhost.metal3.io/paused";
const STATUS: &str = "baremetalhost.metal3.io/status";
/// Keeps clusterctl from moving the host until CAPM3 has paused it and saved its status.
const BLOCK_MOVE: &str = "clusterctl.cluster.x-k8s.io/block-move";
const DELETE_FOR_MOVE: &str = "clusterctl.cluster.x-k8s.io/delete-for-move";
const CLUSTER_NAME_LABEL: &str = "cluster.x-k8s.io/cluster-name";

/// Provision states bmo must not pass through on either side of the move.
const FORBIDDEN: [&str; 8] = [
    "registering",
    "inspecting",
    "preparing",
    "available",
    "provisioning",
    "deprovisioning",
    "powering off before delete",
    "deleting",
];

fn hosts(client: &kube::Client, ns: &str) -> Api<BareMetalHost> {
    Api::namespaced(client.clone(), ns)
}

fn dynamic<K>(client: &kube::Client, ns: &str) -> Api<DynamicObject>
where
    K: kube::Resource<DynamicType = ()>,
{
    Api::namespaced_with(client.clone(), ns, &ApiResource::erase::<K>(&()))
}

/// CAPM3's `SetPauseAnnotation` once the Cluster is paused: block-move first, then the
/// paused annotation and the status (less `hardware`) in one write, then block-move
/// removed.
async fn capm3_pause(client: &kube::Client, ns: &str, name: &str) {
    let hosts = hosts(client, ns);
    let merge =
        |annotations: Value| Patch::Merge(json!({"metadata": {"annotations": annotations}}));
    let params = PatchParams::default();
    hosts
        .patch(name, &params, &merge(json!({BLOCK_MOVE: ""})))
        .await
        .expect("set block-move");
    let raw = dynamic::<BareMetalHost>(client, ns)
        .get(name)
        .await
        .expect("get host");
    let mut status = raw.data["status"].clone();
    status
        .as_object_mut()
        .expect("status object")
        .remove("hardware");
    hosts
        .patch(
            name,
            &params,
            &merge(json!({PAUSED: CAPM3_PAUSE, STATUS: status.to_string()})),
        )
        .await
        .expect("set paused and status annotations");
    hosts
        .patch(name, &params, &merge(json!({BLOCK_MOVE: null})))
        .await
        .expect("remove block-move");
}

/// What a user does for a host no Metal3Machine owns: pause it (any value) and save
/// its whole status.
async fn user_pause(client: &kube::Client, ns: &str, name: &str) {
    let hosts = hosts(client, ns);
    let raw = dynamic::<BareMetalHost>(client, ns)
        .get(name)
        .await
        .expect("get host");
    let status = raw.data["status"].to_string();
    let patch = Patch::Merge(json!({"metadata": {"annotations": {PAUSED: "", STATUS: status}}}));
    hosts
        .patch(name, &PatchParams::default(), &patch)
        .await
        .expect("pause host");
}

/// clusterctl's `createTargetObject`: the object as read, without resourceVersion and
/// owner references (rebuilt to `owners`), created in the target; a mutator changes
/// the namespace and the references that must stay in the object's namespace. The
/// status is sent along and dropped by the API server (status subresource).
async fn clusterctl_create<K>(
    client: &kube::Client,
    from: &str,
    to: &str,
    name: &str,
    owners: Vec<Value>,
) -> DynamicObject
where
    K: kube::Resource<DynamicType = ()>,
{
    let mut obj = dynamic::<K>(client, from)
        .get(name)
        .await
        .expect("read source");
    obj.metadata.resource_version = None;
    obj.metadata.uid = None;
    obj.metadata.creation_timestamp = None;
    obj.metadata.managed_fields = None;
    obj.metadata.owner_references = (!owners.is_empty()).then(|| {
        owners
            .into_iter()
            .map(|o| serde_json::from_value(o).expect("owner"))
            .collect()
    });
    obj.metadata.namespace = Some(to.to_owned());
    for reference in ["userData", "consumerRef"] {
        if let Some(r) = obj.data["spec"]
            .get_mut(reference)
            .and_then(Value::as_object_mut)
        {
            r.insert("namespace".into(), json!(to));
        }
    }
    dynamic::<K>(client, to)
        .create(&PostParams::default(), &obj)
        .await
        .expect("create in the target")
}

/// clusterctl's `deleteSourceObject`: a JSON patch that replaces every annotation with
/// delete-for-move, the delete, then (retried until the object is gone) the finalizers
/// cleared. For hosts the test first gives bmo the chance to let go by itself.
async fn clusterctl_delete<K>(client: &kube::Client, ns: &str, name: &str, wait_for_bmo: bool)
where
    K: kube::Resource<DynamicType = ()>,
{
    let api = dynamic::<K>(client, ns);
    let source = api.get(name).await.expect("read source");
    let replace =
        json!([{"op": "add", "path": "/metadata/annotations", "value": {DELETE_FOR_MOVE: ""}}]);
    api.patch(
        name,
        &PatchParams::default(),
        &Patch::Json::<()>(serde_json::from_value(replace).expect("JSON patch")),
    )
    .await
    .expect("add delete-for-move");
    api.delete(name, &DeleteParams::default())
        .await
        .expect("delete source");
    if wait_for_bmo {
        eventually(
            &format!("bmo to let go of {ns}/{name}"),
            Duration::from_secs(60),
            || async {
                match api.get_opt(name).await.map_err(|e| e.to_string())? {
                    None => Ok(()),
                    Some(o) => Err(format!("finalizers {:?}", o.finalizers())),
                }
            },
        )
        .await;
    }
    if !source.finalizers().is_empty()
        && let Some(left) = api.get_opt(name).await.expect("read source")
        && !left.finalizers().is_empty()
    {
        api.patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": []}})),
        )
        .await
        .expect("remove finalizers");
    }
}

/// Every provision state and `provision_updated_at` Ironic showed for the watched
/// nodes while the move ran.
#[derive(Default)]
struct IronicSeen {
    states: BTreeMap<String, BTreeSet<String>>,
    updated_at: BTreeMap<String, BTreeSet<String>>,
}

fn watch_ironic(
    ironic: IronicClient,
    uuids: Vec<String>,
) -> (Arc<Mutex<IronicSeen>>, tokio::task::JoinHandle<()>) {
    let seen = Arc::new(Mutex::new(IronicSeen::default()));
    let record = seen.clone();
    let task = tokio::spawn(async move {
        loop {
            for uuid in &uuids {
                let state = match ironic.get_node(uuid).await {
                    Ok(Some(node)) => node,
                    Ok(None) => {
                        let mut seen = record.lock().expect("lock");
                        seen.states
                            .entry(uuid.clone())
                            .or_default()
                            .insert("<deleted>".into());
                        continue;
                    }
                    Err(_) => continue,
                };
                let mut seen = record.lock().expect("lock");
                seen.states
                    .entry(uuid.clone())
                    .or_default()
                    .insert(state.provision_state.clone().unwrap_or_default());
                seen.updated_at
                    .entry(uuid.clone())
                    .or_default()
                    .insert(state.provision_updated_at.clone().unwrap_or_default());
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    });
    (seen, task)
}

/// Records every provisioning state the hosts `names` show in `ns`.
fn watch_states(
    api: Api<BareMetalHost>,
    names: Vec<String>,
) -> (Arc<Mutex<BTreeSet<String>>>, tokio::task::JoinHandle<()>) {
    let seen = Arc::new(Mutex::new(BTreeSet::new()));
    let record = seen.clone();
    let task = tokio::spawn(async move {
        loop {
            for name in &names {
                if let Ok(Some(h)) = api.get_opt(name).await {
                    let state = h.provisioning_state().as_str().to_owned();
                    record
                        .lock()
                        .expect("lock")
                        .insert(format!("{name}:{state}"));
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    (seen, task)
}

fn forbidden_in(seen: &BTreeSet<String>) -> Vec<&String> {
    seen.iter()
        .filter(|s| FORBIDDEN.iter().any(|f| s.ends_with(&format!(":{f}"))))
        .collect()
}

/// History entries Ironic added since `before` entries that speak of a deployment,
/// cleaning or inspection.
fn new_work(history: &[Value], before: usize) -> Vec<String> {
    history
        .iter()
        .skip(before)
        .filter_map(|h| h["event"].as_str())
        .filter(|e| {
            let e = e.to_lowercase();
            e.contains("deploy") || e.contains("clean") || e.contains("inspect")
        })
        .map(str::to_owned)
        .collect()
}

async fn create_user_data(client: &kube::Client, ns: &str, name: &str) {
    let mut secret = Secret::default();
    secret.metadata.name = Some(name.to_owned());
    secret.data = Some(BTreeMap::from([
        (
            "value".to_owned(),
            ByteString(b"#cloud-config\nhostname: pivoted\n".to_vec()),
        ),
        ("format".to_owned(), ByteString(b"cloud-config".to_vec())),
    ]));
    Api::<Secret>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &secret)
        .await
        .expect("create userData secret");
}

#[tokio::test]
async fn moved_hosts_are_taken_over_without_inspection_deployment_or_deprovisioning() {
    let _shared = crate::support::shared();
    let stack = Stack::get();
    let client = stack.kube_client().await;
    bmo::api::install::install(&client, Duration::from_secs(60))
        .await
        .expect("install CRDs");
    let ironic = stack.ironic().await;
    let from = new_namespace(&client, "pivot-from").await;
    let to = new_namespace(&client, "pivot-to").await;
    let (source_bmo, _) = bmo_run(&from, &[("RUST_LOG", "info,bmo=debug")]);
    let (target_bmo, _) = bmo_run(&to, &[("RUST_LOG", "info,bmo=debug")]);
    let source = hosts(&client, &from);
    let target = hosts(&client, &to);

    // A worker CAPM3 provisioned (consumerRef, userData, cluster label) and a host the
    // user provisioned by hand.
    let (worker, spare) = ("worker-0", "spare-0");
    let cluster = "pivoted";
    for name in [worker, spare] {
        create_bmc_secret(&client, &from, &format!("{name}-bmc"), "admin", "password").await;
    }
    create_user_data(&client, &from, &format!("{worker}-user-data")).await;
    let mut manifest = fake_host(worker, &unique_mac());
    manifest["metadata"]["labels"] = json!({CLUSTER_NAME_LABEL: cluster});
    manifest["spec"]["image"]["format"] = json!("qcow2");
    manifest["spec"]["userData"] =
        json!({"name": format!("{worker}-user-data"), "namespace": from});
    manifest["spec"]["consumerRef"] = json!({
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1",
        "kind": "Metal3Machine",
        "name": format!("{cluster}-workers-abcde"),
        "namespace": from,
    });
    let host: BareMetalHost = serde_json::from_value(manifest).expect("valid host");
    source
        .create(&PostParams::default(), &host)
        .await
        .expect("create worker");
    let host: BareMetalHost =
        serde_json::from_value(fake_host(spare, &unique_mac())).expect("valid host");
    source
        .create(&PostParams::default(), &host)
        .await
        .expect("create spare");

    let mut before = BTreeMap::new();
    for name in [worker, spare] {
        wait_for_state(
            &source,
            name,
            ProvisioningState::Provisioned,
            Duration::from_secs(300),
        )
        .await;
        // Settled: powered on as spec.online asks.
        let h = eventually(
            &format!("{name} powered on"),
            Duration::from_secs(60),
            || async {
                let h = source.get(name).await.map_err(|e| e.to_string())?;
                match h.status.as_ref().is_some_and(|s| s.powered_on) {
                    true => Ok(h),
                    false => Err("poweredOn false".to_owned()),
                }
            },
        )
        .await;
        let st = h.status.clone().expect("status");
        let node = ironic
            .get_node(&st.provisioning.id)
            .await
            .expect("read node")
            .expect("node exists");
        assert_eq!(node.provision_state.as_deref(), Some("active"));
        let history = ironic
            .node_history(&node.uuid)
            .await
            .expect("history")
            .len();
        before.insert(name, (h, node, history));
    }
    let uuids: Vec<String> = before.values().map(|(_, n, _)| n.uuid.clone()).collect();
    let (ironic_seen, ironic_task) = watch_ironic(stack.ironic().await, uuids);
    let names = vec![worker.to_owned(), spare.to_owned()];
    let (source_seen, source_task) = watch_states(source.clone(), names.clone());
    let (target_seen, target_task) = watch_states(target.clone(), names.clone());

    // clusterctl pauses the Cluster; CAPM3 pauses its host and saves its status. The
    // spare is paused and saved by hand.
    capm3_pause(&client, &from, worker).await;
    user_pause(&client, &from, spare).await;
    for name in [worker, spare] {
        let h = source.get(name).await.expect("get host");
        assert!(
            !h.annotations().contains_key(BLOCK_MOVE),
            "{name}: block-move left"
        );
        assert!(
            h.annotations().contains_key(STATUS),
            "{name}: no status annotation"
        );
    }

    // Create in the target, owners first: Secrets, hosts, then the HardwareData the
    // hosts own.
    for name in [worker, spare] {
        clusterctl_create::<Secret>(&client, &from, &to, &format!("{name}-bmc"), vec![]).await;
    }
    clusterctl_create::<Secret>(&client, &from, &to, &format!("{worker}-user-data"), vec![]).await;
    for name in [worker, spare] {
        let moved = clusterctl_create::<BareMetalHost>(&client, &from, &to, name, vec![]).await;
        let owner = json!({
            "apiVersion": "metal3.io/v1alpha1",
            "kind": "BareMetalHost",
            "name": name,
            "uid": moved.uid().expect("uid"),
            "controller": true,
        });
        if dynamic::<HardwareData>(&client, &from)
            .get_opt(name)
            .await
            .expect("read")
            .is_some()
        {
            clusterctl_create::<HardwareData>(&client, &from, &to, name, vec![owner]).await;
        }
    }

    // Delete from the source in reverse order.
    for name in [worker, spare] {
        if dynamic::<HardwareData>(&client, &from)
            .get_opt(name)
            .await
            .expect("read")
            .is_some()
        {
            clusterctl_delete::<HardwareData>(&client, &from, name, false).await;
        }
    }
    for name in [worker, spare] {
        clusterctl_delete::<BareMetalHost>(&client, &from, name, true).await;
    }
    clusterctl_delete::<Secret>(&client, &from, &format!("{worker}-user-data"), false).await;
    for name in [worker, spare] {
        clusterctl_delete::<Secret>(&client, &from, &format!("{name}-bmc"), false).await;
    }

    // clusterctl resumes the Cluster in the target; CAPM3 removes its own pause. The
    // user removes theirs.
    let unpause = Patch::Merge(json!({"metadata": {"annotations": {PAUSED: null}}}));
    let w = target.get(worker).await.expect("moved worker");
    assert_eq!(
        w.annotations().get(PAUSED).map(String::as_str),
        Some(CAPM3_PAUSE)
    );
    for name in [worker, spare] {
        target
            .patch(name, &PatchParams::default(), &unpause)
            .await
            .expect("unpause");
    }

    for name in [worker, spare] {
        let (old, node, _) = &before[name];
        let h = eventually(
            &format!("{to}/{name} provisioned on its old node"),
            Duration::from_secs(120),
            || async {
                let h = target.get(name).await.map_err(|e| e.to_string())?;
                let st = h.status.clone().unwrap_or_default();
                let n = ironic
                    .get_node(&node.uuid)
                    .await
                    .map_err(|e| e.to_string())?;
                let renamed = n.and_then(|n| n.name) == Some(format!("{to}~{name}"));
                if h.provisioning_state() == ProvisioningState::Provisioned
                    && st.provisioning.id == node.uuid
                    && !h.annotations().contains_key(STATUS)
                    && renamed
                    && st.error_message.is_empty()
                {
                    Ok(h)
                } else {
                    Err(format!(
                        "{} id={} renamed={renamed} error={:?} {}; bmo log: {}",
                        h.provisioning_state(),
                        st.provisioning.id,
                        st.error_type,
                        st.error_message,
                        target_bmo.log_tail(40)
                    ))
                }
            },
        )
        .await;
        let (st, old_st) = (
            h.status.clone().expect("status"),
            old.status.clone().expect("status"),
        );
        assert_eq!(st.hardware, old_st.hardware, "{name}: hardware details");
        assert_eq!(
            st.provisioning.image, old_st.provisioning.image,
            "{name}: image"
        );
        assert!(st.powered_on, "{name}: powered off");
        let mut want_consumer = old.spec.consumer_ref.clone();
        if let Some(c) = want_consumer.as_mut() {
            c.namespace = Some(to.clone());
        }
        assert_eq!(h.spec.consumer_ref, want_consumer, "{name}: consumerRef");
    }
    assert!(
        before[worker]
            .0
            .status
            .as_ref()
            .and_then(|s| s.hardware.as_ref())
            .is_some(),
        "the worker had no hardware details to carry over"
    );

    // Keep watching until the target bmo has settled each host: a reconcile that ends
    // in the provisioned state's steady wait (a redeploy or deprovision would have
    // been decided by then).
    for name in [worker, spare] {
        let settled = format!("host={to}/{name}}}: next step step=Wait(");
        eventually(
            &format!("{to}/{name} to settle"),
            Duration::from_secs(60),
            || async {
                let log = target_bmo.log();
                match log
                    .lines()
                    .any(|l| l.contains(&settled) && l.ends_with("state=provisioned"))
                {
                    true => Ok(()),
                    false => Err(target_bmo.log_tail(40)),
                }
            },
        )
        .await;
    }

    // The source bmo said why it let go.
    let events = Api::<Event>::namespaced(client.clone(), &from);
    eventually(
        "DeletedForMove events in the source",
        Duration::from_secs(30),
        || async {
            let list = events
                .list(&ListParams::default())
                .await
                .map_err(|e| e.to_string())?;
            let moved: BTreeSet<String> = list
                .items
                .iter()
                .filter(|e| e.reason.as_deref() == Some("DeletedForMove"))
                .filter_map(|e| e.involved_object.name.clone())
                .collect();
            if moved == BTreeSet::from([worker.to_owned(), spare.to_owned()]) {
                Ok(())
            } else {
                Err(format!(
                    "{moved:?}; source bmo log: {}",
                    source_bmo.log_tail(40)
                ))
            }
        },
    )
    .await;
    for task in [ironic_task, source_task, target_task] {
        task.abort();
    }
    let ironic_seen = std::mem::take(&mut *ironic_seen.lock().expect("lock"));
    for (name, (_, node, history_before)) in &before {
        assert_eq!(
            ironic_seen
                .states
                .get(&node.uuid)
                .cloned()
                .unwrap_or_default(),
            BTreeSet::from(["active".to_owned()]),
            "{name}: Ironic states during the move"
        );
        assert_eq!(
            ironic_seen
                .updated_at
                .get(&node.uuid)
                .cloned()
                .unwrap_or_default(),
            BTreeSet::from([node.provision_updated_at.clone().unwrap_or_default()]),
            "{name}: Ironic's provision_updated_at moved (a provision state change)"
        );
        let history = ironic.node_history(&node.uuid).await.expect("history");
        assert_eq!(
            new_work(&history, *history_before),
            Vec::<String>::new(),
            "{name}: new work in Ironic's node history"
        );
    }
    let source_seen = source_seen.lock().expect("lock");
    assert_eq!(
        forbidden_in(&source_seen),
        Vec::<&String>::new(),
        "source side: {source_seen:?}"
    );
    let target_seen = target_seen.lock().expect("lock");
    assert_eq!(
        forbidden_in(&target_seen),
        Vec::<&String>::new(),
        "target side: {target_seen:?}"
    );
}
