//! A qemu-system-x86_64 VM (software emulation) network-boots through bmo: its
//! iPXE ROM gets a lease and the iPXE script URL from bmo's DHCP, fetches
//! `boot.ipxe` and the fallback `inspector.ipxe` over HTTP, loads the kernel over
//! TFTP and a gzip'd busybox initramfs (built here) over HTTP, and the booted
//! system prints a marker on its serial console. Everything runs inside one
//! network namespace holding a bridge and the VM's tap device.

use std::process::{Command, Stdio};
use std::time::Duration;

use bmo::netboot::config::DhcpMode;
use bmo::netboot::leases::{LeaseState, LeaseTable};
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::support::netboot::{Netns, TempDir, config, require, run};

const MARKER: &str = "BMO-NETBOOT-REACHED-USERSPACE";
const VM_MAC: &str = "52:54:00:42:00:01";

fn build_initramfs(dir: &std::path::Path, out: &std::path::Path) {
    let root = dir.join("initramfs");
    std::fs::create_dir_all(root.join("bin")).unwrap();
    std::fs::copy("/bin/busybox", root.join("bin/busybox")).expect("busybox-static");
    let init = format!(
        "#!/bin/busybox sh\n/bin/busybox mkdir -p /proc\n/bin/busybox mount -t proc proc /proc\necho {MARKER} $(/bin/busybox cat /proc/cmdline | /bin/busybox grep -o 'BOOTIF=[^ ]*')\n/bin/busybox poweroff -f\n"
    );
    std::fs::write(root.join("init"), init).unwrap();
    run(Command::new("chmod").args(["755", root.join("init").to_str().unwrap()]));
    run(Command::new("sh").current_dir(&root).args([
        "-c",
        &format!(
            "find . | cpio -o -H newc --quiet | gzip -1 > {}",
            out.display()
        ),
    ]));
}

fn kernel() -> std::path::PathBuf {
    let mut kernels: Vec<_> = std::fs::read_dir("/boot")
        .expect("/boot")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("vmlinuz-"))
        })
        .collect();
    kernels.sort();
    kernels
        .pop()
        .expect("a kernel in /boot (Debian linux-image-amd64)")
}

#[test]
fn qemu_vm_network_boots_through_bmo() {
    let _shared = crate::support::shared();
    require(&["qemu-system-x86_64", "cpio", "busybox", "ip"]);
    let ns = Netns::new("vm");
    let ip = |args: &[&str]| run(Command::new("ip").arg("-n").arg(&ns.name).args(args));
    ip(&["link", "add", "br0", "type", "bridge"]);
    ip(&["addr", "add", "10.77.0.1/24", "dev", "br0"]);
    ip(&["link", "set", "br0", "up"]);
    ip(&["tuntap", "add", "dev", "tap0", "mode", "tap"]);
    ip(&["link", "set", "tap0", "master", "br0"]);
    ip(&["link", "set", "tap0", "up"]);

    let dir = TempDir::new("qemu");
    let mut cfg = config(dir.path());
    std::fs::copy(kernel(), cfg.images_dir.join("vmlinuz")).unwrap();
    build_initramfs(dir.path(), &cfg.images_dir.join("initrd.gz"));
    cfg.provisioning.provisioning_interface = Some("br0".into());
    cfg.http_port = 8080;
    cfg.tftp = true;
    cfg.dhcp_mode = DhcpMode::Full;
    cfg.dhcp_range = Some("10.77.0.100,10.77.0.120".parse().unwrap());
    // Kernel over TFTP, initramfs over HTTP: both of bmo's file services.
    cfg.deploy_kernel_url = Some("tftp://10.77.0.1/images/vmlinuz".parse().unwrap());
    cfg.deploy_ramdisk_url = Some("http://10.77.0.1:8080/images/initrd.gz".parse().unwrap());
    cfg.ipxe_kernel_params = "console=ttyS0 quiet panic=-1".into();
    let ns_name = ns.name.clone();
    let log_path = dir.path().join("serial.log");

    ns.block_on(move || async move {
        let leases = LeaseTable::in_memory();
        let _nb = bmo::netboot::start(&cfg, leases.clone())
            .await
            .expect("start");
        let mut vm = tokio::process::Command::new("ip")
            .args([
                "netns",
                "exec",
                &ns_name,
                "qemu-system-x86_64",
                "-machine",
                "accel=tcg",
                "-m",
                "512",
                "-nographic",
                "-no-reboot",
            ])
            .args(["-netdev", "tap,id=n0,ifname=tap0,script=no,downscript=no"])
            .args(["-device", &format!("virtio-net-pci,netdev=n0,mac={VM_MAC}")])
            .args(["-boot", "n"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("start qemu");
        let mut lines = BufReader::new(vm.stdout.take().unwrap()).lines();
        let mut log = String::new();
        let found = tokio::time::timeout(Duration::from_secs(300), async {
            while let Ok(Some(line)) = lines.next_line().await {
                log.push_str(&line);
                log.push('\n');
                if line.contains(MARKER) {
                    return Some(line);
                }
            }
            None
        })
        .await;
        std::fs::write(&log_path, &log).ok();
        let line = match found {
            Ok(Some(l)) => l,
            Ok(None) => panic!("qemu exited without the marker; serial console:\n{log}"),
            Err(_) => panic!("no marker within 300 s; serial console:\n{log}"),
        };
        assert!(
            line.contains(&format!("BOOTIF={VM_MAC}")),
            "the fallback script passed BOOTIF: {line}"
        );
        let lease = leases
            .get(&VM_MAC.parse().unwrap())
            .expect("the VM's lease");
        assert_eq!(lease.state, LeaseState::Bound);
        assert!(lease.ipxe, "the VM's iPXE ROM identified itself");
        let status = tokio::time::timeout(Duration::from_secs(60), vm.wait()).await;
        assert!(
            matches!(status, Ok(Ok(_))),
            "qemu did not power off by itself"
        );
    });
}
