//! Leader election: of two `bmo run` with `BMO_LEADER_ELECTION=true`, one reconciles
//! and the other waits; when the leader is killed the standby takes the Lease over and
//! carries on; a leader stopped with SIGTERM hands the Lease back at once.

use std::time::{Duration, Instant};

use bmo::api::{BareMetalHost, ProvisioningState};
use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;

use crate::support::{BmoProcess, Stack, bmo_run, create_fake_host, eventually, new_namespace};

fn start_candidate(ns: &str, pod: &str) -> BmoProcess {
    bmo_run(
        ns,
        &[
            ("POD_NAMESPACE", ns),
            ("POD_NAME", pod),
            ("BMO_LEADER_ELECTION", "true"),
            ("LEASE_DURATION_SECONDS", "4"),
            ("RENEW_DEADLINE_SECONDS", "3"),
            ("RETRY_PERIOD_SECONDS", "1"),
        ],
    )
    .0
}

async fn holder(leases: &Api<Lease>) -> Result<String, String> {
    let lease = leases
        .get_opt(bmo::leader::LEASE_NAME)
        .await
        .map_err(|e| e.to_string())?
        .ok_or("no Lease yet")?;
    Ok(lease
        .spec
        .and_then(|s| s.holder_identity)
        .unwrap_or_default())
}

async fn wait_provisioned(hosts: &Api<BareMetalHost>, name: &str, logs: &[&BmoProcess]) {
    eventually(
        &format!("{name} to be provisioned"),
        Duration::from_secs(180),
        || async {
            let h = hosts.get(name).await.map_err(|e| e.to_string())?;
            if h.provisioning_state() == ProvisioningState::Provisioned {
                Ok(())
            } else {
                let tails: Vec<String> = logs
                    .iter()
                    .map(|b| {
                        b.log()
                            .lines()
                            .rev()
                            .take(3)
                            .collect::<Vec<_>>()
                            .join(" | ")
                    })
                    .collect();
                Err(format!("{}; logs: {tails:?}", h.provisioning_state()))
            }
        },
    )
    .await;
}

#[tokio::test]
async fn one_leader_reconciles_and_the_standby_takes_over_when_it_dies() {
    let _shared = crate::support::shared();
    let stack = Stack::get();
    let client = stack.kube_client().await;
    bmo::api::install::install(&client, Duration::from_secs(60))
        .await
        .expect("install CRDs");
    let ns = new_namespace(&client, "leader").await;
    let leases: Api<Lease> = Api::namespaced(client.clone(), &ns);
    let hosts: Api<BareMetalHost> = Api::namespaced(client.clone(), &ns);

    let first = start_candidate(&ns, "bmo-a");
    let second = start_candidate(&ns, "bmo-b");
    let leader_pod = eventually("a leader", Duration::from_secs(30), || async {
        let holder = holder(&leases).await?;
        holder
            .split('_')
            .next()
            .filter(|p| !p.is_empty())
            .map(str::to_owned)
            .ok_or(holder)
    })
    .await;
    let (mut leader, mut standby) = if leader_pod == "bmo-a" {
        (first, second)
    } else {
        (second, first)
    };
    eventually("the standby to wait", Duration::from_secs(15), || async {
        if standby.log().contains("another instance leads; waiting") {
            Ok(())
        } else {
            Err(standby.log())
        }
    })
    .await;

    create_fake_host(&client, &ns, "before-failover").await;
    wait_provisioned(&hosts, "before-failover", &[&leader, &standby]).await;
    assert!(
        !standby.log().contains("state changed"),
        "the standby reconciled hosts:\n{}",
        standby.log()
    );

    // The leader dies without releasing the Lease: the standby waits out the lease
    // duration, takes over, and reconciles a host created meanwhile.
    leader.signal("KILL");
    let killed = Instant::now();
    leader.wait_exit(Duration::from_secs(10)).await;
    create_fake_host(&client, &ns, "after-failover").await;
    eventually("the standby to lead", Duration::from_secs(30), || async {
        if standby.log().contains("became the leader") {
            Ok(())
        } else {
            Err(holder(&leases).await.unwrap_or_else(|e| e))
        }
    })
    .await;
    let takeover = killed.elapsed();
    println!("standby took over {takeover:?} after the leader was killed");
    assert!(
        takeover >= Duration::from_secs(3),
        "took the Lease before it expired ({takeover:?})"
    );
    wait_provisioned(&hosts, "after-failover", &[&standby]).await;
    let before = hosts.get("before-failover").await.expect("get host");
    assert_eq!(before.provisioning_state(), ProvisioningState::Provisioned);

    // A leader stopped gracefully gives the Lease back.
    standby.signal("TERM");
    let status = standby.wait_exit(Duration::from_secs(30)).await;
    assert!(status.success(), "exit {status}: {}", standby.log());
    assert!(standby.log().contains("leadership released"));
    assert_eq!(holder(&leases).await.expect("lease"), "");
}
