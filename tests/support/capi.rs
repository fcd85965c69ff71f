//! Cluster API with CAPM3 against the stack: the CRDs and the CAPM3 manager that
//! `tests/env/stack` builds from their Go modules (docs/api.md, "With Cluster API").

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use super::{Stack, free_port, unique_name};

/// Installs the Cluster API, CAPM3 and IPAM CRDs (idempotent: server-side apply) and
/// waits until they are served.
pub fn install_crds() {
    let stack = Stack::get();
    let dir = stack
        .var("BMO_CAPI_CRDS")
        .expect("BMO_CAPI_CRDS in the stack's env file (tests/env/stack builds it)");
    let kubectl = |args: &[&str]| {
        let out = Command::new("kubectl")
            .args(args)
            .env("KUBECONFIG", &stack.kubeconfig)
            .output()
            .expect("run kubectl (the stack puts it on PATH)");
        assert!(
            out.status.success(),
            "kubectl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    kubectl(&[
        "apply",
        "--server-side",
        "--force-conflicts",
        "--field-manager=bmo-tests",
        "-f",
        dir,
    ]);
    // The contract label the modules' kustomizations add (commonLabels): core finds
    // the provider's API version by it.
    kubectl(&[
        "label",
        "--overwrite",
        "-f",
        dir,
        "cluster.x-k8s.io/v1beta1=v1beta1",
    ]);
    for crd in ["clusters", "machines", "ipclaims"] {
        let group = if crd == "ipclaims" {
            "ipam.metal3.io"
        } else {
            "cluster.x-k8s.io"
        };
        kubectl(&[
            "wait",
            "--for=condition=Established",
            "--timeout=60s",
            &format!("crd/{crd}.{group}"),
        ]);
    }
    kubectl(&[
        "wait",
        "--for=condition=Established",
        "--timeout=60s",
        "crd/metal3machines.infrastructure.cluster.x-k8s.io",
    ]);
}

/// A controller manager of Cluster API (core or CAPM3: they take the same flags),
/// watching one namespace, on free loopback ports; killed when dropped.
pub struct Manager {
    child: std::sync::Mutex<Child>,
    dir: PathBuf,
}

/// The env file's variable naming the CAPM3 manager's binary.
pub const CAPM3: &str = "BMO_CAPM3_MANAGER";
/// The env file's variable naming the Cluster API core manager's binary.
pub const CORE: &str = "BMO_CAPI_MANAGER";

impl Manager {
    /// Starts the manager the env file's `binary_var` names.
    pub fn start(binary_var: &str, namespace: &str) -> Manager {
        let stack = Stack::get();
        let binary = stack.var(binary_var).unwrap_or_else(|| {
            panic!("{binary_var} is not in the stack's env file (tests/env/stack builds it)")
        });
        let dir = std::env::temp_dir().join(unique_name("capi-manager"));
        std::fs::create_dir_all(&dir).expect("capm3 dir");
        // The webhook server will not start without a certificate; the apiserver never
        // calls it (the tests write complete objects), so a throwaway one does.
        let status = Command::new("openssl")
            .args([
                "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
            ])
            .args([
                "-subj",
                "/CN=127.0.0.1",
                "-keyout",
                "tls.key",
                "-out",
                "tls.crt",
            ])
            .current_dir(&dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("run openssl");
        assert!(
            status.success(),
            "openssl could not make a webhook certificate"
        );
        let log = std::fs::File::create(dir.join("manager.log")).expect("log");
        let child = Command::new(binary)
            .arg(format!("--namespace={namespace}"))
            .arg(format!("--webhook-port={}", free_port()))
            .arg(format!("--webhook-cert-dir={}", dir.display()))
            .arg(format!("--health-addr=127.0.0.1:{}", free_port()))
            .arg(format!("--diagnostics-address=127.0.0.1:{}", free_port()))
            .arg("--insecure-diagnostics")
            .arg("--leader-elect=false")
            .env("KUBECONFIG", &stack.kubeconfig)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("start {binary}: {e}"));
        Manager {
            child: std::sync::Mutex::new(child),
            dir,
        }
    }

    /// What the manager has logged so far (its last 8 KiB).
    pub fn log(&self) -> String {
        let log = std::fs::read_to_string(self.dir.join("manager.log")).unwrap_or_default();
        let start = log.len().saturating_sub(8192);
        log.get(start..).unwrap_or(&log).to_owned()
    }

    /// Whether the process is still running.
    pub fn running(&self) -> bool {
        let mut child = self.child.lock().unwrap_or_else(|e| e.into_inner());
        matches!(child.try_wait(), Ok(None))
    }
}

impl Drop for Manager {
    fn drop(&mut self) {
        let child = self.child.get_mut().unwrap_or_else(|e| e.into_inner());
        let _ = child.kill();
        let _ = child.wait();
        // A failed test leaves the whole log behind (log() shows only its end).
        if std::thread::panicking() {
            eprintln!(
                "manager log kept: {}",
                self.dir.join("manager.log").display()
            );
        } else {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}
