//! A bootable ISO 9660 image, written without outside tools: a primary volume
//! descriptor, path tables and directories (level 1 names: upper case, 8.3), the
//! files' data, and an El Torito boot catalog with a BIOS entry (an ISOLINUX-style
//! loader, "no emulation", its boot information table filled in) and a UEFI entry (a
//! FAT image holding `EFI/BOOT/BOOTX64.EFI`), either or both.
//!
//! The layout is computed first (sizes only), then written in one pass, so the files'
//! data (a ramdisk of tens of MiB) is streamed from disk, never held in memory.

use std::io::{self, Read, Write};
use std::path::PathBuf;

pub const SECTOR: u64 = 2048;
const SECTOR_USIZE: usize = 2048;
/// The first sector after the system area, where the volume descriptors start.
const FIRST_DESCRIPTOR: u32 = 16;
/// El Torito platform ids.
const PLATFORM_X86: u8 = 0;
const PLATFORM_EFI: u8 = 0xEF;

/// Part of a file's data: bytes held in memory, or a file on disk of a known length.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Content {
    Bytes(Vec<u8>),
    File { path: PathBuf, len: u64 },
}

impl Content {
    fn len(&self) -> u64 {
        match self {
            Self::Bytes(b) => b.len() as u64,
            Self::File { len, .. } => *len,
        }
    }
}

/// A file of the image: its path (`/`-separated, each part a level 1 name such as
/// `EFI`, `GRUB.CFG` or `VMLINUZ`) and its data, the parts one after another.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IsoFile {
    pub path: String,
    pub parts: Vec<Content>,
}

impl IsoFile {
    pub fn new(path: &str, parts: Vec<Content>) -> Self {
        Self {
            path: path.to_owned(),
            parts,
        }
    }

    fn len(&self) -> u64 {
        self.parts.iter().map(Content::len).sum()
    }
}

/// What the image boots: the paths (among its files) of the BIOS loader, which gets
/// a boot information table, and of the EFI system partition image.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Boot {
    pub bios: Option<String>,
    pub efi: Option<String>,
}

/// Why an image cannot be laid out.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum IsoError {
    #[error("{0:?} is not an ISO 9660 level 1 name (A-Z, 0-9, _; 8.3 for files)")]
    BadName(String),
    #[error("{0} is given twice")]
    Duplicate(String),
    #[error("the boot image {0} is not among the files")]
    NoBootFile(String),
    #[error("the BIOS loader {0} must be held in memory and at least 64 bytes long")]
    BiosLoader(String),
    #[error("the image would be over 8 TiB")]
    TooLarge,
}

/// A directory: its name, parent (index; the root is its own), children.
#[derive(Debug, Default)]
struct Dir {
    name: String,
    parent: usize,
    dirs: Vec<usize>,
    files: Vec<usize>,
    lba: u32,
    size: u32,
}

/// Where everything goes.
#[derive(Debug)]
struct Layout {
    dirs: Vec<Dir>,
    /// Each file's name in its directory, directory, LBA and length.
    files: Vec<(String, usize, u32, u64)>,
    path_table: (u32, u32, u32),
    catalog: Option<u32>,
    total: u32,
}

/// A directory record's length for a name of `n` bytes (even, as records must be).
fn record_len(n: usize) -> usize {
    let len = 33 + n;
    len + len % 2
}

fn valid_part(name: &str, file: bool) -> bool {
    let chars = |s: &str, max: usize| {
        !s.is_empty()
            && s.len() <= max
            && s.bytes()
                .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
    };
    match name.split_once('.') {
        Some((stem, ext)) if file => chars(stem, 8) && (ext.is_empty() || chars(ext, 3)),
        _ => chars(name, 8),
    }
}

/// The identifier a file's record carries: `NAME.EXT;1` (a dot even without an
/// extension).
fn file_identifier(name: &str) -> String {
    if name.contains('.') {
        format!("{name};1")
    } else {
        format!("{name}.;1")
    }
}

/// Bytes taken by records of `lens` in sectors (a record never crosses one).
fn sectors_of_records(lens: impl Iterator<Item = usize>) -> u32 {
    let (mut sectors, mut used) = (1u32, 0usize);
    for len in lens {
        if used + len > SECTOR_USIZE {
            sectors += 1;
            used = 0;
        }
        used += len;
    }
    sectors
}

fn sectors(len: u64) -> Result<u32, IsoError> {
    u32::try_from(len.div_ceil(SECTOR)).map_err(|_| IsoError::TooLarge)
}

/// A file's name in its directory, and that directory's index.
type Placed = (String, usize);

/// The directory tree of `files`, breadth first with children sorted by name (so
/// the path table's order is the index order).
fn tree(files: &[IsoFile]) -> Result<(Vec<Dir>, Vec<Placed>), IsoError> {
    let mut dirs = vec![Dir::default()];
    let mut placed = Vec::new();
    for file in files {
        let parts: Vec<&str> = file.path.split('/').collect();
        let (name, parents) = parts.split_last().ok_or(IsoError::BadName(String::new()))?;
        let mut at = 0;
        for part in parents {
            if !valid_part(part, false) {
                return Err(IsoError::BadName(file.path.clone()));
            }
            at = match dirs[at].dirs.iter().find(|d| dirs[**d].name == *part) {
                Some(d) => *d,
                None => {
                    dirs.push(Dir {
                        name: (*part).to_owned(),
                        parent: at,
                        ..Dir::default()
                    });
                    let new = dirs.len() - 1;
                    dirs[at].dirs.push(new);
                    new
                }
            };
        }
        if !valid_part(name, true) || dirs[at].dirs.iter().any(|d| dirs[*d].name == *name) {
            return Err(IsoError::BadName(file.path.clone()));
        }
        if placed.iter().any(|(n, d)| n == name && *d == at) {
            return Err(IsoError::Duplicate(file.path.clone()));
        }
        dirs[at].files.push(placed.len());
        placed.push(((*name).to_owned(), at));
    }
    let (dirs, new_index) = breadth_first(dirs);
    for p in &mut placed {
        p.1 = new_index[p.1];
    }
    Ok((dirs, placed))
}

/// Renumbers `dirs` breadth first, children by name; files keep their indexes but
/// are sorted by name within each directory. Also returns each old index's new one.
fn breadth_first(mut dirs: Vec<Dir>) -> (Vec<Dir>, Vec<usize>) {
    for i in 0..dirs.len() {
        let mut children = std::mem::take(&mut dirs[i].dirs);
        children.sort_by(|a, b| dirs[*a].name.cmp(&dirs[*b].name));
        dirs[i].dirs = children;
    }
    let mut order = vec![0usize];
    let mut i = 0;
    while i < order.len() {
        order.extend(dirs[order[i]].dirs.iter().copied());
        i += 1;
    }
    let mut new_index = vec![0usize; dirs.len()];
    for (new, old) in order.iter().enumerate() {
        new_index[*old] = new;
    }
    let mut out: Vec<Dir> = order
        .iter()
        .map(|old| std::mem::take(&mut dirs[*old]))
        .collect();
    for d in &mut out {
        d.parent = new_index[d.parent];
        for c in &mut d.dirs {
            *c = new_index[*c];
        }
    }
    (out, new_index)
}

fn path_table_size(dirs: &[Dir]) -> usize {
    dirs.iter()
        .map(|d| {
            let n = d.name.len().max(1);
            8 + n + n % 2
        })
        .sum()
}

fn layout(files: &[IsoFile], boot: &Boot) -> Result<Layout, IsoError> {
    let (mut dirs, placed) = tree(files)?;
    let sizes: Vec<u32> = dirs
        .iter()
        .map(|d| {
            let lens = [34, 34]
                .into_iter()
                .chain(d.dirs.iter().map(|c| record_len(dirs[*c].name.len())))
                .chain(
                    d.files
                        .iter()
                        .map(|f| record_len(file_identifier(&placed[*f].0).len())),
                );
            sectors_of_records(lens)
        })
        .collect();
    let booting = boot.bios.is_some() || boot.efi.is_some();
    let mut next = FIRST_DESCRIPTOR + 2 + u32::from(booting);
    let pt_size = path_table_size(&dirs);
    let pt_sectors = sectors(pt_size as u64)?;
    let path_table = (pt_size as u32, next, next + pt_sectors);
    next += 2 * pt_sectors;
    let catalog = booting.then_some(next);
    next += u32::from(booting);
    for (d, s) in dirs.iter_mut().zip(sizes) {
        d.lba = next;
        d.size = s * SECTOR as u32;
        next = next.checked_add(s).ok_or(IsoError::TooLarge)?;
    }
    let mut out = Vec::new();
    for ((name, dir), file) in placed.into_iter().zip(files) {
        let len = file.len();
        out.push((name, dir, next, len));
        next = next.checked_add(sectors(len)?).ok_or(IsoError::TooLarge)?;
    }
    Ok(Layout {
        dirs,
        files: out,
        path_table,
        catalog,
        total: next,
    })
}

fn both16(v: u16) -> [u8; 4] {
    let (l, b) = (v.to_le_bytes(), v.to_be_bytes());
    [l[0], l[1], b[0], b[1]]
}

fn both32(v: u32) -> [u8; 8] {
    let (l, b) = (v.to_le_bytes(), v.to_be_bytes());
    [l[0], l[1], l[2], l[3], b[0], b[1], b[2], b[3]]
}

/// A directory record (ISO 9660 9.1) with the 7-byte recording date `date`.
fn record(id: &[u8], lba: u32, len: u32, dir: bool, date: &[u8; 7]) -> Vec<u8> {
    let mut r = vec![0u8; record_len(id.len())];
    r[0] = r.len() as u8;
    r[2..10].copy_from_slice(&both32(lba));
    r[10..18].copy_from_slice(&both32(len));
    r[18..25].copy_from_slice(date);
    r[25] = if dir { 2 } else { 0 };
    r[28..32].copy_from_slice(&both16(1));
    r[32] = id.len() as u8;
    r[33..33 + id.len()].copy_from_slice(id);
    r
}

/// `y, mo, d, h, mi, s` of a Unix time (UTC), by the civil-from-days algorithm.
fn civil(unix: u64) -> (i64, u8, u8, u8, u8, u8) {
    let days = (unix / 86_400) as i64;
    let secs = unix % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u8;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u8;
    let year = yoe + era * 400 + i64::from(month <= 2);
    let (h, mi, s) = (
        (secs / 3600) as u8,
        (secs / 60 % 60) as u8,
        (secs % 60) as u8,
    );
    (year, month, day, h, mi, s)
}

fn record_date(unix: u64) -> [u8; 7] {
    let (y, mo, d, h, mi, s) = civil(unix);
    [(y - 1900).clamp(0, 255) as u8, mo, d, h, mi, s, 0]
}

fn volume_date(unix: u64) -> [u8; 17] {
    let (y, mo, d, h, mi, s) = civil(unix);
    let text = format!("{y:04}{mo:02}{d:02}{h:02}{mi:02}{s:02}00");
    let mut out = [0u8; 17];
    out[..16].copy_from_slice(&text.as_bytes()[..16]);
    out
}

/// `text` upper-cased and padded with spaces to `len`.
fn padded(text: &str, len: usize) -> Vec<u8> {
    let mut v: Vec<u8> = text.bytes().take(len).collect();
    v.resize(len, b' ');
    v
}

fn primary_descriptor(l: &Layout, volume_id: &str, unix: u64) -> Vec<u8> {
    let mut s = vec![0u8; SECTOR_USIZE];
    s[0] = 1;
    s[1..6].copy_from_slice(b"CD001");
    s[6] = 1;
    s[8..40].copy_from_slice(&padded("LINUX", 32));
    s[40..72].copy_from_slice(&padded(volume_id, 32));
    s[80..88].copy_from_slice(&both32(l.total));
    s[120..124].copy_from_slice(&both16(1));
    s[124..128].copy_from_slice(&both16(1));
    s[128..132].copy_from_slice(&both16(SECTOR as u16));
    let (pt_size, l_table, m_table) = l.path_table;
    s[132..140].copy_from_slice(&both32(pt_size));
    s[140..144].copy_from_slice(&l_table.to_le_bytes());
    s[148..152].copy_from_slice(&m_table.to_be_bytes());
    let root = &l.dirs[0];
    s[156..190].copy_from_slice(&record(&[0], root.lba, root.size, true, &record_date(unix)));
    for range in [190..318, 318..446, 446..574, 702..739, 739..776, 776..813] {
        s[range.clone()].copy_from_slice(&padded("", range.len()));
    }
    s[574..702].copy_from_slice(&padded("BMO", 128));
    s[813..830].copy_from_slice(&volume_date(unix));
    s[830..847].copy_from_slice(&volume_date(unix));
    s[847..863].copy_from_slice(b"0000000000000000");
    s[864..880].copy_from_slice(b"0000000000000000");
    s[881] = 1;
    s
}

fn boot_record(catalog: u32) -> Vec<u8> {
    let mut s = vec![0u8; SECTOR_USIZE];
    s[1..6].copy_from_slice(b"CD001");
    s[6] = 1;
    s[7..30].copy_from_slice(b"EL TORITO SPECIFICATION");
    s[71..75].copy_from_slice(&catalog.to_le_bytes());
    s
}

fn terminator() -> Vec<u8> {
    let mut s = vec![0u8; SECTOR_USIZE];
    s[0] = 255;
    s[1..6].copy_from_slice(b"CD001");
    s[6] = 1;
    s
}

/// The L (little-endian) or M (big-endian) path table.
fn path_table(dirs: &[Dir], big_endian: bool) -> Vec<u8> {
    let mut t = Vec::new();
    for d in dirs {
        let name: &[u8] = if d.name.is_empty() {
            &[0]
        } else {
            d.name.as_bytes()
        };
        let parent = (d.parent + 1) as u16;
        t.push(name.len() as u8);
        t.push(0);
        if big_endian {
            t.extend_from_slice(&d.lba.to_be_bytes());
            t.extend_from_slice(&parent.to_be_bytes());
        } else {
            t.extend_from_slice(&d.lba.to_le_bytes());
            t.extend_from_slice(&parent.to_le_bytes());
        }
        t.extend_from_slice(name);
        if name.len() % 2 == 1 {
            t.push(0);
        }
    }
    t
}

/// A boot catalog entry: bootable, no emulation, `count` 512-byte sectors at `lba`.
fn catalog_entry(count: u16, lba: u32) -> [u8; 32] {
    let mut e = [0u8; 32];
    e[0] = 0x88;
    e[6..8].copy_from_slice(&count.to_le_bytes());
    e[8..12].copy_from_slice(&lba.to_le_bytes());
    e
}

fn validation_entry(platform: u8) -> [u8; 32] {
    let mut e = [0u8; 32];
    e[0] = 1;
    e[1] = platform;
    e[30] = 0x55;
    e[31] = 0xAA;
    let sum = e.chunks(2).fold(0u16, |s, w| {
        s.wrapping_add(u16::from_le_bytes([w[0], w[1]]))
    });
    e[28..30].copy_from_slice(&0u16.wrapping_sub(sum).to_le_bytes());
    e
}

/// The boot catalog: the BIOS loader as the default entry (4 sectors, as ISOLINUX
/// wants) and the EFI image in a section of its own; or the EFI image alone.
fn boot_catalog(bios: Option<(u32, u64)>, efi: Option<(u32, u64)>) -> Vec<u8> {
    let mut s = vec![0u8; SECTOR_USIZE];
    let efi_entry = |(lba, len): (u32, u64)| {
        catalog_entry(u16::try_from(len.div_ceil(512)).unwrap_or(u16::MAX), lba)
    };
    match (bios, efi) {
        (Some((lba, _)), efi) => {
            s[..32].copy_from_slice(&validation_entry(PLATFORM_X86));
            s[32..64].copy_from_slice(&catalog_entry(4, lba));
            if let Some(efi) = efi {
                s[64] = 0x91;
                s[65] = PLATFORM_EFI;
                s[66..68].copy_from_slice(&1u16.to_le_bytes());
                s[96..128].copy_from_slice(&efi_entry(efi));
            }
        }
        (None, Some(efi)) => {
            s[..32].copy_from_slice(&validation_entry(PLATFORM_EFI));
            s[32..64].copy_from_slice(&efi_entry(efi));
        }
        (None, None) => {}
    }
    s
}

/// The directory's records, each sector padded so that no record crosses one.
fn directory(l: &Layout, index: usize, date: &[u8; 7]) -> Vec<u8> {
    let d = &l.dirs[index];
    let parent = &l.dirs[d.parent];
    let mut records = vec![
        record(&[0], d.lba, d.size, true, date),
        record(&[1], parent.lba, parent.size, true, date),
    ];
    let mut children: Vec<(String, Vec<u8>)> = d
        .dirs
        .iter()
        .map(|c| {
            let c = &l.dirs[*c];
            (
                c.name.clone(),
                record(c.name.as_bytes(), c.lba, c.size, true, date),
            )
        })
        .collect();
    for f in &d.files {
        let (name, _, lba, len) = &l.files[*f];
        let id = file_identifier(name);
        let len = u32::try_from(*len).unwrap_or(u32::MAX);
        children.push((id.clone(), record(id.as_bytes(), *lba, len, false, date)));
    }
    children.sort_by(|a, b| a.0.cmp(&b.0));
    records.extend(children.into_iter().map(|(_, r)| r));
    let mut out = Vec::with_capacity(d.size as usize);
    for r in records {
        let used = out.len() % SECTOR_USIZE;
        if used + r.len() > SECTOR_USIZE {
            out.resize(out.len() + SECTOR_USIZE - used, 0);
        }
        out.extend_from_slice(&r);
    }
    out
}

/// The BIOS loader with its boot information table (bytes 8..64): the primary
/// volume descriptor's LBA, its own LBA and length, and the 32-bit sum of its words
/// from byte 64 on.
fn with_boot_info_table(loader: &[u8], lba: u32) -> Vec<u8> {
    let mut out = loader.to_vec();
    let sum = loader[64..].chunks(4).fold(0u32, |s, w| {
        let mut word = [0u8; 4];
        word[..w.len()].copy_from_slice(w);
        s.wrapping_add(u32::from_le_bytes(word))
    });
    out[8..12].copy_from_slice(&FIRST_DESCRIPTOR.to_le_bytes());
    out[12..16].copy_from_slice(&lba.to_le_bytes());
    out[16..20].copy_from_slice(&(loader.len() as u32).to_le_bytes());
    out[20..24].copy_from_slice(&sum.to_le_bytes());
    out[24..64].fill(0);
    out
}

/// Writes `bytes` and zeros up to the next sector boundary.
fn write_padded(out: &mut impl Write, bytes: &[u8]) -> io::Result<()> {
    out.write_all(bytes)?;
    let rest = (SECTOR - bytes.len() as u64 % SECTOR) % SECTOR;
    out.write_all(&vec![0u8; rest as usize])
}

fn index_of(files: &[IsoFile], path: &Option<String>) -> Result<Option<usize>, IsoError> {
    path.as_ref()
        .map(|p| {
            files
                .iter()
                .position(|f| f.path == *p)
                .ok_or_else(|| IsoError::NoBootFile(p.clone()))
        })
        .transpose()
}

/// Checks `files` and `boot` and lays the image out; [`write`] writes it.
pub fn plan(files: Vec<IsoFile>, boot: &Boot) -> Result<Plan, IsoError> {
    let bios = index_of(&files, &boot.bios)?;
    let efi = index_of(&files, &boot.efi)?;
    let layout = layout(&files, boot)?;
    let mut files = files;
    if let Some(i) = bios {
        let lba = layout.files[i].2;
        match files[i].parts.as_slice() {
            [Content::Bytes(b)] if b.len() >= 64 => {
                files[i].parts = vec![Content::Bytes(with_boot_info_table(b, lba))];
            }
            _ => return Err(IsoError::BiosLoader(files[i].path.clone())),
        }
    }
    Ok(Plan {
        files,
        layout,
        bios,
        efi,
    })
}

/// An image laid out, ready to write.
#[derive(Debug)]
pub struct Plan {
    files: Vec<IsoFile>,
    layout: Layout,
    bios: Option<usize>,
    efi: Option<usize>,
}

impl Plan {
    /// The image's size in bytes.
    pub fn size(&self) -> u64 {
        u64::from(self.layout.total) * SECTOR
    }

    /// Writes the image with volume id `volume_id`, its dates at `unix` (seconds).
    pub fn write(&self, out: &mut impl Write, volume_id: &str, unix: u64) -> io::Result<()> {
        let l = &self.layout;
        let date = record_date(unix);
        out.write_all(&vec![0u8; FIRST_DESCRIPTOR as usize * SECTOR_USIZE])?;
        out.write_all(&primary_descriptor(l, volume_id, unix))?;
        if let Some(catalog) = l.catalog {
            out.write_all(&boot_record(catalog))?;
        }
        out.write_all(&terminator())?;
        write_padded(out, &path_table(&l.dirs, false))?;
        write_padded(out, &path_table(&l.dirs, true))?;
        if l.catalog.is_some() {
            let at = |i: Option<usize>| i.map(|i| (l.files[i].2, l.files[i].3));
            out.write_all(&boot_catalog(at(self.bios), at(self.efi)))?;
        }
        for i in 0..l.dirs.len() {
            write_padded(out, &directory(l, i, &date))?;
        }
        for file in &self.files {
            for part in &file.parts {
                match part {
                    Content::Bytes(b) => out.write_all(b)?,
                    Content::File { path, len } => copy_exactly(path, *len, out)?,
                }
            }
            let rest = (SECTOR - file.len() % SECTOR) % SECTOR;
            out.write_all(&vec![0u8; rest as usize])?;
        }
        out.flush()
    }
}

/// Copies `len` bytes of the file at `path`; a file that changed length is an error.
fn copy_exactly(path: &std::path::Path, len: u64, out: &mut impl Write) -> io::Result<()> {
    let file = std::fs::File::open(path)?;
    let copied = io::copy(&mut file.take(len), out)?;
    if copied != len {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            format!(
                "{} is shorter than when the image was planned",
                path.display()
            ),
        ));
    }
    Ok(())
}

/// The data of the file at `path` (as given to [`plan`]) in a written `image`, read
/// through the primary volume descriptor and the directories; `None` if absent.
pub fn find<'a>(image: &'a [u8], path: &str) -> Option<&'a [u8]> {
    let sector = |lba: u32| image.get(lba as usize * SECTOR_USIZE..);
    let pvd = sector(FIRST_DESCRIPTOR)?;
    if pvd.get(1..6)? != b"CD001" {
        return None;
    }
    let mut at = pvd.get(156..190)?;
    let parts: Vec<&str> = path.split('/').collect();
    for (i, part) in parts.iter().enumerate() {
        let last = i + 1 == parts.len();
        let lba = u32::from_le_bytes(at.get(2..6)?.try_into().ok()?);
        let size = u32::from_le_bytes(at.get(10..14)?.try_into().ok()?) as usize;
        let dir = sector(lba)?.get(..size)?;
        let wanted = if last {
            file_identifier(part)
        } else {
            (*part).to_owned()
        };
        at = records(dir).find(|r| r.get(33..33 + r[32] as usize) == Some(wanted.as_bytes()))?;
    }
    let lba = u32::from_le_bytes(at.get(2..6)?.try_into().ok()?);
    let len = u32::from_le_bytes(at.get(10..14)?.try_into().ok()?) as usize;
    sector(lba)?.get(..len)
}

/// The records of a directory's data, skipping the zeros at each sector's end.
fn records(dir: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut pos = 0;
    std::iter::from_fn(move || {
        while pos < dir.len() {
            let len = dir[pos] as usize;
            if len == 0 {
                pos = (pos / SECTOR_USIZE + 1) * SECTOR_USIZE;
                continue;
            }
            let r = dir.get(pos..pos + len)?;
            pos += len;
            return Some(r);
        }
        None
    })
}

#[cfg(test)]
#[path = "iso_tests.rs"]
mod tests;
