//! The kube-runtime side of the host controller: what wakes a host, and the loop
//! that reconciles it.

use std::sync::Arc;
use std::time::Duration;

use futures::{FutureExt, StreamExt};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::core::PartialObjectMeta;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::{Predicate, WatchStreamExt, predicates, watcher};
use kube::{Api, ResourceExt};
use tokio::sync::broadcast;

use super::capacity::HostRank;
use super::known_hosts::ClusterHosts;
use super::node_owners::HostsOwningNodes;
use super::store::{SECRET_LABEL, Store};
use super::{Context, ReconcileError, reconcile, steady};
use crate::api::firmware::{HostFirmwareComponents, HostFirmwareSettings};
use crate::api::{BareMetalHost, ProvisioningState};
use crate::controller::runtime::backoff;
use crate::controller::runtime::conditions::conditions_fingerprint;
use crate::controller::runtime::observed::observed;
use crate::controller::runtime::shared_watch::{Feeds, Subscription, Watches};
use crate::controller::runtime::turns::Turns;
use crate::controller::runtime::watch::{
    Stopped, WatchBackoff, api_in, cached, run_until_shutdown, watch_failed,
};
use crate::metrics;
use crate::netboot::leases::{LeaseEvent, LeaseTable};
use crate::netboot::mac::MacAddr;
use crate::provisioner::Provisioner;

/// How long reconciles in flight may take to finish after the shutdown signal.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);
/// Hosts with no state yet reconciled at once, beside `BMO_CONCURRENCY`'s turns
/// (docs/performance.md, "First state"): their reconciles only write to the API
/// server (finalizer, Secret, status, event), a few tens of milliseconds each.
const NEW_HOSTS_AT_ONCE: usize = 32;

/// Runs the host controller until `shutdown` resolves.
///
/// Hosts wake on what they care about only: a new generation (spec or deletion),
/// annotations or finalizers. bmo's own status writes do not wake them, so a host in
/// an error state costs one reconcile per backoff step. A Secret wakes the hosts that
/// own it or name it as their BMC credentials (so a Secret created after its host is
/// picked up at once). A new provisioning IP wakes every host; a DHCP client wakes the
/// host with its MAC; new conditions on a HostFirmwareSettings wake its host.
pub async fn run<P: Provisioner + 'static>(
    ctx: Arc<Context<P>>,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let mut watches = Watches::new(ctx.store.client(), ctx.settings.namespace.as_deref());
    let feeds = watches.subscribe();
    let shutdown = shutdown.shared();
    futures::join!(
        watches.run(shutdown.clone()),
        run_with(ctx, feeds, shutdown)
    );
}

/// [`run`] on watches shared with other controllers.
pub async fn run_with<P: Provisioner + 'static>(
    ctx: Arc<Context<P>>,
    feeds: Feeds,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let (client, namespace) = (ctx.store.client(), ctx.settings.namespace.as_deref());
    let secrets: Api<PartialObjectMeta<Secret>> = api_in(client, namespace);
    let reader = feeds.hosts.cache();
    let labelled_secret_changes =
        labelled_secret_changes(&ctx, api_in(client, namespace), reader.clone());
    let unlabelled = format!("{}!={}", SECRET_LABEL.0, SECRET_LABEL.1);
    // The watched hosts, by MAC: bmo's DHCP server knows them, and a DHCP exchange
    // wakes the hosts with the client's MAC.
    let cluster_hosts = Arc::new(ClusterHosts::new(reader.clone(), feeds.host_events));
    // The watched hosts say which host owns which node (tenant isolation).
    let owners = HostsOwningNodes::new(reader.clone());
    ctx.provisioner.attach_node_owners(Arc::new(owners.clone()));
    let _ = ctx.node_owners.set(owners);
    if let Some(directory) = &ctx.known_hosts {
        directory.attach(cluster_hosts.clone());
    }
    let host_changes = feeds.hosts.changed(host_change_predicate());
    let known_hosts = reader.clone();
    let listed = reader.clone();
    let slot_offers = ctx.clone();
    // A host with no state yet needs only Kubernetes writes to show one.
    let turns = Arc::new(
        Turns::new(ctx.settings.concurrency, reader.clone(), move |host| {
            HostRank::of(host, &slot_offers.slots)
        })
        .with_quick_lane(NEW_HOSTS_AT_ONCE, |host| {
            host.provisioning_state() == ProvisioningState::None
        }),
    );
    let shutdown = shutdown.shared();
    // A new provisioning IP changes every node's deploy image URLs.
    let address_changes = futures::stream::unfold(ctx.deploy_images.clone(), |images| async {
        let mut images = images?;
        images.changed().await.then_some(((), Some(images)))
    });
    // A DHCP exchange of a host's NIC (hostname, leased address) wakes that host, so
    // the hardware details show it at once rather than at the next steady poll.
    let dhcp_clients = lease_clients(ctx.leases.as_ref())
        .flat_map(move |mac| futures::stream::iter(cluster_hosts.hosts_with(&mac)));
    // A freed provisioning slot wakes the host next in line for it.
    let reranked = turns.clone();
    let slot_takers = freed_slots(ctx.slots.freed()).inspect(move |host| reranked.rerank(host));
    // A firmware resource judged anew wakes its host (see `firmware_judged`).
    let firmware_changes = firmware_judged(&ctx, feeds.settings, feeds.components);
    // Hosts at rest whose node changed behind bmo's back (one list of nodes per
    // steady interval).
    let steady_changes = steady::changed_hosts(ctx.clone(), ctx.settings.steady_poll);
    let reconciling = Controller::for_shared_stream(host_changes, reader)
        .reconcile_all_on(address_changes)
        .reconcile_on(slot_takers)
        .reconcile_on(dhcp_clients)
        .reconcile_on(firmware_changes)
        .reconcile_on(labelled_secret_changes)
        .reconcile_on(steady_changes)
        .watches(
            secrets,
            watcher::Config::default().labels(&unlabelled),
            move |secret| hosts_using_secret(&known_hosts, &secret.metadata),
        )
        .trigger_backoff(WatchBackoff::default())
        // No limit here: the reconciles that fall due wait for their turn in `turns`.
        .with_config(kube::runtime::controller::Config::default().concurrency(0))
        .graceful_shutdown_on(shutdown.clone())
        .run(
            turns.reconciler(shutdown.clone(), |host, ctx| {
                observed("baremetalhost", reconcile(host, ctx))
            }),
            error_policy,
            ctx,
        )
        .for_each(|result| async move { report_reconcile(result) });
    report_stopped(run_until_shutdown(reconciling, shutdown, &listed, SHUTDOWN_GRACE).await);
}

/// Logs how the host controller stopped, unless every reconcile finished.
fn report_stopped(stopped: Stopped) {
    match stopped {
        Stopped::Finished => {}
        Stopped::BeforeFirstList => {
            tracing::info!("host controller stopped before its first list of hosts succeeded");
        }
        Stopped::GraceRanOut => {
            tracing::warn!(grace = ?SHUTDOWN_GRACE, "host controller stopped before its reconciles finished");
        }
    }
}

/// The hosts to wake as the Secrets bmo labelled change. Those Secrets are cached
/// whole (the BMC credentials are read at every reconcile); the others are watched
/// by metadata only, to wake a host whose Secret appears or changes before bmo
/// labels it. A change is reflected in the cache before it wakes the hosts.
fn labelled_secret_changes<P: Provisioner + 'static>(
    ctx: &Context<P>,
    labelled_secrets: Api<Secret>,
    hosts: reflector::Store<BareMetalHost>,
) -> impl futures::Stream<Item = ObjectRef<BareMetalHost>> + use<P> {
    let labelled = format!("{}={}", SECRET_LABEL.0, SECRET_LABEL.1);
    let (secret_cache, secret_events) = cached(
        labelled_secrets,
        watcher::Config::default().labels(&labelled),
        "labelled Secrets",
    );
    ctx.store.cache_labelled_secrets(secret_cache);
    secret_events
        .touched_objects()
        .filter_map(|secret| futures::future::ready(secret.ok()))
        .flat_map(move |secret| futures::stream::iter(hosts_using_secret(&hosts, &secret.metadata)))
}

/// A HostFirmwareSettings or HostFirmwareComponents judged anew (its conditions
/// changed) may ask an available host to prepare again: each wakes the host of its
/// name at once, rather than at the next steady poll. The caches go to the context.
fn firmware_judged<P: Provisioner>(
    ctx: &Context<P>,
    settings: Subscription<HostFirmwareSettings>,
    components: Subscription<HostFirmwareComponents>,
) -> impl futures::Stream<Item = ObjectRef<BareMetalHost>> + Send + use<P> {
    let _ = ctx.firmware_cache.set(settings.cache());
    let _ = ctx.components_cache.set(components.cache());
    futures::stream::select(
        settings
            // A change judged valid asks an available host to prepare again, at
            // once rather than at its next steady poll.
            .changed(|settings: &HostFirmwareSettings| {
                conditions_fingerprint(settings.status.iter().flat_map(|s| &s.conditions))
            })
            .filter_map(|judged| async move { same_name(judged.as_ref()) }),
        components
            .changed(|components: &HostFirmwareComponents| {
                conditions_fingerprint(components.status.iter().flat_map(|s| &s.conditions))
            })
            .filter_map(|judged| async move { same_name(judged.as_ref()) }),
    )
}

/// Logs how a reconcile ended, or that the watch of Secrets (the host controller's
/// one `.watches`) failed.
fn report_reconcile<T, E: std::fmt::Display>(
    result: Result<T, kube::runtime::controller::Error<E, watcher::Error>>,
) {
    match result {
        Ok(_) => {}
        Err(kube::runtime::controller::Error::QueueError(e)) => watch_failed("Secrets", &e),
        Err(e) => tracing::debug!(error = %e, "reconcile did not finish"),
    }
}

/// The hosts (`namespace/name`) a provisioning slot was freed for.
fn freed_slots(
    freed: broadcast::Receiver<String>,
) -> impl futures::Stream<Item = ObjectRef<BareMetalHost>> + use<> {
    futures::stream::unfold(freed, |mut freed| async {
        loop {
            match freed.recv().await {
                Ok(key) => {
                    let Some((ns, name)) = key.split_once('/') else {
                        continue;
                    };
                    return Some((ObjectRef::new(name).within(ns), freed));
                }
                // A missed wake only delays that host to its next look.
                Err(broadcast::error::RecvError::Lagged(_)) => {}
                Err(broadcast::error::RecvError::Closed) => return None,
            }
        }
    })
}

/// The hosts that own the Secret `secret` or name it as their BMC credentials.
fn hosts_using_secret(
    hosts: &reflector::Store<BareMetalHost>,
    secret: &ObjectMeta,
) -> Vec<ObjectRef<BareMetalHost>> {
    let ns = secret.namespace.clone().unwrap_or_default();
    let name = secret.name.as_deref().unwrap_or_default();
    let mut wake: Vec<ObjectRef<BareMetalHost>> = secret
        .owner_references
        .iter()
        .flatten()
        .filter(|o| o.kind == "BareMetalHost")
        .map(|o| ObjectRef::new(&o.name).within(&ns))
        .collect();
    wake.extend(
        hosts
            .state()
            .iter()
            .filter(|h| h.namespace().as_deref() == Some(ns.as_str()))
            .filter(|h| {
                let spec = &h.spec;
                spec.bmc
                    .as_ref()
                    .is_some_and(|b| b.credentials_name == name)
                    || spec.preprovisioning_network_data_name.as_deref() == Some(name)
            })
            .map(|h| ObjectRef::from_obj(h.as_ref())),
    );
    wake
}

/// The host of the same name as a firmware object.
fn same_name<K: ResourceExt>(object: &K) -> Option<ObjectRef<BareMetalHost>> {
    Some(ObjectRef::<BareMetalHost>::new(&object.name_any()).within(&object.namespace()?))
}

/// The MACs of DHCP clients as bmo's DHCP server sees them; empty without one.
fn lease_clients(leases: Option<&LeaseTable>) -> impl futures::Stream<Item = MacAddr> + use<> {
    let events = leases.map(LeaseTable::subscribe);
    futures::stream::unfold(events, |events| async {
        let mut events = events?;
        loop {
            match events.recv().await {
                Ok(LeaseEvent::NewClient(mac) | LeaseEvent::Bound(mac, _)) => {
                    return Some((mac, Some(events)));
                }
                // Missed events only delay those hosts to their next poll.
                Err(broadcast::error::RecvError::Lagged(_)) => {}
                Err(broadcast::error::RecvError::Closed) => return None,
            }
        }
    })
}

/// The hosts that boot from `mac` or have a NIC with it (what the index of
/// [`ClusterHosts`] answers).
#[cfg(test)]
pub(super) fn hosts_with_mac(
    hosts: &[Arc<BareMetalHost>],
    mac: &MacAddr,
) -> Vec<ObjectRef<BareMetalHost>> {
    super::known_hosts::index_by_mac(hosts)
        .remove(mac)
        .unwrap_or_default()
}

/// The changes that wake a host: its generation (spec, deletion), annotations and
/// finalizers; not its status, which bmo writes itself.
pub(super) fn host_change_predicate() -> impl Predicate<BareMetalHost> + Send + Sync + 'static {
    predicates::generation
        .combine(predicates::annotations)
        .combine(predicates::finalizers)
}

fn error_policy<P: Provisioner, S: Store>(
    host: Arc<BareMetalHost>,
    error: &ReconcileError,
    ctx: Arc<Context<P, S>>,
) -> Action {
    tracing::warn!(host = %host.namespaced_name(), %error, "reconcile failed; retrying");
    ctx.metrics.count(metrics::Event::ReconcileError);
    let count = host
        .status
        .as_ref()
        .map(|s| s.error_count)
        .unwrap_or(0)
        .max(1);
    Action::requeue(backoff(count, ctx.settings.max_backoff).min(Duration::from_secs(30)))
}
