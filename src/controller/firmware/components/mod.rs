//! The HostFirmwareComponents controller: each BareMetalHost whose node reports
//! firmware components gets a HostFirmwareComponents of the same name (owned by the
//! host) whose status lists them with their versions. `spec.updates` is checked
//! (conditions `Valid` and `ChangeDetected`, an event when a component is unknown);
//! the host controller flashes valid updates while preparing and records them in
//! `status.updates`. Objects upstream's operator or a user made are adopted, never
//! duplicated.
//!
//! The same shape as the settings controller: [`state_machine`] decides, the
//! provisioner reads, the runtime's [`ObjectStore`] writes, and [`reconcile`] only
//! loops over them.

pub mod state_machine;

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;

use state_machine::{Facts, Step};

use super::state_machine::{StatusStep, warnings};

use super::context::{FirmwareContext, FirmwareError};
use crate::api::BareMetalHost;
use crate::api::firmware::{HostFirmwareComponents, HostFirmwareComponentsSpec};
use crate::controller::runtime::steps::{MAX_STEPS, OUT_OF_STEPS};
use crate::controller::runtime::store::{
    ObjectError, ObjectStore, Read, StoreError, owner_reference,
};
use crate::controller::runtime::{Next, node_of};
use crate::provisioner::FirmwareReader;

/// The empty HostFirmwareComponents of `host`, owned by it.
fn new_components(host: &BareMetalHost) -> HostFirmwareComponents {
    let mut object =
        HostFirmwareComponents::new(&host.name_any(), HostFirmwareComponentsSpec::default());
    object.metadata.namespace = host.namespace();
    object.metadata.owner_references = Some(vec![owner_reference(host, false)]);
    object
}

/// One reconcile of `host`'s HostFirmwareComponents, as of `now`.
pub async fn reconcile<P: FirmwareReader, S: ObjectStore>(
    host: &BareMetalHost,
    ctx: &FirmwareContext<P, S>,
    now: Time,
) -> Result<Next, FirmwareError> {
    let namespace = host.namespace().unwrap_or_default();
    let object = format!("HostFirmwareComponents {namespace}/{}", host.name_any());
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
        match take(step, host, ctx, &mut facts, (lost_race, &object)).await? {
            Taken::Next(next) => return Ok(next),
            Taken::Step => {}
            Taken::LostRace => {
                lost_race = true;
                facts.object = None;
            }
        }
    }
    Ok(OUT_OF_STEPS)
}

/// What taking a step came to.
enum Taken {
    /// The reconcile ends.
    Next(Next),
    /// On to the next step.
    Step,
    /// A write was refused because the object changed: read it again.
    LostRace,
}

/// A store call's answer, a refusal because the object changed as [`Taken::LostRace`].
fn raced<T>(
    result: Result<T, StoreError>,
    object: &str,
) -> Result<Result<T, Taken>, FirmwareError> {
    match result {
        Ok(value) => Ok(Ok(value)),
        Err(StoreError::Conflict) => Ok(Err(Taken::LostRace)),
        Err(source) => Err(ObjectError::store(object)(source)),
    }
}

/// Takes `step` for `object` (`lost_race`: read it from the API server).
async fn take<P: FirmwareReader, S: ObjectStore>(
    step: Step,
    host: &BareMetalHost,
    ctx: &FirmwareContext<P, S>,
    facts: &mut Facts,
    (lost_race, object_name): (bool, &str),
) -> Result<Taken, FirmwareError> {
    let (namespace, name) = (host.namespace().unwrap_or_default(), host.name_any());
    let object = facts.object.clone().flatten();
    match step {
        Step::Idle => return Ok(Taken::Next(Next::OnChange)),
        Step::Status(StatusStep::Unchanged(after)) => {
            return Ok(Taken::Next(Next::After(after)));
        }
        Step::LookUp => {
            let read = if lost_race { Read::Fresh } else { Read::Cached };
            let found = ctx.store.read(&namespace, &name, read).await;
            facts.object = Some(found.map_err(ObjectError::store(object_name))?);
        }
        Step::ReadComponents => match ctx.provisioner.firmware_components(&node_of(host)).await? {
            Some(read) => facts.components = Some(read),
            // The node is gone: the host controller registers it again, and its
            // status write wakes this one.
            None => return Ok(Taken::Next(Next::OnChange)),
        },
        Step::Create => match raced(ctx.store.create(&new_components(host)).await, object_name)? {
            Ok(created) => {
                tracing::info!("created the host's HostFirmwareComponents");
                facts.object = Some(Some(created));
            }
            Err(taken) => return Ok(taken),
        },
        Step::Adopt => {
            let Some(object) = object else {
                return Ok(Taken::Next(Next::After(Duration::from_secs(1))));
            };
            let adopted = ctx.store.adopt(&object, owner_reference(host, false)).await;
            match raced(adopted, object_name)? {
                Ok((adopted, added)) => {
                    if added {
                        tracing::info!("adopted the host's HostFirmwareComponents");
                    }
                    facts.object = Some(Some(adopted));
                }
                Err(taken) => return Ok(taken),
            }
        }
        Step::Status(StatusStep::Save {
            status,
            events,
            requeue,
        }) => {
            let Some(object) = object else {
                return Ok(Taken::Next(Next::After(Duration::from_secs(1))));
            };
            // Written meanwhile (the host controller recorded updates): read it
            // again and decide anew.
            let saved = ctx.store.save(&object, &status, &warnings(&events)).await;
            if let Err(taken) = raced(saved, object_name)? {
                return Ok(taken);
            }
            return Ok(Taken::Next(Next::After(requeue)));
        }
    }
    Ok(Taken::Step)
}

#[cfg(test)]
mod tests;
