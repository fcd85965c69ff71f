//! bmo's CRDs against upstream's, field by field: for each of upstream's 13
//! `metal3.io/v1alpha1` kinds, names, scope, short names, subresources, printer
//! columns, and every schema node's type, format, enum, default, required flag and
//! bounds. Upstream's facts are in tests/fixtures/upstream-crds/*.facts (extracted
//! from commit 02aa505 by extract.py there).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde_json::Value;

/// Attributes compared for every field; the rest are bounds (patterns, limits, list
/// and map semantics).
const CORE: &[&str] = &["format", "enum", "default", "required", "nullable"];
const BOUNDS: &[&str] = &[
    "minimum",
    "maximum",
    "minLength",
    "maxLength",
    "pattern",
    "minItems",
    "maxItems",
    "x-kubernetes-map-type",
    "x-kubernetes-list-type",
    "x-kubernetes-list-map-keys",
    "x-kubernetes-preserve-unknown-fields",
];

/// bmo's additions to the BareMetalHost and HardwareData schemas (docs/api.md).
const BMO_ADDED_FIELDS: &[&str] = &[
    "baremetalhosts spec.inlineUserData",
    "baremetalhosts spec.networkInterfaces[].switchPort.switchSystemName",
    "baremetalhosts status.hardware.nics[].dhcpHostname",
    "baremetalhosts status.provisioning.currentStep",
    "baremetalhosts status.provisioning.currentStep.name",
    "baremetalhosts status.provisioning.currentStep.type",
    "hardwaredata spec.hardware.nics[].dhcpHostname",
];

/// Where bmo's BareMetalHost and HardwareData types differ from upstream in type
/// facts, and why it is harmless: Rust integers carry `format: int64` (any integer
/// upstream accepts, kube-apiserver accepts); the firmware booleans' enum [true, false]
/// says nothing a boolean does not; `effect` and `state` have the enums of their Go
/// constants; `errorType` has bmo's extra `detach error`; a NIC's attachment reference is required by bmo's type (upstream's
/// webhook refuses an empty one too); bmo's HardwareData requires spec (bmo writes it).
const KNOWN_TYPE_DIFFERENCES: &[&str] = &[
    "baremetalhosts spec.automatedCleaningMode",
    "baremetalhosts spec.firmware.simultaneousMultithreadingEnabled",
    "baremetalhosts spec.firmware.sriovEnabled",
    "baremetalhosts spec.firmware.virtualizationEnabled",
    "baremetalhosts spec.networkInterfaces[].hostNetworkAttachment",
    "baremetalhosts spec.networkInterfaces[].hostNetworkAttachment.name",
    "baremetalhosts spec.raid.hardwareRAIDVolumes[].numberOfPhysicalDisks",
    "baremetalhosts spec.raid.hardwareRAIDVolumes[].sizeGibibytes",
    "baremetalhosts spec.raid.softwareRAIDVolumes[].physicalDisks[].minSizeGigabytes",
    "baremetalhosts spec.raid.softwareRAIDVolumes[].sizeGibibytes",
    "baremetalhosts spec.rootDeviceHints.minSizeGigabytes",
    "baremetalhosts spec.taints[].effect",
    "baremetalhosts status.errorCount",
    "baremetalhosts status.errorType",
    "baremetalhosts status.hardware.cpu.count",
    "baremetalhosts status.hardware.nics[].speedGbps",
    "baremetalhosts status.hardware.ramMebibytes",
    "baremetalhosts status.provisioning.firmware.simultaneousMultithreadingEnabled",
    "baremetalhosts status.provisioning.firmware.sriovEnabled",
    "baremetalhosts status.provisioning.firmware.virtualizationEnabled",
    "baremetalhosts status.provisioning.raid.hardwareRAIDVolumes[].numberOfPhysicalDisks",
    "baremetalhosts status.provisioning.raid.hardwareRAIDVolumes[].sizeGibibytes",
    "baremetalhosts status.provisioning.raid.softwareRAIDVolumes[].physicalDisks[].minSizeGigabytes",
    "baremetalhosts status.provisioning.raid.softwareRAIDVolumes[].sizeGibibytes",
    "baremetalhosts status.provisioning.rootDeviceHints.minSizeGigabytes",
    "baremetalhosts status.provisioning.state",
    "baremetalhosts status.provisioningFailCount",
    "hardwaredata spec",
    "hardwaredata spec.hardware.cpu.count",
    "hardwaredata spec.hardware.nics[].speedGbps",
    "hardwaredata spec.hardware.ramMebibytes",
];

/// Bounds bmo adds to the eleven other kinds so that kube-apiserver accepts the CEL
/// rules' cost (docs/api.md): HostClaim shares BareMetalHost's image type, whose URL
/// and checksum are capped; the VLAN list and its entries are capped.
const BMO_ADDED_BOUNDS: &[&str] = &[
    "hostclaims spec.image.checksum maxLength=4096",
    "hostclaims spec.image.url maxLength=4096",
    "hostnetworkattachments spec.allowedVLANs maxItems=4094",
    "hostnetworkattachments spec.allowedVLANs[] maxLength=19",
];

/// One schema node's facts: type, then attribute name to value ("" for flags).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Field {
    kind: String,
    attrs: BTreeMap<String, String>,
}

impl Field {
    fn parse(words: &[&str]) -> Self {
        let attrs = words[1..]
            .iter()
            .map(|word| match word.split_once('=') {
                Some((key, value)) => (key.to_owned(), value.to_owned()),
                None => ((*word).to_owned(), String::new()),
            })
            .collect();
        Field {
            kind: words[0].to_owned(),
            attrs,
        }
    }

    fn select(&self, keys: &[&str]) -> BTreeMap<String, String> {
        self.attrs
            .iter()
            .filter(|(key, _)| keys.contains(&key.as_str()))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }
}

/// The facts of one CRD: header lines (names, scope, columns...) and fields by path.
#[derive(Debug, Default)]
struct Facts {
    header: Vec<String>,
    fields: BTreeMap<String, Field>,
}

impl Facts {
    fn parse(text: &str) -> Self {
        let mut facts = Facts::default();
        for line in text
            .lines()
            .filter(|l| !l.starts_with('#') && !l.is_empty())
        {
            match line.strip_prefix("field ") {
                Some(rest) => {
                    let words: Vec<&str> = rest.split(' ').collect();
                    facts
                        .fields
                        .insert(words[0].to_owned(), Field::parse(&words[1..]));
                }
                None => facts.header.push(line.trim_end().to_owned()),
            }
        }
        facts
    }

    /// The same facts, taken from bmo's CRD the way extract.py takes upstream's.
    fn of(crd: &CustomResourceDefinition) -> Self {
        let crd = serde_json::to_value(crd).unwrap();
        let spec = &crd["spec"];
        let names = &spec["names"];
        let version = &spec["versions"][0];
        let words = |value: &Value| -> String {
            value
                .as_array()
                .map(|list| {
                    list.iter()
                        .filter_map(Value::as_str)
                        .collect::<Vec<_>>()
                        .join(" ")
                })
                .unwrap_or_default()
        };
        let text = |value: &Value| value.as_str().unwrap_or_default().to_owned();
        let mut header = vec![
            format!("name {}", text(&crd["metadata"]["name"])),
            format!("kind {}", text(&names["kind"])),
            format!("listKind {}", text(&names["listKind"])),
            format!("plural {}", text(&names["plural"])),
            format!("singular {}", text(&names["singular"])),
            format!("scope {}", text(&spec["scope"])),
            format!("version {}", text(&version["name"])),
            format!("shortNames {}", words(&names["shortNames"])),
            format!("categories {}", words(&names["categories"])),
            format!(
                "subresources {}",
                version["subresources"]
                    .as_object()
                    .map(|s| s.keys().cloned().collect::<Vec<_>>().join(" "))
                    .unwrap_or_default()
            ),
        ];
        for column in version["additionalPrinterColumns"]
            .as_array()
            .into_iter()
            .flatten()
        {
            header.push(format!(
                "column {}\t{}\t{}\t{}",
                text(&column["name"]),
                text(&column["type"]),
                text(&column["jsonPath"]),
                column["priority"].as_i64().unwrap_or(0)
            ));
        }
        let header = header
            .into_iter()
            .map(|l| l.trim_end().to_owned())
            .collect();
        let mut fields = BTreeMap::new();
        walk(
            &version["schema"]["openAPIV3Schema"],
            "",
            false,
            &mut fields,
        );
        Facts { header, fields }
    }
}

/// JSON as extract.py writes it: compact, whole floats as integers, spaces escaped.
fn compact(value: &Value) -> String {
    let text = match value {
        Value::Number(n) if n.is_f64() => {
            let f = n.as_f64().unwrap_or_default();
            if f.fract() == 0.0 {
                format!("{}", f as i64)
            } else {
                n.to_string()
            }
        }
        other => serde_json::to_string(other).unwrap(),
    };
    text.replace(' ', "\\u0020")
}

fn walk(schema: &Value, path: &str, required: bool, out: &mut BTreeMap<String, Field>) {
    if !path.is_empty() {
        let kind = if schema["x-kubernetes-int-or-string"] == Value::Bool(true) {
            "int-or-string".to_owned()
        } else {
            schema["type"].as_str().unwrap_or("-").to_owned()
        };
        let mut attrs = BTreeMap::new();
        for key in ["format", "enum", "default"].iter().chain(BOUNDS) {
            if let Some(value) = schema.get(*key) {
                attrs.insert((*key).to_owned(), compact(value));
            }
        }
        if required {
            attrs.insert("required".into(), String::new());
        }
        if schema["nullable"] == Value::Bool(true) {
            attrs.insert("nullable".into(), String::new());
        }
        out.insert(path.to_owned(), Field { kind, attrs });
    }
    let needed: BTreeSet<&str> = schema["required"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    for (name, child) in schema["properties"].as_object().into_iter().flatten() {
        let child_path = if path.is_empty() {
            name.clone()
        } else {
            format!("{path}.{name}")
        };
        walk(child, &child_path, needed.contains(name.as_str()), out);
    }
    if let Some(items) = schema.get("items") {
        walk(items, &format!("{path}[]"), false, out);
    }
    if let Some(values) = schema.get("additionalProperties").filter(|v| v.is_object()) {
        walk(values, &format!("{path}{{}}"), false, out);
    }
}

fn upstream(plural: &str) -> Facts {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/upstream-crds")
        .join(format!("{plural}.facts"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    assert!(
        text.contains("02aa505"),
        "{path:?} must name upstream's commit"
    );
    Facts::parse(&text)
}

/// Every CRD bmo serves, by plural.
fn bmo_crds() -> BTreeMap<String, CustomResourceDefinition> {
    let mut crds = BTreeMap::new();
    crds.insert(
        "baremetalhosts".to_owned(),
        bmo::api::crd::baremetalhost_crd().unwrap(),
    );
    crds.insert(
        "hardwaredata".to_owned(),
        bmo::api::crd::hardwaredata_crd().unwrap(),
    );
    for (kind, crd) in bmo::api::kinds::crds().unwrap() {
        crds.insert(kind.plural.to_owned(), crd);
    }
    crds
}

const UPSTREAM_KINDS: [&str; 13] = [
    "baremetalhosts",
    "baremetalswitches",
    "bmceventsubscriptions",
    "dataimages",
    "firmwareschemas",
    "hardwaredata",
    "hostclaims",
    "hostdeploypolicies",
    "hostfirmwarecomponents",
    "hostfirmwaresettings",
    "hostnetworkattachments",
    "hostupdatepolicies",
    "preprovisioningimages",
];

#[test]
fn bmo_serves_every_upstream_kind_with_its_names_columns_and_subresources() {
    let _shared = crate::support::shared();
    let crds = bmo_crds();
    assert_eq!(
        crds.keys().map(String::as_str).collect::<Vec<_>>(),
        UPSTREAM_KINDS,
        "bmo must serve exactly upstream's 13 kinds"
    );
    for plural in UPSTREAM_KINDS {
        let ours = Facts::of(&crds[plural]);
        assert_eq!(
            ours.header,
            upstream(plural).header,
            "{plural}: names, scope, short names, subresources or printer columns differ"
        );
    }
}

#[test]
fn every_upstream_field_has_the_same_type_enum_default_and_required_flag() {
    let _shared = crate::support::shared();
    let crds = bmo_crds();
    let mut problems = Vec::new();
    let mut differences = BTreeSet::new();
    let mut summary = Vec::new();
    let (mut matched_total, mut present_total, mut upstream_total) = (0, 0, 0);
    for plural in UPSTREAM_KINDS {
        let theirs = upstream(plural);
        let ours = Facts::of(&crds[plural]);
        let legacy = plural == "baremetalhosts" || plural == "hardwaredata";
        let mut matched = 0;
        let present = theirs
            .fields
            .keys()
            .filter(|p| ours.fields.contains_key(*p))
            .count();
        for (path, field) in &theirs.fields {
            let key = format!("{plural} {path}");
            let Some(mine) = ours.fields.get(path) else {
                problems.push(format!("{key}: missing in bmo's CRD"));
                continue;
            };
            let same_type = mine.kind == field.kind && mine.select(CORE) == field.select(CORE);
            if !same_type {
                if legacy {
                    differences.insert(key.clone());
                } else {
                    problems.push(format!("{key}: upstream {field:?}, bmo {mine:?}"));
                }
                continue;
            }
            // Upstream's bounds must all be there, with upstream's values.
            let (theirs_bounds, mine_bounds) = (field.select(BOUNDS), mine.select(BOUNDS));
            let lost: Vec<_> = theirs_bounds
                .iter()
                .filter(|(k, v)| mine_bounds.get(*k) != Some(v))
                .collect();
            if !lost.is_empty() && !legacy {
                problems.push(format!(
                    "{key}: bounds {lost:?} differ from bmo's {mine_bounds:?}"
                ));
                continue;
            }
            if !legacy {
                for (k, v) in mine_bounds
                    .iter()
                    .filter(|(k, _)| !theirs_bounds.contains_key(*k))
                {
                    let added = format!("{key} {k}={v}");
                    if !BMO_ADDED_BOUNDS.contains(&added.as_str()) {
                        problems.push(format!("{added}: a bound upstream does not have"));
                    }
                }
            }
            matched += 1;
        }
        for path in ours
            .fields
            .keys()
            .filter(|p| !theirs.fields.contains_key(*p))
        {
            let key = format!("{plural} {path}");
            if !BMO_ADDED_FIELDS.contains(&key.as_str()) {
                problems.push(format!("{key}: bmo has a field upstream does not"));
            }
        }
        summary.push(format!(
            "{plural}: {present}/{} upstream schema nodes present, {matched} with identical facts",
            theirs.fields.len()
        ));
        matched_total += matched;
        present_total += present;
        upstream_total += theirs.fields.len();
    }
    eprintln!(
        "{}\ntotal: {present_total}/{upstream_total} upstream schema nodes present, {matched_total} with identical facts",
        summary.join("\n")
    );
    let known: BTreeSet<String> = KNOWN_TYPE_DIFFERENCES
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    assert_eq!(
        differences, known,
        "BareMetalHost/HardwareData type differences changed; update KNOWN_TYPE_DIFFERENCES and docs/api.md"
    );
}
