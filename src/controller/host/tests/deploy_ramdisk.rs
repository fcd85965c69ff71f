//! The deploy ramdisk a host boots: bmo's own images on the provisioning IP, the
//! settings' URLs, the host's PreprovisioningImage.

use super::*;
use crate::api::PreprovisioningImage;

fn address(ip: &str) -> crate::netboot::address::Choice {
    crate::netboot::address::Choice {
        ip: ip.parse().expect("IP"),
        interface: Some("prov0".into()),
        prefix_len: Some(24),
        reason: "test".into(),
    }
}

#[tokio::test]
async fn the_deploy_ramdisk_follows_the_provisioning_ip_at_the_next_reconcile() {
    let (moved, address_rx) = tokio::sync::watch::channel(address("10.0.0.1"));
    let mut ctx = site("m", json!({}));
    ctx.deploy_images = Some(crate::netboot::DeployImages::new(address_rx, 6180));
    drive(&ctx, "m", settled).await;
    let ramdisk = |ctx: &TestContext| {
        let record = ctx.provisioner.host("ns~m").expect("registered");
        (
            record.deploy_ramdisk.kernel_url,
            record.deploy_ramdisk.ramdisk_url,
        )
    };
    assert_eq!(
        ramdisk(&ctx),
        (
            Some("http://10.0.0.1:6180/images/ironic-python-agent.kernel".into()),
            Some("http://10.0.0.1:6180/images/ironic-python-agent.initramfs".into())
        )
    );
    moved.send(address("10.0.0.2")).expect("receiver alive");
    step(&ctx, "m").await;
    assert_eq!(
        ramdisk(&ctx),
        (
            Some("http://10.0.0.2:6180/images/ironic-python-agent.kernel".into()),
            Some("http://10.0.0.2:6180/images/ironic-python-agent.initramfs".into())
        )
    );
}

#[tokio::test]
async fn deploy_image_urls_set_in_the_settings_win_over_bmo_s_own() {
    let (_moved, address_rx) = tokio::sync::watch::channel(address("10.0.0.1"));
    let mut ctx = site("s", json!({}));
    ctx.settings.deploy_ramdisk.kernel_url = Some("http://images/k".into());
    ctx.deploy_images = Some(crate::netboot::DeployImages::new(address_rx, 6180));
    drive(&ctx, "s", in_state(State::Inspecting)).await;
    let record = ctx.provisioner.host("ns~s").expect("registered");
    assert_eq!(
        record.deploy_ramdisk.kernel_url.as_deref(),
        Some("http://images/k")
    );
    assert_eq!(
        record.deploy_ramdisk.ramdisk_url.as_deref(),
        Some("http://10.0.0.1:6180/images/ironic-python-agent.initramfs")
    );
}

#[tokio::test]
async fn with_preprovisioning_images_a_host_inspects_only_once_its_image_is_ready() {
    use crate::controller::preprov_image::build;
    let mut ctx = site("p", json!({"preprovisioningNetworkDataName": "p-net"}));
    ctx.preprovisioning_images = true;
    ctx.store
        .put(network_data_secret("p-net", r#"{"links": []}"#));
    drive(&ctx, "p", in_state(State::Inspecting)).await;
    for _ in 0..3 {
        assert_eq!(step(&ctx, "p").await, Next::After(Duration::from_secs(2)));
    }
    assert_eq!(stored_state(&ctx, "p"), State::Inspecting);
    let mut image = ctx
        .store
        .stored::<PreprovisioningImage>(NS, "p")
        .expect("the host wrote its image");
    assert_eq!(image.metadata.generation, Some(1), "written once");

    // The builder makes it ready; the next reconcile registers its URLs and inspects.
    let version = ctx
        .store
        .stored::<Secret>(NS, "p-net")
        .and_then(|s| s.metadata.resource_version)
        .expect("version");
    let server = build::Server {
        initrd: true,
        iso: None,
        base_ramdisk: true,
        base_ramdisk_path: "/images/ironic-python-agent.initramfs".into(),
        kernel_url: "http://10.0.0.9:6180/images/ironic-python-agent.kernel".into(),
        ramdisk_url: format!(
            "http://10.0.0.9:6180/preprovisioning/ns/p/{version}/ironic-python-agent.initramfs"
        ),
    };
    let network = build::NetworkData::Found {
        name: "p-net".into(),
        version,
        data: None,
    };
    let now =
        k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(k8s_openapi::jiff::Timestamp::now());
    let decision = build::decide(
        &image,
        &network,
        &server,
        crate::api::images::controller_architecture(),
        &now,
    );
    image.status = Some(decision.status);
    ctx.store.put(image);
    step(&ctx, "p").await;
    let record = ctx.provisioner.host("ns~p").expect("registered");
    assert_eq!(record.deploy_ramdisk.ramdisk_url, Some(server.ramdisk_url));
    assert_eq!(record.deploy_ramdisk.kernel_url, Some(server.kernel_url));
    drive(&ctx, "p", in_state(State::Available)).await;
}
