//! One reconcile of a host's HostFirmwareSettings: [`super::state_machine`] decides,
//! the provisioner reads the BIOS, [`super::store`] writes.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;

use super::context::{FirmwareContext, FirmwareError};
use super::state_machine::{self, Facts, Lookup, StatusStep, Step, warnings};
use super::store::{self, FirmwareStore};
use crate::api::BareMetalHost;
use crate::api::firmware::{FirmwareSchema, HostFirmwareSettings};
use crate::controller::runtime::steps::{MAX_STEPS, OUT_OF_STEPS, PROVISIONER_RETRY};
use crate::controller::runtime::store::{ObjectError, Read, StoreError, owner_reference};
use crate::controller::runtime::{Next, node_of};
use crate::provisioner::FirmwareReader;

/// One reconcile of `host`'s HostFirmwareSettings, as of `now`.
pub async fn reconcile<P: FirmwareReader, S: FirmwareStore>(
    host: &BareMetalHost,
    ctx: &FirmwareContext<P, S>,
    now: Time,
) -> Result<Next, FirmwareError> {
    let (namespace, name) = (host.namespace().unwrap_or_default(), host.name_any());
    let object = format!("HostFirmwareSettings {namespace}/{name}");
    let mut facts = Facts {
        host: Some(host.clone()),
        now: Some(now),
        ..Facts::default()
    };
    if state_machine::next(&facts) == Step::Idle {
        return Ok(Next::OnChange);
    }
    facts.settings = ctx
        .store
        .read(&namespace, &name, Read::Cached)
        .await
        .map_err(ObjectError::store(&object))?;
    for _ in 0..MAX_STEPS {
        let step = state_machine::next(&facts);
        tracing::debug!(?step, "firmware settings step");
        if let Some(next) = take(step, host, ctx, &mut facts, &object).await? {
            return Ok(next);
        }
    }
    Ok(OUT_OF_STEPS)
}

/// Takes `step`; `Some` ends the reconcile.
async fn take<P: FirmwareReader, S: FirmwareStore>(
    step: Step,
    host: &BareMetalHost,
    ctx: &FirmwareContext<P, S>,
    facts: &mut Facts,
    object: &str,
) -> Result<Option<Next>, FirmwareError> {
    let namespace = host.namespace().unwrap_or_default();
    let store_err = ObjectError::store(object);
    // Every step past CreateSettings has the settings object.
    let settings = facts
        .settings
        .clone()
        .unwrap_or_else(|| HostFirmwareSettings::new(&host.name_any(), Default::default()));
    match step {
        Step::Idle => return Ok(Some(Next::OnChange)),
        Step::Status(StatusStep::Unchanged(after)) => return Ok(Some(Next::After(after))),
        Step::CreateSettings => {
            facts.settings = create_settings(host, ctx).await.map_err(store_err)?;
        }
        Step::AdoptSettings => {
            let adopted = ctx.store.adopt(&settings, owner_reference(host, false));
            let (adopted, _) = adopted.await.map_err(store_err)?;
            tracing::info!("adopted the host's HostFirmwareSettings");
            facts.settings = Some(adopted);
        }
        Step::ReadBios => match ctx.provisioner.bios_settings(&node_of(host)).await? {
            Some(bios) => facts.bios = Some(bios),
            // The node is gone: the host controller registers it again, and its
            // status write wakes this one.
            None => return Ok(Some(Next::OnChange)),
        },
        Step::LookUpSchema(schema) => {
            let found = ctx.store.read(&namespace, &schema, Read::Cached).await;
            let found = found.map_err(store_err)?;
            facts.schema = Some(lookup(found, &settings));
        }
        Step::CreateSchema(schema) => {
            let created = create_schema(ctx, &settings, &schema).await;
            facts.schema = Some(created.map_err(store_err)?);
        }
        Step::OwnSchema => {
            let Some(Lookup::Found(schema)) = &facts.schema else {
                return Ok(Some(Next::After(PROVISIONER_RETRY)));
            };
            let owned = own_schema(ctx, &settings, schema).await;
            facts.schema = Some(owned.map_err(store_err)?);
        }
        Step::Status(StatusStep::Save {
            status,
            events,
            requeue,
        }) => {
            let saved = ctx.store.save(&settings, &status, &warnings(&events)).await;
            saved.map_err(store_err)?;
            return Ok(Some(Next::After(requeue)));
        }
    }
    Ok(None)
}

/// Makes the host's HostFirmwareSettings, or reads the one made meanwhile (or that
/// the cache had not seen yet).
async fn create_settings<P, S: FirmwareStore>(
    host: &BareMetalHost,
    ctx: &FirmwareContext<P, S>,
) -> Result<Option<HostFirmwareSettings>, StoreError> {
    match ctx.store.create(&store::new_settings(host)).await {
        Ok(created) => {
            tracing::info!("created the host's HostFirmwareSettings");
            Ok(Some(created))
        }
        Err(StoreError::Conflict) => {
            let namespace = host.namespace().unwrap_or_default();
            ctx.store
                .read(&namespace, &host.name_any(), Read::Fresh)
                .await
        }
        Err(e) => Err(e),
    }
}

/// Makes `schema`, or reads the one a host of the same model made meanwhile.
async fn create_schema<P, S: FirmwareStore>(
    ctx: &FirmwareContext<P, S>,
    settings: &HostFirmwareSettings,
    schema: &FirmwareSchema,
) -> Result<Lookup<FirmwareSchema>, StoreError> {
    let mut schema = schema.clone();
    schema.metadata.namespace = settings.namespace();
    schema.metadata.owner_references = Some(vec![store::settings_owner(settings)]);
    let created = ctx.store.create(&schema).await;
    if let Ok(created) = &created {
        tracing::info!(schema = %created.name_any(), "created a FirmwareSchema");
    }
    or_current(ctx, settings, &schema.name_any(), created).await
}

/// Adds `settings` to `schema`'s owners. Hosts of one model share the schema and add
/// themselves to its owners at once: the loser reads it again and tries again in
/// the next step, rather than a whole reconcile (and a BIOS read) later.
async fn own_schema<P, S: FirmwareStore>(
    ctx: &FirmwareContext<P, S>,
    settings: &HostFirmwareSettings,
    schema: &FirmwareSchema,
) -> Result<Lookup<FirmwareSchema>, StoreError> {
    let owned = ctx.store.own_schema(settings, schema).await.map(|()| {
        let mut owned = schema.clone();
        let owners = owned.owner_references_mut();
        owners.push(store::settings_owner(settings));
        owned
    });
    or_current(ctx, settings, &schema.name_any(), owned).await
}

/// The schema a write answered, or, when it lost a race, the FirmwareSchema `name` as
/// the API server holds it now.
async fn or_current<P, S: FirmwareStore>(
    ctx: &FirmwareContext<P, S>,
    settings: &HostFirmwareSettings,
    name: &str,
    written: Result<FirmwareSchema, StoreError>,
) -> Result<Lookup<FirmwareSchema>, StoreError> {
    match written {
        Ok(schema) => Ok(Lookup::Found(schema)),
        Err(StoreError::Conflict) => {
            let namespace = settings.namespace().unwrap_or_default();
            let found = ctx.store.read(&namespace, name, Read::Fresh).await?;
            Ok(lookup(found, settings))
        }
        Err(e) => Err(e),
    }
}

/// A schema as the state machine needs it: its spec, and `settings` among its owners
/// or not. The other owners are dropped: a schema shared by a thousand hosts carries a
/// thousand, and every reconcile in flight holds its copy.
fn lookup(
    found: Option<FirmwareSchema>,
    settings: &HostFirmwareSettings,
) -> Lookup<FirmwareSchema> {
    let Some(mut schema) = found else {
        return Lookup::Missing;
    };
    if let Some(owners) = schema.metadata.owner_references.as_mut() {
        owners.retain(|o| Some(o.uid.as_str()) == settings.metadata.uid.as_deref());
    }
    Lookup::Found(schema)
}

#[cfg(test)]
mod tests;
