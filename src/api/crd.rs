//! CustomResourceDefinitions for `BareMetalHost` and `HardwareData` (the other kinds'
//! are in [`super::kinds`]), with the CEL rules
//! that make the API server itself reject bad hosts (no admission webhook needed), and
//! the rendering behind `bmo crds`.
//!
//! The schema comes from the Rust types (schemars through kube's derive); this module
//! then adjusts it to upstream's shape (nullable only where upstream has it, atomic
//! object references) and adds the `x-kubernetes-validations` listed in
//! [`baremetalhost_rules`]. Rules that need the namespace, annotations or a DELETE
//! are ValidatingAdmissionPolicies, see [`super::admission`].

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;
use serde_json::{Value, json};

use super::admission;
use super::hardware::HardwareData;
use super::host::BareMetalHost;

/// A generated file that `bmo crds` prints and `deploy/` holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Manifest {
    /// Path below `deploy/`, e.g. `crds/metal3.io_baremetalhosts.yaml`.
    pub path: String,
    /// The YAML document(s).
    pub yaml: String,
}

/// Why the manifests could not be generated (a bug in bmo, never user input).
#[derive(Debug, thiserror::Error)]
pub enum CrdError {
    #[error(
        "the generated {crd} schema has no node at {path}; the rule table in src/api/crd.rs names a field that does not exist"
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
    fn as_str(self) -> &'static str {
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

    fn to_json(&self) -> Value {
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

/// Start of an address that has a URL scheme (`scheme:` or `scheme://`). Like
/// upstream's parser, an address without one (a bare host or IP, host:port with a
/// numeric host, `[v6]:port`) means IPMI.
const HAS_SCHEME: &str = "^[A-Za-z][A-Za-z0-9+.-]*:";
/// Every BMC scheme bmo knows (the 23 of upstream, and `fake` for hosts without
/// hardware), lower-cased; `src/bmc` parses the same list.
const KNOWN_SCHEMES: &str = r"^(ipmi|libvirt|fake|(redfish|ilo5-redfish|idrac-redfish|redfish-virtualmedia|ilo5-virtualmedia|idrac-virtualmedia|redfish-uefihttp)(\\+https?)?):";

/// CEL: the address (a CEL expression of type string) selects the IPMI driver family,
/// which has no secure boot, no hardware RAID and no out-of-band inspection.
fn ipmi_family(address: &str) -> String {
    format!(
        "(!{address}.matches('{HAS_SCHEME}') || {address}.lowerAscii().matches('^(ipmi|libvirt):'))"
    )
}

/// Whitespace and control characters (regex inside a CEL string literal).
const BAD_CHARACTERS: &str = r"[\\s\\x00-\\x1f\\x7f]";
/// A Secret name: an RFC 1123 subdomain, lower case.
const SECRET_NAME: &str = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$";

/// A bracketed IPv6 address with neither scheme nor port, which upstream refuses.
const BARE_BRACKETED: &str = r"^\\[[^\\]]*\\]$";

/// CEL (spec.bmc as `self`): the host of the address is an IP address or a DNS name
/// (`10.0.0.300` and `bmc_1` are neither) and its port, if any, is 1–65535; the same
/// grammar as `src/bmc`. Addresses another rule refuses (empty, credentials,
/// whitespace, unknown scheme) pass here, so each mistake is reported once.
///
/// Regular expressions over `self.address` itself, not `url()` of a derived string:
/// kube-apiserver's cost estimate knows the length of the one (2048) but not of the
/// other, and refuses the rule as too expensive.
fn bmc_host_and_port() -> String {
    let scheme = KNOWN_SCHEMES.trim_start_matches('^').trim_end_matches(':');
    let start = format!("^({scheme}:(//)?)?");
    let label = "[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?";
    let host = format!(r"(\\[[0-9a-f:.]+\\]|{label}(\\.{label})*)");
    let octet = "(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])";
    let ipv4 = format!(r"{octet}(\\.{octet}){{3}}");
    let port = "(:0*([1-9][0-9]{0,3}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5]))?";
    let rest = "([/?#].*)?$";
    let address = "self.address.lowerAscii()";
    format!(
        "self.address == '' || self.address.contains('@') || self.address.matches('{BAD_CHARACTERS}') \
         || (self.address.matches('{HAS_SCHEME}') && !{address}.matches('{KNOWN_SCHEMES}')) \
         || isIP(self.address) \
         || ({address}.matches('{start}{host}{port}{rest}') && !self.address.matches('{BARE_BRACKETED}') \
             && (!{address}.matches('{start}[0-9.]+(:[0-9]*)?{rest}') || {address}.matches('{start}{ipv4}{port}{rest}')))"
    )
}

/// CEL: spec (as `self`) has a non-empty BMC address.
const HAS_BMC_ADDRESS: &str = "has(self.bmc) && self.bmc.address != ''";
/// CEL: the RAID list `list` of `parent` (a CEL object expression) holds at least one
/// item. The lists are nullable (Go clients send `null`), and CEL cannot compare a
/// list with null, only its type.
/// spec.bootMACAddress must be set (not empty) when `condition` holds.
fn boot_mac_required_when(condition: String, message: &'static str) -> CelRule {
    CelRule::new(
        "spec",
        format!("!({condition}) || (has(self.bootMACAddress) && self.bootMACAddress != '')"),
        message,
    )
    .on(".bootMACAddress")
    .reason(Reason::Required)
}

fn non_empty(parent: &str, list: &str) -> String {
    format!(
        "(has({parent}.{list}) && type({parent}.{list}) != null_type && size({parent}.{list}) > 0)"
    )
}

/// CEL: the RAID list `list` of `self` is absent or null.
fn absent(list: &str) -> String {
    format!("(!has(self.{list}) || type(self.{list}) == null_type)")
}

/// Every CEL rule of the BareMetalHost CRD. Each one is exercised by an invalid
/// manifest in tests/fixtures/hosts/invalid/.
pub fn baremetalhost_rules() -> Vec<CelRule> {
    let ipmi = ipmi_family("self.bmc.address");
    let hw_raid = format!(
        "(has(self.raid) && {})",
        non_empty("self.raid", "hardwareRAIDVolumes")
    );
    vec![
        // --- metadata ---
        CelRule::new(
            "",
            "!self.metadata.name.matches('^([0-9a-f]{32}|[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})$')",
            "metadata.name must not be a UUID: Ironic would take it for a node UUID; choose another name",
        ),
        // --- transitions that need the status ---
        CelRule::new(
            "",
            "!has(oldSelf.spec) || !has(oldSelf.spec.bmc) || oldSelf.spec.bmc.address == '' \
             || (has(self.spec) && has(self.spec.bmc) && self.spec.bmc.address == oldSelf.spec.bmc.address) \
             || (has(oldSelf.status) && (oldSelf.status.operationalStatus == 'detached' || oldSelf.status.provisioning.state == 'registering')) \
             || (has(self.status) && (self.status.operationalStatus == 'detached' || self.status.provisioning.state == 'registering'))",
            "spec.bmc.address cannot be changed once set, except while status.provisioning.state is registering or status.operationalStatus is detached (detach the host first)",
        )
        .on(".spec.bmc.address")
        .reason(Reason::Forbidden),
        CelRule::new(
            "",
            "!(has(self.spec) && has(self.spec.externallyProvisioned) && self.spec.externallyProvisioned) \
             || (has(oldSelf.spec) && has(oldSelf.spec.externallyProvisioned) && oldSelf.spec.externallyProvisioned) \
             || (has(oldSelf.status) && oldSelf.status.provisioning.state == 'available') \
             || (has(self.status) && self.status.provisioning.state == 'available')",
            "spec.externallyProvisioned can be turned on only when the host is created or while status.provisioning.state is available",
        )
        .on(".spec.externallyProvisioned")
        .reason(Reason::Forbidden),
        // --- spec, cross-field ---
        CelRule::new(
            "spec",
            "!(has(self.userData) && has(self.inlineUserData))",
            "spec.inlineUserData and spec.userData are mutually exclusive: give the user data inline or as a Secret reference, not both",
        )
        .on(".inlineUserData")
        .reason(Reason::Forbidden),
        CelRule::new(
            "spec",
            "!(has(self.disablePowerOff) && self.disablePowerOff) || self.online",
            "spec.disablePowerOff: true cannot be combined with spec.online: false (a host that must never be powered off cannot be kept off)",
        )
        .on(".disablePowerOff"),
        CelRule::new(
            "spec",
            "!has(oldSelf.bootMACAddress) || oldSelf.bootMACAddress == '' \
             || (has(self.bootMACAddress) && self.bootMACAddress.lowerAscii() == oldSelf.bootMACAddress.lowerAscii())",
            "spec.bootMACAddress cannot be changed or removed once set (compared case-insensitively); delete and re-create the host to change it",
        )
        .on(".bootMACAddress")
        .reason(Reason::Forbidden),
        boot_mac_required_when(
            format!(
                "{HAS_BMC_ADDRESS} && has(self.inspectionMode) && self.inspectionMode == 'disabled'"
            ),
            "spec.bootMACAddress is required when spec.inspectionMode is disabled: without inspection the boot NIC cannot be discovered",
        ),
        boot_mac_required_when(
            format!("{HAS_BMC_ADDRESS} && self.bmc.address.lowerAscii().startsWith('libvirt:')"),
            "spec.bootMACAddress is required for libvirt:// BMC addresses",
        ),
        CelRule::new(
            "spec",
            format!(
                "!({HAS_BMC_ADDRESS} && has(self.bootMode) && self.bootMode == 'UEFISecureBoot' && {ipmi})"
            ),
            "spec.bootMode UEFISecureBoot is not supported by IPMI or libvirt BMCs: use a Redfish-based spec.bmc.address or another boot mode",
        )
        .on(".bootMode"),
        CelRule::new(
            "spec",
            format!("!({HAS_BMC_ADDRESS} && {hw_raid} && {ipmi})"),
            "spec.raid.hardwareRAIDVolumes cannot be used with IPMI or libvirt BMCs, which have no RAID interface: use a Redfish-based spec.bmc.address or software RAID",
        )
        .on(".raid"),
        CelRule::new(
            "spec",
            format!(
                "!({HAS_BMC_ADDRESS} && has(self.inspectionMode) && self.inspectionMode == 'fast' && {ipmi})"
            ),
            "spec.inspectionMode fast needs out-of-band inspection, which IPMI and libvirt BMCs lack: use agent or a Redfish-based spec.bmc.address",
        )
        .on(".inspectionMode"),
        CelRule::new(
            "spec",
            format!(
                "!(has(self.rootDeviceHints) && has(self.raid) && {} \
                  && self.raid.softwareRAIDVolumes.exists(v, has(v.rootVolume) && v.rootVolume))",
                non_empty("self.raid", "softwareRAIDVolumes")
            ),
            "spec.rootDeviceHints cannot be combined with a software RAID volume that has rootVolume: true (that volume is the root device)",
        )
        .on(".rootDeviceHints")
        .reason(Reason::Forbidden),
        // --- spec.bmc ---
        CelRule::new(
            "spec.bmc",
            format!(
                "self.address == '' || !self.address.matches('{HAS_SCHEME}') || self.address.lowerAscii().matches('{KNOWN_SCHEMES}')"
            ),
            "spec.bmc.address has an unknown scheme: use ipmi, libvirt, fake, or redfish, redfish-virtualmedia, redfish-uefihttp, idrac-redfish, idrac-virtualmedia, ilo5-redfish, ilo5-virtualmedia (each optionally +http or +https), or a bare host[:port] for IPMI",
        )
        .on(".address"),
        CelRule::new(
            "spec.bmc",
            "!self.address.contains('@')",
            "spec.bmc.address must not contain a user name or password (no '@'): put them in the Secret named by spec.bmc.credentialsName",
        )
        .on(".address"),
        CelRule::new(
            "spec.bmc",
            format!("!self.address.matches('{BAD_CHARACTERS}')"),
            "spec.bmc.address must not contain spaces or control characters, also not around it",
        )
        .on(".address"),
        CelRule::new(
            "spec.bmc",
            bmc_host_and_port(),
            "spec.bmc.address has an invalid host or port: write [scheme://]HOST[:PORT][/path] with HOST an IPv4 address, an IPv6 address in brackets or a DNS name (letters, digits, hyphens and dots) and PORT a number from 1 to 65535",
        )
        .on(".address"),
        CelRule::new(
            "spec.bmc",
            "self.address == '' || self.credentialsName != ''",
            "spec.bmc.credentialsName is required when spec.bmc.address is set: name the Secret holding the BMC username and password",
        )
        .on(".credentialsName")
        .reason(Reason::Required),
        // --- spec.userData, spec.customDeploy ---
        CelRule::new(
            "spec.userData",
            format!("has(self.name) && self.name.matches('{SECRET_NAME}')"),
            "spec.userData.name must name a Secret: lower-case letters, digits, '-' and '.', at most 253 characters",
        )
        .on(".name"),
        CelRule::new(
            "spec.customDeploy",
            "self.method != ''",
            "spec.customDeploy.method must not be empty: name the deploy step of the custom ramdisk",
        )
        .on(".method")
        .reason(Reason::Required),
    ]
    .into_iter()
    .chain(image_rules())
    .chain([
        // --- spec.rootDeviceHints ---
        CelRule::new(
            "spec.rootDeviceHints",
            "!has(self.deviceName) || self.deviceName == '' || self.deviceName.matches('^/dev/(disk/by-path/)?[^/]+$')",
            "spec.rootDeviceHints.deviceName must be /dev/<name> or /dev/disk/by-path/<name>",
        )
        .on(".deviceName"),
        // --- spec.raid ---
        CelRule::new(
            "spec.raid",
            format!(
                "!({} && {})",
                non_empty("self", "hardwareRAIDVolumes"),
                non_empty("self", "softwareRAIDVolumes")
            ),
            "spec.raid.hardwareRAIDVolumes and spec.raid.softwareRAIDVolumes are mutually exclusive: configure hardware or software RAID, not both",
        )
        .reason(Reason::Forbidden),
        CelRule::new(
            "spec.raid",
            format!(
                "!{} || self.softwareRAIDVolumes[0].level == '1'",
                non_empty("self", "softwareRAIDVolumes")
            ),
            "spec.raid.softwareRAIDVolumes[0].level must be \"1\": the first software RAID volume holds the operating system and must be a mirror",
        )
        .on(".softwareRAIDVolumes"),
        CelRule::new(
            "spec.raid",
            format!(
                "{} || self.softwareRAIDVolumes.filter(v, has(v.rootVolume) && v.rootVolume).size() <= 1",
                absent("softwareRAIDVolumes")
            ),
            "spec.raid.softwareRAIDVolumes: at most one volume may have rootVolume: true",
        )
        .on(".softwareRAIDVolumes"),
        CelRule::new(
            "spec.raid.softwareRAIDVolumes[]",
            "!(has(self.rootVolume) && self.rootVolume) || self.level == '1'",
            "spec.raid.softwareRAIDVolumes[].level must be \"1\" on the volume with rootVolume: true",
        )
        .on(".level"),
        CelRule::new(
            "spec.raid.hardwareRAIDVolumes[]",
            "!has(self.physicalDisks) || size(self.physicalDisks) == 0 || (has(self.controller) && self.controller != '')",
            "spec.raid.hardwareRAIDVolumes[].controller is required when physicalDisks is set",
        )
        .on(".controller")
        .reason(Reason::Required),
        CelRule::new(
            "spec.raid.hardwareRAIDVolumes[]",
            "!has(self.numberOfPhysicalDisks) || !has(self.physicalDisks) || size(self.physicalDisks) == 0 \
             || self.numberOfPhysicalDisks == size(self.physicalDisks)",
            "spec.raid.hardwareRAIDVolumes[].numberOfPhysicalDisks must equal the number of physicalDisks when both are set",
        )
        .on(".numberOfPhysicalDisks"),
        // --- spec.networkInterfaces ---
        CelRule::new(
            "spec.networkInterfaces[]",
            "(has(self.name) && self.name != '') != (has(self.macAddress) && self.macAddress != '')",
            "spec.networkInterfaces[]: set exactly one of name and macAddress",
        ),
        CelRule::new(
            "spec.networkInterfaces",
            "self.all(a, self.exists_one(b, \
               (has(a.macAddress) && a.macAddress != '' ? a.macAddress : (has(a.name) ? a.name : '')).lowerAscii() == \
               (has(b.macAddress) && b.macAddress != '' ? b.macAddress : (has(b.name) ? b.name : '')).lowerAscii()))",
            "spec.networkInterfaces: each NIC may appear only once (names and MAC addresses compared case-insensitively)",
        ),
    ])
    .collect()
}

/// The rules of `spec.image`, which BareMetalHost and HostClaim share (upstream checks
/// both with the same function).
pub(super) fn image_rules() -> Vec<CelRule> {
    vec![
        CelRule::new(
            "spec.image",
            r"self.url.lowerAscii().matches('^(https?|ftp|gopher|oci)://[^\\s]+$')",
            "spec.image.url must be an absolute URL with scheme http, https, ftp, gopher or oci, without spaces",
        )
        .on(".url"),
        CelRule::new(
            "spec.image",
            "self.url.lowerAscii().startsWith('oci://') || (has(self.format) && self.format == 'live-iso') \
             || (has(self.checksum) && self.checksum != '')",
            "spec.image.checksum is required unless spec.image.format is live-iso or spec.image.url is an oci:// image",
        )
        .on(".checksum")
        .reason(Reason::Required),
        CelRule::new(
            "spec.image",
            "!self.url.lowerAscii().startsWith('oci://') || !has(self.checksum) || self.checksum == ''",
            "spec.image.checksum must be empty for oci:// images (the registry digest is checked instead)",
        )
        .on(".checksum")
        .reason(Reason::Forbidden),
    ]
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
    add_rules(CRD, schema, &baremetalhost_rules())?;
    serde_json::from_value(crd).map_err(|source| CrdError::Invalid { what: CRD, source })
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
    for (kind, crd) in super::kinds::crds()? {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn schema_of(crd: &CustomResourceDefinition) -> Value {
        let mut value = serde_json::to_value(crd).unwrap();
        value
            .pointer_mut("/spec/versions/0/schema/openAPIV3Schema")
            .unwrap()
            .take()
    }

    #[test]
    fn names_scope_and_subresources_match_upstream() {
        let crd = baremetalhost_crd().unwrap();
        assert_eq!(
            crd.metadata.name.as_deref(),
            Some("baremetalhosts.metal3.io")
        );
        assert_eq!(crd.spec.scope, "Namespaced");
        assert_eq!(
            crd.spec.names.short_names,
            Some(vec!["bmh".into(), "bmhost".into()])
        );
        assert_eq!(
            crd.spec.names.list_kind.as_deref(),
            Some("BareMetalHostList")
        );
        let version = &crd.spec.versions[0];
        assert!(version.subresources.as_ref().unwrap().status.is_some());
        let columns: Vec<_> = version
            .additional_printer_columns
            .as_ref()
            .unwrap()
            .iter()
            .map(|c| {
                (
                    c.name.as_str(),
                    c.json_path.as_str(),
                    c.priority.unwrap_or(0),
                )
            })
            .collect();
        assert_eq!(
            columns,
            [
                ("Status", ".status.operationalStatus", 1),
                ("State", ".status.provisioning.state", 0),
                ("Consumer", ".spec.consumerRef.name", 0),
                ("BMC", ".spec.bmc.address", 1),
                ("Online", ".spec.online", 0),
                ("Error", ".status.errorType", 0),
                ("Age", ".metadata.creationTimestamp", 0),
            ]
        );

        let hd = hardwaredata_crd().unwrap();
        assert_eq!(hd.metadata.name.as_deref(), Some("hardwaredata.metal3.io"));
        assert_eq!(hd.spec.names.short_names, Some(vec!["hd".into()]));
        assert!(hd.spec.versions[0].subresources.is_none());
    }

    #[test]
    fn required_lists_match_upstream() {
        let schema = schema_of(&baremetalhost_crd().unwrap());
        let required = |pointer: &str| -> Vec<String> {
            let mut list: Vec<String> =
                serde_json::from_value(schema.pointer(pointer).unwrap().clone()).unwrap();
            list.sort();
            list
        };
        assert_eq!(required("/properties/spec/required"), ["online"]);
        assert_eq!(
            required("/properties/spec/properties/bmc/required"),
            ["address", "credentialsName"]
        );
        assert_eq!(
            required("/properties/spec/properties/image/required"),
            ["url"]
        );
        assert_eq!(
            required("/properties/status/required"),
            [
                "errorCount",
                "errorMessage",
                "operationalStatus",
                "poweredOn",
                "provisioning",
                "provisioningFailCount"
            ]
        );
        assert_eq!(
            required("/properties/status/properties/provisioning/required"),
            ["ID", "state"]
        );
    }

    #[test]
    fn enums_and_defaults_match_upstream() {
        let schema = schema_of(&baremetalhost_crd().unwrap());
        let at = |pointer: &str| schema.pointer(pointer).unwrap().clone();
        assert_eq!(
            at("/properties/spec/properties/automatedCleaningMode/default"),
            json!("metadata")
        );
        assert_eq!(
            at("/properties/status/properties/errorCount/default"),
            json!(0)
        );
        let error_types = at("/properties/status/properties/errorType/enum");
        assert!(
            error_types
                .as_array()
                .unwrap()
                .contains(&json!("detach error"))
        );
        assert_eq!(
            at(
                "/properties/spec/properties/raid/properties/hardwareRAIDVolumes/items/properties/level/enum"
            ),
            json!(["0", "1", "2", "5", "6", "1+0", "5+0", "6+0"])
        );
        assert_eq!(
            at("/properties/status/properties/operationalStatus/enum"),
            json!([
                "",
                "OK",
                "discovered",
                "error",
                "delayed",
                "detached",
                "servicing"
            ])
        );
        assert!(
            schema
                .pointer("/properties/spec/properties/image/nullable")
                .is_none()
        );
    }

    #[test]
    fn every_rule_has_a_message_naming_a_field() {
        for rule in baremetalhost_rules() {
            assert!(
                rule.message.starts_with("spec.") || rule.message.starts_with("metadata."),
                "{rule:?}"
            );
        }
    }

    #[test]
    fn rendering_is_stable() {
        assert_eq!(render_all().unwrap(), render_all().unwrap());
    }
}
