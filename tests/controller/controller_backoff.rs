//! Failing hosts back off as upstream does, and do not starve healthy neighbours:
//! `bmo run` against the real kube-apiserver and Ironic with 20 hosts whose BMC Secret
//! is missing and two healthy hosts in the same namespace.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use bmo::api::{BareMetalHost, ProvisioningState};
use kube::api::{ListParams, PostParams};
use kube::{Api, ResourceExt};

use crate::support::{
    Stack, bmo_run, create_fake_host, eventually, fake_host, new_namespace, unique_mac,
};

const FAILING: usize = 20;

/// `metal3_reconcile_total` per host, from bmo's `/metrics`.
async fn reconciles(health: &str) -> BTreeMap<String, f64> {
    let text = reqwest::get(format!("http://{health}/metrics"))
        .await
        .expect("GET /metrics")
        .text()
        .await
        .expect("metrics body");
    text.lines()
        .filter(|l| l.starts_with("metal3_reconcile_total{"))
        .filter_map(|l| {
            let host = l.split("host=\"").nth(1)?.split('"').next()?.to_owned();
            let value = l.rsplit(' ').next()?.parse().ok()?;
            Some((host, value))
        })
        .collect()
}

fn max_for_broken(counts: &BTreeMap<String, f64>) -> Option<f64> {
    counts
        .iter()
        .filter(|(host, _)| host.starts_with("broken-"))
        .map(|(_, n)| *n)
        .reduce(f64::max)
}

/// `errorCount` of each host named `broken-*`.
async fn error_counts(hosts: &Api<BareMetalHost>) -> Result<Vec<(String, i64)>, String> {
    let list = hosts
        .list(&ListParams::default())
        .await
        .map_err(|e| e.to_string())?;
    Ok(list
        .iter()
        .filter(|h| h.name_any().starts_with("broken-"))
        .map(|h| (h.name_any(), h.status.as_ref().map_or(0, |s| s.error_count)))
        .collect())
}

/// When the failing hosts' first errors came, from the test's start: none before
/// `created` (the first host was created then), all by `recorded`.
struct FirstErrors {
    created: Duration,
    recorded: Duration,
}

/// Creates `count` hosts `broken-N` whose BMC Secret does not exist, then waits until
/// each has recorded its first error.
async fn create_hosts_without_secret(
    hosts: &Api<BareMetalHost>,
    count: usize,
    start: Instant,
) -> FirstErrors {
    let created = start.elapsed();
    for i in 0..count {
        let host: BareMetalHost =
            serde_json::from_value(fake_host(&format!("broken-{i}"), &unique_mac()))
                .expect("valid host");
        hosts
            .create(&PostParams::default(), &host)
            .await
            .expect("create host");
    }
    // Every failing host records its first error at once.
    eventually(
        "a first error on every failing host",
        Duration::from_secs(30),
        || async {
            let counts = error_counts(hosts).await?;
            (counts.len() == count && counts.iter().all(|(_, c)| *c >= 1))
                .then_some(())
                .ok_or_else(|| format!("{counts:?}"))
        },
    )
    .await;
    FirstErrors {
        created,
        recorded: start.elapsed(),
    }
}

#[tokio::test]
async fn hosts_missing_their_secret_back_off_while_healthy_hosts_provision() {
    // Counts reconciles and errors in windows of seconds: with this file's tests only, as
    // when this file was a binary of its own.
    let _alone = crate::support::exclusive("controller_backoff");
    let stack = Stack::get();
    let client = stack.kube_client().await;
    bmo::api::install::install(&client, Duration::from_secs(60))
        .await
        .expect("install CRDs");
    let ns = new_namespace(&client, "backoff").await;
    let hosts: Api<BareMetalHost> = Api::namespaced(client.clone(), &ns);
    // The default cap (600 s) leaves the first two steps, 1–2 and 2–4 minutes, uncapped.
    let (bmo, health) = bmo_run(&ns, &[("RUST_LOG", "info")]);

    let start = Instant::now();
    for name in ["healthy-0", "healthy-1"] {
        create_fake_host(&client, &ns, name).await;
    }
    let first_errors = create_hosts_without_secret(&hosts, FAILING, start).await;

    // Healthy hosts provision on time beside them.
    for name in ["healthy-0", "healthy-1"] {
        eventually(
            &format!("{name} provisioned"),
            Duration::from_secs(240),
            || async {
                let h = hosts.get(name).await.map_err(|e| e.to_string())?;
                (h.provisioning_state() == ProvisioningState::Provisioned)
                    .then_some(())
                    .ok_or_else(|| {
                        format!(
                            "{} ({})",
                            h.provisioning_state(),
                            bmo.log().lines().last().unwrap_or_default()
                        )
                    })
            },
        )
        .await;
    }

    // Until the first backoff step (at least 60 s after a host's first error, which
    // came after its creation) every failing host stays at one error. Its first
    // reconciles add the finalizer, move it to registering and find the Secret
    // missing: a handful, then nothing.
    let step_one = first_errors.created + Duration::from_secs(55);
    if start.elapsed() < step_one {
        tokio::time::sleep(step_one - start.elapsed()).await;
    }
    let list = hosts
        .list(&ListParams::default())
        .await
        .expect("list hosts");
    let counts = reconciles(&health).await;
    println!(
        "backoff: after {:?}, at most {:?} reconciles per failing host",
        start.elapsed(),
        max_for_broken(&counts)
    );
    for h in list.iter().filter(|h| h.name_any().starts_with("broken-")) {
        let status = h.status.clone().unwrap_or_default();
        assert_eq!(
            status.error_count,
            1,
            "{} before its first backoff step",
            h.name_any()
        );
        let n = counts.get(&h.name_any()).copied().unwrap_or_default();
        assert!(
            n <= 6.0,
            "{}: {n} reconciles in the first minute",
            h.name_any()
        );
    }

    // The second error comes 1–2 minutes after the first, the third not before 2
    // more minutes: 130 s after the last first error every failing host has exactly
    // two (the earliest host's third comes at least 180 s after its creation).
    let observe = first_errors.recorded + Duration::from_secs(130);
    if start.elapsed() < observe {
        tokio::time::sleep(observe - start.elapsed()).await;
    }
    let list = hosts
        .list(&ListParams::default())
        .await
        .expect("list hosts");
    let counts = reconciles(&health).await;
    println!(
        "backoff: after {:?}, at most {:?} reconciles per failing host",
        start.elapsed(),
        max_for_broken(&counts)
    );
    for h in list.iter().filter(|h| h.name_any().starts_with("broken-")) {
        let status = h.status.clone().unwrap_or_default();
        assert_eq!(
            status.error_count,
            2,
            "{} after one backoff step",
            h.name_any()
        );
        let n = counts.get(&h.name_any()).copied().unwrap_or_default();
        assert!(
            n <= 7.0,
            "{}: {n} reconciles after one backoff step",
            h.name_any()
        );
    }
}

/// `BMO_MAX_BACKOFF` caps every step: with an 8 s cap a failing host is looked at every
/// 4–8 s (the cap less up to half of it) instead of after 1–2, 2–4, 4–8… minutes.
#[tokio::test]
async fn bmo_max_backoff_caps_the_wait_between_retries() {
    // Counts reconciles and errors in windows of seconds: with this file's tests only, as
    // when this file was a binary of its own.
    let _alone = crate::support::exclusive("controller_backoff");
    const CAPPED: usize = 5;
    const CAP_SECS: u64 = 8;
    let stack = Stack::get();
    let client = stack.kube_client().await;
    bmo::api::install::install(&client, Duration::from_secs(60))
        .await
        .expect("install CRDs");
    let ns = new_namespace(&client, "backoff-cap").await;
    let hosts: Api<BareMetalHost> = Api::namespaced(client.clone(), &ns);
    let cap = CAP_SECS.to_string();
    let (_bmo, health) = bmo_run(&ns, &[("RUST_LOG", "info"), ("BMO_MAX_BACKOFF", &cap)]);

    let start = Instant::now();
    let first_errors = create_hosts_without_secret(&hosts, CAPPED, start).await;

    // 60 s after the last host's first error: uncapped, each host would still have one
    // error (the other test); capped at 8 s, between 1 + 60/8 and 1 + 60/4, less what
    // the reconciles themselves take.
    let observe = first_errors.recorded + Duration::from_secs(60);
    tokio::time::sleep(observe.saturating_sub(start.elapsed())).await;
    let counts = error_counts(&hosts).await.expect("list hosts");
    let reconciled = reconciles(&health).await;
    println!(
        "capped backoff ({CAP_SECS} s): after {:?}, errors per host {counts:?}, at most {:?} reconciles per host",
        start.elapsed(),
        max_for_broken(&reconciled)
    );
    for (name, count) in counts {
        assert!(
            (7..=17).contains(&count),
            "{name}: {count} errors in 60 s with a {CAP_SECS} s cap"
        );
        let n = reconciled.get(&name).copied().unwrap_or_default();
        assert!(
            n <= count as f64 + 6.0,
            "{name}: {n} reconciles for {count} errors"
        );
    }
}
