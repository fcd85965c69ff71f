//! The Events bmo posts about hosts, shaped as upstream's operator posts them, so that
//! tools selecting events by source or reporting controller keep finding them after
//! a switch (docs/migration.md).
//!
//! Upstream creates core/v1 Events itself (not through a recorder), one per
//! occurrence: named after the reason, about the host, with its consumer as the
//! related object. bmo does the same; the only difference is `type`, which is
//! `Warning` for errors where upstream always says `Normal`.

use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::ResourceExt;

use super::HostEvent;
use crate::api::BareMetalHost;

/// Upstream's `source.component` on host events.
pub const SOURCE_COMPONENT: &str = "metal3-baremetal-controller";
/// Upstream's `reportingController` on host events.
pub const REPORTING_CONTROLLER: &str = "metal3.io/baremetal-controller";
/// Longest message kept (the events API refuses longer notes).
const MAX_MESSAGE: usize = 1000;

/// The core/v1 Event for `event` about `host`, as of `now`; `instance` (the pod's
/// name) goes in `reportingInstance` when known.
pub fn host_event(
    host: &BareMetalHost,
    event: &HostEvent,
    instance: Option<&str>,
    now: &Time,
) -> Event {
    Event {
        metadata: ObjectMeta {
            generate_name: Some(format!("{}-", event.reason)),
            namespace: host.namespace(),
            ..ObjectMeta::default()
        },
        involved_object: ObjectReference {
            api_version: Some("metal3.io/v1alpha1".into()),
            kind: Some("BareMetalHost".into()),
            name: Some(host.name_any()),
            namespace: host.namespace(),
            uid: host.metadata.uid.clone(),
            ..ObjectReference::default()
        },
        reason: Some(event.reason.clone()),
        message: Some(event.message.chars().take(MAX_MESSAGE).collect()),
        source: Some(EventSource {
            component: Some(SOURCE_COMPONENT.into()),
            host: None,
        }),
        first_timestamp: Some(now.clone()),
        last_timestamp: Some(now.clone()),
        count: Some(1),
        type_: Some(if event.warning { "Warning" } else { "Normal" }.into()),
        reporting_component: Some(REPORTING_CONTROLLER.into()),
        reporting_instance: instance.map(str::to_owned),
        related: host.spec.consumer_ref.clone(),
        ..Event::default()
    }
}
