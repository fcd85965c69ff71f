//! Reading DHCPv6 client messages (RFC 8415). Options are first walked raw, with
//! every length checked; dhcproto then decodes the header and the options bmo
//! needs typed, from a copy holding only those (some of its option decoders
//! subtract from lengths unchecked, which random input trips). IA_NA, the vendor
//! class and the FQDN are read from the raw bytes.

use std::net::Ipv6Addr;

use dhcproto::v6::{DhcpOption, Message, MessageType, OptionCode};
use dhcproto::{Decodable, Decoder};

use crate::netboot::leases::MAX_DUID_LEN;

/// Why a datagram was dropped.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Dhcp6ParseError {
    #[error("shorter than a DHCPv6 header")]
    Short,
    #[error("message type {0} is not one a client sends to a server")]
    NotClientMessage(u8),
    #[error("option {0} runs past the end of the message")]
    Truncated(u16),
    #[error("option {0} has a bad length")]
    BadLength(u16),
    #[error("no client identifier (DUID)")]
    NoClientId,
    #[error("a relay message without the relayed message (option 9)")]
    NoRelayMessage,
    #[error("relayed through more relays than the hop limit")]
    TooManyRelays,
    #[error("undecodable: {0}")]
    Decode(String),
}

/// Options dhcproto decodes for bmo, with the lengths its decoders accept.
fn typed_ok(code: u16, len: usize) -> bool {
    match code {
        1 => (2..=MAX_DUID_LEN).contains(&len),
        2 => (2..=MAX_DUID_LEN).contains(&len),
        6 | 61 => len.is_multiple_of(2),
        8 => len == 2,
        14 => len == 0,
        15 => true,
        _ => false,
    }
}

/// Top-level options in message order: (code, value). Errors on a truncated one.
pub fn raw_options(body: &[u8]) -> Result<Vec<(u16, &[u8])>, Dhcp6ParseError> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < body.len() {
        let head = body.get(i..i + 4).ok_or(Dhcp6ParseError::Truncated(0))?;
        let code = u16::from_be_bytes([head[0], head[1]]);
        let len = usize::from(u16::from_be_bytes([head[2], head[3]]));
        let value = body
            .get(i + 4..i + 4 + len)
            .ok_or(Dhcp6ParseError::Truncated(code))?;
        out.push((code, value));
        i += 4 + len;
    }
    Ok(out)
}

/// The first IA_NA of a request: its IAID and the addresses the client named.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IaNa {
    pub iaid: u32,
    pub addrs: Vec<Ipv6Addr>,
}

fn read_ia_na(value: &[u8]) -> Result<IaNa, Dhcp6ParseError> {
    if value.len() < 12 {
        return Err(Dhcp6ParseError::BadLength(3));
    }
    let iaid = u32::from_be_bytes([value[0], value[1], value[2], value[3]]);
    let addrs = raw_options(&value[12..])?
        .into_iter()
        .filter(|(c, v)| *c == 5 && v.len() >= 24)
        .filter_map(|(_, v)| <[u8; 16]>::try_from(&v[..16]).ok())
        .map(Ipv6Addr::from)
        .take(8)
        .collect();
    Ok(IaNa { iaid, addrs })
}

/// Option 39 (RFC 4704): flags, then a domain name in DNS wire form, possibly
/// partial. Returns the dotted name; `None` when it is malformed or empty.
fn read_fqdn(value: &[u8]) -> Option<Vec<u8>> {
    let mut name: Vec<u8> = Vec::new();
    let mut i = 1;
    while let Some(&len) = value.get(i) {
        if len == 0 {
            break;
        }
        let label = value.get(i + 1..i + 1 + usize::from(len))?;
        if !name.is_empty() {
            name.push(b'.');
        }
        name.extend_from_slice(label);
        i += 1 + usize::from(len);
    }
    (!name.is_empty()).then_some(name)
}

/// Option 16: enterprise number, then length-prefixed data; the first datum.
fn read_vendor_class(value: &[u8]) -> Option<Vec<u8>> {
    let len = usize::from(u16::from_be_bytes([*value.get(4)?, *value.get(5)?]));
    value.get(6..6 + len).map(<[u8]>::to_vec)
}

/// A client's message, with what bmo needs from it.
#[derive(Debug, Clone)]
pub struct ClientRequest6 {
    pub msg: Message,
    pub msg_type: MessageType,
    /// Option 1; empty only in an INFORMATION-REQUEST that sent none.
    pub duid: Vec<u8>,
    pub server_id: Option<Vec<u8>>,
    pub ia_na: Option<IaNa>,
    pub oro: Vec<u16>,
    /// Option 61, the first architecture type.
    pub arch: Option<u16>,
    /// Option 16's first datum, e.g. `PXEClient:Arch:00007:UNDI:003016`.
    pub vendor_class: Option<Vec<u8>>,
    /// User class (option 15) `iPXE`.
    pub ipxe: bool,
    /// Option 39's name, dotted (not yet checked as a host name).
    pub fqdn: Option<Vec<u8>>,
    pub rapid_commit: bool,
}

impl ClientRequest6 {
    pub fn is_pxe(&self) -> bool {
        self.vendor_class
            .as_deref()
            .is_some_and(|v| v.starts_with(b"PXEClient"))
    }

    pub fn is_http_client(&self) -> bool {
        self.vendor_class
            .as_deref()
            .is_some_and(|v| v.starts_with(b"HTTPClient"))
    }
}

/// Parses a client message (not relayed). Never panics, whatever the bytes.
pub fn parse_request6(buf: &[u8]) -> Result<ClientRequest6, Dhcp6ParseError> {
    let (&kind, _) = buf.split_first().ok_or(Dhcp6ParseError::Short)?;
    if buf.len() < 4 {
        return Err(Dhcp6ParseError::Short);
    }
    // SOLICIT, REQUEST, CONFIRM, RENEW, REBIND, RELEASE, DECLINE, INFORMATION-REQUEST.
    if !matches!(kind, 1 | 3 | 4 | 5 | 6 | 8 | 9 | 11) {
        return Err(Dhcp6ParseError::NotClientMessage(kind));
    }
    let raw = raw_options(&buf[4..])?;
    let first = |code: u16| raw.iter().find(|(c, _)| *c == code).map(|(_, v)| *v);
    let mut clean = buf[..4].to_vec();
    for (code, value) in &raw {
        if !typed_ok(*code, value.len()) {
            if matches!(code, 1 | 2 | 8 | 14) {
                return Err(Dhcp6ParseError::BadLength(*code));
            }
            continue;
        }
        clean.extend_from_slice(&code.to_be_bytes());
        clean.extend_from_slice(&(value.len() as u16).to_be_bytes());
        clean.extend_from_slice(value);
    }
    let msg = Message::decode(&mut Decoder::new(&clean))
        .map_err(|e| Dhcp6ParseError::Decode(e.to_string()))?;
    let opts = msg.opts();
    let duid = match opts.get(OptionCode::ClientId) {
        Some(DhcpOption::ClientId(d)) => d.clone(),
        _ if kind == 11 => Vec::new(),
        _ => return Err(Dhcp6ParseError::NoClientId),
    };
    let server_id = match opts.get(OptionCode::ServerId) {
        Some(DhcpOption::ServerId(d)) => Some(d.clone()),
        _ => None,
    };
    let oro = match opts.get(OptionCode::ORO) {
        Some(DhcpOption::ORO(o)) => o.opts.iter().map(|c| u16::from(*c)).collect(),
        _ => Vec::new(),
    };
    let arch = match opts.get(OptionCode::ClientArchType) {
        Some(DhcpOption::ClientArchType(a)) => a.first().map(|a| a.0),
        _ => None,
    };
    let ipxe = match opts.get(OptionCode::UserClass) {
        Some(DhcpOption::UserClass(u)) => u.data.iter().any(|d| d.as_slice() == b"iPXE"),
        _ => false,
    };
    Ok(ClientRequest6 {
        msg_type: msg.msg_type(),
        duid,
        server_id,
        ia_na: first(3).map(read_ia_na).transpose()?,
        oro,
        arch,
        vendor_class: first(16).and_then(read_vendor_class),
        ipxe,
        fqdn: first(39).and_then(read_fqdn),
        rapid_commit: first(14).is_some(),
        msg,
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A client message of `kind` with DUID `duid` and raw extra options.
    pub fn message6(kind: u8, duid: &[u8], extra: &[(u16, &[u8])]) -> Vec<u8> {
        let mut b = vec![kind, 0x12, 0x34, 0x56];
        let mut push = |code: u16, v: &[u8]| {
            b.extend_from_slice(&code.to_be_bytes());
            b.extend_from_slice(&(v.len() as u16).to_be_bytes());
            b.extend_from_slice(v);
        };
        push(1, duid);
        for (c, v) in extra {
            push(*c, v);
        }
        b
    }

    /// An IA_NA option value with IAID `iaid` naming `addrs`.
    pub fn ia_na(iaid: u32, addrs: &[Ipv6Addr]) -> Vec<u8> {
        let mut v = iaid.to_be_bytes().to_vec();
        v.extend_from_slice(&[0; 8]);
        for a in addrs {
            v.extend_from_slice(&[0, 5, 0, 24]);
            v.extend_from_slice(&a.octets());
            v.extend_from_slice(&[0; 8]);
        }
        v
    }

    #[test]
    fn reads_what_ovmf_and_ipxe_send() {
        let mut vendor = 343u32.to_be_bytes().to_vec();
        let class = b"PXEClient:Arch:00007:UNDI:003016";
        vendor.extend_from_slice(&(class.len() as u16).to_be_bytes());
        vendor.extend_from_slice(class);
        let addr: Ipv6Addr = "fd00::20".parse().unwrap();
        let b = message6(
            1,
            &[0, 1, 0, 1, 1, 2, 3, 4, 0x52, 0x54, 0, 1, 2, 3],
            &[
                (3, &ia_na(7, &[addr])),
                (6, &[0, 59, 0, 60, 0, 23, 0, 16]),
                (16, &vendor),
                (61, &[0, 7]),
                (15, &[0, 4, b'i', b'P', b'X', b'E']),
                (39, b"\x01\x06node-1\x07example\x00"),
            ],
        );
        let r = parse_request6(&b).unwrap();
        assert_eq!(r.msg_type, MessageType::Solicit);
        assert_eq!(r.duid.len(), 14);
        assert_eq!(
            r.ia_na,
            Some(IaNa {
                iaid: 7,
                addrs: vec![addr]
            })
        );
        assert_eq!(r.oro, vec![59, 60, 23, 16]);
        assert_eq!(r.arch, Some(7));
        assert!(r.is_pxe() && r.ipxe && !r.is_http_client());
        assert_eq!(r.fqdn.as_deref(), Some(&b"node-1.example"[..]));
    }

    #[test]
    fn drops_malformed() {
        assert_eq!(parse_request6(&[1, 0]).unwrap_err(), Dhcp6ParseError::Short);
        assert_eq!(
            parse_request6(&message6(2, b"dd", &[])).unwrap_err(),
            Dhcp6ParseError::NotClientMessage(2)
        );
        let mut b = message6(1, b"duid", &[]);
        b.extend_from_slice(&[0, 39, 0, 9, 1]);
        assert_eq!(
            parse_request6(&b).unwrap_err(),
            Dhcp6ParseError::Truncated(39)
        );
        assert_eq!(
            parse_request6(&message6(1, b"duid", &[(8, &[1])])).unwrap_err(),
            Dhcp6ParseError::BadLength(8)
        );
        let no_duid = [1u8, 0, 0, 1];
        assert_eq!(
            parse_request6(&no_duid).unwrap_err(),
            Dhcp6ParseError::NoClientId
        );
        // Bad lengths in options dhcproto would trip on are skipped, not decoded.
        let r = parse_request6(&message6(1, b"duid", &[(13, &[0]), (16, &[0, 0])])).unwrap();
        assert_eq!(r.vendor_class, None);
    }
}
