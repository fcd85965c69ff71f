//! The admission half of `bmc::guard`: BMC addresses and image URLs that spell a
//! link-local or cloud metadata address plainly enough for a regular expression
//! (169.254.0.0/16 dotted or short, fe80::/10, IPv4-mapped and NAT64 forms, the
//! metadata services' names) are refused by kube-apiserver, and so is any IPv4
//! address not written as four decimal numbers (hex, octal, one number), which only
//! a resolver can read. The controller checks every spelling again, and names.
//!
//! A policy rather than CRD rules: a site that needs link-local BMCs exempts a
//! namespace by labelling it [`LINK_LOCAL_EXEMPTION_LABEL`]`=true`, which the binding
//! honours, and allows the ranges in bmo with `BMO_ALLOWED_LINK_LOCAL_CIDRS`.

use k8s_openapi::api::admissionregistration::v1::{MatchResources, Validation, Variable};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};

use super::builder::{Policy, invalid, not_deleting, policy};

/// Name of the policy (and its binding) that refuses link-local and metadata
/// addresses in BareMetalHosts.
pub const LINK_LOCAL_POLICY: &str = "bmo-baremetalhost-link-local";
/// Name of the same policy for DataImages.
pub const DATA_IMAGE_LINK_LOCAL_POLICY: &str = "bmo-dataimage-link-local";
/// Name of the same policy for HostFirmwareComponents.
pub const FIRMWARE_COMPONENTS_LINK_LOCAL_POLICY: &str = "bmo-hostfirmwarecomponents-link-local";
/// A namespace with this label set to `true` is exempt from the link-local policies
/// (bmo itself still refuses what `BMO_ALLOWED_LINK_LOCAL_CIDRS` does not allow).
pub const LINK_LOCAL_EXEMPTION_LABEL: &str = "bmo.metal3.io/allow-link-local-addresses";

/// An IPv4 address part as `inet_aton` reads it: decimal, octal or hex.
const PART: &str = "(0x[0-9a-f]*|[0-9]+)";

/// The hosts refused, as one regular expression over the lower-cased host (RE2 and
/// Rust's `regex` read it alike).
pub fn refused_host() -> String {
    let names = crate::bmc::guard::METADATA_NAMES
        .iter()
        .map(|n| n.replace('.', r"\."))
        .collect::<Vec<_>>()
        .join("|");
    [
        // 169.254.0.0/16, also in the short forms 169.254.43518 and the like.
        r"169\.254(\.[0-9]+){1,2}".to_owned(),
        // Any IPv4 address with a hex part, an octal part, or fewer than four parts.
        format!(r"({PART}\.){{0,3}}0x[0-9a-f]*(\.{PART}){{0,3}}"),
        format!(r"({PART}\.){{0,3}}0[0-9]+(\.{PART}){{0,3}}"),
        r"[0-9]+(\.[0-9]+){0,2}".to_owned(),
        // fe80::/10, with or without a zone.
        r"fe[89ab][0-9a-f]:[0-9a-f:.]*(%[0-9a-z._-]*)?".to_owned(),
        // 169.254.0.0/16 inside IPv4-mapped, IPv4-compatible, NAT64 and 6to4 addresses.
        r"(::(ffff:)?|(0{1,4}:){5}(ffff|0{1,4}):|64:ff9b::)(169\.254\.[0-9]+\.[0-9]+|a9fe:[0-9a-f]{1,4})"
            .to_owned(),
        r"2002:a9fe:[0-9a-f:]*".to_owned(),
        // Metadata services at other addresses (Alibaba Cloud, AWS over IPv6).
        r"100\.100\.100\.200|fd00:ec2::254".to_owned(),
        format!("({names})"),
    ]
    .map(|alternative| format!("({alternative})"))
    .join("|")
}

/// The regular expression an address or URL (lower-cased) matches when its host is
/// refused: optional scheme, optional user info, the host (bracketed or not, with
/// or without a trailing dot), then a port, path, query or fragment, or nothing.
pub fn refused_address() -> String {
    format!(
        r"^([a-z][a-z0-9+.-]*:(//)?)?([^/?#]*@)?\[?({})\.?\]?(:[0-9]*)?([/?#].*)?$",
        refused_host()
    )
}

/// `regex` as a CEL string literal.
fn cel_string(regex: &str) -> String {
    format!("'{}'", regex.replace('\\', r"\\"))
}

/// CEL: the string at `path` below `root` (`object` or `oldObject`), or `''` when a
/// step is missing or, for `oldObject`, on CREATE.
fn value_at(root: &str, path: &[&str]) -> String {
    let mut present = vec![format!("{root} != null")];
    for depth in 1..=path.len() {
        present.push(format!("has({root}.{})", path[..depth].join(".")));
    }
    format!("{} ? {root}.{} : ''", present.join(" && "), path.join("."))
}

/// The variables `name` (the value at `path` of the object) and `oldName` (of the
/// object before this update).
fn field_variables(name: &str, path: &[&str]) -> [Variable; 2] {
    [
        Variable {
            name: name.into(),
            expression: value_at("object", path),
        },
        Variable {
            name: old_name(name),
            expression: value_at("oldObject", path),
        },
    ]
}

/// `bmc` → `oldBmc`.
fn old_name(name: &str) -> String {
    let mut chars = name.chars();
    let first = chars.next().map(|c| c.to_ascii_uppercase());
    format!("old{}{}", first.unwrap_or_default(), chars.as_str())
}

/// The variable `name` (see [`field_variables`]) is refused unless it is unchanged
/// by this update (objects made before the policy, or in an exempt namespace, stay
/// updatable; bmo itself still refuses them) or `unless` (a CEL condition) holds.
fn refuse(name: &str, unless: Option<&str>, message: &str) -> Validation {
    let mut expression = format!("variables.{name} == variables.{}", old_name(name));
    if let Some(unless) = unless {
        expression.push_str(&format!(" || {unless}"));
    }
    expression.push_str(&format!(
        " || !variables.{name}.lowerAscii().matches({})",
        cel_string(&refused_address())
    ));
    invalid(expression, message)
}

const WHY: &str = "bmo does not let Ironic connect there (docs/bmc.md, \"Addresses bmo refuses\")";

/// BareMetalHost: `spec.bmc.address`, `spec.image.url` and `spec.image.checksum`.
pub fn host_policy() -> Policy {
    let variables = [
        field_variables("bmc", &["spec", "bmc", "address"]),
        field_variables("imageUrl", &["spec", "image", "url"]),
        field_variables("checksum", &["spec", "image", "checksum"]),
    ]
    .concat();
    let validations = vec![
        // A fake BMC is only a label: nothing connects to it.
        refuse(
            "bmc",
            Some("variables.bmc.lowerAscii().startsWith('fake:')"),
            &format!(
                "spec.bmc.address must not point at a link-local or cloud metadata address (169.254.0.0/16, fe80::/10, metadata.google.internal, ...) nor write an IPv4 address other than as four decimal numbers: {WHY}"
            ),
        ),
        refuse(
            "imageUrl",
            None,
            &format!(
                "spec.image.url must not point at a link-local or cloud metadata address (169.254.0.0/16, fe80::/10, metadata.google.internal, ...) nor write an IPv4 address other than as four decimal numbers: {WHY}"
            ),
        ),
        // A checksum that is not a URL is a digest, which may be all digits.
        refuse(
            "checksum",
            Some("!variables.checksum.contains('://')"),
            &format!(
                "spec.image.checksum must not be a URL of a link-local or cloud metadata address (169.254.0.0/16, fe80::/10, metadata.google.internal, ...) nor write an IPv4 address other than as four decimal numbers: {WHY}"
            ),
        ),
    ];
    exempting(policy(
        "admission/baremetalhost-link-local.yaml",
        LINK_LOCAL_POLICY,
        "baremetalhosts",
        &["CREATE", "UPDATE"],
        not_deleting(),
        variables,
        validations,
    ))
}

/// DataImage: `spec.url`, which the BMC downloads.
pub fn data_image_policy() -> Policy {
    let variables = field_variables("url", &["spec", "url"]).to_vec();
    let validations = vec![refuse(
        "url",
        None,
        &format!(
            "spec.url must not point at a link-local or cloud metadata address (169.254.0.0/16, fe80::/10, metadata.google.internal, ...) nor write an IPv4 address other than as four decimal numbers: {WHY}"
        ),
    )];
    exempting(policy(
        "admission/dataimage-link-local.yaml",
        DATA_IMAGE_LINK_LOCAL_POLICY,
        "dataimages",
        &["CREATE", "UPDATE"],
        not_deleting(),
        variables,
        validations,
    ))
}

/// HostFirmwareComponents: `spec.updates[].url`, which Ironic downloads.
pub fn firmware_components_policy() -> Policy {
    let validations = vec![invalid(
        format!(
            "!has(object.spec) || !has(object.spec.updates) \
             || object.spec.updates.all(u, \
                  (oldObject != null && has(oldObject.spec) && has(oldObject.spec.updates) \
                   && oldObject.spec.updates.exists(o, o.url == u.url)) \
                  || !u.url.lowerAscii().matches({}))",
            cel_string(&refused_address())
        ),
        &format!(
            "spec.updates[].url must not point at a link-local or cloud metadata address (169.254.0.0/16, fe80::/10, metadata.google.internal, ...) nor write an IPv4 address other than as four decimal numbers: {WHY}"
        ),
    )];
    exempting(policy(
        "admission/hostfirmwarecomponents-link-local.yaml",
        FIRMWARE_COMPONENTS_LINK_LOCAL_POLICY,
        "hostfirmwarecomponents",
        &["CREATE", "UPDATE"],
        not_deleting(),
        Vec::new(),
        validations,
    ))
}

/// The binding leaves out namespaces labelled with the exemption label.
fn exempting(mut policy: Policy) -> Policy {
    policy.binding.spec.match_resources = Some(MatchResources {
        namespace_selector: Some(LabelSelector {
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: LINK_LOCAL_EXEMPTION_LABEL.into(),
                operator: "NotIn".into(),
                values: Some(vec!["true".into()]),
            }]),
            match_labels: None,
        }),
        ..Default::default()
    });
    policy
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(address: &str) -> bool {
        regex::Regex::new(&refused_address())
            .expect("the policy's regular expression compiles")
            .is_match(&address.to_ascii_lowercase())
    }

    #[test]
    fn plain_spellings_of_refused_hosts_are_refused() {
        for address in [
            "169.254.169.254",
            "169.254.169.254:623",
            "ipmi://169.254.169.254",
            "redfish+http://169.254.169.254:8000/redfish/v1/Systems/1",
            "redfish://[::ffff:169.254.169.254]/",
            "redfish://[::ffff:a9fe:a9fe]:443/",
            "[0:0:0:0:0:ffff:169.254.169.254]:623",
            "ipmi://[64:ff9b::a9fe:a9fe]",
            "ipmi://[2002:a9fe:a9fe::1]",
            "fe80::1",
            "idrac-virtualmedia://[fe80::1%25eth0]/",
            "redfish://0xa9.0xfe.0xa9.0xfe/",
            "redfish://METADATA.google.internal/redfish/v1",
            "http://169.254.169.254/latest/meta-data/",
            "http://169.254.169.254./latest/meta-data/",
            "http://admin:pw@169.254.169.254/img",
            "http://2852039166/img",
            "http://0251.0376.0251.0376/img",
            "http://169.254.43518/img",
            "http://10.0.0.010/img",
            "https://metadata.goog./x",
            "http://100.100.100.200/latest",
            "http://[fd00:ec2::254]/latest",
            "oci://0xa9fea9fe/repo",
        ] {
            assert!(refused(address), "{address} passes admission");
        }
    }

    #[test]
    fn ordinary_addresses_pass() {
        for address in [
            "127.0.0.1",
            "ipmi://192.0.2.10:623",
            "redfish+http://127.0.0.1:8000/redfish/v1/Systems/1",
            "redfish://[fd00::5]/",
            "[fd00::10]:623",
            "fd00::10",
            "redfish://bmc-1.example.com/redfish/v1/Systems/1",
            "idrac-redfish://0xdead.example.com/",
            "fake://metadata-1",
            "http://10.0.0.9:6180/images/os.qcow2",
            "https://images.example.com/169.254.169.254/os.qcow2",
            "http://169.2540.1.1.example/x",
            "oci://registry.example.com/repo:tag",
            "0123456789abcdef0123456789abcdef",
            "",
        ] {
            assert!(!refused(address), "{address} is refused");
        }
    }

    #[test]
    fn the_binding_leaves_out_exempt_namespaces() {
        for policy in [
            host_policy(),
            data_image_policy(),
            firmware_components_policy(),
        ] {
            let selector = policy
                .binding
                .spec
                .match_resources
                .and_then(|m| m.namespace_selector)
                .expect("namespace selector");
            let expression = &selector.match_expressions.expect("expressions")[0];
            assert_eq!(expression.key, LINK_LOCAL_EXEMPTION_LABEL);
            assert_eq!(expression.operator, "NotIn");
        }
    }
}
