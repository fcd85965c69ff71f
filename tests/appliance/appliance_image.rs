//! The container image as users build and run it: `scripts/build-image` puts the
//! static executable into a `FROM scratch` image with podman and no registry; the
//! image runs with host networking against the stack, serves the iPXE loaders it
//! embeds, and provisions a fake-hardware host. deploy/'s Deployment and ConfigMap
//! run under `podman kube play` in a network namespace, serve the boot files at the
//! detected address and keep their DHCP leases across a pod restart. build.rs refuses to build without
//! the loaders unless told to. The multi-stage Containerfile (untested here: no
//! registry) copies everything the build reads.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use bmo::api::{BareMetalHost, ProvisioningState};
use kube::Api;
use serde_json::{Value, json};

use crate::support::appliance::{
    Forwarder, IMAGE, INSTALL_PATHS, ROOT, curl, doc_script, image, output, podman, run,
    run_script, stack_addresses, stack_path, under_root, wait_for,
};
use crate::support::netboot::TestNet;
use crate::support::{Stack, create_fake_host, eventually, free_port, new_namespace, unique_name};

/// A container started by the test; removed when dropped.
struct Container(String);

impl Container {
    fn logs(&self) -> String {
        let out = output(&mut podman(&["logs", &self.0]));
        String::from_utf8_lossy(&out.stderr).into_owned()
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        let _ = podman(&["rm", "-f", "-t", "5", &self.0]).output();
    }
}

/// Waits until the Ironic node of `ns/name` is provisioned and returns its node.
async fn provisioned(
    hosts: &Api<BareMetalHost>,
    name: &str,
    log: impl Fn() -> String,
) -> BareMetalHost {
    eventually("host provisioned", Duration::from_secs(240), || async {
        let h = hosts.get(name).await.map_err(|e| e.to_string())?;
        match h.provisioning_state() {
            ProvisioningState::Provisioned => Ok(h),
            other => {
                let log = log();
                let tail: Vec<&str> = log.lines().rev().take(5).collect();
                Err(format!("{other}; log tail: {tail:?}"))
            }
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn image_runs_with_host_networking_serves_its_loaders_and_provisions_a_host() {
    let _shared = crate::support::shared();
    let stack = Stack::get();
    image();
    let client = stack.kube_client().await;
    bmo::api::install::install(&client, Duration::from_secs(60))
        .await
        .expect("install the CRDs");
    let ns = new_namespace(&client, "image").await;
    let dir = tempdir("image");
    // /etc/bmo, /shared and /var/lib/bmo of docs/install.md, under the test's root.
    let root = dir.join("root");
    let etc = root.join("etc/bmo");
    let images = root.join("shared/html/images");
    for d in [&etc, &images, &root.join("var/lib/bmo")] {
        std::fs::create_dir_all(d).unwrap();
    }
    std::fs::write(
        images.join("ironic-python-agent.kernel"),
        b"kernel from the volume",
    )
    .unwrap();
    // The systemd service's files: a self-contained kubeconfig, the Ironic
    // credentials, and the env example with this test's settings.
    let flat = run(Command::new("kubectl")
        .env("PATH", stack_path(stack))
        .env("KUBECONFIG", &stack.kubeconfig)
        .args(["config", "view", "--flatten", "--raw"]));
    std::fs::write(etc.join("kubeconfig"), flat).unwrap();
    let auth = etc.join("auth");
    std::fs::create_dir_all(&auth).unwrap();
    if let Some(stack_auth) = stack
        .var("METAL3_AUTH_ROOT_DIR")
        .filter(|d| Path::new(d).is_dir())
    {
        run(Command::new("cp")
            .arg("-r")
            .arg(format!("{stack_auth}/."))
            .arg(&auth));
    }
    let (health, http) = (free_port(), free_port());
    let example = std::fs::read_to_string(Path::new(ROOT).join("systemd/bmo.env.example"))
        .expect("env example");
    let settings = [
        // By name: the static glibc resolves it without NSS libraries.
        ("IRONIC_ENDPOINT", by_name(&stack.ironic_endpoint)),
        ("WATCH_NAMESPACE", ns.clone()),
        ("BMO_HEALTH_ADDR", format!("127.0.0.1:{health}")),
        ("HTTP_PORT", http.to_string()),
        ("BMO_HTTP_BIND", "127.0.0.1".to_owned()),
        ("PROVISIONING_INTERFACE", "lo".to_owned()),
    ];
    let mut env_file: Vec<String> = example
        .lines()
        .filter(|l| {
            !settings
                .iter()
                .any(|(k, _)| l.starts_with(&format!("{k}=")))
        })
        .map(str::to_owned)
        .collect();
    env_file.extend(settings.iter().map(|(k, v)| format!("{k}={v}")));
    std::fs::write(etc.join("bmo.env"), env_file.join("\n") + "\n").unwrap();

    // docs/install.md's `podman run`, with this test's root and container name.
    let name = unique_name("bmo-image");
    let script = under_root(&doc_script("podman-run"), &root, INSTALL_PATHS);
    assert!(script.contains("--name bmo "), "{script}");
    let script = script.replace("--name bmo ", &format!("--name {name} "));
    run_script(None, &dir, &script, &[]);
    let container = Container(name);

    wait_for(
        "the container to be ready",
        Duration::from_secs(60),
        || match curl(
            Command::new("curl"),
            &format!("http://127.0.0.1:{health}/readyz"),
        ) {
            Ok((200, _)) => Ok(()),
            other => Err(format!("{other:?}; logs: {}", container.logs())),
        },
    );
    let base = format!("http://127.0.0.1:{http}");
    // The loader comes from the binary: the image has no BMO_IPXE_DIR.
    let (code, loader) = curl(Command::new("curl"), &format!("{base}/ipxe/undionly.kpxe"))
        .expect("GET undionly.kpxe");
    assert_eq!(code, 200);
    assert_eq!(
        loader,
        std::fs::read("/usr/lib/ipxe/undionly.kpxe").expect("Debian's ipxe package"),
        "the embedded loader is Debian's"
    );
    let (code, kernel) = curl(
        Command::new("curl"),
        &format!("{base}/images/ironic-python-agent.kernel"),
    )
    .expect("GET the agent kernel");
    assert_eq!(
        (code, kernel.as_slice()),
        (200, &b"kernel from the volume"[..])
    );

    let name = "image-worker";
    create_fake_host(&client, &ns, name).await;
    let hosts: Api<BareMetalHost> = Api::namespaced(client.clone(), &ns);
    provisioned(&hosts, name, || container.logs()).await;
    // Unset DEPLOY_*_URL: Ironic got bmo's own URLs at the detected address.
    let node = stack
        .ironic()
        .await
        .get_node(&format!("{ns}~{name}"))
        .await
        .expect("get node")
        .expect("node exists");
    assert_eq!(
        node.driver_info
            .get("deploy_kernel")
            .and_then(|v| v.as_str()),
        Some(format!("{base}/images/ironic-python-agent.kernel").as_str())
    );
    drop(container);
    let _ = std::fs::remove_dir_all(&dir);
}

/// deploy/manager's Deployment and ConfigMap with the edits `podman kube play` on a
/// node without kubelet needs (docs/install.md, "Pod without a cluster"), plus the
/// test's own names, directories and stack.
fn pod_manifests(dir: &Path, ns: &str, pod: &str) -> (Value, Value) {
    let stack = Stack::get();
    let read = |p: &str| -> Value {
        let text = std::fs::read_to_string(Path::new(ROOT).join(p)).expect(p);
        serde_norway::from_str(&text).expect(p)
    };
    let mut deployment = read("deploy/manager/manager.yaml");
    deployment["metadata"]["name"] = json!(pod);
    let spec = &mut deployment["spec"]["template"]["spec"];
    let container = &mut spec["containers"][0];
    container["image"] = json!(IMAGE);
    let env = container["env"].as_array_mut().expect("env");
    // podman 4.3 resolves no fieldRef to metadata.namespace: the value itself.
    for e in env.iter_mut() {
        if e["name"] == "POD_NAMESPACE" {
            *e = json!({"name": "POD_NAMESPACE", "value": ns});
        }
    }
    // No service account without a cluster: a kubeconfig, by host path.
    env.push(json!({"name": "KUBECONFIG", "value": stack.kubeconfig}));
    container["volumeMounts"]
        .as_array_mut()
        .expect("volumeMounts")
        .push(json!({"name": "kubeconfig", "mountPath": stack.dir, "readOnly": true}));
    let auth = stack
        .var("METAL3_AUTH_ROOT_DIR")
        .map(|d| Path::new(d).join("ironic"))
        .filter(|d| d.is_dir())
        .unwrap_or_else(|| dir.join("no-auth"));
    std::fs::create_dir_all(&auth).unwrap();
    let volumes = spec["volumes"].as_array_mut().expect("volumes");
    for v in volumes.iter_mut() {
        let host_path = match v["name"].as_str() {
            // podman has no optional Secret: a host directory with (or without)
            // the username and password files.
            Some("ironic-credentials") => auth.clone(),
            Some("http-root") => dir.join("html"),
            Some("tftp-root") => dir.join("tftpboot"),
            Some("state") => dir.join("state"),
            _ => continue,
        };
        *v = json!({"name": v["name"], "hostPath": {"path": host_path, "type": "DirectoryOrCreate"}});
    }
    volumes.push(json!({"name": "kubeconfig", "hostPath": {"path": stack.dir}}));

    let mut configmap = read("deploy/manager/ironic-configmap.yaml");
    let data = &mut configmap["data"];
    data["IRONIC_ENDPOINT"] = json!(stack.ironic_endpoint.as_str());
    data["WATCH_NAMESPACE"] = json!(ns);
    data["PROVISIONING_INTERFACE"] = json!("srv0");
    data["BMO_DHCP_MODE"] = json!("full");
    data["DHCP_RANGE"] = json!("10.77.0.50,10.77.0.60");
    (deployment, configmap)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deployment_under_podman_kube_play_serves_boot_files_and_keeps_its_leases() {
    let _shared = crate::support::shared();
    let stack = Stack::get();
    image();
    let client = stack.kube_client().await;
    let ns = new_namespace(&client, "pod").await;
    // DHCP and TFTP only inside the test's namespaces: the pod's host network is
    // the server namespace, which reaches the stack through the forwarder alone.
    let net = TestNet::new(true);
    let _forwarder = Forwarder::start(&net.server.name, &stack_addresses(stack));
    let dir = tempdir("pod");
    let images = dir.join("html/images");
    std::fs::create_dir_all(&images).unwrap();
    std::fs::write(images.join("ironic-python-agent.kernel"), b"agent kernel").unwrap();
    std::fs::write(
        images.join("ironic-python-agent.initramfs"),
        b"agent ramdisk",
    )
    .unwrap();
    let pod = unique_name("bmo-pod");
    let (deployment, configmap) = pod_manifests(&dir, &ns, &pod);
    // The edited manifests where docs/install.md's commands name them, run in the
    // pod's namespace as docs/install.md's blocks, with this test's root.
    let manager = dir.join("deploy/manager");
    std::fs::create_dir_all(&manager).unwrap();
    std::fs::write(manager.join("manager.yaml"), deployment.to_string()).unwrap();
    std::fs::write(manager.join("ironic-configmap.yaml"), configmap.to_string()).unwrap();
    let root = dir.join("root");
    let block = |name: &str| under_root(&doc_script(name), &root, INSTALL_PATHS);
    run_script(None, &dir, &block("containers-conf"), &[]);
    let play = || run_script(Some(&net.server.name), &dir, &block("pod-play"), &[]);
    let _down = KubeDown {
        dir: dir.clone(),
        netns: net.server.name.clone(),
        script: block("pod-down"),
    };
    play();
    let logs = || {
        let out = output(&mut podman(&["logs", &format!("{pod}-pod-0-manager")]));
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let ready = || {
        wait_for(
            "the pod to be ready",
            Duration::from_secs(60),
            || match curl(net.server.command("curl"), "http://127.0.0.1:9440/readyz") {
                Ok((200, _)) => Ok(()),
                other => Err(format!("{other:?}; logs: {}", logs())),
            },
        )
    };
    // At the detected address (srv0's), from the client's side of the link.
    let base = format!("http://{}:6180", net.server_ip);
    // Ready includes a standby waiting for the leader Lease (which a stopped pod
    // may still hold): the network boot services start once it leads.
    let serving = || {
        ready();
        wait_for("HTTP boot", Duration::from_secs(60), || {
            match curl(net.client.command("curl"), &format!("{base}/healthz")) {
                Ok((200, _)) => Ok(()),
                other => Err(format!("{other:?}; logs: {}", logs())),
            }
        })
    };
    serving();
    let get = |path: &str| {
        curl(net.client.command("curl"), &format!("{base}{path}"))
            .unwrap_or_else(|e| panic!("GET {path}: {e}; logs: {}", logs()))
    };
    let (code, script) = get("/boot.ipxe");
    assert_eq!(code, 200);
    assert!(String::from_utf8_lossy(&script).starts_with("#!ipxe"));
    assert_eq!(
        get("/images/ironic-python-agent.kernel"),
        (200, b"agent kernel".to_vec())
    );
    let (_, inspector) = get("/inspector.ipxe");
    let inspector = String::from_utf8_lossy(&inspector);
    assert!(
        inspector.contains(&format!("{base}/images/ironic-python-agent.kernel")),
        "{inspector}"
    );
    let loader = dir.join("undionly.kpxe");
    run(net
        .client
        .command("busybox")
        .args(["tftp", "-g", "-r", "undionly.kpxe", "-l"])
        .arg(&loader)
        .arg(net.server_ip));
    assert_eq!(
        std::fs::read(&loader).unwrap(),
        std::fs::read("/usr/lib/ipxe/undionly.kpxe").unwrap()
    );

    // A lease, then a restart of the pod: the new pod still has it.
    run(net.client.command("busybox").args([
        "udhcpc",
        "-i",
        "cli0",
        "-n",
        "-q",
        "-t",
        "10",
        "-T",
        "1",
        "-s",
        "/bin/true",
    ]));
    let mac = run(net.client.command("cat").arg("/sys/class/net/cli0/address"));
    let mac = mac.trim().to_owned();
    // The lease table is served to the machine bmo runs on only (BMO_HTTP_LEASES's
    // default), so it is read from inside the pod's (host) network namespace.
    let leases = || {
        let (_, body) = curl(
            net.server.command("curl"),
            "http://127.0.0.1:6180/bmo/v1/leases",
        )
        .unwrap_or_else(|e| panic!("GET /bmo/v1/leases: {e}; logs: {}", logs()));
        String::from_utf8_lossy(&body).into_owned()
    };
    assert_eq!(
        get("/bmo/v1/leases").0,
        403,
        "the provisioning network does not get the lease table"
    );
    wait_for("the lease in the table", Duration::from_secs(10), || {
        let l = leases();
        if l.contains(&mac) { Ok(()) } else { Err(l) }
    });
    run_script(Some(&net.server.name), &dir, &block("pod-down"), &[]);
    play();
    serving();
    let after = leases();
    assert!(
        after.contains(&mac),
        "lease of {mac} lost across the restart: {after}"
    );
}

/// docs/install.md's "pod-down" block in the pod's namespace, then the test's
/// directory removed, on drop.
struct KubeDown {
    dir: PathBuf,
    netns: String,
    script: String,
}

impl Drop for KubeDown {
    fn drop(&mut self) {
        let _ = Command::new("nsenter")
            .arg(format!("--net=/var/run/netns/{}", self.netns))
            .args(["sh", "-c", &self.script])
            .current_dir(&self.dir)
            .output();
        // Only now: the pod-down block reads the manifests in it.
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `url` with `localhost` for its loopback address.
fn by_name(url: &url::Url) -> String {
    let mut url = url.clone();
    url.set_host(Some("localhost")).expect("a URL with a host");
    url.to_string()
}

fn tempdir(prefix: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(unique_name(&format!("bmo-{prefix}")));
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

/// build.rs, compiled on its own and run as cargo would, with and without loaders.
#[test]
fn build_script_fails_without_loaders_unless_allowed() {
    let _shared = crate::support::shared();
    let dir = tempdir("buildrs");
    let exe = dir.join("build-script");
    run(
        Command::new(std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into()))
            .args(["--edition", "2024", "-O", "-o"])
            .arg(&exe)
            .arg(Path::new(ROOT).join("build.rs")),
    );
    let empty = dir.join("no-loaders");
    std::fs::create_dir_all(&empty).unwrap();
    let build = |source: &Path, allow: bool| {
        let mut cmd = Command::new(&exe);
        cmd.env("OUT_DIR", &dir)
            .env("BMO_IPXE_SOURCE_DIR", source)
            .env_remove("BMO_ALLOW_NO_LOADERS");
        if allow {
            cmd.env("BMO_ALLOW_NO_LOADERS", "1");
        }
        output(&mut cmd)
    };
    let refused = build(&empty, false);
    assert!(!refused.status.success(), "built without loaders");
    let why = String::from_utf8_lossy(&refused.stderr);
    assert!(
        why.contains("undionly.kpxe") && why.contains("BMO_ALLOW_NO_LOADERS=1"),
        "{why}"
    );
    let allowed = build(&empty, true);
    assert!(allowed.status.success());
    assert!(String::from_utf8_lossy(&allowed.stdout).contains("cargo:warning="));
    let debian = build(Path::new("/usr/lib/ipxe"), false);
    assert!(debian.status.success(), "{debian:?}");
    for name in ["undionly.kpxe", "snponly-x86_64.efi", "ipxe-x86_64.efi"] {
        assert!(dir.join("ipxe-embed").join(name).is_file(), "{name} copied");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Every path the build reads is copied into the builder stage, and the builder
/// installs the loaders; the tested Containerfile pulls nothing.
#[test]
fn containerfiles_are_complete() {
    let _shared = crate::support::shared();
    let read = |p: &str| std::fs::read_to_string(Path::new(ROOT).join(p)).expect(p);
    let multistage = read("Containerfile.multistage");
    let copied: Vec<&str> = multistage
        .lines()
        .filter_map(|l| l.strip_prefix("COPY "))
        .filter(|l| !l.starts_with("--from"))
        .flat_map(|l| {
            let words: Vec<&str> = l.split_whitespace().collect();
            words[..words.len() - 1].to_vec()
        })
        .collect();
    let manifest = read("Cargo.toml");
    let mut needed: Vec<String> = vec![
        "Cargo.toml".into(),
        "Cargo.lock".into(),
        "build.rs".into(),
        "src".into(),
    ];
    for line in manifest.lines() {
        // A bench is `benches/NAME.rs` or a folder `benches/NAME/` with its `main.rs`.
        if let Some(name) = line.trim().strip_prefix("name = \"")
            && let Some(name) = name.strip_suffix('"')
        {
            for bench in [
                format!("benches/{name}.rs"),
                format!("benches/{name}/main.rs"),
            ] {
                if Path::new(ROOT).join(&bench).exists() {
                    needed.push(bench);
                }
            }
        }
    }
    for entry in walk(&Path::new(ROOT).join("src")) {
        let text = std::fs::read_to_string(&entry).unwrap_or_default();
        for part in text.split("include_str!(\"").skip(1) {
            let rel = part.split('"').next().unwrap_or_default();
            let path = entry.parent().unwrap().join(rel);
            let path = std::fs::canonicalize(&path).expect("include_str! target exists");
            let rel = path.strip_prefix(ROOT).expect("inside the repository");
            needed.push(rel.display().to_string());
        }
    }
    for path in &needed {
        assert!(
            copied
                .iter()
                .any(|c| path == c || path.starts_with(&format!("{c}/"))),
            "Containerfile.multistage does not COPY {path} (copies {copied:?})"
        );
    }
    assert!(
        multistage.contains(" ipxe "),
        "the builder installs Debian's ipxe package"
    );
    let scratch = read("Containerfile");
    let froms: Vec<&str> = scratch.lines().filter(|l| l.starts_with("FROM ")).collect();
    assert_eq!(froms, ["FROM scratch"], "the tested image pulls nothing");
    assert!(IMAGE.starts_with("localhost/bmo:"));
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            files.extend(walk(&path));
        } else {
            files.push(path);
        }
    }
    files
}
