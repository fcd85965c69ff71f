//! The offline bundle as an air-gapped site installs it, by the blocks of
//! docs/install.md: `scripts/build-bundle` with an agent kernel and ramdisk (the
//! stack's IPA build when `BMO_IPA_DIR` names one), then, in a network namespace with
//! no route out (only the stack's two ports are forwarded in), the install steps into
//! an empty root, the image load, the kustomization applied, and the systemd blocks run
//! under a real systemd: PID 1 of a container in that namespace, with the installed
//! binary, /etc/bmo and /shared mounted where the guide puts them. `systemctl enable
//! --now bmo` returns once bmo is ready (the unit is Type=notify), with the unit's
//! hardening and dynamic user in force. That bmo serves the agent's files at its
//! detected address, hands Ironic those URLs and provisions a fake-hardware host.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use bmo::api::{BareMetalHost, ProvisioningState};
use kube::Api;

use crate::support::appliance::{
    self, Forwarder, INSTALL_PATHS, ROOT, doc_script, image, podman, run, run_script,
    stack_addresses, stack_path, under_root, wait_for,
};
use crate::support::netboot::{Netns, TempDir};
use crate::support::{Stack, create_fake_host, eventually, new_namespace};

/// The provisioning address inside the test's namespace (a veth pair whose both ends
/// are there).
const PROVISIONING_IP: &str = "10.78.0.1";
const BUNDLE: &str = concat!("bmo-", env!("CARGO_PKG_VERSION"), "-x86_64");
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

/// A container whose PID 1 is systemd (the stack's `BMO_SYSTEMD_ROOT` image), in the
/// network namespace `ns`; removed when dropped.
struct SystemdMachine {
    name: String,
}

impl SystemdMachine {
    fn start(stack: &Stack, ns: &str, mounts: &[(PathBuf, &str)]) -> Self {
        let tarball = stack
            .var("BMO_SYSTEMD_ROOT")
            .map(PathBuf::from)
            .expect("the stack's env names BMO_SYSTEMD_ROOT (tests/env/systemd-root-build)");
        let tag = tarball.file_stem().unwrap().to_string_lossy().into_owned();
        let image = format!("localhost/bmo-systemd-root:{tag}");
        if !podman(&["image", "exists", &image])
            .status()
            .unwrap()
            .success()
        {
            run(&mut podman(&["import", tarball.to_str().unwrap(), &image]));
        }
        let name = format!("bmo-systemd-{}", std::process::id());
        let _ = podman(&["rm", "-f", &name]).output();
        let mut cmd = podman(&[
            "run",
            "-d",
            "--name",
            &name,
            // systemd sets up the unit's mount namespaces and dynamic user.
            "--privileged",
            "--systemd=always",
            "--runtime",
            "/usr/sbin/runc",
            "--ulimit",
            "nofile=20000:20000",
            "--ulimit",
            "nproc=4096:4096",
            "--network",
            &format!("ns:/var/run/netns/{ns}"),
        ]);
        for (from, to) in mounts {
            cmd.args(["-v", &format!("{}:{to}", from.display())]);
        }
        run(cmd.args([image.as_str(), "/sbin/init"]));
        let machine = Self { name };
        wait_for("systemd to boot", Duration::from_secs(60), || {
            let out = machine.exec(None, "systemctl is-system-running");
            let state = String::from_utf8_lossy(&out.stdout).trim().to_owned();
            match state.as_str() {
                "running" | "degraded" => Ok(()),
                _ => Err(state),
            }
        });
        machine
    }

    /// `sh -e -c SCRIPT` in the container, in `dir` when given.
    fn exec(&self, dir: Option<&str>, script: &str) -> std::process::Output {
        let mut cmd = podman(&["exec"]);
        if let Some(dir) = dir {
            cmd.args(["-w", dir]);
        }
        cmd.args([self.name.as_str(), "sh", "-e", "-c", script])
            .output()
            .expect("run podman exec")
    }

    /// Like [`Self::exec`], panicking with the output and bmo's journal on failure.
    fn sh(&self, dir: Option<&str>, script: &str) -> String {
        let out = self.exec(dir, script);
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "{script}\n{stdout}{}\njournal: {}",
            String::from_utf8_lossy(&out.stderr),
            self.journal()
        );
        stdout
    }

    fn journal(&self) -> String {
        let out = self.exec(None, "journalctl -u bmo --no-pager -n 40");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

impl Drop for SystemdMachine {
    fn drop(&mut self) {
        let _ = podman(&["rm", "-f", "-t", "5", &self.name]).output();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bundle_installs_offline_and_its_bmo_serves_the_agent_and_provisions() {
    let _shared = crate::support::shared();
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
    assert!(loaded.contains(appliance::IMAGE), "{loaded}");
    run_script(Some(ns), &bundle, &block("pod-kubelet"), &admin);

    // The systemd way, with a self-contained kubeconfig and the site's settings, under
    // systemd as PID 1 of a container in the namespace. The install block put the
    // binary and the agent's files under the test's root; they are mounted where the
    // guide installs them, and so is /etc/bmo, which the test edits from outside.
    let flat =
        run(Command::new("kubectl")
            .envs(admin)
            .args(["config", "view", "--flatten", "--raw"]));
    std::fs::write(bundle.join("KUBECONFIG-FOR-BMO"), flat).unwrap();
    let etc_bmo = root.join("etc/bmo");
    std::fs::create_dir_all(&etc_bmo).unwrap();
    let machine = SystemdMachine::start(
        stack,
        ns,
        &[
            (root.join("usr/local/bin"), "/usr/local/bin:ro"),
            (etc_bmo.clone(), "/etc/bmo"),
            (root.join("shared"), "/shared"),
            (bundle.clone(), "/bundle:ro"),
        ],
    );
    machine.sh(Some("/bundle"), &doc_script("systemd-install"));
    let client = stack.kube_client().await;
    let watch = new_namespace(&client, "bundle").await;
    let env_path = etc_bmo.join("bmo.env");
    let example = std::fs::read_to_string(&env_path).expect("installed bmo.env");
    assert!(
        !env_file_vars(&example)
            .iter()
            .any(|(k, _)| k.starts_with("DEPLOY_")),
        "the env example sets DEPLOY_*_URL"
    );
    // Ironic's auth files (none with noauth) where the service can read them: the
    // stack's are under /tmp, which the unit makes private.
    let auth = etc_bmo.join("ironic-auth");
    std::fs::create_dir_all(&auth).unwrap();
    if let Some(stack_auth) = stack
        .var("METAL3_AUTH_ROOT_DIR")
        .filter(|d| Path::new(d).is_dir())
    {
        run(Command::new("cp").args(["-rT", stack_auth, auth.to_str().unwrap()]));
        run(Command::new("chmod").args(["-R", "a+rX", auth.to_str().unwrap()]));
    }
    let mut edited = example.clone();
    let site_settings = [
        ("IRONIC_ENDPOINT", stack.ironic_endpoint.to_string()),
        ("METAL3_AUTH_ROOT_DIR", "/etc/bmo/ironic-auth".to_owned()),
        ("WATCH_NAMESPACE", watch.clone()),
        ("PROVISIONING_INTERFACE", "prov0".to_owned()),
    ];
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
    let env = env_file_vars(&std::fs::read_to_string(&env_path).unwrap());

    // `systemctl enable --now` returns once bmo has said READY=1.
    let started = machine.sh(None, &doc_script("systemd-start"));
    assert!(
        started.contains("Active: active (running)"),
        "systemctl status bmo:\n{started}"
    );
    let log = || machine.journal();
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
