//! The BareMetalSwitch controller end to end: `bmo run` with IRONIC_NETWORKING_ENABLED
//! against the real kube-apiserver, as a user holding only deploy/rbac's rights. The
//! switches of a namespace and their credentials Secrets become the configuration
//! Secret Ironic's networking service reads, and the SSH keys Secret beside it; a
//! switch whose Secret is missing is left out and says why until the Secret appears;
//! a deleted switch leaves the file. And a HostNetworkAttachment a host's interface
//! references can be neither changed nor deleted until the reference goes.

use std::time::Duration;

use crate::support::{
    BmoProcess, bmo_run, create_bmc_secret, eventually, fake_host, installed_namespace,
    kubeconfig_with_shipped_rbac, unique_mac,
};
use bmo::api::network::IN_USE_ANNOTATION;
use bmo::api::{BareMetalHost, BareMetalSwitch, HostNetworkAttachment};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::json;

const CONFIGS: &str = "ironic-switch-configs";
const KEYS: &str = "ironic-switch-credentials";
const KEY_DIR: &str = "/etc/ironic/switch-keys";
const PASSWORD: &str = "tor-a-secret-password";
const ENABLE: &str = "tor-a-enable-secret";
const PRIVATE_KEY: &str =
    "-----BEGIN OPENSSH PRIVATE KEY-----\ntor-b-key\n-----END OPENSSH PRIVATE KEY-----\n";

async fn create_secret(client: &kube::Client, ns: &str, name: &str, data: &[(&str, &str)]) {
    let mut secret = Secret::default();
    secret.metadata.name = Some(name.to_owned());
    secret.data = Some(
        data.iter()
            .map(|(k, v)| ((*k).to_owned(), ByteString(v.as_bytes().to_vec())))
            .collect(),
    );
    Api::<Secret>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &secret)
        .await
        .expect("create Secret");
}

async fn create_switch(client: &kube::Client, ns: &str, name: &str, mac: &str, secret: &str) {
    let switch: BareMetalSwitch = serde_json::from_value(json!({
        "apiVersion": "metal3.io/v1alpha1",
        "kind": "BareMetalSwitch",
        "metadata": {"name": name},
        "spec": {
            "address": "192.0.2.1",
            "macAddress": mac,
            "driver": "generic-switch",
            "deviceType": "netmiko_cisco_ios",
            "credentials": {"name": secret}
        }
    }))
    .expect("valid BareMetalSwitch");
    Api::<BareMetalSwitch>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &switch)
        .await
        .expect("create BareMetalSwitch");
}

/// Key `key` of Secret `ns/name` as text, when both exist.
async fn secret_text(client: &kube::Client, ns: &str, name: &str, key: &str) -> Option<String> {
    let secret = Api::<Secret>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await
        .expect("read Secret")?;
    let value = secret.data?.remove(key)?;
    Some(String::from_utf8_lossy(&value.0).into_owned())
}

/// The switch's `Valid` condition: (status, reason, message).
async fn valid(client: &kube::Client, ns: &str, name: &str) -> Option<(String, String, String)> {
    let switch = Api::<BareMetalSwitch>::namespaced(client.clone(), ns)
        .get(name)
        .await
        .expect("read switch");
    switch
        .status?
        .conditions
        .into_iter()
        .find(|c| c.type_ == "Valid")
        .map(|c| (c.status, c.reason, c.message))
}

async fn wait_valid(client: &kube::Client, ns: &str, name: &str, status: &str) -> String {
    eventually(
        &format!("switch {name} Valid={status}"),
        Duration::from_secs(30),
        || async {
            match valid(client, ns, name).await {
                Some((s, _, message)) if s == status => Ok(message),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await
}

fn assert_no_credential_in_log(bmo: &BmoProcess) {
    let log = bmo.log();
    for secret in [PASSWORD, ENABLE, "tor-b-key"] {
        assert!(!log.contains(secret), "bmo logged a credential:\n{log}");
    }
}

#[tokio::test]
async fn switches_become_the_configuration_secret_ironic_networking_reads() {
    let _shared = crate::support::shared();
    let (client, ns) = installed_namespace("switches").await;
    create_secret(
        &client,
        &ns,
        "tor-a-creds",
        &[
            ("username", "admin"),
            ("password", PASSWORD),
            ("admin-password", ENABLE),
        ],
    )
    .await;
    create_secret(
        &client,
        &ns,
        "tor-b-creds",
        &[("username", "ops"), ("ssh-privatekey", PRIVATE_KEY)],
    )
    .await;
    create_switch(&client, &ns, "tor-a", "02:00:00:00:00:0a", "tor-a-creds").await;
    create_switch(&client, &ns, "tor-b", "02:00:00:00:00:0b", "tor-b-creds").await;
    create_switch(&client, &ns, "tor-c", "02:00:00:00:00:0c", "tor-c-creds").await;

    let kubeconfig = kubeconfig_with_shipped_rbac(&client).await;
    let (bmo, _health) = bmo_run(
        &ns,
        &[
            ("KUBECONFIG", kubeconfig.to_str().expect("UTF-8 path")),
            ("IRONIC_NETWORKING_ENABLED", "true"),
            ("IRONIC_SWITCH_CONFIGS_SECRET", CONFIGS),
            ("IRONIC_SWITCH_CREDENTIALS_SECRET", KEYS),
            ("IRONIC_SWITCH_CREDENTIALS_PATH", KEY_DIR),
            ("RUST_LOG", "info,bmo=debug"),
        ],
    );

    // bmo writes the configuration, then the key files: both are waited for.
    let (config, key_file) = eventually(
        "the configuration with tor-a and tor-b, and tor-b's key file",
        Duration::from_secs(60),
        || async {
            let config = secret_text(&client, &ns, CONFIGS, "switch-configs.conf").await;
            let key_file = secret_text(&client, &ns, KEYS, "02-00-00-00-00-0b.key").await;
            match (config, key_file) {
                (Some(text), Some(key)) if text.contains("[switch:tor-b]") => Ok((text, key)),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
    let section = |name: &str| {
        let start = config
            .find(&format!("[switch:{name}]"))
            .unwrap_or_else(|| panic!("no section for {name}:\n{config}"));
        let rest = &config[start..];
        rest[..rest.find("\n\n").unwrap_or(rest.len())].to_owned()
    };
    assert_eq!(
        section("tor-a"),
        format!(
            "[switch:tor-a]\naddress=192.0.2.1\nmac_address=02:00:00:00:00:0a\n\
             driver_type=generic-switch\ndevice_type=netmiko_cisco_ios\nusername=admin\n\
             password={PASSWORD}\nenable_secret={ENABLE}"
        )
    );
    assert_eq!(
        section("tor-b"),
        format!(
            "[switch:tor-b]\naddress=192.0.2.1\nmac_address=02:00:00:00:00:0b\n\
             driver_type=generic-switch\ndevice_type=netmiko_cisco_ios\nusername=ops\n\
             key_file={KEY_DIR}/02-00-00-00-00-0b.key"
        )
    );
    assert!(!config.contains("tor-c"), "{config}");
    assert_eq!(key_file, PRIVATE_KEY);
    wait_valid(&client, &ns, "tor-a", "True").await;
    wait_valid(&client, &ns, "tor-b", "True").await;
    let why = wait_valid(&client, &ns, "tor-c", "False").await;
    assert!(
        why.contains(&format!("{ns}/tor-c-creds not found")),
        "{why}"
    );
    assert_eq!(
        valid(&client, &ns, "tor-c")
            .await
            .map(|(_, reason, _)| reason)
            .as_deref(),
        Some("CredentialError")
    );

    // The missing Secret appears: tor-c joins the file and becomes valid.
    create_secret(
        &client,
        &ns,
        "tor-c-creds",
        &[("username", "u"), ("password", "p")],
    )
    .await;
    wait_valid(&client, &ns, "tor-c", "True").await;
    eventually(
        "tor-c in the configuration",
        Duration::from_secs(30),
        || async {
            match secret_text(&client, &ns, CONFIGS, "switch-configs.conf").await {
                Some(text) if text.contains("[switch:tor-c]") => Ok(()),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;

    // A deleted switch leaves the file; its key leaves the keys Secret.
    Api::<BareMetalSwitch>::namespaced(client.clone(), &ns)
        .delete("tor-b", &DeleteParams::default())
        .await
        .expect("delete tor-b");
    eventually(
        "tor-b gone from both Secrets",
        Duration::from_secs(30),
        || async {
            let config = secret_text(&client, &ns, CONFIGS, "switch-configs.conf").await;
            let key = secret_text(&client, &ns, KEYS, "02-00-00-00-00-0b.key").await;
            match (&config, &key) {
                (Some(text), None)
                    if !text.contains("tor-b") && text.contains("[switch:tor-a]") =>
                {
                    Ok(())
                }
                _ => Err(format!("{config:?} / key {}", key.is_some())),
            }
        },
    )
    .await;
    assert_no_credential_in_log(&bmo);
}

#[tokio::test]
async fn networking_without_its_secrets_is_refused_naming_the_variable() {
    let _shared = crate::support::shared();
    let mut bmo = BmoProcess::start(
        &["run"],
        &[
            ("IRONIC_NETWORKING_ENABLED", "true"),
            ("IRONIC_SWITCH_CONFIGS_SECRET", CONFIGS),
        ],
    );
    let status = bmo.wait_exit(Duration::from_secs(30)).await;
    let log = bmo.log();
    assert!(!status.success(), "{log}");
    assert!(
        log.contains("IRONIC_SWITCH_CREDENTIALS_SECRET (--switch-credentials-secret) is not"),
        "{log}"
    );
    assert!(
        !log.contains("Kubernetes"),
        "refused before connecting: {log}"
    );
}

#[tokio::test]
async fn an_attachment_a_host_uses_can_be_neither_changed_nor_deleted() {
    let _shared = crate::support::shared();
    let (client, ns) = installed_namespace("attachments").await;
    let attachments: Api<HostNetworkAttachment> = Api::namespaced(client.clone(), &ns);
    let attachment: HostNetworkAttachment = serde_json::from_value(json!({
        "apiVersion": "metal3.io/v1alpha1",
        "kind": "HostNetworkAttachment",
        "metadata": {"name": "trunk"},
        "spec": {"mode": "trunk", "nativeVLAN": 100, "allowedVLANs": ["200"]}
    }))
    .expect("valid attachment");
    attachments
        .create(&PostParams::default(), &attachment)
        .await
        .expect("create attachment");
    create_bmc_secret(&client, &ns, "user-bmc", "admin", "password").await;
    let mut manifest = fake_host("user", &unique_mac());
    manifest["spec"]["online"] = json!(false);
    manifest["spec"]["networkInterfaces"] =
        json!([{"name": "eth1", "hostNetworkAttachment": {"name": "trunk"}}]);
    let host: BareMetalHost = serde_json::from_value(manifest).expect("valid host");
    let hosts: Api<BareMetalHost> = Api::namespaced(client.clone(), &ns);
    hosts
        .create(&PostParams::default(), &host)
        .await
        .expect("create host");
    let kubeconfig = kubeconfig_with_shipped_rbac(&client).await;
    let (_bmo, _health) = bmo_run(
        &ns,
        &[("KUBECONFIG", kubeconfig.to_str().expect("UTF-8 path"))],
    );
    let users = format!("{ns}/user[eth1]");
    eventually(
        "the attachment marked in use",
        Duration::from_secs(30),
        || async {
            let a = attachments.get("trunk").await.map_err(|e| e.to_string())?;
            match a.annotations().get(IN_USE_ANNOTATION) {
                Some(v) if *v == users => Ok(()),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;

    // In use: the spec cannot change, nor can the attachment be deleted; the
    // refusal names the host interface.
    let change = Patch::Merge(json!({"spec": {"nativeVLAN": 101}}));
    let refused = attachments
        .patch("trunk", &PatchParams::default(), &change)
        .await
        .expect_err("a spec change of an attachment in use is refused");
    assert!(refused.to_string().contains(&users), "{refused}");
    let refused = attachments
        .delete("trunk", &DeleteParams::default())
        .await
        .expect_err("deleting an attachment in use is refused");
    assert!(refused.to_string().contains(&users), "{refused}");
    // Labels and other metadata may still change.
    attachments
        .patch(
            "trunk",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"team": "net"}}})),
        )
        .await
        .expect("a metadata change is allowed");

    // Once the host no longer references it, it is free again.
    hosts
        .patch(
            "user",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"networkInterfaces": null}})),
        )
        .await
        .expect("drop the reference");
    eventually(
        "the attachment free again",
        Duration::from_secs(30),
        || async {
            let a = attachments.get("trunk").await.map_err(|e| e.to_string())?;
            match a.annotations().get(IN_USE_ANNOTATION) {
                None => Ok(()),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
    attachments
        .patch("trunk", &PatchParams::default(), &change)
        .await
        .expect("a free attachment's spec may change");
    attachments
        .delete("trunk", &DeleteParams::default())
        .await
        .expect("a free attachment may be deleted");
}
