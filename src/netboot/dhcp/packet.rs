//! Reading DHCPv4 requests. The options bmo acts on are read from the raw bytes
//! (hostname stays raw even when not UTF-8); dhcproto decodes the rest.

use std::net::Ipv4Addr;

use dhcproto::v4::{DhcpOption, Message, MessageType, Opcode};
use dhcproto::{Decodable, Decoder};

use crate::netboot::mac::MacAddr;

const MAGIC: [u8; 4] = [99, 130, 83, 99];
const HEADER: usize = 236;

/// Why a datagram was dropped.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DhcpParseError {
    #[error("shorter than a BOOTP header")]
    Short,
    #[error("no DHCP magic cookie")]
    NoMagic,
    #[error("option {0} runs past the end of the packet")]
    Truncated(u8),
    #[error("not a BOOTREQUEST")]
    NotRequest,
    #[error("hardware type/length is not Ethernet")]
    NotEthernet,
    #[error("no DHCP message type")]
    NoMessageType,
    #[error("malformed relay agent information (option 82)")]
    BadRelayAgentInfo,
    #[error("undecodable: {0}")]
    Decode(String),
}

/// Raw options in packet order, the same code repeated concatenated (RFC 3396).
pub fn raw_options(buf: &[u8]) -> Result<Vec<(u8, Vec<u8>)>, DhcpParseError> {
    if buf.len() < HEADER + 4 {
        return Err(DhcpParseError::Short);
    }
    if buf[HEADER..HEADER + 4] != MAGIC {
        return Err(DhcpParseError::NoMagic);
    }
    let mut out: Vec<(u8, Vec<u8>)> = Vec::new();
    let mut i = HEADER + 4;
    while i < buf.len() {
        let code = buf[i];
        match code {
            0 => i += 1,
            255 => break,
            _ => {
                let len = usize::from(*buf.get(i + 1).ok_or(DhcpParseError::Truncated(code))?);
                let value = buf
                    .get(i + 2..i + 2 + len)
                    .ok_or(DhcpParseError::Truncated(code))?;
                match out.iter_mut().find(|(c, _)| *c == code) {
                    Some((_, v)) => v.extend_from_slice(value),
                    None => out.push((code, value.to_vec())),
                }
                i += 2 + len;
            }
        }
    }
    Ok(out)
}

/// A client's request, with what bmo needs from it.
#[derive(Debug, Clone)]
pub struct ClientRequest {
    pub msg: Message,
    pub mac: MacAddr,
    pub msg_type: MessageType,
    pub hostname_raw: Option<Vec<u8>>,
    pub arch: Option<u16>,
    pub vendor_class: Option<Vec<u8>>,
    pub ipxe: bool,
    pub requested_ip: Option<Ipv4Addr>,
    pub server_id: Option<Ipv4Addr>,
    /// Option 82 as the relay sent it (echoed in the reply, RFC 3046).
    pub relay_agent_info: Option<Vec<u8>>,
    /// Option 82's link selection sub-option (5, RFC 3527): the client's subnet,
    /// when the relay's address (giaddr) is on another.
    pub link_selection: Option<Ipv4Addr>,
}

impl ClientRequest {
    fn vendor_class_starts(&self, prefix: &[u8]) -> bool {
        self.vendor_class
            .as_deref()
            .is_some_and(|v| v.starts_with(prefix))
    }

    /// A PXE firmware (option 60 `PXEClient…`).
    pub fn is_pxe(&self) -> bool {
        self.vendor_class_starts(b"PXEClient")
    }

    /// A UEFI HTTP boot client (option 60 `HTTPClient…`).
    pub fn is_http_client(&self) -> bool {
        self.vendor_class_starts(b"HTTPClient")
    }
}

/// Checks option 82's sub-options (code, length, value; each within the option)
/// and returns the link selection sub-option's address, if any. Garbage (a
/// sub-option running past the end, a link selection not 4 bytes long) is an error.
pub fn relay_link_selection(info: &[u8]) -> Result<Option<Ipv4Addr>, DhcpParseError> {
    let mut link = None;
    let mut i = 0;
    while i < info.len() {
        let code = info[i];
        let len = usize::from(*info.get(i + 1).ok_or(DhcpParseError::BadRelayAgentInfo)?);
        let value = info
            .get(i + 2..i + 2 + len)
            .ok_or(DhcpParseError::BadRelayAgentInfo)?;
        if code == 5 {
            let octets: [u8; 4] = value
                .try_into()
                .map_err(|_| DhcpParseError::BadRelayAgentInfo)?;
            link = Some(Ipv4Addr::from(octets));
        }
        i += 2 + len;
    }
    Ok(link)
}

/// Parses a request. Never panics, whatever the bytes.
pub fn parse_request(buf: &[u8]) -> Result<ClientRequest, DhcpParseError> {
    let raw = raw_options(buf)?;
    // Checked on the raw header first: dhcproto slices chaddr by hlen unchecked.
    if buf[0] != 1 {
        return Err(DhcpParseError::NotRequest);
    }
    if buf[1] != 1 || buf[2] != 6 {
        return Err(DhcpParseError::NotEthernet);
    }
    let get = |code: u8| raw.iter().find(|(c, _)| *c == code).map(|(_, v)| v.clone());
    // dhcproto decodes only the header and the few options bmo needs typed:
    // others are read raw above. It insists on UTF-8 for string options (a
    // non-UTF-8 hostname would make the packet undecodable) and some of its
    // option decoders assert on lengths, which random input trips.
    const TYPED: &[u8] = &[50, 53, 54];
    let mut clean = buf[..HEADER + 4].to_vec();
    for (code, value) in &raw {
        if !TYPED.contains(code) {
            continue;
        }
        for chunk in value.chunks(255) {
            clean.push(*code);
            clean.push(chunk.len() as u8);
            clean.extend_from_slice(chunk);
        }
    }
    clean.push(255);
    let msg = Message::decode(&mut Decoder::new(&clean))
        .map_err(|e| DhcpParseError::Decode(e.to_string()))?;
    if msg.opcode() != Opcode::BootRequest {
        return Err(DhcpParseError::NotRequest);
    }
    let mut mac = [0u8; 6];
    mac.copy_from_slice(&buf[28..34]);
    let msg_type = match msg.opts().get(dhcproto::v4::OptionCode::MessageType) {
        Some(DhcpOption::MessageType(t)) => *t,
        _ => return Err(DhcpParseError::NoMessageType),
    };
    let requested_ip = match msg.opts().get(dhcproto::v4::OptionCode::RequestedIpAddress) {
        Some(DhcpOption::RequestedIpAddress(ip)) => Some(*ip),
        _ => None,
    };
    let server_id = match msg.opts().get(dhcproto::v4::OptionCode::ServerIdentifier) {
        Some(DhcpOption::ServerIdentifier(ip)) => Some(*ip),
        _ => None,
    };
    let arch = get(93)
        .filter(|v| v.len() >= 2)
        .map(|v| u16::from_be_bytes([v[0], v[1]]));
    let relay_agent_info = get(82);
    let link_selection = match &relay_agent_info {
        Some(info) => relay_link_selection(info)?,
        None => None,
    };
    let user_class = get(77);
    let ipxe = get(175).is_some()
        || user_class
            .as_deref()
            .is_some_and(|u| u.windows(4).any(|w| w == b"iPXE"));
    Ok(ClientRequest {
        mac: MacAddr(mac),
        msg_type,
        hostname_raw: get(12).filter(|h| !h.is_empty()),
        arch,
        vendor_class: get(60),
        ipxe,
        requested_ip,
        server_id,
        relay_agent_info,
        link_selection,
        msg,
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use dhcproto::{Encodable, Encoder};

    /// A DISCOVER as firmware would send it, plus raw extra options.
    pub fn discover(mac: [u8; 6], extra: &[(u8, &[u8])]) -> Vec<u8> {
        let mut msg = Message::new_with_id(
            0x1234,
            Ipv4Addr::UNSPECIFIED,
            Ipv4Addr::UNSPECIFIED,
            Ipv4Addr::UNSPECIFIED,
            Ipv4Addr::UNSPECIFIED,
            &mac,
        );
        msg.opts_mut()
            .insert(DhcpOption::MessageType(MessageType::Discover));
        let mut buf = Vec::new();
        msg.encode(&mut Encoder::new(&mut buf)).unwrap();
        assert_eq!(buf.pop(), Some(255));
        for (code, v) in extra {
            buf.push(*code);
            buf.push(v.len() as u8);
            buf.extend_from_slice(v);
        }
        buf.push(255);
        buf
    }

    #[test]
    fn reads_raw_hostname_arch_and_ipxe() {
        let b = discover(
            [0x52, 0x54, 0, 1, 2, 3],
            &[
                (12, b"h\xffst"),
                (93, &[0, 7]),
                (60, b"PXEClient:Arch:00007:UNDI:003016"),
                (175, &[1, 1, 1]),
            ],
        );
        let r = parse_request(&b).unwrap();
        assert_eq!(r.mac.to_string(), "52:54:00:01:02:03");
        assert_eq!(r.msg_type, MessageType::Discover);
        assert_eq!(r.hostname_raw.as_deref(), Some(&b"h\xffst"[..]));
        assert_eq!(r.arch, Some(7));
        assert!(r.is_pxe() && r.ipxe && !r.is_http_client());
    }

    #[test]
    fn reads_option_82_link_selection_and_refuses_garbage() {
        let r = parse_request(&discover(
            [2; 6],
            &[(82, &[1, 2, b'e', b'0', 5, 4, 10, 88, 0, 0])],
        ))
        .unwrap();
        assert_eq!(r.link_selection, Some(Ipv4Addr::new(10, 88, 0, 0)));
        assert_eq!(r.relay_agent_info.as_ref().map(Vec::len), Some(10));
        let r = parse_request(&discover([2; 6], &[(82, &[1, 1, 7])])).unwrap();
        assert_eq!(r.link_selection, None);
        for bad in [
            &[5u8, 3, 10, 88, 0][..],
            &[1, 9, 1],
            &[1],
            &[5, 5, 1, 2, 3, 4, 5],
        ] {
            assert_eq!(
                parse_request(&discover([2; 6], &[(82, bad)])).unwrap_err(),
                DhcpParseError::BadRelayAgentInfo,
                "{bad:?}"
            );
        }
    }

    #[test]
    fn drops_malformed() {
        assert_eq!(parse_request(&[0; 10]).unwrap_err(), DhcpParseError::Short);
        let mut b = discover([1; 6], &[]);
        b[236] = 0;
        assert_eq!(parse_request(&b).unwrap_err(), DhcpParseError::NoMagic);
        let mut b = discover([1; 6], &[]);
        b.pop();
        b.extend_from_slice(&[12, 200, b'x']);
        assert_eq!(
            parse_request(&b).unwrap_err(),
            DhcpParseError::Truncated(12)
        );
    }
}
