//! bmo's TFTP server against tftp-hpa, curl and atftp, server and clients in their
//! own network namespaces: the embedded iPXE loaders and a 64 MiB ramdisk byte for
//! byte, with and without blksize, windowsize (RFC 7440) with atftp, path traversal
//! and writes refused.

// Tests and benchmarks may panic on what they set up themselves.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod netboot_common;

use std::path::Path;
use std::process::Output;

use bmo::netboot::leases::LeaseTable;
use netboot_common::{TempDir, TestNet, config, require, write_random};

async fn in_client(ns: &str, program: &str, args: &[&str]) -> Output {
    tokio::process::Command::new("ip")
        .args(["netns", "exec", ns, program])
        .args(args)
        .output()
        .await
        .expect("run TFTP client")
}

fn assert_same(got: &Path, want: &Path) {
    let (g, w) = (
        std::fs::read(got).unwrap_or_default(),
        std::fs::read(want).expect("want"),
    );
    assert!(
        g.len() == w.len() && g == w,
        "{} ({} bytes) differs from {} ({} bytes)",
        got.display(),
        g.len(),
        want.display(),
        w.len()
    );
}

fn ok(out: &Output, what: &str) {
    assert!(
        out.status.success(),
        "{what} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Starts bmo's TFTP (and HTTP) in the server namespace and runs `body` there.
fn with_server<F, Fut>(files: impl FnOnce(&bmo::netboot::config::NetbootConfig), body: F)
where
    F: FnOnce(String, TempDir) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()>,
{
    require(&["tftp", "curl", "atftp", "ip"]);
    let net = TestNet::new(true);
    let dir = TempDir::new("tftp");
    let mut cfg = config(dir.path());
    cfg.tftp = true;
    files(&cfg);
    let client = net.client.name.clone();
    net.server.block_on(move || async move {
        let nb = bmo::netboot::start(&cfg, LeaseTable::in_memory())
            .await
            .expect("start");
        body(client, dir).await;
        drop(nb);
    });
}

#[test]
fn tftp_serves_each_loader_to_tftp_hpa_and_curl() {
    with_server(
        |_| {},
        |client, dir| async move {
            for (name, debian) in [
                ("undionly.kpxe", "undionly.kpxe"),
                ("snponly-x86_64.efi", "snponly.efi"),
                ("ipxe-x86_64.efi", "ipxe.efi"),
            ] {
                let want = Path::new("/usr/lib/ipxe").join(debian);
                let out_hpa = dir.path().join(format!("hpa-{name}"));
                let o = in_client(
                    &client,
                    "tftp",
                    &[
                        "-m",
                        "binary",
                        "10.77.0.1",
                        "-c",
                        "get",
                        name,
                        out_hpa.to_str().unwrap(),
                    ],
                )
                .await;
                ok(&o, "tftp-hpa get");
                assert_same(&out_hpa, &want);
                for blksize in [None, Some("1468")] {
                    let out = dir.path().join(format!("curl-{name}-{blksize:?}"));
                    let mut args = vec!["-sS", "--max-time", "60", "-o", out.to_str().unwrap()];
                    if let Some(b) = blksize {
                        args.extend(["--tftp-blksize", b]);
                    }
                    let url = format!("tftp://10.77.0.1/{name}");
                    args.push(&url);
                    let o = in_client(&client, "curl", &args).await;
                    ok(&o, "curl tftp");
                    assert_same(&out, &want);
                }
            }
        },
    );
}

#[test]
fn tftp_streams_a_64_mib_ramdisk_with_every_client_and_option() {
    let size = 64 << 20;
    with_server(
        |cfg| write_random(&cfg.images_dir.join("ramdisk.img"), size, 64),
        move |client, dir| async move {
            let want = dir.path().join("images/ramdisk.img");
            // tftp-hpa: 512-byte blocks, so the block number rolls over twice.
            let got = dir.path().join("hpa.img");
            let o = in_client(
                &client,
                "tftp",
                &[
                    "-m",
                    "binary",
                    "10.77.0.1",
                    "-c",
                    "get",
                    "images/ramdisk.img",
                    got.to_str().unwrap(),
                ],
            )
            .await;
            ok(&o, "tftp-hpa get 64 MiB");
            assert_same(&got, &want);
            std::fs::remove_file(&got).unwrap();

            // curl with blksize (RFC 2348) and tsize.
            let got = dir.path().join("curl.img");
            let o = in_client(
                &client,
                "curl",
                &[
                    "-sS",
                    "--max-time",
                    "120",
                    "--tftp-blksize",
                    "1468",
                    "-o",
                    got.to_str().unwrap(),
                    "tftp://10.77.0.1/images/ramdisk.img",
                ],
            )
            .await;
            ok(&o, "curl 64 MiB blksize 1468");
            assert_same(&got, &want);
            std::fs::remove_file(&got).unwrap();

            // atftp offering blksize, tsize and windowsize (RFC 7440): the server
            // must acknowledge the window, so the client ACKs once per 16 blocks.
            let got = dir.path().join("atftp.img");
            let o = in_client(
                &client,
                "atftp",
                &[
                    "--option",
                    "blksize 1468",
                    "--option",
                    "windowsize 16",
                    "--option",
                    "tsize 0",
                    "--trace",
                    "-g",
                    "-r",
                    "images/ramdisk.img",
                    "-l",
                    got.to_str().unwrap(),
                    "10.77.0.1",
                ],
            )
            .await;
            ok(&o, "atftp 64 MiB windowsize 16");
            assert_same(&got, &want);
            let trace = format!(
                "{}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            );
            assert!(
                trace.contains("windowsize") && trace.contains("OACK"),
                "no windowsize in the OACK:\n{}",
                &trace[..trace.len().min(2000)]
            );
            let acks = trace.lines().filter(|l| l.contains("sent ACK")).count();
            let blocks = size.div_ceil(1468);
            assert!(
                acks > 0 && acks < blocks / 8,
                "{acks} ACKs for {blocks} blocks: window not used"
            );
        },
    );
}

#[test]
fn tftp_refuses_traversal_writes_and_missing_files() {
    with_server(
        |cfg| {
            std::fs::write(cfg.tftp_root.join("pxelinux.0"), b"inside").unwrap();
            std::fs::write(cfg.tftp_root.parent().unwrap().join("secret"), b"outside").unwrap();
        },
        |client, dir| async move {
            let got = dir.path().join("in");
            let o = in_client(
                &client,
                "tftp",
                &[
                    "-m",
                    "binary",
                    "10.77.0.1",
                    "-c",
                    "get",
                    "pxelinux.0",
                    got.to_str().unwrap(),
                ],
            )
            .await;
            ok(&o, "tftp-hpa get from tftp_root");
            assert_eq!(std::fs::read(&got).unwrap(), b"inside");
            for path in ["../secret", "images/../../secret", "/../secret"] {
                let got = dir.path().join("out");
                let o = in_client(
                    &client,
                    "tftp",
                    &[
                        "-m",
                        "binary",
                        "10.77.0.1",
                        "-c",
                        "get",
                        path,
                        got.to_str().unwrap(),
                    ],
                )
                .await;
                let text = format!(
                    "{}{}",
                    String::from_utf8_lossy(&o.stdout),
                    String::from_utf8_lossy(&o.stderr)
                );
                assert!(
                    text.contains("Error code 2") && text.contains("outside"),
                    "{path}: {text}"
                );
                assert!(
                    std::fs::read(&got).map(|b| b.is_empty()).unwrap_or(true),
                    "{path}: content leaked"
                );
            }
            let o = in_client(
                &client,
                "tftp",
                &[
                    "-m",
                    "binary",
                    "10.77.0.1",
                    "-c",
                    "get",
                    "nope",
                    dir.path().join("n").to_str().unwrap(),
                ],
            )
            .await;
            let text = String::from_utf8_lossy(&o.stderr).into_owned()
                + &String::from_utf8_lossy(&o.stdout);
            assert!(text.contains("Error code 1"), "{text}");
            let o = in_client(
                &client,
                "tftp",
                &[
                    "-m",
                    "binary",
                    "10.77.0.1",
                    "-c",
                    "put",
                    got.to_str().unwrap(),
                    "new",
                ],
            )
            .await;
            let text = String::from_utf8_lossy(&o.stderr).into_owned()
                + &String::from_utf8_lossy(&o.stdout);
            assert!(
                text.contains("Error code 2") && text.contains("read-only"),
                "{text}"
            );
            assert!(!dir.path().join("tftpboot/new").exists());
        },
    );
}
