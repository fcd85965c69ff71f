//! Cluster API with CAPM3 against the stack: the CRDs and the CAPM3 manager that
//! `tests/env/stack` builds from their Go modules (docs/api.md, "With Cluster API").

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::{
    Stack, create_bmc_secret, fake_host, free_port, stored_config_drive, unique_mac, unique_name,
    wait_for_state,
};
use bmo::api::{BareMetalHost, ProvisioningState};
use k8s_openapi::api::core::v1::{Node, Secret};
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use kube::{Api, Client};
use serde_json::{Value, json};

/// Installs the Cluster API, CAPM3 and IPAM CRDs (idempotent: server-side apply) and
/// waits until they are served.
pub fn install_crds() {
    let stack = Stack::get();
    let dir = stack
        .var("BMO_CAPI_CRDS")
        .expect("BMO_CAPI_CRDS in the stack's env file (tests/env/stack builds it)");
    let kubectl = |args: &[&str]| {
        let out = Command::new("kubectl")
            .args(args)
            .env("KUBECONFIG", &stack.kubeconfig)
            .output()
            .expect("run kubectl (the stack puts it on PATH)");
        assert!(
            out.status.success(),
            "kubectl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    kubectl(&[
        "apply",
        "--server-side",
        "--force-conflicts",
        "--field-manager=bmo-tests",
        "-f",
        dir,
    ]);
    // The contract label the modules' kustomizations add (commonLabels): core finds
    // the provider's API version by it.
    kubectl(&[
        "label",
        "--overwrite",
        "-f",
        dir,
        "cluster.x-k8s.io/v1beta1=v1beta1",
    ]);
    for crd in ["clusters", "machines", "ipclaims"] {
        let group = if crd == "ipclaims" {
            "ipam.metal3.io"
        } else {
            "cluster.x-k8s.io"
        };
        kubectl(&[
            "wait",
            "--for=condition=Established",
            "--timeout=60s",
            &format!("crd/{crd}.{group}"),
        ]);
    }
    kubectl(&[
        "wait",
        "--for=condition=Established",
        "--timeout=60s",
        "crd/metal3machines.infrastructure.cluster.x-k8s.io",
    ]);
}

/// A controller manager of Cluster API (core or CAPM3: they take the same flags),
/// watching one namespace, on free loopback ports; killed when dropped.
pub struct Manager {
    child: std::sync::Mutex<Child>,
    dir: PathBuf,
}

/// The env file's variable naming the CAPM3 manager's binary.
pub const CAPM3: &str = "BMO_CAPM3_MANAGER";
/// The env file's variable naming the Cluster API core manager's binary.
pub const CORE: &str = "BMO_CAPI_MANAGER";

impl Manager {
    /// Starts the manager the env file's `binary_var` names.
    pub fn start(binary_var: &str, namespace: &str) -> Manager {
        let stack = Stack::get();
        let binary = stack.var(binary_var).unwrap_or_else(|| {
            panic!("{binary_var} is not in the stack's env file (tests/env/stack builds it)")
        });
        let dir = std::env::temp_dir().join(unique_name("capi-manager"));
        std::fs::create_dir_all(&dir).expect("capm3 dir");
        // The webhook server will not start without a certificate; the apiserver never
        // calls it (the tests write complete objects), so a throwaway one does.
        let status = Command::new("openssl")
            .args([
                "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
            ])
            .args([
                "-subj",
                "/CN=127.0.0.1",
                "-keyout",
                "tls.key",
                "-out",
                "tls.crt",
            ])
            .current_dir(&dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("run openssl");
        assert!(
            status.success(),
            "openssl could not make a webhook certificate"
        );
        let log = std::fs::File::create(dir.join("manager.log")).expect("log");
        let child = Command::new(binary)
            .arg(format!("--namespace={namespace}"))
            .arg(format!("--webhook-port={}", free_port()))
            .arg(format!("--webhook-cert-dir={}", dir.display()))
            .arg(format!("--health-addr=127.0.0.1:{}", free_port()))
            .arg(format!("--diagnostics-address=127.0.0.1:{}", free_port()))
            .arg("--insecure-diagnostics")
            .arg("--leader-elect=false")
            .env("KUBECONFIG", &stack.kubeconfig)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("start {binary}: {e}"));
        Manager {
            child: std::sync::Mutex::new(child),
            dir,
        }
    }

    /// What the manager has logged so far (its last 8 KiB).
    pub fn log(&self) -> String {
        let log = std::fs::read_to_string(self.dir.join("manager.log")).unwrap_or_default();
        let start = log.len().saturating_sub(8192);
        log.get(start..).unwrap_or(&log).to_owned()
    }

    /// Whether the process is still running.
    pub fn running(&self) -> bool {
        let mut child = self.child.lock().unwrap_or_else(|e| e.into_inner());
        matches!(child.try_wait(), Ok(None))
    }
}

impl Drop for Manager {
    fn drop(&mut self) {
        let child = self.child.get_mut().unwrap_or_else(|e| e.into_inner());
        let _ = child.kill();
        let _ = child.wait();
        // A failed test leaves the whole log behind (log() shows only its end).
        if std::thread::panicking() {
            eprintln!(
                "manager log kept: {}",
                self.dir.join("manager.log").display()
            );
        } else {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// Cluster API core's group/version.
pub const CAPI: &str = "cluster.x-k8s.io/v1beta1";
/// CAPM3's group/version.
pub const INFRA: &str = "infrastructure.cluster.x-k8s.io/v1beta1";
/// The label naming an object's cluster.
pub const CLUSTER_LABEL: &str = "cluster.x-k8s.io/cluster-name";
/// The bootstrap data the Machines get (Secret `bootstrap-data`, key `value`).
pub const USER_DATA: &str = "#cloud-config\nruncmd:\n- echo joined by capm3\n";

/// The namespaced API of `kind` in `api_version`.
pub fn api(client: &Client, ns: &str, api_version: &str, kind: &str) -> Api<DynamicObject> {
    let (group, version) = api_version.split_once('/').expect("group/version");
    let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind));
    Api::namespaced_with(client.clone(), ns, &resource)
}

/// Creates `manifest`.
pub async fn create(api: &Api<DynamicObject>, manifest: Value) -> DynamicObject {
    let object: DynamicObject = serde_json::from_value(manifest).expect("object");
    api.create(&Default::default(), &object)
        .await
        .unwrap_or_else(|e| panic!("create {:?}: {e}", object.metadata.name))
}

/// Merge-patches the status of `name`.
pub async fn merge_status(api: &Api<DynamicObject>, name: &str, status: Value) {
    api.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({ "status": status })),
    )
    .await
    .unwrap_or_else(|e| panic!("status of {name}: {e}"));
}

/// Merge-patches `name`.
pub async fn merge(api: &Api<DynamicObject>, name: &str, patch: Value) {
    api.patch(name, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .unwrap_or_else(|e| panic!("patch {name}: {e}"));
}

/// A fake-hardware host CAPM3 may pick: available, no image; its hardware details
/// (inspection disabled) give the addresses CAPM3 copies to the Metal3Machine.
pub async fn create_pool_host(client: &Client, ns: &str, name: &str, ip: &str) {
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

/// Waits until `host` is available again with no consumer.
pub async fn released(hosts: &Api<BareMetalHost>, host: &str) {
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

/// The Secrets a cluster's Machines need: `<cluster>-kubeconfig`, whose workload
/// cluster is the stack's own apiserver, and the bootstrap data `bootstrap-data`.
pub async fn create_cluster_secrets(client: &Client, ns: &str, cluster_name: &str) {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
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
}

/// What CAPM3 put in the host's userData and metaData, read back from the config drive
/// Ironic stored for the host's node.
pub async fn assert_config_drive_from_capm3(host: &BareMetalHost, machine: &str) {
    let host_name = host.metadata.name.as_deref().unwrap_or_default();
    let node_id = host.status.as_ref().map(|s| s.provisioning.id.clone());
    let drive = stored_config_drive(&node_id.unwrap_or_default()).await;
    assert_eq!(drive["user_data"].as_str(), Some(USER_DATA), "{drive}");
    assert_eq!(drive["meta_data"]["role"], "worker", "{drive}");
    assert_eq!(drive["meta_data"]["machine"], machine, "{drive}");
    assert_eq!(drive["meta_data"]["host"], host_name, "{drive}");
}

/// The kubelet's part: a Node registers with the label CAPM3's cloud-init templates
/// give it (`metal3.io/uuid` = the host's UID). Returns the Node's name.
pub async fn register_node(client: &Client, host: &BareMetalHost, prefix: &str) -> String {
    let name = unique_name(prefix);
    let node: Node = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"metal3.io/uuid": host.metadata.uid}},
    }))
    .expect("node");
    Api::<Node>::all(client.clone())
        .create(&Default::default(), &node)
        .await
        .expect("node");
    name
}

/// The addresses CAPM3 copied from the host: its name, and an InternalIP from the
/// pool hosts' NICs (192.0.2.2x).
pub fn assert_addresses_of(addresses: &Value, host_name: &str) {
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
    assert!(listed.contains(&("Hostname", host_name)), "{addresses}");
    assert!(
        listed
            .iter()
            .any(|(t, a)| *t == "InternalIP" && a.starts_with("192.0.2.2")),
        "{addresses}"
    );
}
