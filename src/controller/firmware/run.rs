//! The kube-runtime side of the HostFirmwareSettings and HostFirmwareComponents
//! controllers.
//!
//! It reconciles BareMetalHosts (the firmware objects may not exist yet, and
//! kube-runtime only reconciles objects it has seen), each time both kinds: a host
//! wakes when its generation or its node (`status.provisioning.ID`) changes, when it
//! enters or leaves the stretches in which Ironic reads the BIOS and firmware anew
//! ([`firmware_phase`]), and when the generation of its HostFirmwareSettings or
//! HostFirmwareComponents changes (a new spec), or the owners of the latter (upstream
//! reconciles a pre-made object once its host exists), and when a HostUpdatePolicy
//! not yet owned by a host of its name is seen. bmo's own writes (statuses, the
//! objects it makes, the owners it adds) wake nothing.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use futures::future::ready;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::{WatchStreamExt, predicates, watcher};
use tracing::Instrument;

use super::state_machine::ironic_read_firmware;
use super::{FirmwareContext, FirmwareError, FirmwareStore, PROVISIONER_RETRY};
use crate::api::firmware::{
    FirmwareSchema, HostFirmwareComponents, HostFirmwareSettings, HostUpdatePolicy,
};
use crate::api::{BareMetalHost, BareMetalHostStatus, OperationalStatus, ProvisioningState};
use crate::controller::runtime::Next;
use crate::controller::runtime::controller::{self, Reconciler, fingerprint};
use crate::controller::runtime::shared_watch::Feeds;
use crate::controller::runtime::store::KubeClient;
use crate::controller::runtime::turns::Turns;
use crate::controller::runtime::watch::{api_in, cached};
use crate::provisioner::FirmwareReader;

/// What of a host matters here: its generation, its node, whether it is paused or
/// detached (upstream leaves such hosts' firmware alone), and its [`firmware_phase`]
/// (`firmware` holds the hosts' firmware objects, for [`preparing_changes_firmware`]).
fn host_node(host: &BareMetalHost, firmware: &FirmwareObjects) -> Option<u64> {
    use crate::api::host::{DETACHED_ANNOTATION, PAUSED_ANNOTATION};
    let annotations = host.annotations();
    fingerprint((
        host.metadata.generation,
        &host.metadata.uid,
        [PAUSED_ANNOTATION, DETACHED_ANNOTATION].map(|key| annotations.contains_key(key)),
        host.status.as_ref().map(|s| {
            (
                s.provisioning.id.as_str(),
                s.operational_status == OperationalStatus::Detached,
                firmware_phase(host, s, firmware),
            )
        }),
    ))
}

/// The caches of HostFirmwareSettings and HostFirmwareComponents.
type FirmwareObjects = (
    reflector::Store<HostFirmwareSettings>,
    reflector::Store<HostFirmwareComponents>,
);

/// The stretches of a host's life between which Ironic may have read its BIOS
/// settings and firmware anew: registration and inspection (Ironic reads both when
/// it verifies the node and when inspection ends), preparing that applies settings or
/// updates, servicing (its steps may), and the rest. Preparing that changes neither
/// counts as the rest: reading again after it would read what was read as it began
/// (at N = 1000, 2000 Ironic requests for nothing). Waking on every state change
/// instead cost two Ironic and five kube-apiserver requests per change and host.
fn firmware_phase(
    host: &BareMetalHost,
    status: &BareMetalHostStatus,
    firmware: &FirmwareObjects,
) -> u8 {
    if status.operational_status == OperationalStatus::Servicing {
        2
    } else if status.provisioning.state == ProvisioningState::Preparing
        && preparing_changes_firmware(host, firmware)
    {
        1
    } else if ironic_read_firmware(host) {
        3
    } else {
        0
    }
}

/// Whether preparing `host` may apply BIOS settings or firmware updates: its
/// HostFirmwareSettings or HostFirmwareComponents asks for some, or its legacy
/// `spec.firmware` does.
fn preparing_changes_firmware(
    host: &BareMetalHost,
    (settings, components): &FirmwareObjects,
) -> bool {
    let Some(namespace) = host.namespace() else {
        return true;
    };
    let name = host.name_any();
    host.spec.firmware.is_some()
        || settings
            .get(&ObjectRef::new(&name).within(&namespace))
            .is_some_and(|s| !s.spec.settings.is_empty())
        || components
            .get(&ObjectRef::new(&name).within(&namespace))
            .is_some_and(|c| !c.spec.updates.is_empty())
}

/// What of a HostFirmwareComponents matters here: its spec and its owners.
fn components_change(object: &HostFirmwareComponents) -> Option<u64> {
    let owners: Vec<_> = object.owner_references().iter().map(|o| &o.uid).collect();
    fingerprint((object.metadata.generation, owners))
}

/// A firmware object as bmo makes it: first generation, empty spec, owned by the
/// host of its name. Its creation wakes nothing (the reconcile that made it goes
/// on); a spec written later, or an object made another way, does.
fn as_made<K: ResourceExt>(object: &K, spec_empty: bool) -> bool {
    let name = object.name_any();
    spec_empty
        && object.meta().generation == Some(1)
        && object
            .owner_references()
            .iter()
            .any(|o| o.kind == "BareMetalHost" && o.name == name)
}

/// The host of the same name as a firmware object.
pub fn same_name<K: ResourceExt>(object: &K) -> Option<ObjectRef<BareMetalHost>> {
    Some(ObjectRef::<BareMetalHost>::new(&object.name_any()).within(&object.namespace()?))
}

/// Runs the HostFirmwareSettings controller until `shutdown` resolves, reconciling at
/// most `concurrency` hosts at once, on watches shared with the host controller.
pub async fn run<P: FirmwareReader + 'static>(
    ctx: Arc<FirmwareContext<P, KubeClient>>,
    concurrency: u16,
    feeds: Feeds,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let reader = feeds.hosts.cache();
    let firmware = (feeds.settings.cache(), feeds.components.cache());
    let host_changes = feeds
        .hosts
        .changed(move |host: &BareMetalHost| host_node(host, &firmware));
    ctx.store.cache(feeds.settings.cache());
    let settings_changes = feeds
        .settings
        .changed(predicates::generation)
        .filter(|s| ready(!as_made(s.as_ref(), s.spec.settings.is_empty())))
        .filter_map(|s| async move { same_name(s.as_ref()) });
    ctx.store.cache(feeds.components.cache());
    let components_changes = feeds
        .components
        .changed(components_change)
        .filter(|c| ready(!as_made(c.as_ref(), c.spec.updates.is_empty())))
        .filter_map(|c| async move { same_name(c.as_ref()) });
    let (client, namespace) = (ctx.store.client(), ctx.namespace.as_deref());
    // FirmwareSchemas wake no host; the watch only keeps the cache.
    let (schemas, schema_events) = cached(
        api_in::<FirmwareSchema>(client, namespace),
        watcher::Config::default(),
        "FirmwareSchemas",
    );
    ctx.store.cache(schemas);
    let schemas_kept = schema_events.filter_map(|_| ready(None::<ObjectRef<BareMetalHost>>));
    // A HostUpdatePolicy not owned by its host yet wakes the host of its name, which
    // adds itself to the owners (see [`super::policy`]); that write wakes nothing.
    let (policies, policy_events) = cached(
        api_in::<HostUpdatePolicy>(client, namespace),
        watcher::Config::default(),
        "HostUpdatePolicies",
    );
    ctx.store.cache(policies);
    let policy_changes = policy_events.applied_objects().filter_map(|policy| {
        ready(
            policy
                .ok()
                .filter(|policy| !super::policy::owned_by_its_host(policy))
                .and_then(|policy| same_name(&policy)),
        )
    });
    // Hosts take turns as in the host controller: with every host applied at once,
    // reads of a thousand hosts' BIOS settings are not all sent together.
    let turns = Arc::new(Turns::new(concurrency, reader.clone(), |_| ()));
    let controller = Controller::for_shared_stream(host_changes, reader)
        .reconcile_on(settings_changes)
        .reconcile_on(components_changes)
        .reconcile_on(schemas_kept)
        .reconcile_on(policy_changes);
    controller::run_in_turns(controller, ctx, turns, shutdown).await;
}

impl<P, S> Reconciler for FirmwareContext<P, S>
where
    P: FirmwareReader + 'static,
    S: FirmwareStore + 'static,
{
    type Object = BareMetalHost;
    type Error = FirmwareError;
    const ERROR_RETRY: Duration = PROVISIONER_RETRY;
    const CONFLICT_RETRY: Option<Duration> = None;

    fn kind() -> Cow<'static, str> {
        "firmware".into()
    }

    /// None: each of the three reconciles opens its own.
    fn span(_: &str, _: &str) -> tracing::Span {
        tracing::Span::none()
    }

    /// Both kinds for one host, and its HostUpdatePolicy: each is reconciled even
    /// when another could not be; the sooner look-again wins.
    async fn reconcile(&self, host: &BareMetalHost) -> Result<Action, FirmwareError> {
        let namespace = host.namespace().unwrap_or_default();
        let name = host.name_any();
        let now = Time(k8s_openapi::jiff::Timestamp::now());
        let span = tracing::info_span!("hostfirmwaresettings", %namespace, %name);
        let settings = super::reconcile(host, self, now.clone())
            .instrument(span)
            .await;
        let span = tracing::info_span!("hostfirmwarecomponents", %namespace, %name);
        let components = super::components::reconcile(host, self, now)
            .instrument(span)
            .await;
        let span = tracing::info_span!("hostupdatepolicy", %namespace, %name);
        let policy = super::policy::reconcile(host, self).instrument(span).await;
        Ok(sooner(sooner(settings?, components?), policy?).into())
    }
}

/// The sooner of two look-agains.
fn sooner(a: Next, b: Next) -> Next {
    match (a, b) {
        (Next::After(x), Next::After(y)) => Next::After(x.min(y)),
        (Next::After(x), Next::OnChange) | (Next::OnChange, Next::After(x)) => Next::After(x),
        (Next::OnChange, Next::OnChange) => Next::OnChange,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::runtime::watcher::Event;

    fn host(state: ProvisioningState) -> BareMetalHost {
        let mut host: BareMetalHost = serde_json::from_value(serde_json::json!({
            "apiVersion": "metal3.io/v1alpha1",
            "kind": "BareMetalHost",
            "metadata": {"name": "host-0", "namespace": "ns", "uid": "u0", "generation": 1},
            "spec": {"online": true},
        }))
        .unwrap();
        host.status = Some(BareMetalHostStatus::default());
        host.status.as_mut().unwrap().provisioning.state = state;
        host
    }

    #[test]
    fn preparing_is_a_stretch_of_its_own_only_when_it_changes_bios_or_firmware() {
        let (settings, mut settings_writer) = reflector::store();
        let (components, _) = reflector::store();
        let firmware = (settings, components);
        let phase = |h: &BareMetalHost| firmware_phase(h, h.status.as_ref().unwrap(), &firmware);
        let available = host(ProvisioningState::Available);
        let preparing = host(ProvisioningState::Preparing);
        assert_eq!(
            phase(&preparing),
            phase(&available),
            "nothing to apply: leaving preparing reads nothing again"
        );
        assert_ne!(
            phase(&host(ProvisioningState::Registering)),
            phase(&preparing)
        );

        let mut asks: HostFirmwareSettings = serde_json::from_value(serde_json::json!({
            "apiVersion": "metal3.io/v1alpha1",
            "kind": "HostFirmwareSettings",
            "metadata": {"name": "host-0", "namespace": "ns"},
            "spec": {"settings": {"SriovEnable": "Enabled"}},
        }))
        .unwrap();
        settings_writer.apply_watcher_event(&Event::Apply(asks.clone()));
        assert_ne!(phase(&preparing), phase(&available), "a setting to apply");
        asks.spec.settings.clear();
        settings_writer.apply_watcher_event(&Event::Apply(asks));

        let mut legacy = preparing.clone();
        legacy.spec.firmware = Some(Default::default());
        assert_ne!(phase(&legacy), phase(&available), "spec.firmware to apply");
    }
}
