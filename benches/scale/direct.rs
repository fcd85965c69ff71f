//! The direct driver: the Ironic work bmo asks for each host, sent straight to an
//! Ironic of its own without bmo, with as many hosts in flight as bmo's
//! `PROVISIONING_LIMIT`. With `as_bmo` (the `direct-as-bmo` half) it also makes the
//! requests bmo's features add (adoption look-ups, BIOS, firmware and inventory reads,
//! the power-on `online: true` asks for).

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use axum::http::StatusCode;
use serde_json::{Value, json};
use tokio::sync::Semaphore;

use crate::Ctx;
use crate::measure::{DirectRun, spread};
use crate::proxy::{Flavor, start_proxy};
use crate::report::print_breakdown;
use crate::stack::{PrivateIronic, Sushy, start_sushy};
use crate::workload::{IMAGE_SHA256, IMAGE_URL, Work, host_name, mac};

const IRONIC_VERSION_HEADER: &str = "X-OpenStack-Ironic-API-Version";
const IRONIC_MICROVERSION: &str = "1.89";

struct Direct {
    http: reqwest::Client,
    base: String,
    poll: Duration,
    kernel: String,
    ramdisk: String,
    /// The BMC addresses and credentials of the Redfish work.
    redfish: Option<(Vec<String>, bmo::credentials::Credentials)>,
    /// Also the reads (and the power-on) bmo's features add (the `direct-as-bmo` run).
    as_bmo: bool,
}

impl Direct {
    async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> Result<Value> {
        let mut request = self
            .http
            .request(method.clone(), format!("{}{path}", self.base))
            .header(IRONIC_VERSION_HEADER, IRONIC_MICROVERSION);
        if let Some(body) = body {
            request = request.json(&body);
        }
        // A node locked by the conductor answers 409: look again shortly.
        for _ in 0..600 {
            let response = request
                .try_clone()
                .context("clone an Ironic request")?
                .send()
                .await?;
            let status = response.status();
            if status == StatusCode::CONFLICT {
                tokio::time::sleep(self.poll).await;
                continue;
            }
            let text = response.text().await?;
            if !status.is_success() {
                bail!("{method} {path}: {status}: {text}");
            }
            return Ok(if text.is_empty() {
                Value::Null
            } else {
                serde_json::from_str(&text)?
            });
        }
        bail!("{method} {path}: node stayed locked")
    }

    /// What bmo asks before it creates a node (when `as_bmo`): a node by its name,
    /// else one with a port of the boot MAC, to adopt.
    async fn look_for_node_as_bmo(&self, name: &str, mac: &str) -> Result<()> {
        self.read_as_bmo(&format!("nodes/{name}")).await?;
        self.read_as_bmo(&format!("ports/detail?address={mac}"))
            .await
    }

    /// A read bmo makes for a feature the direct driver does not have (when
    /// `as_bmo`): its answer is not used, and a 404 (no inventory from fake
    /// inspection) is an answer too.
    async fn read_as_bmo(&self, path: &str) -> Result<()> {
        if !self.as_bmo {
            return Ok(());
        }
        let response = self
            .http
            .get(format!("{}{path}", self.base))
            .header(IRONIC_VERSION_HEADER, IRONIC_MICROVERSION)
            .send()
            .await?;
        let status = response.status();
        if !status.is_success() && status != StatusCode::NOT_FOUND {
            bail!("GET {path}: {status}");
        }
        Ok(())
    }

    async fn set_state(&self, uuid: &str, body: Value) -> Result<()> {
        self.call(
            reqwest::Method::PUT,
            &format!("nodes/{uuid}/states/provision"),
            Some(body),
        )
        .await
        .map(drop)
    }

    /// Polls the node until it rests in `state` and `done`; the node as last read.
    async fn wait_for(
        &self,
        uuid: &str,
        state: &str,
        done: impl Fn(&Value) -> bool,
    ) -> Result<Value> {
        loop {
            let node = self
                .call(reqwest::Method::GET, &format!("nodes/{uuid}"), None)
                .await?;
            let now = node["provision_state"].as_str().unwrap_or_default();
            if now == state && node["target_provision_state"].is_null() && done(&node) {
                return Ok(node);
            }
            if now.ends_with("failed") || (now == "enroll" && !node["last_error"].is_null()) {
                bail!("node {uuid} is in {now}: {}", node["last_error"]);
            }
            tokio::time::sleep(self.poll).await;
        }
    }

    fn new(ctx: &Ctx, port: u16, sushy: Option<&Sushy>, n: usize, as_bmo: bool) -> Result<Direct> {
        Ok(Direct {
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(60))
                .build()?,
            base: format!("http://127.0.0.1:{port}/v1/"),
            poll: ctx.settings.direct_poll,
            kernel: ctx.stack.get("DEPLOY_KERNEL_URL")?.to_owned(),
            ramdisk: ctx.stack.get("DEPLOY_RAMDISK_URL")?.to_owned(),
            redfish: sushy.map(|sushy| {
                (
                    (0..n).map(|i| sushy.address(i)).collect(),
                    bmo::credentials::Credentials {
                        username: sushy.username.clone(),
                        password: bmo::credentials::SecretString::new(sushy.password.clone()),
                    },
                )
            }),
            as_bmo,
        })
    }

    /// What bmo asks of Ironic to enrol host `i` up to `manageable`, its node
    /// created from `body`: (as bmo) the look for an existing node, create the node
    /// and its boot MAC's port, `manage`, then (as bmo) the BIOS settings and firmware
    /// components read. The node's uuid.
    async fn enrol(&self, run: usize, i: usize, body: Value) -> Result<String> {
        self.look_for_node_as_bmo(&format!("scale~{}", host_name(i)), &mac(run, i))
            .await?;
        let node = self
            .call(reqwest::Method::POST, "nodes", Some(body))
            .await?;
        let uuid = node["uuid"]
            .as_str()
            .context("Ironic returned a node without uuid")?
            .to_owned();
        self.call(
            reqwest::Method::POST,
            "ports",
            Some(json!({"node_uuid": uuid, "address": mac(run, i)})),
        )
        .await?;
        self.set_state(&uuid, json!({"target": "manage"})).await?;
        self.wait_for(&uuid, "manageable", |_| true).await?;
        self.read_as_bmo(&format!("nodes/{uuid}/bios?detail=True"))
            .await?;
        self.read_as_bmo(&format!("nodes/{uuid}/firmware")).await?;
        Ok(uuid)
    }

    /// What bmo asks of Ironic for one Redfish host with inspection and automated
    /// cleaning disabled, up to available: create the node (bmo's driver, interfaces
    /// and `driver_info` for the address), its boot MAC's port, `manage`. A host is
    /// `available` while its node is `manageable` (as upstream's are); `provide`
    /// comes with provisioning.
    async fn redfish_host(&self, run: usize, i: usize, limit: &Semaphore) -> Result<Instant> {
        let (addresses, credentials) = self.redfish.as_ref().context("no Redfish BMCs")?;
        let address = bmo::bmc::BmcAddress::parse(&addresses[i])?;
        let settings = address.driver_settings(false);
        let mut driver_info = address.driver_info(credentials, false);
        driver_info.insert("deploy_kernel".into(), json!(self.kernel));
        driver_info.insert("deploy_ramdisk".into(), json!(self.ramdisk));
        let mut body = json!({
            "name": format!("scale~{}", host_name(i)),
            "driver": settings.driver,
            "driver_info": driver_info,
            "properties": {"capabilities": "boot_mode:uefi"},
            "inspect_interface": "no-inspect",
            "automated_clean": false,
        });
        if let Value::Object(interfaces) = serde_json::to_value(settings.interfaces)? {
            for (name, value) in interfaces {
                body[format!("{name}_interface")] = value;
            }
        }
        let _permit = limit.acquire().await?;
        self.enrol(run, i, body).await?;
        Ok(Instant::now())
    }

    /// What bmo asks of Ironic for one fake-hardware host with an image: enrolled,
    /// inspected and cleaned up to available under one slot, then deployed under
    /// another. When it was available and when provisioned.
    async fn host(&self, run: usize, i: usize, limit: &Semaphore) -> Result<(Instant, Instant)> {
        let name = host_name(i);
        let permit = limit.acquire().await?;
        let body = json!({
            "name": format!("scale~{name}"),
            "driver": "fake-hardware",
            "driver_info": {"deploy_kernel": self.kernel, "deploy_ramdisk": self.ramdisk},
            "properties": {"capabilities": "boot_mode:uefi"},
            "boot_interface": "fake", "deploy_interface": "fake", "inspect_interface": "fake",
            "management_interface": "fake", "power_interface": "fake", "raid_interface": "fake",
            "vendor_interface": "fake", "bios_interface": "fake", "firmware_interface": "fake",
            "automated_clean": true,
        });
        let uuid = self.enrol(run, i, body).await?;
        self.inspect_and_provide(&uuid).await?;
        let available = Instant::now();
        drop(permit);

        let permit = limit.acquire().await?;
        let node = self.deploy(&uuid, &name).await?;
        let provisioned = Instant::now();
        drop(permit);
        self.power_on_as_bmo(&uuid, &node).await?;
        Ok((available, provisioned))
    }

    /// `inspect` (and, as bmo, the inventory read), then `provide` (automated
    /// cleaning) until the node is available.
    async fn inspect_and_provide(&self, uuid: &str) -> Result<()> {
        self.set_state(uuid, json!({"target": "inspect"})).await?;
        self.wait_for(uuid, "manageable", |n| {
            !n["inspection_finished_at"].is_null()
        })
        .await?;
        self.read_as_bmo(&format!("nodes/{uuid}/inventory")).await?;
        self.set_state(uuid, json!({"target": "provide"})).await?;
        self.wait_for(uuid, "available", |_| true).await?;
        Ok(())
    }

    /// The image in `instance_info`, `validate`, `active` with a config drive, until
    /// the node is active; the node as last read.
    async fn deploy(&self, uuid: &str, name: &str) -> Result<Value> {
        self.call(
            reqwest::Method::PATCH,
            &format!("nodes/{uuid}"),
            Some(json!([
                {"op": "add", "path": "/instance_info", "value": {
                    "capabilities": {}, "image_source": IMAGE_URL,
                    "image_os_hash_algo": "sha256", "image_os_hash_value": IMAGE_SHA256,
                }},
                {"op": "add", "path": "/properties/capabilities", "value": "boot_mode:uefi"},
            ])),
        )
        .await?;
        self.call(
            reqwest::Method::GET,
            &format!("nodes/{uuid}/validate"),
            None,
        )
        .await?;
        self.set_state(
            uuid,
            json!({"target": "active", "configdrive": {
                "meta_data": {"uuid": uuid, "name": name, "hostname": name, "local-hostname": name},
            }}),
        )
        .await?;
        self.wait_for(uuid, "active", |_| true).await
    }

    /// `online: true` (as bmo): fake-hardware's deploy leaves the node's power as it
    /// was.
    async fn power_on_as_bmo(&self, uuid: &str, node: &Value) -> Result<()> {
        if self.as_bmo && node["power_state"] != "power on" {
            self.call(
                reqwest::Method::PUT,
                &format!("nodes/{uuid}/states/power"),
                Some(json!({"target": "power on"})),
            )
            .await?;
        }
        Ok(())
    }
}

/// Seconds from the start until each host was available and provisioned (the same
/// for the Redfish work, which ends at available).
struct Times {
    available: Vec<f64>,
    provisioned: Vec<f64>,
}

/// All N hosts' work at once, at most `limit` in flight.
async fn drive_hosts(
    direct: Arc<Direct>,
    limit: usize,
    work: Work,
    run: usize,
    n: usize,
    name: &str,
) -> Result<Times> {
    let limit = Arc::new(Semaphore::new(limit.max(1)));
    let t0 = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..n {
        let (direct, limit) = (direct.clone(), limit.clone());
        tasks.spawn(async move {
            match work {
                Work::Fake => direct.host(run, i, &limit).await,
                Work::Redfish => {
                    let available = direct.redfish_host(run, i, &limit).await?;
                    Ok((available, available))
                }
            }
        });
    }
    let (mut available, mut provisioned) = (Vec::new(), Vec::new());
    while let Some(done) = tasks.join_next().await {
        let (a, p) = done.context("a direct-Ironic task panicked")??;
        available.push(a.duration_since(t0).as_secs_f64());
        provisioned.push(p.duration_since(t0).as_secs_f64());
        if provisioned.len() % 100 == 0 {
            eprintln!(
                "scale: N={n} {name}: {} done after {:.0} s",
                provisioned.len(),
                t0.elapsed().as_secs_f64()
            );
        }
    }
    Ok(Times {
        available,
        provisioned,
    })
}

/// One direct-Ironic run of `n` hosts of `work` on an empty Ironic of its own.
pub async fn run_direct(
    ctx: &Ctx,
    run: usize,
    n: usize,
    work: Work,
    as_bmo: bool,
) -> Result<DirectRun> {
    let s = &ctx.settings;
    let name = if as_bmo { "direct-as-bmo" } else { "direct" };
    let sushy_name = format!("scale-{}-{n}-{name}-sushy", ctx.stamp);
    let sushy = start_sushy(ctx, work, &sushy_name, run, n).await?;
    let ironic = PrivateIronic::start(
        &ctx.repo,
        &ctx.stack_dir,
        &format!("scale-{}-{n}-{run}-{name}", ctx.stamp),
        &s.ironic_conf,
        s.ironic_conductors,
    )?;
    let proxy = start_proxy(&ironic.endpoint.replace("/v1/", ""), None, Flavor::Ironic).await?;
    let direct = Arc::new(Direct::new(ctx, proxy.port, sushy.as_ref(), n, as_bmo)?);
    let cpu_start = ironic.cpu_seconds();
    let times = drive_hosts(direct, s.limit, work, run, n, name).await?;
    let (ironic_requests, kinds) = proxy.counts.snapshot();
    let result = DirectRun {
        available: spread(times.available),
        provisioned: spread(times.provisioned),
        ironic_cpu: ironic.cpu_seconds() - cpu_start,
        ironic_requests,
    };
    eprintln!(
        "scale: N={n} {name}: all {} after {:.1} s",
        work.target(),
        result.target(work).max
    );
    print_breakdown(&format!("Ironic requests, {name}"), &kinds);
    Ok(result)
}
