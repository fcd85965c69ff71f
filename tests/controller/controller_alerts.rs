//! The shipped alert rules in a real Prometheus (Debian's) scraping `bmo run`: a host
//! whose BMC credentials Secret does not exist goes into error, and `BMOHostInError` fires for
//! it, and only for it, through Prometheus's HTTP API. The rules are
//! deploy/monitoring/bmo-rules.yaml with each `for:` cut to 1 s; expressions as shipped.
//! The boot transfers the rules count come through the same scrape: files fetched from
//! bmo's HTTP boot server (on loopback, the provisioning IP detected on `lo`).

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::support::netboot::TempDir;
use crate::support::{
    bmo_run, create_fake_host, eventually, fake_host, free_port, installed_namespace, unique_mac,
};

/// A Prometheus on loopback, killed when dropped.
struct Prometheus {
    child: Child,
    url: String,
    dir: TempDir,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Prometheus {
    /// Scrapes `target` (`host:port`) and evaluates the shipped rules every second.
    fn start(target: &str) -> Prometheus {
        let temp = TempDir::new("prometheus");
        let dir = temp.path();
        let shipped =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/monitoring/bmo-rules.yaml");
        let rules = std::fs::read_to_string(&shipped).expect("the shipped rules");
        let quick = regex::Regex::new(r"(?m)^(\s+)for: \S+$").unwrap();
        std::fs::write(
            dir.join("rules.yaml"),
            quick.replace_all(&rules, "${1}for: 1s").as_bytes(),
        )
        .unwrap();
        let config = format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n\
             rule_files: [rules.yaml]\n\
             scrape_configs:\n  - job_name: bmo\n    static_configs:\n      - targets: ['{target}']\n"
        );
        std::fs::write(dir.join("prometheus.yml"), config).unwrap();
        let listen = format!("127.0.0.1:{}", free_port());
        let log = std::fs::File::create(dir.join("prometheus.log")).unwrap();
        let child = Command::new("prometheus")
            .current_dir(dir)
            .args([
                "--config.file=prometheus.yml",
                "--storage.tsdb.path=data",
                &format!("--web.listen-address={listen}"),
            ])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("run prometheus (tests/env/stack installs Debian's prometheus)");
        Prometheus {
            child,
            url: format!("http://{listen}"),
            dir: temp,
        }
    }

    fn log_tail(&self) -> String {
        let log =
            std::fs::read_to_string(self.dir.path().join("prometheus.log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(5)..].join("\n")
    }

    /// `data` of `GET /api/v1/PATH`.
    async fn api(&self, path: &str) -> Result<Value, String> {
        let url = format!("{}/api/v1/{path}", self.url);
        let answer: Value = async { reqwest::get(&url).await?.json().await }
            .await
            .map_err(|e| format!("{url}: {e}; Prometheus log: {}", self.log_tail()))?;
        match answer["status"].as_str() {
            Some("success") => Ok(answer["data"].clone()),
            _ => Err(format!("{url}: {answer}")),
        }
    }

    /// The value of the single series `query` selects, or why not.
    async fn value(&self, query: &str) -> Result<String, String> {
        let data = self.api(&format!("query?query={query}")).await?;
        match data["result"].as_array().map(Vec::as_slice) {
            Some([one]) => Ok(one["value"][1].as_str().unwrap_or_default().to_owned()),
            _ => Err(format!("{query}: {data}")),
        }
    }

    /// The alerts named `name`, firing or pending.
    async fn alerts(&self, name: &str) -> Result<Vec<Value>, String> {
        let data = self.api("alerts").await?;
        let all = data["alerts"].as_array().cloned().unwrap_or_default();
        Ok(all
            .into_iter()
            .filter(|a| a["labels"]["alertname"] == name)
            .collect())
    }
}

#[tokio::test]
async fn a_host_in_error_fires_the_shipped_alert_in_a_real_prometheus() {
    let _shared = crate::support::shared();
    let (client, ns) = installed_namespace("alerts").await;
    let dir = TempDir::new("alerts");
    for sub in ["html", "images"] {
        std::fs::create_dir_all(dir.path().join(sub)).unwrap();
    }
    std::fs::write(dir.path().join("images/os.img"), [7u8; 1000]).unwrap();
    let path = |p: &str| dir.path().join(p).display().to_string();
    let (http_port, images, html, leases) = (
        free_port().to_string(),
        path("images"),
        path("html"),
        path("leases.json"),
    );
    let (bmo, health) = bmo_run(
        &ns,
        &[
            ("PROVISIONING_INTERFACE", "lo"),
            ("BMO_HTTP_BIND", "127.0.0.1"),
            ("HTTP_PORT", &http_port),
            ("BMO_HTTP_ROOT", &html),
            ("BMO_IMAGES_DIR", &images),
            ("BMO_LEASE_FILE", &leases),
        ],
    );
    let prometheus = Prometheus::start(&health);

    // A healthy host, and one whose BMC Secret (`broken-bmc`) is never made.
    create_fake_host(&client, &ns, "healthy").await;
    let broken: bmo::api::BareMetalHost =
        serde_json::from_value(fake_host("broken", &unique_mac())).unwrap();
    kube::Api::<bmo::api::BareMetalHost>::namespaced(client.clone(), &ns)
        .create(&Default::default(), &broken)
        .await
        .expect("create the broken host");

    let firing = eventually(
        "BMOHostInError to fire",
        Duration::from_secs(120),
        || async {
            let alerts = prometheus.alerts("BMOHostInError").await?;
            let firing: Vec<Value> = alerts
                .into_iter()
                .filter(|a| a["state"] == "firing" && a["labels"]["namespace"] == ns.as_str())
                .collect();
            if firing.is_empty() {
                let up = prometheus.api("query?query=bmo_host_error").await?;
                return Err(format!(
                    "not firing; bmo_host_error: {up}; bmo log: {}",
                    bmo.log_tail(3)
                ));
            }
            Ok(firing)
        },
    )
    .await;
    let hosts: Vec<&Value> = firing.iter().map(|a| &a["labels"]["host"]).collect();
    assert_eq!(hosts, ["broken"], "{firing:?}");
    let alert = &firing[0];
    assert_eq!(alert["labels"]["error_type"], "registration error");
    assert_eq!(alert["labels"]["severity"], "warning");
    assert_eq!(
        alert["annotations"]["runbook_url"],
        "docs/troubleshooting.md#bmohostinerror"
    );

    // The other series the rules read come from the same scrape: Ironic answers, so
    // its alert stays quiet.
    assert_eq!(prometheus.value("bmo_ironic_up").await.unwrap(), "1");
    assert!(
        prometheus
            .alerts("BMOIronicUnreachable")
            .await
            .unwrap()
            .is_empty()
    );

    // Boot transfers: one whole file and one missing, counted by status class.
    let boot = format!("http://127.0.0.1:{http_port}/images");
    let fetched = reqwest::get(format!("{boot}/os.img")).await.unwrap();
    assert_eq!(fetched.bytes().await.unwrap().len(), 1000);
    let missing = reqwest::get(format!("{boot}/absent.img")).await.unwrap();
    assert_eq!(missing.status(), 404);
    let counted = [
        (
            r#"bmo_http_transfers_total{code="2xx",complete="true"}"#,
            "1",
        ),
        (r#"bmo_http_transfers_total{code="4xx"}"#, "1"),
        (r#"bmo_boot_events_total{kind="http"}"#, "2"),
        ("bmo_http_sent_bytes_total >= 1000", ""),
    ];
    eventually(
        "the transfers in Prometheus",
        Duration::from_secs(30),
        || async {
            for (query, expected) in counted {
                let value = prometheus.value(query).await?;
                if !expected.is_empty() && value != expected {
                    return Err(format!("{query} = {value}, expected {expected}"));
                }
            }
            Ok(())
        },
    )
    .await;
}
