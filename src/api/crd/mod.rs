//! CustomResourceDefinitions for `BareMetalHost` and `HardwareData` (the other kinds'
//! are in [`kinds`]), with the CEL rules
//! that make the API server itself reject bad hosts (no admission webhook needed), and
//! the rendering behind `bmo crds`.
//!
//! The schema comes from the Rust types (schemars through kube's derive); this module
//! then adjusts it to upstream's shape (nullable only where upstream has it, atomic
//! object references) and adds the `x-kubernetes-validations` listed in
//! [`baremetalhost_rules`]. Rules that need the namespace, annotations or a DELETE
//! are ValidatingAdmissionPolicies, see [`super::admission`].
//!
//! The rule type is in `cel`, the BareMetalHost rules in `host_rules`, the schema
//! editing that every CRD here goes through in `schema`.

pub mod kinds;

mod cel;
mod host_rules;
mod schema;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;
use serde_json::{Value, json};

use super::admission;
use super::hardware::HardwareData;
use super::host::BareMetalHost;
use schema::{condition_bounds, node, normalize, to_json, yaml};

pub use cel::{CelRule, Reason};
pub use host_rules::baremetalhost_rules;
pub use schema::CrdError;

/// A generated file that `bmo crds` prints and `deploy/` holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Manifest {
    /// Path below `deploy/`, e.g. `crds/metal3.io_baremetalhosts.yaml`.
    pub path: String,
    /// The YAML document(s).
    pub yaml: String,
}

/// Places where upstream accepts `null` (Go writes nil slices of RAIDConfig and zero
/// times as null). Everywhere else kube-apiserver refuses a `null`, as upstream's CRD.
const BMH_NULLABLE: &[&str] = &[
    "spec.raid.hardwareRAIDVolumes",
    "spec.raid.softwareRAIDVolumes",
    "status.provisioning.raid.hardwareRAIDVolumes",
    "status.provisioning.raid.softwareRAIDVolumes",
    "status.operationHistory.register.start",
    "status.operationHistory.register.end",
    "status.operationHistory.inspect.start",
    "status.operationHistory.inspect.end",
    "status.operationHistory.provision.start",
    "status.operationHistory.provision.end",
    "status.operationHistory.deprovision.start",
    "status.operationHistory.deprovision.end",
];

/// Object references that are replaced as a whole by server-side apply (as upstream).
const BMH_ATOMIC: &[&str] = &[
    "spec.consumerRef",
    "spec.userData",
    "spec.networkData",
    "spec.metaData",
    "status.goodCredentials.credentials",
    "status.triedCredentials.credentials",
];

/// The BareMetalHost CRD, with its CEL rules.
pub fn baremetalhost_crd() -> Result<CustomResourceDefinition, CrdError> {
    const CRD: &str = "BareMetalHost";
    let mut crd = to_json(CRD, &BareMetalHost::crd())?;
    let schema = normalize(CRD, &mut crd)?;
    for path in BMH_NULLABLE {
        node(CRD, schema, path)?.insert("nullable".into(), json!(true));
    }
    condition_bounds(CRD, schema, "status.conditions[]")?;
    // Upstream accepts a host without spec (its `demo-discovered` example); kube's
    // derive marks spec required, BareMetalHostSpec deserializes a missing one as default.
    let root = node(CRD, schema, "")?;
    if let Some(Value::Array(required)) = root.get_mut("required") {
        required.retain(|field| field != "spec");
        if required.is_empty() {
            root.remove("required");
        }
    }
    // Bounds the cost kube-apiserver estimates for the Secret-name rule (253: the
    // longest object name).
    node(CRD, schema, "spec.userData.name")?.insert("maxLength".into(), json!(253));
    node(CRD, schema, "spec.taints[].effect")?.insert(
        "enum".into(),
        json!(["NoSchedule", "PreferNoSchedule", "NoExecute"]),
    );
    for path in BMH_ATOMIC {
        node(CRD, schema, path)?.insert("x-kubernetes-map-type".into(), json!("atomic"));
    }
    schema::add_rules(CRD, schema, &baremetalhost_rules())?;
    serde_json::from_value(crd).map_err(|source| CrdError::Invalid { what: CRD, source })
}

/// The HardwareData CRD.
pub fn hardwaredata_crd() -> Result<CustomResourceDefinition, CrdError> {
    const CRD: &str = "HardwareData";
    let mut crd = to_json(CRD, &HardwareData::crd())?;
    normalize(CRD, &mut crd)?;
    serde_json::from_value(crd).map_err(|source| CrdError::Invalid { what: CRD, source })
}

/// Every file of `deploy/` that bmo generates, in a stable order.
pub fn manifests() -> Result<Vec<Manifest>, CrdError> {
    let mut out = vec![
        Manifest {
            path: "crds/metal3.io_baremetalhosts.yaml".into(),
            yaml: yaml("BareMetalHost CRD", &baremetalhost_crd()?)?,
        },
        Manifest {
            path: "crds/metal3.io_hardwaredata.yaml".into(),
            yaml: yaml("HardwareData CRD", &hardwaredata_crd()?)?,
        },
    ];
    for (kind, crd) in kinds::crds()? {
        out.push(Manifest {
            path: kind.file(),
            yaml: yaml(kind.kind, &crd)?,
        });
    }
    for policy in admission::policies() {
        let mut text = yaml("admission policy", &policy.policy)?;
        text.push_str("---\n");
        text.push_str(&yaml("admission policy binding", &policy.binding)?);
        out.push(Manifest {
            path: policy.file.into(),
            yaml: text,
        });
    }
    Ok(out)
}

/// All manifests as one multi-document YAML stream (what `bmo crds` prints).
pub fn render_all() -> Result<String, CrdError> {
    let mut out = String::new();
    for manifest in manifests()? {
        out.push_str("---\n");
        out.push_str(&manifest.yaml);
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
