//! bmo's HTTP boot server against curl, server and client in their own network
//! namespaces: whole files, HEAD, ranges, conditional requests, the iPXE scripts,
//! the embedded loaders, the lease table, and refusal of paths outside the roots.

// Tests and benchmarks may panic on what they set up themselves.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod netboot_common;

use std::process::Output;
use std::time::Duration;

use bmo::netboot::leases::LeaseTable;
use netboot_common::{TempDir, TestNet, config, require, write_random};

async fn curl(ns: &str, args: &[&str]) -> Output {
    tokio::process::Command::new("ip")
        .args(["netns", "exec", ns, "curl", "-sS", "--max-time", "30"])
        .args(args)
        .output()
        .await
        .expect("run curl")
}

/// `(status, headers, body)` of one request.
async fn fetch(ns: &str, args: &[&str]) -> (u16, String, Vec<u8>) {
    let dir = TempDir::new("curl");
    let headers = dir.path().join("h");
    let mut all = vec!["-D", headers.to_str().unwrap(), "-o", "-"];
    all.extend_from_slice(args);
    let out = curl(ns, &all).await;
    assert!(
        out.status.success(),
        "curl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let h = std::fs::read_to_string(&headers).unwrap();
    let status = h.split_whitespace().nth(1).unwrap().parse().unwrap();
    (status, h.to_ascii_lowercase(), out.stdout)
}

fn header<'a>(headers: &'a str, name: &str) -> Option<&'a str> {
    headers
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{name}: ")).map(str::trim))
}

#[test]
fn http_serves_files_scripts_and_refuses_traversal() {
    require(&["curl", "ip"]);
    let net = TestNet::new(true);
    let dir = TempDir::new("http");
    let cfg = config(dir.path());
    write_random(
        &cfg.images_dir.join("ironic-python-agent.initramfs"),
        8 << 20,
        7,
    );
    std::fs::write(dir.path().join("secret"), b"outside").unwrap();
    std::os::unix::fs::symlink(dir.path().join("secret"), cfg.images_dir.join("escape")).unwrap();
    std::fs::create_dir_all(cfg.http_root.join("pxelinux.cfg")).unwrap();
    std::fs::write(
        cfg.http_root.join("pxelinux.cfg/52-54-00-00-00-01"),
        b"#!ipxe\necho node\n",
    )
    .unwrap();
    let ramdisk = std::fs::read(cfg.images_dir.join("ironic-python-agent.initramfs")).unwrap();
    let client = net.client.name.clone();
    let server_ip = net.server_ip;
    let http_root = cfg.http_root.clone();

    net.server.block_on(move || async move {
        let nb = bmo::netboot::start(&cfg, LeaseTable::in_memory())
            .await
            .expect("start");
        let base = format!("http://{server_ip}:{}", nb.http_addr.unwrap().port());
        let url = |p: &str| format!("{base}{p}");

        // Whole file, byte for byte, with validators.
        let (status, h, body) =
            fetch(&client, &[&url("/images/ironic-python-agent.initramfs")]).await;
        assert_eq!(status, 200);
        assert!(body == ramdisk, "ramdisk differs");
        let etag = header(&h, "etag").expect("etag").to_owned();
        assert!(header(&h, "last-modified").is_some());
        assert_eq!(header(&h, "accept-ranges"), Some("bytes"));

        // HEAD: headers, no body.
        let (status, h, body) = fetch(
            &client,
            &["-I", &url("/images/ironic-python-agent.initramfs")],
        )
        .await;
        assert_eq!(status, 200);
        assert_eq!(header(&h, "content-length"), Some("8388608"));
        assert!(body.is_empty() || String::from_utf8_lossy(&body).starts_with("HTTP/"));

        // Ranges.
        let (status, h, body) = fetch(
            &client,
            &[
                "-r",
                "100-199",
                &url("/images/ironic-python-agent.initramfs"),
            ],
        )
        .await;
        assert_eq!(status, 206);
        assert_eq!(body, &ramdisk[100..200]);
        assert_eq!(header(&h, "content-range"), Some("bytes 100-199/8388608"));
        let (status, _, body) = fetch(
            &client,
            &["-r", "-10", &url("/images/ironic-python-agent.initramfs")],
        )
        .await;
        assert_eq!((status, &body[..]), (206, &ramdisk[ramdisk.len() - 10..]));
        let (status, h, _) = fetch(
            &client,
            &[
                "-r",
                "9000000-",
                &url("/images/ironic-python-agent.initramfs"),
            ],
        )
        .await;
        assert_eq!(status, 416);
        assert_eq!(header(&h, "content-range"), Some("bytes */8388608"));
        // A stale If-Range gets the whole file.
        let (status, _, body) = fetch(
            &client,
            &[
                "-r",
                "0-9",
                "-H",
                "If-Range: \"stale\"",
                &url("/images/ironic-python-agent.initramfs"),
            ],
        )
        .await;
        assert_eq!((status, body.len()), (200, ramdisk.len()));

        // Conditional requests.
        let inm = format!("If-None-Match: {etag}");
        let (status, _, body) = fetch(
            &client,
            &["-H", &inm, &url("/images/ironic-python-agent.initramfs")],
        )
        .await;
        assert_eq!((status, body.len()), (304, 0));

        // Traversal, raw and percent-encoded, and a symlink out of the root.
        for p in [
            "/images/../secret",
            "/images/%2e%2e/secret",
            "/../secret",
            "/images/escape",
        ] {
            let (status, _, body) = fetch(&client, &["--path-as-is", &url(p)]).await;
            assert_eq!(status, 403, "{p}: {}", String::from_utf8_lossy(&body));
        }
        let (status, _, _) = fetch(&client, &[&url("/images/missing")]).await;
        assert_eq!(status, 404);

        // iPXE scripts: bmo's boot.ipxe until Ironic writes one, the fallback
        // inspection script pointing at this server, Ironic's per-MAC configs.
        let (status, _, body) = fetch(&client, &[&url("/boot.ipxe")]).await;
        assert_eq!(status, 200);
        let text = String::from_utf8(body).unwrap();
        assert!(
            text.starts_with("#!ipxe")
                && text.contains("pxelinux.cfg/${net${idx}/mac:hexhyp}")
                && text.contains("inspector.ipxe"),
            "{text}"
        );
        std::fs::write(
            http_root.join("boot.ipxe"),
            b"#!ipxe\n# written by Ironic\n",
        )
        .unwrap();
        let (_, _, body) = fetch(&client, &[&url("/boot.ipxe")]).await;
        assert_eq!(body, b"#!ipxe\n# written by Ironic\n");
        let (_, _, body) = fetch(&client, &[&url("/inspector.ipxe")]).await;
        let text = String::from_utf8(body).unwrap();
        assert!(
            text.contains(&format!(
                "kernel --timeout 60000 {base}/images/ironic-python-agent.kernel"
            )),
            "{text}"
        );
        assert!(
            text.contains(&format!("{base}/images/ironic-python-agent.initramfs")),
            "{text}"
        );
        let (status, _, body) = fetch(&client, &[&url("/pxelinux.cfg/52-54-00-00-00-01")]).await;
        assert_eq!((status, &body[..]), (200, &b"#!ipxe\necho node\n"[..]));

        // Embedded loaders for UEFI HTTP boot.
        let (status, _, body) = fetch(&client, &[&url("/ipxe/undionly.kpxe")]).await;
        assert_eq!(status, 200);
        assert!(
            body == std::fs::read("/usr/lib/ipxe/undionly.kpxe").unwrap(),
            "undionly.kpxe differs from Debian's"
        );
        let (status, h, _) = fetch(&client, &["-I", &url("/ipxe/snponly-x86_64.efi")]).await;
        assert_eq!(status, 200);
        let len: u64 = header(&h, "content-length").unwrap().parse().unwrap();
        assert_eq!(
            len,
            std::fs::metadata("/usr/lib/ipxe/snponly.efi")
                .unwrap()
                .len()
        );

        // Health and the lease table.
        let (status, _, body) = fetch(&client, &[&url("/healthz")]).await;
        assert_eq!((status, &body[..]), (200, &b"ok"[..]));
        let (status, _, body) = fetch(&client, &[&url("/bmo/v1/leases")]).await;
        assert_eq!(status, 200);
        assert_eq!(
            serde_json::from_slice::<serde_json::Value>(&body).unwrap(),
            serde_json::json!([])
        );

        // Writes are not accepted.
        let (status, _, _) =
            fetch(&client, &["-X", "PUT", "--data", "x", &url("/images/new")]).await;
        assert_eq!(status, 405);
        drop(nb);
        tokio::time::sleep(Duration::from_millis(10)).await;
    });
}
