//! CustomResourceDefinitions of upstream's eleven kinds beyond BareMetalHost and
//! HardwareData, brought to upstream's shape, with CEL rules where upstream runs a
//! validating webhook.
//!
//! Each kind's schema comes from its Rust type (kube's derive); [`Shape`] lists what
//! the derive cannot say (status subresource without a status schema, untyped Go
//! integers, atomic references, required fields that have a default, condition list
//! semantics). tests/api/api_upstream_schema.rs compares every field with facts extracted
//! from upstream's CRDs.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;
use serde_json::{Value, json};

use super::cel::{CelRule, Reason};
use super::host_rules::image_rules;
use super::schema::{self, CrdError};
use crate::api::claims::{HostClaim, HostDeployPolicy};
use crate::api::events::BMCEventSubscription;
use crate::api::firmware::{
    FirmwareSchema, HostFirmwareComponents, HostFirmwareSettings, HostUpdatePolicy,
};
use crate::api::images::{DataImage, PreprovisioningImage};
use crate::api::network::{BareMetalSwitch, HostNetworkAttachment};

/// How a kind's `status` looks in upstream's CRD.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Status {
    /// Schema and subresource from the Rust status type.
    Typed,
    /// `status: {type: object}` without a subresource (HostUpdatePolicy).
    EmptyWithoutSubresource,
    /// A status subresource but no status schema (HostNetworkAttachment).
    SubresourceOnly,
    /// No status at all (FirmwareSchema).
    None,
}

/// Adjustments of one kind's derived CRD.
struct Shape {
    status: Status,
    /// Path of the condition items, and whether the list is a map keyed by `type`.
    conditions: Option<(&'static str, bool)>,
    /// Go `int` fields: upstream's schema has no integer format there.
    untyped_integers: &'static [&'static str],
    /// Object references replaced as a whole by server-side apply.
    atomic: &'static [&'static str],
    /// (object, field) required although the field has a default.
    required: &'static [(&'static str, &'static str)],
    /// bmo's bounds (path, keyword, limit) on what CEL rules read: without them
    /// kube-apiserver estimates the rules too costly. docs/api.md lists them.
    bounds: &'static [(&'static str, &'static str, u32)],
    rules: fn() -> Vec<CelRule>,
}

/// One of the eleven kinds: its CRD file and how to build it.
pub struct Kind {
    pub kind: &'static str,
    pub plural: &'static str,
    derived: fn() -> CustomResourceDefinition,
    shape: Shape,
}

const NO_RULES: fn() -> Vec<CelRule> = Vec::new;

/// A kind's shape with nothing to adjust but its status; entries name what differs.
const PLAIN: Shape = Shape {
    status: Status::Typed,
    conditions: None,
    untyped_integers: &[],
    atomic: &[],
    required: &[],
    bounds: &[],
    rules: NO_RULES,
};

/// The condition list of most kinds: a map keyed by `type`.
const CONDITIONS_BY_TYPE: Option<(&str, bool)> = Some(("status.conditions[]", true));

/// The eleven kinds, in the order `bmo crds` prints them.
pub fn kinds() -> Vec<Kind> {
    [
        firmware_kinds(),
        image_kinds(),
        claim_and_event_kinds(),
        network_kinds(),
    ]
    .into_iter()
    .flatten()
    .collect()
}

/// HostFirmwareSettings, FirmwareSchema, HostFirmwareComponents, HostUpdatePolicy.
fn firmware_kinds() -> Vec<Kind> {
    vec![
        Kind {
            kind: "HostFirmwareSettings",
            plural: "hostfirmwaresettings",
            derived: HostFirmwareSettings::crd,
            shape: Shape {
                conditions: CONDITIONS_BY_TYPE,
                ..PLAIN
            },
        },
        Kind {
            kind: "FirmwareSchema",
            plural: "firmwareschemas",
            derived: FirmwareSchema::crd,
            shape: Shape {
                status: Status::None,
                untyped_integers: &[
                    "spec.schema{}.lower_bound",
                    "spec.schema{}.upper_bound",
                    "spec.schema{}.min_length",
                    "spec.schema{}.max_length",
                ],
                ..PLAIN
            },
        },
        Kind {
            kind: "HostFirmwareComponents",
            plural: "hostfirmwarecomponents",
            derived: HostFirmwareComponents::crd,
            shape: Shape {
                conditions: CONDITIONS_BY_TYPE,
                rules: firmware_components_rules,
                ..PLAIN
            },
        },
        Kind {
            kind: "HostUpdatePolicy",
            plural: "hostupdatepolicies",
            derived: HostUpdatePolicy::crd,
            shape: Shape {
                status: Status::EmptyWithoutSubresource,
                ..PLAIN
            },
        },
    ]
}

/// DataImage, PreprovisioningImage.
fn image_kinds() -> Vec<Kind> {
    vec![
        Kind {
            kind: "DataImage",
            plural: "dataimages",
            derived: DataImage::crd,
            shape: Shape {
                untyped_integers: &["status.error.count"],
                rules: data_image_rules,
                ..PLAIN
            },
        },
        Kind {
            kind: "PreprovisioningImage",
            plural: "preprovisioningimages",
            derived: PreprovisioningImage::crd,
            shape: Shape {
                conditions: CONDITIONS_BY_TYPE,
                ..PLAIN
            },
        },
    ]
}

/// BMCEventSubscription, HostClaim, HostDeployPolicy.
fn claim_and_event_kinds() -> Vec<Kind> {
    vec![
        Kind {
            kind: "BMCEventSubscription",
            plural: "bmceventsubscriptions",
            derived: BMCEventSubscription::crd,
            shape: Shape {
                atomic: &["spec.httpHeadersRef"],
                rules: event_subscription_rules,
                ..PLAIN
            },
        },
        Kind {
            kind: "HostClaim",
            plural: "hostclaims",
            derived: HostClaim::crd,
            shape: Shape {
                conditions: Some(("status.conditions[]", false)),
                atomic: &[
                    "spec.consumerRef",
                    "spec.userData",
                    "spec.networkData",
                    "spec.metaData",
                ],
                rules: host_claim_rules,
                ..PLAIN
            },
        },
        Kind {
            kind: "HostDeployPolicy",
            plural: "hostdeploypolicies",
            derived: HostDeployPolicy::crd,
            shape: PLAIN,
        },
    ]
}

/// BareMetalSwitch, HostNetworkAttachment.
fn network_kinds() -> Vec<Kind> {
    vec![
        Kind {
            kind: "BareMetalSwitch",
            plural: "baremetalswitches",
            derived: BareMetalSwitch::crd,
            shape: Shape {
                conditions: CONDITIONS_BY_TYPE,
                atomic: &["spec.credentials"],
                ..PLAIN
            },
        },
        Kind {
            kind: "HostNetworkAttachment",
            plural: "hostnetworkattachments",
            derived: HostNetworkAttachment::crd,
            shape: Shape {
                status: Status::SubresourceOnly,
                untyped_integers: &["spec.nativeVLAN", "spec.mtu"],
                required: &[("spec", "mode")],
                // 4094 VLAN IDs exist; an entry is at most two 9-digit IDs.
                bounds: &[
                    ("spec.allowedVLANs", "maxItems", 4094),
                    ("spec.allowedVLANs[]", "maxLength", 19),
                ],
                rules: network_attachment_rules,
                ..PLAIN
            },
        },
    ]
}

impl Kind {
    /// Path of the generated file below `deploy/`.
    pub fn file(&self) -> String {
        format!("crds/metal3.io_{}.yaml", self.plural)
    }

    /// The CEL rules of this kind's CRD.
    pub fn rules(&self) -> Vec<CelRule> {
        (self.shape.rules)()
    }

    /// The CRD, in upstream's shape, with its CEL rules.
    pub fn crd(&self) -> Result<CustomResourceDefinition, CrdError> {
        let kind = self.kind;
        let shape = &self.shape;
        let mut crd = schema::to_json(kind, &(self.derived)())?;
        let schema = schema::normalize(kind, &mut crd)?;
        let root = schema::node(kind, schema, "")?;
        // Upstream's specs are `omitempty`: an object without spec is valid.
        root.remove("required");
        if shape.status == Status::EmptyWithoutSubresource
            && let Some(Value::Object(properties)) = root.get_mut("properties")
        {
            properties.insert(
                "status".into(),
                json!({"type": "object", "description": "No status fields."}),
            );
        }
        // An empty status type (HostDeployPolicy) is a plain object, as upstream's.
        if let Ok(status) = schema::node(kind, schema, "status")
            && status
                .get("properties")
                .and_then(Value::as_object)
                .is_some_and(serde_json::Map::is_empty)
        {
            status.remove("properties");
        }
        if let Some((items, list_map)) = shape.conditions {
            schema::condition_bounds(kind, schema, items)?;
            if list_map {
                let list = schema::node(kind, schema, items.trim_end_matches("[]"))?;
                list.insert("x-kubernetes-list-type".into(), json!("map"));
                list.insert("x-kubernetes-list-map-keys".into(), json!(["type"]));
            }
        }
        for path in shape.untyped_integers {
            schema::node(kind, schema, path)?.remove("format");
        }
        for path in shape.atomic {
            schema::node(kind, schema, path)?
                .insert("x-kubernetes-map-type".into(), json!("atomic"));
        }
        for (object, field) in shape.required {
            let object = schema::node(kind, schema, object)?;
            let required = object.entry("required").or_insert_with(|| json!([]));
            if let Value::Array(required) = required {
                required.push(json!(field));
            }
        }
        for (path, keyword, limit) in shape.bounds {
            schema::node(kind, schema, path)?.insert((*keyword).into(), json!(limit));
        }
        schema::add_rules(kind, schema, &self.rules())?;
        if shape.status == Status::SubresourceOnly
            && let Some(version) = crd
                .pointer_mut("/spec/versions/0")
                .and_then(Value::as_object_mut)
        {
            version.insert("subresources".into(), json!({"status": {}}));
        }
        serde_json::from_value(crd).map_err(|source| CrdError::Invalid { what: kind, source })
    }
}

/// The two URL checks upstream applies to DataImage and firmware URLs: `self.url` is
/// an absolute URL (as Go's `url.ParseRequestURI` reads it) with the scheme http,
/// https, ftp, gopher or oci. The scheme is compared by prefix, in lower or upper
/// case: kube-apiserver estimates `url()` and `lowerAscii()` of an unbounded string in
/// an unbounded list as too costly and refuses the CRD.
fn url_rules(at: &'static str, messages: [&'static str; 2]) -> Vec<CelRule> {
    let schemes = ["http", "https", "ftp", "gopher", "oci"]
        .iter()
        .flat_map(|s| [format!("'{s}:'"), format!("'{}:'", s.to_uppercase())])
        .collect::<Vec<_>>()
        .join(", ");
    vec![
        CelRule::new(at, "isURL(self.url)", messages[0]).on(".url"),
        CelRule::new(
            at,
            format!("!isURL(self.url) || [{schemes}].exists(scheme, self.url.startsWith(scheme))"),
            messages[1],
        )
        .on(".url"),
    ]
}

fn data_image_rules() -> Vec<CelRule> {
    let mut rules = vec![
        CelRule::new(
            "",
            "has(self.spec)",
            "spec.url is required: the URL of the ISO to attach",
        )
        .on(".spec")
        .reason(Reason::Required),
    ];
    rules.extend(url_rules(
        "spec",
        [
            "spec.url must be an absolute URL (scheme://host/path)",
            "spec.url must use the scheme http, https, ftp, gopher or oci",
        ],
    ));
    rules
}

fn firmware_components_rules() -> Vec<CelRule> {
    url_rules(
        "spec.updates[]",
        [
            "spec.updates[].url must be an absolute URL (scheme://host/path)",
            "spec.updates[].url must use the scheme http, https, ftp, gopher or oci",
        ],
    )
}

fn event_subscription_rules() -> Vec<CelRule> {
    vec![
        CelRule::new(
            "",
            "has(self.spec) && has(self.spec.hostName) && self.spec.hostName != ''",
            "spec.hostName is required: name the BareMetalHost whose BMC sends the events",
        )
        .on(".spec.hostName")
        .reason(Reason::Required),
        CelRule::new(
            "",
            "has(self.spec) && has(self.spec.destination) && self.spec.destination != ''",
            "spec.destination is required: the URL the BMC sends events to",
        )
        .on(".spec.destination")
        .reason(Reason::Required),
        CelRule::new(
            "spec",
            "!has(self.destination) || self.destination == '' || isURL(self.destination)",
            "spec.destination must be an absolute URL (scheme://host/path)",
        )
        .on(".destination"),
        CelRule::new(
            "spec",
            "!has(self.destination) || !isURL(self.destination) || url(self.destination).getEscapedPath() != ''",
            "spec.destination needs a path: end a URL that names only a host with a slash",
        )
        .on(".destination"),
        CelRule::new(
            "",
            "has(self.spec) == has(oldSelf.spec) && (!has(self.spec) || self.spec == oldSelf.spec)",
            "spec cannot be changed once the BMCEventSubscription exists: delete it and create a new one",
        )
        .on(".spec")
        .reason(Reason::Forbidden),
    ]
}

/// HostClaim's image rules (shared with BareMetalHost). Upstream's label-selector
/// checks are the admission policy `bmo-hostclaim-selector` (src/api/admission.rs).
fn host_claim_rules() -> Vec<CelRule> {
    image_rules()
}

fn network_attachment_rules() -> Vec<CelRule> {
    // Entries the schema's pattern refuses are left to it (reported once).
    let well_formed = "self.matches('^[0-9]{1,9}(-[0-9]{1,9})?$')";
    let id = "0*([1-9][0-9]{0,2}|[1-3][0-9]{3}|40[0-8][0-9]|409[0-4])";
    let range = "self.matches('^[0-9]{1,9}-[0-9]{1,9}$')";
    vec![
        CelRule::new(
            "spec",
            "self.mode != 'access' || !has(self.allowedVLANs) || size(self.allowedVLANs) == 0",
            "spec.allowedVLANs must be empty in access mode (only trunk and hybrid ports carry tagged VLANs)",
        )
        .on(".allowedVLANs")
        .reason(Reason::Forbidden),
        CelRule::new(
            "spec.allowedVLANs[]",
            format!("!{well_formed} || self.matches('^{id}(-{id})?$')"),
            "spec.allowedVLANs[]: VLAN IDs must be between 1 and 4094",
        ),
        CelRule::new(
            "spec.allowedVLANs[]",
            format!(
                "!{range} || int(self.substring(0, self.indexOf('-'))) < int(self.substring(self.indexOf('-') + 1))"
            ),
            "spec.allowedVLANs[]: a range start-end needs start below end",
        ),
    ]
}

/// Every kind's CRD.
pub fn crds() -> Result<Vec<(Kind, CustomResourceDefinition)>, CrdError> {
    kinds()
        .into_iter()
        .map(|kind| {
            let crd = kind.crd()?;
            Ok((kind, crd))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_builds_and_every_rule_names_its_field() {
        let crds = crds().unwrap();
        assert_eq!(crds.len(), 11);
        for (kind, crd) in &crds {
            assert_eq!(
                crd.metadata.name.as_deref(),
                Some(format!("{}.metal3.io", kind.plural).as_str())
            );
            for rule in kind.rules() {
                assert!(rule.message.starts_with("spec"), "{}: {rule:?}", kind.kind);
            }
        }
    }

    #[test]
    fn status_shapes_follow_upstream() {
        let crds = crds().unwrap();
        let find = |name: &str| {
            &crds
                .iter()
                .find(|(kind, _)| kind.kind == name)
                .unwrap()
                .1
                .spec
                .versions[0]
        };
        // A subresource without a status schema, and a status schema without one.
        let attachment = find("HostNetworkAttachment");
        assert!(attachment.subresources.as_ref().unwrap().status.is_some());
        let schema = attachment
            .schema
            .as_ref()
            .unwrap()
            .open_api_v3_schema
            .as_ref();
        assert!(
            !schema
                .unwrap()
                .properties
                .as_ref()
                .unwrap()
                .contains_key("status")
        );
        let policy = find("HostUpdatePolicy");
        assert!(policy.subresources.is_none());
        let schema = policy.schema.as_ref().unwrap().open_api_v3_schema.as_ref();
        assert!(
            schema
                .unwrap()
                .properties
                .as_ref()
                .unwrap()
                .contains_key("status")
        );
        assert!(find("FirmwareSchema").subresources.is_none());
    }

    #[test]
    fn an_object_without_spec_reads_as_the_default_spec() {
        let claim: HostDeployPolicy = serde_json::from_value(json!({
            "apiVersion": "metal3.io/v1alpha1",
            "kind": "HostDeployPolicy",
            "metadata": {"name": "open"},
        }))
        .unwrap();
        assert_eq!(claim.spec, Default::default());
    }
}
