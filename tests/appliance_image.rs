//! The container image as users build and run it: `scripts/build-image` puts the
//! static executable into a `FROM scratch` image with podman and no registry; the
//! image runs with host networking against the stack, serves the iPXE loaders it
//! embeds, and provisions a fake-hardware host. build.rs refuses to build without
//! the loaders unless told to. The multi-stage Containerfile (untested here: no
//! registry) copies everything the build reads.

mod appliance_common;
mod support;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use appliance_common::{IMAGE, PODMAN_RUN_FLAGS, ROOT, curl, image, output, podman, run, wait_for};
use bmo::api::{BareMetalHost, ProvisioningState};
use kube::Api;
use support::{Stack, create_fake_host, eventually, free_port, new_namespace, unique_name};

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
    let stack = Stack::get();
    let image = image();
    let client = stack.kube_client().await;
    bmo::api::install::install(&client, Duration::from_secs(60))
        .await
        .expect("install the CRDs");
    let ns = new_namespace(&client, "image").await;
    let dir = tempdir("image");
    let images = dir.join("images");
    std::fs::create_dir_all(&images).unwrap();
    std::fs::write(
        images.join("ironic-python-agent.kernel"),
        b"kernel from the volume",
    )
    .unwrap();
    let (health, http) = (free_port(), free_port());
    let stack_dir = stack.dir.display().to_string();
    let name = unique_name("bmo-image");
    let mut args: Vec<String> = ["run", "-d", "--name", &name]
        .iter()
        .map(|s| s.to_string())
        .collect();
    args.extend(PODMAN_RUN_FLAGS.iter().map(|s| s.to_string()));
    let env = [
        format!("KUBECONFIG={}", stack.kubeconfig.display()),
        // By name: the static glibc resolves it without NSS libraries.
        format!("IRONIC_ENDPOINT={}", by_name(&stack.ironic_endpoint)),
        format!(
            "METAL3_AUTH_ROOT_DIR={}",
            stack.var("METAL3_AUTH_ROOT_DIR").unwrap_or_default()
        ),
        format!("WATCH_NAMESPACE={ns}"),
        format!("BMO_HEALTH_ADDR=127.0.0.1:{health}"),
        format!("HTTP_PORT={http}"),
        "BMO_HTTP_BIND=127.0.0.1".to_owned(),
        "PROVISIONING_INTERFACE=lo".to_owned(),
        "BMO_LEASE_FILE=/var/lib/bmo/leases.json".to_owned(),
    ];
    for e in &env {
        args.extend(["-e".to_owned(), e.clone()]);
    }
    // Root, as in the Deployment: the stack's kubeconfig and CA are root's files.
    args.extend(
        [
            "--user",
            "0",
            "--network",
            "host",
            "-v",
            &format!("{stack_dir}:{stack_dir}:ro"),
            "-v",
            &format!("{}:/shared/html/images:ro", images.display()),
            "-v",
            &format!("{}:/var/lib/bmo", dir.join("state").display()),
            image,
        ]
        .iter()
        .map(|s| s.to_string()),
    );
    std::fs::create_dir_all(dir.join("state")).unwrap();
    let arg_refs: Vec<&str> = args.iter().map(String::as_str).collect();
    run(&mut podman(&arg_refs));
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
        if let Some(name) = line.trim().strip_prefix("name = \"")
            && let Some(name) = name.strip_suffix('"')
            && Path::new(ROOT).join(format!("benches/{name}.rs")).exists()
        {
            needed.push(format!("benches/{name}.rs"));
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
