//! The `iso` PreprovisioningImage bmo builds: an ISO 9660 image ([`super::iso`])
//! holding bmo's IPA kernel and ramdisk, the ramdisk followed by the host's cpio
//! archive (its network data, as in the `initrd` format), and the boot loaders found
//! next to the agent in `BMO_IMAGES_DIR`:
//! - UEFI: `esp.img`, a FAT EFI system partition image whose `EFI/BOOT/BOOTX64.EFI`
//!   (a GRUB) reads `/EFI/BOOT/grub.cfg` from the medium, the image Ironic's
//!   `[DEFAULT] esp_image` names; the ISO carries that grub.cfg;
//! - BIOS: ISOLINUX (`isolinux.bin` and its `ldlinux.c32`, Debian's `isolinux` and
//!   `syslinux-common`), with an `isolinux.cfg`.
//!
//! Either suffices; with both the image boots under both firmwares. The kernel
//! command line is bmo's setting (`BMO_PREPROV_IMAGE_ISO_KERNEL_PARAMS`): an ISO
//! booted from virtual media gets no parameters from Ironic, so it must name Ironic
//! (`ipa-api-url=`) itself.

use std::io;
use std::path::{Path, PathBuf};

use super::iso::{self, Boot, Content, IsoFile, Plan};
use crate::netboot::cpio;
use crate::netboot::deploy_images::{DEFAULT_KERNEL, DEFAULT_RAMDISK};

/// The loader files looked for in the images directory.
pub const ESP_IMAGE: &str = "esp.img";
pub const ISOLINUX_BIN: &str = "isolinux.bin";
pub const LDLINUX_C32: &str = "ldlinux.c32";

/// The ISO's volume id (also the label a booted agent sees).
pub const VOLUME_ID: &str = "IPA_BMO";

/// Which boot loaders the images directory holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Loaders {
    pub uefi: bool,
    pub bios: bool,
}

impl Loaders {
    /// Looks in `images_dir`.
    pub fn find(images_dir: &Path) -> Loaders {
        Loaders {
            uefi: images_dir.join(ESP_IMAGE).is_file(),
            bios: images_dir.join(ISOLINUX_BIN).is_file() && images_dir.join(LDLINUX_C32).is_file(),
        }
    }
}

fn file_content(path: PathBuf) -> io::Result<Content> {
    let len = std::fs::metadata(&path)?.len();
    Ok(Content::File { path, len })
}

/// GRUB's configuration: boot the agent at once.
pub fn grub_cfg(kernel_params: &str) -> String {
    format!(
        "set default=0\nset timeout=0\nmenuentry \"ironic-python-agent\" {{\n  linux /VMLINUZ {kernel_params}\n  initrd /INITRD\n}}\n"
    )
}

/// ISOLINUX's configuration: boot the agent at once.
pub fn isolinux_cfg(kernel_params: &str) -> String {
    format!(
        "DEFAULT agent\nPROMPT 0\nTIMEOUT 0\nLABEL agent\n  KERNEL /VMLINUZ\n  APPEND initrd=/INITRD {kernel_params}\n"
    )
}

/// Lays out the agent ISO from the files in `images_dir` and the host's `archive`
/// (appended to the ramdisk, 4-byte aligned). Reads the BIOS loader (a few KiB);
/// the kernel and ramdisk are read when the plan is written.
pub fn plan(images_dir: &Path, archive: &[u8], kernel_params: &str) -> io::Result<Plan> {
    let loaders = Loaders::find(images_dir);
    let ramdisk = file_content(images_dir.join(DEFAULT_RAMDISK))?;
    let padding = cpio::padding_after(ramdisk_len(&ramdisk));
    let mut tail = vec![0u8; usize::try_from(padding).unwrap_or(0)];
    tail.extend_from_slice(archive);
    let mut files = vec![
        IsoFile::new(
            "VMLINUZ",
            vec![file_content(images_dir.join(DEFAULT_KERNEL))?],
        ),
        IsoFile::new("INITRD", vec![ramdisk, Content::Bytes(tail)]),
    ];
    let mut boot = Boot::default();
    if loaders.uefi {
        files.push(IsoFile::new(
            "EFI/BOOT/GRUB.CFG",
            vec![Content::Bytes(grub_cfg(kernel_params).into_bytes())],
        ));
        files.push(IsoFile::new(
            "BOOT/ESP.IMG",
            vec![file_content(images_dir.join(ESP_IMAGE))?],
        ));
        boot.efi = Some("BOOT/ESP.IMG".into());
    }
    if loaders.bios {
        let loader = std::fs::read(images_dir.join(ISOLINUX_BIN))?;
        files.push(IsoFile::new(
            "ISOLINUX/ISOLINUX.BIN",
            vec![Content::Bytes(loader)],
        ));
        files.push(IsoFile::new(
            "ISOLINUX/LDLINUX.C32",
            vec![file_content(images_dir.join(LDLINUX_C32))?],
        ));
        files.push(IsoFile::new(
            "ISOLINUX/ISOLINUX.CFG",
            vec![Content::Bytes(isolinux_cfg(kernel_params).into_bytes())],
        ));
        boot.bios = Some("ISOLINUX/ISOLINUX.BIN".into());
    }
    iso::plan(files, &boot).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))
}

fn ramdisk_len(content: &Content) -> u64 {
    match content {
        Content::File { len, .. } => *len,
        Content::Bytes(b) => b.len() as u64,
    }
}

/// Writes the agent ISO to `path` (through a temporary file beside it, renamed when
/// complete, so the HTTP server never serves half an image).
pub fn write(
    path: &Path,
    images_dir: &Path,
    archive: &[u8],
    kernel_params: &str,
) -> io::Result<()> {
    let plan = plan(images_dir, archive, kernel_params)?;
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let partial = path.with_extension("iso.partial");
    let unix = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let written = std::fs::File::create(&partial).and_then(|f| {
        let mut out = io::BufWriter::with_capacity(1 << 20, f);
        plan.write(&mut out, VOLUME_ID, unix)?;
        out.into_inner()
            .map_err(io::IntoInnerError::into_error)?
            .sync_all()
    });
    match written {
        Ok(()) => std::fs::rename(&partial, path),
        Err(e) => {
            let _ = std::fs::remove_file(&partial);
            Err(e)
        }
    }
}
