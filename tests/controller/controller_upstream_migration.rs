//! Taking over from the real upstream operator in place, and handing back
//! (docs/migration.md, issue 37).
//!
//! Upstream's baremetal-operator, built from source at the commit tests/env/stack pins
//! (`BMO_UPSTREAM_DIR`, with its Ironic provisioner plugin), runs against the stack's
//! kube-apiserver and Ironic with twelve Redfish hosts on a sushy-emulator of the
//! test's own, in mixed states. Then upstream stops and `bmo run` starts in place;
//! then bmo stops and upstream starts again. Each side must take the other's
//! footprint as it is: no new Ironic node, no provision-state change, power action or
//! node field change on settled hosts, no refused write, and the changes a user makes
//! afterwards (a fixed password, a deleted host, a removed image, power on) carried
//! out.
//!
//! Upstream runs against bmo's CRDs: the stack's apiserver is shared by the tests
//! that run beside this one, and CRDs are cluster-wide.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use bmo::api::BareMetalHost;
use bmo::ironic::IronicAuth;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::{Value, json};

use crate::support::{
    PrivateSushy, Stack, bmo_run, eventually, installed_namespace, unique_mac, unique_name,
};

/// Upstream's finalizer on the Secrets its hosts use, and bmo's.
const SECRET_FINALIZER: &str = "baremetalhost.metal3.io/secret";

/// Hosts at rest before the switch to bmo, their systems and whether they are on:
/// they must stay exactly as they are.
const SETTLED_FOR_BMO: [(&str, usize, bool); 6] = [
    ("avail-0", 0, false),
    ("avail-1", 1, false),
    ("avail-on", 3, true),
    ("ext-0", 5, true),
    ("ext-1", 6, false),
    ("iso-1", 8, true),
];
/// The same before the switch back to upstream (after bmo's changes).
const SETTLED_FOR_UPSTREAM: [(&str, usize, bool); 7] = [
    ("avail-2", 2, true),
    ("avail-on", 3, true),
    ("ext-0", 5, true),
    ("ext-1", 6, false),
    ("iso-0", 7, true),
    ("badpw", 9, false),
    ("mid-0", 11, false),
];

/// Which build of upstream's operator tests/env/stack made.
#[derive(Clone, Copy)]
enum Build {
    /// The pinned commit with its Ironic provisioner plugin (`BMO_UPSTREAM_DIR`).
    Pinned,
    /// The older release, its Ironic provisioner compiled in
    /// (`BMO_UPSTREAM_RELEASE_DIR`).
    Release,
}

/// Upstream's operator, started by the test; stopped (SIGTERM) when dropped.
struct Upstream {
    child: std::process::Child,
    log_path: PathBuf,
}

impl Upstream {
    fn start(ns: &str, build: Build) -> Upstream {
        let stack = Stack::get();
        let var = match build {
            Build::Pinned => "BMO_UPSTREAM_DIR",
            Build::Release => "BMO_UPSTREAM_RELEASE_DIR",
        };
        let dir = PathBuf::from(stack.var(var).unwrap_or_else(|| {
            panic!(
                "upstream's baremetal-operator was not built ({var} unset): tests/env/stack \
                 builds it from git (BMO_UPSTREAM_GIT, or a clone of \
                 github.com/metal3-io/baremetal-operator in its cache); see its log"
            )
        }));
        let mut args = vec![
            "-webhook-port=0",
            "-metrics-addr=127.0.0.1:0",
            "-health-addr=127.0.0.1:0",
            "-dev",
        ];
        if let Build::Pinned = build {
            args.push("-provisioner=ironic");
        }
        let log_path = std::env::temp_dir().join(format!("{}.log", unique_name("upstream-bmo")));
        let log = std::fs::File::create(&log_path).expect("create log file");
        let child = std::process::Command::new(dir.join("baremetal-operator"))
            .args(&args)
            .env("KUBECONFIG", &stack.kubeconfig)
            .env("WATCH_NAMESPACE", ns)
            .env("POD_NAMESPACE", ns)
            .env("PROVISIONER_PLUGIN_DIR", &dir)
            .env("IRONIC_ENDPOINT", stack.ironic_endpoint.as_str())
            .env(
                "METAL3_AUTH_ROOT_DIR",
                stack.var("METAL3_AUTH_ROOT_DIR").unwrap_or_default(),
            )
            .env(
                "DEPLOY_KERNEL_URL",
                stack.var("DEPLOY_KERNEL_URL").unwrap_or_default(),
            )
            .env(
                "DEPLOY_RAMDISK_URL",
                stack.var("DEPLOY_RAMDISK_URL").unwrap_or_default(),
            )
            .stdin(std::process::Stdio::null())
            .stdout(log.try_clone().expect("log file"))
            .stderr(log)
            .spawn()
            .expect("start upstream's operator");
        Upstream { child, log_path }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }

    fn log_tail(&self, lines: usize) -> String {
        let log = self.log();
        let all: Vec<&str> = log.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// SIGTERM, as a Deployment scaled to 0 does; waits until it has exited.
    async fn stop(&mut self) {
        let _ = std::process::Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.child.try_wait().ok().flatten().is_none() {
            if Instant::now() >= deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

impl Drop for Upstream {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.log_path);
    }
}

struct Site {
    ns: String,
    client: kube::Client,
    sushy: PrivateSushy,
}

impl Site {
    fn hosts(&self) -> Api<BareMetalHost> {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    fn secrets(&self) -> Api<Secret> {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    async fn secret(&self, name: &str, password: &str) {
        let stack = Stack::get();
        let mut secret = Secret::default();
        secret.metadata.name = Some(name.into());
        secret.data = Some(
            [
                (
                    "username".to_owned(),
                    ByteString(stack.redfish_credentials.username.clone().into()),
                ),
                ("password".to_owned(), ByteString(password.into())),
            ]
            .into(),
        );
        self.secrets()
            .create(&PostParams::default(), &secret)
            .await
            .expect("create secret");
    }

    /// A Redfish host on system `index` of the test's emulator, inspection and
    /// automated cleaning off (the emulator boots no ramdisk), with its own Secret.
    async fn host(&self, name: &str, index: usize, password: &str, spec: Value) {
        self.secret(&format!("{name}-bmc"), password).await;
        let emulator = self
            .sushy
            .url
            .as_str()
            .trim_end_matches('/')
            .replace("http://", "");
        let mut manifest = json!({
            "apiVersion": "metal3.io/v1alpha1",
            "kind": "BareMetalHost",
            "metadata": {"name": name},
            "spec": {
                "online": false,
                "bootMACAddress": unique_mac(),
                "inspectionMode": "disabled",
                "automatedCleaningMode": "disabled",
                "bmc": {
                    "address": format!("redfish+http://{emulator}/redfish/v1/Systems/{}", self.sushy.system_ids[index]),
                    "credentialsName": format!("{name}-bmc"),
                },
            }
        });
        if let (Some(into), Some(extra)) = (manifest["spec"].as_object_mut(), spec.as_object()) {
            into.extend(extra.clone());
        }
        let host: BareMetalHost = serde_json::from_value(manifest).expect("valid host");
        self.hosts()
            .create(&PostParams::default(), &host)
            .await
            .expect("create host");
    }

    async fn merge(&self, name: &str, patch: Value) {
        self.hosts()
            .patch(name, &PatchParams::default(), &Patch::Merge(patch))
            .await
            .unwrap_or_else(|e| panic!("patch {name}: {e}"));
    }

    /// Every Ironic node of this namespace (named `namespace~host`), by name, with the
    /// fields a settled node must keep.
    async fn nodes(&self) -> BTreeMap<String, Value> {
        let stack = Stack::get();
        let url = stack.ironic_endpoint.join("nodes/detail").expect("url");
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
        let prefix = format!("{}~", self.ns);
        body["nodes"]
            .as_array()
            .expect("nodes")
            .iter()
            .filter_map(|n| {
                let name = n["name"].as_str()?.strip_prefix(&prefix)?.to_owned();
                Some((name, kept_fields(n)))
            })
            .collect()
    }

    async fn state(&self, name: &str) -> (String, Value) {
        let h = self.hosts().get(name).await.expect("host");
        let status = serde_json::to_value(&h.status).unwrap_or_default();
        (
            status["provisioning"]["state"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
            status,
        )
    }

    /// Waits until every host in `wanted` shows its state (and, for `-`, its
    /// operationalStatus is `detached`).
    async fn wait_states(
        &self,
        wanted: &[(&str, &str)],
        within: Duration,
        log: &dyn Fn() -> String,
    ) {
        eventually("hosts to settle", within, || async {
            let mut off = Vec::new();
            for (name, state) in wanted {
                let (now, status) = self.state(name).await;
                let ok = match *state {
                    "detached" => status["operationalStatus"] == "detached",
                    "registration error" => {
                        now == "registering" && status["errorType"] == "registration error"
                    }
                    s => now == s && status["operationalStatus"] != "error",
                };
                if !ok {
                    off.push(format!(
                        "{name}: {now} {} {}",
                        status["operationalStatus"], status["errorMessage"]
                    ));
                }
            }
            if off.is_empty() {
                Ok(())
            } else {
                Err(format!("{off:?}; log: {}", log()))
            }
        })
        .await;
    }

    async fn powered_on(&self, name: &str) -> bool {
        self.state(name).await.1["poweredOn"] == true
    }

    /// Deletes the host and its Secret; both must go.
    async fn delete_host_and_secret(&self, name: &str, log: &dyn Fn() -> String) {
        self.hosts()
            .delete(name, &DeleteParams::default())
            .await
            .expect("delete host");
        let secret = format!("{name}-bmc");
        self.secrets()
            .delete(&secret, &DeleteParams::default())
            .await
            .expect("delete secret");
        let hosts = self.hosts();
        let secrets = self.secrets();
        eventually(
            &format!("{name} and its Secret gone"),
            Duration::from_secs(90),
            || async {
                let h = hosts.get_opt(name).await.map_err(|e| e.to_string())?;
                let s = secrets.get_opt(&secret).await.map_err(|e| e.to_string())?;
                match (h, s) {
                    (None, None) => Ok(()),
                    (h, s) => Err(format!(
                        "host {:?}, secret finalizers {:?}; log: {}",
                        h.map(|h| h.provisioning_state()),
                        s.map(|s| s.finalizers().to_vec()),
                        log()
                    )),
                }
            },
        )
        .await;
    }
}

/// What a node at rest must keep across a switch: everything but bookkeeping Ironic
/// changes by itself.
fn kept_fields(node: &Value) -> Value {
    const BOOKKEEPING: [&str; 15] = [
        "boot_mode",
        "secure_boot",
        "fault",
        "updated_at",
        "driver_internal_info",
        "links",
        "ports",
        "portgroups",
        "states",
        "volume",
        "reservation",
        "conductor",
        "last_error",
        "inspection_started_at",
        "inspection_finished_at",
    ];
    let mut kept = node.clone();
    if let Some(map) = kept.as_object_mut() {
        map.retain(|k, _| !BOOKKEEPING.contains(&k.as_str()));
    }
    kept
}

/// Lines of a log that show a write the API server refused.
fn refused_writes(log: &str) -> Vec<&str> {
    const REFUSALS: [&str; 7] = [
        "code: 422",
        "\"code\":422",
        "Unprocessable",
        "Invalid value",
        " is invalid",
        "reason: \"Forbidden\"",
        " is forbidden",
    ];
    log.lines()
        .filter(|l| REFUSALS.iter().any(|r| l.contains(r)))
        .collect()
}

/// The fields of `before` that differ in `after`, for the `settled` hosts.
fn node_changes(
    settled: &[(&str, usize, bool)],
    before: &BTreeMap<String, Value>,
    after: &BTreeMap<String, Value>,
) -> Vec<String> {
    let mut changes = Vec::new();
    for (name, _, _) in settled {
        let (Some(b), Some(a)) = (before.get(*name), after.get(*name)) else {
            changes.push(format!("{name}: node missing"));
            continue;
        };
        if let (Some(b), Some(a)) = (b.as_object(), a.as_object()) {
            for (k, v) in b {
                if a.get(k) != Some(v) {
                    changes.push(format!(
                        "{name}.{k}: {v} -> {}",
                        a.get(k).unwrap_or(&Value::Null)
                    ));
                }
            }
        }
    }
    changes
}

#[tokio::test]
async fn upstream_to_bmo_and_back_in_place() {
    let _shared = crate::support::shared();
    let started = Instant::now();
    let (client, ns) = installed_namespace("mig-real").await;
    let site = Site {
        ns,
        client,
        sushy: PrivateSushy::start("mig-real", 12),
    };
    let stack = Stack::get();
    let password = stack.redfish_credentials.password.expose().to_owned();
    let http_root = PathBuf::from(stack.var("IRONIC_HTTP_ROOT").expect("IRONIC_HTTP_ROOT"));
    let iso_name = format!("{}.iso", site.ns);
    std::fs::write(
        http_root.join("bmo-test-images").join(&iso_name),
        b"a live ISO",
    )
    .expect("write ISO");
    let iso = json!({
        "url": format!("http://127.0.0.1:{}/bmo-test-images/{iso_name}", stack.var("IRONIC_HTTP_PORT").unwrap_or_default()),
        "format": "live-iso",
    });

    // Twelve hosts, as upstream leaves them.
    site.host("avail-0", 0, &password, json!({})).await;
    site.host("avail-1", 1, &password, json!({})).await;
    site.host("avail-2", 2, &password, json!({})).await;
    site.host("avail-on", 3, &password, json!({"online": true}))
        .await;
    site.host("del-0", 4, &password, json!({})).await;
    site.host(
        "ext-0",
        5,
        &password,
        json!({"externallyProvisioned": true, "online": true}),
    )
    .await;
    site.host(
        "ext-1",
        6,
        &password,
        json!({"externallyProvisioned": true}),
    )
    .await;
    site.host("iso-0", 7, &password, json!({"image": iso, "online": true}))
        .await;
    site.host("iso-1", 8, &password, json!({"image": iso, "online": true}))
        .await;
    site.host("badpw", 9, "wrong", json!({})).await;
    site.host("det-0", 10, &password, json!({})).await;

    let mut upstream = Upstream::start(&site.ns, Build::Pinned);
    let up_log = || upstream_log_tail(&upstream);
    site.wait_states(
        &[
            ("avail-0", "available"),
            ("avail-1", "available"),
            ("avail-2", "available"),
            ("avail-on", "available"),
            ("del-0", "available"),
            ("ext-0", "externally provisioned"),
            ("ext-1", "externally provisioned"),
            ("iso-0", "provisioned"),
            ("iso-1", "provisioned"),
            ("badpw", "registration error"),
            ("det-0", "available"),
        ],
        Duration::from_secs(150),
        &up_log,
    )
    .await;
    site.hosts()
        .patch(
            "det-0",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"annotations": {"baremetalhost.metal3.io/detached": ""}}}),
            ),
        )
        .await
        .expect("detach");
    site.wait_states(&[("det-0", "detached")], Duration::from_secs(60), &up_log)
        .await;
    // Upstream's own footprint, as the issue found it.
    let (_, status) = site.state("avail-0").await;
    assert_eq!(
        status["operationHistory"]["deprovision"],
        json!({}),
        "bmo reads upstream's {{start: null, end: null}} as an operation never run"
    );
    let raw = site.secrets().get("avail-0-bmc").await.expect("secret");
    assert_eq!(
        raw.finalizers(),
        [SECRET_FINALIZER],
        "upstream's Secret finalizer"
    );
    wait_at_rest(&site, &SETTLED_FOR_BMO, &up_log).await;
    // One host mid-registration when upstream stops.
    site.host("mid-0", 11, &password, json!({})).await;
    eventually("mid-0 registering", Duration::from_secs(60), || async {
        let (state, status) = site.state("mid-0").await;
        if state == "registering" && status["provisioning"]["ID"] != "" {
            Ok(())
        } else {
            Err(format!("{state}; log: {}", up_log()))
        }
    })
    .await;
    upstream.stop().await;
    let upstream_refused: Vec<String> = refused_writes(&upstream.log())
        .into_iter()
        .map(str::to_owned)
        .collect();
    assert!(
        upstream_refused.is_empty(),
        "upstream's writes refused: {upstream_refused:#?}"
    );
    let before = site.nodes().await;
    let power_before = power_of(&site, &SETTLED_FOR_BMO).await;
    let upstream_phase = started.elapsed();

    // bmo in place.
    let bmo = bmo_run(&site.ns, &[("RUST_LOG", "info,bmo=debug")]).0;
    let bmo_log = || bmo.log_tail(40);
    // Every host taken over (bmo alone owns its status), settled ones still at rest.
    eventually(
        "bmo to take every host over",
        Duration::from_secs(60),
        || async {
            let hosts = site
                .hosts()
                .list(&Default::default())
                .await
                .map_err(|e| e.to_string())?;
            let left: Vec<String> = hosts
                .items
                .iter()
                .filter(|h| !only_bmo_owns_the_status(h))
                .map(ResourceExt::name_any)
                .collect();
            if left.is_empty() {
                Ok(())
            } else {
                Err(format!("not yet: {left:?}; log: {}", bmo_log()))
            }
        },
    )
    .await;
    site.wait_states(
        &[
            ("avail-0", "available"),
            ("avail-1", "available"),
            ("avail-on", "available"),
            ("ext-0", "externally provisioned"),
            ("ext-1", "externally provisioned"),
            ("iso-1", "provisioned"),
            ("det-0", "detached"),
            ("mid-0", "available"),
        ],
        Duration::from_secs(90),
        &bmo_log,
    )
    .await;
    // What a user does next, and bmo carries out.
    bmo_changes(&site, &bmo_log).await;
    let after = site.nodes().await;
    check_settled(
        &site,
        &SETTLED_FOR_BMO,
        &before,
        &after,
        &power_before,
        "bmo",
    )
    .await;
    assert!(
        !after.contains_key("det-0"),
        "a node made for the detached host"
    );
    // The credentials upstream tried are not sent again: bmo's own write of the
    // Secret's label, owner and finalizer changes no credentials.
    let log = bmo.log();
    let resent: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("updated BMC access"))
        .filter(|l| {
            SETTLED_FOR_BMO
                .iter()
                .any(|(name, _, _)| l.contains(&format!("/{name} ")))
        })
        .collect();
    assert!(resent.is_empty(), "credentials sent again: {resent:#?}");
    let refused: Vec<String> = refused_writes(&bmo.log())
        .into_iter()
        .map(str::to_owned)
        .collect();
    assert!(refused.is_empty(), "bmo's writes refused: {refused:#?}");
    wait_at_rest(&site, &SETTLED_FOR_UPSTREAM, &bmo_log).await;
    let bmo_phase = started.elapsed() - upstream_phase;
    drop(bmo);

    // And back to upstream.
    let before = site.nodes().await;
    let power_before = power_of(&site, &SETTLED_FOR_UPSTREAM).await;
    let mut upstream = Upstream::start(&site.ns, Build::Pinned);
    let up_log = || upstream_log_tail(&upstream);
    // Upstream has seen every host once it has written their status again.
    site.wait_states(
        &[
            ("avail-0", "available"),
            ("avail-1", "available"),
            ("avail-2", "available"),
            ("avail-on", "available"),
            ("ext-0", "externally provisioned"),
            ("ext-1", "externally provisioned"),
            ("iso-0", "available"),
            ("iso-1", "provisioned"),
            ("badpw", "available"),
            ("det-0", "detached"),
            ("mid-0", "available"),
        ],
        Duration::from_secs(60),
        &up_log,
    )
    .await;
    upstream_changes(&site, &up_log).await;
    let after = site.nodes().await;
    check_settled(
        &site,
        &SETTLED_FOR_UPSTREAM,
        &before,
        &after,
        &power_before,
        "upstream",
    )
    .await;
    let refused: Vec<String> = refused_writes(&upstream.log())
        .into_iter()
        .map(str::to_owned)
        .collect();
    assert!(
        refused.is_empty(),
        "upstream's writes refused: {refused:#?}"
    );
    upstream.stop().await;
    eprintln!(
        "upstream migration: upstream {:.0?}, bmo {:.0?}, back to upstream {:.0?}",
        upstream_phase,
        bmo_phase,
        started.elapsed() - upstream_phase - bmo_phase
    );
}

fn upstream_log_tail(upstream: &Upstream) -> String {
    upstream.log_tail(30)
}

fn only_bmo_owns_the_status(host: &BareMetalHost) -> bool {
    let owners: Vec<(Option<&str>, Option<&str>)> = host
        .managed_fields()
        .iter()
        .filter(|e| e.subresource.as_deref() == Some("status"))
        .map(|e| (e.manager.as_deref(), e.operation.as_deref()))
        .collect();
    owners == [(Some("bmo"), Some("Apply"))]
}

/// The emulator's power state of the `settled` hosts' systems.
async fn power_of(site: &Site, settled: &[(&str, usize, bool)]) -> Vec<(String, String)> {
    let mut states = Vec::new();
    for (name, index, _) in settled {
        let power = site.sushy.power(&site.sushy.system_ids[*index]).await;
        states.push(((*name).to_owned(), power));
    }
    states
}

/// Waits until the nodes of the `settled` hosts rest: no target provision or power
/// state, powered as their host asks.
async fn wait_at_rest(site: &Site, settled: &[(&str, usize, bool)], log: &dyn Fn() -> String) {
    eventually("settled nodes at rest", Duration::from_secs(60), || async {
        let nodes = site.nodes().await;
        let busy: Vec<String> = settled
            .iter()
            .filter(|(name, _, on)| {
                let node = nodes.get(*name).cloned().unwrap_or_default();
                let power = if *on { "power on" } else { "power off" };
                !(node["target_power_state"].is_null()
                    && node["target_provision_state"].is_null()
                    && node["power_state"] == power)
            })
            .map(|(name, _, _)| (*name).to_owned())
            .collect();
        if busy.is_empty() {
            Ok(())
        } else {
            Err(format!("{busy:?}; log: {}", log()))
        }
    })
    .await;
}

/// The settled hosts kept their state, their node every field, their system its power.
async fn check_settled(
    site: &Site,
    settled: &[(&str, usize, bool)],
    before: &BTreeMap<String, Value>,
    after: &BTreeMap<String, Value>,
    power_before: &[(String, String)],
    who: &str,
) {
    let new: Vec<&String> = after.keys().filter(|k| !before.contains_key(*k)).collect();
    assert!(new.is_empty(), "{who} made new Ironic nodes: {new:?}");
    let changes = node_changes(settled, before, after);
    assert!(
        changes.is_empty(),
        "{who} changed settled nodes: {changes:#?}"
    );
    assert_eq!(
        power_of(site, settled).await,
        power_before,
        "{who} changed the power of a settled host's system"
    );
}

/// After the switch to bmo: the password fixed, a host and its Secret deleted, an
/// image removed, a host powered on.
async fn bmo_changes(site: &Site, log: &dyn Fn() -> String) {
    let password = Stack::get()
        .redfish_credentials
        .password
        .expose()
        .to_owned();
    let secret = json!({"stringData": {"password": password}});
    site.secrets()
        .patch("badpw-bmc", &PatchParams::default(), &Patch::Merge(secret))
        .await
        .expect("fix the password");
    site.merge("iso-0", json!({"spec": {"image": null}})).await;
    site.merge("avail-2", json!({"spec": {"online": true}}))
        .await;
    site.delete_host_and_secret("del-0", log).await;
    site.wait_states(
        &[("badpw", "available"), ("iso-0", "available")],
        Duration::from_secs(120),
        log,
    )
    .await;
    power_follows(site, "avail-2", 2, log).await;
}

/// Back under upstream: the same kinds of change, on other hosts.
async fn upstream_changes(site: &Site, log: &dyn Fn() -> String) {
    site.merge("iso-1", json!({"spec": {"image": null}})).await;
    site.merge("avail-1", json!({"spec": {"online": true}}))
        .await;
    site.delete_host_and_secret("avail-0", log).await;
    site.wait_states(&[("iso-1", "available")], Duration::from_secs(120), log)
        .await;
    power_follows(site, "avail-1", 1, log).await;
}

/// `poweredOn` becomes true once the system is on.
async fn power_follows(site: &Site, name: &str, index: usize, log: &dyn Fn() -> String) {
    let id = site.sushy.system_ids[index].clone();
    eventually(
        &format!("{name} powered on"),
        Duration::from_secs(90),
        || async {
            let system = site.sushy.power(&id).await;
            let on = site.powered_on(name).await;
            if system == "On" && on {
                Ok(())
            } else {
                Err(format!("system {system}, poweredOn {on}; log: {}", log()))
            }
        },
    )
    .await;
}

/// From upstream's older release (as upstream's own upgrade tests start from) to bmo
/// in place: the same footprint checks, on fewer hosts.
#[tokio::test]
async fn from_an_older_upstream_release_to_bmo_in_place() {
    let _shared = crate::support::shared();
    const SETTLED: [(&str, usize, bool); 2] = [("avail-0", 0, false), ("ext-0", 1, true)];
    let (client, ns) = installed_namespace("mig-release").await;
    let site = Site {
        ns,
        client,
        sushy: PrivateSushy::start("mig-release", 3),
    };
    let password = Stack::get()
        .redfish_credentials
        .password
        .expose()
        .to_owned();
    site.host("avail-0", 0, &password, json!({})).await;
    site.host(
        "ext-0",
        1,
        &password,
        json!({"externallyProvisioned": true, "online": true}),
    )
    .await;
    site.host("badpw", 2, "wrong", json!({})).await;
    let mut upstream = Upstream::start(&site.ns, Build::Release);
    let up_log = || upstream_log_tail(&upstream);
    site.wait_states(
        &[
            ("avail-0", "available"),
            ("ext-0", "externally provisioned"),
            ("badpw", "registration error"),
        ],
        Duration::from_secs(120),
        &up_log,
    )
    .await;
    wait_at_rest(&site, &SETTLED, &up_log).await;
    upstream.stop().await;
    let before = site.nodes().await;
    let power_before = power_of(&site, &SETTLED).await;

    let bmo = bmo_run(&site.ns, &[("RUST_LOG", "info,bmo=debug")]).0;
    let bmo_log = || bmo.log_tail(40);
    let password = json!({"stringData": {"password": password}});
    site.secrets()
        .patch(
            "badpw-bmc",
            &PatchParams::default(),
            &Patch::Merge(password),
        )
        .await
        .expect("fix the password");
    site.wait_states(
        &[
            ("avail-0", "available"),
            ("ext-0", "externally provisioned"),
            ("badpw", "available"),
        ],
        Duration::from_secs(90),
        &bmo_log,
    )
    .await;
    eventually(
        "bmo to take every host over",
        Duration::from_secs(30),
        || async {
            let hosts = site
                .hosts()
                .list(&Default::default())
                .await
                .map_err(|e| e.to_string())?;
            if hosts.items.iter().all(only_bmo_owns_the_status) {
                Ok(())
            } else {
                Err(bmo_log())
            }
        },
    )
    .await;
    let after = site.nodes().await;
    check_settled(&site, &SETTLED, &before, &after, &power_before, "bmo").await;
    let refused: Vec<String> = refused_writes(&bmo.log())
        .into_iter()
        .map(str::to_owned)
        .collect();
    assert!(refused.is_empty(), "bmo's writes refused: {refused:#?}");
}
