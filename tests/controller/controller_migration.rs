//! Taking over from upstream's baremetal-operator in place (docs/migration.md).
//!
//! Each test lays down what upstream's operator (metal3-io/baremetal-operator at
//! 02aa505) leaves behind, as far as its source tells — objects written with plain
//! updates under its field manager, its finalizers on hosts and Secrets, Ironic nodes
//! named `namespace~name` with its interfaces and `driver_info` — then starts bmo on
//! the same cluster and Ironic and checks what a user would see.

use std::collections::BTreeMap;
use std::time::Duration;

use bmo::api::{BareMetalHost, ErrorType, HardwareData, OperationalStatus, ProvisioningState};
use bmo::ironic::{IronicAuth, IronicClient, NodeCreate, ProvisionTarget};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{Event, Secret};
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams,
};
use kube::{Api, ResourceExt};
use serde_json::{Map, Value, json};

use crate::support::{BmoProcess, Stack, bmo_run, eventually, installed_namespace, unique_mac};

/// Upstream's field manager: it names none, so the API server takes the first part of
/// client-go's user agent, the binary's name — `/baremetal-operator` in upstream's
/// image (Dockerfile: `go build ... -o baremetal-operator main.go`).
const UPSTREAM_MANAGER: &str = "baremetal-operator";
/// Upstream's host finalizer (apis/metal3.io/v1alpha1/baremetalhost_types.go).
const HOST_FINALIZER: &str = "baremetalhost.metal3.io";
/// Upstream's Secret finalizer (pkg/secretutils/secret_manager.go: the host
/// finalizer plus "/secret").
const SECRET_FINALIZER: &str = "baremetalhost.metal3.io/secret";
/// What upstream's `BareMetalHost.NewEvent` (apis/metal3.io/v1alpha1/
/// baremetalhost_types.go) puts in every host event.
const EVENT_SOURCE_COMPONENT: &str = "metal3-baremetal-controller";
const EVENT_REPORTING_CONTROLLER: &str = "metal3.io/baremetal-controller";
/// Upstream's reasons around a deprovisioning (pkg/provisioner/ironic/ironic.go).
const UPSTREAM_DEPROVISIONING_REASONS: [&str; 2] =
    ["DeprovisioningStarted", "DeprovisioningComplete"];

fn upstream() -> PostParams {
    PostParams {
        field_manager: Some(UPSTREAM_MANAGER.into()),
        ..Default::default()
    }
}

struct Site {
    ns: String,
    client: kube::Client,
    ironic: IronicClient,
}

impl Site {
    async fn new(prefix: &str) -> Site {
        let (client, ns) = installed_namespace(prefix).await;
        Site {
            ns,
            client,
            ironic: Stack::get().ironic().await,
        }
    }

    fn hosts(&self) -> Api<BareMetalHost> {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    fn secrets(&self) -> Api<Secret> {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    fn start_bmo(&self) -> BmoProcess {
        bmo_run(&self.ns, &[("RUST_LOG", "info,bmo=debug")]).0
    }

    /// The BMC Secret as upstream leaves it: labelled, with its finalizer.
    async fn upstream_secret(&self, name: &str, username: &str, password: &str) -> Secret {
        let mut secret = Secret::default();
        secret.metadata.name = Some(name.into());
        secret.metadata.finalizers = Some(vec![SECRET_FINALIZER.into()]);
        secret.metadata.labels =
            Some([("environment.metal3.io".to_owned(), "baremetal".to_owned())].into());
        secret.data = Some(
            [
                ("username".to_owned(), ByteString(username.into())),
                ("password".to_owned(), ByteString(password.into())),
            ]
            .into(),
        );
        self.secrets()
            .create(&upstream(), &secret)
            .await
            .expect("create secret")
    }

    /// The host as upstream leaves it: its finalizer, the Secret owned by it (not as
    /// controller), and `status` written with a plain update of the status
    /// subresource. Returns the host as stored.
    async fn upstream_host(&self, manifest: Value, status: Value) -> BareMetalHost {
        let mut host: BareMetalHost = serde_json::from_value(manifest).expect("valid host");
        host.metadata.finalizers = Some(vec![HOST_FINALIZER.into()]);
        let hosts = self.hosts();
        let mut host = hosts.create(&upstream(), &host).await.expect("create host");
        let secret_name = host
            .spec
            .bmc
            .as_ref()
            .expect("bmc")
            .credentials_name
            .clone();
        let mut secret = self.secrets().get(&secret_name).await.expect("secret");
        secret.metadata.owner_references = Some(vec![
            k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
                api_version: "metal3.io/v1alpha1".into(),
                kind: "BareMetalHost".into(),
                name: host.name_any(),
                uid: host.uid().expect("uid"),
                ..Default::default()
            },
        ]);
        let secret = self
            .secrets()
            .replace(&secret_name, &upstream(), &secret)
            .await
            .expect("own secret");
        let mut status = status;
        let credentials = json!({
            "credentials": {"name": secret_name, "namespace": self.ns},
            "credentialsVersion": secret.resource_version(),
        });
        status["triedCredentials"] = credentials.clone();
        if status["errorType"].is_null() {
            status["goodCredentials"] = credentials;
        }
        // Raw JSON, as upstream's Go types serialize it.
        let resource = ApiResource::erase::<BareMetalHost>(&());
        let dynamic: Api<DynamicObject> =
            Api::namespaced_with(self.client.clone(), &self.ns, &resource);
        let mut object = dynamic.get(&host.name_any()).await.expect("host");
        object.data["status"] = status;
        dynamic
            .replace_status(&host.name_any(), &upstream(), &object)
            .await
            .expect("write status as upstream");
        host = hosts.get(&host.name_any()).await.expect("host");
        host
    }

    /// `uuid` → (name, provision_state, provision_updated_at) of every Ironic node of
    /// this site's namespace (named `namespace~host`, as upstream and bmo name them;
    /// other tests make nodes in the same Ironic meanwhile).
    async fn ironic_nodes(&self) -> BTreeMap<String, (String, String, String)> {
        let stack = Stack::get();
        let url = stack
            .ironic_endpoint
            .join("nodes?fields=uuid,name,provision_state,provision_updated_at")
            .expect("url");
        let mut request = reqwest::Client::new()
            .get(url)
            .header("X-OpenStack-Ironic-API-Version", "1.89");
        if let IronicAuth::Basic(c) = &stack.ironic_auth {
            request = request.basic_auth(&c.username, Some(c.password.expose()));
        }
        let body: Value = request
            .send()
            .await
            .expect("list nodes")
            .json()
            .await
            .expect("nodes JSON");
        let text = |n: &Value, k: &str| n[k].as_str().unwrap_or_default().to_owned();
        body["nodes"]
            .as_array()
            .expect("nodes")
            .iter()
            .map(|n| {
                (
                    text(n, "uuid"),
                    (
                        text(n, "name"),
                        text(n, "provision_state"),
                        text(n, "provision_updated_at"),
                    ),
                )
            })
            .filter(|(_, (name, _, _))| name.starts_with(&format!("{}~", self.ns)))
            .collect()
    }

    /// Creates an Ironic node the way upstream enrolls one, with a port for `mac`,
    /// and brings it to `target` (`available` or `active`).
    async fn upstream_node(&self, node: NodeCreate, mac: &str, target: &str) -> String {
        let node = self.ironic.create_node(&node).await.expect("create node");
        self.ironic
            .create_port(&node.uuid, mac)
            .await
            .expect("create port");
        let mut steps = vec![("manageable", ProvisionTarget::Manage)];
        steps.push(("available", ProvisionTarget::Provide));
        if target == "active" {
            steps.push(("active", ProvisionTarget::Active));
        }
        for (state, request) in steps {
            self.ironic
                .set_provision_state(&node.uuid, request)
                .await
                .unwrap_or_else(|e| panic!("move to {state}: {e}"));
            crate::support::fake_bios::wait_node(&self.ironic, &node.uuid, state).await;
        }
        node.uuid
    }

    async fn inspect_interface(&self, uuid: &str) -> Option<String> {
        self.ironic
            .get_node(uuid)
            .await
            .expect("get node")
            .expect("node exists")
            .inspect_interface
    }
}

/// The status fields' owners: (manager, operation) of each entry for the status
/// subresource.
fn status_owners(host: &BareMetalHost) -> Vec<(String, String)> {
    host.managed_fields()
        .iter()
        .filter(|e| e.subresource.as_deref() == Some("status"))
        .map(|e| {
            (
                e.manager.clone().unwrap_or_default(),
                e.operation.clone().unwrap_or_default(),
            )
        })
        .collect()
}

/// Waits until bmo has written the host's status (its first reconcile is over).
async fn reconciled(hosts: &Api<BareMetalHost>, name: &str, bmo: &BmoProcess) -> BareMetalHost {
    eventually(
        "bmo to write the status",
        Duration::from_secs(120),
        || async {
            let h = hosts.get(name).await.map_err(|e| e.to_string())?;
            let owners = status_owners(&h);
            if owners.contains(&("bmo".to_owned(), "Apply".to_owned())) {
                Ok(h)
            } else {
                Err(format!("{owners:?}; log: {}", bmo.log_tail(40)))
            }
        },
    )
    .await
}

/// bmo alone owns the status: no field is left to a plain update.
fn assert_only_bmo_owns_the_status(host: &BareMetalHost) {
    assert_eq!(
        status_owners(host),
        [("bmo".to_owned(), "Apply".to_owned())]
    );
}

/// Waits until host `name` is in `state`; on timeout, shows its status and bmo's log.
async fn wait_state(
    hosts: &Api<BareMetalHost>,
    name: &str,
    state: ProvisioningState,
    bmo: &BmoProcess,
) -> BareMetalHost {
    eventually(
        &format!("{name} to be {state}"),
        Duration::from_secs(180),
        || async {
            let h = hosts.get(name).await.map_err(|e| e.to_string())?;
            if h.provisioning_state() == state {
                return Ok(h);
            }
            let st = h.status.clone().unwrap_or_default();
            Err(format!(
                "{} {:?} {:?}; log: {}",
                h.provisioning_state(),
                st.error_type,
                st.error_message,
                bmo.log_tail(40)
            ))
        },
    )
    .await
}

fn redfish_address(system_index: usize) -> (String, String, String) {
    let stack = Stack::get();
    let system = stack.redfish_system_ids[system_index].clone();
    let emulator = stack
        .redfish_url
        .as_str()
        .trim_end_matches('/')
        .replace("http://", "");
    (
        format!("redfish+http://{emulator}/redfish/v1/Systems/{system}"),
        emulator,
        system,
    )
}

fn deploy_images() -> Map<String, Value> {
    let stack = Stack::get();
    let mut info = Map::new();
    for (key, var) in [
        ("deploy_kernel", "DEPLOY_KERNEL_URL"),
        ("deploy_ramdisk", "DEPLOY_RAMDISK_URL"),
    ] {
        if let Some(url) = stack.var(var) {
            info.insert(key.into(), json!(url));
        }
    }
    info
}

#[tokio::test]
async fn status_upstream_wrote_is_cleared_by_bmo_and_events_match_upstreams() {
    let _shared = crate::support::shared();
    let site = Site::new("mig-status").await;
    let name = "provisioned-0";
    let mac = unique_mac();
    let image = json!({
        "url": "http://127.0.0.1/images/demo.qcow2",
        "checksum": "2d4c0c7a8ef4b1f6e0e6c8d8a0f54f3e6b8f0ab7c5d1e2f3a4b5c6d7e8f90a1b",
        "checksumType": "sha256"
    });
    // A fake-hardware node upstream deployed; inspection disabled, which upstream
    // enrolls with inspect_interface=agent (pkg/provisioner/ironic/register.go).
    let node = NodeCreate {
        name: format!("{}~{name}", site.ns),
        driver: "fake-hardware".into(),
        boot_interface: Some("fake".into()),
        deploy_interface: Some("fake".into()),
        inspect_interface: Some("agent".into()),
        management_interface: Some("fake".into()),
        power_interface: Some("fake".into()),
        automated_clean: Some(false),
        properties: json!({"capabilities": "boot_mode:uefi"})
            .as_object()
            .cloned()
            .unwrap_or_default(),
        ..Default::default()
    };
    let uuid = site.upstream_node(node, &mac, "active").await;
    site.upstream_secret(&format!("{name}-bmc"), "admin", "password")
        .await;
    let consumer = json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "Metal3Machine", "name": "m-0", "namespace": site.ns});
    let manifest = json!({
        "apiVersion": "metal3.io/v1alpha1",
        "kind": "BareMetalHost",
        "metadata": {"name": name},
        "spec": {
            "online": true,
            "bootMACAddress": mac,
            "inspectionMode": "disabled",
            "automatedCleaningMode": "disabled",
            "bmc": {"address": format!("fake://{name}"), "credentialsName": format!("{name}-bmc")},
            "image": image,
            "consumerRef": consumer,
        }
    });
    let status = json!({
        "operationalStatus": "OK",
        "lastUpdated": "2026-01-01T00:00:00Z",
        "hardwareProfile": "unknown",
        "provisioning": {
            "state": "provisioned",
            "ID": uuid,
            "image": image,
            "bootMode": "UEFI",
        },
        "poweredOn": true,
        "errorMessage": "",
        "errorCount": 0,
        "provisioningFailCount": 0,
        "operationHistory": {
            "register": {"start": "2026-01-01T00:00:00Z", "end": "2026-01-01T00:00:01Z"},
            "provision": {"start": "2026-01-01T00:00:02Z", "end": "2026-01-01T00:00:03Z"},
        },
    });
    site.upstream_host(manifest, status).await;
    assert_eq!(
        status_owners(&site.hosts().get(name).await.expect("host")),
        [(UPSTREAM_MANAGER.to_owned(), "Update".to_owned())]
    );

    let bmo = site.start_bmo();
    let host = reconciled(&site.hosts(), name, &bmo).await;
    assert_eq!(host.provisioning_state(), ProvisioningState::Provisioned);
    // Deployed: the node keeps the interface it was enrolled with.
    assert_eq!(
        site.inspect_interface(&uuid).await.as_deref(),
        Some("agent")
    );

    // The user removes the image: bmo deprovisions, and clears provisioning.image,
    // which upstream's update had owned.
    site.hosts()
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"image": null}})),
        )
        .await
        .expect("remove image");
    let host = wait_state(&site.hosts(), name, ProvisioningState::Available, &bmo).await;
    let status = host.status.clone().expect("status");
    assert_eq!(status.provisioning.image, None, "stale provisioning.image");
    assert_only_bmo_owns_the_status(&host);
    assert_eq!(status.provisioning.id, uuid, "same node");
    assert_eq!(status.error_type, None);
    assert_eq!(status.error_message, "");
    assert_eq!(status.operational_status, OperationalStatus::Ok);
    // Kept as bmo decides: what upstream recorded and bmo has no reason to change.
    assert_eq!(status.hardware_profile.as_deref(), Some("unknown"));
    let history = status.operation_history.clone().unwrap_or_default();
    assert!(
        history.register.and_then(|r| r.end).is_some(),
        "upstream's registration time kept"
    );
    // poweredOn settles on what bmo sees of the node, whoever wrote it before; a
    // power state Ironic does not know keeps what was recorded (upstream's `true`).
    let hosts = site.hosts();
    eventually(
        "poweredOn as bmo decides",
        Duration::from_secs(60),
        || async {
            let h = hosts.get(name).await.map_err(|e| e.to_string())?;
            let on = h.status.map(|s| s.powered_on).unwrap_or_default();
            let node = site
                .ironic
                .get_node(&uuid)
                .await
                .map_err(|e| e.to_string())?;
            let power = node.and_then(|n| n.power_state);
            let expected = match power.as_deref() {
                Some("power off") => false,
                Some("power on") | None => true,
                Some(_) => on,
            };
            if on == expected {
                Ok(())
            } else {
                Err(format!(
                    "poweredOn {on}, node power {power:?}; log: {}",
                    bmo.log_tail(40)
                ))
            }
        },
    )
    .await;
    let raw = serde_json::to_value(&host).expect("json");
    assert!(
        raw["status"]["provisioning"].get("image").is_none(),
        "provisioning.image still stored: {}",
        raw["status"]["provisioning"]
    );
    // At rest in available, the node keeps upstream's interface: the host asks for
    // no inspection, so bmo has no reason to change it.
    assert_eq!(
        site.inspect_interface(&uuid).await.as_deref(),
        Some("agent")
    );

    // Events: upstream's fields, field by field, for the same transitions.
    let events: Api<Event> = Api::namespaced(site.client.clone(), &site.ns);
    let listed = events.list(&ListParams::default()).await.expect("events");
    for reason in UPSTREAM_DEPROVISIONING_REASONS {
        let event = listed
            .items
            .iter()
            .find(|e| e.reason.as_deref() == Some(reason))
            .unwrap_or_else(|| {
                let reasons: Vec<_> = listed.items.iter().map(|e| e.reason.clone()).collect();
                panic!("no {reason} event among {reasons:?}")
            });
        let involved = &event.involved_object;
        assert_eq!(involved.kind.as_deref(), Some("BareMetalHost"));
        assert_eq!(involved.api_version.as_deref(), Some("metal3.io/v1alpha1"));
        assert_eq!(involved.name.as_deref(), Some(name));
        assert_eq!(involved.namespace.as_deref(), Some(site.ns.as_str()));
        assert_eq!(involved.uid, host.uid());
        assert_eq!(
            event.source.as_ref().and_then(|s| s.component.as_deref()),
            Some(EVENT_SOURCE_COMPONENT)
        );
        assert_eq!(
            event.reporting_component.as_deref(),
            Some(EVENT_REPORTING_CONTROLLER)
        );
        let related = event.related.as_ref().expect("related is the consumer");
        assert_eq!(
            (
                related.api_version.as_deref(),
                related.kind.as_deref(),
                related.name.as_deref(),
                related.namespace.as_deref()
            ),
            (
                Some("infrastructure.cluster.x-k8s.io/v1beta1"),
                Some("Metal3Machine"),
                Some("m-0"),
                Some(site.ns.as_str())
            )
        );
        assert_eq!(event.type_.as_deref(), Some("Normal"));
        assert_eq!(event.count, Some(1));
        assert!(event.first_timestamp.is_some() && event.last_timestamp.is_some());
        assert!(
            event
                .metadata
                .name
                .as_deref()
                .unwrap_or_default()
                .starts_with(&format!("{reason}-")),
            "named after the reason, as upstream's generateName: {:?}",
            event.metadata.name
        );
    }
    drop(bmo);
}

#[tokio::test]
async fn host_upstream_left_with_a_wrong_password_reaches_available_once_fixed() {
    let _shared = crate::support::shared();
    let site = Site::new("mig-badcreds").await;
    let stack = Stack::get();
    let name = "redfish-2";
    let (address, _, _) = redfish_address(2);
    let secret = format!("{name}-bmc");
    site.upstream_secret(
        &secret,
        &stack.redfish_credentials.username,
        "not-the-password",
    )
    .await;
    let manifest = json!({
        "apiVersion": "metal3.io/v1alpha1",
        "kind": "BareMetalHost",
        "metadata": {"name": name},
        "spec": {
            "online": false,
            "bootMACAddress": unique_mac(),
            "inspectionMode": "disabled",
            "automatedCleaningMode": "disabled",
            "bmc": {"address": address, "credentialsName": secret},
        }
    });
    // Upstream's status for a registration error (recordActionFailure: errorType,
    // errorMessage, errorCount, operationalStatus error).
    let status = json!({
        "operationalStatus": "error",
        "errorType": "registration error",
        "errorMessage": "Failed to get power state for node: HTTP 401 Unauthorized",
        "errorCount": 1,
        "provisioningFailCount": 0,
        "lastUpdated": "2026-01-01T00:00:00Z",
        "hardwareProfile": "unknown",
        "provisioning": {"state": "registering", "ID": "", "image": {"url": ""}, "bootMode": "UEFI"},
        "poweredOn": true,
        "operationHistory": {"register": {"start": "2026-01-01T00:00:00Z"}},
    });
    site.upstream_host(manifest, status).await;

    let bmo = site.start_bmo();
    reconciled(&site.hosts(), name, &bmo).await;
    // bmo tries the wrong password itself and reports its own registration error.
    let hosts = site.hosts();
    let host = eventually(
        "bmo's registration error",
        Duration::from_secs(120),
        || async {
            let h = hosts.get(name).await.map_err(|e| e.to_string())?;
            let st = h.status.clone().unwrap_or_default();
            if st.error_type == Some(ErrorType::Registration)
                && st
                    .error_message
                    .starts_with("Ironic cannot manage the host")
            {
                Ok(h)
            } else {
                Err(format!(
                    "{:?} {}; log: {}",
                    st.error_type,
                    st.error_message,
                    bmo.log_tail(40)
                ))
            }
        },
    )
    .await;
    assert_eq!(host.provisioning_state(), ProvisioningState::Registering);

    // The user fixes the password: the host proceeds, and every error field
    // upstream wrote is gone.
    site.secrets()
        .patch(
            &secret,
            &PatchParams::default(),
            &Patch::Merge(
                json!({"stringData": {"password": stack.redfish_credentials.password.expose()}}),
            ),
        )
        .await
        .expect("fix the password");
    let host = wait_state(&site.hosts(), name, ProvisioningState::Available, &bmo).await;
    let status = host.status.clone().expect("status");
    assert_eq!(status.error_type, None);
    assert_eq!(status.error_message, "");
    assert_eq!(status.error_count, 0);
    assert_eq!(status.operational_status, OperationalStatus::Ok);
    assert!(status.good_credentials.is_some());
    let raw = serde_json::to_value(&host).expect("json");
    assert!(
        raw["status"].get("errorType").is_none(),
        "{}",
        raw["status"]
    );
    assert_only_bmo_owns_the_status(&host);
    // Upstream announces the credentials the BMC accepted (baremetalhost_controller.go,
    // actionRegistering): once, for the fixed password.
    let events: Api<Event> = Api::namespaced(site.client.clone(), &site.ns);
    let listed = events.list(&ListParams::default()).await.expect("events");
    let validated: Vec<&Event> = listed
        .items
        .iter()
        .filter(|e| e.reason.as_deref() == Some("BMCAccessValidated"))
        .collect();
    assert_eq!(validated.len(), 1, "{validated:?}");
    assert_eq!(
        validated[0].message.as_deref(),
        Some("Verified access to BMC")
    );
    assert_eq!(validated[0].type_.as_deref(), Some("Normal"));
    assert_eq!(
        validated[0].reporting_component.as_deref(),
        Some(EVENT_REPORTING_CONTROLLER)
    );
    drop(bmo);
}

#[tokio::test]
async fn upstream_footprint_is_taken_over_without_new_nodes_or_provision_changes() {
    let _shared = crate::support::shared();
    let site = Site::new("mig-footprint").await;
    let stack = Stack::get();
    let name = "redfish-3";
    let (address, emulator, system) = redfish_address(3);
    let mac = unique_mac();
    let secret = format!("{name}-bmc");
    let credentials = &stack.redfish_credentials;
    // The node as upstream's redfish access details and enrollNode make it.
    let mut driver_info = deploy_images();
    for (k, v) in [
        ("redfish_username", credentials.username.clone()),
        ("redfish_password", credentials.password.expose().to_owned()),
        ("redfish_address", format!("http://{emulator}")),
        ("redfish_system_id", format!("/redfish/v1/Systems/{system}")),
    ] {
        driver_info.insert(k.into(), json!(v));
    }
    let node = NodeCreate {
        name: format!("{}~{name}", site.ns),
        driver: "redfish".into(),
        driver_info,
        boot_interface: Some("ipxe".into()),
        firmware_interface: Some("redfish".into()),
        raid_interface: Some("redfish".into()),
        inspect_interface: Some("agent".into()),
        automated_clean: Some(false),
        disable_power_off: Some(false),
        properties: json!({"capabilities": "boot_mode:uefi", "cpu_arch": ""})
            .as_object()
            .cloned()
            .unwrap_or_default(),
        ..Default::default()
    };
    let uuid = site.upstream_node(node, &mac, "available").await;
    site.upstream_secret(
        &secret,
        &credentials.username,
        credentials.password.expose(),
    )
    .await;
    let manifest = json!({
        "apiVersion": "metal3.io/v1alpha1",
        "kind": "BareMetalHost",
        "metadata": {"name": name},
        "spec": {
            "online": false,
            "bootMACAddress": mac,
            "inspectionMode": "disabled",
            "automatedCleaningMode": "disabled",
            "bmc": {"address": address, "credentialsName": secret},
        }
    });
    let status = json!({
        "operationalStatus": "OK",
        "lastUpdated": "2026-01-01T00:00:00Z",
        "hardwareProfile": "unknown",
        "provisioning": {"state": "available", "ID": uuid, "image": {"url": ""}, "bootMode": "UEFI"},
        "poweredOn": false,
        "errorMessage": "",
        "errorCount": 0,
        "provisioningFailCount": 0,
    });
    let host = site.upstream_host(manifest, status).await;
    // The HardwareData upstream made for the host (owned by it, as its controller).
    let hardware_data: HardwareData = serde_json::from_value(json!({
        "apiVersion": "metal3.io/v1alpha1",
        "kind": "HardwareData",
        "metadata": {
            "name": name,
            "ownerReferences": [{
                "apiVersion": "metal3.io/v1alpha1", "kind": "BareMetalHost",
                "name": name, "uid": host.uid(), "controller": true
            }]
        },
        "spec": {"hardware": {"hostname": "named-by-upstream", "ramMebibytes": 4096}}
    }))
    .expect("valid HardwareData");
    let hardware: Api<HardwareData> = Api::namespaced(site.client.clone(), &site.ns);
    hardware
        .create(&upstream(), &hardware_data)
        .await
        .expect("create HardwareData as upstream");
    let before = site.ironic_nodes().await;

    let bmo = site.start_bmo();
    let host = reconciled(&site.hosts(), name, &bmo).await;
    assert_eq!(host.provisioning_state(), ProvisioningState::Available);
    assert_eq!(host.status.clone().expect("status").provisioning.id, uuid);
    assert_only_bmo_owns_the_status(&host);
    // Inspection disabled: upstream's `agent` stays (bmo never inspects the host).
    assert_eq!(
        site.inspect_interface(&uuid).await.as_deref(),
        Some("agent")
    );
    let after = site.ironic_nodes().await;
    assert_eq!(
        after.keys().collect::<Vec<_>>(),
        before.keys().collect::<Vec<_>>(),
        "bmo created or deleted nodes"
    );
    assert_eq!(
        after[&uuid], before[&uuid],
        "the node's provision state or provision_updated_at changed"
    );

    // Hardware details given by annotation (inspection is disabled) replace
    // upstream's whole: a field they lack is gone from HardwareData too.
    site.hosts()
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {
                "inspect.metal3.io/hardwaredetails": r#"{"ramMebibytes": 8192}"#
            }}})),
        )
        .await
        .expect("annotate hardware details");
    eventually("HardwareData replaced", Duration::from_secs(60), || async {
        let data = hardware.get(name).await.map_err(|e| e.to_string())?;
        let details = data.spec.hardware.unwrap_or_default();
        if details.ram_mebibytes == Some(8192) && details.hostname.is_none() {
            Ok(())
        } else {
            Err(format!("{details:?}; log: {}", bmo.log_tail(40)))
        }
    })
    .await;

    // The host moves to a new Secret: upstream's finalizer leaves the old one, which
    // can then be deleted.
    let renamed = format!("{name}-bmc-new");
    crate::support::create_bmc_secret(
        &site.client,
        &site.ns,
        &renamed,
        &credentials.username,
        credentials.password.expose(),
    )
    .await;
    site.hosts()
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"bmc": {"credentialsName": renamed}}})),
        )
        .await
        .expect("change credentialsName");
    let secrets = site.secrets();
    eventually(
        "the old Secret released",
        Duration::from_secs(60),
        || async {
            let s = secrets.get(&secret).await.map_err(|e| e.to_string())?;
            if s.finalizers().is_empty() {
                Ok(())
            } else {
                Err(format!("{:?}; log: {}", s.finalizers(), bmo.log_tail(40)))
            }
        },
    )
    .await;

    // Deleting the host releases its Secret too; deleting the Secrets then completes.
    // Upstream's finalizer goes back on the new Secret, as if upstream had held it.
    // A replace as read: bmo may write the Secret meanwhile (409), then read again.
    eventually(
        "the new Secret finalized",
        Duration::from_secs(30),
        || async {
            let mut held = secrets.get(&renamed).await.map_err(|e| e.to_string())?;
            held.metadata.finalizers = Some(vec![SECRET_FINALIZER.into()]);
            secrets
                .replace(&renamed, &upstream(), &held)
                .await
                .map(drop)
                .map_err(|e| e.to_string())
        },
    )
    .await;
    site.hosts()
        .delete(name, &DeleteParams::default())
        .await
        .expect("delete host");
    let hosts = site.hosts();
    eventually("the host gone", Duration::from_secs(120), || async {
        match hosts.get_opt(name).await.map_err(|e| e.to_string())? {
            None => Ok(()),
            Some(h) => Err(format!(
                "{}; log: {}",
                h.provisioning_state(),
                bmo.log_tail(40)
            )),
        }
    })
    .await;
    for s in [&secret, &renamed] {
        secrets
            .delete(s, &DeleteParams::default())
            .await
            .expect("delete secret");
        eventually(
            &format!("Secret {s} gone"),
            Duration::from_secs(30),
            || async {
                match secrets.get_opt(s).await.map_err(|e| e.to_string())? {
                    None => Ok(()),
                    Some(left) => Err(format!("still there, finalizers {:?}", left.finalizers())),
                }
            },
        )
        .await;
    }
    drop(bmo);
}
