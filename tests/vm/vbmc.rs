//! An IPMI BMC for a lab VM: VirtualBMC (`vbmcd`, from the stack's venv) inside the
//! lab's network namespace, answering IPMI over LAN on a loopback port there, in
//! front of the VM's libvirt domain. The lab's Ironic (in the same namespace) drives
//! it with Debian's `ipmitool`, as its `ipmi` hardware type does on real hardware.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use crate::lab::{Lab, Vm};
use crate::support::netboot::{ChildGuard, NsRef, spawn};
use crate::support::{Stack, eventually, free_port};

/// The credentials the BMC accepts; the test's BMC Secret holds the same.
pub const USERNAME: &str = "admin";
pub const PASSWORD: &str = "password";

pub struct VirtualBmc {
    ns: NsRef,
    bin: PathBuf,
    config: PathBuf,
    _daemon: ChildGuard,
}

impl VirtualBmc {
    /// Starts `vbmcd` in the lab's namespace, its configuration and state in the
    /// lab's directory; the control port it listens on for `vbmc` is on loopback there.
    pub async fn start(lab: &Lab) -> VirtualBmc {
        let bin = PathBuf::from(
            Stack::get()
                .var("BMO_VBMC_DIR")
                .expect("BMO_VBMC_DIR in the stack env (tests/env/stack installs VirtualBMC)"),
        );
        let dir = lab.path().join("vbmc");
        std::fs::create_dir_all(dir.join("config")).expect("VirtualBMC's directory");
        let config = dir.join("virtualbmc.conf");
        std::fs::write(
            &config,
            format!(
                "[default]\nconfig_dir = {}\npid_file = {}\nserver_port = {}\n[log]\nlogfile = {}\ndebug = true\n",
                dir.join("config").display(),
                dir.join("vbmcd.pid").display(),
                free_port(),
                lab.path().join("vbmcd.log").display(),
            ),
        )
        .expect("VirtualBMC's configuration");
        let ns = lab.ns.handle();
        let daemon = spawn(
            ns.command(&bin.join("vbmcd").display().to_string())
                .arg("--foreground")
                .env("VIRTUALBMC_CONFIG", &config)
                .stdout(Stdio::null())
                .stderr(Stdio::null()),
        );
        let vbmc = VirtualBmc {
            ns,
            bin,
            config,
            _daemon: daemon,
        };
        eventually("vbmcd to answer", Duration::from_secs(60), || {
            let out = vbmc.vbmc(&["list"]);
            async move { out.map(|_| ()) }
        })
        .await;
        vbmc
    }

    /// `vbmc ARGS` against this daemon: its output, or what went wrong.
    fn vbmc(&self, args: &[&str]) -> Result<String, String> {
        let out = self
            .ns
            .command(&self.bin.join("vbmc").display().to_string())
            .args(args)
            .env("VIRTUALBMC_CONFIG", &self.config)
            .output()
            .map_err(|e| e.to_string())?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(format!(
                "vbmc {args:?}: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ))
        }
    }

    /// Puts a BMC in front of the VM's domain on a loopback UDP port of the lab's
    /// namespace and waits until it answers IPMI. Returns its `ipmi://` address.
    pub async fn add(&self, vm: &Vm) -> String {
        let port = free_port().to_string();
        self.vbmc(&[
            "add",
            &vm.name,
            "--port",
            &port,
            "--address",
            "127.0.0.1",
            "--username",
            USERNAME,
            "--password",
            PASSWORD,
            "--libvirt-uri",
            "qemu:///system",
        ])
        .expect("vbmc add");
        self.vbmc(&["start", &vm.name]).expect("vbmc start");
        let address = format!("ipmi://127.0.0.1:{port}");
        eventually(
            "the VM's IPMI BMC to answer",
            Duration::from_secs(60),
            || {
                let status = self.power_status(&address);
                async move { status.map(|_| ()) }
            },
        )
        .await;
        address
    }

    /// `ipmitool power status` against the BMC at `address` (from [`Self::add`]):
    /// `on` or `off`.
    pub fn power_status(&self, address: &str) -> Result<String, String> {
        let port = address.rsplit(':').next().unwrap_or_default();
        let out = self
            .ns
            .command("ipmitool")
            .args(["-I", "lanplus", "-H", "127.0.0.1", "-p", port])
            .args(["-U", USERNAME, "-P", PASSWORD, "power", "status"])
            .output()
            .map_err(|e| e.to_string())?;
        let text = String::from_utf8_lossy(&out.stdout);
        match text.trim().strip_prefix("Chassis Power is ") {
            Some(state) if out.status.success() => Ok(state.to_owned()),
            _ => Err(format!(
                "ipmitool power status: {text}{}",
                String::from_utf8_lossy(&out.stderr)
            )),
        }
    }
}
