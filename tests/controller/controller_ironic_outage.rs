//! Ironic stops answering while a host waits, available: the host's status gets a
//! `ProvisionerReachable=False` condition naming Ironic's endpoint (without the user
//! name and password the endpoint setting carries),
//! the host's error fields and `errorCount` stay as they were, and once Ironic is back
//! the condition goes within seconds and the host provisions.

use std::time::{Duration, Instant};

use bmo::api::{BareMetalHost, OperationalStatus, ProvisioningState};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::Api;
use kube::api::{Patch, PatchParams};

use crate::support::{PrivateIronic, Stack, bmo_run, create_bmc_secret, eventually, new_namespace};

const REACHABLE: &str = "ProvisionerReachable";
const PASSWORD: &str = "pa55-in-the-url";

fn reachable_condition(host: &BareMetalHost) -> Option<Condition> {
    host.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == REACHABLE)
        .cloned()
}

#[tokio::test]
async fn host_status_says_ironic_cannot_be_reached_and_clears_when_it_returns() {
    // Stops and restarts an Ironic and times the condition's coming and going: alone.
    let _alone = crate::support::exclusive("controller_ironic_outage");
    let stack = Stack::get();
    let client = stack.kube_client().await;
    bmo::api::install::install(&client, Duration::from_secs(60))
        .await
        .expect("install CRDs");
    let ns = new_namespace(&client, "ironic-outage").await;

    let ironic = PrivateIronic::start("outage", &[]);
    let endpoint = ironic.endpoint.to_string();
    // A user name and password in the endpoint (this Ironic ignores them) are never
    // shown.
    let mut with_userinfo = ironic.endpoint.clone();
    with_userinfo.set_username("ops").unwrap();
    with_userinfo.set_password(Some(PASSWORD)).unwrap();
    let (bmo, _health) = bmo_run(
        &ns,
        &[
            ("IRONIC_ENDPOINT", with_userinfo.as_str()),
            ("RUST_LOG", "info,bmo=debug"),
        ],
    );
    let hosts: Api<BareMetalHost> = Api::namespaced(client.clone(), &ns);

    // A host without an image waits in `available`, polled once a minute.
    create_bmc_secret(&client, &ns, "node-0-bmc", "admin", "password").await;
    let mut spec = crate::support::fake_host("node-0", &crate::support::unique_mac());
    let image = spec["spec"]
        .as_object_mut()
        .unwrap()
        .remove("image")
        .unwrap();
    let host: BareMetalHost = serde_json::from_value(spec).unwrap();
    hosts.create(&Default::default(), &host).await.unwrap();
    let state_of = |hosts: Api<BareMetalHost>, wanted: ProvisioningState| async move {
        let h = hosts.get("node-0").await.map_err(|e| e.to_string())?;
        if h.provisioning_state() == wanted {
            Ok(h)
        } else {
            Err(format!("{:?}", h.status))
        }
    };
    let h = eventually("the host available", Duration::from_secs(180), || {
        state_of(hosts.clone(), ProvisioningState::Available)
    })
    .await;
    assert_eq!(reachable_condition(&h), None, "Ironic is there");

    let stopped = Instant::now();
    ironic.stop();
    let down = eventually(
        "the host to say Ironic cannot be reached",
        Duration::from_secs(120),
        || {
            let hosts = hosts.clone();
            async move {
                let h = hosts.get("node-0").await.map_err(|e| e.to_string())?;
                match reachable_condition(&h) {
                    Some(c) => Ok((h, c)),
                    None => Err(format!("{:?}", h.status.map(|s| s.conditions))),
                }
            }
        },
    )
    .await;
    println!("condition set {:?} after Ironic stopped", stopped.elapsed());
    let (h, condition) = down;
    println!("condition: {condition:?}");
    assert_eq!(condition.status, "False");
    assert_eq!(condition.reason, "IronicUnreachable");
    assert!(
        condition
            .message
            .contains(&format!("cannot reach Ironic at {endpoint}")),
        "{condition:?}"
    );
    assert!(
        !condition.message.contains(PASSWORD) && !condition.message.contains("ops@"),
        "{condition:?}"
    );
    assert_eq!(h.provisioning_state(), ProvisioningState::Available);
    let status = h.status.unwrap();
    assert_eq!(status.error_count, 0, "{status:?}");
    assert_eq!(status.operational_status, OperationalStatus::Ok);

    // While Ironic stays away, the host's look again is bounded and does not count as
    // its error.
    let log_mark = bmo.log().len();
    eventually(
        "two more attempts to reach Ironic",
        Duration::from_secs(40),
        || async {
            let log = bmo.log();
            let since = log.get(log_mark..).unwrap_or_default();
            match since.matches("cannot reach Ironic at").count() {
                n if n >= 2 => Ok(()),
                n => Err(format!("{n} attempts")),
            }
        },
    )
    .await;
    let h = hosts.get("node-0").await.unwrap();
    assert_eq!(h.status.unwrap().error_count, 0);

    ironic.restart();
    let back = Instant::now();
    eventually(
        "the condition to clear once Ironic answers",
        Duration::from_secs(30),
        || {
            let hosts = hosts.clone();
            async move {
                let h = hosts.get("node-0").await.map_err(|e| e.to_string())?;
                match reachable_condition(&h) {
                    None => Ok(()),
                    Some(c) => Err(c.message),
                }
            }
        },
    )
    .await;
    println!(
        "condition cleared {:?} after Ironic returned",
        back.elapsed()
    );

    // The host goes on: given an image, it is provisioned.
    hosts
        .patch(
            "node-0",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"image": image}})),
        )
        .await
        .unwrap();
    let h = eventually("the host provisioned", Duration::from_secs(180), || {
        state_of(hosts.clone(), ProvisioningState::Provisioned)
    })
    .await;
    println!("provisioned {:?} after Ironic returned", back.elapsed());
    assert_eq!(h.status.unwrap().error_count, 0);
    let log = bmo.log();
    assert!(log.contains("cannot reach Ironic at"), "{log}");
    assert!(!log.contains(PASSWORD), "{log}");
    assert!(!log.contains("panicked"), "{log}");
}
