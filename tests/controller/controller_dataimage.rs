//! DataImages against the real stack: a `redfish-virtualmedia` host on
//! sushy-emulator gets the DataImage's ISO in its virtual CD when it powers on
//! (Ironic downloads the ISO from a server this test runs on loopback and hands its
//! own copy to the BMC), `status.attachedImage` says so, and deleting the DataImage
//! ejects the ISO and lets the object go. An ISO that cannot be downloaded is reported
//! in `status.error` and an Event, and the host waits powered off.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use crate::support::{
    Stack, bmo_run, create_bmc_secret, eventually, installed_namespace, unique_mac,
};
use bmo::api::images::DATA_IMAGE_FINALIZER;
use bmo::api::{BareMetalHost, DataImage, ProvisioningState};
use k8s_openapi::api::core::v1::Event;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The sushy-emulator system no other test uses (the stack makes five).
const SYSTEM: usize = 4;

/// A few KiB shaped as an ISO 9660 image (its volume descriptor magic in place).
fn iso_like() -> Vec<u8> {
    let mut image = vec![0u8; 36 * 1024];
    image[0x8001..0x8006].copy_from_slice(b"CD001");
    image
}

/// Serves [`iso_like`] at `/data.iso` on loopback (404 for anything else); counts
/// the GETs of it.
async fn serve_iso() -> (String, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let downloads = Arc::new(AtomicUsize::new(0));
    let counter = downloads.clone();
    tokio::spawn(async move {
        let body = iso_like();
        while let Ok((mut conn, _)) = listener.accept().await {
            let body = body.clone();
            let counter = counter.clone();
            tokio::spawn(async move {
                let mut request = Vec::new();
                let mut buf = [0u8; 1024];
                while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                    match conn.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => request.extend_from_slice(&buf[..n]),
                    }
                }
                let line = String::from_utf8_lossy(&request);
                let mut words = line.split_whitespace();
                let (method, path) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
                let head = if path == "/data.iso" {
                    if method == "GET" {
                        counter.fetch_add(1, Ordering::SeqCst);
                    }
                    format!(
                        "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                        body.len()
                    )
                } else {
                    "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                        .to_owned()
                };
                let _ = conn.write_all(head.as_bytes()).await;
                if method == "GET" && path == "/data.iso" {
                    let _ = conn.write_all(&body).await;
                }
                let _ = conn.shutdown().await;
            });
        }
    });
    (base, downloads)
}

/// The sushy-emulator system's virtual CD: `(Inserted, Image)`.
async fn bmc_cd() -> (bool, String) {
    let stack = Stack::get();
    let url = format!(
        "{}/redfish/v1/Systems/{}/VirtualMedia/Cd",
        stack.redfish_url.as_str().trim_end_matches('/'),
        stack.redfish_system_ids[SYSTEM]
    );
    let creds = &stack.redfish_credentials;
    let cd: Value = reqwest::Client::new()
        .get(url)
        .basic_auth(&creds.username, Some(creds.password.expose()))
        .send()
        .await
        .expect("sushy-emulator answers")
        .json()
        .await
        .expect("a VirtualMedia resource");
    (
        cd["Inserted"].as_bool().unwrap_or(false),
        cd["Image"].as_str().unwrap_or_default().to_owned(),
    )
}

/// The sushy-emulator system's `PowerState` (`On`, `Off`).
async fn bmc_power() -> String {
    let stack = Stack::get();
    let url = format!(
        "{}/redfish/v1/Systems/{}",
        stack.redfish_url.as_str().trim_end_matches('/'),
        stack.redfish_system_ids[SYSTEM]
    );
    let creds = &stack.redfish_credentials;
    let system: Value = reqwest::Client::new()
        .get(url)
        .basic_auth(&creds.username, Some(creds.password.expose()))
        .send()
        .await
        .expect("sushy-emulator answers")
        .json()
        .await
        .expect("a System resource");
    system["PowerState"].as_str().unwrap_or_default().to_owned()
}

/// Ejects what an earlier, interrupted run may have left in the system's virtual CD.
async fn eject_leftovers() {
    let stack = Stack::get();
    let url = format!(
        "{}/redfish/v1/Systems/{}/VirtualMedia/Cd/Actions/VirtualMedia.EjectMedia",
        stack.redfish_url.as_str().trim_end_matches('/'),
        stack.redfish_system_ids[SYSTEM]
    );
    let creds = &stack.redfish_credentials;
    if bmc_cd().await.0 {
        reqwest::Client::new()
            .post(url)
            .basic_auth(&creds.username, Some(creds.password.expose()))
            .json(&json!({}))
            .send()
            .await
            .expect("eject");
    }
}

async fn set_online(hosts: &Api<BareMetalHost>, name: &str, online: bool) {
    hosts
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"online": online}})),
        )
        .await
        .expect("patch online");
}

async fn create_image(images: &Api<DataImage>, name: &str, url: &str) {
    let image: DataImage = serde_json::from_value(json!({
        "apiVersion": "metal3.io/v1alpha1", "kind": "DataImage",
        "metadata": {"name": name},
        "spec": {"url": url},
    }))
    .unwrap();
    images
        .create(&PostParams::default(), &image)
        .await
        .expect("create DataImage");
}

#[tokio::test]
async fn a_data_image_is_inserted_at_power_on_and_ejected_when_deleted() {
    let _shared = crate::support::shared();
    let stack = Stack::get();
    let (client, ns) = installed_namespace("dataimage").await;
    let hosts: Api<BareMetalHost> = Api::namespaced(client.clone(), &ns);
    let images: Api<DataImage> = Api::namespaced(client.clone(), &ns);
    let (base, downloads) = serve_iso().await;
    eject_leftovers().await;
    let name = "vmedia";

    // An externally provisioned host, off, on the BMC's virtual media driver.
    let creds = &stack.redfish_credentials;
    create_bmc_secret(
        &client,
        &ns,
        "vmedia-bmc",
        &creds.username,
        creds.password.expose(),
    )
    .await;
    let emulator = stack
        .redfish_url
        .as_str()
        .trim_end_matches('/')
        .replace("http://", "");
    let host: BareMetalHost = serde_json::from_value(json!({
        "apiVersion": "metal3.io/v1alpha1", "kind": "BareMetalHost",
        "metadata": {"name": name},
        "spec": {
            "online": false,
            "externallyProvisioned": true,
            "bootMACAddress": unique_mac(),
            "bmc": {
                "address": format!("redfish-virtualmedia+http://{emulator}/redfish/v1/Systems/{}", stack.redfish_system_ids[SYSTEM]),
                "credentialsName": "vmedia-bmc"
            }
        }
    }))
    .unwrap();
    hosts
        .create(&PostParams::default(), &host)
        .await
        .expect("create host");
    let bmo = bmo_run(&ns, &[("RUST_LOG", "info,bmo=debug")]).0;
    eventually(
        "the host externally provisioned and off",
        Duration::from_secs(60),
        || async {
            let h = hosts.get(name).await.map_err(|e| e.to_string())?;
            let powered_on = h.status.as_ref().is_some_and(|s| s.powered_on);
            // `poweredOn` is false too before bmo first read the power: the BMC
            // says whether bmo has switched the machine off.
            let bmc = bmc_power().await;
            match h.provisioning_state() {
                ProvisioningState::ExternallyProvisioned if !powered_on && bmc == "Off" => Ok(()),
                other => Err(format!(
                    "{other} on={powered_on} bmc={bmc}; {}",
                    bmo.log_tail(6)
                )),
            }
        },
    )
    .await;

    // An ISO Ironic cannot download: the error is said, and the host waits off.
    let missing = format!("{base}/missing.iso");
    create_image(&images, name, &missing).await;
    let host_uid = hosts.get(name).await.unwrap().uid().unwrap();
    eventually(
        "the DataImage owned and finalized",
        Duration::from_secs(30),
        || async {
            let di = images.get(name).await.map_err(|e| e.to_string())?;
            let owned = di.owner_references().iter().any(|o| o.uid == host_uid);
            let finalized = di.finalizers().iter().any(|f| f == DATA_IMAGE_FINALIZER);
            (owned && finalized)
                .then_some(())
                .ok_or_else(|| format!("{:?}", di.metadata))
        },
    )
    .await;
    set_online(&hosts, name, true).await;
    let error = eventually(
        "the attach failure in status.error",
        Duration::from_secs(60),
        || async {
            let di = images.get(name).await.map_err(|e| e.to_string())?;
            di.status
                .as_ref()
                .and_then(|s| s.error.clone())
                .ok_or_else(|| format!("{:?}; {}", di.status, bmo.log_tail(6)))
        },
    )
    .await;
    assert_eq!(error.count, 1, "{error:?}");
    for part in [
        format!("host {ns}/{name}"),
        "spec.url".to_owned(),
        missing.clone(),
        "Ironic's conductor can download".to_owned(),
    ] {
        assert!(error.message.contains(&part), "{part} in {error:?}");
    }
    let events: Api<Event> = Api::namespaced(client.clone(), &ns);
    let event = eventually("an event about it", Duration::from_secs(10), || async {
        let list = events
            .list(&ListParams::default())
            .await
            .map_err(|e| e.to_string())?;
        list.items
            .into_iter()
            .find(|e| {
                e.involved_object.kind.as_deref() == Some("DataImage")
                    && e.reason.as_deref() == Some("DataImageError")
            })
            .ok_or_else(|| "none yet".to_owned())
    })
    .await;
    assert_eq!(event.type_.as_deref(), Some("Warning"));
    assert_eq!(event.message.as_deref(), Some(error.message.as_str()));
    let h = hosts.get(name).await.unwrap();
    assert!(
        !h.status.as_ref().is_some_and(|s| s.powered_on),
        "the host waits off for its DataImage"
    );
    assert!(!bmc_cd().await.0, "nothing inserted");

    // Nothing inserted: deleting it lets it go at once.
    set_online(&hosts, name, false).await;
    images
        .delete(name, &DeleteParams::default())
        .await
        .expect("delete DataImage");
    eventually("the DataImage gone", Duration::from_secs(30), || async {
        match images.get_opt(name).await.map_err(|e| e.to_string())? {
            None => Ok(()),
            Some(di) => Err(format!("{:?}; {}", di.finalizers(), bmo.log_tail(6))),
        }
    })
    .await;

    // A good ISO: powering on inserts it first.
    let url = format!("{base}/data.iso");
    create_image(&images, name, &url).await;
    eventually(
        "the DataImage finalized",
        Duration::from_secs(30),
        || async {
            let di = images.get(name).await.map_err(|e| e.to_string())?;
            match di.finalizers().iter().any(|f| f == DATA_IMAGE_FINALIZER) {
                true => Ok(()),
                false => Err(format!("{:?}", di.metadata)),
            }
        },
    )
    .await;
    assert!(!bmc_cd().await.0, "nothing inserted before power-on");
    set_online(&hosts, name, true).await;
    let di = eventually(
        "the image attached and the host on",
        Duration::from_secs(60),
        || async {
            let di = images.get(name).await.map_err(|e| e.to_string())?;
            let h = hosts.get(name).await.map_err(|e| e.to_string())?;
            let attached = di
                .status
                .as_ref()
                .and_then(|s| s.attached_image.as_ref())
                .map(|a| a.url.clone());
            let on = h.status.as_ref().is_some_and(|s| s.powered_on);
            if attached.as_deref() == Some(url.as_str()) && on {
                Ok(di)
            } else {
                Err(format!(
                    "attached {attached:?}, on {on}, {:?}; {}",
                    di.status,
                    bmo.log_tail(6)
                ))
            }
        },
    )
    .await;
    let status = di.status.clone().unwrap_or_default();
    assert!(status.last_reconciled.is_some(), "{status:?}");
    assert!(status.error.is_none(), "{status:?}");
    let (inserted, image) = bmc_cd().await;
    assert!(inserted, "the BMC's virtual CD holds an image");
    assert!(
        image.starts_with("http://127.0.0.1:") && image.ends_with(".iso"),
        "the BMC got Ironic's copy of the ISO: {image}"
    );
    assert!(
        downloads.load(Ordering::SeqCst) >= 1,
        "Ironic downloaded spec.url"
    );

    // Deleting the DataImage ejects the image, then the finalizer and the object go.
    images
        .delete(name, &DeleteParams::default())
        .await
        .expect("delete DataImage");
    eventually("the DataImage gone", Duration::from_secs(30), || async {
        match images.get_opt(name).await.map_err(|e| e.to_string())? {
            None => Ok(()),
            Some(di) => Err(format!(
                "{:?} {:?}; {}",
                di.finalizers(),
                di.status,
                bmo.log_tail(6)
            )),
        }
    })
    .await;
    assert!(!bmc_cd().await.0, "the virtual CD was ejected");

    refused_url_is_never_attached(&client, &hosts, &images, name, &bmo).await;
}

/// A `spec.url` spelling a link-local address in hex (169.254.0.1, not the metadata
/// service, in case a regression lets it through), in a namespace exempt from the
/// admission check: bmo refuses it before Ironic hears of it (no connection is made),
/// says so in `status.error`, and the host waits off.
async fn refused_url_is_never_attached(
    client: &kube::Client,
    hosts: &Api<BareMetalHost>,
    images: &Api<DataImage>,
    name: &str,
    bmo: &crate::support::BmoProcess,
) {
    let ns = hosts.namespace().unwrap_or_default().to_owned();
    let label = bmo::api::admission::LINK_LOCAL_EXEMPTION_LABEL;
    Api::<k8s_openapi::api::core::v1::Namespace>::all(client.clone())
        .patch(
            &ns,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {label: "true"}}})),
        )
        .await
        .expect("label the namespace exempt");
    set_online(hosts, name, false).await;
    eventually("the host off", Duration::from_secs(60), || async {
        let h = hosts.get(name).await.map_err(|e| e.to_string())?;
        let on = h.status.as_ref().is_some_and(|s| s.powered_on);
        let bmc = bmc_power().await;
        (!on && bmc == "Off")
            .then_some(())
            .ok_or_else(|| format!("on={on} bmc={bmc}; {}", bmo.log_tail(6)))
    })
    .await;
    let url = "http://0xa9.0xfe.0x0.0x1/data.iso";
    // The namespace label reaches the admission policy's binding shortly.
    eventually(
        "the exempt namespace to take the DataImage",
        Duration::from_secs(30),
        || async {
            let image: DataImage = serde_json::from_value(json!({
                "apiVersion": "metal3.io/v1alpha1", "kind": "DataImage",
                "metadata": {"name": name}, "spec": {"url": url},
            }))
            .map_err(|e| e.to_string())?;
            images
                .create(&PostParams::default(), &image)
                .await
                .map(drop)
                .map_err(|e| e.to_string())
        },
    )
    .await;
    set_online(hosts, name, true).await;
    let error = eventually(
        "the refusal in status.error",
        Duration::from_secs(60),
        || async {
            let di = images.get(name).await.map_err(|e| e.to_string())?;
            di.status
                .as_ref()
                .and_then(|s| s.error.clone())
                .ok_or_else(|| format!("{:?}; {}", di.status, bmo.log_tail(6)))
        },
    )
    .await;
    assert!(
        error
            .message
            .contains("spec.url: host 0xa9.0xfe.0x0.0x1 is 169.254.0.1"),
        "{error:?}"
    );
    assert!(!bmc_cd().await.0, "nothing inserted");
    let h = hosts.get(name).await.unwrap();
    assert!(
        !h.status.as_ref().is_some_and(|s| s.powered_on),
        "the host waits off for its DataImage"
    );
}
