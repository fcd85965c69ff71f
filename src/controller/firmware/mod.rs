//! The firmware controllers. HostFirmwareSettings: each BareMetalHost with an Ironic node gets a
//! HostFirmwareSettings of the same name (owned by the host) whose status holds the
//! BIOS settings Ironic read from the BMC, and a FirmwareSchema (named by a hash of the
//! settings' schema, shared by hosts of the same model) describing them. `spec.settings`
//! is checked against the schema (conditions `Valid` and `ChangeDetected`, an event per
//! refused setting). Objects upstream's operator left are adopted, never duplicated.
//! HostFirmwareComponents: see [`components`]; both run on the same watch of hosts,
//! as does [`policy`], which makes each host an owner of its HostUpdatePolicy.
//!
//! The same shape as the host controller: [`state_machine`] decides (pure), the
//! provisioner reads ([`FirmwareReader`]), [`store`] writes, and [`reconcile`] only
//! loops over them.

pub mod components;
pub mod policy;
mod run;
pub mod state_machine;
pub mod store;

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;

pub use run::{run, same_name};
use state_machine::{Facts, Lookup, Step};
pub use store::{FirmwareStore, KubeFirmwareStore, MemoryFirmwareStore};

use crate::api::BareMetalHost;
use crate::api::firmware::{FirmwareSchema, HostFirmwareSettings};
use crate::controller::runtime::Next;
use crate::controller::runtime::store::StoreError;
use crate::provisioner::{FirmwareReader, HostId, NodeRef, ProvisionerError};

/// Look again this soon after the provisioner could not answer (upstream's delay).
pub const PROVISIONER_RETRY: Duration = Duration::from_secs(30);

/// Steps one reconcile takes at most (each a read or a write); more means objects
/// keep changing under it, and it looks again shortly.
const MAX_STEPS: usize = 10;

/// What the firmware controllers share.
pub struct FirmwareContext<P, S = KubeFirmwareStore> {
    pub provisioner: P,
    pub store: S,
    /// `WATCH_NAMESPACE`: only hosts in this namespace; all when `None`.
    pub namespace: Option<String>,
}

/// Why a reconcile could not finish; retried after [`PROVISIONER_RETRY`].
#[derive(Debug, thiserror::Error)]
pub enum FirmwareError {
    #[error("{object}: {source}")]
    Store {
        object: String,
        #[source]
        source: StoreError,
    },
    #[error(transparent)]
    Provisioner(#[from] ProvisionerError),
}

/// One reconcile of `host`'s HostFirmwareSettings, as of `now`.
pub async fn reconcile<P: FirmwareReader, S: FirmwareStore>(
    host: &BareMetalHost,
    ctx: &FirmwareContext<P, S>,
    now: Time,
) -> Result<Next, FirmwareError> {
    let namespace = host.namespace().unwrap_or_default();
    let name = host.name_any();
    let store_err = |source| FirmwareError::Store {
        object: format!("HostFirmwareSettings {namespace}/{name}"),
        source,
    };
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
        .settings(&namespace, &name)
        .await
        .map_err(store_err)?;
    for _ in 0..MAX_STEPS {
        let step = state_machine::next(&facts);
        tracing::debug!(?step, "firmware settings step");
        // Every step past CreateSettings has the settings object.
        let settings = facts
            .settings
            .clone()
            .unwrap_or_else(|| HostFirmwareSettings::new(&name, Default::default()));
        match step {
            Step::Idle => return Ok(Next::OnChange),
            Step::Done(after) => return Ok(Next::After(after)),
            Step::CreateSettings => match ctx.store.create_settings(host).await {
                Ok(created) => {
                    tracing::info!("created the host's HostFirmwareSettings");
                    facts.settings = Some(created);
                }
                // Made meanwhile, or the cache had not seen it yet.
                Err(StoreError::Conflict) => {
                    facts.settings = ctx
                        .store
                        .current_settings(&namespace, &name)
                        .await
                        .map_err(store_err)?;
                }
                Err(e) => return Err(store_err(e)),
            },
            Step::AdoptSettings => {
                let adopted = ctx
                    .store
                    .adopt_settings(host, &settings)
                    .await
                    .map_err(store_err)?;
                facts.settings = Some(adopted);
            }
            Step::ReadBios => {
                let node = NodeRef {
                    id: HostId::new(&namespace, &name),
                    provisioning_id: host.status.as_ref().map(|s| s.provisioning.id.clone()),
                };
                match ctx.provisioner.bios_settings(&node).await? {
                    Some(bios) => facts.bios = Some(bios),
                    // The node is gone: the host controller registers it again, and
                    // its status write wakes this one.
                    None => return Ok(Next::OnChange),
                }
            }
            Step::LookUpSchema(schema) => {
                let found = ctx
                    .store
                    .schema(&namespace, &schema)
                    .await
                    .map_err(store_err)?;
                facts.schema = Some(lookup(found, &settings));
            }
            Step::CreateSchema(schema) => {
                match ctx.store.create_schema(&settings, &schema).await {
                    Ok(created) => {
                        tracing::info!(schema = %created.name_any(), "created a FirmwareSchema");
                        facts.schema = Some(Lookup::Found(created));
                    }
                    // A host of the same model made it meanwhile.
                    Err(StoreError::Conflict) => {
                        facts.schema = Some(
                            current_schema(ctx, &settings, &namespace, &schema.name_any())
                                .await
                                .map_err(store_err)?,
                        );
                    }
                    Err(e) => return Err(store_err(e)),
                }
            }
            Step::OwnSchema => {
                let Some(Lookup::Found(schema)) = &facts.schema else {
                    return Ok(Next::After(PROVISIONER_RETRY));
                };
                match ctx.store.own_schema(&settings, schema).await {
                    Ok(()) => {
                        let mut owned = schema.clone();
                        owned
                            .owner_references_mut()
                            .push(store::settings_owner(&settings));
                        facts.schema = Some(Lookup::Found(owned));
                    }
                    // Hosts of one model share the schema and add themselves to its
                    // owners at once: the loser reads it again and tries again here,
                    // rather than a whole reconcile (and a BIOS read) later.
                    Err(StoreError::Conflict) => {
                        let name = schema.name_any();
                        facts.schema = Some(
                            current_schema(ctx, &settings, &namespace, &name)
                                .await
                                .map_err(store_err)?,
                        );
                    }
                    Err(e) => return Err(store_err(e)),
                }
            }
            Step::SaveStatus {
                status,
                events,
                requeue,
            } => {
                ctx.store
                    .apply_status(&settings, &status)
                    .await
                    .map_err(store_err)?;
                for (reason, message) in events {
                    ctx.store.publish(&settings, &reason, &message).await;
                }
                return Ok(Next::After(requeue));
            }
        }
    }
    Ok(Next::After(Duration::from_secs(1)))
}

/// The FirmwareSchema `name` as the API server holds it now (after a write lost a race).
async fn current_schema<P, S: FirmwareStore>(
    ctx: &FirmwareContext<P, S>,
    settings: &HostFirmwareSettings,
    namespace: &str,
    name: &str,
) -> Result<Lookup<FirmwareSchema>, StoreError> {
    let found = ctx.store.current_schema(namespace, name).await?;
    Ok(lookup(found, settings))
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
