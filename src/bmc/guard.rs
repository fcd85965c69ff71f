//! Addresses bmo does not hand to Ironic: link-local ones (169.254.0.0/16, where
//! clouds serve instance metadata, and fe80::/10) and the cloud metadata services'
//! own names and addresses, in every spelling the resolver accepts.
//!
//! Ironic connects to whatever a host spec names: the BMC, and the image (a HEAD
//! even with the fake driver). A tenant who may only create BareMetalHosts must not
//! be able to point those connections at the metadata service of the machine Ironic
//! runs on. bmo's admission policies (`api::admission`, `link_local`) refuse the
//! plain spellings; this check, run by the host controller before anything goes to
//! Ironic (and by the DataImage step before an attach), also reads hex, octal,
//! integer and short IPv4 forms, IPv4 embedded in IPv6, and names, which it resolves.
//! `BMO_ALLOWED_LINK_LOCAL_CIDRS` lets a site use the link-local ranges it needs.
//! Loopback stays allowed.
//!
//! The name is resolved here and again by Ironic: a name whose answer changes in
//! between (DNS rebinding) is not caught. A name that does not resolve here is let
//! through; Ironic cannot reach it either. A name's answer is reused for
//! [`RESOLVED_FOR`]: every reconcile checks its host's image URL, and a thousand
//! hosts naming one image server made a burst of lookups the resolver answered late
//! or not at all (some ran into [`RESOLVE_TIMEOUT`]).

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::{Arc, LazyLock, Mutex, PoisonError};
use std::time::{Duration, Instant};

use clap::Args;
use url::Url;

use super::{BmcAddress, BmcHost, BmcType};
use crate::api::BareMetalHost;
use crate::netboot::address::IpNet;

/// The setting that names it, for messages.
pub const ALLOWED_CIDRS_VARIABLE: &str = "BMO_ALLOWED_LINK_LOCAL_CIDRS";

/// Names of cloud metadata services, refused without a lookup (they resolve only
/// inside the cloud, where the answer is the metadata address).
pub const METADATA_NAMES: &[&str] = &[
    "metadata",
    "metadata.google.internal",
    "metadata.goog",
    "instance-data",
    "instance-data.ec2.internal",
    "metadata.tencentyun.com",
    "metadata.platformequinix.com",
];

/// How long a name may take to resolve before it is let through unchecked.
const RESOLVE_TIMEOUT: Duration = Duration::from_secs(2);
/// How long a name's addresses (or its failure to resolve) are reused.
const RESOLVED_FOR: Duration = Duration::from_secs(30);

/// One lookup of a name, shared by every check that asks while it is fresh.
type Lookup = Arc<tokio::sync::OnceCell<Vec<IpAddr>>>;

/// The lookups of the last [`RESOLVED_FOR`], by name: the answer does not depend on
/// a guard's settings, so the process shares them.
static RESOLVED: LazyLock<Mutex<HashMap<String, (Instant, Lookup)>>> =
    LazyLock::new(Mutex::default);

/// Settings of the check (flattened into `bmo run`'s configuration).
#[derive(Debug, Clone, Default, Args)]
pub struct AddressSettings {
    /// Comma-separated CIDRs inside the link-local and metadata ranges that BMC
    /// addresses and image URLs may point at (e.g. `169.254.10.0/24`); none by
    /// default.
    #[arg(
        long = "allowed-link-local-cidrs",
        env = "BMO_ALLOWED_LINK_LOCAL_CIDRS",
        value_delimiter = ','
    )]
    pub allowed_link_local_cidrs: Vec<IpNet>,
}

impl AddressSettings {
    pub fn guard(&self) -> AddressGuard {
        AddressGuard {
            allowed: self.allowed_link_local_cidrs.clone(),
        }
    }
}

/// Refuses link-local and metadata addresses outside the allowed CIDRs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AddressGuard {
    allowed: Vec<IpNet>,
}

/// A refused address: the field, the host as written and what it means.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{field}: host {host} {why}; bmo does not let Ironic connect there (list the range in {ALLOWED_CIDRS_VARIABLE} if this site needs it)"
)]
pub struct AddressRefused {
    pub field: &'static str,
    pub host: String,
    pub why: String,
}

impl AddressGuard {
    /// A guard that also allows `allowed`.
    pub fn allowing(allowed: Vec<IpNet>) -> Self {
        Self { allowed }
    }

    /// `input` (the host's provisioner input, or why there is none) unless one of the
    /// host's addresses is refused. A host being deleted is not checked: its node is
    /// deprovisioned and deleted with what Ironic already has.
    pub async fn checked<T>(
        &self,
        host: &BareMetalHost,
        input: Result<T, String>,
    ) -> Result<T, String> {
        let input = input?;
        if host.metadata.deletion_timestamp.is_some() {
            return Ok(input);
        }
        match self.check(host).await {
            Ok(()) => Ok(input),
            Err(refused) => Err(refused.to_string()),
        }
    }

    /// Checks the BMC address and the image URLs of `host`.
    pub async fn check(&self, host: &BareMetalHost) -> Result<(), AddressRefused> {
        if let Some(bmc) = host.spec.bmc.as_ref()
            && let Ok(address) = BmcAddress::parse(&bmc.address)
            && address.kind != BmcType::Fake
        {
            let text = address.host.to_string();
            let literal = match address.host {
                BmcHost::Ipv4(ip) => Some(IpAddr::V4(ip)),
                BmcHost::Ipv6(ip) => Some(IpAddr::V6(ip)),
                BmcHost::Name(_) => None,
            };
            self.check_host("spec.bmc.address", &text, literal).await?;
        }
        if let Some(image) = host.spec.image.as_ref() {
            self.check_url("spec.image.url", &image.url).await?;
            if let Some(checksum) = image.checksum.as_deref() {
                self.check_url("spec.image.checksum", checksum).await?;
            }
        }
        Ok(())
    }

    /// Checks the host of `text` when it is a URL with a host (a checksum that is
    /// not a URL has none): as the URL standard reads it and as written, since
    /// clients differ (Python takes `[fe80::1%25eth0]`, which the standard refuses).
    pub async fn check_url(&self, field: &'static str, text: &str) -> Result<(), AddressRefused> {
        let raw = raw_host(text.trim());
        let mut standard = None;
        if let Ok(url) = Url::parse(text.trim())
            && let Some(host) = url.host()
        {
            let literal = match host {
                url::Host::Ipv4(ip) => Some(IpAddr::V4(ip)),
                url::Host::Ipv6(ip) => Some(IpAddr::V6(ip)),
                url::Host::Domain(_) => None,
            };
            let normal = url.host_str().unwrap_or_default().to_owned();
            // Messages show the host as written (`2852039166`, not `169.254.169.254`).
            self.check_host(field, raw.unwrap_or(&normal), literal)
                .await?;
            standard = Some(normal);
        }
        match raw {
            Some(raw) if standard.is_none_or(|s| !s.eq_ignore_ascii_case(raw)) => {
                self.check_host(field, raw, None).await
            }
            _ => Ok(()),
        }
    }

    /// Checks one host: `literal` is its address when the parser already read one,
    /// else `host` is read in every spelling the resolver takes, then looked up.
    async fn check_host(
        &self,
        field: &'static str,
        host: &str,
        literal: Option<IpAddr>,
    ) -> Result<(), AddressRefused> {
        let refuse = |why: String| AddressRefused {
            field,
            host: host.to_owned(),
            why,
        };
        // A trailing dot makes a number a name to glibc, but not to every client.
        let bare = host.trim_end_matches('.');
        if let Some(ip) = literal.or_else(|| resolver_literal(bare)) {
            return match self.refused(ip) {
                Some(range) => Err(refuse(format!("is {ip}, {range}"))),
                None => Ok(()),
            };
        }
        let name = bare.to_ascii_lowercase();
        if METADATA_NAMES.contains(&name.as_str()) {
            return Err(refuse("is the name of a cloud metadata service".into()));
        }
        let addresses = resolve(&name).await;
        self.check_resolved(field, host, &addresses)
    }

    /// Refuses `host` when one of the `addresses` it resolved to is refused.
    fn check_resolved(
        &self,
        field: &'static str,
        host: &str,
        addresses: &[IpAddr],
    ) -> Result<(), AddressRefused> {
        for &ip in addresses {
            if let Some(range) = self.refused(ip) {
                return Err(AddressRefused {
                    field,
                    host: host.to_owned(),
                    why: format!("resolves to {ip}, {range}"),
                });
            }
        }
        Ok(())
    }

    /// What makes `ip` refused (the range, for the message), unless an allowed CIDR
    /// holds it.
    pub fn refused(&self, ip: IpAddr) -> Option<&'static str> {
        let embedded = match ip {
            IpAddr::V6(v6) => embedded_ipv4(v6).map(IpAddr::V4),
            IpAddr::V4(_) => None,
        };
        let range = [Some(ip), embedded]
            .into_iter()
            .flatten()
            .find_map(refused_range)?;
        let allowed = [Some(ip), embedded]
            .into_iter()
            .flatten()
            .any(|ip| self.allowed.iter().any(|net| net.contains(ip)));
        (!allowed).then_some(range)
    }
}

/// The host of `scheme://[userinfo@]host[:port][/...]` as written; `None` without
/// `://`.
fn raw_host(url: &str) -> Option<&str> {
    let (_, rest) = url.split_once("://")?;
    // After the last `@` anywhere, as `redact_userinfo` does: a password may hold
    // `/`, and no part of it may be taken for the host (which messages repeat).
    let rest = rest.rsplit_once('@').map_or(rest, |(_, after)| after);
    let host_port = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let host = match host_port.strip_prefix('[') {
        Some(inner) => inner.split(']').next().unwrap_or_default(),
        None => host_port.split(':').next().unwrap_or_default(),
    };
    let host = host.split("%25").next().unwrap_or_default();
    (!host.is_empty()).then_some(host)
}

/// The refused range `ip` falls in.
fn refused_range(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) if v4.is_link_local() => Some("a link-local address (169.254.0.0/16)"),
        // Alibaba Cloud's metadata service.
        IpAddr::V4(v4) if v4 == Ipv4Addr::new(100, 100, 100, 200) => {
            Some("a cloud metadata address")
        }
        IpAddr::V6(v6) if v6.segments()[0] & 0xffc0 == 0xfe80 => {
            Some("a link-local address (fe80::/10)")
        }
        // AWS's IPv6 metadata service.
        IpAddr::V6(v6) if v6 == Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254) => {
            Some("a cloud metadata address")
        }
        _ => None,
    }
}

/// The IPv4 address inside an IPv4-mapped (`::ffff:a.b.c.d`), IPv4-compatible
/// (`::a.b.c.d`), NAT64 (`64:ff9b::/96`) or 6to4 (`2002:AABB:CCDD::/48`) address.
fn embedded_ipv4(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    let s = ip.segments();
    let low = Ipv4Addr::new((s[6] >> 8) as u8, s[6] as u8, (s[7] >> 8) as u8, s[7] as u8);
    match s {
        [0, 0, 0, 0, 0, 0xffff, _, _] | [0, 0, 0, 0, 0, 0, _, _] => Some(low),
        [0x64, 0xff9b, 0, 0, 0, 0, _, _] => Some(low),
        [0x2002, a, b, ..] => Some(Ipv4Addr::new(
            (a >> 8) as u8,
            a as u8,
            (b >> 8) as u8,
            b as u8,
        )),
        _ => None,
    }
}

/// The address `host` means to the resolver without a lookup: an IPv6 literal (in
/// brackets or not, with a zone or not), or an IPv4 address in any form `inet_aton`
/// takes: one to four parts, each decimal, octal (leading `0`) or hex (`0x`), the
/// last filling the remaining bytes (`169.254.43518`, `2852039166`,
/// `0xa9.0xfe.0xa9.0xfe`, `0251.0376.0251.0376`).
pub fn resolver_literal(host: &str) -> Option<IpAddr> {
    let bare = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    let without_zone = bare.split('%').next().unwrap_or(bare);
    if let Ok(v6) = without_zone.parse::<Ipv6Addr>() {
        return Some(IpAddr::V6(v6));
    }
    inet_aton(host).map(IpAddr::V4)
}

fn inet_aton(host: &str) -> Option<Ipv4Addr> {
    let parts: Vec<u32> = host.split('.').map(number).collect::<Option<Vec<u32>>>()?;
    let (last, leading) = parts.split_last()?;
    if leading.len() > 3 || leading.iter().any(|&p| p > 255) {
        return None;
    }
    let last_bits = 8 * (4 - leading.len() as u32);
    if last_bits < 32 && *last >> last_bits != 0 {
        return None;
    }
    let high = leading
        .iter()
        .enumerate()
        .fold(0u32, |acc, (i, &p)| acc | p << (24 - 8 * i as u32));
    Some(Ipv4Addr::from(high | last))
}

/// One part of an `inet_aton` address.
fn number(part: &str) -> Option<u32> {
    let lower = part.to_ascii_lowercase();
    if let Some(hex) = lower.strip_prefix("0x") {
        // `0x` alone is 0 to inet_aton.
        return if hex.is_empty() {
            Some(0)
        } else {
            u32::from_str_radix(hex, 16).ok()
        };
    }
    if lower.is_empty() || !lower.chars().all(|c| c.is_ascii_digit()) {
        return None;
    }
    match lower.strip_prefix('0') {
        Some(octal) if !octal.is_empty() => u32::from_str_radix(octal, 8).ok(),
        _ => lower.parse().ok(),
    }
}

/// The addresses `name` resolves to; none when it does not resolve in time.
/// `name`'s addresses, looked up once per [`RESOLVED_FOR`] however many ask.
async fn resolve(name: &str) -> Vec<IpAddr> {
    let lookup = {
        let mut resolved = RESOLVED.lock().unwrap_or_else(PoisonError::into_inner);
        resolved.retain(|_, (at, _)| at.elapsed() < RESOLVED_FOR);
        let entry = resolved.entry(name.to_owned());
        entry
            .or_insert_with(|| (Instant::now(), Lookup::default()))
            .1
            .clone()
    };
    lookup.get_or_init(|| look_up(name)).await.clone()
}

async fn look_up(name: &str) -> Vec<IpAddr> {
    match tokio::time::timeout(RESOLVE_TIMEOUT, tokio::net::lookup_host((name, 0))).await {
        Ok(Ok(addrs)) => addrs.map(|a| a.ip()).collect(),
        Ok(Err(_)) | Err(_) => Vec::new(),
    }
}

#[cfg(test)]
mod tests;
