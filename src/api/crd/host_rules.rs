//! The CEL rules of the BareMetalHost CRD, and those of `spec.image` that HostClaim
//! shares. Each rule is exercised by an invalid manifest in tests/fixtures/hosts/invalid/.

use super::cel::{CelRule, Reason};

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

/// CEL: the RAID list `list` of `parent` (a CEL object expression) holds at least one
/// item. The lists are nullable (Go clients send `null`), and CEL cannot compare a
/// list with null, only its type.
fn non_empty(parent: &str, list: &str) -> String {
    format!(
        "(has({parent}.{list}) && type({parent}.{list}) != null_type && size({parent}.{list}) > 0)"
    )
}

/// CEL: the RAID list `list` of `self` is absent or null.
fn absent(list: &str) -> String {
    format!("(!has(self.{list}) || type(self.{list}) == null_type)")
}

/// Every CEL rule of the BareMetalHost CRD, in the order the CRD lists them. Each one
/// is exercised by an invalid manifest in tests/fixtures/hosts/invalid/.
pub fn baremetalhost_rules() -> Vec<CelRule> {
    [
        metadata_and_transition_rules(),
        spec_cross_field_rules(),
        bmc_rules(),
        reference_rules(),
        image_rules(),
        root_device_hints_rules(),
        raid_rules(),
        network_interface_rules(),
    ]
    .into_iter()
    .flatten()
    .collect()
}

/// metadata, and the transitions that need the status (`oldSelf`).
fn metadata_and_transition_rules() -> Vec<CelRule> {
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
    ]
}

/// spec, cross-field: user data, power, the boot MAC, what IPMI-family BMCs cannot do, root device and RAID.
fn spec_cross_field_rules() -> Vec<CelRule> {
    let ipmi = ipmi_family("self.bmc.address");
    let hw_raid = format!(
        "(has(self.raid) && {})",
        non_empty("self.raid", "hardwareRAIDVolumes")
    );
    vec![
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
    ]
}

/// spec.bmc: the address and the credentials Secret.
fn bmc_rules() -> Vec<CelRule> {
    vec![
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
    ]
}

/// spec.userData and spec.customDeploy.
fn reference_rules() -> Vec<CelRule> {
    vec![
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

/// spec.rootDeviceHints.
fn root_device_hints_rules() -> Vec<CelRule> {
    vec![
        CelRule::new(
            "spec.rootDeviceHints",
            "!has(self.deviceName) || self.deviceName == '' || self.deviceName.matches('^/dev/(disk/by-path/)?[^/]+$')",
            "spec.rootDeviceHints.deviceName must be /dev/<name> or /dev/disk/by-path/<name>",
        )
        .on(".deviceName"),
    ]
}

/// spec.raid: hardware or software, the root volume, physical disks.
fn raid_rules() -> Vec<CelRule> {
    vec![
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
    ]
}

/// spec.networkInterfaces.
fn network_interface_rules() -> Vec<CelRule> {
    vec![
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
    ]
}
