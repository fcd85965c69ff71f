//! The boot activity page of `bmo run`, read by Debian's headless Chromium against the
//! real stack: hosts in three states (provisioned, available, and registering with
//! an error), the files a client fetched over HTTP and TFTP with their sizes, the
//! lease table and Ironic's reachability, as the DOM the browser built shows them.
//! Through the provisioning IP the page is refused. Loopback only: bmo's HTTP and TFTP
//! servers on 127.0.0.1 (the provisioning IP detected on `lo`), the page on 127.0.0.2.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use bmo::api::BareMetalHost;
use kube::Api;
use serde_json::json;

use crate::support::netboot::TempDir;
use crate::support::{
    bmo_run, create_bmc_secret, create_fake_host, eventually, fake_host, free_port,
    installed_namespace, unique_mac,
};

/// The spare host's BMC password, which the page must never show.
const SPARE_PASSWORD: &str = "Spare-Pw-4711";

/// Bytes of the file fetched over HTTP.
const IMAGE_BYTES: usize = 123_457;

/// The page as Chromium's DOM after loading it (`--dump-dom`), or why not.
fn dom(url: &str) -> Result<String, String> {
    let out = Command::new("chromium")
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--dump-dom",
            url,
        ])
        .output()
        .map_err(|e| format!("cannot run chromium: {e}"))?;
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Saves what Chromium renders of `url` as a PNG at `path`.
fn screenshot(url: &str, path: &Path) {
    let out = Command::new("chromium")
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
        ])
        .arg("--window-size=1400,1500")
        .arg(format!("--screenshot={}", path.display()))
        .arg(url)
        .output()
        .expect("run chromium");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let png = std::fs::read(path).expect("screenshot written");
    assert!(png.starts_with(b"\x89PNG"), "not a PNG");
}

fn fetch(url: &str) -> usize {
    let out = Command::new("curl")
        .args(["-sS", "--fail", "--max-time", "20", "-o", "-", url])
        .output()
        .expect("run curl");
    assert!(
        out.status.success(),
        "{url}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout.len()
}

/// The `bmo run` settings of this test: HTTP and TFTP on loopback, no DHCP.
fn netboot_env(dir: &Path, http: u16, tftp: u16) -> Vec<(String, String)> {
    let path = |p: &str| dir.join(p).display().to_string();
    vec![
        ("PROVISIONING_INTERFACE".into(), "lo".into()),
        ("BMO_HTTP_BIND".into(), "127.0.0.1".into()),
        ("HTTP_PORT".into(), http.to_string()),
        ("BMO_TFTP".into(), "true".into()),
        ("BMO_TFTP_ADDR".into(), format!("127.0.0.1:{tftp}")),
        ("BMO_HTTP_ROOT".into(), path("html")),
        ("BMO_IMAGES_DIR".into(), path("images")),
        ("BMO_TFTP_ROOT".into(), path("tftpboot")),
        ("BMO_LEASE_FILE".into(), path("leases.json")),
    ]
}

#[tokio::test]
async fn the_page_shows_hosts_boot_timelines_and_ironic_and_stays_off_the_provisioning_network() {
    let _shared = crate::support::shared();
    let (client, ns) = installed_namespace("activity").await;
    let dir = TempDir::new("activity");
    for sub in ["html", "images", "tftpboot"] {
        std::fs::create_dir_all(dir.path().join(sub)).unwrap();
    }
    std::fs::write(dir.path().join("images/os.img"), vec![7u8; IMAGE_BYTES]).unwrap();
    let (http, tftp) = (free_port(), free_port());
    let settings = netboot_env(dir.path(), http, tftp);
    let env = |health: &'static str| -> Vec<(&str, &str)> {
        let mut env: Vec<(&str, &str)> = settings
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        env.push(("BMO_HEALTH_ADDR", health));
        env
    };

    // Reached through the provisioning IP (127.0.0.1 on lo): refused, naming the setting.
    let through_provisioning: &'static str = format!("127.0.0.1:{}", free_port()).leak();
    let (refusing, _) = bmo_run(&ns, &env(through_provisioning));
    // Until the provisioning IP is known the page cannot tell, and says so (503).
    let refused = eventually("the page to answer", Duration::from_secs(60), || async {
        match reqwest::get(format!("http://{through_provisioning}/activity")).await {
            Ok(r) if r.status() == reqwest::StatusCode::SERVICE_UNAVAILABLE => {
                Err("starting".to_owned())
            }
            Ok(r) => Ok((r.status().as_u16(), r.text().await.unwrap_or_default())),
            Err(e) => Err(e.to_string()),
        }
    })
    .await;
    assert_eq!(refused.0, 403, "{refused:?}");
    assert!(
        refused.1.contains("BMO_ACTIVITY_ON_PROVISIONING_NETWORK"),
        "{refused:?}"
    );
    drop(refusing);

    // Three hosts: one provisions, one stays available, one cannot register.
    create_fake_host(&client, &ns, "deployed").await;
    create_bmc_secret(&client, &ns, "spare-bmc", "spare-admin", SPARE_PASSWORD).await;
    let mut spare = fake_host("spare", &unique_mac());
    spare["spec"]["image"] = serde_json::Value::Null;
    let mut broken = fake_host("broken", &unique_mac());
    broken["spec"]["bmc"]["credentialsName"] = json!("absent-bmc");
    let hosts: Api<BareMetalHost> = Api::namespaced(client.clone(), &ns);
    for host in [spare, broken] {
        let host: BareMetalHost = serde_json::from_value(host).unwrap();
        hosts
            .create(&Default::default(), &host)
            .await
            .expect("create host");
    }
    let page_addr: &'static str = format!("127.0.0.2:{}", free_port()).leak();
    let (bmo, _) = bmo_run(&ns, &env(page_addr));
    let page = format!("http://{page_addr}/activity");

    // A client fetches its boot file over TFTP and an image over HTTP.
    let loader_bytes = eventually("bmo's TFTP server", Duration::from_secs(60), || async {
        let out = Command::new("curl")
            .args(["-sS", "--max-time", "10", "-o", "-"])
            .arg(format!("tftp://127.0.0.1:{tftp}/undionly.kpxe"))
            .output()
            .map_err(|e| e.to_string())?;
        match out.status.success() {
            true => Ok(out.stdout.len()),
            false => Err(String::from_utf8_lossy(&out.stderr).into_owned()),
        }
    })
    .await;
    assert_eq!(
        fetch(&format!("http://127.0.0.1:{http}/images/os.img")),
        IMAGE_BYTES
    );

    let shown = eventually("the page to show three states", Duration::from_secs(240), || async {
        let dom = dom(&page)?;
        let want = [
            format!("data-host=\"{ns}/deployed\"><td>{ns}/deployed</td><td class=\"state\">provisioned</td>"),
            format!("data-host=\"{ns}/spare\"><td>{ns}/spare</td><td class=\"state\">available</td>"),
            format!("data-host=\"{ns}/broken\"><td>{ns}/broken</td><td class=\"state\">registering</td>"),
        ];
        match want.iter().find(|w| !dom.contains(w.as_str())) {
            None => Ok(dom),
            Some(missing) => Err(format!("{missing} not in the page yet; log: {}", bmo.log_tail(5))),
        }
    })
    .await;
    for count in [
        "<td>provisioned</td><td>1</td>",
        "<td>available</td><td>1</td>",
        "<td>registering</td><td>1</td>",
    ] {
        assert!(shown.contains(count), "{count} not in {shown}");
    }
    assert!(
        shown.contains("registration error"),
        "the broken host's error: {shown}"
    );
    assert!(
        shown.contains("absent-bmc"),
        "the error names the missing Secret: {shown}"
    );
    assert!(
        shown.contains(&format!("GET /images/os.img: 200, {IMAGE_BYTES} bytes")),
        "the HTTP fetch with its size: {shown}"
    );
    assert!(
        shown.contains(&format!("undionly.kpxe: sent, {loader_bytes} bytes")),
        "the TFTP transfer with its size: {shown}"
    );
    assert!(
        shown.contains("<span class=\"ok\">reachable</span>"),
        "Ironic: {shown}"
    );
    assert!(
        !shown.contains(SPARE_PASSWORD) && !shown.contains("spare-admin"),
        "no credential: {shown}"
    );
    assert!(!shown.contains("cut short"), "whole fetches: {shown}");

    // The same as JSON, and a picture of it.
    let json: serde_json::Value = reqwest::get(format!("http://{page_addr}/activity.json"))
        .await
        .expect("activity.json")
        .json()
        .await
        .expect("JSON");
    assert_eq!(json["states"]["provisioned"], 1, "{json}");
    let shot = Path::new(env!("CARGO_TARGET_TMPDIR")).join("activity.png");
    screenshot(&page, &shot);
}
