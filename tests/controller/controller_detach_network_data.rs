//! Upstream's `forced_detachment` scenario and the preprovisioning network data, with
//! `bmo run`, the real kube-apiserver and Ironic, and Redfish hosts on a sushy-emulator
//! of the test's own (its power and boot settings are not shared with other tests).
//!
//! - A host is detached with `{"force": true}` while Ironic waits in `inspect wait`,
//!   and others while it waits in `wait call-back` (deploying): each node leaves
//!   Ironic and the host shows `detached` in the state it was in. Deleting it goes
//!   straight to deleting, with no deprovisioning and no power-off first; removing
//!   the annotation instead registers a new node and deploys again.
//! - A host naming a missing `preprovisioningNetworkDataName` Secret shows a
//!   registration error that names the Secret and key; once the Secret exists, the
//!   node carries its network data.

use std::collections::BTreeSet;
use std::sync::Mutex;
use std::time::Duration;

use bmo::api::{BareMetalHost, OperationalStatus, ProvisioningState};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::support::{
    BmoProcess, PrivateSushy, Stack, bmo_run, create_bmc_secret, eventually, new_namespace,
    unique_mac,
};

struct Site {
    ns: String,
    client: kube::Client,
    bmo: BmoProcess,
    sushy: PrivateSushy,
}

impl Site {
    async fn start(prefix: &str, systems: usize) -> Site {
        let client = Stack::get().kube_client().await;
        bmo::api::install::install(&client, Duration::from_secs(60))
            .await
            .expect("install CRDs");
        let ns = new_namespace(&client, prefix).await;
        let (bmo, _) = bmo_run(&ns, &[("RUST_LOG", "info,bmo=debug")]);
        Site {
            ns,
            client,
            bmo,
            sushy: PrivateSushy::start(prefix, systems),
        }
    }

    fn hosts(&self) -> Api<BareMetalHost> {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    /// Creates the Redfish host `name` on system `system` with its BMC Secret and
    /// `spec` merged over an online host with agent inspection.
    async fn create_host(&self, name: &str, system: usize, spec: serde_json::Value) {
        let creds = &Stack::get().redfish_credentials;
        create_bmc_secret(
            &self.client,
            &self.ns,
            &format!("{name}-bmc"),
            &creds.username,
            creds.password.expose(),
        )
        .await;
        let emulator = self.sushy.url.as_str().trim_end_matches('/');
        let address = format!(
            "{}/redfish/v1/Systems/{}",
            emulator.replacen("http://", "redfish+http://", 1),
            self.sushy.system_ids[system]
        );
        let mut manifest = json!({
            "apiVersion": "metal3.io/v1alpha1",
            "kind": "BareMetalHost",
            "metadata": {"name": name},
            "spec": {
                "online": true,
                "bootMACAddress": unique_mac(),
                "bmc": {"address": address, "credentialsName": format!("{name}-bmc")}
            }
        });
        if let (Some(base), Some(extra)) = (manifest["spec"].as_object_mut(), spec.as_object()) {
            base.extend(extra.clone());
        }
        let host: BareMetalHost = serde_json::from_value(manifest).expect("valid host");
        self.hosts()
            .create(&PostParams::default(), &host)
            .await
            .expect("create host");
    }

    /// Waits until the node of `name` is in Ironic's `ironic_state`; its UUID.
    async fn node_in(&self, name: &str, ironic_state: &str) -> String {
        let ironic = Stack::get().ironic().await;
        let hosts = self.hosts();
        eventually(
            &format!("the node of {name} to be in {ironic_state}"),
            Duration::from_secs(180),
            || async {
                let h = hosts.get(name).await.map_err(|e| e.to_string())?;
                let st = h.status.clone().unwrap_or_default();
                let id = st.provisioning.id.clone();
                let node = match id.is_empty() {
                    true => None,
                    false => ironic.get_node(&id).await.map_err(|e| e.to_string())?,
                };
                match node {
                    Some(n) if n.provision_state() == ironic_state => Ok(id),
                    n => Err(format!(
                        "host {} ({:?} {}), node {:?}; log: {}",
                        h.provisioning_state(),
                        st.error_type,
                        st.error_message,
                        n.map(|n| n.provision_state().to_owned()),
                        self.bmo.log_tail(5)
                    )),
                }
            },
        )
        .await
    }

    async fn annotate(&self, name: &str, key: &str, value: Option<&str>) {
        self.hosts()
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"annotations": {key: value}}})),
            )
            .await
            .expect("annotate");
    }

    /// Force-detaches `name` while its node waits in `ironic_state`; checks that the
    /// node is gone and the host stays in `state`. Returns the node's UUID.
    async fn force_detach(
        &self,
        name: &str,
        ironic_state: &str,
        state: ProvisioningState,
    ) -> String {
        let node = self.node_in(name, ironic_state).await;
        self.annotate(
            name,
            "baremetalhost.metal3.io/detached",
            Some(r#"{"force": true}"#),
        )
        .await;
        let ironic = Stack::get().ironic().await;
        let hosts = self.hosts();
        let detached = eventually(
            &format!("{name} to be detached and its node gone"),
            Duration::from_secs(120),
            || async {
                let h = hosts.get(name).await.map_err(|e| e.to_string())?;
                let st = h.status.clone().unwrap_or_default();
                let present = ironic.get_node(&node).await.map_err(|e| e.to_string())?;
                if st.operational_status == OperationalStatus::Detached && present.is_none() {
                    Ok(h)
                } else {
                    Err(format!(
                        "{:?} {:?}, node {:?}; log: {}",
                        st.operational_status,
                        st.error_type,
                        present.map(|n| n.provision_state().to_owned()),
                        self.bmo.log_tail(5)
                    ))
                }
            },
        )
        .await;
        assert_eq!(detached.provisioning_state(), state, "the state stays");
        node
    }

    /// Deletes `name` and checks that it went without deprovisioning or powering off
    /// and that `node` did not come back.
    async fn delete_without_deprovisioning(&self, name: &str, node: &str) {
        let ironic = Stack::get().ironic().await;
        let hosts = self.hosts();
        hosts
            .delete(name, &DeleteParams::default())
            .await
            .expect("delete");
        let seen = Mutex::new(BTreeSet::new());
        eventually(
            &format!("{name} to be gone"),
            Duration::from_secs(120),
            || async {
                match hosts.get_opt(name).await.map_err(|e| e.to_string())? {
                    None => Ok(()),
                    Some(h) => {
                        let current = h.provisioning_state().as_str().to_owned();
                        seen.lock().expect("lock").insert(current.clone());
                        Err(current)
                    }
                }
            },
        )
        .await;
        let seen = seen.into_inner().expect("lock");
        for skipped in ["deprovisioning", "powering off before delete"] {
            assert!(
                !seen.contains(skipped),
                "{name} went through {skipped}: {seen:?}"
            );
        }
        assert!(
            ironic.get_node(node).await.expect("get node").is_none(),
            "no node came back for {name}"
        );
    }
}

#[tokio::test]
async fn forced_detach_interrupts_inspection_and_deployment_then_reattach_or_delete() {
    let _shared = crate::support::shared();
    let site = Site::start("force-detach", 3).await;
    // Ironic checks with HEAD that the image exists; no agent comes to check the
    // checksum, so the deployment waits for its call-back until detached.
    let image = Stack::get()
        .var("DEPLOY_KERNEL_URL")
        .expect("DEPLOY_KERNEL_URL in the stack's environment")
        .to_owned();
    let deploying = json!({
        "inspectionMode": "disabled",
        "automatedCleaningMode": "disabled",
        "image": {"url": image, "checksum": "0123456789abcdef0123456789abcdef", "checksumType": "md5"}
    });
    site.create_host("inspected", 0, json!({})).await;
    site.create_host("deployed", 1, deploying.clone()).await;
    site.create_host("reattached", 2, deploying).await;

    let node = site
        .force_detach("inspected", "inspect wait", ProvisioningState::Inspecting)
        .await;
    site.delete_without_deprovisioning("inspected", &node).await;
    let node = site
        .force_detach(
            "deployed",
            "wait call-back",
            ProvisioningState::Provisioning,
        )
        .await;
    site.delete_without_deprovisioning("deployed", &node).await;

    // Re-attached, the host registers a new node and deploys again.
    let old = site
        .force_detach(
            "reattached",
            "wait call-back",
            ProvisioningState::Provisioning,
        )
        .await;
    site.annotate("reattached", "baremetalhost.metal3.io/detached", None)
        .await;
    let new = site.node_in("reattached", "wait call-back").await;
    assert_ne!(new, old, "a new node");
    let host = site.hosts().get("reattached").await.expect("host");
    let status = host.status.clone().unwrap_or_default();
    assert_eq!(host.provisioning_state(), ProvisioningState::Provisioning);
    assert_eq!(status.operational_status, OperationalStatus::Ok);
}

#[tokio::test]
async fn a_missing_network_data_secret_is_named_until_it_exists_then_the_node_carries_it() {
    let _shared = crate::support::shared();
    let site = Site::start("net-data", 1).await;
    let name = "static";
    site.create_host(
        name,
        0,
        json!({"preprovisioningNetworkDataName": "static-net", "inspectionMode": "disabled"}),
    )
    .await;
    let hosts = site.hosts();
    let message = eventually(
        "a registration error naming the Secret",
        Duration::from_secs(120),
        || async {
            let h = hosts.get(name).await.map_err(|e| e.to_string())?;
            let st = h.status.clone().unwrap_or_default();
            match st.error_type {
                Some(bmo::api::ErrorType::Registration) => Ok(st.error_message),
                other => Err(format!("{other:?}; log: {}", site.bmo.log_tail(5))),
            }
        },
    )
    .await;
    assert!(
        message.contains(&format!("{}/static-net", site.ns)) && message.contains("networkData"),
        "{message}"
    );

    let data = json!({
        "links": [{"id": "eth0", "type": "phy", "ethernet_mac_address": "52:54:00:00:00:01"}],
        "networks": [{"id": "prov", "network_id": "prov", "link": "eth0", "type": "ipv4",
                      "ip_address": "192.0.2.20", "netmask": "255.255.255.0"}],
        "services": []
    });
    let mut secret = Secret::default();
    secret.metadata.name = Some("static-net".into());
    secret.data = Some(
        [(
            "networkData".to_owned(),
            ByteString(data.to_string().into_bytes()),
        )]
        .into(),
    );
    Api::<Secret>::namespaced(site.client.clone(), &site.ns)
        .create(&PostParams::default(), &secret)
        .await
        .expect("create the network data Secret");
    let ironic = Stack::get().ironic().await;
    eventually(
        "the host available, its node holding the network data",
        Duration::from_secs(180),
        || async {
            let h = hosts.get(name).await.map_err(|e| e.to_string())?;
            let st = h.status.clone().unwrap_or_default();
            let node = match st.provisioning.id.is_empty() {
                true => None,
                false => ironic
                    .get_node(&st.provisioning.id)
                    .await
                    .map_err(|e| e.to_string())?,
            };
            let carried = node.as_ref().map(|n| n.network_data.clone());
            if h.provisioning_state() == ProvisioningState::Available
                && st.error_type.is_none()
                && carried == Some(Some(data.clone()))
            {
                Ok(())
            } else {
                Err(format!(
                    "{} {:?}, node network_data {carried:?}; log: {}",
                    h.provisioning_state(),
                    st.error_type,
                    site.bmo.log_tail(5)
                ))
            }
        },
    )
    .await;
}
