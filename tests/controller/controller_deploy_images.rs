//! The IPA kernel and ramdisk URLs that Ironic boots follow bmo's provisioning IP: when
//! the address of the provisioning interface changes, a node's `driver_info` follows
//! within seconds, without a restart.
//!
//! The provisioning interface lives in a network namespace the test makes, where the
//! network boot services run on their own thread; the host controller runs in this
//! process against the stack's kube-apiserver and Ironic on loopback.

use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use bmo::api::{BareMetalHost, ProvisioningState};
use bmo::controller::host::{Context, ControllerSettings};
use bmo::netboot::DeployImages;
use bmo::netboot::leases::LeaseTable;
use bmo::provisioner::{DeployRamdisk, IronicProvisioner, ProvisionerSettings};
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use serde_json::json;

use crate::support::netboot::{self, Netns, NsRef, TempDir, require, run};
use crate::support::{Stack, create_bmc_secret, eventually, new_namespace, unique_mac};

/// bmo's network boot services on a thread inside `ns`; stopped on drop.
struct NetbootThread {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl NetbootThread {
    fn start(ns: NsRef, dir: &std::path::Path) -> (NetbootThread, DeployImages) {
        let mut cfg = netboot::config(dir);
        cfg.provisioning.provisioning_interface = Some("prov0".into());
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel::<Result<DeployImages, String>>();
        let thread = std::thread::spawn(move || {
            ns.enter();
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            rt.block_on(async move {
                match bmo::netboot::start(&cfg, LeaseTable::in_memory()).await {
                    Ok(netboot) => {
                        let _ = ready_tx.send(Ok(netboot.deploy_images()));
                        let _ = stopped.await;
                    }
                    Err(e) => {
                        let _ = ready_tx.send(Err(e.to_string()));
                    }
                }
            });
        });
        let images = ready_rx
            .recv_timeout(Duration::from_secs(30))
            .expect("netboot thread answers")
            .expect("netboot starts in the namespace");
        let netboot = NetbootThread {
            stop: Some(stop),
            thread: Some(thread),
        };
        (netboot, images)
    }
}

impl Drop for NetbootThread {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn ip(args: &[&str]) {
    run(Command::new("ip").args(args));
}

/// The node's `driver_info.deploy_kernel`, once the host has a node.
async fn deploy_kernel(hosts: &Api<BareMetalHost>, name: &str) -> Result<String, String> {
    let host = hosts.get(name).await.map_err(|e| e.to_string())?;
    let id = host
        .status
        .as_ref()
        .map(|s| s.provisioning.id.clone())
        .filter(|id| !id.is_empty())
        .ok_or("no Ironic node yet")?;
    let node = Stack::get()
        .ironic()
        .await
        .get_node(&id)
        .await
        .map_err(|e| e.to_string())?
        .ok_or("node gone")?;
    node.driver_info
        .get("deploy_kernel")
        .and_then(|k| k.as_str())
        .map(str::to_owned)
        .ok_or_else(|| format!("no deploy_kernel in driver_info of {id}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn deploy_kernel_and_ramdisk_urls_follow_a_changed_provisioning_ip() {
    let _shared = crate::support::shared();
    require(&["ip"]);
    let stack = Stack::get();
    let netns = Netns::new("dk");
    let n = netns.name.as_str();
    ip(&[
        "-n", n, "link", "add", "prov0", "type", "veth", "peer", "name", "prov1",
    ]);
    ip(&["-n", n, "addr", "add", "10.78.0.1/24", "dev", "prov0"]);
    for link in ["prov0", "prov1"] {
        ip(&["-n", n, "link", "set", link, "up"]);
    }
    let dir = TempDir::new("deploy-images");
    let (_netboot, images) = NetbootThread::start(netns.handle(), dir.path());
    assert!(
        images.kernel_url().starts_with("http://10.78.0.1:"),
        "{}",
        images.kernel_url()
    );

    let client = stack.kube_client().await;
    bmo::api::install::install(&client, Duration::from_secs(60))
        .await
        .expect("install CRDs");
    let ns = new_namespace(&client, "deploy-images").await;
    let settings = ControllerSettings {
        namespace: Some(ns.clone()),
        concurrency: 4,
        provisioning_limit: 20,
        max_backoff: Duration::from_secs(5),
        steady_poll: bmo::controller::host::state_machine::STEADY_POLL,
        start_settle: Duration::ZERO,
        deploy_ramdisk: DeployRamdisk::default(),
    };
    let provisioner = IronicProvisioner::new(stack.ironic().await, ProvisionerSettings::default());
    let ctx = Context::new(client.clone(), provisioner, settings).with_deploy_images(images);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let controller = tokio::spawn(bmo::controller::host::run(Arc::new(ctx), async move {
        let _ = stopped.await;
    }));

    // A fake-hardware host with no image: it settles in available.
    let name = "follower";
    create_bmc_secret(&client, &ns, &format!("{name}-bmc"), "admin", "password").await;
    let host: BareMetalHost = serde_json::from_value(json!({
        "apiVersion": "metal3.io/v1alpha1",
        "kind": "BareMetalHost",
        "metadata": {"name": name},
        "spec": {
            "online": false,
            "bootMACAddress": unique_mac(),
            "bmc": {"address": format!("fake://{name}"), "credentialsName": format!("{name}-bmc")},
        }
    }))
    .expect("valid host");
    let hosts: Api<BareMetalHost> = Api::namespaced(client.clone(), &ns);
    hosts
        .create(&PostParams::default(), &host)
        .await
        .expect("create host");
    crate::support::wait_for_state(
        &hosts,
        name,
        ProvisioningState::Available,
        Duration::from_secs(120),
    )
    .await;
    eventually(
        "driver_info to point at the first address",
        Duration::from_secs(30),
        || async {
            let kernel = deploy_kernel(&hosts, name).await?;
            if kernel.starts_with("http://10.78.0.1:")
                && kernel.ends_with("/images/ironic-python-agent.kernel")
            {
                Ok(())
            } else {
                Err(kernel)
            }
        },
    )
    .await;

    // The provisioning IP moves; bmo notices within its 5 s follow interval and every
    // host is reconciled at once.
    ip(&["-n", n, "addr", "del", "10.78.0.1/24", "dev", "prov0"]);
    ip(&["-n", n, "addr", "add", "10.78.0.2/24", "dev", "prov0"]);
    eventually(
        "driver_info to follow the new address",
        Duration::from_secs(30),
        || async {
            let kernel = deploy_kernel(&hosts, name).await?;
            if kernel.starts_with("http://10.78.0.2:") {
                Ok(())
            } else {
                Err(kernel)
            }
        },
    )
    .await;

    // Leave Ironic as found: the host (and its node) is deleted by the controller.
    hosts
        .delete(name, &DeleteParams::default())
        .await
        .expect("delete host");
    eventually("the host to be gone", Duration::from_secs(120), || async {
        match hosts.get_opt(name).await {
            Ok(None) => Ok(()),
            Ok(Some(h)) => Err(h.provisioning_state().to_string()),
            Err(e) => Err(e.to_string()),
        }
    })
    .await;
    let _ = stop.send(());
    let _ = controller.await;
}
