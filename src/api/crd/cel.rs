//! A CEL rule as placed in a CRD schema (`x-kubernetes-validations`): where it sits,
//! the expression, the message and the reason.

use serde_json::{Value, json};

/// `reason` of a CEL rule: decides the wording kube-apiserver puts before the message.
/// (FieldValueDuplicate is left out: kube-apiserver drops the message with it.)
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// "Invalid value"
    Invalid,
    /// "Required value"
    Required,
    /// "Forbidden"
    Forbidden,
}

impl Reason {
    pub(super) fn as_str(self) -> &'static str {
        match self {
            Reason::Invalid => "FieldValueInvalid",
            Reason::Required => "FieldValueRequired",
            Reason::Forbidden => "FieldValueForbidden",
        }
    }
}

/// One CEL rule placed in the schema.
#[derive(Debug, Clone)]
pub struct CelRule {
    /// Where the rule sits: dotted path from the object root, `[]` for list items,
    /// "" for the root itself. `self` in the rule is the value at this place.
    pub at: &'static str,
    /// The CEL expression; true means valid.
    pub rule: String,
    /// What the user reads; names the field and the rule.
    pub message: &'static str,
    /// Field the error is reported on, relative to `at` (e.g. `.bootMACAddress`).
    pub field_path: Option<&'static str>,
    pub reason: Reason,
}

impl CelRule {
    pub(super) fn new(at: &'static str, rule: impl Into<String>, message: &'static str) -> Self {
        Self {
            at,
            rule: rule.into(),
            message,
            field_path: None,
            reason: Reason::Invalid,
        }
    }

    pub(super) fn on(mut self, field_path: &'static str) -> Self {
        self.field_path = Some(field_path);
        self
    }

    pub(super) fn reason(mut self, reason: Reason) -> Self {
        self.reason = reason;
        self
    }

    pub(super) fn to_json(&self) -> Value {
        let mut rule = json!({
            "rule": self.rule,
            "message": self.message,
            "reason": self.reason.as_str(),
        });
        if let Some(path) = self.field_path {
            rule["fieldPath"] = json!(path);
        }
        rule
    }
}
