//! The Events bmo posts about its objects, shaped as upstream's operator posts them, so that
//! tools selecting events by source or reporting controller keep finding them after
//! a switch (docs/migration.md).
//!
//! Upstream creates core/v1 Events itself (not through a recorder), one per
//! occurrence: named after the reason, about the host, with its consumer as the
//! related object. bmo does the same; the only difference is `type`, which is
//! `Warning` for errors where upstream always says `Normal`.

use std::borrow::Cow;

use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::{Resource, ResourceExt};

use super::HostEvent;

/// Upstream's `source.component` on host events.
pub const SOURCE_COMPONENT: &str = "metal3-baremetal-controller";
/// Upstream's `reportingController` on host events.
pub const REPORTING_CONTROLLER: &str = "metal3.io/baremetal-controller";

/// Who an event says posted it: upstream's `source.component` and
/// `reportingController` of the controller bmo stands in for.
#[derive(Debug, Clone)]
pub struct Reporter {
    pub component: Cow<'static, str>,
    pub controller: Cow<'static, str>,
}

impl Reporter {
    /// Upstream's controller of `kind`, named after it as upstream names all but the
    /// host's: `metal3-dataimage-controller`, `metal3.io/dataimage-controller`.
    pub fn upstream(kind: &str) -> Reporter {
        let kind = kind.to_lowercase();
        Reporter {
            component: format!("metal3-{kind}-controller").into(),
            controller: format!("metal3.io/{kind}-controller").into(),
        }
    }
}

/// The host controller's reporter.
pub const HOST_REPORTER: Reporter = Reporter {
    component: Cow::Borrowed(SOURCE_COMPONENT),
    controller: Cow::Borrowed(REPORTING_CONTROLLER),
};
/// Longest message kept (the events API refuses longer notes).
const MAX_MESSAGE: usize = 1000;

/// The core/v1 Event for `event` about `object` of one of bmo's kinds, posted as
/// upstream's `reporter` posts it; `related` is the object's consumer, if any.
pub fn upstream_event<K: Resource<DynamicType = ()>>(
    object: &K,
    reporter: &Reporter,
    event: &HostEvent,
    related: Option<ObjectReference>,
    instance: Option<&str>,
    now: &Time,
) -> Event {
    Event {
        metadata: ObjectMeta {
            generate_name: Some(format!("{}-", event.reason)),
            namespace: object.namespace(),
            ..ObjectMeta::default()
        },
        involved_object: ObjectReference {
            api_version: Some(K::api_version(&()).into_owned()),
            kind: Some(K::kind(&()).into_owned()),
            name: Some(object.name_any()),
            namespace: object.namespace(),
            uid: object.meta().uid.clone(),
            ..ObjectReference::default()
        },
        reason: Some(event.reason.clone()),
        message: Some(event.message.chars().take(MAX_MESSAGE).collect()),
        source: Some(EventSource {
            component: Some(reporter.component.to_string()),
            host: None,
        }),
        first_timestamp: Some(now.clone()),
        last_timestamp: Some(now.clone()),
        count: Some(1),
        type_: Some(if event.warning { "Warning" } else { "Normal" }.into()),
        reporting_component: Some(reporter.controller.to_string()),
        reporting_instance: instance.map(str::to_owned),
        related,
        ..Event::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::BareMetalHost;

    /// An event about `host`, as the host controller posts it.
    fn host_event(
        host: &BareMetalHost,
        event: &HostEvent,
        instance: Option<&str>,
        now: &Time,
    ) -> Event {
        let related = host.spec.consumer_ref.clone();
        upstream_event(host, &HOST_REPORTER, event, related, instance, now)
    }

    fn host(consumer: Option<serde_json::Value>) -> BareMetalHost {
        let mut spec = serde_json::json!({"online": true});
        if let Some(c) = consumer {
            spec["consumerRef"] = c;
        }
        serde_json::from_value(serde_json::json!({
            "apiVersion": "metal3.io/v1alpha1", "kind": "BareMetalHost",
            "metadata": {"name": "h", "namespace": "ns", "uid": "u-1"},
            "spec": spec,
        }))
        .expect("valid host")
    }

    fn event(warning: bool, message: String) -> HostEvent {
        HostEvent {
            reason: "ProvisioningError".into(),
            message,
            warning,
        }
    }

    #[test]
    fn a_kinds_reporter_is_upstreams_controller_of_it() {
        let dataimage = Reporter::upstream("DataImage");
        assert_eq!(dataimage.component, "metal3-dataimage-controller");
        assert_eq!(dataimage.controller, "metal3.io/dataimage-controller");
        let subscription = Reporter::upstream("BMCEventSubscription");
        assert_eq!(
            subscription.component,
            "metal3-bmceventsubscription-controller"
        );
        let settings = Reporter::upstream("HostFirmwareSettings");
        assert_eq!(
            settings.controller,
            "metal3.io/hostfirmwaresettings-controller"
        );
    }

    #[test]
    fn a_host_event_has_upstreams_fields() {
        let now = Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH);
        let consumer = serde_json::json!({"kind": "Metal3Machine", "name": "m", "namespace": "ns"});
        let e = host_event(
            &host(Some(consumer)),
            &event(true, "x".repeat(2000)),
            Some("bmo-0"),
            &now,
        );
        assert_eq!(
            e.metadata.generate_name.as_deref(),
            Some("ProvisioningError-")
        );
        assert_eq!(e.metadata.namespace.as_deref(), Some("ns"));
        assert_eq!(e.involved_object.uid.as_deref(), Some("u-1"));
        assert_eq!(
            e.source.and_then(|s| s.component).as_deref(),
            Some(SOURCE_COMPONENT)
        );
        assert_eq!(e.reporting_component.as_deref(), Some(REPORTING_CONTROLLER));
        assert_eq!(e.reporting_instance.as_deref(), Some("bmo-0"));
        assert_eq!(e.related.and_then(|r| r.name).as_deref(), Some("m"));
        assert_eq!(e.type_.as_deref(), Some("Warning"));
        assert_eq!(e.message.map(|m| m.len()), Some(MAX_MESSAGE));
        assert_eq!((e.count, e.first_timestamp.is_some()), (Some(1), true));

        let plain = host_event(&host(None), &event(false, "ok".into()), None, &now);
        assert_eq!(plain.related, None);
        assert_eq!(plain.type_.as_deref(), Some("Normal"));
        assert_eq!(plain.reporting_instance, None);
    }
}
