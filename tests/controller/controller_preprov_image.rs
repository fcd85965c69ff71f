//! PreprovisioningImages end to end, against the stack's kube-apiserver and Ironic:
//! with `BMO_BUILD_PREPROV_IMAGE` a host gets an image and its node boots the image's
//! ramdisk; with `BMO_PREPROV_IMAGE_INITRD` bmo builds that ramdisk itself (its IPA
//! ramdisk plus a cpio archive of the host's network data) and serves it over its
//! HTTP server, on loopback here.

use std::sync::Arc;
use std::time::Duration;

use bmo::api::{BareMetalHost, PreprovisioningImage};
use bmo::controller::host::{Context, ControllerSettings};
use bmo::netboot::cpio;
use bmo::netboot::host_ramdisks::RamdiskServer;
use bmo::netboot::leases::LeaseTable;
use bmo::provisioner::{DeployRamdisk, IronicProvisioner, ProvisionerSettings};
use k8s_openapi::api::core::v1::Secret;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::json;

use crate::support::netboot::{self, TempDir};
use crate::support::{Stack, create_bmc_secret, eventually, new_namespace, unique_mac};

/// A stand-in IPA ramdisk whose length is not a multiple of 4, so the padding
/// before the appended archive is exercised.
const BASE_RAMDISK: &[u8] = b"stand-in IPA initramfs (really a compressed cpio)";
// Valid as Ironic's schema requires: the node carries it as its network_data.
const NETWORK_DATA: &str = r#"{"links":[{"id":"eth0","type":"phy","ethernet_mac_address":"52:54:00:00:00:01"}],"networks":[],"services":[]}"#;
const NETWORK_DATA_PATH: &str = "mnt/config/openstack/latest/network_data.json";

fn host(name: &str, network_secret: &str) -> BareMetalHost {
    serde_json::from_value(json!({
        "apiVersion": "metal3.io/v1alpha1",
        "kind": "BareMetalHost",
        "metadata": {"name": name, "labels": {"rack": "r7"}},
        "spec": {
            "online": false,
            "bootMACAddress": unique_mac(),
            "bmc": {"address": format!("fake://{name}"), "credentialsName": format!("{name}-bmc")},
            "preprovisioningNetworkDataName": network_secret,
        }
    }))
    .expect("valid host")
}

async fn put_network_data(secrets: &Api<Secret>, name: &str, data: &str) {
    let secret = json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": name},
        "stringData": {"networkData": data},
    });
    secrets
        .patch(
            name,
            &PatchParams::apply("test").force(),
            &Patch::Apply(&secret),
        )
        .await
        .expect("apply network data Secret");
}

/// The node's `driver_info[key]`, once the host has a node.
async fn driver_info(hosts: &Api<BareMetalHost>, name: &str, key: &str) -> Result<String, String> {
    let host = hosts.get(name).await.map_err(|e| e.to_string())?;
    let id = host
        .status
        .as_ref()
        .map(|s| s.provisioning.id.clone())
        .filter(|id| !id.is_empty())
        .ok_or("no Ironic node yet")?;
    let node = Stack::get()
        .ironic()
        .await
        .get_node(&id)
        .await
        .map_err(|e| e.to_string())?
        .ok_or("node gone")?;
    node.driver_info
        .get(key)
        .and_then(|k| k.as_str())
        .map(str::to_owned)
        .ok_or_else(|| format!("no {key} in driver_info of {id}"))
}

/// The image's URL and network data version once it is ready.
async fn ready_image(
    images: &Api<PreprovisioningImage>,
    name: &str,
) -> Result<(String, String), String> {
    let image = images.get(name).await.map_err(|e| e.to_string())?;
    let status = image.status.ok_or("no status")?;
    let ready = status
        .conditions
        .iter()
        .any(|c| c.type_ == "Ready" && c.status == "True");
    let url = status.image_url.filter(|_| ready).ok_or("not ready")?;
    let version = status
        .network_data
        .and_then(|n| n.version)
        .ok_or("no network data version")?;
    Ok((url, version))
}

/// The network data file in the archive appended to the served ramdisk at `url`.
async fn served_network_data(url: &str) -> Result<String, String> {
    let response = reqwest::get(url).await.map_err(|e| e.to_string())?;
    if !response.status().is_success() {
        return Err(format!("{url}: {}", response.status()));
    }
    let body = response.bytes().await.map_err(|e| e.to_string())?;
    assert!(
        body.starts_with(BASE_RAMDISK),
        "the ramdisk starts with bmo's IPA ramdisk"
    );
    let tail = &body[BASE_RAMDISK.len()..];
    let archive_start = tail.iter().position(|b| *b != 0).ok_or("no archive")?;
    assert_eq!(
        (BASE_RAMDISK.len() + archive_start) % 4,
        0,
        "the archive starts 4-byte aligned, where the kernel looks"
    );
    let files = cpio::files(&tail[archive_start..]).ok_or("the appended archive is not newc")?;
    let file = files
        .iter()
        .find(|f| f.path == NETWORK_DATA_PATH)
        .ok_or("no network data file")?;
    String::from_utf8(file.data.clone()).map_err(|e| e.to_string())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_host_boots_its_own_ramdisk_with_its_network_data_appended() {
    let _shared = crate::support::shared();
    let stack = Stack::get();
    let dir = TempDir::new("preprov-image");
    let mut cfg = netboot::config(dir.path());
    cfg.provisioning.provisioning_interface = Some("lo".into());
    cfg.http_bind = "127.0.0.1".parse().expect("ip");
    std::fs::write(
        dir.path().join("images/ironic-python-agent.initramfs"),
        BASE_RAMDISK,
    )
    .expect("write ramdisk");
    std::fs::write(
        dir.path().join("images/ironic-python-agent.kernel"),
        b"kernel",
    )
    .expect("write kernel");
    let netboot = bmo::netboot::start(&cfg, LeaseTable::in_memory())
        .await
        .expect("netboot starts on loopback");

    let client = stack.kube_client().await;
    bmo::api::install::install(&client, Duration::from_secs(60))
        .await
        .expect("install CRDs");
    let ns = new_namespace(&client, "preprov-image").await;
    let settings = ControllerSettings {
        namespace: Some(ns.clone()),
        concurrency: 4,
        provisioning_limit: 20,
        max_backoff: Duration::from_secs(5),
        deploy_ramdisk: DeployRamdisk::default(),
        steady_poll: bmo::controller::host::state_machine::STEADY_POLL,
        start_settle: Duration::ZERO,
    };
    let provisioner = IronicProvisioner::new(stack.ironic().await, ProvisionerSettings::default());
    let ctx = Context::new(client.clone(), provisioner, settings)
        .with_deploy_images(netboot.deploy_images())
        .with_preprovisioning_images();
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let until_stopped = || {
        let mut stopped = stopped.clone();
        async move {
            let _ = stopped.wait_for(|s| *s).await;
        }
    };
    let controller = tokio::spawn(bmo::controller::host::run(Arc::new(ctx), until_stopped()));
    let server = RamdiskServer {
        ramdisks: netboot.host_ramdisks.clone(),
        images: netboot.deploy_images(),
        images_dir: cfg.images_dir.clone(),
    };
    let builder = tokio::spawn(bmo::controller::preprov_image::run(
        client.clone(),
        server,
        bmo::controller::preprov_image::Builds {
            initrd: true,
            iso: None,
        },
        Some(ns.clone()),
        None,
        until_stopped(),
    ));

    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    let hosts: Api<BareMetalHost> = Api::namespaced(client.clone(), &ns);
    let images: Api<PreprovisioningImage> = Api::namespaced(client.clone(), &ns);
    put_network_data(&secrets, "pp-net", NETWORK_DATA).await;
    let name = "pp-host";
    create_bmc_secret(&client, &ns, &format!("{name}-bmc"), "admin", "password").await;
    hosts
        .create(&PostParams::default(), &host(name, "pp-net"))
        .await
        .expect("create host");

    // The host's image: owned by the host, with its labels; built by bmo; and the
    // node's deploy ramdisk is the image's URL.
    let (url, version) = eventually("the image to be ready", Duration::from_secs(30), || {
        ready_image(&images, name)
    })
    .await;
    let image = images.get(name).await.expect("image");
    assert_eq!(image.labels().get("rack").map(String::as_str), Some("r7"));
    assert!(
        image
            .owner_references()
            .iter()
            .any(|o| o.kind == "BareMetalHost" && o.name == name && o.controller == Some(true)),
        "{:?}",
        image.metadata.owner_references
    );
    assert!(
        url.contains(&format!("/preprovisioning/{ns}/{name}/{version}/")),
        "{url}"
    );
    eventually(
        "the node to boot the image",
        Duration::from_secs(30),
        || async {
            let ramdisk = driver_info(&hosts, name, "deploy_ramdisk").await?;
            if ramdisk == url { Ok(()) } else { Err(ramdisk) }
        },
    )
    .await;
    assert_eq!(
        driver_info(&hosts, name, "deploy_kernel")
            .await
            .expect("kernel"),
        netboot.deploy_images().kernel_url()
    );
    assert_eq!(
        served_network_data(&url).await.expect("served"),
        NETWORK_DATA
    );

    // A changed Secret: a new version, a new URL with the new data, the old one gone.
    let changed = r#"{"links":[{"id":"eth1","type":"phy","ethernet_mac_address":"52:54:00:00:00:02"}],"networks":[],"services":[]}"#;
    put_network_data(&secrets, "pp-net", changed).await;
    let (new_url, new_version) = eventually(
        "the image to follow the Secret",
        Duration::from_secs(30),
        || async {
            let (u, v) = ready_image(&images, name).await?;
            if v != version {
                Ok((u, v))
            } else {
                Err(format!("still version {v}"))
            }
        },
    )
    .await;
    let secret_version = secrets
        .get("pp-net")
        .await
        .expect("secret")
        .resource_version();
    assert_eq!(Some(new_version), secret_version);
    assert_ne!(new_url, url);
    assert_eq!(
        served_network_data(&new_url).await.expect("served"),
        changed
    );
    assert!(
        served_network_data(&url).await.is_err(),
        "the old version is no longer served"
    );

    // A host naming a Secret that does not exist stops at registration (issue 33:
    // as upstream, the network data is read before the node is registered), with
    // an error naming the host's Secret, its key and the fix; no image is built.
    let lost = "pp-lost";
    create_bmc_secret(&client, &ns, &format!("{lost}-bmc"), "admin", "password").await;
    hosts
        .create(&PostParams::default(), &host(lost, "absent-net"))
        .await
        .expect("create host");
    let message = eventually(
        "the host's registration error",
        Duration::from_secs(60),
        || async {
            let host = hosts.get(lost).await.map_err(|e| e.to_string())?;
            let status = host.status.ok_or("no status")?;
            match status.error_type {
                Some(bmo::api::ErrorType::Registration) => Ok(status.error_message),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
    for needle in [
        format!("{ns}/absent-net"),
        "networkData".into(),
        "create it".into(),
    ] {
        assert!(message.contains(&needle), "{needle} in {message}");
    }
    assert!(
        images.get_opt(lost).await.expect("get image").is_none(),
        "no image for it"
    );

    // An image taken over from upstream carries its finalizers; bmo removes them once
    // the image is deleted.
    let finalizers = json!({"metadata": {"finalizers": [
        "preprovisioningimage.metal3.io",
        "baremetalhost.metal3.io/preprovisioningImage",
    ]}});
    images
        .patch(name, &PatchParams::default(), &Patch::Merge(&finalizers))
        .await
        .expect("add upstream's finalizers");

    // Leave Ironic as found.
    for h in [name, lost] {
        hosts
            .delete(h, &DeleteParams::default())
            .await
            .expect("delete host");
    }
    eventually("the hosts to be gone", Duration::from_secs(60), || async {
        let left = hosts
            .list(&ListParams::default())
            .await
            .map_err(|e| e.to_string())?;
        if left.items.is_empty() {
            Ok(())
        } else {
            Err(format!("{} hosts left", left.items.len()))
        }
    })
    .await;
    // The test stack runs no garbage collector: delete the images as it would.
    for i in [name] {
        images
            .delete(i, &DeleteParams::default())
            .await
            .expect("delete image");
    }
    eventually("the images to be gone", Duration::from_secs(30), || async {
        let left = images
            .list(&ListParams::default())
            .await
            .map_err(|e| e.to_string())?;
        if left.items.is_empty() {
            Ok(())
        } else {
            Err(format!(
                "{:?}",
                left.items
                    .iter()
                    .map(|i| (i.name_any(), i.finalizers().to_vec()))
                    .collect::<Vec<_>>()
            ))
        }
    })
    .await;
    let _ = stop.send(true);
    let _ = controller.await;
    let _ = builder.await;
}

/// The `iso` format: an image that accepts an ISO first (as the host controller
/// writes it for a virtual media BMC) gets one from bmo, with upstream's status,
/// served over bmo's HTTP server; the ISO, read by a reader of its own (genisoimage's
/// isoinfo), holds the agent kernel, the ramdisk with the network data appended,
/// GRUB's configuration with the kernel parameters bmo was given, ISOLINUX, and an
/// El Torito catalog for BIOS and UEFI. A changed Secret gives a new ISO.
#[tokio::test(flavor = "multi_thread")]
async fn an_iso_image_is_built_with_the_agent_and_network_data_and_served() {
    let _shared = crate::support::shared();
    use bmo::controller::preprov_image::{Builds, IsoBuild, agent_iso, iso};
    let stack = Stack::get();
    let dir = TempDir::new("preprov-iso");
    let mut cfg = netboot::config(dir.path());
    cfg.provisioning.provisioning_interface = Some("lo".into());
    cfg.http_bind = "127.0.0.1".parse().expect("ip");
    let images_dir = cfg.images_dir.clone();
    for (name, data) in [
        ("ironic-python-agent.initramfs", BASE_RAMDISK.to_vec()),
        ("ironic-python-agent.kernel", b"stand-in kernel".to_vec()),
        (agent_iso::ESP_IMAGE, vec![0xEE; 4096]),
        (
            agent_iso::ISOLINUX_BIN,
            std::fs::read("/usr/lib/ISOLINUX/isolinux.bin").expect("Debian's isolinux"),
        ),
        (agent_iso::LDLINUX_C32, b"stand-in ldlinux".to_vec()),
    ] {
        std::fs::write(images_dir.join(name), data).expect("write image file");
    }
    let netboot = bmo::netboot::start(&cfg, LeaseTable::in_memory())
        .await
        .expect("netboot starts on loopback");
    let client = stack.kube_client().await;
    bmo::api::install::install(&client, Duration::from_secs(60))
        .await
        .expect("install CRDs");
    let ns = new_namespace(&client, "preprov-iso").await;
    let params = "ipa-api-url=http://192.0.2.1:6385 ipa-insecure=1 console=ttyS0";
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let builder = tokio::spawn(bmo::controller::preprov_image::run(
        client.clone(),
        RamdiskServer {
            ramdisks: netboot.host_ramdisks.clone(),
            images: netboot.deploy_images(),
            images_dir: images_dir.clone(),
        },
        Builds {
            initrd: true,
            iso: Some(IsoBuild {
                http_root: cfg.http_root.clone(),
                kernel_params: params.into(),
            }),
        },
        Some(ns.clone()),
        None,
        async move {
            let mut stopped = stopped;
            let _ = stopped.wait_for(|s| *s).await;
        },
    ));
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    let images: Api<PreprovisioningImage> = Api::namespaced(client.clone(), &ns);
    put_network_data(&secrets, "iso-net", NETWORK_DATA).await;
    let image: PreprovisioningImage = serde_json::from_value(json!({
        "apiVersion": "metal3.io/v1alpha1", "kind": "PreprovisioningImage",
        "metadata": {"name": "iso-host"},
        "spec": {"acceptFormats": ["iso", "initrd"], "architecture": "x86_64", "networkDataName": "iso-net"},
    }))
    .expect("image");
    images
        .create(&PostParams::default(), &image)
        .await
        .expect("create image");
    let (url, version) = eventually("the ISO to be ready", Duration::from_secs(60), || {
        ready_image(&images, "iso-host")
    })
    .await;

    // Upstream's status: format, URL, network data, Ready and Error.
    let status = images
        .get("iso-host")
        .await
        .expect("image")
        .status
        .expect("status");
    assert_eq!(
        status.format,
        Some(bmo::api::PreprovisioningImageFormat::Iso)
    );
    assert_eq!(status.kernel_url, None, "an ISO needs no kernel URL");
    assert_eq!(status.architecture.as_deref(), Some("x86_64"));
    let network = status.network_data.expect("networkData");
    assert_eq!(network.name.as_deref(), Some("iso-net"));
    let conditions: Vec<(String, String, String)> = status
        .conditions
        .iter()
        .map(|c| (c.type_.clone(), c.status.clone(), c.reason.clone()))
        .collect();
    for wanted in [("Ready", "True"), ("Error", "False")] {
        assert!(
            conditions
                .iter()
                .any(|(t, s, r)| (t.as_str(), s.as_str()) == wanted && r == "ImageSuccess"),
            "{wanted:?} in {conditions:?}"
        );
    }
    assert_eq!(
        url,
        netboot.deploy_images().http_url(&format!(
            "/preprovisioning-iso/{ns}/iso-host/{version}/ironic-python-agent.iso"
        ))
    );

    // The ISO as served.
    let body = reqwest::get(&url)
        .await
        .and_then(|r| r.error_for_status())
        .expect("GET the ISO")
        .bytes()
        .await
        .expect("the ISO's body");
    let iso_file = dir.path().join("served.iso");
    std::fs::write(&iso_file, &body).expect("keep the ISO");
    let listing = netboot::run(
        std::process::Command::new("isoinfo")
            .arg("-i")
            .arg(&iso_file)
            .arg("-f"),
    );
    for path in [
        "/VMLINUZ.;1",
        "/INITRD.;1",
        "/EFI/BOOT/GRUB.CFG;1",
        "/BOOT/ESP.IMG;1",
        "/ISOLINUX/ISOLINUX.BIN;1",
        "/ISOLINUX/LDLINUX.C32;1",
        "/ISOLINUX/ISOLINUX.CFG;1",
    ] {
        assert!(listing.lines().any(|l| l == path), "{path} in\n{listing}");
    }
    let described = netboot::run(
        std::process::Command::new("isoinfo")
            .arg("-d")
            .arg("-i")
            .arg(&iso_file),
    );
    assert!(described.contains("El Torito"), "{described}");
    let grub_cfg = netboot::run(
        std::process::Command::new("isoinfo")
            .arg("-i")
            .arg(&iso_file)
            .args(["-x", "/EFI/BOOT/GRUB.CFG;1"]),
    );
    assert!(
        grub_cfg.contains(&format!("linux /VMLINUZ {params}")),
        "{grub_cfg}"
    );
    let initrd = iso::find(&body, "INITRD").expect("INITRD");
    assert!(initrd.starts_with(BASE_RAMDISK));
    let start = BASE_RAMDISK.len()
        + initrd[BASE_RAMDISK.len()..]
            .iter()
            .position(|b| *b != 0)
            .expect("archive");
    let files = cpio::files(&initrd[start..]).expect("newc archive after the ramdisk");
    let data = files
        .iter()
        .find(|f| f.path == NETWORK_DATA_PATH)
        .expect("network data");
    assert_eq!(data.data, NETWORK_DATA.as_bytes());

    // A changed Secret: a new ISO at a new URL, the old one gone.
    put_network_data(
        &secrets,
        "iso-net",
        r#"{"links":[],"networks":[],"services":[]}"#,
    )
    .await;
    let (new_url, _) = eventually("a new ISO", Duration::from_secs(60), || async {
        let (u, v) = ready_image(&images, "iso-host").await?;
        if v == version {
            Err(format!("still {v}"))
        } else {
            Ok((u, v))
        }
    })
    .await;
    assert_ne!(new_url, url);
    let old = reqwest::get(&url).await.expect("GET the old ISO").status();
    assert_eq!(old, reqwest::StatusCode::NOT_FOUND, "the old ISO is gone");
    images
        .delete("iso-host", &DeleteParams::default())
        .await
        .expect("delete the image");
    eventually("its ISO to go with it", Duration::from_secs(60), || {
        let new_url = new_url.clone();
        let images = images.clone();
        async move {
            match reqwest::get(&new_url).await.map(|r| r.status()) {
                Ok(reqwest::StatusCode::NOT_FOUND) => Ok(()),
                other => Err(format!(
                    "{other:?}; the image: {:?}",
                    images
                        .get_opt("iso-host")
                        .await
                        .map(|i| i.map(|i| i.metadata))
                )),
            }
        }
    })
    .await;
    let _ = stop.send(true);
    let _ = builder.await;
}
