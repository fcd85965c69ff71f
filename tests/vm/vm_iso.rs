//! The agent ISO bmo builds for `iso` PreprovisioningImages
//! (`controller::preprov_image::agent_iso`, written in Rust, no outside tool) boots
//! a real machine under both firmwares: a qemu VM (software emulation, no NIC) with
//! only that ISO as its CD-ROM reaches the agent ramdisk's /init, under SeaBIOS
//! (El Torito BIOS entry: ISOLINUX) and under OVMF (El Torito EFI entry: the ESP
//! image's GRUB, reading the ISO's grub.cfg). The kernel command line bmo wrote into
//! the ISO shows on the console, and the ramdisk on the ISO ends with the host's
//! network data archive.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use bmo::controller::preprov_image::{agent_iso, iso};
use bmo::netboot::cpio;

use crate::lab::{OVMF_CODE, OVMF_VARS};
use crate::support::netboot::{TempDir, spawn};
use crate::support::{Stack, unique_name};

const NETWORK_DATA: &str = r#"{"links":[],"networks":[],"services":[]}"#;

fn link(from: &Path, to: &Path) {
    if std::fs::hard_link(from, to).is_err() {
        std::fs::copy(from, to).unwrap_or_else(|e| panic!("copy {}: {e}", from.display()));
    }
}

/// Boots `iso` in a VM with `firmware` args until its console shows `marker` and
/// the ramdisk's init; returns the seconds it took.
async fn boot(dir: &Path, iso: &Path, name: &str, firmware: &[String], marker: &str) -> f64 {
    let console = dir.join(format!("{name}.console.log"));
    let start = Instant::now();
    let _vm = spawn(
        Command::new("qemu-system-x86_64")
            .args(["-machine", "pc", "-m", "2048", "-smp", "2"])
            .args([
                "-display",
                "none",
                "-monitor",
                "none",
                "-no-reboot",
                "-nic",
                "none",
            ])
            .arg("-serial")
            .arg(format!("file:{}", console.display()))
            .args(firmware)
            .arg("-cdrom")
            .arg(iso)
            .args(["-boot", "d"])
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
    );
    let deadline = start + Duration::from_secs(600);
    loop {
        let text = std::fs::read(&console)
            .map(|b| String::from_utf8_lossy(&b).replace('\r', ""))
            .unwrap_or_default();
        let cmdline = text
            .lines()
            .any(|l| l.contains("Command line:") && l.contains(marker));
        if cmdline && text.contains("ipa-ramdisk: init started") {
            return start.elapsed().as_secs_f64();
        }
        let tail: Vec<&str> = text.lines().rev().take(30).collect();
        assert!(
            Instant::now() < deadline,
            "{name}: no agent ramdisk booted from bmo's ISO; console:\n{}",
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "72 s past the vm binary's CI budget; vm_servicing boots bmo's ISO through Ironic under UEFI in CI; run with --include-ignored"]
async fn bmo_built_agent_iso_boots_under_bios_and_uefi() {
    let _alone = crate::support::exclusive("vm_iso");
    let stack = Stack::get();
    let dir = TempDir::new("vm-iso");
    let images = dir.path().join("images");
    std::fs::create_dir_all(&images).expect("images dir");
    let ipa = std::path::PathBuf::from(stack.var("BMO_IPA_DIR").expect("BMO_IPA_DIR"));
    let esp = std::path::PathBuf::from(stack.var("BMO_ESP_DIR").expect("BMO_ESP_DIR"));
    for (from, name) in [
        (
            ipa.join("ironic-python-agent.kernel"),
            "ironic-python-agent.kernel",
        ),
        (
            ipa.join("ironic-python-agent.initramfs"),
            "ironic-python-agent.initramfs",
        ),
        (esp.join("esp.img"), agent_iso::ESP_IMAGE),
        (
            "/usr/lib/ISOLINUX/isolinux.bin".into(),
            agent_iso::ISOLINUX_BIN,
        ),
        (
            "/usr/lib/syslinux/modules/bios/ldlinux.c32".into(),
            agent_iso::LDLINUX_C32,
        ),
    ] {
        link(&from, &images.join(name));
    }
    let archive = cpio::archive(&[cpio::Entry {
        path: bmo::controller::preprov_image::build::NETWORK_DATA_PATH.into(),
        data: NETWORK_DATA.as_bytes().to_vec(),
    }]);
    let marker = unique_name("bmo-iso-marker");
    let params = format!("console=ttyS0,115200 ipa-insecure=1 {marker}=1");
    let iso_path = dir.path().join("agent.iso");
    let t = Instant::now();
    agent_iso::write(&iso_path, &images, &archive, &params).expect("write the agent ISO");
    let built = t.elapsed().as_secs_f64();

    // What is on the ISO: the kernel, the ramdisk with the archive after it.
    let image = std::fs::read(&iso_path).expect("read the ISO");
    let ramdisk = std::fs::read(images.join("ironic-python-agent.initramfs")).expect("ramdisk");
    let initrd = iso::find(&image, "INITRD").expect("INITRD on the ISO");
    assert!(
        initrd.starts_with(&ramdisk),
        "the ISO's ramdisk starts with the agent's"
    );
    assert!(
        initrd.ends_with(&archive),
        "and ends with the host's archive"
    );
    let files = cpio::files(&initrd[initrd.len() - archive.len()..]).expect("newc archive");
    assert_eq!(files[0].data, NETWORK_DATA.as_bytes());
    drop(image);

    let bios = boot(dir.path(), &iso_path, "bios", &[], &marker).await;
    let vars = dir.path().join("OVMF_VARS.fd");
    std::fs::copy(OVMF_VARS, &vars).expect("copy OVMF vars");
    let uefi_firmware = [
        "-drive".to_owned(),
        format!("if=pflash,format=raw,readonly=on,file={OVMF_CODE}"),
        "-drive".to_owned(),
        format!("if=pflash,format=raw,file={}", vars.display()),
    ];
    let uefi = boot(dir.path(), &iso_path, "uefi", &uefi_firmware, &marker).await;
    println!(
        "\nvm_iso: ISO of {} MiB written in {built:.1} s; agent /init reached in {bios:.1} s (BIOS), {uefi:.1} s (UEFI)",
        std::fs::metadata(&iso_path).map_or(0, |m| m.len() >> 20)
    );
}
