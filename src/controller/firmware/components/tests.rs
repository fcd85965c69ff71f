//! Reconciler tests: the fixture provisioner and the in-memory store.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use serde_json::json;

use super::*;
use crate::api::firmware::FirmwareComponentStatus;
use crate::controller::firmware::FirmwareContext;
use crate::controller::firmware::state_machine::REQUEUE;
use crate::controller::firmware::state_machine::tests::{
    events, memory_context, now, owner_uids, test_host, upstream_status_update,
};
use crate::controller::runtime::store::MemoryObjects;
use crate::provisioner::FixtureProvisioner;

fn host(name: &str) -> BareMetalHost {
    test_host(name, &format!("node-{name}"))
}

fn bmc(version: &str) -> Vec<FirmwareComponentStatus> {
    vec![FirmwareComponentStatus {
        component: "bmc".into(),
        initial_version: "1.00".into(),
        current_version: Some(version.into()),
        ..Default::default()
    }]
}

fn context() -> FirmwareContext<FixtureProvisioner, MemoryObjects> {
    let provisioner = FixtureProvisioner::default();
    provisioner.set_firmware_components("ns~with", bmc("1.00"));
    provisioner.set_firmware_components("ns~without", Vec::new());
    memory_context(provisioner)
}

/// The HostFirmwareComponents of host `name`, as stored now.
fn components_now(store: &MemoryObjects, name: &str) -> Option<HostFirmwareComponents> {
    store.stored("ns", name)
}

/// Host `with`'s HostFirmwareComponents as `ctx` makes it, with a new spec that asks
/// for `updates`.
async fn made_asking<P: crate::provisioner::FirmwareReader>(
    ctx: &FirmwareContext<P, MemoryObjects>,
    updates: serde_json::Value,
) -> HostFirmwareComponents {
    reconcile(&host("with"), ctx, now())
        .await
        .expect("reconciled");
    let mut object = components_now(&ctx.store, "with").expect("made");
    object.spec.updates = serde_json::from_value(updates).expect("valid updates");
    object.metadata.generation = Some(2);
    object
}

fn condition(object: &HostFirmwareComponents, kind: &str) -> Option<(String, String)> {
    object
        .status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == kind)
        .map(|c| (c.status.clone(), c.reason.clone()))
}

#[tokio::test]
async fn only_a_node_with_components_gets_an_object_and_settled_ones_are_not_rewritten() {
    let ctx = context();
    let without = host("without");
    assert_eq!(
        reconcile(&without, &ctx, now()).await.expect("reconciled"),
        Next::After(REQUEUE)
    );
    assert!(components_now(&ctx.store, "without").is_none());

    let with = host("with");
    reconcile(&with, &ctx, now()).await.expect("reconciled");
    let object = components_now(&ctx.store, "with").expect("made");
    assert_eq!(owner_uids(&object), ["with-uid"]);
    let status = object.status.clone().expect("status");
    assert_eq!(status.components, bmc("1.00"));
    assert_eq!(status.last_updated, Some(now()));
    assert_eq!(
        condition(&object, "Valid"),
        Some(("True".into(), "OK".into()))
    );
    assert_eq!(
        condition(&object, "ChangeDetected"),
        Some(("False".into(), "OK".into()))
    );
    let writes = ctx.store.status_writes();
    reconcile(&with, &ctx, now()).await.expect("reconciled");
    assert_eq!(ctx.store.status_writes(), writes, "nothing changed");

    // A newer version read from the BMC is shown.
    ctx.provisioner
        .set_firmware_components("ns~with", bmc("1.10"));
    reconcile(&with, &ctx, now()).await.expect("reconciled");
    let object = components_now(&ctx.store, "with").expect("kept");
    assert_eq!(object.status.expect("status").components, bmc("1.10"));
}

/// What upstream's operator leaves: no owner from this host, status written with
/// Update, and the updates it already flashed recorded.
#[tokio::test]
async fn upstreams_object_is_adopted_with_the_updates_it_flashed() {
    let ctx = context();
    let with = host("with");
    let flashed = json!([{"component": "bmc", "url": "http://images/bmc.bin"}]);
    let mut left: HostFirmwareComponents = serde_json::from_value(json!({
        "apiVersion": "metal3.io/v1alpha1", "kind": "HostFirmwareComponents",
        "metadata": {"name": "with", "namespace": "ns", "uid": "hfc-uid", "generation": 3},
        "spec": {"updates": flashed},
        "status": {"updates": flashed, "components": bmc("0.9")}
    }))
    .expect("valid object");
    left.metadata.owner_references = Some(vec![OwnerReference {
        uid: "someone-else".into(),
        ..OwnerReference::default()
    }]);
    left.metadata.managed_fields = Some(vec![upstream_status_update()]);
    ctx.store.put(left);
    reconcile(&with, &ctx, now()).await.expect("reconciled");
    let object = components_now(&ctx.store, "with").expect("kept");
    assert_eq!(object.metadata.uid.as_deref(), Some("hfc-uid"));
    let owners = owner_uids(&object);
    assert_eq!(owners, ["someone-else", "with-uid"]);
    let status = object.status.clone().expect("status");
    assert_eq!(status.components, bmc("1.00"));
    assert_eq!(
        serde_json::to_value(&status.updates).expect("json"),
        flashed
    );
    // Flashed already: no change, nothing for preparing to flash.
    assert_eq!(
        condition(&object, "ChangeDetected"),
        Some(("False".into(), "OK".into()))
    );
    assert_eq!(
        state_machine::pending_updates(Some(&object)),
        state_machine::PendingUpdates::None
    );
    assert!(events(&ctx.store).is_empty());
}

#[tokio::test]
async fn an_unknown_component_gets_one_event_until_the_spec_changes() {
    let ctx = context();
    let with = host("with");
    let cpld = json!([{"component": "cpld", "url": "http://images/cpld.bin"}]);
    ctx.store.put(made_asking(&ctx, cpld).await);
    for _ in 0..3 {
        reconcile(&with, &ctx, now()).await.expect("reconciled");
    }
    let object = components_now(&ctx.store, "with").expect("kept");
    assert_eq!(
        condition(&object, "Valid"),
        Some(("False".into(), "InvalidComponent".into()))
    );
    let events = events(&ctx.store);
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0].1, "ValidationFailed");
    assert!(
        events[0].2.contains("component cpld is invalid"),
        "{events:?}"
    );
}

/// Records the spec's updates in the stored object while the controller reads the
/// node, as the host controller does when the clean steps start.
struct RecordingWhileRead {
    provisioner: FixtureProvisioner,
    store: MemoryObjects,
}

impl crate::provisioner::FirmwareReader for RecordingWhileRead {
    async fn bios_settings(
        &self,
        node: &crate::provisioner::NodeRef,
    ) -> Result<Option<crate::provisioner::BiosSettings>, crate::provisioner::ProvisionerError>
    {
        self.provisioner.bios_settings(node).await
    }

    async fn firmware_components(
        &self,
        node: &crate::provisioner::NodeRef,
    ) -> Result<Option<Vec<FirmwareComponentStatus>>, crate::provisioner::ProvisionerError> {
        if let Some(mut object) = components_now(&self.store, "with")
            && object.status.as_ref().is_some_and(|s| s.updates.is_empty())
        {
            object.status.get_or_insert_default().updates = object.spec.updates.clone();
            self.store.put(object);
        }
        self.provisioner.firmware_components(node).await
    }
}

#[tokio::test]
async fn updates_recorded_meanwhile_are_not_overwritten() {
    let store = MemoryObjects::default();
    let plain = context();
    let with = host("with");
    let bmc = json!([{"component": "bmc", "url": "http://images/bmc.bin"}]);
    let object = made_asking(&plain, bmc).await;
    store.put(object.clone());
    let ctx = FirmwareContext {
        provisioner: RecordingWhileRead {
            provisioner: context().provisioner,
            store: store.clone(),
        },
        store: store.clone(),
        namespace: None,
    };
    reconcile(&with, &ctx, now()).await.expect("reconciled");
    let stored = store
        .stored::<HostFirmwareComponents>("ns", "with")
        .expect("kept");
    let status = stored.status.clone().expect("status");
    assert_eq!(status.updates, object.spec.updates, "the record survives");
    assert_eq!(
        condition(&stored, "ChangeDetected"),
        Some(("False".into(), "OK".into())),
        "judged on the record"
    );
}
