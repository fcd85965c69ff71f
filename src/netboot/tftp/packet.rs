//! TFTP packets (RFC 1350) and options (RFC 2347 negotiation, 2348 blksize,
//! 2349 timeout/tsize, 7440 windowsize).

/// Error codes of RFC 1350 and RFC 2347.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u16)]
pub enum ErrorCode {
    NotDefined = 0,
    FileNotFound = 1,
    AccessViolation = 2,
    IllegalOperation = 4,
    UnknownTid = 5,
    OptionRefused = 8,
}

/// A parsed packet. Borrowed from the receive buffer.
#[derive(Debug, PartialEq, Eq)]
pub enum Packet<'a> {
    Read(Request),
    Write(Request),
    Data { block: u16, data: &'a [u8] },
    Ack { block: u16 },
    Error { code: u16, message: String },
    OptionAck,
}

/// A read or write request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub filename: String,
    pub mode: String,
    /// Options in the order the client sent them, names lower-cased.
    pub options: Vec<(String, String)>,
}

impl Request {
    /// The first option name the client sent more than once, if any. Such a request
    /// is refused: echoing both values would contradict itself and grow the answer.
    /// Linear in the number of options: a 64 KiB request holds some 16,000.
    pub fn duplicate_option(&self) -> Option<&str> {
        let mut seen = std::collections::HashSet::with_capacity(self.options.len());
        self.options
            .iter()
            .map(|(name, _)| name.as_str())
            .find(|name| !seen.insert(*name))
    }
}

/// Why a packet could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    #[error("packet shorter than 4 bytes")]
    Short,
    #[error("unknown opcode {0}")]
    Opcode(u16),
    #[error("string field not NUL-terminated")]
    Unterminated,
    #[error("option {0:?} has no value")]
    OptionWithoutValue(String),
}

fn split_strings(mut rest: &[u8]) -> Result<Vec<String>, ParseError> {
    let mut out = Vec::new();
    while !rest.is_empty() {
        let end = rest
            .iter()
            .position(|b| *b == 0)
            .ok_or(ParseError::Unterminated)?;
        out.push(String::from_utf8_lossy(&rest[..end]).into_owned());
        rest = &rest[end + 1..];
    }
    Ok(out)
}

/// Parses one datagram. Never panics on any input.
pub fn parse(buf: &[u8]) -> Result<Packet<'_>, ParseError> {
    if buf.len() < 2 {
        return Err(ParseError::Short);
    }
    let opcode = u16::from_be_bytes([buf[0], buf[1]]);
    let body = &buf[2..];
    match opcode {
        1 | 2 => {
            let strings = split_strings(body)?;
            let mut it = strings.into_iter();
            let filename = it.next().ok_or(ParseError::Short)?;
            let mode = it.next().ok_or(ParseError::Short)?.to_ascii_lowercase();
            let mut options = Vec::new();
            while let Some(name) = it.next() {
                let value = it
                    .next()
                    .ok_or_else(|| ParseError::OptionWithoutValue(name.clone()))?;
                options.push((name.to_ascii_lowercase(), value));
            }
            let req = Request {
                filename,
                mode,
                options,
            };
            Ok(if opcode == 1 {
                Packet::Read(req)
            } else {
                Packet::Write(req)
            })
        }
        3..=5 if body.len() < 2 => Err(ParseError::Short),
        3 => Ok(Packet::Data {
            block: u16::from_be_bytes([body[0], body[1]]),
            data: &body[2..],
        }),
        4 => Ok(Packet::Ack {
            block: u16::from_be_bytes([body[0], body[1]]),
        }),
        5 => {
            let code = u16::from_be_bytes([body[0], body[1]]);
            let message = split_strings(&body[2..])
                .ok()
                .and_then(|s| s.into_iter().next())
                .unwrap_or_default();
            Ok(Packet::Error { code, message })
        }
        6 => Ok(Packet::OptionAck),
        other => Err(ParseError::Opcode(other)),
    }
}

pub fn data(block: u16, payload: &[u8], out: &mut Vec<u8>) {
    out.clear();
    out.extend_from_slice(&3u16.to_be_bytes());
    out.extend_from_slice(&block.to_be_bytes());
    out.extend_from_slice(payload);
}

pub fn error(code: ErrorCode, message: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(5 + message.len());
    out.extend_from_slice(&5u16.to_be_bytes());
    out.extend_from_slice(&(code as u16).to_be_bytes());
    out.extend_from_slice(message.as_bytes());
    out.push(0);
    out
}

/// An ERROR packet no longer than `max_len` bytes: the message is cut to fit (the
/// messages are ASCII). `None` when not even an empty message fits.
pub fn error_within(code: ErrorCode, message: &str, max_len: usize) -> Option<Vec<u8>> {
    let room = max_len.checked_sub(5)?;
    let cut = message
        .char_indices()
        .map(|(i, c)| i + c.len_utf8())
        .take_while(|end| *end <= room)
        .last()
        .unwrap_or(0);
    Some(error(code, &message[..cut]))
}

pub fn oack(options: &[(String, String)]) -> Vec<u8> {
    let mut out = 6u16.to_be_bytes().to_vec();
    for (k, v) in options {
        out.extend_from_slice(k.as_bytes());
        out.push(0);
        out.extend_from_slice(v.as_bytes());
        out.push(0);
    }
    out
}

/// Transfer parameters after option negotiation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Negotiated {
    pub blksize: usize,
    pub windowsize: u16,
    pub timeout_secs: Option<u8>,
    /// Options to acknowledge, in the client's order.
    pub acked: Vec<(String, String)>,
}

/// Largest block we accept: keeps a window's buffer small and DATA under the
/// 65,507-byte UDP payload limit (RFC 2348 allows up to 65464).
pub const MAX_BLKSIZE: usize = 65464;
/// Largest window: bounds memory per transfer to `MAX_WINDOW * blksize`.
pub const MAX_WINDOW: u16 = 64;
/// Largest window in bytes (`windowsize * blksize`): what one transfer may hold to
/// answer retransmissions.
pub const MAX_WINDOW_BYTES: usize = 512 * 1024;

/// Largest retransmission timeout (RFC 2349) acknowledged, in seconds. Larger asks
/// are left out of the OACK, so a transfer without progress ends within
/// `(RETRIES + 1) * MAX_TIMEOUT_SECS` seconds.
pub const MAX_TIMEOUT_SECS: u8 = 4;

/// Applies RFC 2347/2348/2349/7440 options. Unknown or invalid options are
/// ignored (left out of the OACK), as RFC 2347 prescribes. `max_blksize` caps
/// blksize to what the path MTU allows when known.
pub fn negotiate(req: &Request, file_size: u64, max_blksize: usize) -> Negotiated {
    let mut n = Negotiated {
        blksize: 512,
        windowsize: 1,
        timeout_secs: None,
        acked: Vec::new(),
    };
    for (name, value) in &req.options {
        match name.as_str() {
            "blksize" => {
                if let Ok(v) = value.parse::<usize>()
                    && v >= 8
                {
                    n.blksize = v.min(max_blksize).min(MAX_BLKSIZE);
                    n.acked.push((name.clone(), n.blksize.to_string()));
                }
            }
            "tsize" => n.acked.push((name.clone(), file_size.to_string())),
            "timeout" => {
                if let Ok(v) = value.parse::<u8>()
                    && (1..=MAX_TIMEOUT_SECS).contains(&v)
                {
                    n.timeout_secs = Some(v);
                    n.acked.push((name.clone(), v.to_string()));
                }
            }
            "windowsize" => {
                if let Ok(v) = value.parse::<u16>()
                    && v >= 1
                {
                    n.windowsize = v.min(MAX_WINDOW);
                    n.acked.push((name.clone(), n.windowsize.to_string()));
                }
            }
            _ => {}
        }
    }
    let fits = (MAX_WINDOW_BYTES / n.blksize).clamp(1, usize::from(MAX_WINDOW));
    if usize::from(n.windowsize) > fits {
        n.windowsize = u16::try_from(fits).unwrap_or(1);
        for (name, value) in &mut n.acked {
            if name == "windowsize" {
                *value = n.windowsize.to_string();
            }
        }
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rrq(opts: &[(&str, &str)]) -> Vec<u8> {
        let mut b = vec![0, 1];
        b.extend_from_slice(b"undionly.kpxe\0octet\0");
        for (k, v) in opts {
            b.extend_from_slice(k.as_bytes());
            b.push(0);
            b.extend_from_slice(v.as_bytes());
            b.push(0);
        }
        b
    }

    #[test]
    fn parses_rrq_with_options() {
        let b = rrq(&[("BLKSIZE", "1468"), ("tsize", "0"), ("windowsize", "16")]);
        let Packet::Read(r) = parse(&b).unwrap() else {
            panic!()
        };
        assert_eq!(r.filename, "undionly.kpxe");
        assert_eq!(r.mode, "octet");
        let n = negotiate(&r, 12345, 1468);
        assert_eq!((n.blksize, n.windowsize), (1468, 16));
        // Large blocks get a smaller window: at most MAX_WINDOW_BYTES per transfer.
        let b = rrq(&[("blksize", "65464"), ("windowsize", "64")]);
        let Packet::Read(r) = parse(&b).unwrap() else {
            panic!()
        };
        let big = negotiate(&r, 1, MAX_BLKSIZE);
        assert_eq!((big.blksize, big.windowsize), (65464, 8));
        assert!(big.acked.contains(&("windowsize".into(), "8".into())));
        assert_eq!(n.acked[1], ("tsize".to_owned(), "12345".to_owned()));
    }

    #[test]
    fn invalid_options_are_left_out() {
        let b = rrq(&[
            ("blksize", "4"),
            ("timeout", "0"),
            ("windowsize", "x"),
            ("foo", "1"),
        ]);
        let Packet::Read(r) = parse(&b).unwrap() else {
            panic!()
        };
        let n = negotiate(&r, 1, MAX_BLKSIZE);
        assert_eq!((n.blksize, n.windowsize, n.acked.len()), (512, 1, 0));
    }

    #[test]
    fn duplicate_options_are_found_whatever_their_case() {
        let b = rrq(&[("tsize", "0"), ("blksize", "1468"), ("TSIZE", "0")]);
        let Packet::Read(r) = parse(&b).unwrap() else {
            panic!()
        };
        assert_eq!(r.duplicate_option(), Some("tsize"));
        let b = rrq(&[("tsize", "0"), ("blksize", "1468")]);
        let Packet::Read(r) = parse(&b).unwrap() else {
            panic!()
        };
        assert_eq!(r.duplicate_option(), None);
    }

    #[test]
    fn a_request_full_of_distinct_options_is_checked_at_once() {
        // A datagram of 10,000 short options, all different, the repeat at the very end.
        // Comparing each with every earlier one held a runtime thread for a second;
        // one pass takes milliseconds.
        let names: Vec<String> = (0..10_000u32).map(|n| format!("{n:x}")).collect();
        let mut options: Vec<(&str, &str)> = names.iter().map(|n| (n.as_str(), "")).collect();
        options.push((names[0].as_str(), ""));
        let b = rrq(&options);
        assert!(b.len() < 65_507, "{} bytes", b.len());
        let Packet::Read(r) = parse(&b).unwrap() else {
            panic!()
        };
        let started = std::time::Instant::now();
        assert_eq!(r.duplicate_option(), Some(names[0].as_str()));
        let took = started.elapsed();
        assert!(took < std::time::Duration::from_millis(300), "{took:?}");
    }

    #[test]
    fn long_timeouts_are_left_out() {
        let b = rrq(&[("timeout", "255"), ("blksize", "512")]);
        let Packet::Read(r) = parse(&b).unwrap() else {
            panic!()
        };
        let n = negotiate(&r, 1, MAX_BLKSIZE);
        assert_eq!(n.timeout_secs, None);
        assert_eq!(n.acked, vec![("blksize".to_owned(), "512".to_owned())]);
    }

    #[test]
    fn errors_are_cut_to_fit() {
        let e = error_within(ErrorCode::NotDefined, "server busy", 10).unwrap();
        assert_eq!(e, b"\0\x05\0\0serve\0");
        assert_eq!(error_within(ErrorCode::NotDefined, "x", 4), None);
        assert_eq!(
            error_within(ErrorCode::NotDefined, "ok", 100).unwrap(),
            error(ErrorCode::NotDefined, "ok")
        );
    }

    #[test]
    fn rejects_malformed() {
        assert_eq!(parse(&[0]), Err(ParseError::Short));
        assert_eq!(parse(&[0, 9, 0, 0]), Err(ParseError::Opcode(9)));
        assert_eq!(parse(&[0, 1, b'a']), Err(ParseError::Unterminated));
        assert_eq!(parse(&[0, 4, 1]), Err(ParseError::Short));
        assert_eq!(parse(&[0, 4, 1, 2]), Ok(Packet::Ack { block: 0x0102 }));
    }
}
