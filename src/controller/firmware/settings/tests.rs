//! Reconciler tests: the fixture provisioner and the in-memory store.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use serde_json::json;

use super::state_machine::{REQUEUE, schema_name};
use super::*;
use crate::api::firmware::{FirmwareSchema, FirmwareSchemaSpec, SETTINGS_VALID, SettingSchema};
use crate::controller::firmware::state_machine::tests::{
    events, memory_context, now, owned_by, owner_names, test_host, upstream_status_update,
};

/// The API group and version of bmo's kinds.
const METAL3: &str = "metal3.io/v1alpha1";
use crate::controller::runtime::store::MemoryObjects;
use crate::provisioner::{BiosSettings, FixtureProvisioner};

fn host(name: &str, node: &str) -> BareMetalHost {
    test_host(name, node)
}

fn bios() -> BiosSettings {
    let schema: std::collections::BTreeMap<String, SettingSchema> = serde_json::from_value(json!({
        "ProcTurboMode": {"attribute_type": "Enumeration", "allowable_values": ["Enabled", "Disabled"], "read_only": false},
        "BootRetries": {"attribute_type": "Integer", "lower_bound": 0, "upper_bound": 9}
    }))
    .expect("valid schema");
    BiosSettings {
        settings: [("ProcTurboMode", "Enabled"), ("BootRetries", "3")]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect(),
        schema,
    }
}

fn context() -> Ctx {
    let provisioner = FixtureProvisioner::default();
    provisioner.set_bios("ns~a", bios());
    provisioner.set_bios("ns~b", bios());
    memory_context(provisioner)
}

type Ctx = FirmwareContext<FixtureProvisioner, MemoryObjects>;

/// Puts `host` in the store and reconciles it once.
async fn reconcile_put(ctx: &Ctx, host: &BareMetalHost) -> Next {
    ctx.store.put(host.clone());
    reconcile(host, ctx, now()).await.expect("reconciled")
}

/// Host `name`'s HostFirmwareSettings as stored now.
fn settings_now(ctx: &Ctx, name: &str) -> Option<HostFirmwareSettings> {
    ctx.store.stored("ns", name)
}

fn schema_owners(ctx: &Ctx) -> Vec<String> {
    let schemas = ctx.store.list::<FirmwareSchema>(None);
    assert_eq!(schemas.len(), 1, "{schemas:?}");
    owner_names(&schemas[0])
}

/// Hosts a and b of one model, a reconciled (the schema made, owned by a); then b.
async fn schema_made_by_a() -> (Ctx, BareMetalHost) {
    let ctx = context();
    let (a, b) = (host("a", "node-a"), host("b", "node-b"));
    ctx.store.put(a.clone());
    ctx.store.put(b.clone());
    reconcile(&a, &ctx, now()).await.expect("reconciled");
    (ctx, b)
}

#[tokio::test]
async fn a_host_whose_cache_missed_the_schema_uses_the_one_made_meanwhile() {
    let (ctx, b) = schema_made_by_a().await;
    // b's cache has not seen a's schema yet: its create meets 409.
    let name = schema_name(&bios().schema);
    ctx.store.serve_stale::<FirmwareSchema>("ns", &name, None);
    let next = reconcile(&b, &ctx, now())
        .await
        .expect("finishes in one reconcile");
    assert_eq!(next, Next::After(REQUEUE));
    assert_eq!(schema_owners(&ctx), ["a", "b"]);
}

#[tokio::test]
async fn a_host_adds_itself_to_the_owners_the_schema_has_now() {
    let (ctx, b) = schema_made_by_a().await;
    // Another host of the model adds itself to the owners after b's cache saw the
    // schema: b's append keeps it.
    let name = schema_name(&bios().schema);
    let seen = ctx.store.list::<FirmwareSchema>(None).remove(0);
    ctx.store
        .serve_stale::<FirmwareSchema>("ns", &name, Some(seen.clone()));
    let mut newer = seen;
    let settings_c = owned_by(METAL3, "HostFirmwareSettings", "c", "c-settings-uid");
    newer.owner_references_mut().push(settings_c);
    newer.metadata.resource_version = Some("999".into());
    ctx.store.put(newer);
    let next = reconcile(&b, &ctx, now())
        .await
        .expect("finishes in one reconcile");
    assert_eq!(next, Next::After(REQUEUE));
    assert_eq!(schema_owners(&ctx), ["a", "c", "b"]);
    let status = settings_now(&ctx, "b").and_then(|s| s.status);
    assert_eq!(status.map(|s| s.settings), Some(bios().settings));
}

#[tokio::test]
async fn hosts_of_one_model_get_their_settings_and_share_one_schema() {
    let ctx = context();
    let (a, b) = (host("a", "node-a"), host("b", "node-b"));
    for h in [&a, &b] {
        assert_eq!(reconcile_put(&ctx, h).await, Next::After(REQUEUE));
    }
    let schemas = ctx.store.list::<FirmwareSchema>(None);
    assert_eq!(schemas.len(), 1, "{schemas:?}");
    let schema = &schemas[0];
    assert_eq!(schema.metadata.name, Some(schema_name(&bios().schema)));
    let owners = owner_names(schema);
    assert_eq!(owners, ["a", "b"]);
    for name in ["a", "b"] {
        let settings = settings_now(&ctx, name).expect("settings made");
        assert_eq!(settings.owner_references()[0].uid, format!("{name}-uid"));
        let status = settings.status.expect("status written");
        assert_eq!(status.settings, bios().settings);
        assert_eq!(
            status.firmware_schema.map(|s| s.name),
            schema.metadata.name.clone()
        );
    }
    // Nothing changed: the next look writes nothing.
    let writes = ctx.store.status_writes();
    reconcile(&a, &ctx, now()).await.expect("reconciled");
    assert_eq!(ctx.store.status_writes(), writes);
}

#[tokio::test]
async fn a_host_without_a_node_gets_nothing_yet() {
    let ctx = context();
    let h = host("a", "");
    assert_eq!(reconcile_put(&ctx, &h).await, Next::OnChange);
    assert!(settings_now(&ctx, "a").is_none());
}

/// Host a's HostFirmwareSettings as upstream's operator leaves it: the host as owner,
/// a status written with Update (a setting the BMC no longer reports).
fn upstreams_settings() -> HostFirmwareSettings {
    let mut settings: HostFirmwareSettings = serde_json::from_value(json!({
        "apiVersion": "metal3.io/v1alpha1", "kind": "HostFirmwareSettings",
        "metadata": {"name": "a", "namespace": "ns", "uid": "upstream-hfs", "generation": 1,
                     "resourceVersion": "1"},
        "spec": {"settings": {"ProcTurboMode": "Sideways"}},
        "status": {"settings": {"Stale": "1"}},
    }))
    .expect("valid settings");
    let host_a = owned_by(METAL3, "BareMetalHost", "a", "a-uid");
    settings.metadata.owner_references = Some(vec![host_a]);
    settings.metadata.managed_fields = Some(vec![upstream_status_update()]);
    settings
}

/// The schema of host a's BIOS as upstream's operator leaves it: under its hash
/// name, owned by upstream's settings object.
fn upstreams_schema() -> FirmwareSchema {
    let name = schema_name(&bios().schema);
    let mut schema = FirmwareSchema::new(
        &name,
        FirmwareSchemaSpec {
            schema: bios().schema,
            ..FirmwareSchemaSpec::default()
        },
    );
    schema.metadata.namespace = Some("ns".into());
    schema.metadata.resource_version = Some("1".into());
    schema.metadata.owner_references = Some(vec![OwnerReference {
        kind: "HostFirmwareSettings".into(),
        name: "a".into(),
        uid: "upstream-hfs".into(),
        ..OwnerReference::default()
    }]);
    schema
}

#[tokio::test]
async fn upstreams_objects_are_adopted_not_duplicated() {
    let ctx = context();
    let h = host("a", "node-a");
    ctx.store.put(h.clone());
    ctx.store.put(upstreams_settings());
    ctx.store.put(upstreams_schema());

    reconcile(&h, &ctx, now()).await.expect("reconciled");

    let schemas = ctx.store.list::<FirmwareSchema>(None);
    assert_eq!(schemas.len(), 1);
    assert_eq!(
        schemas[0].owner_references().len(),
        1,
        "already owned: not added twice"
    );
    the_settings_are_adopted_and_judged(&ctx);
}

/// Upstream's settings object kept, the host among its owners once, its status taken
/// over and written anew: the stale setting gone, the refused one reported.
fn the_settings_are_adopted_and_judged(ctx: &Ctx) {
    let adopted = settings_now(ctx, "a").expect("kept");
    assert_eq!(adopted.metadata.uid.as_deref(), Some("upstream-hfs"));
    assert_eq!(adopted.owner_references().len(), 1);
    assert!(
        adopted.metadata.managed_fields.is_none(),
        "status taken over"
    );
    let status = adopted.status.expect("status");
    assert_eq!(
        status.settings,
        bios().settings,
        "the stale setting is gone"
    );
    let valid = status
        .conditions
        .iter()
        .find(|c| c.type_ == SETTINGS_VALID)
        .expect("Valid");
    assert_eq!(valid.status, "False");
    let events = events(&ctx.store);
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].1, "ValidationFailed");
    assert!(
        events[0].2.contains("ProcTurboMode") && events[0].2.contains("Enabled, Disabled"),
        "{events:?}"
    );
}

#[tokio::test]
async fn a_node_unknown_to_the_provisioner_waits_for_the_host() {
    let ctx = context();
    let h = host("c", "node-c");
    assert_eq!(reconcile_put(&ctx, &h).await, Next::OnChange);
    // The settings object is there, with no status until the node is read.
    let settings = settings_now(&ctx, "c").expect("made");
    assert!(settings.status.is_none());
}
