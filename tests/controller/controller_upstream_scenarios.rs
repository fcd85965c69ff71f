//! Upstream's end-to-end scenarios that need no agent, at the fidelity of real
//! Ironic with fake hardware, through `bmo run` and the real kube-apiserver:
//! `re_inspection`, `externally_provisioned` and the power annotations of
//! `basic_ops` with `force`.

use std::collections::BTreeSet;
use std::sync::Mutex;
use std::time::Duration;

use bmo::api::{BareMetalHost, ProvisioningState};
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::json;

use crate::support::{
    BmoProcess, Stack, bmo_run, create_bmc_secret, eventually, fake_host, installed_namespace,
    unique_mac,
};

struct Site {
    hosts: Api<BareMetalHost>,
    client: kube::Client,
    ns: String,
    bmo: BmoProcess,
}

impl Site {
    async fn start(prefix: &str) -> Site {
        let (client, ns) = installed_namespace(prefix).await;
        let (bmo, _) = bmo_run(&ns, &[("RUST_LOG", "info,bmo=debug")]);
        Site {
            hosts: Api::namespaced(client.clone(), &ns),
            client,
            ns,
            bmo,
        }
    }

    /// Creates the fake-hardware host `name` with `spec` merged over
    /// [`fake_host`]'s.
    async fn create(&self, name: &str, spec: serde_json::Value) {
        create_bmc_secret(
            &self.client,
            &self.ns,
            &format!("{name}-bmc"),
            "admin",
            "password",
        )
        .await;
        let mut manifest = fake_host(name, &unique_mac());
        if let (Some(base), Some(extra)) = (manifest["spec"].as_object_mut(), spec.as_object()) {
            base.extend(extra.clone());
        }
        let host: BareMetalHost = serde_json::from_value(manifest).expect("valid host");
        self.hosts
            .create(&PostParams::default(), &host)
            .await
            .expect("create host");
    }

    async fn patch(&self, name: &str, patch: serde_json::Value) {
        self.hosts
            .patch(name, &PatchParams::default(), &Patch::Merge(patch))
            .await
            .expect("patch host");
    }

    /// Waits until `done` holds for `name`, adding each state seen to `seen`.
    async fn until(
        &self,
        name: &str,
        what: &str,
        seen: &Mutex<BTreeSet<String>>,
        done: impl Fn(&BareMetalHost) -> bool,
    ) -> BareMetalHost {
        eventually(
            &format!("{name}: {what}"),
            Duration::from_secs(180),
            || async {
                let h = self.hosts.get(name).await.map_err(|e| e.to_string())?;
                seen.lock()
                    .expect("lock")
                    .insert(h.provisioning_state().as_str().to_owned());
                if done(&h) {
                    return Ok(h);
                }
                let st = h.status.clone().unwrap_or_default();
                Err(format!(
                    "{} {:?} {}; log: {}",
                    h.provisioning_state(),
                    st.error_type,
                    st.error_message,
                    self.bmo.log_tail(3)
                ))
            },
        )
        .await
    }

    async fn until_state(&self, name: &str, state: ProvisioningState) -> BTreeSet<String> {
        let seen = Mutex::new(BTreeSet::new());
        self.until(name, state.as_str(), &seen, |h| {
            h.provisioning_state() == state
        })
        .await;
        seen.into_inner().expect("lock")
    }
}

fn inspect_started(host: &BareMetalHost) -> Option<String> {
    let history = host.status.as_ref()?.operation_history.as_ref()?;
    let start = history.inspect.as_ref()?.start.as_ref()?;
    Some(start.0.to_string())
}

#[tokio::test]
async fn the_inspect_annotation_inspects_an_available_host_again_and_is_cleared() {
    let _shared = crate::support::shared();
    let site = Site::start("reinspect").await;
    let name = "again";
    site.create(name, json!({"image": null})).await;
    site.until_state(name, ProvisioningState::Available).await;
    let first =
        inspect_started(&site.hosts.get(name).await.expect("host")).expect("inspected once");

    site.patch(
        name,
        json!({"metadata": {"annotations": {"inspect.metal3.io": ""}}}),
    )
    .await;
    let seen = Mutex::new(BTreeSet::new());
    let host = site
        .until(name, "inspected again, annotation gone", &seen, |h| {
            h.provisioning_state() == ProvisioningState::Available
                && !h.annotations().contains_key("inspect.metal3.io")
                && inspect_started(h).is_some_and(|s| s != first)
        })
        .await;
    assert!(host.status.and_then(|s| s.hardware).is_some());
    assert!(
        seen.into_inner().expect("lock").contains("inspecting"),
        "passed through inspecting"
    );
}

#[tokio::test]
async fn externally_provisioned_is_left_by_deprovisioning_or_as_provisioned_and_entered_from_available()
 {
    let _shared = crate::support::shared();
    let site = Site::start("extprov").await;
    // Without an image: leaving it deprovisions the host, which becomes available.
    site.create(
        "bare",
        json!({"externallyProvisioned": true, "image": null}),
    )
    .await;
    // With an image: leaving it keeps the host provisioned, with no deployment.
    site.create("imaged", json!({"externallyProvisioned": true}))
        .await;
    // From available into externally provisioned.
    site.create("later", json!({"image": null})).await;
    for name in ["bare", "imaged"] {
        let seen = site
            .until_state(name, ProvisioningState::ExternallyProvisioned)
            .await;
        let host = site.hosts.get(name).await.expect("host");
        assert_eq!(
            inspect_started(&host),
            None,
            "{name} was inspected: {seen:?}"
        );
        site.patch(name, json!({"spec": {"externallyProvisioned": false}}))
            .await;
    }
    let seen = site.until_state("bare", ProvisioningState::Available).await;
    assert!(seen.contains("deprovisioning"), "{seen:?}");
    let seen = site
        .until_state("imaged", ProvisioningState::Provisioned)
        .await;
    assert!(
        !seen.contains("provisioning"),
        "imaged was deployed: {seen:?}"
    );
    let host = site.hosts.get("imaged").await.expect("host");
    assert!(
        host.status
            .and_then(|s| s.provisioning.image)
            .is_some_and(|i| i.url.ends_with("demo.qcow2")),
        "the image counts as provisioned"
    );

    // From available into externally provisioned, as upstream's adoption takes the
    // node: `later`'s, manageable since its inspection, is adopted (active); `bare`'s,
    // available since its deprovisioning, is left as it is.
    site.until_state("later", ProvisioningState::Available)
        .await;
    site.externally_provisioned_from_available("later", "active")
        .await;
    site.externally_provisioned_from_available("bare", "available")
        .await;
}

impl Site {
    /// Marks the available host `name` externally provisioned, then checks that it
    /// stays so without an error through the reconciles after, and that its node
    /// ends in `node_state`.
    async fn externally_provisioned_from_available(&self, name: &str, node_state: &str) {
        self.patch(name, json!({"spec": {"externallyProvisioned": true}}))
            .await;
        self.until_state(name, ProvisioningState::ExternallyProvisioned)
            .await;
        // An annotation change makes bmo reconcile at once: the registration check
        // and the adoption that follows it.
        self.patch(
            name,
            json!({"metadata": {"annotations": {"test.bmo/poke": "1"}}}),
        )
        .await;
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while std::time::Instant::now() < deadline {
            let host = self.hosts.get(name).await.expect("host");
            assert_eq!(
                host.provisioning_state(),
                ProvisioningState::ExternallyProvisioned
            );
            let status = host.status.unwrap_or_default();
            assert_eq!(status.error_type, None, "{name}: {}", status.error_message);
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        let host = self.hosts.get(name).await.expect("host");
        let node = host.status.expect("status").provisioning.id;
        let node = Stack::get()
            .ironic()
            .await
            .get_node(&node)
            .await
            .expect("Ironic answers")
            .expect("the node");
        assert_eq!(node.provision_state(), node_state, "{name}'s node");
    }
}

#[tokio::test]
async fn forced_reboot_and_power_off_annotations_act_on_an_available_host() {
    let _shared = crate::support::shared();
    let site = Site::start("power").await;
    let name = "cycled";
    site.create(name, json!({"image": null})).await;
    site.until_state(name, ProvisioningState::Available).await;
    let seen = Mutex::new(BTreeSet::new());
    let powered =
        |on: bool| move |h: &BareMetalHost| h.status.as_ref().is_some_and(|s| s.powered_on == on);
    site.until(name, "powered on", &seen, powered(true)).await;
    let ironic = Stack::get().ironic().await;
    let node = site
        .hosts
        .get(name)
        .await
        .expect("host")
        .status
        .expect("status")
        .provisioning
        .id;

    // The one-shot reboot: done and removed.
    site.patch(
        name,
        json!({"metadata": {"annotations": {"reboot.metal3.io": "{\"force\": true}"}}}),
    )
    .await;
    site.until(name, "rebooted, annotation gone, on", &seen, |h| {
        !h.annotations().contains_key("reboot.metal3.io")
            && h.status.as_ref().is_some_and(|s| s.powered_on)
    })
    .await;

    // A suffixed annotation holds the host off until removed.
    let off = "reboot.metal3.io/poweroff";
    site.patch(
        name,
        json!({"metadata": {"annotations": {off: "{\"force\": true}"}}}),
    )
    .await;
    site.until(name, "powered off", &seen, powered(false)).await;
    let power = |node: String| {
        let ironic = ironic.clone();
        async move {
            ironic
                .get_node(&node)
                .await
                .ok()
                .flatten()
                .and_then(|n| n.power_state)
        }
    };
    assert_eq!(power(node.clone()).await.as_deref(), Some("power off"));
    site.patch(name, json!({"metadata": {"annotations": {off: null}}}))
        .await;
    site.until(name, "powered on again", &seen, powered(true))
        .await;
    assert_eq!(power(node).await.as_deref(), Some("power on"));
}

#[tokio::test]
async fn a_host_with_inspection_disabled_takes_the_hardware_data_made_before_it() {
    let _shared = crate::support::shared();
    let site = Site::start("extinspect").await;
    let name = "outside";
    let details = json!({"ramMebibytes": 6144, "hostname": "inspected-elsewhere",
                         "cpu": {"arch": "x86_64", "count": 4}});
    let data: bmo::api::HardwareData = serde_json::from_value(json!({
        "apiVersion": "metal3.io/v1alpha1", "kind": "HardwareData",
        "metadata": {"name": name},
        "spec": {"hardware": details}
    }))
    .expect("valid HardwareData");
    Api::<bmo::api::HardwareData>::namespaced(site.client.clone(), &site.ns)
        .create(&PostParams::default(), &data)
        .await
        .expect("create HardwareData");
    site.create(name, json!({"inspectionMode": "disabled", "image": null}))
        .await;
    let seen = site.until_state(name, ProvisioningState::Available).await;
    assert!(!seen.contains("inspecting"), "{seen:?}");
    let host = site.hosts.get(name).await.expect("host");
    assert_eq!(inspect_started(&host), None, "not inspected");
    let hardware = serde_json::to_value(host.status.and_then(|s| s.hardware)).expect("json");
    assert_eq!(hardware["ramMebibytes"], 6144);
    assert_eq!(hardware["hostname"], "inspected-elsewhere");
}
