//! The one support module of the integration tests, included by every test binary
//! (`tests/AREA/main.rs`): the real stack that `tests/env/stack` brings up, read from
//! its env file; the lock that says which tests may run side by side (`lock`); network
//! namespaces and netboot settings (`netboot`); the packaged forms of bmo (`appliance`);
//! Ironic fake-hardware nodes with a BIOS (`fake_bios`).
#![allow(dead_code)] // each test binary uses a different part of this module

pub mod appliance;
pub mod capi;
pub mod fake_bios;
mod lock;
pub mod netboot;

#[allow(unused_imports)] // not every crate has a test that runs alone
pub use lock::{exclusive, shared};

use std::collections::HashMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use bmo::credentials::{Credentials, SecretString};
use bmo::ironic::{ClientConfig, IronicAuth, IronicClient};
use url::Url;

/// The running test stack.
#[derive(Debug)]
pub struct Stack {
    pub env_file: PathBuf,
    pub dir: PathBuf,
    pub kubeconfig: PathBuf,
    pub operator_kubeconfig: PathBuf,
    pub ironic_endpoint: Url,
    pub ironic_auth: IronicAuth,
    pub redfish_url: Url,
    pub redfish_credentials: Credentials,
    pub redfish_system_ids: Vec<String>,
    pub redfish_system_macs: Vec<String>,
    vars: HashMap<String, String>,
}

const HOW_TO_START: &str = "run the tests through the stack: `tests/env/stack run -- cargo test` (README, \"Run the tests\")";

impl Stack {
    /// The stack described by `$BMO_STACK_ENV` (or `target/test-stack.env`). Panics
    /// with instructions when no stack is up: a missing stack is a failure, not a skip.
    pub fn get() -> &'static Stack {
        static STACK: OnceLock<Stack> = OnceLock::new();
        STACK.get_or_init(|| match Self::load() {
            Ok(stack) => stack,
            Err(why) => panic!("the test stack is not up: {why}; {HOW_TO_START}"),
        })
    }

    fn load() -> Result<Stack, String> {
        let env_file = std::env::var_os("BMO_STACK_ENV")
            .map(PathBuf::from)
            .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target/test-stack.env"));
        Self::load_from(env_file)
    }

    /// A stack described by the env file at `env_file`.
    pub fn load_from(env_file: PathBuf) -> Result<Stack, String> {
        bmo::tls::install_crypto_provider();
        let text = std::fs::read_to_string(&env_file)
            .map_err(|e| format!("cannot read the env file {}: {e}", env_file.display()))?;
        let vars = parse_env_file(&text);
        let var = |key: &str| {
            vars.get(key)
                .cloned()
                .ok_or_else(|| format!("{} has no {key}", env_file.display()))
        };
        let url = |key: &str| -> Result<Url, String> {
            let v = var(key)?;
            Url::parse(&v)
                .map_err(|e| format!("{key}={v} in {} is not a URL: {e}", env_file.display()))
        };
        let dir = PathBuf::from(var("BMO_STACK_DIR")?);
        if !dir.is_dir() {
            return Err(format!(
                "{} names the stack directory {}, which is gone (the stack was stopped)",
                env_file.display(),
                dir.display()
            ));
        }
        let ironic_auth = match var("IRONIC_AUTH_STRATEGY")?.as_str() {
            "http_basic" => IronicAuth::Basic(Credentials {
                username: var("IRONIC_USERNAME")?,
                password: SecretString::new(var("IRONIC_PASSWORD")?),
            }),
            _ => IronicAuth::None,
        };
        let list = |key: &str| -> Result<Vec<String>, String> {
            Ok(var(key)?
                .split(',')
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect())
        };
        Ok(Stack {
            kubeconfig: PathBuf::from(var("KUBECONFIG")?),
            operator_kubeconfig: PathBuf::from(var("BMO_OPERATOR_KUBECONFIG")?),
            ironic_endpoint: url("IRONIC_ENDPOINT")?,
            ironic_auth,
            redfish_url: url("REDFISH_EMULATOR_URL")?,
            redfish_credentials: Credentials {
                username: var("REDFISH_USERNAME")?,
                password: SecretString::new(var("REDFISH_PASSWORD")?),
            },
            redfish_system_ids: list("REDFISH_SYSTEM_IDS")?,
            redfish_system_macs: list("REDFISH_SYSTEM_MACS")?,
            env_file,
            dir,
            vars,
        })
    }

    /// Any variable of the env file.
    pub fn var(&self, key: &str) -> Option<&str> {
        self.vars.get(key).map(String::as_str)
    }

    /// A Kubernetes client with the admin kubeconfig.
    pub async fn kube_client(&self) -> kube::Client {
        kube_client_from(&self.kubeconfig).await
    }

    /// An Ironic client with the stack's authentication.
    pub async fn ironic(&self) -> IronicClient {
        let mut config = ClientConfig::new(self.ironic_endpoint.clone());
        config.auth = self.ironic_auth.clone();
        IronicClient::connect(config)
            .await
            .unwrap_or_else(|e| panic!("cannot connect to the stack's Ironic: {e}"))
    }
}

pub async fn kube_client_from(kubeconfig: &Path) -> kube::Client {
    let raw = kube::config::Kubeconfig::read_from(kubeconfig)
        .unwrap_or_else(|e| panic!("cannot read kubeconfig {}: {e}", kubeconfig.display()));
    let config = kube::Config::from_custom_kubeconfig(raw, &Default::default())
        .await
        .unwrap_or_else(|e| panic!("kubeconfig {} is unusable: {e}", kubeconfig.display()));
    kube::Client::try_from(config).unwrap_or_else(|e| panic!("cannot build kube client: {e}"))
}

/// Reads `export KEY=value` lines, as `tests/env/stack` writes them.
fn parse_env_file(text: &str) -> HashMap<String, String> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .filter_map(|l| {
            let l = l.strip_prefix("export ").unwrap_or(l);
            let (k, v) = l.split_once('=')?;
            Some((k.trim().to_owned(), v.trim().to_owned()))
        })
        .collect()
}

/// A name no other test run uses, for objects in the shared stack.
pub fn unique_name(prefix: &str) -> String {
    use std::hash::{BuildHasher, Hasher};
    let random = std::hash::RandomState::new().build_hasher().finish();
    format!("{prefix}-{:08x}", random as u32)
}

/// Polls `check` every `interval` until it returns `Some`, or panics after `timeout`
/// naming `what` and the last observation.
pub async fn eventually<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        let last = match check().await {
            Ok(v) => return v,
            Err(observed) => observed,
        };
        if Instant::now() >= deadline {
            panic!("timed out after {timeout:?} waiting for {what}; last seen: {last}");
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Waits until host `name` is in `state`, or panics after `timeout`; returns the host.
pub async fn wait_for_state(
    hosts: &kube::Api<bmo::api::BareMetalHost>,
    name: &str,
    state: bmo::api::ProvisioningState,
    timeout: Duration,
) -> bmo::api::BareMetalHost {
    eventually(&format!("{name} to be {state}"), timeout, || async {
        let h = hosts.get(name).await.map_err(|e| e.to_string())?;
        match h.provisioning_state() {
            s if s == state => Ok(h),
            other => Err(other.to_string()),
        }
    })
    .await
}

/// A `bmo` process started by a test; killed when dropped. Its stderr (the log) goes to
/// a file that [`BmoProcess::log`] reads.
pub struct BmoProcess {
    child: std::process::Child,
    log_path: PathBuf,
}

impl BmoProcess {
    /// Starts `bmo ARGS` with `env` added to the test's environment.
    pub fn start(args: &[&str], env: &[(&str, &str)]) -> BmoProcess {
        let log_path = std::env::temp_dir().join(format!("{}.log", unique_name("bmo-test")));
        let log = std::fs::File::create(&log_path).expect("create log file");
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_bmo"));
        // Tests run many bmo processes at once: no fixed HTTP boot port unless asked.
        if !env.iter().any(|(k, _)| *k == "HTTP_PORT") {
            cmd.env("HTTP_PORT", "0");
        }
        // No predecessor of a test's bmo left requests in its Ironic, except in the
        // tests that kill bmo (they set their own).
        if !env.iter().any(|(k, _)| *k == "BMO_START_SETTLE") {
            cmd.env("BMO_START_SETTLE", "0");
        }
        cmd.args(args)
            .envs(env.iter().copied())
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(log);
        let child = cmd.spawn().expect("start bmo");
        BmoProcess { child, log_path }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// What bmo has logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }

    /// The last `lines` lines bmo has logged, for a failure message.
    pub fn log_tail(&self, lines: usize) -> String {
        let log = self.log();
        let all: Vec<&str> = log.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// Sends a signal by name (`TERM`, `INT`, `KILL`).
    pub fn signal(&self, name: &str) {
        let status = std::process::Command::new("kill")
            .arg(format!("-{name}"))
            .arg(self.pid().to_string())
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -{name} {} failed", self.pid());
    }

    /// Waits up to `timeout` for bmo to exit; panics (with its log) if it does not.
    pub async fn wait_exit(&mut self, timeout: Duration) -> std::process::ExitStatus {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait().expect("wait for bmo") {
                return status;
            }
            if Instant::now() >= deadline {
                panic!("bmo did not exit within {timeout:?}; log:\n{}", self.log());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

impl Drop for BmoProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.log_path);
    }
}

/// A loopback port nothing listens on (bound, then released).
pub fn free_port() -> u16 {
    let socket = std::net::TcpListener::bind("127.0.0.1:0").expect("bind loopback");
    socket.local_addr().expect("local addr").port()
}

/// A locally administered MAC address no other test run uses.
pub fn unique_mac() -> String {
    use std::hash::{BuildHasher, Hasher};
    let r = std::hash::RandomState::new()
        .build_hasher()
        .finish()
        .to_be_bytes();
    format!("02:42:{:02x}:{:02x}:{:02x}:{:02x}", r[0], r[1], r[2], r[3])
}

/// A second Ironic of our own, stopped when dropped.
pub struct PrivateIronic {
    pub dir: PathBuf,
    pub endpoint: url::Url,
}

fn stack_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/env/stack")
}

impl PrivateIronic {
    /// Starts an Ironic of its own (empty database, own ports) with extra
    /// `ironic.conf` lines.
    pub fn start(prefix: &str, conf_lines: &[&str]) -> Self {
        let dir = Stack::get()
            .dir
            .join(format!("private-{}", unique_name(prefix)));
        let out = std::process::Command::new(stack_script())
            .args(["private-ironic", "start"])
            .arg(&dir)
            .args(conf_lines)
            .output()
            .expect("run tests/env/stack");
        assert!(
            out.status.success(),
            "private Ironic did not start: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let endpoint = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        Self {
            dir,
            endpoint: endpoint.parse().expect("endpoint URL"),
        }
    }

    /// Restarts it on the same port with an empty database.
    pub fn wipe(&self) {
        self.stack("wipe");
    }

    /// Stops it: its port refuses connections until [`Self::restart`].
    pub fn stop(&self) {
        self.stack("stop");
    }

    /// Starts it again on the same port with its database as it was; returns once it
    /// answers.
    pub fn restart(&self) {
        self.stack("restart");
    }

    fn stack(&self, action: &str) {
        let out = std::process::Command::new(stack_script())
            .args(["private-ironic", action])
            .arg(&self.dir)
            .output()
            .expect("run tests/env/stack");
        assert!(
            out.status.success(),
            "private-ironic {action} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    pub async fn client(&self) -> IronicClient {
        IronicClient::connect(ClientConfig::new(self.endpoint.clone()))
            .await
            .expect("connect to private Ironic")
    }
}

impl Drop for PrivateIronic {
    fn drop(&mut self) {
        let _ = std::process::Command::new(stack_script())
            .args(["private-ironic", "stop"])
            .arg(&self.dir)
            .output();
    }
}

/// Ironic scaled out (`stack ha-ironic`): one ironic-api and two ironic-conductor
/// processes on a private MariaDB, stopped when dropped.
pub struct HaIronic {
    pub dir: PathBuf,
    pub endpoint: url::Url,
    /// The conductors' hosts (what a node's `conductor` field names), 1 then 2.
    pub conductors: [String; 2],
}

impl HaIronic {
    /// Starts it with extra `ironic.conf` lines (every process reads them).
    pub fn start(prefix: &str, conf_lines: &[&str]) -> Self {
        let dir = Stack::get()
            .dir
            .join(format!("private-{}", unique_name(prefix)));
        let out = std::process::Command::new(stack_script())
            .args(["ha-ironic", "start"])
            .arg(&dir)
            .args(conf_lines)
            .output()
            .expect("run tests/env/stack");
        assert!(
            out.status.success(),
            "ha-ironic did not start: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let stdout = String::from_utf8_lossy(&out.stdout);
        let mut lines = stdout.lines();
        let endpoint = lines.next().unwrap_or_default().trim().to_owned();
        let hosts: Vec<String> = lines
            .next()
            .unwrap_or_default()
            .trim()
            .split(',')
            .map(str::to_owned)
            .collect();
        let [one, two] = <[String; 2]>::try_from(hosts).expect("two conductor hosts");
        Self {
            dir,
            endpoint: endpoint.parse().expect("endpoint URL"),
            conductors: [one, two],
        }
    }

    /// SIGKILLs conductor `n` (1 or 2), master and worker: a crash.
    pub fn kill_conductor(&self, n: usize) {
        let out = std::process::Command::new(stack_script())
            .args(["ha-ironic", "kill"])
            .arg(&self.dir)
            .arg(n.to_string())
            .output()
            .expect("run tests/env/stack");
        assert!(
            out.status.success(),
            "ha-ironic kill failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    pub async fn client(&self) -> IronicClient {
        IronicClient::connect(ClientConfig::new(self.endpoint.clone()))
            .await
            .expect("connect to the scaled-out Ironic")
    }
}

impl Drop for HaIronic {
    fn drop(&mut self) {
        let _ = std::process::Command::new(stack_script())
            .args(["ha-ironic", "stop"])
            .arg(&self.dir)
            .output();
    }
}

/// A sushy-emulator of our own (fake driver, `systems` systems named and numbered as
/// the stack's own, state in its own directory), stopped when dropped.
pub struct PrivateSushy {
    pub dir: PathBuf,
    pub url: url::Url,
    pub system_ids: Vec<String>,
}

impl PrivateSushy {
    /// Starts it with the stack's Redfish credentials.
    pub fn start(prefix: &str, systems: usize) -> Self {
        let stack = Stack::get();
        let dir = stack.dir.join(format!("private-{}", unique_name(prefix)));
        let creds = &stack.redfish_credentials;
        let out = std::process::Command::new(stack_script())
            .args(["private-sushy", "start"])
            .arg(&dir)
            .arg(systems.to_string())
            .env("REDFISH_USERNAME", &creds.username)
            .env("REDFISH_PASSWORD", creds.password.expose())
            .output()
            .expect("run tests/env/stack");
        assert!(
            out.status.success(),
            "private sushy-emulator did not start: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let stdout = String::from_utf8_lossy(&out.stdout);
        let mut lines = stdout.lines();
        let url = lines.next().unwrap_or_default().trim().to_owned();
        let system_ids = lines
            .next()
            .unwrap_or_default()
            .split(',')
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect();
        Self {
            dir,
            url: url.parse().expect("emulator URL"),
            system_ids,
        }
    }

    /// The system's Redfish `PowerState` (`On`, `Off`).
    pub async fn power(&self, id: &str) -> String {
        let creds = &Stack::get().redfish_credentials;
        let system: serde_json::Value = reqwest::Client::new()
            .get(self.system_url(id))
            .basic_auth(&creds.username, Some(creds.password.expose()))
            .send()
            .await
            .expect("sushy-emulator answers")
            .json()
            .await
            .expect("a System resource");
        system["PowerState"].as_str().unwrap_or_default().to_owned()
    }

    /// Asks the system for a Redfish reset (`On`, `ForceOff`).
    pub async fn reset(&self, id: &str, reset_type: &str) {
        let creds = &Stack::get().redfish_credentials;
        let response = reqwest::Client::new()
            .post(format!(
                "{}/Actions/ComputerSystem.Reset",
                self.system_url(id)
            ))
            .basic_auth(&creds.username, Some(creds.password.expose()))
            .json(&serde_json::json!({ "ResetType": reset_type }))
            .send()
            .await
            .expect("sushy-emulator answers");
        assert!(
            response.status().is_success(),
            "reset: {}",
            response.status()
        );
    }

    fn system_url(&self, id: &str) -> String {
        format!(
            "{}/redfish/v1/Systems/{id}",
            self.url.as_str().trim_end_matches('/')
        )
    }
}

impl Drop for PrivateSushy {
    fn drop(&mut self) {
        let _ = std::process::Command::new(stack_script())
            .args(["private-sushy", "stop"])
            .arg(&self.dir)
            .output();
    }
}

/// A new namespace named after `prefix` (unique per run), for one test's objects.
pub async fn new_namespace(client: &kube::Client, prefix: &str) -> String {
    use k8s_openapi::api::core::v1::Namespace;
    let name = unique_name(prefix);
    let mut namespace = Namespace::default();
    namespace.metadata.name = Some(name.clone());
    kube::Api::<Namespace>::all(client.clone())
        .create(&Default::default(), &namespace)
        .await
        .expect("create namespace");
    name
}

/// A client of the stack's kube-apiserver with bmo's CRDs and admission policies
/// installed (idempotent: tests run in parallel), and a new namespace named after
/// `prefix`.
pub async fn installed_namespace(prefix: &str) -> (kube::Client, String) {
    let client = Stack::get().kube_client().await;
    bmo::api::install::install(&client, Duration::from_secs(60))
        .await
        .expect("install bmo CRDs and admission policies");
    let namespace = new_namespace(&client, prefix).await;
    (client, namespace)
}

/// Creates the BMC Secret `name` with `username` and `password` in `ns`.
pub async fn create_bmc_secret(
    client: &kube::Client,
    ns: &str,
    name: &str,
    username: &str,
    password: &str,
) {
    use k8s_openapi::ByteString;
    use k8s_openapi::api::core::v1::Secret;
    let mut secret = Secret::default();
    secret.metadata.name = Some(name.to_owned());
    secret.data = Some(
        [
            (
                "username".to_owned(),
                ByteString(username.as_bytes().to_vec()),
            ),
            (
                "password".to_owned(),
                ByteString(password.as_bytes().to_vec()),
            ),
        ]
        .into(),
    );
    kube::Api::<Secret>::namespaced(client.clone(), ns)
        .create(&Default::default(), &secret)
        .await
        .expect("create BMC secret");
}

/// A fake-hardware BareMetalHost (BMC Secret `NAME-bmc`) that provisions an image.
pub fn fake_host(name: &str, mac: &str) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "metal3.io/v1alpha1",
        "kind": "BareMetalHost",
        "metadata": {"name": name},
        "spec": {
            "online": true,
            "bootMACAddress": mac,
            "bmc": {"address": format!("fake://{name}"), "credentialsName": format!("{name}-bmc")},
            "image": {
                "url": "http://127.0.0.1/images/demo.qcow2",
                "checksum": "2d4c0c7a8ef4b1f6e0e6c8d8a0f54f3e6b8f0ab7c5d1e2f3a4b5c6d7e8f90a1b",
                "checksumType": "sha256"
            }
        }
    })
}

/// Creates `NAME-bmc` and the fake-hardware host `name` in `ns`.
pub async fn create_fake_host(client: &kube::Client, ns: &str, name: &str) {
    create_bmc_secret(client, ns, &format!("{name}-bmc"), "admin", "password").await;
    let host: bmo::api::BareMetalHost =
        serde_json::from_value(fake_host(name, &unique_mac())).expect("valid host");
    kube::Api::<bmo::api::BareMetalHost>::namespaced(client.clone(), ns)
        .create(&Default::default(), &host)
        .await
        .expect("create host");
}

/// `bmo run` against the stack, watching `ns`, with `extra` settings; returns the
/// process and its health address.
pub fn bmo_run(ns: &str, extra: &[(&str, &str)]) -> (BmoProcess, String) {
    let stack = Stack::get();
    let kubeconfig = stack.kubeconfig.display().to_string();
    let health = format!("127.0.0.1:{}", free_port());
    let mut env = vec![
        ("KUBECONFIG", kubeconfig.as_str()),
        ("IRONIC_ENDPOINT", stack.ironic_endpoint.as_str()),
        (
            "METAL3_AUTH_ROOT_DIR",
            stack.var("METAL3_AUTH_ROOT_DIR").unwrap_or_default(),
        ),
        ("WATCH_NAMESPACE", ns),
        ("BMO_HEALTH_ADDR", health.as_str()),
    ];
    // Later entries win: `extra` may override any of the above.
    env.retain(|(k, _)| !extra.iter().any(|(e, _)| e == k));
    env.extend_from_slice(extra);
    (BmoProcess::start(&["run"], &env), health)
}

/// A TCP forwarder on loopback that a test can cut (every connection closed, new
/// ones refused) and restore on the same port: a peer that goes away and comes back.
/// TLS passes through it end to end.
pub struct Forwarder {
    pub addr: std::net::SocketAddr,
    target: String,
    tasks: std::sync::Arc<std::sync::Mutex<Vec<tokio::task::AbortHandle>>>,
}

impl Forwarder {
    /// Forwards `127.0.0.1:<free port>` to `target` (`host:port`).
    pub async fn start(target: &str) -> Forwarder {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the forwarder");
        let forwarder = Forwarder {
            addr: listener.local_addr().expect("local addr"),
            target: target.to_owned(),
            tasks: Default::default(),
        };
        forwarder.serve(listener);
        forwarder
    }

    fn serve(&self, listener: tokio::net::TcpListener) {
        let (target, tasks) = (self.target.clone(), self.tasks.clone());
        let accepting = tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                let target = target.clone();
                let copying = tokio::spawn(async move {
                    if let Ok(mut outbound) = tokio::net::TcpStream::connect(&target).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
                tasks.lock().unwrap().push(copying.abort_handle());
            }
        });
        self.tasks.lock().unwrap().push(accepting.abort_handle());
    }

    /// Closes every connection and the listening socket: connections are refused.
    pub fn cut(&self) {
        for task in self.tasks.lock().unwrap().drain(..) {
            task.abort();
        }
    }

    /// Listens again on the same port.
    pub async fn restore(&self) {
        let listener = tokio::net::TcpListener::bind(self.addr)
            .await
            .expect("bind the forwarder again");
        self.serve(listener);
    }
}

impl Drop for Forwarder {
    fn drop(&mut self) {
        self.cut();
    }
}

/// `host:port` of a URL.
pub fn authority(url: &str) -> String {
    let u = Url::parse(url).expect("URL");
    format!(
        "{}:{}",
        u.host_str().expect("host"),
        u.port_or_known_default().expect("port")
    )
}

/// `kubeconfig` with its API server moved to `server`; returns the new file and the
/// server it named.
pub fn kubeconfig_pointing_at(kubeconfig: &Path, server: &str) -> (PathBuf, String) {
    let text = std::fs::read_to_string(kubeconfig).expect("read kubeconfig");
    let mut original = None;
    let moved: Vec<String> = text
        .lines()
        .map(|line| match line.trim_start().strip_prefix("server:") {
            Some(url) => {
                original = Some(url.trim().trim_matches('"').to_owned());
                let indent = &line[..line.len() - line.trim_start().len()];
                format!("{indent}server: {server}")
            }
            None => line.to_owned(),
        })
        .collect();
    let path = std::env::temp_dir().join(format!("{}.kubeconfig", unique_name("moved")));
    std::fs::write(&path, moved.join("\n")).expect("write kubeconfig");
    (path, original.expect("a server in the kubeconfig"))
}

/// The documents of deploy/rbac/role.yaml.
pub fn rbac_documents() -> Vec<serde_json::Value> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/rbac/role.yaml");
    let text = std::fs::read_to_string(path).expect("read deploy/rbac/role.yaml");
    text.split("\n---\n")
        .filter(|d| {
            d.lines()
                .any(|l| !l.trim().is_empty() && !l.starts_with('#'))
        })
        .map(|d| serde_norway::from_str(d).expect("role.yaml document is YAML"))
        .collect()
}

/// A kubeconfig for a new user (the admin impersonating it) that holds only
/// deploy/rbac's ClusterRole, bound cluster-wide (claims and switches' Secrets live in
/// every namespace).
pub async fn kubeconfig_with_shipped_rbac(client: &kube::Client) -> std::path::PathBuf {
    use k8s_openapi::api::rbac::v1::{ClusterRoleBinding, RoleRef, Subject};
    use kube::api::PostParams;
    use serde_json::{Value, json};
    let role_name = apply_shipped_cluster_role(client).await;
    let user = unique_name("bmo-shipped-rbac");
    let mut binding = ClusterRoleBinding {
        role_ref: RoleRef {
            api_group: Some("rbac.authorization.k8s.io".into()),
            kind: "ClusterRole".into(),
            name: role_name,
        },
        subjects: Some(vec![Subject {
            api_group: Some("rbac.authorization.k8s.io".into()),
            kind: "User".into(),
            name: user.clone(),
            namespace: None,
        }]),
        ..Default::default()
    };
    binding.metadata.name = Some(user.clone());
    kube::Api::<ClusterRoleBinding>::all(client.clone())
        .create(&PostParams::default(), &binding)
        .await
        .expect("bind the ClusterRole");
    let stack = Stack::get();
    let admin = std::fs::read_to_string(&stack.kubeconfig).expect("read kubeconfig");
    let mut config: Value = serde_norway::from_str(&admin).expect("kubeconfig is YAML");
    for entry in config["users"].as_array_mut().expect("users") {
        entry["user"]["as"] = json!(user);
    }
    let path = stack.dir.join(format!("{user}.kubeconfig"));
    std::fs::write(&path, serde_norway::to_string(&config).expect("YAML"))
        .expect("write kubeconfig");
    path
}

/// Applies deploy/rbac's ClusterRole exactly as shipped (as `client`, the admin);
/// returns its name.
pub async fn apply_shipped_cluster_role(client: &kube::Client) -> String {
    use k8s_openapi::api::rbac::v1::ClusterRole;
    let cluster_role: ClusterRole = rbac_documents()
        .into_iter()
        .find(|d| d["kind"] == "ClusterRole")
        .map(|d| serde_json::from_value(d).expect("a ClusterRole"))
        .expect("role.yaml has the ClusterRole");
    let role_name = cluster_role.metadata.name.clone().expect("named");
    kube::Api::<ClusterRole>::all(client.clone())
        .patch(
            &role_name,
            &kube::api::PatchParams::apply("bmo-test").force(),
            &kube::api::Patch::Apply(&cluster_role),
        )
        .await
        .expect("apply the ClusterRole");
    role_name
}

/// The config drive Ironic stored for `node`: with a deploy interface that does not
/// build the ISO itself (fake-hardware), Ironic keeps the document bmo sent (the
/// stack's Ironic policy lets tests see it unmasked).
pub async fn stored_config_drive(node: &str) -> serde_json::Value {
    let ironic = Stack::get().ironic().await;
    let node = ironic
        .get_node(node)
        .await
        .expect("get node")
        .expect("node");
    match node.instance_info.get("configdrive").cloned() {
        Some(drive @ serde_json::Value::Object(_)) => drive,
        other => panic!("instance_info.configdrive is not a document: {other:?}"),
    }
}
