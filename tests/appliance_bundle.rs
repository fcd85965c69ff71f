//! The offline bundle as an air-gapped site installs it, by the blocks of
//! docs/install.md: `scripts/build-bundle` with an agent kernel and ramdisk (the
//! stack's IPA build when `BMO_IPA_DIR` names one), then, in a network namespace with
//! no route out (only the stack's two ports are forwarded in), the install steps into
//! an empty root, the image load, the kustomization applied, the systemd files
//! installed, and the unit's `ExecStart` run with its `EnvironmentFile` as systemd
//! would. That bmo serves the agent's files at its detected address, hands Ironic
//! those URLs and provisions a fake-hardware host.

// Tests may panic on what they set up themselves.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod appliance_common;
mod netboot_common;
mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use appliance_common::{
    Forwarder, INSTALL_PATHS, ROOT, doc_script, image, run, run_script, stack_addresses,
    stack_path, under_root, wait_for,
};
use bmo::api::{BareMetalHost, ProvisioningState};
use kube::Api;
use netboot_common::{Netns, TempDir, spawn};
use support::{Stack, create_fake_host, eventually, new_namespace};

/// The provisioning address inside the test's namespace (a veth pair whose both ends
/// are there).
const PROVISIONING_IP: &str = "10.78.0.1";
const BUNDLE: &str = concat!("bmo-", env!("CARGO_PKG_VERSION"), "-x86_64");
/// The settings of `bmo run` that name paths, with their defaults: the test moves them
/// under its root too.
const PATH_SETTINGS: &[(&str, &str)] = &[
    ("BMO_HTTP_ROOT", "/shared/html"),
    ("BMO_IMAGES_DIR", "/shared/html/images"),
    ("BMO_TFTP_ROOT", "/shared/tftpboot"),
    ("BMO_IPXE_DIR", "/shared/custom_ipxe_firmware"),
    ("BMO_LEASE_FILE", "/var/lib/bmo/leases.json"),
];
const AGENT_FILES: [&str; 2] = [
    "ironic-python-agent.kernel",
    "ironic-python-agent.initramfs",
];

/// The directory with the agent's kernel and ramdisk: the stack's IPA build when
/// there is one, else two stand-in files.
fn agent_dir(stack: &Stack, dir: &Path) -> PathBuf {
    let built = stack
        .var("BMO_IPA_DIR")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("BMO_IPA_DIR").map(PathBuf::from))
        .filter(|d| AGENT_FILES.iter().all(|f| d.join(f).is_file()));
    if let Some(built) = built {
        println!("agent: the IPA build in {}", built.display());
        return built;
    }
    let stand_in = dir.join("ipa");
    std::fs::create_dir_all(&stand_in).unwrap();
    for file in AGENT_FILES {
        std::fs::write(stand_in.join(file), format!("stand-in {file}")).unwrap();
    }
    println!("agent: stand-in files (no BMO_IPA_DIR)");
    stand_in
}

/// `KEY=VALUE` lines of an env file, as systemd's EnvironmentFile reads them.
fn env_file_vars(text: &str) -> Vec<(String, String)> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#') && !l.starts_with(';'))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| {
            let v = v.trim();
            let unquoted = v
                .strip_prefix('"')
                .and_then(|v| v.strip_suffix('"'))
                .unwrap_or(v);
            (k.trim().to_owned(), unquoted.to_owned())
        })
        .collect()
}

/// The value of `key=` in the [Service] section of a unit file.
fn unit_setting(unit: &str, key: &str) -> String {
    unit.lines()
        .find_map(|l| l.strip_prefix(&format!("{key}=")))
        .unwrap_or_else(|| panic!("the unit has no {key}="))
        .trim()
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bundle_installs_offline_and_its_bmo_serves_the_agent_and_provisions() {
    let stack = Stack::get();
    // podman and the image's other prerequisites (docs/install.md, "build-image").
    image();
    let dir = TempDir::new("bundle");
    let agent = agent_dir(stack, dir.path());
    let agent_env = agent.display().to_string();
    let out = run_script(
        None,
        Path::new(ROOT),
        &doc_script("build-bundle"),
        &[("BMO_IPA_DIR", &agent_env)],
    );
    // Shown with --nocapture; docs/install.md quotes the size.
    println!("{out}");
    let tarball = out
        .lines()
        .find_map(|l| l.strip_prefix("bundle: "))
        .map(|p| Path::new(ROOT).join(p))
        .unwrap_or_else(|| panic!("build-bundle named no tarball:\n{out}"));

    // No route out: the namespace has loopback and a link to itself, nothing else.
    let netns = Netns::new("bundle");
    let ns = netns.name.as_str();
    let ip = |args: &[&str]| run(Command::new("ip").args(["-n", ns]).args(args));
    ip(&[
        "link", "add", "prov0", "type", "veth", "peer", "name", "prov1",
    ]);
    ip(&[
        "addr",
        "add",
        &format!("{PROVISIONING_IP}/24"),
        "dev",
        "prov0",
    ]);
    ip(&["link", "set", "prov0", "up"]);
    ip(&["link", "set", "prov1", "up"]);
    let routes = ip(&["route", "show", "default"]);
    assert!(routes.trim().is_empty(), "a default route: {routes}");
    let _forwarder = Forwarder::start(ns, &stack_addresses(stack));

    // The site: an empty directory with the tarball, an empty root to install into.
    let site = dir.path().join("site");
    let root = dir.path().join("root");
    std::fs::create_dir_all(&site).unwrap();
    std::fs::create_dir_all(&root).unwrap();
    std::fs::copy(&tarball, site.join(format!("{BUNDLE}.tar.gz"))).expect("copy the tarball");
    // kubectl as a cluster admin: the stack's, put in front of $PATH by its env.
    let path = stack_path(stack);
    let kubeconfig = stack.kubeconfig.display().to_string();
    let admin = [("PATH", path.as_str()), ("KUBECONFIG", kubeconfig.as_str())];
    let block = |name: &str| under_root(&doc_script(name), &root, INSTALL_PATHS);
    run_script(Some(ns), &site, &block("install"), &admin);
    let bundle = site.join(BUNDLE);
    let readme = std::fs::read_to_string(bundle.join("README")).expect("README");
    for name in [
        "install",
        "image-load",
        "systemd-install",
        "systemd-start",
        "pod-kubelet",
    ] {
        for line in doc_script(name).lines().filter(|l| !l.trim().is_empty()) {
            assert!(readme.contains(line), "the bundle's README lacks `{line}`");
        }
    }
    for file in AGENT_FILES {
        let installed = root.join("shared/html/images").join(file);
        assert_eq!(
            std::fs::read(&installed).ok(),
            std::fs::read(agent.join(file)).ok(),
            "{}",
            installed.display()
        );
    }

    // The pod ways: the image loads, kube-apiserver takes the kustomization.
    let loaded = run_script(Some(ns), &bundle, &block("image-load"), &admin);
    assert!(loaded.contains(appliance_common::IMAGE), "{loaded}");
    run_script(Some(ns), &bundle, &block("pod-kubelet"), &admin);

    // The systemd way, with a self-contained kubeconfig and the site's settings.
    let flat =
        run(Command::new("kubectl")
            .envs(admin)
            .args(["config", "view", "--flatten", "--raw"]));
    std::fs::write(bundle.join("KUBECONFIG-FOR-BMO"), flat).unwrap();
    run_script(Some(ns), &bundle, &block("systemd-install"), &admin);
    let client = stack.kube_client().await;
    let watch = new_namespace(&client, "bundle").await;
    let env_path = root.join("etc/bmo/bmo.env");
    let example = std::fs::read_to_string(&env_path).expect("installed bmo.env");
    assert!(
        !env_file_vars(&example)
            .iter()
            .any(|(k, _)| k.starts_with("DEPLOY_")),
        "the env example sets DEPLOY_*_URL"
    );
    let mut edited = under_root(&example, &root, INSTALL_PATHS);
    let mut site_settings = vec![
        (
            "IRONIC_ENDPOINT".to_owned(),
            stack.ironic_endpoint.to_string(),
        ),
        (
            "METAL3_AUTH_ROOT_DIR".to_owned(),
            stack
                .var("METAL3_AUTH_ROOT_DIR")
                .unwrap_or_default()
                .to_owned(),
        ),
        ("WATCH_NAMESPACE".to_owned(), watch.clone()),
        ("PROVISIONING_INTERFACE".to_owned(), "prov0".to_owned()),
    ];
    site_settings.extend(
        PATH_SETTINGS
            .iter()
            .map(|(k, default)| (k.to_string(), under_root(default, &root, INSTALL_PATHS))),
    );
    for (key, value) in &site_settings {
        edited = edited
            .lines()
            .filter(|l| !l.starts_with(&format!("{key}=")))
            .collect::<Vec<_>>()
            .join("\n");
        edited.push_str(&format!("\n{key}={value}"));
    }
    edited.push('\n');
    std::fs::write(&env_path, edited).unwrap();

    // What `systemctl enable --now bmo` would start: ExecStart with the variables of
    // the EnvironmentFile and no others.
    let unit = std::fs::read_to_string(root.join("etc/systemd/system/bmo.service"))
        .expect("installed unit");
    let exec = under_root(&unit_setting(&unit, "ExecStart"), &root, INSTALL_PATHS);
    let env_file = under_root(
        &unit_setting(&unit, "EnvironmentFile"),
        &root,
        INSTALL_PATHS,
    );
    let env = env_file_vars(&std::fs::read_to_string(&env_file).expect("EnvironmentFile"));
    let mut argv = exec.split_whitespace();
    let program = argv.next().expect("ExecStart names a program");
    let log_path = dir.path().join("bmo.log");
    let log_file = std::fs::File::create(&log_path).unwrap();
    let _bmo = spawn(
        Command::new("nsenter")
            .arg(format!("--net=/var/run/netns/{ns}"))
            .arg(program)
            .args(argv)
            .env_clear()
            .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdout(Stdio::null())
            .stderr(log_file),
    );
    let log = || std::fs::read_to_string(&log_path).unwrap_or_default();
    let health = env
        .iter()
        .find(|(k, _)| k == "BMO_HEALTH_ADDR")
        .map(|(_, v)| v.clone())
        .unwrap_or_else(|| "127.0.0.1:9440".to_owned());
    let curl = |args: &[&str]| {
        Command::new("nsenter")
            .arg(format!("--net=/var/run/netns/{ns}"))
            .args(["curl", "-sSf", "--max-time", "30"])
            .args(args)
            .output()
    };
    wait_for("bmo to be ready", Duration::from_secs(60), || {
        match curl(&["-o", "/dev/null", &format!("http://{health}/readyz")]) {
            Ok(o) if o.status.success() => Ok(()),
            other => Err(format!("{other:?}; log: {}", log())),
        }
    });
    let base = format!("http://{PROVISIONING_IP}:6180");
    for file in AGENT_FILES {
        let got = dir.path().join(format!("got-{file}"));
        let out = curl(&[
            "-o",
            got.to_str().unwrap(),
            &format!("{base}/images/{file}"),
        ])
        .expect("run curl");
        assert!(out.status.success(), "GET /images/{file}: {out:?}");
        assert!(
            std::fs::read(&got).unwrap() == std::fs::read(agent.join(file)).unwrap(),
            "/images/{file} differs from the bundle's"
        );
    }

    let name = "bundle-worker";
    create_fake_host(&client, &watch, name).await;
    let hosts: Api<BareMetalHost> = Api::namespaced(client.clone(), &watch);
    eventually("host provisioned", Duration::from_secs(240), || async {
        let h = hosts.get(name).await.map_err(|e| e.to_string())?;
        match h.provisioning_state() {
            ProvisioningState::Provisioned => Ok(()),
            other => Err(format!("{other}; log: {}", log())),
        }
    })
    .await;
    // DEPLOY_*_URL unset: Ironic was handed bmo's URLs at the detected address.
    let node = stack
        .ironic()
        .await
        .get_node(&format!("{watch}~{name}"))
        .await
        .expect("get node")
        .expect("node exists");
    for (key, file) in [
        ("deploy_kernel", AGENT_FILES[0]),
        ("deploy_ramdisk", AGENT_FILES[1]),
    ] {
        assert_eq!(
            node.driver_info.get(key).and_then(|v| v.as_str()),
            Some(format!("{base}/images/{file}").as_str()),
            "{key}"
        );
    }
}
