//! The host controller end to end: `bmo run` against the real kube-apiserver and
//! Ironic takes BareMetalHosts through their lifecycle.

use std::collections::BTreeSet;
use std::sync::Mutex;
use std::time::Duration;

use bmo::api::{BareMetalHost, ProvisioningState};
use k8s_openapi::api::core::v1::{Event, Secret};
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::json;

use crate::support::{
    BmoProcess, Stack, bmo_run, create_bmc_secret, eventually, fake_host, new_namespace, unique_mac,
};

/// A namespace with CRDs installed and a `bmo run` watching only it.
struct Site {
    ns: String,
    client: kube::Client,
    bmo: BmoProcess,
    /// Address of bmo's `/healthz`, `/readyz` and `/metrics`.
    health: String,
}

impl Site {
    async fn start(prefix: &str) -> Site {
        let stack = Stack::get();
        let client = stack.kube_client().await;
        bmo::api::install::install(&client, Duration::from_secs(60))
            .await
            .expect("install CRDs");
        let ns = new_namespace(&client, prefix).await;
        let (bmo, health) = bmo_run(&ns, &[("RUST_LOG", "info,bmo=debug")]);
        Site {
            ns,
            client,
            bmo,
            health,
        }
    }

    /// bmo's `/metrics` text.
    async fn metrics(&self) -> String {
        let url = format!("http://{}/metrics", self.health);
        let response = reqwest::get(&url).await.expect("GET /metrics");
        assert!(
            response.status().is_success(),
            "{url}: {}",
            response.status()
        );
        response.text().await.expect("metrics body")
    }

    fn hosts(&self) -> Api<BareMetalHost> {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    async fn secret(&self, name: &str, username: &str, password: &str) {
        create_bmc_secret(&self.client, &self.ns, name, username, password).await;
    }

    async fn create_host(&self, manifest: serde_json::Value) -> BareMetalHost {
        let host: BareMetalHost = serde_json::from_value(manifest).expect("valid host");
        self.hosts()
            .create(&PostParams::default(), &host)
            .await
            .expect("create host")
    }

    /// Creates the fake-hardware host `name` with its Secret and waits until it is
    /// provisioned; returns it and the states seen on the way.
    async fn provision_fake_host(&self, name: &str) -> (BareMetalHost, BTreeSet<String>) {
        self.secret(&format!("{name}-bmc"), "admin", "password")
            .await;
        self.create_host(fake_host(name, &unique_mac())).await;
        let seen = Mutex::new(BTreeSet::new());
        let host = self
            .wait_state(
                name,
                ProvisioningState::Provisioned,
                Duration::from_secs(240),
                &seen,
            )
            .await;
        (host, seen.into_inner().expect("lock"))
    }

    /// Waits until `name` is in `state`, adding every state seen on the way to `seen`.
    async fn wait_state(
        &self,
        name: &str,
        state: ProvisioningState,
        timeout: Duration,
        seen: &Mutex<BTreeSet<String>>,
    ) -> BareMetalHost {
        let hosts = self.hosts();
        eventually(&format!("{name} to be {state}"), timeout, || async {
            let h = hosts.get(name).await.map_err(|e| e.to_string())?;
            let current = h.provisioning_state();
            seen.lock()
                .expect("lock")
                .insert(current.as_str().to_owned());
            if current == state {
                Ok(h)
            } else {
                let st = h.status.clone().unwrap_or_default();
                Err(format!(
                    "{current} ({:?} {}) log tail: {}",
                    st.error_type,
                    st.error_message,
                    self.bmo.log_tail(5)
                ))
            }
        })
        .await
    }
}

#[tokio::test]
async fn fake_hardware_host_goes_from_registering_to_provisioned_and_back_out() {
    let _shared = crate::support::shared();
    let site = Site::start("lifecycle").await;
    let name = "worker-0";
    let (host, seen) = site.provision_fake_host(name).await;
    // Polling (every 250 ms) can miss short states, but the long ones must show.
    // Registering is short now that a registered node is read from the shared node
    // list: the `Registered` event below shows it happened.
    assert!(
        seen.contains("provisioning"),
        "never saw provisioning: {seen:?}"
    );
    let status = host.status.clone().expect("status");
    assert!(
        !status.provisioning.id.is_empty(),
        "status.provisioning.ID is the Ironic node"
    );
    assert_eq!(
        status.provisioning.image.as_ref().map(|i| i.url.as_str()),
        Some("http://127.0.0.1/images/demo.qcow2")
    );
    let provisioned = status
        .conditions
        .iter()
        .find(|c| c.type_ == "Provisioned")
        .expect("Provisioned condition");
    assert_eq!(provisioned.status, "True");
    let hosts = site.hosts();
    eventually(
        "provisioned host with online: true to report power on",
        Duration::from_secs(60),
        || async {
            let h = hosts.get(name).await.map_err(|e| e.to_string())?;
            if h.status.as_ref().is_some_and(|s| s.powered_on) {
                Ok(())
            } else {
                Err(format!("poweredOn false; log: {}", site.bmo.log_tail(5)))
            }
        },
    )
    .await;
    let history = status.operation_history.expect("operation history");
    assert!(
        history.provision.and_then(|p| p.end).is_some(),
        "provisioning end recorded"
    );

    let ironic = Stack::get().ironic().await;
    let node = ironic
        .get_node(&status.provisioning.id)
        .await
        .expect("get node")
        .expect("node exists");
    assert_eq!(node.provision_state(), "active");
    assert_eq!(
        node.name.as_deref(),
        Some(format!("{}~{name}", site.ns).as_str())
    );

    // bmo posts an event after the status write that shows the state.
    let events: Api<Event> = Api::namespaced(site.client.clone(), &site.ns);
    eventually(
        "the lifecycle's events",
        Duration::from_secs(10),
        || async {
            let reasons: BTreeSet<String> = events
                .list(&ListParams::default())
                .await
                .map_err(|e| e.to_string())?
                .items
                .into_iter()
                .filter_map(|e| e.reason)
                .collect();
            let missing: Vec<&str> = [
                "BMCAccessValidated",
                "Registered",
                "InspectionStarted",
                "InspectionComplete",
                "ProvisioningComplete",
            ]
            .into_iter()
            .filter(|r| !reasons.contains(*r))
            .collect();
            if missing.is_empty() {
                Ok(())
            } else {
                Err(format!("no {missing:?} event among {reasons:?}"))
            }
        },
    )
    .await;

    // Prometheus sees what the user saw, under upstream's metric names.
    let metrics = site.metrics().await;
    let host_labels = format!(r#"namespace="{}",host="{name}""#, site.ns);
    for expected in [
        r#"metal3_provisioning_state_change_total{prev_state="provisioning",new_state="provisioned"}"#.to_owned(),
        format!("metal3_reconcile_total{{{host_labels}}}"),
        format!("metal3_operation_provision_duration_seconds_count{{{host_labels}}} 1"),
        format!("metal3_operation_register_duration_seconds_count{{{host_labels}}} 1"),
    ] {
        assert!(
            metrics.lines().any(|l| l.starts_with(&expected)),
            "no {expected} in /metrics:\n{metrics}"
        );
    }

    // Deleting a provisioned host deprovisions it and removes the Ironic node.
    site.hosts()
        .delete(name, &DeleteParams::default())
        .await
        .expect("delete host");
    eventually("host to be gone", Duration::from_secs(240), || async {
        match hosts.get_opt(name).await.map_err(|e| e.to_string())? {
            None => Ok(()),
            Some(h) => Err(format!(
                "still {}; log: {}",
                h.provisioning_state(),
                site.bmo.log_tail(5)
            )),
        }
    })
    .await;
    assert!(
        ironic
            .get_node(&status.provisioning.id)
            .await
            .expect("get node")
            .is_none(),
        "Ironic node deleted"
    );
    // A deleted host's own series go with it; the totals stay.
    let metrics = site.metrics().await;
    assert!(
        !metrics.contains(&host_labels),
        "series of the deleted host remain:\n{metrics}"
    );
    assert!(metrics.contains("metal3_provisioning_state_change_total"));
}

fn redfish_host(name: &str, system_index: usize) -> serde_json::Value {
    let stack = Stack::get();
    let system = &stack.redfish_system_ids[system_index];
    let emulator = stack
        .redfish_url
        .as_str()
        .trim_end_matches('/')
        .replace("http://", "");
    json!({
        "apiVersion": "metal3.io/v1alpha1",
        "kind": "BareMetalHost",
        "metadata": {"name": name},
        "spec": {
            "online": false,
            "bootMACAddress": unique_mac(),
            "inspectionMode": "disabled",
            "automatedCleaningMode": "disabled",
            "bmc": {
                "address": format!("redfish+http://{emulator}/redfish/v1/Systems/{system}"),
                "credentialsName": format!("{name}-bmc")
            }
        }
    })
}

async fn registration_error(site: &Site, name: &str) -> BareMetalHost {
    let hosts = site.hosts();
    eventually(
        &format!("{name} to report a registration error"),
        Duration::from_secs(120),
        || async {
            let h = hosts.get(name).await.map_err(|e| e.to_string())?;
            let st = h.status.clone().unwrap_or_default();
            if st.error_type == Some(bmo::api::ErrorType::Registration)
                && h.provisioning_state() == ProvisioningState::Registering
            {
                Ok(h)
            } else {
                Err(format!(
                    "{} {:?} {}; log: {}",
                    h.provisioning_state(),
                    st.error_type,
                    st.error_message,
                    site.bmo.log_tail(5)
                ))
            }
        },
    )
    .await
}

#[tokio::test]
async fn wrong_bmc_password_is_reported_and_fixing_the_secret_lets_the_host_proceed() {
    let _shared = crate::support::shared();
    let site = Site::start("badcreds").await;
    let name = "redfish-0";
    let stack = Stack::get();
    let wrong = "not-the-password";
    site.secret(
        &format!("{name}-bmc"),
        &stack.redfish_credentials.username,
        wrong,
    )
    .await;
    let created = site.create_host(redfish_host(name, 0)).await;

    let failed = registration_error(&site, name).await;
    let message = failed.status.clone().unwrap_or_default().error_message;
    assert!(
        !message.contains(wrong),
        "the password leaked into errorMessage: {message}"
    );
    assert!(!message.is_empty());
    let ready = failed
        .status
        .clone()
        .unwrap_or_default()
        .conditions
        .into_iter()
        .find(|c| c.type_ == "Manageable")
        .expect("Manageable");
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_str()),
        ("False", "RegistrationFailed")
    );

    // Fix the password in place: the watch on the Secret wakes the host up.
    let secrets: Api<Secret> = Api::namespaced(site.client.clone(), &site.ns);
    let patch = json!({"stringData": {"password": stack.redfish_credentials.password.expose()}});
    secrets
        .patch(
            &format!("{name}-bmc"),
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&patch),
        )
        .await
        .expect("fix the secret");
    let seen = Mutex::new(BTreeSet::new());
    let host = site
        .wait_state(
            name,
            ProvisioningState::Available,
            Duration::from_secs(180),
            &seen,
        )
        .await;
    assert_eq!(
        host.metadata.uid, created.metadata.uid,
        "the host was not recreated"
    );
    let status = host.status.expect("status");
    assert_eq!(status.error_type, None);
    assert_eq!(status.error_count, 0);
    assert!(
        status.good_credentials.is_some(),
        "goodCredentials recorded"
    );
    assert!(
        !site.bmo.log().contains(wrong),
        "the wrong password is in bmo's log"
    );
    assert!(
        !site
            .bmo
            .log()
            .contains(stack.redfish_credentials.password.expose()),
        "the password is in bmo's log"
    );
}

#[tokio::test]
async fn host_stuck_in_registering_with_bad_credentials_can_be_deleted() {
    let _shared = crate::support::shared();
    let site = Site::start("stuckdelete").await;
    let name = "redfish-1";
    site.secret(&format!("{name}-bmc"), "admin", "wrong-password")
        .await;
    site.create_host(redfish_host(name, 1)).await;
    let failed = registration_error(&site, name).await;
    let node_id = failed.status.clone().unwrap_or_default().provisioning.id;

    site.hosts()
        .delete(name, &DeleteParams::default())
        .await
        .expect("delete host");
    let hosts = site.hosts();
    eventually(
        "the stuck host to be gone",
        Duration::from_secs(120),
        || async {
            match hosts.get_opt(name).await.map_err(|e| e.to_string())? {
                None => Ok(()),
                Some(h) => Err(format!(
                    "still {}; log: {}",
                    h.provisioning_state(),
                    site.bmo.log_tail(5)
                )),
            }
        },
    )
    .await;
    if !node_id.is_empty() {
        let ironic = Stack::get().ironic().await;
        assert!(
            ironic.get_node(&node_id).await.expect("get node").is_none(),
            "Ironic node left behind"
        );
    }
}

#[tokio::test]
async fn paused_host_is_left_alone_while_its_neighbour_proceeds() {
    let _shared = crate::support::shared();
    let site = Site::start("paused").await;
    site.secret("paused-bmc", "admin", "password").await;
    site.secret("active-bmc", "admin", "password").await;
    let mut paused = fake_host("paused", &unique_mac());
    paused["metadata"]["annotations"] = json!({"baremetalhost.metal3.io/paused": ""});
    site.create_host(paused).await;
    site.create_host(fake_host("active", &unique_mac())).await;
    let seen = Mutex::new(BTreeSet::new());
    site.wait_state(
        "active",
        ProvisioningState::Provisioned,
        Duration::from_secs(240),
        &seen,
    )
    .await;
    let paused = site.hosts().get("paused").await.expect("get paused host");
    assert!(
        paused.status.is_none(),
        "paused host was touched: {:?}",
        paused.status
    );
    assert!(
        !paused
            .finalizers()
            .iter()
            .any(|f| f == bmo::api::host::FINALIZER),
        "paused host got a finalizer"
    );
}

#[tokio::test]
async fn status_and_hardware_annotations_are_taken_in_and_a_bad_hardware_profile_is_an_error() {
    let _shared = crate::support::shared();
    let site = Site::start("annotations").await;
    let hosts = site.hosts();

    // A host moved from another cluster: its saved status says available, with the
    // hardware inspected there. bmo restores it and does not inspect again.
    let moved = "moved-0";
    site.secret(&format!("{moved}-bmc"), "admin", "password")
        .await;
    let saved_status = json!({
        "operationalStatus": "OK",
        "errorMessage": "",
        "poweredOn": false,
        "errorCount": 0,
        "provisioningFailCount": 0,
        "provisioning": {"state": "available", "ID": ""},
        "hardware": {"systemVendor": {"manufacturer": "Moved Inc", "productName": "M1"}, "ramMebibytes": 4096}
    });
    let mut manifest = fake_host(moved, &unique_mac());
    manifest["metadata"]["annotations"] =
        json!({"baremetalhost.metal3.io/status": saved_status.to_string()});
    site.create_host(manifest).await;

    // Inspection disabled and hardware details supplied from outside.
    let external = "external-0";
    site.secret(&format!("{external}-bmc"), "admin", "password")
        .await;
    let mut manifest = fake_host(external, &unique_mac());
    manifest["metadata"]["annotations"] = json!({
        "inspect.metal3.io": "disabled",
        "inspect.metal3.io/hardwaredetails":
            json!({"systemVendor": {"manufacturer": "Elsewhere Ltd"}, "ramMebibytes": 8192}).to_string()
    });
    site.create_host(manifest).await;

    // A hardware profile that does not exist.
    let profiled = "profiled-0";
    site.secret(&format!("{profiled}-bmc"), "admin", "password")
        .await;
    let mut manifest = fake_host(profiled, &unique_mac());
    manifest["spec"]["hardwareProfile"] = json!("no-such-profile");
    site.create_host(manifest).await;

    let error = eventually(
        "the bad hardwareProfile to be reported",
        Duration::from_secs(60),
        || async {
            let h = hosts.get(profiled).await.map_err(|e| e.to_string())?;
            let st = h.status.clone().unwrap_or_default();
            if st.error_type == Some(bmo::api::ErrorType::Registration) {
                Ok(st.error_message)
            } else {
                Err(format!("{:?} {:?}", h.provisioning_state(), st.error_type))
            }
        },
    )
    .await;
    assert!(
        error.contains("spec.hardwareProfile") && error.contains("no-such-profile"),
        "{error}"
    );

    let seen = Mutex::new(BTreeSet::new());
    site.wait_state(
        moved,
        ProvisioningState::Provisioned,
        Duration::from_secs(120),
        &seen,
    )
    .await;
    let seen = seen.into_inner().expect("lock");
    assert!(
        !seen.contains("inspecting") && !seen.contains("registering"),
        "the restored host went through {seen:?}"
    );
    let host = hosts.get(moved).await.expect("get moved host");
    assert!(
        !annotations_of(&host).contains_key("baremetalhost.metal3.io/status"),
        "status annotation not removed"
    );
    let vendor = host
        .status
        .and_then(|s| s.hardware)
        .and_then(|h| h.system_vendor)
        .and_then(|v| v.manufacturer);
    assert_eq!(vendor.as_deref(), Some("Moved Inc"));

    let host = eventually(
        "external hardware details in the status",
        Duration::from_secs(60),
        || async {
            let h = hosts.get(external).await.map_err(|e| e.to_string())?;
            let has = h
                .status
                .as_ref()
                .and_then(|s| s.hardware.as_ref())
                .is_some();
            if has && !annotations_of(&h).contains_key("inspect.metal3.io/hardwaredetails") {
                Ok(h)
            } else {
                Err(format!("{:?}", h.metadata.annotations))
            }
        },
    )
    .await;
    assert_eq!(
        host.status
            .and_then(|s| s.hardware)
            .and_then(|h| h.ram_mebibytes),
        Some(8192)
    );
    let data: Api<bmo::api::HardwareData> = Api::namespaced(site.client.clone(), &site.ns);
    let stored = data.get(external).await.expect("HardwareData written");
    assert_eq!(
        stored.spec.hardware.and_then(|h| h.ram_mebibytes),
        Some(8192)
    );
}

fn annotations_of(host: &BareMetalHost) -> std::collections::BTreeMap<String, String> {
    host.metadata.annotations.clone().unwrap_or_default()
}

#[tokio::test]
async fn detached_host_leaves_ironic_keeps_its_status_and_deletes_without_deprovisioning() {
    let _shared = crate::support::shared();
    let site = Site::start("detached").await;
    let name = "detach-0";
    let (host, _) = site.provision_fake_host(name).await;
    let node_id = host.status.expect("status").provisioning.id;
    let hosts = site.hosts();
    hosts
        .patch(
            name,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"metadata": {"annotations": {
                "baremetalhost.metal3.io/detached": ""
            }}})),
        )
        .await
        .expect("annotate detached");
    let ironic = Stack::get().ironic().await;
    eventually(
        "the node to leave Ironic and the host to show detached",
        Duration::from_secs(60),
        || async {
            let h = hosts.get(name).await.map_err(|e| e.to_string())?;
            let st = h.status.clone().unwrap_or_default();
            let node = ironic.get_node(&node_id).await.map_err(|e| e.to_string())?;
            if st.operational_status == bmo::api::OperationalStatus::Detached && node.is_none() {
                Ok(())
            } else {
                Err(format!(
                    "{:?}, node present: {}",
                    st.operational_status,
                    node.is_some()
                ))
            }
        },
    )
    .await;
    let host = hosts.get(name).await.expect("get host");
    assert_eq!(
        host.provisioning_state(),
        ProvisioningState::Provisioned,
        "a detached host keeps its state"
    );

    // Deleting it does not deprovision (there is nothing in Ironic to deprovision).
    hosts
        .delete(name, &DeleteParams::default())
        .await
        .expect("delete");
    let states = Mutex::new(BTreeSet::new());
    let states_ref = &states;
    eventually(
        "the detached host to be gone",
        Duration::from_secs(60),
        || {
            let hosts = hosts.clone();
            async move {
                match hosts.get_opt(name).await.map_err(|e| e.to_string())? {
                    None => Ok(()),
                    Some(h) => {
                        let state = h.provisioning_state().as_str().to_owned();
                        states_ref.lock().expect("lock").insert(state.clone());
                        Err(state)
                    }
                }
            }
        },
    )
    .await;
    let states = states.into_inner().expect("lock");
    assert!(
        !states.contains("deprovisioning"),
        "a detached host was deprovisioned: {states:?}"
    );
    assert!(
        ironic.get_node(&node_id).await.expect("get node").is_none(),
        "no node came back"
    );
}
