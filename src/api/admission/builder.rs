//! How bmo's admission policies are built: a policy with its binding, and the pieces
//! every policy shares.

use k8s_openapi::api::admissionregistration::v1::{
    MatchCondition, MatchResources, NamedRuleWithOperations, ValidatingAdmissionPolicy,
    ValidatingAdmissionPolicyBinding, ValidatingAdmissionPolicyBindingSpec,
    ValidatingAdmissionPolicySpec, Validation, Variable,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::api::{GROUP, VERSION};

/// A policy with its binding, and the file under `deploy/` that holds both.
#[derive(Debug, Clone)]
pub struct Policy {
    pub file: &'static str,
    pub policy: ValidatingAdmissionPolicy,
    pub binding: ValidatingAdmissionPolicyBinding,
}

/// Objects being deleted must stay updatable (finalizer removal), whatever they hold.
pub(super) fn not_deleting() -> Vec<MatchCondition> {
    vec![MatchCondition {
        name: "not-being-deleted".into(),
        expression: "!has(object.metadata.deletionTimestamp)".into(),
    }]
}

pub(super) fn invalid(expression: String, message: &str) -> Validation {
    Validation {
        expression,
        message: Some(message.into()),
        message_expression: None,
        reason: Some("Invalid".into()),
    }
}

/// A policy named `name` on `resource` for `operations`, with its binding.
pub(super) fn policy(
    file: &'static str,
    name: &str,
    resource: &str,
    operations: &[&str],
    match_conditions: Vec<MatchCondition>,
    variables: Vec<Variable>,
    validations: Vec<Validation>,
) -> Policy {
    let rules = MatchResources {
        resource_rules: Some(vec![NamedRuleWithOperations {
            api_groups: Some(vec![GROUP.into()]),
            api_versions: Some(vec![VERSION.into()]),
            operations: Some(operations.iter().map(|&op| op.into()).collect()),
            resources: Some(vec![resource.into()]),
            ..Default::default()
        }]),
        ..Default::default()
    };
    let meta = ObjectMeta {
        name: Some(name.into()),
        labels: Some([("app.kubernetes.io/part-of".to_owned(), "bmo".to_owned())].into()),
        ..Default::default()
    };
    Policy {
        file,
        policy: ValidatingAdmissionPolicy {
            metadata: meta.clone(),
            spec: Some(ValidatingAdmissionPolicySpec {
                failure_policy: Some("Fail".into()),
                match_constraints: Some(rules),
                match_conditions: (!match_conditions.is_empty()).then_some(match_conditions),
                variables: (!variables.is_empty()).then_some(variables),
                validations: Some(validations),
                ..Default::default()
            }),
            status: None,
        },
        binding: ValidatingAdmissionPolicyBinding {
            metadata: meta,
            spec: ValidatingAdmissionPolicyBindingSpec {
                policy_name: name.into(),
                validation_actions: vec!["Deny".into()],
                ..Default::default()
            },
        },
    }
}
