//! The HostFirmwareComponents controller: each BareMetalHost whose node reports
//! firmware components gets a HostFirmwareComponents of the same name (owned by the
//! host) whose status lists them with their versions. `spec.updates` is checked
//! (conditions `Valid` and `ChangeDetected`, an event when a component is unknown);
//! the host controller flashes valid updates while preparing and records them in
//! `status.updates`. Objects upstream's operator or a user made are adopted, never
//! duplicated.
//!
//! The same shape as the settings controller: [`state_machine`] decides, the
//! provisioner reads, [`store`] writes, and [`reconcile`] only loops over them.

pub mod state_machine;
pub mod store;

use std::hash::{DefaultHasher, Hash, Hasher};
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;

use state_machine::{Facts, Step};
pub use store::ComponentsStore;

use super::{FirmwareContext, FirmwareError};
use crate::api::BareMetalHost;
use crate::api::firmware::HostFirmwareComponents;
use crate::controller::runtime::{Next, store::StoreError};
use crate::provisioner::{FirmwareReader, HostId, NodeRef};

/// What of a HostFirmwareComponents the host controller acts on: its conditions
/// (type, status, observed generation). A change judged valid asks an available
/// host to prepare again, at once rather than at its next steady poll.
pub fn conditions_hash(object: &HostFirmwareComponents) -> Option<u64> {
    let mut hasher = DefaultHasher::new();
    for c in object.status.iter().flat_map(|s| &s.conditions) {
        (&c.type_, &c.status, c.observed_generation).hash(&mut hasher);
    }
    Some(hasher.finish())
}

/// Steps one reconcile takes at most; more means the object keeps changing under
/// it, and it looks again shortly.
const MAX_STEPS: usize = 10;

/// One reconcile of `host`'s HostFirmwareComponents, as of `now`.
pub async fn reconcile<P: FirmwareReader, S: ComponentsStore>(
    host: &BareMetalHost,
    ctx: &FirmwareContext<P, S>,
    now: Time,
) -> Result<Next, FirmwareError> {
    let namespace = host.namespace().unwrap_or_default();
    let name = host.name_any();
    let store_err = |source| FirmwareError::Store {
        object: format!("HostFirmwareComponents {namespace}/{name}"),
        source,
    };
    let mut facts = Facts {
        host: Some(host.clone()),
        now: Some(now),
        ..Facts::default()
    };
    // A write refused because the object changed: read it from the API server, not
    // from the cache, which may still hold the old one.
    let mut lost_race = false;
    for _ in 0..MAX_STEPS {
        let step = state_machine::next(&facts);
        tracing::debug!(?step, "firmware components step");
        let object = facts.object.clone().flatten();
        match step {
            Step::Idle => return Ok(Next::OnChange),
            Step::Done(after) => return Ok(Next::After(after)),
            Step::LookUp => {
                let found = if lost_race {
                    ctx.store.current_components(&namespace, &name).await
                } else {
                    ctx.store.components(&namespace, &name).await
                };
                facts.object = Some(found.map_err(store_err)?);
            }
            Step::ReadComponents => {
                let node = NodeRef {
                    id: HostId::new(&namespace, &name),
                    provisioning_id: host.status.as_ref().map(|s| s.provisioning.id.clone()),
                };
                match ctx.provisioner.firmware_components(&node).await? {
                    Some(read) => facts.components = Some(read),
                    // The node is gone: the host controller registers it again, and
                    // its status write wakes this one.
                    None => return Ok(Next::OnChange),
                }
            }
            Step::Create => match ctx.store.create_components(host).await {
                Ok(created) => {
                    tracing::info!("created the host's HostFirmwareComponents");
                    facts.object = Some(Some(created));
                }
                Err(StoreError::Conflict) => {
                    lost_race = true;
                    facts.object = None;
                }
                Err(e) => return Err(store_err(e)),
            },
            Step::Adopt => {
                let Some(object) = object else {
                    return Ok(Next::After(Duration::from_secs(1)));
                };
                match ctx.store.adopt_components(host, &object).await {
                    Ok(adopted) => facts.object = Some(Some(adopted)),
                    Err(StoreError::Conflict) => {
                        lost_race = true;
                        facts.object = None;
                    }
                    Err(e) => return Err(store_err(e)),
                }
            }
            Step::SaveStatus {
                status,
                events,
                requeue,
            } => {
                let Some(object) = object else {
                    return Ok(Next::After(Duration::from_secs(1)));
                };
                match ctx.store.apply_components_status(&object, &status).await {
                    Ok(()) => {}
                    // Written meanwhile (the host controller recorded updates): read
                    // it again and decide anew.
                    Err(StoreError::Conflict) => {
                        lost_race = true;
                        facts.object = None;
                        continue;
                    }
                    Err(e) => return Err(store_err(e)),
                }
                for (reason, message) in events {
                    ctx.store
                        .publish_components(&object, &reason, &message)
                        .await;
                }
                return Ok(Next::After(requeue));
            }
        }
    }
    Ok(Next::After(Duration::from_secs(1)))
}

#[cfg(test)]
mod tests;
