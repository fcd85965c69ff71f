//! The address grammar: `scheme://host[:port][/path][?query]`, the opaque form
//! `scheme:host[:port]`, and bare `host`, `host:port`, `[v6]:port` (meaning ipmi).

use std::net::{Ipv4Addr, Ipv6Addr};

use super::{BmcAddress, BmcHost, BmcType, SCHEMES};

/// Why an address was refused. Each message names the address, what is wrong and
/// what would be accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BmcAddressError {
    #[error(
        "the BMC address is empty; write e.g. redfish://10.0.0.5/redfish/v1/Systems/1 or ipmi://10.0.0.5"
    )]
    Empty,
    #[error(
        "unknown BMC type '{scheme}' in address {address}; accepted: {}",
        SCHEMES.join(", ")
    )]
    UnknownScheme { scheme: String, address: String },
    #[error("BMC address {address} has no host; write it as {scheme}://HOST[:PORT]")]
    MissingHost { scheme: String, address: String },
    #[error(
        "BMC address {address} has an invalid host '{host}'; use an IPv4 address, an IPv6 address in brackets, or a DNS name"
    )]
    BadHost { host: String, address: String },
    #[error(
        "BMC address {address} has an invalid port '{port}'; the port must be a number from 1 to 65535"
    )]
    BadPort { port: String, address: String },
    #[error(
        "BMC address {address} contains a user name or password; remove it and put the credentials in the secret named by credentialsName"
    )]
    CredentialsInAddress { address: String },
    #[error(
        "BMC address {address} has percent-encoding in its host (shown as ***: it may hold an encoded user name or password); write the host plainly and put credentials in the secret named by credentialsName"
    )]
    EncodedHost { address: String },
    #[error(
        "BMC address {address} is a bracketed IPv6 address without a scheme or port; write ipmi://{address} or {address}:623"
    )]
    BracketedIpv6WithoutPort { address: String },
    #[error("BMC address {address} contains whitespace or control characters; remove them")]
    BadCharacters { address: String },
    #[error(
        "'{mac}' is not a MAC address; write six hex pairs separated by colons, e.g. 52:54:00:12:34:56"
    )]
    BadMac { mac: String },
}

pub(super) fn parse(address: &str) -> Result<BmcAddress, BmcAddressError> {
    // Error messages repeat the address; never with a password in it. Redacting
    // before any other check keeps every message below safe.
    let (redacted, found) = redact(address);
    let trimmed = redacted.trim();
    if trimmed.is_empty() {
        return Err(BmcAddressError::Empty);
    }
    if trimmed.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(BmcAddressError::BadCharacters {
            address: redacted.clone(),
        });
    }
    match found {
        Redacted::Userinfo => {
            return Err(BmcAddressError::CredentialsInAddress {
                address: trimmed.to_owned(),
            });
        }
        Redacted::EncodedAuthority => {
            return Err(BmcAddressError::EncodedHost {
                address: trimmed.to_owned(),
            });
        }
        Redacted::Nothing => {}
    }
    let (scheme, rest) = split_scheme(trimmed);
    let scheme_name = scheme.unwrap_or("ipmi");
    let (kind, transport) =
        BmcType::from_scheme(scheme_name).ok_or_else(|| BmcAddressError::UnknownScheme {
            scheme: scheme_name.to_owned(),
            address: trimmed.to_owned(),
        })?;

    // authority [/path] [?query] [#fragment]; the fragment has no meaning and is dropped.
    let rest = rest.split('#').next().unwrap_or_default();
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    let (path, query) = match tail.split_once('?') {
        Some((p, q)) => (p, q),
        None => (tail, ""),
    };
    let missing_host = || BmcAddressError::MissingHost {
        scheme: scheme_name.to_owned(),
        address: trimmed.to_owned(),
    };
    if authority.is_empty() {
        return Err(missing_host());
    }
    let (host_text, port_text) = split_host_port(authority, scheme.is_none(), trimmed)?;
    if host_text.is_empty() {
        return Err(missing_host());
    }
    let bracketed = authority.starts_with('[');
    // Upstream reads a bare `[v6]` as an incomplete `host:port` and refuses it.
    if bracketed && scheme.is_none() && port_text.is_none() {
        return Err(BmcAddressError::BracketedIpv6WithoutPort {
            address: trimmed.to_owned(),
        });
    }
    let host = parse_host(host_text, bracketed, trimmed)?;
    let port = port_text.map(|p| parse_port(p, trimmed)).transpose()?;
    let query = query
        .split('&')
        .filter(|kv| !kv.is_empty())
        .map(|kv| match kv.split_once('=') {
            Some((k, v)) => (k.to_owned(), v.to_owned()),
            None => (kv.to_owned(), String::new()),
        })
        .collect();
    Ok(BmcAddress {
        original: trimmed.to_owned(),
        kind,
        transport,
        host,
        port,
        path: path.to_owned(),
        query,
    })
}

/// What [`redact`] hid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Redacted {
    Nothing,
    /// A user name or password: up to an `@` or an encoded one (`%40`).
    Userinfo,
    /// A host part holding percent-encoding, which may be an encoded `user:password`.
    EncodedAuthority,
}

/// The address with everything between its scheme (`scheme://`, when there is one)
/// and its last `@` (or `%40`, an encoded `@`) replaced by `***`; without either,
/// a host part (up to the first `/`, `?` or `#`) that holds a `%` is replaced whole,
/// since `admin%3Apass` may be a user and password too.
///
/// Deliberately coarser than a URL parser: a password may hold `/`, `?`, `#`, `:` or
/// whitespace (`redfish://admin:pa/Secret@host`), so the userinfo is taken to run up
/// to the last `@` anywhere in the text. An address with neither an `@` nor a `%`
/// comes back unchanged.
pub fn redact_userinfo(address: &str) -> String {
    redact(address).0
}

fn redact(address: &str) -> (String, Redacted) {
    let start = address.trim_start();
    let leading = address.len() - start.len();
    let scheme_end = start
        .find("://")
        .filter(|&i| i > 0 && is_scheme(&start[..i]))
        .map(|i| leading + i + 3);
    let at = [address.rfind('@'), address.rfind("%40")]
        .into_iter()
        .flatten()
        .max();
    if let Some(at) = at {
        // Keep `scheme://` only when it really is a scheme before the userinfo, so a
        // password holding `://` in a scheme-less address is not kept as a "scheme".
        let keep = scheme_end.filter(|&end| end <= at).unwrap_or(leading);
        let redacted = format!("{}***{}", &address[..keep], &address[at..]);
        return (redacted, Redacted::Userinfo);
    }
    let keep = scheme_end.unwrap_or(leading);
    let authority_len = address[keep..]
        .find(['/', '?', '#'])
        .unwrap_or(address.len() - keep);
    if address[keep..keep + authority_len].contains('%') {
        let redacted = format!(
            "{}***{}",
            &address[..keep],
            &address[keep + authority_len..]
        );
        return (redacted, Redacted::EncodedAuthority);
    }
    (address.to_owned(), Redacted::Nothing)
}

/// RFC 3986 scheme: a letter, then letters, digits, `+`, `-`, `.`.
fn is_scheme(text: &str) -> bool {
    let mut chars = text.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
}

/// `(scheme, rest)`. `scheme://rest` and `scheme:rest` (when `scheme` is a known BMC
/// scheme) have one; anything else is a bare `host[:port]`.
fn split_scheme(address: &str) -> (Option<&str>, &str) {
    if let Some((scheme, rest)) = address.split_once("://") {
        return (Some(scheme), rest);
    }
    if let Some((scheme, rest)) = address.split_once(':')
        && BmcType::from_scheme(scheme).is_some()
    {
        return (Some(scheme), rest);
    }
    (None, address)
}

fn split_host_port<'a>(
    authority: &'a str,
    bare: bool,
    address: &str,
) -> Result<(&'a str, Option<&'a str>), BmcAddressError> {
    if let Some(inner) = authority.strip_prefix('[') {
        let Some((host, after)) = inner.split_once(']') else {
            return Err(BmcAddressError::BadHost {
                host: authority.to_owned(),
                address: address.to_owned(),
            });
        };
        return match after {
            "" => Ok((host, None)),
            _ => match after.strip_prefix(':') {
                Some(port) => Ok((host, Some(port))),
                None => Err(BmcAddressError::BadHost {
                    host: authority.to_owned(),
                    address: address.to_owned(),
                }),
            },
        };
    }
    // A bare address may be an unbracketed IPv6 literal (without a port); inside a
    // URL the brackets are required, else `fd00::1:443` would be ambiguous.
    if authority.matches(':').count() > 1 {
        return if bare && authority.parse::<Ipv6Addr>().is_ok() {
            Ok((authority, None))
        } else {
            Err(BmcAddressError::BadHost {
                host: authority.to_owned(),
                address: address.to_owned(),
            })
        };
    }
    Ok(match authority.split_once(':') {
        Some((host, port)) => (host, Some(port)),
        None => (authority, None),
    })
}

fn parse_host(host: &str, bracketed: bool, address: &str) -> Result<BmcHost, BmcAddressError> {
    let bad = || BmcAddressError::BadHost {
        host: host.to_owned(),
        address: address.to_owned(),
    };
    if bracketed || host.contains(':') {
        return host
            .parse::<Ipv6Addr>()
            .map(BmcHost::Ipv6)
            .map_err(|_| bad());
    }
    if let Ok(ip) = host.parse::<Ipv4Addr>() {
        return Ok(BmcHost::Ipv4(ip));
    }
    // Something that looks like a dotted quad but did not parse is a typo, not a name.
    if host
        .split('.')
        .all(|l| l.chars().all(|c| c.is_ascii_digit()))
    {
        return Err(bad());
    }
    if is_dns_name(host) {
        Ok(BmcHost::Name(host.to_owned()))
    } else {
        Err(bad())
    }
}

/// RFC 1123 host name: dot-separated labels of 1–63 letters, digits and inner hyphens.
fn is_dns_name(host: &str) -> bool {
    host.len() <= 253
        && host.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

fn parse_port(port: &str, address: &str) -> Result<u16, BmcAddressError> {
    let bad = || BmcAddressError::BadPort {
        port: port.to_owned(),
        address: address.to_owned(),
    };
    if port.is_empty() || !port.chars().all(|c| c.is_ascii_digit()) {
        return Err(bad());
    }
    match port.parse::<u16>() {
        Ok(0) | Err(_) => Err(bad()),
        Ok(p) => Ok(p),
    }
}

impl BmcAddress {
    /// Parses and validates an address.
    pub fn parse(address: &str) -> Result<Self, BmcAddressError> {
        parse(address)
    }
}

/// Parses a MAC address written as six colon- or dash-separated hex pairs and returns
/// it in Ironic's form (lower case, colons).
pub fn parse_mac(mac: &str) -> Result<String, BmcAddressError> {
    let parts: Vec<&str> = mac.split([':', '-']).collect();
    let valid = parts.len() == 6
        && parts
            .iter()
            .all(|p| p.len() == 2 && p.chars().all(|c| c.is_ascii_hexdigit()));
    if !valid {
        return Err(BmcAddressError::BadMac {
            mac: mac.to_owned(),
        });
    }
    Ok(parts.join(":").to_ascii_lowercase())
}
