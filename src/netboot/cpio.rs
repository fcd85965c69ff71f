//! A writer of "newc" cpio archives (the format the Linux kernel unpacks as an
//! initramfs), just enough to add a few small files to a ramdisk.
//!
//! The kernel unpacks an initramfs made of several archives in a row, each
//! compressed or not, and skips zero bytes between them; an uncompressed archive must
//! start at an offset that is a multiple of 4 ([`padding_after`]). No crate was
//! taken: the format is a fixed ASCII header per entry, and the maintained crates
//! (`cpio`) read more than they write.

/// The magic of the "newc" format (no checksums).
const MAGIC: &[u8] = b"070701";
/// Mode of a regular file (`S_IFREG | 0644`).
const FILE_MODE: u32 = 0o100_644;
/// Mode of a directory (`S_IFDIR | 0755`).
const DIR_MODE: u32 = 0o040_755;

/// One file of an archive: its path inside the root (no leading slash) and content.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub path: String,
    pub data: Vec<u8>,
}

/// A newc archive of `files`, each preceded by the directories it lies in (once
/// each), ending with the `TRAILER!!!` entry. Files are owned by root; their mtime
/// is 0, so that the same files give the same bytes.
pub fn archive(files: &[Entry]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut dirs: Vec<String> = Vec::new();
    let mut inode = 1u32;
    for file in files {
        let parts: Vec<&str> = file.path.split('/').filter(|p| !p.is_empty()).collect();
        let Some((_, parents)) = parts.split_last() else {
            continue;
        };
        for depth in 1..=parents.len() {
            let dir = parents[..depth].join("/");
            if !dirs.contains(&dir) {
                push_entry(&mut out, inode, DIR_MODE, 2, &dir, &[]);
                inode += 1;
                dirs.push(dir);
            }
        }
        push_entry(&mut out, inode, FILE_MODE, 1, &parts.join("/"), &file.data);
        inode += 1;
    }
    push_entry(&mut out, 0, 0, 1, "TRAILER!!!", &[]);
    out
}

/// Zero bytes to put after `len` bytes of another archive so that the next archive
/// starts where the kernel looks for one.
pub fn padding_after(len: u64) -> u64 {
    (4 - len % 4) % 4
}

fn push_entry(out: &mut Vec<u8>, inode: u32, mode: u32, links: u32, name: &str, data: &[u8]) {
    out.extend_from_slice(MAGIC);
    let name_size = name.len() + 1;
    let fields = [
        inode,
        mode,
        0, // uid
        0, // gid
        links,
        0, // mtime
        u32::try_from(data.len()).unwrap_or(u32::MAX),
        0, // devmajor
        0, // devminor
        0, // rdevmajor
        0, // rdevminor
        u32::try_from(name_size).unwrap_or(u32::MAX),
        0, // check
    ];
    for field in fields {
        out.extend_from_slice(format!("{field:08x}").as_bytes());
    }
    out.extend_from_slice(name.as_bytes());
    out.push(0);
    pad4(out);
    out.extend_from_slice(data);
    pad4(out);
}

fn pad4(out: &mut Vec<u8>) {
    while !out.len().is_multiple_of(4) {
        out.push(0);
    }
}

/// The files of a newc archive (directories left out), for tests and checks; `None`
/// when `bytes` is not a well-formed archive.
pub fn files(bytes: &[u8]) -> Option<Vec<Entry>> {
    let mut files = Vec::new();
    let mut at = 0usize;
    loop {
        let header = bytes.get(at..at + 110)?;
        if &header[..6] != MAGIC {
            return None;
        }
        let field = |i: usize| {
            let hex = std::str::from_utf8(&header[6 + i * 8..14 + i * 8]).ok()?;
            usize::from_str_radix(hex, 16).ok()
        };
        let (mode, size, name_size) = (field(1)?, field(6)?, field(11)?);
        let name_start = at + 110;
        let name = bytes.get(name_start..name_start + name_size.checked_sub(1)?)?;
        let name = std::str::from_utf8(name).ok()?.to_owned();
        let data_start = (name_start + name_size).next_multiple_of(4);
        let data = bytes.get(data_start..data_start + size)?.to_vec();
        at = (data_start + size).next_multiple_of(4);
        if name == "TRAILER!!!" {
            return Some(files);
        }
        if mode as u32 & 0o170_000 == 0o100_000 {
            files.push(Entry { path: name, data });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_archive_reads_back_with_its_directories_made_once() {
        let entries = vec![
            Entry {
                path: "mnt/config/openstack/latest/network_data.json".into(),
                data: b"{\"links\":[]}".to_vec(),
            },
            Entry {
                path: "mnt/config/x".into(),
                data: b"12345".to_vec(),
            },
        ];
        let bytes = archive(&entries);
        assert_eq!(bytes.len() % 4, 0);
        assert_eq!(files(&bytes), Some(entries));
        let text = String::from_utf8_lossy(&bytes);
        assert_eq!(text.matches("mnt/config\0").count(), 1);
        assert!(text.contains("mnt/config/openstack/latest\0"));
        assert_eq!(archive(&[]), archive(&[]));
        assert_eq!(files(&archive(&[])), Some(vec![]));
    }

    #[test]
    fn headers_are_newc() {
        let bytes = archive(&[Entry {
            path: "a".into(),
            data: b"xyz".to_vec(),
        }]);
        // Header, "a\0" padded to 4, "xyz" padded to 4, then the trailer.
        assert_eq!(&bytes[..6], b"070701");
        assert_eq!(&bytes[6..14], b"00000001");
        assert_eq!(&bytes[14..22], b"000081a4");
        assert_eq!(&bytes[54..62], b"00000003");
        assert_eq!(&bytes[110..112], b"a\0");
        assert_eq!(&bytes[112..115], b"xyz");
        assert_eq!(&bytes[116..122], b"070701");
    }

    #[test]
    fn padding_aligns_to_four() {
        assert_eq!(padding_after(0), 0);
        assert_eq!(padding_after(1), 3);
        assert_eq!(padding_after(6), 2);
        assert_eq!(padding_after(8), 0);
    }
}
