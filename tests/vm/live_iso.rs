//! A live ISO for the VM tests (upstream's `live_iso`): the test OS's kernel and
//! busybox initramfs (tests/env/os-image-build) in an ISO written by bmo's own ISO
//! writer (`controller::preprov_image::agent_iso`, the one of `iso`
//! PreprovisioningImages), with a unique marker on its kernel command line; and a
//! digest of a VM's disk to show that booting it wrote nothing.

use std::io::{Read, Seek, SeekFrom};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use bmo::controller::preprov_image::agent_iso;
use bmo::netboot::deploy_images::{DEFAULT_KERNEL, DEFAULT_RAMDISK};

use crate::lab::{HTTP_PORT, Lab, PROVISIONING_IP};
use crate::support::{Stack, unique_name};

/// Writes the live ISO into the lab's images directory (served by bmo's HTTP server
/// at /images/); its URL and the marker on its kernel command line.
pub fn serve_live_iso(lab: &Lab) -> (String, String) {
    let stack = Stack::get();
    let os_dir = PathBuf::from(stack.var("BMO_TEST_OS_DIR").expect("BMO_TEST_OS_DIR"));
    let esp = PathBuf::from(stack.var("BMO_ESP_DIR").expect("BMO_ESP_DIR"));
    // The writer takes its files by the agent's names from one directory.
    let src = lab.path().join("live-iso-src");
    std::fs::create_dir_all(&src).expect("live ISO source directory");
    for (from, name) in [
        (os_dir.join("vmlinuz"), DEFAULT_KERNEL),
        (os_dir.join("initrd.gz"), DEFAULT_RAMDISK),
        (esp.join("esp.img"), agent_iso::ESP_IMAGE),
    ] {
        std::fs::copy(&from, src.join(name))
            .unwrap_or_else(|e| panic!("copy {}: {e}", from.display()));
    }
    let marker = unique_name("bmo-live-iso-marker");
    let params = format!("console=ttyS0,115200 panic=10 {marker}");
    let name = "bmo-live.iso";
    // No archive: the test OS needs nothing appended to its initramfs.
    agent_iso::write(&lab.images.join(name), &src, &[], &params).expect("write the live ISO");
    (
        format!("http://{PROVISIONING_IP}:{HTTP_PORT}/images/{name}"),
        marker,
    )
}

/// SHA-256 over the data extents of a sparse disk image, each with its offset: a
/// 5 GiB image holding a few MiB hashes in a moment, and any write changes it.
pub fn disk_digest(path: &Path) -> String {
    let mut file = std::fs::File::open(path).expect("open the VM's disk");
    let fd = file.as_raw_fd();
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    let mut buf = vec![0u8; 1 << 20];
    let mut pos: libc::off_t = 0;
    loop {
        // SAFETY: lseek on a descriptor this function owns; no memory is passed.
        let data = unsafe { libc::lseek(fd, pos, libc::SEEK_DATA) };
        if data < 0 {
            // ENXIO: no data after `pos`.
            break;
        }
        // SAFETY: as above.
        let hole = unsafe { libc::lseek(fd, data, libc::SEEK_HOLE) };
        assert!(hole > data, "SEEK_HOLE after {data} on {}", path.display());
        ctx.update(&data.to_le_bytes());
        ctx.update(&hole.to_le_bytes());
        file.seek(SeekFrom::Start(data as u64)).expect("seek");
        let mut left = (hole - data) as usize;
        while left > 0 {
            let n = left.min(buf.len());
            file.read_exact(&mut buf[..n]).expect("read the VM's disk");
            ctx.update(&buf[..n]);
            left -= n;
        }
        pos = hole;
    }
    ctx.finish()
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}
