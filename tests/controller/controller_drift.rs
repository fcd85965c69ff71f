//! Changes made in Ironic behind bmo's back while a host rests: bmo's steady poll (one
//! list of nodes every `BMO_STEADY_POLL`) notices them within the interval. Power
//! switched off through Ironic's API shows in `status.poweredOn` and is switched back
//! on as `spec.online` asks (as upstream does); a node deleted from Ironic is enrolled
//! again and adopted while the host stays provisioned.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bmo::api::{BareMetalHost, ProvisioningState};
use bmo::ironic::PowerTarget;
use futures::StreamExt;
use kube::Api;
use kube::runtime::{WatchStreamExt, watcher};

use crate::support::{Stack, bmo_run, create_fake_host, eventually, new_namespace, wait_for_state};

/// The steady interval this test gives bmo (`BMO_STEADY_POLL`, seconds).
const STEADY_POLL_SECS: u64 = 5;

/// How long bmo may take to notice a change: the interval, then a reconcile or two and
/// their status writes on a machine shared with other tests.
const NOTICE: Duration = Duration::from_secs(STEADY_POLL_SECS + 15);

const HOST: &str = "drift-0";

/// Every (state, poweredOn) the host's status showed, in order, from a watch (which
/// misses no write, however quickly bmo makes the next one).
type Seen = Arc<Mutex<Vec<(ProvisioningState, bool)>>>;

fn record_statuses(hosts: Api<BareMetalHost>) -> (Seen, tokio::task::JoinHandle<()>) {
    let seen: Seen = Arc::default();
    let into = seen.clone();
    let task = tokio::spawn(async move {
        let config = watcher::Config::default().fields(&format!("metadata.name={HOST}"));
        let mut events = watcher(hosts, config).applied_objects().boxed();
        while let Some(event) = events.next().await {
            let Ok(host) = event else { continue };
            let powered_on = host.status.as_ref().is_some_and(|s| s.powered_on);
            let mut seen = into.lock().unwrap();
            let now = (host.provisioning_state(), powered_on);
            if seen.last() != Some(&now) {
                seen.push(now);
            }
        }
    });
    (seen, task)
}

#[tokio::test]
async fn power_changed_and_node_deleted_behind_bmos_back_are_noticed_within_the_steady_interval() {
    let _shared = crate::support::shared();
    let stack = Stack::get();
    let client = stack.kube_client().await;
    bmo::api::install::install(&client, Duration::from_secs(60))
        .await
        .expect("install CRDs");
    let ns = new_namespace(&client, "drift").await;
    let steady = STEADY_POLL_SECS.to_string();
    let (bmo, _health) = bmo_run(
        &ns,
        &[
            ("BMO_STEADY_POLL", steady.as_str()),
            ("RUST_LOG", "info,bmo=debug"),
        ],
    );
    let hosts: Api<BareMetalHost> = Api::namespaced(client.clone(), &ns);
    create_fake_host(&client, &ns, HOST).await;
    let host = wait_for_state(
        &hosts,
        HOST,
        ProvisioningState::Provisioned,
        Duration::from_secs(120),
    )
    .await;
    let node_id = host
        .status
        .as_ref()
        .map(|s| s.provisioning.id.clone())
        .expect("a provisioned host has a status");
    let ironic = stack.ironic().await;
    let (seen, watch) = record_statuses(hosts.clone());
    eventually("the host on, at rest", NOTICE, || async {
        let seen = seen.lock().unwrap();
        match seen.last() {
            Some((ProvisioningState::Provisioned, true)) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;

    let log_at_rest = bmo.log().len();

    // Power switched off through Ironic's API: bmo shows it, then powers the host on
    // again (spec.online is true).
    let seen_before = seen.lock().unwrap().len();
    ironic
        .set_power_state(&node_id, PowerTarget::Off, None)
        .await
        .expect("power the node off through Ironic");
    let switched_off = Instant::now();
    eventually(
        "bmo to show the power change and undo it",
        NOTICE,
        || async {
            let shown_off = seen.lock().unwrap()[seen_before..]
                .iter()
                .any(|(_, on)| !on);
            let node = ironic
                .get_node(&node_id)
                .await
                .map_err(|e| e.to_string())?
                .ok_or("the node vanished")?;
            let on = node.power_state.as_deref() == Some("power on");
            let status_on = seen.lock().unwrap().last().is_some_and(|(_, on)| *on);
            if shown_off && on && status_on {
                Ok(())
            } else {
                Err(format!(
                    "poweredOn false shown: {shown_off}; Ironic: {:?}; statuses: {:?}",
                    node.power_state,
                    seen.lock().unwrap()
                ))
            }
        },
    )
    .await;
    eprintln!(
        "drift: power off behind bmo's back shown and undone after {:.1} s",
        switched_off.elapsed().as_secs_f64()
    );

    // The node deleted from Ironic: bmo enrols it again and adopts it; the host never
    // leaves `provisioned` and records the new node.
    // Ironic deletes an active node only in maintenance, and bmo takes an active node
    // out of a maintenance nobody explains (no fault), as upstream does: when its
    // reconcile lands between the two calls, the delete is refused, so both again.
    eventually("the node deleted from Ironic", NOTICE, || async {
        ironic
            .set_maintenance(&node_id, "deleted behind bmo's back by a test")
            .await
            .map_err(|e| format!("maintenance on: {e}"))?;
        ironic
            .delete_node(&node_id)
            .await
            .map_err(|e| format!("delete: {e}"))
    })
    .await;
    let deleted = Instant::now();
    let node_name = format!("{ns}~{HOST}");
    let new_id = eventually(
        "the node enrolled again and adopted",
        NOTICE + Duration::from_secs(15),
        || async {
            let node = ironic
                .get_node(&node_name)
                .await
                .map_err(|e| e.to_string())?
                .ok_or("no node yet")?;
            let host = hosts.get(HOST).await.map_err(|e| e.to_string())?;
            let recorded = host.status.as_ref().map(|s| s.provisioning.id.clone());
            if node.provision_state() == "active" && recorded.as_deref() == Some(&node.uuid) {
                Ok(node.uuid)
            } else {
                Err(format!(
                    "node {} in {}; status.provisioning.ID {recorded:?}",
                    node.uuid,
                    node.provision_state()
                ))
            }
        },
    )
    .await;
    eprintln!(
        "drift: deleted node enrolled again and adopted after {:.1} s",
        deleted.elapsed().as_secs_f64()
    );
    assert_ne!(new_id, node_id, "a new node was made");
    watch.abort();
    let states: Vec<ProvisioningState> = seen.lock().unwrap().iter().map(|(s, _)| *s).collect();
    assert!(
        states.iter().all(|s| *s == ProvisioningState::Provisioned),
        "the host left provisioned: {states:?}"
    );
    let log = bmo.log();
    let since_rest = log.get(log_at_rest..).unwrap_or_default();
    assert!(
        !since_rest.contains("to=provisioning"),
        "the host was deployed again:\n{since_rest}"
    );
}
