use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::json;

use super::build::{self, NETWORK_DATA_PATH, NetworkData, Server};
use crate::api::{
    BareMetalHost, PreprovisioningImage, PreprovisioningImageFormat, PreprovisioningImageStatus,
};
use crate::controller::host::preprov_image::{self as host_side, ImageUse};
use crate::controller::host::store::MemoryStore;
use crate::netboot::cpio;
use crate::provisioner::DeployRamdisk;

fn host(state: &str, extra: serde_json::Value) -> BareMetalHost {
    let mut spec = json!({
        "bmc": {"address": "redfish-virtualmedia://10.0.0.1/redfish/v1/Systems/1", "credentialsName": "h-bmc"},
        "bootMACAddress": "52:54:00:00:00:01",
        "architecture": "x86_64",
        "preprovisioningNetworkDataName": "h-net",
        "online": true,
    });
    if let (Some(s), Some(e)) = (spec.as_object_mut(), extra.as_object()) {
        s.extend(e.clone());
    }
    let mut host: BareMetalHost = serde_json::from_value(json!({
        "apiVersion": "metal3.io/v1alpha1", "kind": "BareMetalHost",
        "metadata": {"name": "h", "namespace": "ns", "uid": "uid-h", "labels": {"rack": "r1"}},
        "spec": spec,
    }))
    .unwrap();
    let mut status = crate::api::BareMetalHostStatus::default();
    status.provisioning.state = serde_json::from_value(json!(state)).unwrap();
    host.status = Some(status);
    host
}

/// The status and reason of condition `type_` in `status`.
fn condition<'a>(status: &'a PreprovisioningImageStatus, type_: &str) -> (&'a str, &'a str) {
    let found = status.conditions.iter().find(|c| c.type_ == type_).unwrap();
    (found.status.as_str(), found.reason.as_str())
}

fn now() -> Time {
    Time(k8s_openapi::jiff::Timestamp::now())
}

fn server() -> Server {
    Server {
        initrd: true,
        iso: None,
        base_ramdisk: true,
        base_ramdisk_path: "/images/ironic-python-agent.initramfs".into(),
        kernel_url: "http://10.0.0.2:6180/images/ironic-python-agent.kernel".into(),
        ramdisk_url: "http://10.0.0.2:6180/preprovisioning/ns/h/7/ironic-python-agent.initramfs"
            .into(),
    }
}

/// The builder's decision for `image` on an x86_64 server with a base ramdisk.
fn decide(image: &PreprovisioningImage, network: &NetworkData) -> build::Decision {
    build::decide(image, network, &server(), "x86_64", &now())
}

/// The builder's decision for `image` with network data `{}` on an x86_64 `server`.
fn decide_on(image: &PreprovisioningImage, server: &Server) -> build::Decision {
    build::decide(image, &found(b"{}"), server, "x86_64", &now())
}

fn found(data: &[u8]) -> NetworkData {
    NetworkData::Found {
        name: "h-net".into(),
        version: "7".into(),
        data: Some(data.to_vec()),
    }
}

/// The image the host controller writes, with a generation as the API server gives.
fn image_for(host: &BareMetalHost) -> PreprovisioningImage {
    let mut image = host_side::desired_image(host, host_side::expected_spec(host));
    image.metadata.generation = Some(1);
    image
}

#[test]
fn which_states_want_and_wait_for_an_image() {
    let fast_inspection = json!({"inspectionMode": "fast"});
    let no_cleaning = json!({"automatedCleaningMode": "disabled"});
    let cases = [
        ("registering", json!({}), false, false),
        ("inspecting", json!({}), true, true),
        ("inspecting", fast_inspection, false, false),
        ("available", json!({}), true, false),
        ("preparing", json!({}), true, true),
        ("provisioning", json!({}), true, false),
        ("provisioned", json!({}), false, false),
        ("deprovisioning", json!({}), true, true),
        ("deprovisioning", no_cleaning, false, false),
        ("deleting", json!({}), false, false),
    ];
    for (state, extra, wants, needs) in cases {
        let h = host(state, extra.clone());
        assert_eq!(host_side::wants_image(&h), wants, "{state} {extra}");
        assert_eq!(host_side::needs_image(&h), needs, "{state} {extra}");
    }
}

#[test]
fn the_expected_spec_is_upstreams() {
    let spec = host_side::expected_spec(&host("inspecting", json!({})));
    assert_eq!(spec.network_data_name.as_deref(), Some("h-net"));
    assert_eq!(spec.architecture.as_deref(), Some("x86_64"));
    assert_eq!(
        spec.accept_formats,
        vec![
            PreprovisioningImageFormat::Iso,
            PreprovisioningImageFormat::Initrd
        ]
    );
    let ipmi = host(
        "inspecting",
        json!({"bmc": {"address": "ipmi://10.0.0.1", "credentialsName": "c"}, "architecture": null}),
    );
    let spec = host_side::expected_spec(&ipmi);
    assert_eq!(
        spec.accept_formats,
        vec![PreprovisioningImageFormat::Initrd]
    );
    assert_eq!(
        spec.architecture.as_deref(),
        Some(crate::api::images::controller_architecture())
    );
    let image = image_for(&ipmi);
    assert_eq!(image.metadata.labels.as_ref().unwrap()["rack"], "r1");
    let owner = &image.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.controller),
        ("BareMetalHost", Some(true))
    );
    assert!(!host_side::out_of_date(&image, &ipmi, &spec));
    let mut relabelled = ipmi.clone();
    relabelled.metadata.labels = Some([("rack".to_owned(), "r2".to_owned())].into());
    assert!(host_side::out_of_date(&image, &relabelled, &spec));
}

#[test]
fn a_built_image_reads_back_with_the_network_data_and_is_used() {
    let h = host("inspecting", json!({}));
    let image = image_for(&h);
    let data = br#"{"links": [{"id": "eth0", "type": "phy"}]}"#;
    let decision = decide(&image, &found(data));
    let (version, archive) = decision.archive.clone().unwrap();
    assert_eq!(version, "7");
    let files = cpio::files(&archive).unwrap();
    assert_eq!(files.len(), 1);
    assert_eq!(files[0].path, NETWORK_DATA_PATH);
    assert_eq!(files[0].data, data.to_vec());
    assert!(decision.event.is_none());
    let status = &decision.status;
    assert_eq!(status.format, Some(PreprovisioningImageFormat::Initrd));
    assert_eq!(
        status.network_data.as_ref().unwrap().version.as_deref(),
        Some("7")
    );
    assert_eq!(condition(status, "Ready"), ("True", "ImageSuccess"));

    let mut built = image.clone();
    built.status = Some(decision.status);
    let spec = host_side::expected_spec(&h);
    let used = host_side::image_use(&built, &spec, Some("7"), None);
    assert_eq!(
        used,
        ImageUse::Ready(DeployRamdisk {
            kernel_url: Some(server().kernel_url),
            ramdisk_url: Some(server().ramdisk_url),
            iso_url: None,
            extra_kernel_params: None,
        })
    );
    // The Secret moved on: the image is out of date until built again.
    assert!(matches!(
        host_side::image_use(&built, &spec, Some("8"), None),
        ImageUse::Pending(_)
    ));
    // Built again with nothing changed: the same status, so no write.
    let again = decide(&built, &found(data));
    assert_eq!(Some(&again.status), built.status.as_ref());
}

fn iso_server(uefi: bool, bios: bool, params: &str) -> Server {
    Server {
        iso: Some(build::IsoServer {
            url: "http://10.0.0.2:6180/preprovisioning-iso/ns/h/7/ironic-python-agent.iso".into(),
            loaders: super::agent_iso::Loaders { uefi, bios },
            kernel_params: params.into(),
        }),
        ..server()
    }
}

#[test]
fn a_virtual_media_host_gets_an_iso_when_bmo_builds_them_and_uses_it() {
    let h = host("inspecting", json!({}));
    let image = image_for(&h);
    let params = "ipa-api-url=http://10.0.0.2:6385 ipa-insecure=1";
    let decision = decide_on(&image, &iso_server(true, true, params));
    let status = &decision.status;
    assert_eq!(status.format, Some(PreprovisioningImageFormat::Iso));
    assert_eq!(
        status.image_url.as_deref(),
        Some("http://10.0.0.2:6180/preprovisioning-iso/ns/h/7/ironic-python-agent.iso")
    );
    assert_eq!(status.kernel_url, None);
    assert_eq!(condition(status, "Ready"), ("True", "ImageSuccess"));
    assert_eq!(condition(status, "Error"), ("False", "ImageSuccess"));
    assert_eq!(decision.archive.as_ref().map(|a| a.0.as_str()), Some("7"));
    let mut built = image.clone();
    built.status = Some(decision.status);
    let used = host_side::image_use(&built, &host_side::expected_spec(&h), Some("7"), None);
    assert!(
        matches!(&used, ImageUse::Ready(r) if r.iso_url.as_deref() == built.status.as_ref().unwrap().image_url.as_deref() && r.kernel_url.is_none()),
        "{used:?}"
    );
    // One loader is enough.
    for (uefi, bios) in [(true, false), (false, true)] {
        let d = decide_on(&image, &iso_server(uefi, bios, params));
        assert_eq!(d.status.format, Some(PreprovisioningImageFormat::Iso));
    }
    // A PXE host accepts initrd only: it gets the ramdisk even so.
    let pxe = host(
        "inspecting",
        json!({"bmc": {"address": "ipmi://10.0.0.1", "credentialsName": "h-bmc"}}),
    );
    let d = decide_on(&image_for(&pxe), &iso_server(true, true, params));
    assert_eq!(d.status.format, Some(PreprovisioningImageFormat::Initrd));
}

#[test]
fn an_iso_without_loaders_or_an_ironic_url_is_an_error_that_says_what_to_add() {
    let image = image_for(&host("inspecting", json!({})));
    let d = decide_on(
        &image,
        &iso_server(false, false, "ipa-api-url=http://i:6385"),
    );
    assert_eq!(condition(&d.status, "Error"), ("True", "ImageBuildInvalid"));
    assert_eq!(d.status.image_url, None);
    let message = d.event.unwrap().message;
    assert!(
        message.contains("esp.img") && message.contains("isolinux.bin"),
        "{message}"
    );
    let d = decide_on(&image, &iso_server(true, true, "ipa-insecure=1"));
    assert_eq!(
        condition(&d.status, "Error"),
        ("True", "ConfigurationError")
    );
    assert!(
        d.event
            .unwrap()
            .message
            .contains("BMO_PREPROV_IMAGE_ISO_KERNEL_PARAMS")
    );
    // bmo builds ISOs only, and the image accepts initrd only.
    let mut initrd_only = image.clone();
    initrd_only.spec.accept_formats = vec![PreprovisioningImageFormat::Initrd];
    let iso_only = Server {
        initrd: false,
        ..iso_server(true, true, "ipa-api-url=http://i")
    };
    let d = decide_on(&initrd_only, &iso_only);
    assert!(
        d.event
            .unwrap()
            .message
            .contains("bmo builds iso (BMO_PREPROV_IMAGE_ISO)")
    );
}

#[test]
fn yaml_network_data_goes_in_as_json() {
    let image = image_for(&host("inspecting", json!({})));
    let decision = decide(&image, &found(b"links:\n  - id: eth0\n"));
    let (_, archive) = decision.archive.unwrap();
    let files = cpio::files(&archive).unwrap();
    let value: serde_json::Value = serde_json::from_slice(&files[0].data).unwrap();
    assert_eq!(value, json!({"links": [{"id": "eth0"}]}));
}

#[test]
fn a_missing_secret_fails_the_image_naming_host_secret_and_fix_once() {
    let image = image_for(&host("inspecting", json!({})));
    let missing = NetworkData::Missing {
        name: "h-net".into(),
    };
    let decision = decide(&image, &missing);
    assert!(decision.archive.is_none());
    let event = decision.event.clone().unwrap();
    assert_eq!(event.reason, "MissingNetworkData");
    for needle in ["ns/h", "ns/h-net", "create it"] {
        assert!(
            event.message.contains(needle),
            "{needle}: {}",
            event.message
        );
    }
    assert_eq!(
        condition(&decision.status, "Error"),
        ("True", "MissingNetworkData")
    );
    let mut failed = image.clone();
    failed.status = Some(decision.status);
    let spec = host_side::expected_spec(&host("inspecting", json!({})));
    let mut with_version = failed.clone();
    if let Some(s) = with_version.status.as_mut() {
        s.architecture = Some("x86_64".into());
        s.format = Some(PreprovisioningImageFormat::Initrd);
        s.network_data = Some(crate::api::images::SecretStatus {
            name: Some("h-net".into()),
            version: Some("3".into()),
        });
    }
    assert!(matches!(
        host_side::image_use(&with_version, &spec, Some("3"), None),
        ImageUse::Failed(m) if m.contains("ns/h-net")
    ));
    // The same failure again posts no second event.
    let again = decide(&failed, &missing);
    assert!(again.event.is_none());
}

#[test]
fn secret_data_never_reaches_status_or_events() {
    let image = image_for(&host("inspecting", json!({})));
    let decision = decide(&image, &found(b"password: {hunter2"));
    let text = serde_json::to_string(&decision.status).unwrap()
        + &decision
            .event
            .as_ref()
            .map(|e| e.message.clone())
            .unwrap_or_default();
    assert!(!text.contains("hunter2"), "{text}");
    assert_eq!(decision.event.unwrap().reason, "ImageBuildInvalid");
}

#[test]
fn other_architectures_formats_and_a_missing_ramdisk_are_configuration_errors() {
    let h = host("inspecting", json!({"architecture": "aarch64"}));
    let image = image_for(&h);
    let d = decide(&image, &found(b"{}"));
    assert_eq!(d.event.unwrap().reason, "ConfigurationError");
    let mut iso_only = image_for(&host("inspecting", json!({})));
    iso_only.spec.accept_formats = vec![PreprovisioningImageFormat::Iso];
    let d = decide(&iso_only, &found(b"{}"));
    assert_eq!(d.event.unwrap().reason, "ConfigurationError");
    let no_base = Server {
        base_ramdisk: false,
        ..server()
    };
    let d = decide_on(&image_for(&host("inspecting", json!({}))), &no_base);
    assert!(d.event.unwrap().message.contains("BMO_IMAGES_DIR"));
}

#[tokio::test]
async fn the_host_writes_its_image_once_and_waits_until_it_is_ready() {
    let store = MemoryStore::default();
    let h = host("inspecting", json!({}));
    let default = DeployRamdisk {
        kernel_url: Some("http://k".into()),
        ramdisk_url: Some("http://r".into()),
        ..DeployRamdisk::default()
    };
    let first = host_side::deploy_ramdisk(&h, &store, &default)
        .await
        .unwrap();
    assert!(matches!(first, ImageUse::Pending(_)));
    let written = store.stored::<PreprovisioningImage>("ns", "h").unwrap();
    assert_eq!(written.spec, host_side::expected_spec(&h));
    let version = written.metadata.resource_version.clone();
    let second = host_side::deploy_ramdisk(&h, &store, &default)
        .await
        .unwrap();
    assert!(matches!(second, ImageUse::Pending(_)));
    assert_eq!(
        store
            .stored::<PreprovisioningImage>("ns", "h")
            .unwrap()
            .metadata
            .resource_version,
        version,
        "an image as wanted is not written again"
    );
    store.put(
        serde_json::from_value::<Secret>(json!({
            "metadata": {"name": "h-net", "namespace": "ns"},
            "data": {"networkData": "e30="},
        }))
        .unwrap(),
    );
    let secret_version = store
        .stored::<Secret>("ns", "h-net")
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    let network = NetworkData::Found {
        name: "h-net".into(),
        version: secret_version,
        data: Some(b"{}".to_vec()),
    };
    let decision = decide(&written, &network);
    let mut built = written.clone();
    built.status = Some(decision.status);
    store.put(built);
    let used = host_side::deploy_ramdisk(&h, &store, &default)
        .await
        .unwrap();
    assert!(
        matches!(&used, ImageUse::Ready(r) if r.ramdisk_url.as_deref() == Some(server().ramdisk_url.as_str())),
        "{used:?}"
    );
}

#[test]
fn bmo_run_takes_the_settings_beside_the_others() {
    let command = <crate::config::Config as clap::Args>::augment_args(clap::Command::new("run"))
        .no_binary_name(true);
    command.clone().debug_assert();
    let matches = command
        .try_get_matches_from([
            "--build-preprov-image",
            "--preprov-image-initrd",
            "--preprov-image-iso",
        ])
        .unwrap();
    let config =
        <crate::config::Config as clap::FromArgMatches>::from_arg_matches(&matches).unwrap();
    assert!(config.preprov_image.build_preprov_image);
    assert!(config.preprov_image.preprov_image_initrd);
    assert!(config.preprov_image.preprov_image_iso);
    assert_eq!(
        config.preprov_image.preprov_image_iso_kernel_params,
        "ipa-insecure=1"
    );
    assert_eq!(
        config.preprov_image.check(false),
        Err(super::PreprovImageSettingsError::NeedsHttp)
    );
    assert_eq!(config.preprov_image.check(true), Ok(()));
}
