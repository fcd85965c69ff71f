//! The real-machine lab: one network namespace holding the provisioning network
//! (bridge `br0`, 10.77.0.1/24), and in it libvirtd with qemu (TCG), sushy-emulator's
//! libvirt driver as the VMs' Redfish BMC, a private Ironic, and `bmo run` serving
//! DHCP, TFTP and HTTP on `br0`. The kube-apiserver stays in the root namespace on
//! loopback; a relay inside the namespace listens on the same loopback port and
//! forwards to it, so bmo uses the stack's kubeconfig unchanged. A second relay lets
//! the test read the private Ironic from the root namespace. No packet leaves the
//! namespace or loopback.
//!
//! A virtual media lab ([`Lab::start_virtual_media`]) also gives sushy a libvirt
//! storage pool (it copies each inserted ISO there) and its firmware map (OVMF without
//! secure boot for `UEFI`), and gives Ironic the ESP image (tests/env/esp-build) that
//! makes the ISOs it builds from the agent's kernel and ramdisk boot under UEFI.
//!
//! An IPv6-only lab ([`Lab::start_ipv6`]) gives `br0` fd77::1/64 and no IPv4 address,
//! runs bmo's DHCPv6 with router advertisements, has Ironic listen on `[::]` with
//! bracketed URLs, and switches OVMF's IPv4 PXE off in UEFI VMs.

use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::support::netboot::{ChildGuard, Netns, NsRef, TempDir, run, spawn};
use crate::support::{Stack, eventually, free_port};

pub const PROVISIONING_IP: &str = "10.77.0.1";
/// The provisioning address of the IPv6-only lab ([`Lab::start_ipv6`]).
pub const PROVISIONING_IP6: &str = "fd77::1";
/// The IPv6-only lab's DHCPv6 range.
pub const DHCP_RANGE6: &str = "fd77::100,fd77::1ff,64";
pub const HTTP_PORT: u16 = 6180;

/// Forwards each connection accepted on `listener` to `target`. The outgoing
/// connection is made from `ns` when given, else from the root namespace.
fn spawn_relay(listener: TcpListener, target: SocketAddr, ns: Option<NsRef>) {
    std::thread::spawn(move || {
        if let Some(ns) = ns {
            ns.enter();
        }
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("relay runtime");
        runtime.block_on(async move {
            listener
                .set_nonblocking(true)
                .expect("nonblocking listener");
            let listener = tokio::net::TcpListener::from_std(listener).expect("relay listener");
            while let Ok((mut inbound, _)) = listener.accept().await {
                tokio::spawn(async move {
                    if let Ok(mut outbound) = tokio::net::TcpStream::connect(target).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
            }
        });
    });
}

/// A TCP listener bound inside `ns`.
fn listen_in(ns: &Netns, addr: SocketAddr) -> TcpListener {
    ns.block_on(move || async move { TcpListener::bind(addr).expect("bind inside the namespace") })
}

fn port_of(url: &url::Url) -> u16 {
    url.port_or_known_default().expect("URL with a port")
}

pub struct Lab {
    pub ns: Netns,
    pub dir: TempDir,
    pub http_root: PathBuf,
    pub images: PathBuf,
    pub sushy_port: u16,
    /// The private Ironic as seen from the root namespace (through the relay).
    pub ironic_from_test: url::Url,
    ironic_dir: PathBuf,
    _daemons: Vec<ChildGuard>,
    domains: Vec<String>,
    /// IPv6 only: `br0` has [`PROVISIONING_IP6`] and no IPv4 address.
    pub ipv6: bool,
}

impl Lab {
    pub fn start() -> Lab {
        Self::start_with_ironic_conf(&[])
    }

    /// As [`Self::start`], with `extra` lines (sections and options) appended to the
    /// lab Ironic's configuration.
    pub fn start_with_ironic_conf(extra: &[&str]) -> Lab {
        Self::start_inner(extra, false, false)
    }

    /// An IPv6-only lab: `br0` has [`PROVISIONING_IP6`]/64 and no IPv4 address, bmo
    /// serves DHCPv6 from [`DHCP_RANGE6`] and sends router advertisements, Ironic
    /// listens on `[::]` and names itself and its HTTP root by bracketed IPv6 URLs.
    /// UEFI VMs skip OVMF's IPv4 PXE.
    pub fn start_ipv6(extra: &[&str]) -> Lab {
        Self::start_inner(extra, false, true)
    }

    /// The provisioning address as a URL's host: bracketed when IPv6.
    pub fn url_host(&self) -> String {
        if self.ipv6 {
            format!("[{PROVISIONING_IP6}]")
        } else {
            PROVISIONING_IP.to_owned()
        }
    }

    /// A lab whose BMC boots VMs from virtual media: Redfish `InsertMedia` of the ISO
    /// that Ironic builds, served by bmo's HTTP server from Ironic's `http_root`.
    pub fn start_virtual_media(extra: &[&str]) -> Lab {
        Self::start_inner(extra, true, false)
    }

    fn start_inner(extra: &[&str], virtual_media: bool, ipv6: bool) -> Lab {
        let stack = Stack::get();
        reap_dead_labs();
        let ns = Netns::new("vm");
        let ip = |args: &[&str]| run(Command::new("ip").arg("-n").arg(&ns.name).args(args));
        if ipv6 {
            // No snooping: the kernel's MLD view must not keep DHCPv6 and neighbour
            // multicast from the VM's port; no forwarding delay after the port joins.
            ip(&[
                "link",
                "add",
                "br0",
                "type",
                "bridge",
                "mcast_snooping",
                "0",
                "forward_delay",
                "0",
            ]);
            let addr = format!("{PROVISIONING_IP6}/64");
            ip(&["addr", "add", &addr, "dev", "br0", "nodad"]);
        } else {
            ip(&["link", "add", "br0", "type", "bridge"]);
            ip(&[
                "addr",
                "add",
                &format!("{PROVISIONING_IP}/24"),
                "dev",
                "br0",
            ]);
        }
        ip(&["link", "set", "br0", "up"]);

        let dir = TempDir::new("vm-lab");
        // qemu runs as libvirt-qemu and must reach the disk images in here.
        run(Command::new("chmod").arg("755").arg(dir.path()));
        let http_root = dir.path().join("http");
        let images = dir.path().join("images");
        let tftp_root = dir.path().join("tftp");
        for d in [&http_root, &images, &tftp_root] {
            std::fs::create_dir_all(d).expect("lab directory");
        }

        // The agent's kernel and ramdisk under the names bmo derives its URLs from.
        let ipa = PathBuf::from(
            stack
                .var("BMO_IPA_DIR")
                .expect("BMO_IPA_DIR in the stack env"),
        );
        for name in [
            "ironic-python-agent.kernel",
            "ironic-python-agent.initramfs",
        ] {
            link_or_copy(&ipa.join(name), &images.join(name));
        }

        let mut daemons = Vec::new();
        let apiserver = stack
            .var("KUBE_APISERVER_URL")
            .expect("KUBE_APISERVER_URL")
            .parse::<url::Url>()
            .expect("apiserver URL");
        let apiserver_addr: SocketAddr = ([127, 0, 0, 1], port_of(&apiserver)).into();
        spawn_relay(listen_in(&ns, apiserver_addr), apiserver_addr, None);

        assert!(
            !Command::new("virsh")
                .args(["-c", "qemu:///system", "version"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success()),
            "a libvirtd is already running on this machine; the VM test starts its own inside its network namespace (stop the other one: pkill libvirtd)"
        );
        daemons.push(spawn(ns.command("virtlogd").stderr(Stdio::null())));
        daemons.push(spawn(ns.command("libvirtd").stdout(Stdio::null()).stderr(
            std::fs::File::create(dir.path().join("libvirtd.log")).expect("log"),
        )));

        let sushy_port = free_port();
        let sushy_conf = dir.path().join("sushy.conf");
        let mut sushy_settings = format!(
            "SUSHY_EMULATOR_LISTEN_IP = '127.0.0.1'\nSUSHY_EMULATOR_LISTEN_PORT = {sushy_port}\nSUSHY_EMULATOR_LIBVIRT_URI = 'qemu:///system'\nSUSHY_EMULATOR_IGNORE_BOOT_DEVICE = False\n"
        );
        let sushy_tmp = dir.path().join("sushy-tmp");
        std::fs::create_dir_all(&sushy_tmp).expect("sushy's temp directory");
        if virtual_media {
            create_storage_pool(&dir.path().join("pool"));
            sushy_settings.push_str(&virtual_media_settings(&dir.path().join("sushy-state")));
        }
        std::fs::write(&sushy_conf, sushy_settings).expect("sushy config");
        let sushy = stack
            .var("BMO_SUSHY_LIBVIRT")
            .expect("BMO_SUSHY_LIBVIRT in the stack env");
        daemons.push(spawn(
            ns.command(sushy)
                .arg("--config")
                .arg(&sushy_conf)
                // It downloads inserted ISOs there before copying them into the pool.
                .env("TMPDIR", &sushy_tmp)
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(dir.path().join("sushy.log")).expect("log")),
        ));

        let ironic_dir = stack.dir.join(format!(
            "private-{}",
            crate::support::unique_name("vm-ironic")
        ));
        let url_host = if ipv6 {
            format!("[{PROVISIONING_IP6}]")
        } else {
            PROVISIONING_IP.to_owned()
        };
        let http_url = format!("http://{url_host}:{HTTP_PORT}");
        // `::` takes IPv4 too (the relays from the root namespace dial 127.0.0.1).
        let host_ip = if ipv6 { "::" } else { "0.0.0.0" };
        // The agent waits for an IPv4 address before inspecting (60 s by default):
        // on an IPv6-only network there is none to wait for.
        let no_v4_wait = if ipv6 {
            " ipa-inspection-dhcp-wait-timeout=0"
        } else {
            ""
        };
        let mut conf = vec![
            "[api]".to_owned(),
            format!("host_ip = {host_ip}"),
            "[deploy]".to_owned(),
            format!("http_root = {}", http_root.display()),
            format!("http_url = {http_url}"),
            // Inspection, cleaning and deployment share one agent boot, as in metal3.
            "fast_track = true".to_owned(),
            "erase_devices_priority = 0".to_owned(),
            "erase_devices_metadata_priority = 10".to_owned(),
            // `automatedCleaningMode: full`'s wipe overwrites the disk once, with zeros.
            "shred_random_overwrite_iterations = 0".to_owned(),
            "shred_final_overwrite_with_zeros = true".to_owned(),
            "[pxe]".to_owned(),
            format!("tftp_root = {}", tftp_root.display()),
            format!("kernel_append_params = console=ttyS0,115200 ipa-insecure=1{no_v4_wait}"),
            "[service_catalog]".to_owned(),
            format!("endpoint_override = http://{url_host}:@IRONIC_PORT@"),
            "[agent]".to_owned(),
            "deploy_logs_collect = never".to_owned(),
            // Ironic spaces ipmitool commands 5 s apart for slow hardware BMCs;
            // VirtualBMC answers at once.
            "[ipmi]".to_owned(),
            "min_command_interval = 1".to_owned(),
        ];
        if virtual_media {
            conf.extend(virtual_media_ironic_conf());
        }
        conf.extend(extra.iter().map(|line| (*line).to_owned()));
        let out = ns
            .command(&stack_script().display().to_string())
            .args(["private-ironic", "start"])
            .arg(&ironic_dir)
            .args(&conf)
            .output()
            .expect("run tests/env/stack");
        assert!(
            out.status.success(),
            "the lab's Ironic did not start: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let ironic_in_ns: url::Url = String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .expect("Ironic endpoint");
        let relay_port = free_port();
        let relay = TcpListener::bind(("127.0.0.1", relay_port)).expect("bind relay");
        spawn_relay(
            relay,
            ([127, 0, 0, 1], port_of(&ironic_in_ns)).into(),
            Some(ns.handle()),
        );
        let ironic_from_test = format!("http://127.0.0.1:{relay_port}/v1/")
            .parse()
            .expect("URL");

        Lab {
            ns,
            dir,
            http_root,
            images,
            sushy_port,
            ironic_from_test,
            ironic_dir,
            _daemons: daemons,
            domains: Vec::new(),
            ipv6,
        }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    pub fn ironic_port_in_ns(&self) -> u16 {
        let ports = std::fs::read_to_string(self.ironic_dir.join("ports")).expect("ports file");
        ports
            .split_whitespace()
            .next()
            .and_then(|p| p.parse().ok())
            .expect("Ironic port")
    }

    /// `bmo run` inside the namespace, serving DHCP, TFTP and HTTP on `br0`. No
    /// deploy kernel or ramdisk URL is given: bmo derives them from the address it
    /// detects.
    pub fn start_bmo(&self, watch_namespace: &str) -> ChildGuard {
        self.start_bmo_with(watch_namespace, &[])
    }

    /// As [`Self::start_bmo`], with `env` set last (e.g. `BMO_DHCP_MODE=off` for a
    /// VM that must not network-boot).
    pub fn start_bmo_with(&self, watch_namespace: &str, env: &[(&str, &str)]) -> ChildGuard {
        let stack = Stack::get();
        let log = std::fs::File::create(self.path().join("bmo.log")).expect("bmo log");
        let mut cmd = self.ns.command(env!("CARGO_BIN_EXE_bmo"));
        cmd.arg("run")
            .env_remove("DEPLOY_KERNEL_URL")
            .env_remove("DEPLOY_RAMDISK_URL")
            .env("KUBECONFIG", &stack.kubeconfig)
            .env(
                "IRONIC_ENDPOINT",
                format!("http://127.0.0.1:{}/v1/", self.ironic_port_in_ns()),
            )
            .env(
                "METAL3_AUTH_ROOT_DIR",
                stack.var("METAL3_AUTH_ROOT_DIR").unwrap_or_default(),
            )
            .env("WATCH_NAMESPACE", watch_namespace)
            .env("BMO_HEALTH_ADDR", format!("127.0.0.1:{}", free_port()))
            .env("PROVISIONING_INTERFACE", "br0")
            .env("HTTP_PORT", HTTP_PORT.to_string())
            .env("BMO_HTTP_ROOT", &self.http_root)
            .env("BMO_IMAGES_DIR", &self.images)
            .env("BMO_TFTP", "true")
            .env("BMO_TFTP_ROOT", self.path().join("tftp"))
            .env("BMO_DHCP_MODE", "full")
            .env("DHCP_RANGE", "10.77.0.100,10.77.0.150")
            .env("BMO_LEASE_FILE", self.path().join("leases.json"))
            // TFTP transfers are logged at debug: the tests look for them.
            .env("RUST_LOG", "info,bmo::netboot::tftp=debug")
            .stdout(Stdio::null())
            .stderr(log);
        if self.ipv6 {
            // No IPv4 on br0: bmo finds fd77::1 there; iPXE waits for the M flag of a
            // router advertisement before it asks DHCPv6.
            cmd.env("BMO_PROVISIONING_IP_FAMILY", "ipv6")
                .env("DHCP_RANGE", DHCP_RANGE6)
                .env("BMO_ROUTER_ADVERTISEMENTS", "true");
        }
        cmd.envs(env.iter().copied());
        spawn(&mut cmd)
    }

    /// Defines (not starts) a VM with a virtio disk of `disk_gib` GiB, one virtio
    /// NIC on `br0` with `mac`, and its serial console appended to a file.
    pub fn define_vm(&mut self, spec: VmSpec<'_>) -> Vm {
        self.define_vm_booting(spec, "network")
    }

    /// As [`Self::define_vm`], with `boot_dev` (`network` or `hd`) first in the
    /// firmware's boot order. A VM that boots from virtual media gets `hd`: its BMC
    /// puts the CD first when it inserts one.
    pub fn define_vm_booting(&mut self, spec: VmSpec<'_>, boot_dev: &str) -> Vm {
        let VmSpec {
            name,
            uuid,
            mac,
            memory_mib,
            cpus,
            disk_gib,
            firmware,
        } = spec;
        let disk = self.path().join(format!("{name}.img"));
        let file = std::fs::File::create(&disk).expect("disk image");
        file.set_len(disk_gib << 30).expect("size disk image");
        let console = self.path().join(format!("{name}.console.log"));
        // BIOS: SeaBIOS runs the NIC's own ROM, which is iPXE (the loader-less HTTP
        // path). UEFI: OVMF's built-in PXE with the NIC ROM off, so the first
        // request is a plain PXE client's and gets iPXE over TFTP.
        // IPv6 only: OVMF would spend its first PXE attempt on DHCPv4, which nothing
        // answers; qemu's fw_cfg switches its IPv4 PXE off (no libvirt element for it).
        let (qemu_ns, qemu_args) = if self.ipv6 && firmware == Firmware::Uefi {
            (
                " xmlns:qemu='http://libvirt.org/schemas/domain/qemu/1.0'",
                "\n  <qemu:commandline>\n    <qemu:arg value='-fw_cfg'/>\n    <qemu:arg value='name=opt/org.tianocore/IPv4PXESupport,string=n'/>\n  </qemu:commandline>",
            )
        } else {
            ("", "")
        };
        let (loader, rom) = match firmware {
            Firmware::Bios => ("    <bios useserial='yes'/>".to_owned(), ""),
            Firmware::Uefi => (
                format!(
                    "    <loader readonly='yes' type='pflash'>{OVMF_CODE}</loader>\n    <nvram template='{OVMF_VARS}'>{}</nvram>",
                    self.path().join(format!("{name}.vars.fd")).display()
                ),
                "\n      <rom enabled='no'/>",
            ),
        };
        let xml = format!(
            r#"<domain type='qemu'{qemu_ns}>
  <name>{name}</name>
  <uuid>{uuid}</uuid>
  <memory unit='MiB'>{memory_mib}</memory>
  <vcpu>{cpus}</vcpu>
  <os>
    <type arch='x86_64' machine='pc'>hvm</type>
    <boot dev='{boot_dev}'/>
{loader}
  </os>
  <features><acpi/><apic/></features>
  <clock offset='utc'/>
  <on_poweroff>destroy</on_poweroff>
  <on_reboot>restart</on_reboot>
  <on_crash>destroy</on_crash>
  <devices>
    <emulator>/usr/bin/qemu-system-x86_64</emulator>
    <disk type='file' device='disk'>
      <driver name='qemu' type='raw' cache='writeback'/>
      <source file='{disk}'/>
      <target dev='vda' bus='virtio'/>
    </disk>
    <interface type='bridge'>
      <source bridge='br0'/>
      <mac address='{mac}'/>
      <model type='virtio'/>{rom}
    </interface>
    <serial type='file'>
      <source path='{console}' append='on'/>
      <target port='0'/>
    </serial>
    <console type='file'>
      <source path='{console}' append='on'/>
      <target type='serial' port='0'/>
    </console>
  </devices>{qemu_args}
</domain>
"#,
            disk = disk.display(),
            console = console.display(),
        );
        let xml_path = self.path().join(format!("{name}.xml"));
        std::fs::write(&xml_path, xml).expect("domain XML");
        virsh(&["define", &xml_path.display().to_string()]);
        self.domains.push(name.to_owned());
        Vm {
            name: name.to_owned(),
            uuid: uuid.to_owned(),
            mac: mac.to_owned(),
            disk,
            console,
        }
    }

    /// Gives the defined, not yet started `vm` another virtio disk (`vdb`, a sparse
    /// file of `gib` GiB next to its first); its path.
    pub fn add_disk(&self, vm: &Vm, gib: u64) -> PathBuf {
        let disk = self.path().join(format!("{}-vdb.img", vm.name));
        let file = std::fs::File::create(&disk).expect("disk image");
        file.set_len(gib << 30).expect("size disk image");
        virsh(&[
            "attach-disk",
            &vm.name,
            &disk.display().to_string(),
            "vdb",
            "--config",
            "--targetbus",
            "virtio",
            "--driver",
            "qemu",
            "--subdriver",
            "raw",
            "--cache",
            "writeback",
        ]);
        disk
    }

    /// Waits until sushy-emulator lists the VM.
    pub async fn wait_for_bmc(&self, vm: &Vm) {
        let url = format!(
            "http://127.0.0.1:{}/redfish/v1/Systems/{}",
            self.sushy_port, vm.uuid
        );
        let ns = self.ns.handle();
        eventually(
            "sushy-emulator to serve the VM",
            Duration::from_secs(60),
            || {
                let out = ns.command("curl").args(["-sf", &url]).output();
                async move {
                    match out {
                        Ok(o) if o.status.success() => Ok(()),
                        Ok(o) => Err(String::from_utf8_lossy(&o.stderr).into_owned()),
                        Err(e) => Err(e.to_string()),
                    }
                }
            },
        )
        .await;
    }

    /// The VM's BIOS attributes as its BMC (sushy-emulator) reports them.
    pub fn bmc_bios_attributes(&self, vm: &Vm) -> serde_json::Value {
        let url = format!(
            "http://127.0.0.1:{}/redfish/v1/Systems/{}/BIOS",
            self.sushy_port, vm.uuid
        );
        let out = self
            .ns
            .command("curl")
            .args(["-sf", &url])
            .output()
            .expect("run curl");
        assert!(out.status.success(), "read the BMC's BIOS at {url}");
        let bios: serde_json::Value =
            serde_json::from_slice(&out.stdout).expect("the BMC's BIOS is JSON");
        bios["Attributes"].clone()
    }

    pub fn redfish_address(&self, vm: &Vm) -> String {
        format!(
            "redfish+http://127.0.0.1:{}/redfish/v1/Systems/{}",
            self.sushy_port, vm.uuid
        )
    }

    /// The lab Ironic's log (its API logs each request with the client's address).
    pub fn ironic_log(&self) -> String {
        std::fs::read_to_string(self.ironic_dir.join("ironic.log")).unwrap_or_default()
    }

    /// Ironic's and sushy's logs, for a failure message.
    pub fn logs_tail(&self) -> String {
        let mut out = String::new();
        for (name, path) in [
            ("bmo", self.path().join("bmo.log")),
            ("ironic", self.ironic_dir.join("ironic.log")),
            ("sushy", self.path().join("sushy.log")),
        ] {
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            let from = lines.len().saturating_sub(40);
            out.push_str(&format!(
                "--- {name} ({})\n{}\n",
                path.display(),
                lines[from..].join("\n")
            ));
        }
        out
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        // The logs outlive the lab, for a look after a failure.
        let keep = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/vm-e2e-logs");
        let _ = std::fs::remove_dir_all(&keep);
        if std::fs::create_dir_all(&keep).is_ok() {
            let mut logs: Vec<PathBuf> = std::fs::read_dir(self.path())
                .into_iter()
                .flatten()
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "log"))
                .collect();
            logs.push(self.ironic_dir.join("ironic.log"));
            for log in logs {
                if let Some(name) = log.file_name() {
                    let _ = std::fs::copy(&log, keep.join(name));
                }
            }
        }
        for name in &self.domains {
            let _ = Command::new("virsh")
                .args(["-c", "qemu:///system", "destroy", name])
                .output();
            let _ = Command::new("virsh")
                // A UEFI domain's NVRAM file must go with it, or undefine refuses.
                .args(["-c", "qemu:///system", "undefine", "--nvram", name])
                .output();
        }
        let _ = Command::new(stack_script())
            .args(["private-ironic", "stop"])
            .arg(&self.ironic_dir)
            .output();
    }
}

pub const OVMF_CODE: &str = "/usr/share/OVMF/OVMF_CODE_4M.fd";
pub const OVMF_VARS: &str = "/usr/share/OVMF/OVMF_VARS_4M.fd";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Firmware {
    Bios,
    Uefi,
}

pub struct VmSpec<'a> {
    pub name: &'a str,
    pub uuid: &'a str,
    pub mac: &'a str,
    pub memory_mib: u32,
    pub cpus: u32,
    pub disk_gib: u64,
    pub firmware: Firmware,
}

pub struct Vm {
    pub name: String,
    pub uuid: String,
    pub mac: String,
    pub disk: PathBuf,
    pub console: PathBuf,
}

impl Vm {
    pub fn console(&self) -> String {
        std::fs::read(&self.console)
            .map(|b| String::from_utf8_lossy(&b).replace('\r', ""))
            .unwrap_or_default()
    }

    pub fn state(&self) -> String {
        virsh(&["domstate", &self.name]).trim().to_owned()
    }

    /// The first sector of the VM's disk.
    pub fn first_sector(&self) -> Vec<u8> {
        use std::io::Read;
        let mut sector = vec![0u8; 512];
        std::fs::File::open(&self.disk)
            .and_then(|mut f| f.read_exact(&mut sector))
            .expect("read the VM's disk");
        sector
    }
}

/// Removes what a lab whose test process was killed (no `Drop`) left behind: its
/// namespace (`bmo<pid>-vm<n>`) and every process in it (libvirtd, qemu, sushy,
/// Ironic, bmo), and its VM definitions.
fn reap_dead_labs() {
    let out = Command::new("ip").args(["netns", "list"]).output();
    let list = out.map(|o| String::from_utf8_lossy(&o.stdout).into_owned());
    for name in list
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split_whitespace().next())
    {
        let Some(pid) = name
            .strip_prefix("bmo")
            .and_then(|rest| rest.split_once("-vm"))
            .map(|(pid, _)| pid)
        else {
            continue;
        };
        if Path::new("/proc").join(pid).exists() {
            continue;
        }
        if let Ok(o) = Command::new("ip").args(["netns", "pids", name]).output() {
            for p in String::from_utf8_lossy(&o.stdout).split_whitespace() {
                let _ = Command::new("kill").args(["-9", p]).status();
            }
        }
        let _ = Command::new("ip").args(["netns", "del", name]).status();
    }
    // With no libvirtd running, a bmo-vm-* definition left on disk belongs to a lab
    // that is gone, and would refuse the next define of that name.
    let libvirtd_runs = Command::new("pgrep")
        .args(["-x", "libvirtd"])
        .output()
        .is_ok_and(|o| o.status.success());
    if libvirtd_runs {
        return;
    }
    for dir in ["/etc/libvirt/qemu", "/var/run/libvirt/qemu"] {
        for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            if entry.file_name().to_string_lossy().starts_with("bmo-vm-") {
                let _ = std::fs::remove_file(entry.path());
            }
        }
    }
}

/// The storage pool sushy-emulator copies inserted ISOs into (`default`, its default
/// `SUSHY_EMULATOR_STORAGE_POOL`); transient, it goes with the lab's libvirtd.
fn create_storage_pool(dir: &Path) {
    std::fs::create_dir_all(dir).expect("pool directory");
    run(Command::new("chmod").arg("755").arg(dir));
    let target = dir.display().to_string();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    // libvirtd was just started: poll until it answers.
    loop {
        let out = Command::new("virsh")
            .args(["-c", "qemu:///system", "pool-create-as", "default", "dir"])
            .args(["--target", &target])
            .output()
            .expect("run virsh");
        if out.status.success() {
            return;
        }
        // A libvirtd killed with its lab left the pool's state in /var/run, and the
        // next one takes it up again: that pool's directory is gone, replace it.
        if String::from_utf8_lossy(&out.stderr).contains("already exists") {
            let _ = Command::new("virsh")
                .args(["-c", "qemu:///system", "pool-destroy", "default"])
                .output();
            continue;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "create the libvirt storage pool: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// sushy-emulator's settings for virtual media: its firmware for each boot mode (else
/// `UEFI` means a secure-boot OVMF that needs SMM, and the VM hangs) and its state.
fn virtual_media_settings(state_dir: &Path) -> String {
    format!(
        "SUSHY_EMULATOR_STORAGE_POOL = 'default'\nSUSHY_EMULATOR_STATE_DIR = '{}'\nSUSHY_EMULATOR_BOOT_LOADER_MAP = {{'UEFI': {{'x86_64': '{OVMF_CODE}'}}, 'Legacy': {{'x86_64': '/usr/share/seabios/bios-256k.bin'}}}}\nSUSHY_EMULATOR_SECURE_BOOT_DISABLED_NVRAM = '{OVMF_VARS}'\nSUSHY_EMULATOR_SECURE_BOOT_ENABLED_NVRAM = '/usr/share/OVMF/OVMF_VARS_4M.ms.fd'\n",
        state_dir.display()
    )
}

/// Ironic's settings for virtual media: the ESP image (GRUB) for the UEFI ISOs it
/// builds, and the agent's console on the kernel command line of those ISOs.
fn virtual_media_ironic_conf() -> Vec<String> {
    let esp = PathBuf::from(
        Stack::get()
            .var("BMO_ESP_DIR")
            .expect("BMO_ESP_DIR in the stack env (tests/env/esp-build)"),
    );
    vec![
        "[DEFAULT]".to_owned(),
        format!("esp_image = {}", esp.join("esp.img").display()),
        "[redfish]".to_owned(),
        "kernel_append_params = console=ttyS0,115200 ipa-insecure=1".to_owned(),
    ]
}

pub fn virsh(args: &[&str]) -> String {
    run(Command::new("virsh")
        .args(["-c", "qemu:///system"])
        .args(args))
}

fn stack_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/env/stack")
}

fn link_or_copy(from: &Path, to: &Path) {
    if std::fs::hard_link(from, to).is_err() {
        std::fs::copy(from, to)
            .unwrap_or_else(|e| panic!("cannot copy {} to {}: {e}", from.display(), to.display()));
    }
}
