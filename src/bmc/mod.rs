//! BMC addresses: parse `spec.bmc.address` into the Ironic hardware type, interfaces
//! and `driver_info` that reach that BMC.
//!
//! The accepted schemes are upstream metal3's (ipmi, libvirt, the Redfish family with
//! `+http`/`+https` transports), plus `fake://NAME`, which maps to Ironic's
//! `fake-hardware` type and touches no hardware at all. [`guard`] refuses addresses
//! that point at link-local or cloud metadata addresses.

pub mod guard;
mod parse;

use std::fmt;

use serde::{Serialize, Serializer};
use serde_json::{Map, Value, json};

use crate::credentials::Credentials;

pub use guard::{AddressGuard, AddressRefused, AddressSettings};
pub use parse::{BmcAddressError, parse_mac, redact_userinfo};

/// Default IPMI (RMCP+) UDP port.
pub const IPMI_DEFAULT_PORT: u16 = 623;
const IPMI_DEFAULT_PRIVILEGE: &str = "ADMINISTRATOR";

/// The BMC family a scheme selects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum BmcType {
    Ipmi,
    Libvirt,
    Redfish,
    Ilo5Redfish,
    IdracRedfish,
    RedfishVirtualMedia,
    Ilo5VirtualMedia,
    IdracVirtualMedia,
    RedfishUefiHttp,
    Fake,
}

/// How a Redfish BMC is reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Transport {
    Http,
    Https,
}

impl Transport {
    fn as_str(self) -> &'static str {
        match self {
            Self::Http => "http",
            Self::Https => "https",
        }
    }
}

/// Every scheme accepted, in the order the user guide lists them.
pub const SCHEMES: &[&str] = &[
    "ipmi",
    "libvirt",
    "redfish",
    "redfish+http",
    "redfish+https",
    "ilo5-redfish",
    "ilo5-redfish+http",
    "ilo5-redfish+https",
    "idrac-redfish",
    "idrac-redfish+http",
    "idrac-redfish+https",
    "redfish-virtualmedia",
    "redfish-virtualmedia+http",
    "redfish-virtualmedia+https",
    "ilo5-virtualmedia",
    "ilo5-virtualmedia+http",
    "ilo5-virtualmedia+https",
    "idrac-virtualmedia",
    "idrac-virtualmedia+http",
    "idrac-virtualmedia+https",
    "redfish-uefihttp",
    "redfish-uefihttp+http",
    "redfish-uefihttp+https",
    "fake",
];

impl BmcType {
    /// The type and transport a scheme names, `None` for an unknown scheme.
    pub fn from_scheme(scheme: &str) -> Option<(Self, Option<Transport>)> {
        let lower = scheme.to_ascii_lowercase();
        let (base, transport) = match lower.split_once('+') {
            Some((base, "http")) => (base, Some(Transport::Http)),
            Some((base, "https")) => (base, Some(Transport::Https)),
            Some(_) => return None,
            None => (lower.as_str(), None),
        };
        let kind = match base {
            "ipmi" => Self::Ipmi,
            "libvirt" => Self::Libvirt,
            "redfish" => Self::Redfish,
            "ilo5-redfish" => Self::Ilo5Redfish,
            "idrac-redfish" => Self::IdracRedfish,
            "redfish-virtualmedia" => Self::RedfishVirtualMedia,
            "ilo5-virtualmedia" => Self::Ilo5VirtualMedia,
            "idrac-virtualmedia" => Self::IdracVirtualMedia,
            "redfish-uefihttp" => Self::RedfishUefiHttp,
            "fake" => Self::Fake,
            _ => return None,
        };
        if transport.is_some() && !kind.is_redfish_family() {
            return None;
        }
        Some((kind, transport))
    }

    fn is_redfish_family(self) -> bool {
        !matches!(self, Self::Ipmi | Self::Libvirt | Self::Fake)
    }

    /// The Ironic hardware type (`driver` field of a node).
    pub fn driver(self) -> &'static str {
        match self {
            Self::Ipmi | Self::Libvirt => "ipmi",
            Self::Redfish
            | Self::Ilo5Redfish
            | Self::RedfishVirtualMedia
            | Self::Ilo5VirtualMedia
            | Self::RedfishUefiHttp => "redfish",
            Self::IdracRedfish | Self::IdracVirtualMedia => "idrac",
            Self::Fake => "fake-hardware",
        }
    }

    /// The node interfaces this type sets; `None` fields take Ironic's default for
    /// the hardware type.
    pub fn interfaces(self) -> Interfaces {
        match self {
            Self::Ipmi | Self::Libvirt => Interfaces {
                boot: Some("ipxe"),
                raid: Some("no-raid"),
                ..Interfaces::default()
            },
            Self::Redfish | Self::Ilo5Redfish => Interfaces::redfish("ipxe"),
            Self::RedfishVirtualMedia | Self::Ilo5VirtualMedia => {
                Interfaces::redfish("redfish-virtual-media")
            }
            Self::RedfishUefiHttp => Interfaces::redfish("redfish-https"),
            Self::IdracRedfish => Interfaces::idrac("ipxe"),
            Self::IdracVirtualMedia => Interfaces::idrac("idrac-redfish-virtual-media"),
            Self::Fake => Interfaces {
                boot: Some("fake"),
                bios: Some("fake"),
                management: Some("fake"),
                power: Some("fake"),
                raid: Some("fake"),
                vendor: Some("fake"),
                firmware: Some("fake"),
            },
        }
    }

    /// The inspect interface for out-of-band ("fast") inspection, if the BMC has one.
    pub fn fast_inspect_interface(self) -> Option<&'static str> {
        match self {
            Self::Ipmi | Self::Libvirt => None,
            Self::Fake => Some("fake"),
            _ => Some("redfish"),
        }
    }

    /// Whether a host of this type can only be registered with a bootMACAddress.
    pub fn needs_boot_mac(self) -> bool {
        self == Self::Libvirt
    }

    pub fn supports_secure_boot(self) -> bool {
        self.is_redfish_family() || self == Self::Fake
    }

    /// Whether the host boots from an ISO (virtual media, UEFI HTTP) rather than over
    /// the provisioning network; such hosts do not count against the provisioning limit.
    pub fn supports_iso_boot(self) -> bool {
        matches!(
            self,
            Self::RedfishVirtualMedia
                | Self::Ilo5VirtualMedia
                | Self::IdracVirtualMedia
                | Self::RedfishUefiHttp
        )
    }

    pub fn needs_provisioning_network(self) -> bool {
        matches!(
            self,
            Self::Ipmi | Self::Libvirt | Self::Redfish | Self::Ilo5Redfish | Self::IdracRedfish
        )
    }

    pub fn supports_hardware_raid(self) -> bool {
        self.interfaces().raid != Some("no-raid")
    }
}

impl fmt::Display for BmcType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = match self {
            Self::Ipmi => "ipmi",
            Self::Libvirt => "libvirt",
            Self::Redfish => "redfish",
            Self::Ilo5Redfish => "ilo5-redfish",
            Self::IdracRedfish => "idrac-redfish",
            Self::RedfishVirtualMedia => "redfish-virtualmedia",
            Self::Ilo5VirtualMedia => "ilo5-virtualmedia",
            Self::IdracVirtualMedia => "idrac-virtualmedia",
            Self::RedfishUefiHttp => "redfish-uefihttp",
            Self::Fake => "fake",
        };
        f.write_str(s)
    }
}

/// Ironic node interfaces a BMC type chooses. The deploy and inspect interfaces are
/// the provisioner's choice (they depend on the image and the inspection mode).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Interfaces {
    pub boot: Option<&'static str>,
    pub bios: Option<&'static str>,
    pub management: Option<&'static str>,
    pub power: Option<&'static str>,
    pub raid: Option<&'static str>,
    pub vendor: Option<&'static str>,
    pub firmware: Option<&'static str>,
}

/// Only the chosen interfaces, as `{"boot": "ipxe", …}`: the others are Ironic's
/// defaults.
impl Serialize for Interfaces {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_map(self.chosen())
    }
}

impl Interfaces {
    /// The interfaces chosen, as (name without `_interface`, value).
    pub fn chosen(&self) -> impl Iterator<Item = (&'static str, &'static str)> {
        [
            ("boot", self.boot),
            ("bios", self.bios),
            ("management", self.management),
            ("power", self.power),
            ("raid", self.raid),
            ("vendor", self.vendor),
            ("firmware", self.firmware),
        ]
        .into_iter()
        .filter_map(|(name, value)| Some((name, value?)))
    }

    /// A Redfish BMC's, booting through `boot`.
    fn redfish(boot: &'static str) -> Self {
        Self {
            boot: Some(boot),
            raid: Some("redfish"),
            firmware: Some("redfish"),
            ..Self::default()
        }
    }

    /// An iDRAC's (Dell's own Redfish interfaces), booting through `boot`.
    fn idrac(boot: &'static str) -> Self {
        let idrac = Some("idrac-redfish");
        Self {
            boot: Some(boot),
            bios: idrac,
            management: idrac,
            power: idrac,
            raid: idrac,
            vendor: idrac,
            firmware: Some("redfish"),
        }
    }
}

/// The host part of an address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BmcHost {
    Ipv4(std::net::Ipv4Addr),
    Ipv6(std::net::Ipv6Addr),
    Name(String),
}

impl BmcHost {
    /// The host as it goes into a URL (IPv6 in brackets).
    pub fn for_url(&self) -> String {
        match self {
            Self::Ipv6(ip) => format!("[{ip}]"),
            other => other.to_string(),
        }
    }

    pub fn is_ipv6(&self) -> bool {
        matches!(self, Self::Ipv6(_))
    }
}

impl fmt::Display for BmcHost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Ipv4(ip) => write!(f, "{ip}"),
            Self::Ipv6(ip) => write!(f, "{ip}"),
            Self::Name(n) => f.write_str(n),
        }
    }
}

/// A parsed, valid BMC address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BmcAddress {
    /// The address as the user wrote it.
    pub original: String,
    pub kind: BmcType,
    /// Redfish family only; `None` means the default (`https`).
    pub transport: Option<Transport>,
    pub host: BmcHost,
    pub port: Option<u16>,
    /// The path, starting with `/`, or empty.
    pub path: String,
    /// Query parameters in order (only `privilegelevel` has a meaning, for IPMI).
    pub query: Vec<(String, String)>,
}

/// Credential-free description of what an address turns into in Ironic.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DriverSettings {
    pub driver: &'static str,
    pub interfaces: Interfaces,
    /// `driver_info` without the credential keys.
    pub driver_info: Map<String, Value>,
    /// Keys filled from the credentials secret (`username`, `password`); none for
    /// `fake`, which needs no credentials.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub credential_keys: Option<[&'static str; 2]>,
}

impl BmcAddress {
    /// The driver, interfaces and `driver_info` (without credentials);
    /// `disable_certificate_verification` is `spec.bmc.disableCertificateVerification`.
    pub fn driver_settings(&self, disable_certificate_verification: bool) -> DriverSettings {
        let mut info = Map::new();
        let credential_keys = match self.kind {
            BmcType::Ipmi | BmcType::Libvirt => {
                info.insert("ipmi_address".into(), json!(self.host.to_string()));
                info.insert(
                    "ipmi_port".into(),
                    json!(self.port.unwrap_or(IPMI_DEFAULT_PORT).to_string()),
                );
                let privilege = self
                    .query
                    .iter()
                    .find(|(k, _)| k.eq_ignore_ascii_case("privilegelevel"))
                    .map(|(_, v)| v.as_str())
                    .unwrap_or(IPMI_DEFAULT_PRIVILEGE);
                info.insert("ipmi_priv_level".into(), json!(privilege));
                // IPMI has no TLS: disableCertificateVerification has nothing to turn off.
                Some(["ipmi_username", "ipmi_password"])
            }
            BmcType::Fake => None,
            _ => {
                let transport = self.transport.unwrap_or(Transport::Https);
                let authority = match self.port {
                    Some(port) => format!("{}:{port}", self.host.for_url()),
                    None => self.host.for_url(),
                };
                info.insert(
                    "redfish_address".into(),
                    json!(format!("{}://{authority}", transport.as_str())),
                );
                let trimmed = self.path.trim_matches('/');
                let always = self.kind == BmcType::RedfishUefiHttp;
                if always || !(trimmed.is_empty() || trimmed == "redfish/v1") {
                    info.insert("redfish_system_id".into(), json!(self.path));
                }
                if disable_certificate_verification {
                    info.insert("redfish_verify_ca".into(), json!(false));
                }
                Some(["redfish_username", "redfish_password"])
            }
        };
        DriverSettings {
            driver: self.kind.driver(),
            interfaces: self.kind.interfaces(),
            driver_info: info,
            credential_keys,
        }
    }

    /// The complete `driver_info`, credentials included: send it to Ironic, never log it.
    pub fn driver_info(
        &self,
        credentials: &Credentials,
        disable_certificate_verification: bool,
    ) -> Map<String, Value> {
        let settings = self.driver_settings(disable_certificate_verification);
        let mut info = settings.driver_info;
        if let Some([user_key, pass_key]) = settings.credential_keys {
            info.insert(user_key.into(), json!(credentials.username));
            info.insert(pass_key.into(), json!(credentials.password.expose()));
        }
        info
    }
}

impl fmt::Display for BmcAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.original)
    }
}

/// What `bmo bmc ADDRESS` prints: everything bmo derives from an address, without
/// credentials.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AddressReport {
    pub address: String,
    #[serde(rename = "type")]
    pub kind: BmcType,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub transport: Option<Transport>,
    pub host: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub port: Option<u16>,
    #[serde(flatten)]
    pub settings: DriverSettings,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fast_inspect_interface: Option<&'static str>,
    pub needs_boot_mac_address: bool,
    pub supports_secure_boot: bool,
    pub supports_iso_boot: bool,
    pub needs_provisioning_network: bool,
    pub supports_hardware_raid: bool,
    pub touches_hardware: bool,
}

impl AddressReport {
    pub fn new(address: &BmcAddress, disable_certificate_verification: bool) -> Self {
        let kind = address.kind;
        Self {
            address: address.original.clone(),
            kind,
            transport: address
                .transport
                .or(kind.is_redfish_family().then_some(Transport::Https)),
            host: address.host.to_string(),
            port: address.port,
            settings: address.driver_settings(disable_certificate_verification),
            fast_inspect_interface: kind.fast_inspect_interface(),
            needs_boot_mac_address: kind.needs_boot_mac(),
            supports_secure_boot: kind.supports_secure_boot(),
            supports_iso_boot: kind.supports_iso_boot(),
            needs_provisioning_network: kind.needs_provisioning_network(),
            supports_hardware_raid: kind.supports_hardware_raid(),
            touches_hardware: kind != BmcType::Fake,
        }
    }

    /// The human-readable form.
    pub fn to_text(&self) -> String {
        let yes_no = |b: bool| if b { "yes" } else { "no" };
        let mut out = String::new();
        let mut line = |k: &str, v: String| out.push_str(&format!("{k:<31} {v}\n"));
        line("address:", self.address.clone());
        line("type:", self.kind.to_string());
        if let Some(t) = self.transport {
            line("transport:", t.as_str().to_owned());
        }
        line("host:", self.host.clone());
        if let Some(p) = self.port {
            line("port:", p.to_string());
        }
        line("ironic driver:", self.settings.driver.to_owned());
        let mut ifaces: Vec<_> = self.settings.interfaces.chosen().collect();
        ifaces.sort_unstable();
        for (name, value) in ifaces {
            line(&format!("{name}_interface:"), value.to_owned());
        }
        for (key, value) in &self.settings.driver_info {
            let shown = match value {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            line(&format!("driver_info.{key}:"), shown);
        }
        if let Some([user, pass]) = self.settings.credential_keys {
            line(
                &format!("driver_info.{user}:"),
                "(username from the credentials secret)".into(),
            );
            line(
                &format!("driver_info.{pass}:"),
                "(password from the credentials secret)".into(),
            );
        }
        line(
            "needs bootMACAddress:",
            if self.needs_boot_mac_address {
                "yes, always".into()
            } else {
                "only when inspection is disabled".into()
            },
        );
        line(
            "fast inspection:",
            self.fast_inspect_interface
                .map(|i| format!("yes ({i})"))
                .unwrap_or_else(|| "no".into()),
        );
        line("secure boot:", yes_no(self.supports_secure_boot).into());
        line("boots from ISO:", yes_no(self.supports_iso_boot).into());
        line(
            "needs provisioning network:",
            yes_no(self.needs_provisioning_network).into(),
        );
        line("hardware RAID:", yes_no(self.supports_hardware_raid).into());
        if !self.touches_hardware {
            line("touches hardware:", "no (Ironic fake-hardware)".into());
        }
        out
    }
}

#[cfg(test)]
mod tests;
