//! Host names as DHCP clients send them (option 12). Only valid host names are kept:
//! anything else (control characters, escape sequences, spaces, bidi overrides,
//! oversized names) is dropped before it reaches the lease table or a host's status.

/// The longest host name kept, in bytes.
pub const MAX_LEN: usize = 253;
/// The longest label (the parts between dots), in bytes.
pub const MAX_LABEL: usize = 63;

/// Whether `name` is a host name: labels of 1 to 63 letters, digits and hyphens (not
/// first or last), joined by dots, at most 253 bytes in all. The CRD's
/// `dhcpHostname` pattern (`crate::api::hardware::DHCP_HOSTNAME_PATTERN`) says the same.
pub fn is_valid(name: &[u8]) -> bool {
    !name.is_empty() && name.len() <= MAX_LEN && name.split(|b| *b == b'.').all(is_label)
}

fn is_label(label: &[u8]) -> bool {
    (1..=MAX_LABEL).contains(&label.len())
        && label
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || *b == b'-')
        && label.first() != Some(&b'-')
        && label.last() != Some(&b'-')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cases() -> Vec<(Vec<u8>, bool)> {
        let label = "a".repeat(63);
        let long = [label.as_str(); 4].join(".");
        vec![
            (b"worker-1".to_vec(), true),
            (b"node1.example.com".to_vec(), true),
            (b"1node".to_vec(), true),
            (label.clone().into_bytes(), true),
            (long.as_bytes()[..253].to_vec(), true),
            (long.as_bytes()[..254].to_vec(), false),
            (format!("{label}a").into_bytes(), false),
            (b"".to_vec(), false),
            (b"node\n1".to_vec(), false),
            (b"\x1b[31mred".to_vec(), false),
            (b"bell\x07".to_vec(), false),
            (b"nul\0".to_vec(), false),
            ("evil\u{202e}gpj".as_bytes().to_vec(), false),
            (b"node\xff1".to_vec(), false),
            (b"my host".to_vec(), false),
            (b"my_host".to_vec(), false),
            (b"-node".to_vec(), false),
            (b"node-".to_vec(), false),
            (b"a..b".to_vec(), false),
            (b".a".to_vec(), false),
            (b"a.".to_vec(), false),
            (vec![b'a'; 1200], false),
        ]
    }

    #[test]
    fn only_host_names_are_valid() {
        for (name, valid) in cases() {
            assert_eq!(
                is_valid(&name),
                valid,
                "{:?}",
                String::from_utf8_lossy(&name)
            );
        }
    }

    #[test]
    fn the_crd_pattern_and_max_length_agree() {
        let pattern = regex::Regex::new(crate::api::hardware::DHCP_HOSTNAME_PATTERN).unwrap();
        for (name, valid) in cases() {
            let Ok(text) = std::str::from_utf8(&name) else {
                continue;
            };
            let by_schema = pattern.is_match(text) && text.len() <= MAX_LEN;
            assert_eq!(by_schema, valid, "{text:?}");
        }
    }
}
