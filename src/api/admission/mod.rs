//! ValidatingAdmissionPolicies for the rules a CRD schema cannot express: the
//! BareMetalHost DELETE guard, checks that need the object's namespace or annotations
//! (CRD CEL rules see neither), and HostClaim's label-selector checks (too costly for a
//! CRD rule). They run inside kube-apiserver; no webhook is deployed.

use k8s_openapi::api::admissionregistration::v1::{Validation, Variable};

use super::host::{
    ALLOW_DELETE_WHILE_CONSUMED_ANNOTATION, DELETE_FOR_MOVE_ANNOTATION, HARDWARE_DETAILS_ANNOTATION,
};
use super::network::IN_USE_ANNOTATION;

mod builder;
mod link_local;

pub use builder::Policy;
use builder::{invalid, not_deleting, policy};
pub use link_local::{
    DATA_IMAGE_LINK_LOCAL_POLICY, FIRMWARE_COMPONENTS_LINK_LOCAL_POLICY,
    LINK_LOCAL_EXEMPTION_LABEL, LINK_LOCAL_POLICY,
};

/// Name of the policy (and its binding) that refuses deleting hosts in use.
pub const DELETE_GUARD_POLICY: &str = "bmo-baremetalhost-delete-guard";
/// Name of the policy (and its binding) for namespace and annotation rules.
pub const REFERENCES_POLICY: &str = "bmo-baremetalhost-references";

/// Name of the policy (and its binding) for HostClaim label selectors.
pub const HOST_CLAIM_SELECTOR_POLICY: &str = "bmo-hostclaim-selector";
/// Name of the policy (and its binding) for the BMCEventSubscription header Secret.
pub const EVENT_SUBSCRIPTION_POLICY: &str = "bmo-bmceventsubscription-references";
/// Name of the policy (and its binding) that keeps HostNetworkAttachments in use.
pub const ATTACHMENT_IN_USE_POLICY: &str = "bmo-hostnetworkattachment-in-use";

/// Every admission policy bmo ships.
pub fn policies() -> Vec<Policy> {
    vec![
        delete_guard(),
        references(),
        host_claim_selector(),
        event_subscription_references(),
        attachment_in_use(),
        link_local::host_policy(),
        link_local::data_image_policy(),
        link_local::firmware_components_policy(),
    ]
}

/// CEL: `value` is a valid label value.
fn label_value(value: &str) -> String {
    format!("!format.labelValue().validate({value}).hasValue()")
}

/// CEL: `key` is a valid label key (`[prefix/]name`).
fn label_key(key: &str) -> String {
    format!("!format.qualifiedName().validate({key}).hasValue()")
}

/// Upstream's webhook checks of a HostClaim's label selector. They are a policy, not
/// CRD rules: kube-apiserver estimates label checks over an unbounded map and list as
/// too costly for a CRD (policies are only limited when they run).
fn host_claim_selector() -> Policy {
    let expressions = "variables.selector.matchExpressions";
    let validations = vec![
        invalid(
            format!(
                "!has(variables.selector.matchLabels) || variables.selector.matchLabels.all(key, {})",
                label_key("key")
            ),
            "spec.hostSelector.matchLabels: every key must be a label key ([prefix/]name: at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit)",
        ),
        invalid(
            format!(
                "!has(variables.selector.matchLabels) || variables.selector.matchLabels.all(key, {})",
                label_value("variables.selector.matchLabels[key]")
            ),
            "spec.hostSelector.matchLabels: every value must be a label value (at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit)",
        ),
        invalid(
            format!(
                "!has({expressions}) || {expressions}.all(e, {})",
                label_key("e.key")
            ),
            "spec.hostSelector.matchExpressions[].key must be a label key ([prefix/]name)",
        ),
        invalid(
            format!(
                "!has({expressions}) || {expressions}.all(e, e.operator in ['in', 'notin', '=', '==', '!=', 'exists', '!'])"
            ),
            "spec.hostSelector.matchExpressions[].operator must be one of in, notin, =, ==, !=, exists, ! (does not exist)",
        ),
        invalid(
            format!(
                "!has({expressions}) || {expressions}.all(e, !(e.operator in ['=', '==', '!=']) || size(e.values) == 1)"
            ),
            "spec.hostSelector.matchExpressions[].values must hold exactly one value for the operators =, == and !=",
        ),
        invalid(
            format!(
                "!has({expressions}) || {expressions}.all(e, !(e.operator in ['in', 'notin']) || size(e.values) > 0)"
            ),
            "spec.hostSelector.matchExpressions[].values must hold at least one value for the operators in and notin",
        ),
        invalid(
            format!(
                "!has({expressions}) || {expressions}.all(e, !(e.operator in ['exists', '!']) || size(e.values) == 0)"
            ),
            "spec.hostSelector.matchExpressions[].values must be empty for the operators exists and !",
        ),
        invalid(
            format!(
                "!has({expressions}) || {expressions}.all(e, e.values.all(value, {}))",
                label_value("value")
            ),
            "spec.hostSelector.matchExpressions[].values: every value must be a label value (at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit)",
        ),
    ];
    let variables = vec![Variable {
        name: "selector".into(),
        expression:
            "has(object.spec) && has(object.spec.hostSelector) ? object.spec.hostSelector : {}"
                .into(),
    }];
    policy(
        "admission/hostclaim-selector.yaml",
        HOST_CLAIM_SELECTOR_POLICY,
        "hostclaims",
        &["CREATE", "UPDATE"],
        not_deleting(),
        variables,
        validations,
    )
}

/// The header Secret of a BMCEventSubscription must be in its own namespace (a CRD
/// rule cannot see the object's namespace).
fn event_subscription_references() -> Policy {
    let validation = invalid(
        "!has(object.spec) || !has(object.spec.httpHeadersRef) || !has(object.spec.httpHeadersRef.namespace) \
         || object.spec.httpHeadersRef.namespace == '' || object.spec.httpHeadersRef.namespace == object.metadata.namespace"
            .into(),
        "spec.httpHeadersRef.namespace must be empty or the subscription's own namespace: the header Secret is read only from there",
    );
    policy(
        "admission/bmceventsubscription-references.yaml",
        EVENT_SUBSCRIPTION_POLICY,
        "bmceventsubscriptions",
        &["CREATE", "UPDATE"],
        not_deleting(),
        Vec::new(),
        vec![validation],
    )
}

/// Upstream's webhook refuses changing or deleting a HostNetworkAttachment that a
/// BareMetalHost's `spec.networkInterfaces` references. A policy cannot list hosts,
/// so bmo's attachment controller records the references in an annotation on the
/// attachment, and this policy reads it from the stored object.
fn attachment_in_use() -> Policy {
    let key = IN_USE_ANNOTATION;
    let in_use = format!(
        "has(oldObject.metadata.annotations) && '{key}' in oldObject.metadata.annotations \
         && oldObject.metadata.annotations['{key}'] != ''"
    );
    let users = format!("oldObject.metadata.annotations['{key}']");
    // `operation` is refused while the annotation names users (unless `allowed`
    // holds); `listed` leads the message that names them.
    let refused_while_in_use =
        |operation: &str, allowed: &str, message: &str, listed: &str, reason: &str| Validation {
            expression: format!("request.operation != '{operation}' || !({in_use}){allowed}"),
            message: Some(message.into()),
            message_expression: Some(format!(
                "'{listed}: ' + {users} \
                 + '; remove those references from the hosts\\' spec.networkInterfaces first'"
            )),
            reason: Some(reason.into()),
        };
    let unchanged_spec = refused_while_in_use(
        "UPDATE",
        " || (has(object.spec) == has(oldObject.spec) \
         && (!has(object.spec) || object.spec == oldObject.spec))",
        "HostNetworkAttachment spec is immutable while BareMetalHost interfaces reference it",
        "HostNetworkAttachment spec is immutable while referenced by BareMetalHost interfaces",
        "Invalid",
    );
    let no_delete = refused_while_in_use(
        "DELETE",
        "",
        "cannot delete a HostNetworkAttachment while BareMetalHost interfaces reference it",
        "cannot delete attachment while referenced by BareMetalHost interfaces",
        "Forbidden",
    );
    policy(
        "admission/hostnetworkattachment-in-use.yaml",
        ATTACHMENT_IN_USE_POLICY,
        "hostnetworkattachments",
        &["UPDATE", "DELETE"],
        Vec::new(),
        Vec::new(),
        vec![unchanged_spec, no_delete],
    )
}

fn delete_guard() -> Policy {
    let key = ALLOW_DELETE_WHILE_CONSUMED_ANNOTATION;
    // `clusterctl move` deletes the source copy of a consumed host after creating it
    // in the target; it marks that delete with its own annotation (and replaces all
    // other annotations with it).
    let moved = DELETE_FOR_MOVE_ANNOTATION;
    let validation = Validation {
        expression: format!(
            "!has(oldObject.spec) || !has(oldObject.spec.consumerRef) || (has(oldObject.metadata.annotations) \
             && (('{key}' in oldObject.metadata.annotations && oldObject.metadata.annotations['{key}'] == 'true') \
             || '{moved}' in oldObject.metadata.annotations))"
        ),
        message: Some(format!(
            "this BareMetalHost is in use (spec.consumerRef is set): release it from its consumer first, \
             or set the annotation {key}: \"true\" to delete it anyway"
        )),
        message_expression: Some(format!(
            "'BareMetalHost ' + oldObject.metadata.name + ' is in use (spec.consumerRef names ' \
             + (has(oldObject.spec.consumerRef.kind) ? oldObject.spec.consumerRef.kind + ' ' : '') \
             + (has(oldObject.spec.consumerRef.name) ? oldObject.spec.consumerRef.name : '(no name)') \
             + '): release it from its consumer first, or set the annotation {key}: \"true\" to delete it anyway'"
        )),
        reason: Some("Forbidden".into()),
    };
    policy(
        "admission/baremetalhost-delete-guard.yaml",
        DELETE_GUARD_POLICY,
        "baremetalhosts",
        &["DELETE"],
        Vec::new(),
        Vec::new(),
        vec![validation],
    )
}

fn references() -> Policy {
    let same_namespace = |field: &str| Validation {
        expression: format!(
            "!has(object.spec) || !has(object.spec.{field}) || !has(object.spec.{field}.namespace) \
             || object.spec.{field}.namespace == '' || object.spec.{field}.namespace == object.metadata.namespace"
        ),
        message: Some(format!(
            "spec.{field}.namespace must be empty or the host's own namespace: bmo reads this Secret only from the host's namespace"
        )),
        message_expression: None,
        reason: Some("Invalid".into()),
    };
    let variables = vec![
        Variable {
            name: "inspect".into(),
            expression: "has(object.metadata.annotations) && 'inspect.metal3.io' in object.metadata.annotations \
                         ? object.metadata.annotations['inspect.metal3.io'] : ''"
                .into(),
        },
        Variable {
            name: "hasHardwareDetails".into(),
            expression: format!(
                "has(object.metadata.annotations) && '{HARDWARE_DETAILS_ANNOTATION}' in object.metadata.annotations"
            ),
        },
        Variable {
            name: "inspectionMode".into(),
            expression: "has(object.spec) && has(object.spec.inspectionMode) ? object.spec.inspectionMode : ''".into(),
        },
    ];
    let validations = vec![
        same_namespace("userData"),
        same_namespace("networkData"),
        same_namespace("metaData"),
        Validation {
            expression: "variables.inspect in ['', 'disabled']".into(),
            message: Some(
                "metadata.annotations[inspect.metal3.io] must be \"\" (inspect again) or \"disabled\"; prefer spec.inspectionMode".into(),
            ),
            message_expression: None,
            reason: Some("Invalid".into()),
        },
        Validation {
            expression: "!(variables.inspect == 'disabled' && variables.inspectionMode != '' && variables.inspectionMode != 'disabled')".into(),
            message: Some(
                "metadata.annotations[inspect.metal3.io]: \"disabled\" contradicts spec.inspectionMode: remove the annotation and keep spec.inspectionMode".into(),
            ),
            message_expression: None,
            reason: Some("Invalid".into()),
        },
        Validation {
            expression: "!(variables.inspect == 'disabled' && has(object.spec) && has(object.spec.bmc) && object.spec.bmc.address != '') \
                         || (has(object.spec.bootMACAddress) && object.spec.bootMACAddress != '')"
                .into(),
            message: Some(
                "spec.bootMACAddress is required when inspection is disabled by metadata.annotations[inspect.metal3.io]: without inspection the boot NIC cannot be discovered".into(),
            ),
            message_expression: None,
            reason: Some("Invalid".into()),
        },
        Validation {
            expression: "!variables.hasHardwareDetails || variables.inspect == 'disabled' || variables.inspectionMode == 'disabled'".into(),
            message: Some(format!(
                "metadata.annotations[{HARDWARE_DETAILS_ANNOTATION}] needs inspection disabled (spec.inspectionMode: disabled): supplied hardware details replace inspection"
            )),
            message_expression: None,
            reason: Some("Invalid".into()),
        },
    ];
    policy(
        "admission/baremetalhost-references.yaml",
        REFERENCES_POLICY,
        "baremetalhosts",
        &["CREATE", "UPDATE"],
        not_deleting(),
        variables,
        validations,
    )
}
