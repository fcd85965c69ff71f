//! The HostFirmwareComponents decisions, free of I/O: what to do next for one host,
//! the status for what Ironic reports, and which updates preparing should flash.

use crate::controller::runtime::conditions::HasConditions;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::api::BareMetalHost;
use crate::api::firmware::{
    COMPONENTS_CHANGE_DETECTED, COMPONENTS_VALID, FirmwareComponentStatus, FirmwareUpdate,
    HostFirmwareComponents, HostFirmwareComponentsStatus, NIC_COMPONENT_PREFIX,
};
pub use crate::api::firmware_pending::{PendingUpdates, pending_updates};
use crate::controller::firmware::state_machine::{
    FirmwareStatus, REQUEUE, StatusStep, has_node, ironic_read_firmware, needs_adoption,
    set_condition, status_step,
};

/// Upstream's condition reason when every update names a known component.
pub const REASON_OK: &str = "OK";
/// Upstream's condition reason when an update names an unknown component.
pub const REASON_INVALID_COMPONENT: &str = "InvalidComponent";
/// Upstream's prefix of the `Valid` message and of the event.
pub const INVALID_MESSAGE: &str = "Invalid Firmware Components";
/// Upstream's event reason for refused updates (as for refused settings).
pub use crate::controller::firmware::state_machine::EVENT_VALIDATION_FAILED;

/// What one reconcile knows so far.
#[derive(Debug, Clone, Default)]
pub struct Facts {
    pub host: Option<BareMetalHost>,
    /// The host's HostFirmwareComponents, once looked up (`Some(None)`: none).
    pub object: Option<Option<HostFirmwareComponents>>,
    /// The node's components as Ironic reports them, once read.
    pub components: Option<Vec<FirmwareComponentStatus>>,
    pub now: Option<Time>,
}

/// The next thing to do.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// The host has no node (or is going away): nothing to do until it changes.
    Idle,
    /// Look the host's HostFirmwareComponents up.
    LookUp,
    /// Read the node's firmware components.
    ReadComponents,
    /// Make the HostFirmwareComponents (empty `spec.updates`), owned by the host:
    /// only when the node has components, as upstream.
    Create,
    /// The object exists (upstream's operator or the user made it): add the host to
    /// its owners and take over the status fields written with Update.
    Adopt,
    /// Save the status, or look again later.
    Status(StatusStep<HostFirmwareComponentsStatus>),
}

/// The next step.
pub fn next(facts: &Facts) -> Step {
    let Some(host) = facts
        .host
        .as_ref()
        .filter(|h| has_node(h) && ironic_read_firmware(h))
    else {
        return Step::Idle;
    };
    let Some(object) = &facts.object else {
        return Step::LookUp;
    };
    let Some(components) = &facts.components else {
        return Step::ReadComponents;
    };
    let Some(object) = object else {
        // Upstream makes the object only for nodes whose BMC reports components.
        return if components.is_empty() {
            Step::Status(StatusStep::Unchanged(REQUEUE))
        } else {
            Step::Create
        };
    };
    if needs_adoption(object, host) {
        return Step::Adopt;
    }
    let (status, events) = status_for(object, components);
    let current = object.status.as_ref();
    Step::Status(status_step(
        current,
        (status, events),
        COMPONENTS_CHANGE_DETECTED,
        facts.now.as_ref(),
    ))
}

impl HasConditions for HostFirmwareComponentsStatus {
    fn conditions_mut(&mut self) -> &mut Vec<Condition> {
        &mut self.conditions
    }
}

impl FirmwareStatus for HostFirmwareComponentsStatus {
    fn last_updated_mut(&mut self) -> &mut Option<Time> {
        &mut self.last_updated
    }
}

/// The status for the components Ironic reports, with conditions `ChangeDetected`
/// (`spec.updates` differs from the updates applied) and `Valid`, and the event to
/// publish when an update names an unknown component. `status.updates` is kept: the
/// host controller records there what preparing flashed.
pub fn status_for(
    object: &HostFirmwareComponents,
    components: &[FirmwareComponentStatus],
) -> (HostFirmwareComponentsStatus, Vec<(String, String)>) {
    let old = object.status.clone().unwrap_or_default();
    let changed = old.updates != object.spec.updates;
    let generation = object.metadata.generation;
    let mut conditions = old.conditions.clone();
    let mut events = Vec::new();
    let mut set = |kind: &str, status: bool, reason: &str, message: &str| {
        set_condition(&mut conditions, kind, status, reason, message, generation);
    };
    set(COMPONENTS_CHANGE_DETECTED, changed, REASON_OK, "");
    match validate(&object.spec.updates).filter(|_| changed) {
        Some(error) => {
            let message = format!("{INVALID_MESSAGE}: {error}");
            set(COMPONENTS_VALID, false, REASON_INVALID_COMPONENT, &message);
            events.push((EVENT_VALIDATION_FAILED.to_owned(), message));
        }
        None => set(COMPONENTS_VALID, true, REASON_OK, ""),
    }
    let status = HostFirmwareComponentsStatus {
        updates: old.updates,
        components: components.to_vec(),
        last_updated: old.last_updated,
        conditions,
    };
    (status, events)
}

/// Why `updates` cannot be applied, in upstream's words: the first update whose
/// component is not `bios`, `bmc` or `nic:…`, with the names allowed.
pub fn validate(updates: &[FirmwareUpdate]) -> Option<String> {
    updates
        .iter()
        .find(|u| !known_component(&u.component))
        .map(|u| {
            format!(
                "component {} is invalid, only 'bmc', 'bios', or names starting with '{NIC_COMPONENT_PREFIX}' are allowed as update names",
                u.component
            )
        })
}

fn known_component(name: &str) -> bool {
    name == "bios" || name == "bmc" || name.starts_with(NIC_COMPONENT_PREFIX)
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
    use kube::ResourceExt;

    use super::*;
    use crate::api::ProvisioningState;
    use crate::api::firmware::HostFirmwareComponentsSpec;

    fn host() -> BareMetalHost {
        crate::controller::firmware::state_machine::tests::test_host("h", "node-1")
    }

    fn update(component: &str) -> FirmwareUpdate {
        FirmwareUpdate {
            component: component.into(),
            url: format!("http://images.example/{component}.bin"),
        }
    }

    fn object(updates: Vec<FirmwareUpdate>) -> HostFirmwareComponents {
        let mut o = HostFirmwareComponents::new("h", HostFirmwareComponentsSpec { updates });
        o.metadata.namespace = Some("ns".into());
        o.metadata.generation = Some(2);
        o.metadata.owner_references = Some(vec![OwnerReference {
            uid: "h-uid".into(),
            ..OwnerReference::default()
        }]);
        o
    }

    fn bmc() -> Vec<FirmwareComponentStatus> {
        vec![FirmwareComponentStatus {
            component: "bmc".into(),
            initial_version: "1.00".into(),
            current_version: Some("1.00".into()),
            ..Default::default()
        }]
    }

    fn facts(object: Option<HostFirmwareComponents>, read: Vec<FirmwareComponentStatus>) -> Facts {
        Facts {
            host: Some(host()),
            object: Some(object),
            components: Some(read),
            now: Some(Time(
                k8s_openapi::jiff::Timestamp::from_second(1_000).unwrap(),
            )),
        }
    }

    fn saved(step: Step) -> (HostFirmwareComponentsStatus, Vec<(String, String)>) {
        match step {
            Step::Status(StatusStep::Save { status, events, .. }) => (status, events),
            other => panic!("expected a status write, got {other:?}"),
        }
    }

    fn condition<'a>(status: &'a HostFirmwareComponentsStatus, kind: &str) -> (&'a str, &'a str) {
        let c = status.conditions.iter().find(|c| c.type_ == kind).unwrap();
        (c.status.as_str(), c.reason.as_str())
    }

    #[test]
    fn made_only_for_nodes_with_components() {
        assert_eq!(
            next(&facts(None, Vec::new())),
            Step::Status(StatusStep::Unchanged(REQUEUE))
        );
        assert_eq!(next(&facts(None, bmc())), Step::Create);
    }

    #[test]
    fn nothing_is_read_before_registration_and_inspection_end() {
        for state in [
            ProvisioningState::Registering,
            ProvisioningState::Inspecting,
        ] {
            let mut waiting = Facts {
                host: Some(host()),
                ..Facts::default()
            };
            if let Some(s) = waiting.host.as_mut().and_then(|h| h.status.as_mut()) {
                s.provisioning.state = state;
            }
            assert_eq!(next(&waiting), Step::Idle, "{state}");
        }
    }

    #[test]
    fn an_object_someone_else_made_is_adopted_first() {
        let mut o = object(Vec::new());
        o.metadata.owner_references = None;
        assert_eq!(next(&facts(Some(o), bmc())), Step::Adopt);
    }

    #[test]
    fn components_and_settled_conditions_are_saved_then_left_alone() {
        let (status, events) = saved(next(&facts(Some(object(Vec::new())), bmc())));
        assert_eq!(status.components, bmc());
        assert_eq!(condition(&status, "ChangeDetected"), ("False", "OK"));
        assert_eq!(condition(&status, "Valid"), ("True", "OK"));
        assert!(status.last_updated.is_some());
        assert!(events.is_empty());
        let mut o = object(Vec::new());
        o.status = Some(status);
        assert_eq!(
            next(&facts(Some(o), bmc())),
            Step::Status(StatusStep::Unchanged(REQUEUE))
        );
    }

    #[test]
    fn an_unknown_component_is_refused_with_the_allowed_names() {
        let (status, events) = saved(next(&facts(
            Some(object(vec![update("bios"), update("cpld")])),
            bmc(),
        )));
        assert_eq!(condition(&status, "ChangeDetected"), ("True", "OK"));
        assert_eq!(condition(&status, "Valid"), ("False", "InvalidComponent"));
        let message = "Invalid Firmware Components: component cpld is invalid, only 'bmc', 'bios', or names starting with 'nic:' are allowed as update names";
        assert_eq!(
            events,
            vec![("ValidationFailed".to_owned(), message.to_owned())]
        );
        let mut o = object(vec![update("bios"), update("cpld")]);
        o.status = Some(status);
        assert_eq!(pending_updates(Some(&o)), PendingUpdates::None);
    }

    #[test]
    fn a_valid_change_is_pending_until_recorded_as_applied() {
        let wanted = vec![update("bios"), update("nic:NIC.1")];
        let (status, _) = saved(next(&facts(Some(object(wanted.clone())), bmc())));
        let mut o = object(wanted.clone());
        o.status = Some(status);
        assert_eq!(
            pending_updates(Some(&o)),
            PendingUpdates::Apply {
                flash: wanted.clone(),
                spec: wanted.clone()
            }
        );
        // Only what is not recorded yet.
        o.status.as_mut().unwrap().updates = vec![update("bios")];
        assert_eq!(
            pending_updates(Some(&o)),
            PendingUpdates::Apply {
                flash: vec![update("nic:NIC.1")],
                spec: wanted.clone()
            }
        );
        // Recorded: nothing left, even before the conditions are refreshed.
        o.status.as_mut().unwrap().updates = wanted;
        assert_eq!(pending_updates(Some(&o)), PendingUpdates::None);
        // A spec newer than the conditions: wait for them.
        o.metadata.generation = Some(3);
        assert_eq!(pending_updates(Some(&o)), PendingUpdates::NotReady);
    }

    #[test]
    fn hosts_without_a_node_paused_detached_or_unmanaged_are_left_alone() {
        /// The step for facts whose host is changed by `change`.
        fn next_for(change: impl FnOnce(&mut BareMetalHost)) -> Step {
            let mut f = facts(None, bmc());
            change(f.host.as_mut().unwrap());
            next(&f)
        }
        assert_eq!(next_for(|h| h.status = None), Step::Idle);
        for annotation in [
            "baremetalhost.metal3.io/paused",
            "baremetalhost.metal3.io/detached",
        ] {
            let annotate = |h: &mut BareMetalHost| {
                h.annotations_mut().insert(annotation.into(), String::new());
            };
            assert_eq!(next_for(annotate), Step::Idle, "{annotation}");
        }
        let unmanaged = |h: &mut BareMetalHost| {
            h.status.as_mut().unwrap().provisioning.state =
                crate::api::ProvisioningState::Unmanaged;
        };
        assert_eq!(next_for(unmanaged), Step::Idle);
        let detached = |h: &mut BareMetalHost| {
            h.status.as_mut().unwrap().operational_status = crate::api::OperationalStatus::Detached;
        };
        assert_eq!(next_for(detached), Step::Idle);
    }
}
