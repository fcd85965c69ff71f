//! What ships for installation is accepted by the real peers: the kustomization by
//! kube-apiserver (server-side dry run), `bmo make-host` output by the CRD, and the
//! systemd unit by `systemd-analyze verify`; every setting name in them is one that
//! `bmo run` reads.

use std::collections::BTreeSet;
use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use kube::Api;
use kube::api::PostParams;

use crate::support::{Stack, unique_name};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
/// The namespace deploy/ installs into.
const BMO_NAMESPACE: &str = "baremetal-operator-system";

/// `kubectl ARGS` of the stack with the admin kubeconfig, `stdin` piped in.
fn kubectl(args: &[&str], stdin: Option<&str>) -> Output {
    let stack = Stack::get();
    let mut command = Command::new("kubectl");
    if let Some(path) = stack.var("PATH") {
        command.env("PATH", path);
    }
    let mut child = command
        .env("KUBECONFIG", &stack.kubeconfig)
        .current_dir(ROOT)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run kubectl (the stack puts it on PATH)");
    if let Some(input) = stdin {
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(input.as_bytes())
            .expect("write kubectl stdin");
    }
    drop(child.stdin.take());
    child.wait_with_output().expect("wait for kubectl")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Every environment variable and long flag of `bmo run`, from the Config itself.
fn run_settings() -> (BTreeSet<String>, BTreeSet<String>) {
    let command = <bmo::config::Config as clap::Args>::augment_args(clap::Command::new("run"));
    let envs = command
        .get_arguments()
        .filter_map(|a| a.get_env())
        .map(|e| e.to_string_lossy().into_owned())
        .collect();
    let flags = command
        .get_arguments()
        .filter_map(|a| a.get_long())
        .map(str::to_owned)
        .collect();
    (envs, flags)
}

/// Variables `bmo run` reads from its environment outside the Config (logging,
/// Kubernetes client, pod identity).
const OTHER_KNOWN_ENV: &[&str] = &["KUBECONFIG", "RUST_LOG", "POD_NAME", "POD_NAMESPACE"];

fn known_env() -> BTreeSet<String> {
    let (mut envs, _) = run_settings();
    envs.extend(OTHER_KNOWN_ENV.iter().map(|s| s.to_string()));
    envs
}

#[tokio::test]
async fn kustomization_passes_a_server_side_dry_run() {
    let _shared = crate::support::shared();
    let stack = Stack::get();
    let client = stack.kube_client().await;
    // A dry run does not create the Namespace, so the namespaced objects would find
    // none; create it for real (it is what `kubectl apply -k` makes first anyway).
    let mut namespace = Namespace::default();
    namespace.metadata.name = Some(BMO_NAMESPACE.into());
    match Api::<Namespace>::all(client)
        .create(&PostParams::default(), &namespace)
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(status)) if status.code == 409 => {}
        Err(e) => panic!("create namespace {BMO_NAMESPACE}: {e}"),
    }
    let out = kubectl(&["apply", "--dry-run=server", "-k", "deploy/"], None);
    assert!(
        out.status.success(),
        "kubectl apply --dry-run=server -k deploy/ failed:\n{}\n{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    let applied = text(&out.stdout);
    for object in [
        "customresourcedefinition.apiextensions.k8s.io/baremetalhosts.metal3.io",
        "customresourcedefinition.apiextensions.k8s.io/hardwaredata.metal3.io",
        "clusterrole.rbac.authorization.k8s.io/baremetal-operator-manager-role",
        "role.rbac.authorization.k8s.io/baremetal-operator-leader-election-role",
        "serviceaccount/baremetal-operator-controller-manager",
        "configmap/baremetal-operator-ironic",
        "deployment.apps/baremetal-operator-controller-manager",
    ] {
        assert!(
            applied.contains(object),
            "{object} missing from:\n{applied}"
        );
    }
}

#[test]
fn kustomization_lists_every_generated_manifest() {
    let _shared = crate::support::shared();
    let kustomization =
        std::fs::read_to_string(Path::new(ROOT).join("deploy/kustomization.yaml")).unwrap();
    for dir in ["crds", "admission"] {
        for entry in std::fs::read_dir(Path::new(ROOT).join("deploy").join(dir)).unwrap() {
            let file = entry.unwrap().file_name().to_string_lossy().into_owned();
            assert!(
                kustomization.contains(&format!("{dir}/{file}")),
                "deploy/kustomization.yaml does not list {dir}/{file}"
            );
        }
    }
}

fn yaml_file(path: &str) -> serde_json::Value {
    let text = std::fs::read_to_string(Path::new(ROOT).join(path)).unwrap();
    serde_norway::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
}

#[test]
fn configmap_and_env_file_use_only_names_bmo_run_reads() {
    let _shared = crate::support::shared();
    let known = known_env();
    let configmap = yaml_file("deploy/manager/ironic-configmap.yaml");
    let data = configmap["data"].as_object().expect("ConfigMap data");
    for key in data.keys() {
        assert!(
            known.contains(key),
            "ConfigMap key {key} is not read by bmo run"
        );
    }
    assert!(
        data.contains_key("IRONIC_ENDPOINT"),
        "ConfigMap lacks IRONIC_ENDPOINT"
    );
    let env_file =
        std::fs::read_to_string(Path::new(ROOT).join("systemd/bmo.env.example")).unwrap();
    for line in env_file.lines() {
        let line = line.trim().trim_start_matches('#');
        if let Some((key, _)) = line.split_once('=')
            && !key.is_empty()
            && key
                .chars()
                .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
        {
            assert!(
                known.contains(key),
                "bmo.env.example sets {key}, which bmo run does not read"
            );
        }
    }
}

/// Settings whose URLs only bmo itself uses (not a booting host): a loopback address
/// is a fine example there, since Ironic often runs on the same node.
const BMO_SIDE_URLS: &[&str] = &["IRONIC_ENDPOINT"];

/// Every `KEY=value` of the env example (commented-out ones too: users uncomment
/// them) and every ConfigMap key and container `env` value of the manifests.
fn shipped_settings() -> Vec<(String, String, String)> {
    let mut found = Vec::new();
    let env_file = "systemd/bmo.env.example";
    let text = std::fs::read_to_string(Path::new(ROOT).join(env_file)).unwrap();
    for line in text.lines() {
        let line = line.trim().trim_start_matches('#').trim();
        if let Some((key, value)) = line.split_once('=')
            && !key.is_empty()
            && key
                .chars()
                .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
        {
            found.push((env_file.to_owned(), key.to_owned(), value.to_owned()));
        }
    }
    let configmap = "deploy/manager/ironic-configmap.yaml";
    for (key, value) in yaml_file(configmap)["data"].as_object().expect("data") {
        let value = value.as_str().unwrap_or_default().to_owned();
        found.push((configmap.to_owned(), key.clone(), value));
    }
    let csv = "deploy/olm/manifests/bmo.clusterserviceversion.yaml";
    for (path, pod) in [
        (
            "deploy/manager/manager.yaml",
            yaml_file("deploy/manager/manager.yaml")["spec"]["template"]["spec"].clone(),
        ),
        (
            csv,
            yaml_file(csv)["spec"]["install"]["spec"]["deployments"][0]["spec"]["template"]["spec"]
                .clone(),
        ),
    ] {
        for container in pod["containers"].as_array().expect("containers") {
            for env in container["env"].as_array().into_iter().flatten() {
                if let (Some(key), Some(value)) = (env["name"].as_str(), env["value"].as_str()) {
                    found.push((path.to_owned(), key.to_owned(), value.to_owned()));
                }
            }
        }
    }
    found
}

#[test]
fn shipped_configs_give_booting_hosts_no_loopback_address() {
    let _shared = crate::support::shared();
    let settings = shipped_settings();
    assert!(
        settings.iter().any(|(_, k, _)| k == "IRONIC_ENDPOINT"),
        "no settings read: {settings:?}"
    );
    for (path, key, value) in &settings {
        if BMO_SIDE_URLS.contains(&key.as_str()) {
            continue;
        }
        for word in value.split(|c: char| c.is_whitespace() || c == ',' || c == '"') {
            let Ok(url) = url::Url::parse(word) else {
                continue;
            };
            let host = url.host_str().unwrap_or_default();
            assert!(
                !(host == "localhost" || host.starts_with("127.") || host == "[::1]"),
                "{path}: {key}={value} names a loopback address that booting hosts cannot reach"
            );
        }
    }
    // Unset, DEPLOY_*_URL default to the detected provisioning IP; a shipped value
    // would override that detection on every install.
    let text = std::fs::read_to_string(Path::new(ROOT).join("systemd/bmo.env.example")).unwrap();
    for line in text.lines() {
        assert!(
            !line.starts_with("DEPLOY_"),
            "systemd/bmo.env.example sets {line}; leave it commented out"
        );
    }
    let configmap = yaml_file("deploy/manager/ironic-configmap.yaml");
    for key in ["DEPLOY_KERNEL_URL", "DEPLOY_RAMDISK_URL"] {
        assert!(
            configmap["data"].get(key).is_none(),
            "the ConfigMap sets {key}, overriding the detected address"
        );
    }
}

#[test]
fn deployment_runs_on_the_host_network_with_only_network_capabilities() {
    let _shared = crate::support::shared();
    let deployment = yaml_file("deploy/manager/manager.yaml");
    let pod = &deployment["spec"]["template"]["spec"];
    assert_eq!(pod["hostNetwork"], true);
    let container = &pod["containers"][0];
    let security = &container["securityContext"];
    assert_eq!(security["capabilities"]["drop"], serde_json::json!(["ALL"]));
    assert_eq!(
        security["capabilities"]["add"],
        serde_json::json!(["NET_BIND_SERVICE", "NET_RAW", "NET_ADMIN"])
    );
    assert_eq!(security["allowPrivilegeEscalation"], false);
    assert_eq!(security["readOnlyRootFilesystem"], true);
    assert_eq!(security["privileged"], false);
    let known = known_env();
    for env in container["env"].as_array().expect("env") {
        let name = env["name"].as_str().expect("env name");
        assert!(
            known.contains(name),
            "Deployment sets {name}, which bmo run does not read"
        );
    }
    // The probes hit the port bmo serves them on.
    assert_eq!(container["livenessProbe"]["httpGet"]["path"], "/healthz");
    assert_eq!(container["readinessProbe"]["httpGet"]["path"], "/readyz");
}

/// `bmo make-host ARGS` → its stdout, stderr and success.
fn make_host(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_bmo"))
        .arg("make-host")
        .args(args)
        .env_remove("BMC_USERNAME")
        .env_remove("BMC_PASSWORD")
        .output()
        .expect("run bmo make-host")
}

#[tokio::test]
async fn make_host_output_is_accepted_by_the_crd() {
    let _shared = crate::support::shared();
    let stack = Stack::get();
    let client = stack.kube_client().await;
    bmo::api::install::install(&client, Duration::from_secs(60))
        .await
        .expect("install CRDs");
    let ns = unique_name("make-host");
    let mut namespace = Namespace::default();
    namespace.metadata.name = Some(ns.clone());
    Api::<Namespace>::all(client)
        .create(&PostParams::default(), &namespace)
        .await
        .expect("create namespace");

    let cases: &[&[&str]] = &[
        &[
            "worker-0",
            "--bmc-address",
            "redfish+https://10.0.0.5/redfish/v1/Systems/1",
            "--boot-mac",
            "52-54-00-AB-CD-EF",
            "--image-url",
            "http://images.example/os.qcow2",
            "--image-checksum",
            "http://images.example/os.qcow2.sha256sum",
            "--image-checksum-type",
            "sha256",
            "--image-format",
            "qcow2",
            "--boot-mode",
            "UEFISecureBoot",
            "--hardware-profile",
            "unknown",
            "--consumer",
            "Metal3Machine/worker-0",
            "--consumer-api-version",
            "infrastructure.cluster.x-k8s.io/v1beta1",
            "--disable-certificate-verification",
        ],
        &[
            "worker-1",
            "--bmc-address",
            "libvirt://192.168.122.1/",
            "--boot-mac",
            "52:54:00:00:00:01",
            "--offline",
        ],
        &[
            "worker-2",
            "--bmc-address",
            "ipmi://[fd00::5]:623",
            "--image-url",
            "https://images.example/live.iso",
            "--image-format",
            "live-iso",
        ],
        &[
            "worker-3",
            "--bmc-address",
            "10.0.0.7",
            "--image-url",
            "oci://registry.example/os:1",
        ],
    ];
    for case in cases {
        let mut args = case.to_vec();
        args.extend(["-n", &ns, "--username", "admin", "--password", "pa$$ word"]);
        let out = make_host(&args);
        assert!(
            out.status.success(),
            "make-host {args:?}: {}",
            text(&out.stderr)
        );
        let yaml = text(&out.stdout);
        let applied = kubectl(&["apply", "--dry-run=server", "-f", "-"], Some(&yaml));
        assert!(
            applied.status.success(),
            "kube-apiserver refused make-host {case:?} output:\n{yaml}\n{}",
            text(&applied.stderr)
        );
        let said = text(&applied.stdout);
        assert!(
            said.contains("secret/") && said.contains("baremetalhost.metal3.io/"),
            "{said}"
        );
    }
}

#[test]
fn make_host_refuses_bad_input_with_exit_2_and_the_flag_named() {
    let _shared = crate::support::shared();
    let out = make_host(&[
        "worker-0",
        "--bmc-address",
        "redfish://10.0.0.5/",
        "--username",
        "admin",
        "--password",
        "secret",
        "--image-url",
        "http://images.example/os.qcow2",
    ]);
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(err.contains("--image-checksum is required"), "{err}");
    assert!(out.stdout.is_empty(), "nothing printed on refusal");
    assert!(!err.contains("secret"), "password echoed: {err}");
}

/// The unit, with ExecStart pointed at the binary this test run built (verify checks
/// that the executable exists; the installed path does not exist on a build machine).
#[test]
fn systemd_unit_passes_systemd_analyze_verify() {
    let _shared = crate::support::shared();
    let unit = std::fs::read_to_string(Path::new(ROOT).join("systemd/bmo.service")).unwrap();
    assert!(unit.contains("\nType=notify\n") && unit.contains("\nWatchdogSec="));
    assert!(unit.contains("\nExecStart=/usr/local/bin/bmo run\n"));
    let unit = unit.replace(
        "\nExecStart=/usr/local/bin/bmo run\n",
        &format!("\nExecStart={} run\n", env!("CARGO_BIN_EXE_bmo")),
    );
    let dir = std::env::temp_dir().join(unique_name("bmo-unit"));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("bmo.service");
    std::fs::write(&path, unit).unwrap();
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&path)
        .output()
        .expect("systemd-analyze (Debian package systemd) must be installed");
    let _ = std::fs::remove_dir_all(&dir);
    let said = format!("{}{}", text(&out.stdout), text(&out.stderr));
    assert!(
        out.status.success(),
        "systemd-analyze verify failed:\n{said}"
    );
    // verify exits 0 on unknown keys too (it only warns); none are allowed.
    assert!(
        said.trim().is_empty(),
        "systemd-analyze verify warned:\n{said}"
    );
}
