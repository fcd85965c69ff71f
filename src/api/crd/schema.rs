//! Editing a CRD's generated schema: nodes by dotted path, kube's derived shape brought
//! to upstream's, condition bounds, CEL rules; and the JSON and YAML conversions.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde_json::{Value, json};

use super::cel::CelRule;

/// Why the manifests could not be generated (a bug in bmo, never user input).
#[derive(Debug, thiserror::Error)]
pub enum CrdError {
    #[error(
        "the generated {crd} schema has no node at {path}; a rule table in src/api/crd/ names a field that does not exist"
    )]
    MissingSchemaNode { crd: &'static str, path: String },
    #[error("the generated {what} is not valid: {source}")]
    Invalid {
        what: &'static str,
        #[source]
        source: serde_json::Error,
    },
    #[error("cannot render {what} as YAML: {source}")]
    Yaml {
        what: &'static str,
        #[source]
        source: serde_norway::Error,
    },
}

/// Adds the bounds metav1.Condition declares, which k8s-openapi's Condition schema
/// lacks, to the condition items at `at` (e.g. `status.conditions[]`).
pub(super) fn condition_bounds(
    crd: &'static str,
    schema: &mut Value,
    at: &str,
) -> Result<(), CrdError> {
    for (field, bounds) in [
        ("status", json!({"enum": ["True", "False", "Unknown"]})),
        (
            "type",
            json!({"maxLength": 316, "pattern": r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$"}),
        ),
        (
            "reason",
            json!({"minLength": 1, "maxLength": 1024, "pattern": "^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$"}),
        ),
        ("message", json!({"maxLength": 32768})),
        ("observedGeneration", json!({"minimum": 0})),
    ] {
        let node = node(crd, schema, &format!("{at}.{field}"))?;
        if let Value::Object(bounds) = bounds {
            node.extend(bounds);
        }
    }
    Ok(())
}

/// Places each rule as an `x-kubernetes-validations` entry of its node.
pub(super) fn add_rules(
    crd: &'static str,
    schema: &mut Value,
    rules: &[CelRule],
) -> Result<(), CrdError> {
    for rule in rules {
        let at = node(crd, schema, rule.at)?;
        let list = at
            .entry("x-kubernetes-validations")
            .or_insert_with(|| json!([]));
        if let Value::Array(list) = list {
            list.push(rule.to_json());
        }
    }
    Ok(())
}

pub(super) fn yaml<T: serde::Serialize>(what: &'static str, value: &T) -> Result<String, CrdError> {
    serde_norway::to_string(value).map_err(|source| CrdError::Yaml { what, source })
}

pub(super) fn to_json(
    what: &'static str,
    crd: &CustomResourceDefinition,
) -> Result<Value, CrdError> {
    serde_json::to_value(crd).map_err(|source| CrdError::Invalid { what, source })
}

/// Brings kube's derived CRD to upstream's shape: `listKind`, the standard root
/// properties, and no `nullable` from `Option` (callers add it back where upstream
/// has it). Returns the root schema.
pub(super) fn normalize<'a>(
    kind: &'static str,
    crd: &'a mut Value,
) -> Result<&'a mut Value, CrdError> {
    if let Some(names) = crd
        .pointer_mut("/spec/names")
        .and_then(Value::as_object_mut)
    {
        names.insert("listKind".into(), json!(format!("{kind}List")));
    }
    let schema = crd
        .pointer_mut("/spec/versions/0/schema/openAPIV3Schema")
        .ok_or(CrdError::MissingSchemaNode {
            crd: kind,
            path: "openAPIV3Schema".into(),
        })?;
    strip_nullable(schema);
    let root = node(kind, schema, "")?;
    root.remove("title");
    if let Some(Value::Object(properties)) = root.get_mut("properties") {
        properties.insert(
            "apiVersion".into(),
            json!({"type": "string", "description": "Versioned schema of this object (metal3.io/v1alpha1)."}),
        );
        properties.insert(
            "kind".into(),
            json!({"type": "string", "description": "REST resource this object represents."}),
        );
        properties.insert("metadata".into(), json!({"type": "object"}));
    }
    Ok(schema)
}

/// The schema object at a dotted path: `[]` steps into list items, `{}` into map
/// values (`spec.raid.hardwareRAIDVolumes[]`, `spec.schema{}.lower_bound`).
pub(super) fn node<'a>(
    crd: &'static str,
    schema: &'a mut Value,
    path: &str,
) -> Result<&'a mut serde_json::Map<String, Value>, CrdError> {
    let missing = || CrdError::MissingSchemaNode {
        crd,
        path: path.to_owned(),
    };
    let mut pointer = String::new();
    for segment in path.split('.').filter(|s| !s.is_empty()) {
        let (name, inner) = if let Some(name) = segment.strip_suffix("[]") {
            (name, "/items")
        } else if let Some(name) = segment.strip_suffix("{}") {
            (name, "/additionalProperties")
        } else {
            (segment, "")
        };
        pointer.push_str("/properties/");
        pointer.push_str(name);
        pointer.push_str(inner);
    }
    schema
        .pointer_mut(&pointer)
        .and_then(Value::as_object_mut)
        .ok_or_else(missing)
}

/// Removes every `nullable` (and `null` enum value) that schemars derives from `Option`.
fn strip_nullable(value: &mut Value) {
    match value {
        Value::Object(map) => {
            map.remove("nullable");
            if let Some(Value::Array(values)) = map.get_mut("enum") {
                values.retain(|v| !v.is_null());
            }
            map.values_mut().for_each(strip_nullable);
        }
        Value::Array(items) => items.iter_mut().for_each(strip_nullable),
        _ => {}
    }
}
