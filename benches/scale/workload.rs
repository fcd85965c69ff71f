//! The workload: what the hosts are (fake-hardware or Redfish), the BareMetalHosts and
//! Secrets the benchmark applies, and the watch that records when each host reaches
//! available and provisioned.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use futures::{StreamExt, TryStreamExt};
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, PostParams};
use kube::runtime::watcher;
use serde_json::{Value, json};

use crate::stack::Sushy;

pub const IMAGE_URL: &str = "http://images.example.test/ubuntu-24.04.qcow2";
pub const IMAGE_SHA256: &str = "8a3f7e0c2b1d4e5f6a7b8c9d0e1f2a3b4c5d6e7f8a9b0c1d2e3f4a5b6c7d8e9f";

/// What the hosts are and how far they go.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub enum Work {
    /// fake-hardware hosts with an image: apply → provisioned.
    #[default]
    Fake,
    /// Redfish hosts on sushy-emulator, no inspection, no automated cleaning:
    /// apply → available.
    Redfish,
}

impl Work {
    pub fn parse(s: &str) -> Result<Work> {
        match s {
            "fake" => Ok(Work::Fake),
            "redfish" => Ok(Work::Redfish),
            other => bail!("BMO_SCALE_WORKS: unknown work {other} (fake, redfish)"),
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Work::Fake => "fake-hardware",
            Work::Redfish => "Redfish",
        }
    }

    pub fn target(self) -> &'static str {
        match self {
            Work::Fake => "provisioned",
            Work::Redfish => "available",
        }
    }
}

pub fn host_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("metal3.io", "v1alpha1", "BareMetalHost"),
        "baremetalhosts",
    )
}

pub fn mac(run: usize, i: usize) -> String {
    format!(
        "02:5c:{:02x}:{:02x}:{:02x}:{:02x}",
        run & 0xff,
        (i >> 16) & 0xff,
        (i >> 8) & 0xff,
        i & 0xff
    )
}

pub fn host_name(i: usize) -> String {
    format!("host-{i:04}")
}

/// The BareMetalHost and its Secret's credentials for host `i` of `work`.
fn host_spec(
    work: Work,
    sushy: Option<&Sushy>,
    run: usize,
    i: usize,
) -> Result<(Value, String, String)> {
    let name = host_name(i);
    Ok(match (work, sushy) {
        (Work::Fake, _) => (
            json!({
                "online": true,
                "bootMACAddress": mac(run, i),
                "bmc": {"address": format!("fake://{name}"), "credentialsName": format!("{name}-bmc")},
                "image": {"url": IMAGE_URL, "checksum": IMAGE_SHA256, "checksumType": "sha256"},
            }),
            "admin".to_owned(),
            "not-used-by-fake-hosts".to_owned(),
        ),
        (Work::Redfish, Some(sushy)) => (
            json!({
                "online": false,
                "bootMACAddress": mac(run, i),
                "inspectionMode": "disabled",
                "automatedCleaningMode": "disabled",
                "bmc": {"address": sushy.address(i), "credentialsName": format!("{name}-bmc")},
            }),
            sushy.username.clone(),
            sushy.password.clone(),
        ),
        (Work::Redfish, None) => bail!("the Redfish work needs a sushy-emulator"),
    })
}

/// Creates the N Secrets and BareMetalHosts, 16 requests in flight.
pub async fn apply_hosts(
    client: &kube::Client,
    ns: &str,
    work: Work,
    sushy: Option<&Sushy>,
    run: usize,
    n: usize,
) -> Result<()> {
    let secrets: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        ns,
        &ApiResource::from_gvk(&GroupVersionKind::gvk("", "v1", "Secret")),
    );
    let hosts: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &host_resource());
    futures::stream::iter(0..n)
        .map(|i| {
            let (secrets, hosts) = (secrets.clone(), hosts.clone());
            async move {
                let name = host_name(i);
                let (spec, username, password) = host_spec(work, sushy, run, i)?;
                let secret: DynamicObject = serde_json::from_value(json!({
                    "apiVersion": "v1", "kind": "Secret",
                    "metadata": {"name": format!("{name}-bmc")},
                    "type": "Opaque",
                    "stringData": {"username": username, "password": password},
                }))?;
                secrets.create(&PostParams::default(), &secret).await?;
                let host: DynamicObject = serde_json::from_value(json!({
                    "apiVersion": "metal3.io/v1alpha1", "kind": "BareMetalHost",
                    "metadata": {"name": name},
                    "spec": spec,
                }))?;
                hosts.create(&PostParams::default(), &host).await?;
                anyhow::Ok(())
            }
        })
        .buffer_unordered(16)
        .try_collect::<Vec<()>>()
        .await?;
    Ok(())
}

#[derive(Default)]
pub struct Progress {
    /// When the watch first saw each host (its creation, as bmo's watch sees it).
    pub seen: HashMap<String, Instant>,
    /// When each host first showed a provisioning state.
    pub stated: HashMap<String, Instant>,
    pub available: HashMap<String, Instant>,
    pub provisioned: HashMap<String, Instant>,
    pub errors: HashMap<String, String>,
    /// The hosts' HostFirmwareSettings and HostFirmwareComponents (made only for a
    /// node that reports firmware components: none on fake hardware).
    pub settings: Filled,
    pub components: Filled,
    pub synced: bool,
}

/// Firmware objects by name, and when each first held what the firmware controllers
/// read (`status.lastUpdated` set).
#[derive(Default)]
pub struct Filled {
    pub seen: HashSet<String>,
    pub filled: HashMap<String, Instant>,
}

impl Filled {
    fn record(&mut self, obj: &DynamicObject, now: Instant) {
        let name = obj.metadata.name.clone().unwrap_or_default();
        if !obj.data["status"]["lastUpdated"].is_null() {
            self.filled.entry(name.clone()).or_insert(now);
        }
        self.seen.insert(name);
    }

    /// Whether every object seen is filled.
    pub fn all_filled(&self) -> bool {
        self.filled.len() >= self.seen.len()
    }
}

impl Progress {
    /// Records what one host's status says, seen at `now`.
    fn record(&mut self, obj: &DynamicObject, now: Instant) {
        let name = obj.metadata.name.clone().unwrap_or_default();
        let status = &obj.data["status"];
        let state = status["provisioning"]["state"].as_str().unwrap_or_default();
        self.seen.entry(name.clone()).or_insert(now);
        if !state.is_empty() {
            self.stated.entry(name.clone()).or_insert(now);
        }
        if matches!(
            state,
            "available" | "ready" | "provisioning" | "provisioned"
        ) {
            self.available.entry(name.clone()).or_insert(now);
        }
        if state == "provisioned" {
            self.provisioned.entry(name.clone()).or_insert(now);
        }
        if let Some(msg) = status["errorMessage"].as_str().filter(|m| !m.is_empty()) {
            self.errors.insert(name, msg.to_owned());
        }
    }
}

/// Watches the namespace's hosts and records when each first reaches available (or
/// later) and provisioned, and when its firmware objects are filled.
pub fn watch_hosts(
    client: kube::Client,
    ns: &str,
) -> (Arc<Mutex<Progress>>, tokio::task::JoinHandle<()>) {
    let progress = Arc::new(Mutex::new(Progress::default()));
    let kind = |kind: &str, plural: &str| {
        let gvk = GroupVersionKind::gvk("metal3.io", "v1alpha1", kind);
        Api::<DynamicObject>::namespaced_with(
            client.clone(),
            ns,
            &ApiResource::from_gvk_with_plural(&gvk, plural),
        )
    };
    let hosts = watch(
        Api::namespaced_with(client.clone(), ns, &host_resource()),
        progress.clone(),
        Listed::MarksSynced,
        Progress::record,
    );
    let settings = watch(
        kind("HostFirmwareSettings", "hostfirmwaresettings"),
        progress.clone(),
        Listed::Nothing,
        |p: &mut Progress, o, now| p.settings.record(o, now),
    );
    let components = watch(
        kind("HostFirmwareComponents", "hostfirmwarecomponents"),
        progress.clone(),
        Listed::Nothing,
        |p: &mut Progress, o, now| p.components.record(o, now),
    );
    let task = tokio::spawn(async move {
        futures::join!(hosts, settings, components);
    });
    (progress, task)
}

/// What a watch's first complete list means.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Listed {
    /// The benchmark's watch of the hosts is ready: `Progress::synced`.
    MarksSynced,
    Nothing,
}

/// Feeds every object `api`'s watch sees to `record`.
async fn watch(
    api: Api<DynamicObject>,
    progress: Arc<Mutex<Progress>>,
    listed: Listed,
    record: impl Fn(&mut Progress, &DynamicObject, Instant),
) {
    let mut stream = watcher(api, watcher::Config::default()).boxed();
    while let Some(event) = stream.next().await {
        let now = Instant::now();
        let obj = match event {
            Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) => o,
            Ok(watcher::Event::InitDone) => {
                if let (Listed::MarksSynced, Ok(mut p)) = (listed, progress.lock()) {
                    p.synced = true;
                }
                continue;
            }
            Ok(_) => continue,
            Err(e) => {
                eprintln!("scale: watch error (retrying): {e}");
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
        };
        let Ok(mut p) = progress.lock() else { return };
        record(&mut p, &obj, now);
    }
}
