//! A small ISO 9660 image writer with Joliet names (seed 003 Appendix B "Fallback:
//! library-based ISO creation"): what the task ISO builder uses when `xorriso` is not chosen —
//! the hermetic test suite, `metalform demo`, hosts without the Debian package.
//!
//! ECMA-119 with a Joliet supplementary volume descriptor (UCS-2 level 3, the names as
//! given): a primary tree of upper-case `NAME.EXT;1` identifiers, a Joliet tree of the real
//! names, both pointing at the same file extents. Everything is deterministic — fixed dates
//! (2020-01-01 00:00:00 UTC, as the xorriso builds), entries sorted by identifier — so equal
//! contents give equal bytes. Linux mounts the Joliet names; xorriso reads the image back
//! (tests/redfish_iso_services.rs).

use std::collections::BTreeMap;

const SECTOR: usize = 2048;
/// Sectors 0–15 are the system area.
const FIRST_DESCRIPTOR: usize = 16;
/// `YYYYMMDDhhmmsscc` and a zero time-zone offset.
const VOLUME_DATE: &[u8; 17] = b"2020010100000000\0";
/// Years since 1900, month, day, hour, minute, second, offset.
const RECORD_DATE: [u8; 7] = [120, 1, 1, 0, 0, 0, 0];

/// One directory of the image, with its files and subdirectories by name.
#[derive(Default)]
struct Dir<'a> {
    files: BTreeMap<&'a str, &'a [u8]>,
    dirs: BTreeMap<&'a str, Dir<'a>>,
}

/// Where each file's data starts, by (directory number, name).
type FileExtents<'a> = BTreeMap<(usize, &'a str), usize>;

/// One tree's identifiers and where its directories are.
struct Tree {
    joliet: bool,
    /// Directory extents (first sector, sectors), by directory number (breadth-first,
    /// root = 0).
    extents: Vec<(usize, usize)>,
    path_table: (usize, usize),
}

/// A directory in breadth-first order: its path, its parent's number and its own name.
struct Numbered<'a, 'd> {
    dir: &'d Dir<'a>,
    parent: usize,
    name: &'a str,
}

/// Builds the image of `files` (relative `/`-separated paths and their bytes) with the volume
/// label `label`; `preparer` names the data preparer.
pub fn write_image<'a>(
    files: impl IntoIterator<Item = (&'a str, &'a [u8])>,
    label: &str,
    preparer: &str,
) -> Vec<u8> {
    let mut root = Dir::default();
    for (path, bytes) in files {
        let mut dir = &mut root;
        let mut parts = path.split('/').peekable();
        while let Some(part) = parts.next() {
            if parts.peek().is_none() {
                dir.files.insert(part, bytes);
            } else {
                dir = dir.dirs.entry(part).or_default();
            }
        }
    }
    // Breadth-first numbering, as path tables want it.
    let mut dirs = vec![Numbered {
        dir: &root,
        parent: 0,
        name: "",
    }];
    let mut at = 0;
    while at < dirs.len() {
        let current = dirs[at].dir;
        for (name, child) in &current.dirs {
            dirs.push(Numbered {
                dir: child,
                parent: at,
                name,
            });
        }
        at += 1;
    }

    // Layout: descriptors, path tables, directories of both trees, then file data.
    let mut next = FIRST_DESCRIPTOR + 3;
    let mut trees = [false, true].map(|joliet| {
        let size = path_table_size(&dirs, joliet);
        let sectors = size.div_ceil(SECTOR);
        let table = (next, size);
        next += 2 * sectors; // L and M tables
        Tree {
            joliet,
            extents: Vec::new(),
            path_table: table,
        }
    });
    for tree in &mut trees {
        for number in 0..dirs.len() {
            let sectors = dir_size(number, &dirs, tree.joliet) / SECTOR;
            tree.extents.push((next, sectors));
            next += sectors;
        }
    }
    let mut data: Vec<(usize, &[u8])> = Vec::new();
    let mut file_extents: FileExtents = BTreeMap::new();
    for (number, numbered) in dirs.iter().enumerate() {
        for (name, bytes) in &numbered.dir.files {
            let start = if bytes.is_empty() { 0 } else { next };
            file_extents.insert((number, name), start);
            data.push((start, bytes));
            next += bytes.len().div_ceil(SECTOR);
        }
    }
    let total = next;
    let mut image = vec![0u8; total * SECTOR];

    for (i, tree) in trees.iter().enumerate() {
        let descriptor = volume_descriptor(tree, total, label, preparer);
        let at = (FIRST_DESCRIPTOR + i) * SECTOR;
        image[at..at + SECTOR].copy_from_slice(&descriptor);
        let (l_at, size) = tree.path_table;
        let m_at = l_at + size.div_ceil(SECTOR);
        for (at, big) in [(l_at, false), (m_at, true)] {
            let table = path_table(&dirs, tree, big);
            image[at * SECTOR..at * SECTOR + table.len()].copy_from_slice(&table);
        }
        for number in 0..dirs.len() {
            let bytes = dir_bytes(number, &dirs, tree, &file_extents);
            let at = tree.extents[number].0 * SECTOR;
            image[at..at + bytes.len()].copy_from_slice(&bytes);
        }
    }
    let terminator = (FIRST_DESCRIPTOR + 2) * SECTOR;
    image[terminator] = 255;
    image[terminator + 1..terminator + 6].copy_from_slice(b"CD001");
    image[terminator + 6] = 1;
    for (start, bytes) in data {
        if !bytes.is_empty() {
            image[start * SECTOR..start * SECTOR + bytes.len()].copy_from_slice(bytes);
        }
    }
    image
}

fn both16(out: &mut [u8], value: usize) {
    let v = value as u16;
    out[..2].copy_from_slice(&v.to_le_bytes());
    out[2..4].copy_from_slice(&v.to_be_bytes());
}

fn both32(out: &mut [u8], value: usize) {
    let v = value as u32;
    out[..4].copy_from_slice(&v.to_le_bytes());
    out[4..8].copy_from_slice(&v.to_be_bytes());
}

/// A text field: a-characters for the primary descriptor, UCS-2 big-endian for Joliet, padded
/// with spaces.
fn text_field(out: &mut [u8], text: &str, joliet: bool) {
    if joliet {
        for pair in out.chunks_exact_mut(2) {
            pair.copy_from_slice(&[0, b' ']);
        }
        for (i, unit) in text.encode_utf16().take(out.len() / 2).enumerate() {
            out[2 * i..2 * i + 2].copy_from_slice(&unit.to_be_bytes());
        }
    } else {
        out.fill(b' ');
        for (i, c) in text.bytes().take(out.len()).enumerate() {
            out[i] = c.to_ascii_uppercase();
        }
    }
}

/// The identifier of a file or directory in one tree. Primary names are upper case,
/// d-characters, one dot, `;1` after files; Joliet names are the names, in UCS-2.
fn identifier(name: &str, is_file: bool, joliet: bool) -> Vec<u8> {
    if joliet {
        let mut text = name.to_owned();
        if is_file {
            text.push_str(";1");
        }
        return text.encode_utf16().flat_map(u16::to_be_bytes).collect();
    }
    let clean = |s: &str| -> String {
        s.chars()
            .map(|c| {
                let c = c.to_ascii_uppercase();
                if c.is_ascii_uppercase() || c.is_ascii_digit() {
                    c
                } else {
                    '_'
                }
            })
            .collect()
    };
    if !is_file {
        return clean(name).into_bytes();
    }
    let (stem, ext) = match name.rsplit_once('.') {
        Some((stem, ext)) if !stem.is_empty() => (stem, ext),
        _ => (name, ""),
    };
    format!("{}.{};1", clean(stem), clean(ext)).into_bytes()
}

/// A directory entry: a file (its name and bytes) or a subdirectory (its number).
type Target<'a> = Result<(&'a str, &'a [u8]), usize>;

/// The entries of a directory in one tree, sorted by identifier.
fn entries<'a>(
    number: usize,
    dirs: &[Numbered<'a, '_>],
    joliet: bool,
) -> Vec<(Vec<u8>, Target<'a>)> {
    let mut out: Vec<(Vec<u8>, Target<'a>)> = Vec::new();
    for (name, bytes) in &dirs[number].dir.files {
        out.push((identifier(name, true, joliet), Ok((*name, *bytes))));
    }
    for (child, numbered) in dirs.iter().enumerate() {
        if child != 0 && numbered.parent == number {
            out.push((identifier(numbered.name, false, joliet), Err(child)));
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    // Two names of the primary tree may clean up alike ("a-b", "a_b"): number the later ones
    // so every identifier stays unique (Joliet keeps the real names).
    let mut seen = std::collections::BTreeSet::new();
    for (ident, _) in &mut out {
        let mut candidate = ident.clone();
        let mut n = 1;
        while !seen.insert(candidate.clone()) {
            n += 1;
            candidate = ident.clone();
            if joliet {
                candidate.extend(format!("~{n}").encode_utf16().flat_map(u16::to_be_bytes));
            } else {
                candidate.extend(format!("~{n}").bytes());
            }
        }
        *ident = candidate;
    }
    out
}

fn record_len(identifier_len: usize) -> usize {
    let len = 33 + identifier_len;
    len + len % 2
}

/// The size of a directory's extent in one tree: whole sectors, records never crossing one.
fn dir_size(number: usize, dirs: &[Numbered<'_, '_>], joliet: bool) -> usize {
    let mut lengths = vec![record_len(1), record_len(1)];
    lengths.extend(
        entries(number, dirs, joliet)
            .iter()
            .map(|(ident, _)| record_len(ident.len())),
    );
    let (mut sectors, mut used) = (1, 0);
    for len in lengths {
        if used + len > SECTOR {
            sectors += 1;
            used = 0;
        }
        used += len;
    }
    sectors * SECTOR
}

fn dir_record(identifier: &[u8], extent: usize, len: usize, is_dir: bool) -> Vec<u8> {
    let mut record = vec![0u8; record_len(identifier.len())];
    record[0] = record.len() as u8;
    both32(&mut record[2..10], extent);
    both32(&mut record[10..18], len);
    record[18..25].copy_from_slice(&RECORD_DATE);
    record[25] = if is_dir { 2 } else { 0 };
    both16(&mut record[28..32], 1);
    record[32] = identifier.len() as u8;
    record[33..33 + identifier.len()].copy_from_slice(identifier);
    record
}

fn dir_bytes(
    number: usize,
    dirs: &[Numbered<'_, '_>],
    tree: &Tree,
    file_extents: &FileExtents<'_>,
) -> Vec<u8> {
    let extent_of = |n: usize| {
        let (start, sectors) = tree.extents[n];
        (start, sectors * SECTOR)
    };
    let (own, own_len) = extent_of(number);
    let (parent, parent_len) = extent_of(dirs[number].parent);
    let mut records = vec![
        dir_record(&[0], own, own_len, true),
        dir_record(&[1], parent, parent_len, true),
    ];
    for (ident, target) in entries(number, dirs, tree.joliet) {
        records.push(match target {
            Ok((name, bytes)) => {
                dir_record(&ident, file_extents[&(number, name)], bytes.len(), false)
            }
            Err(child) => {
                let (start, len) = extent_of(child);
                dir_record(&ident, start, len, true)
            }
        });
    }
    let mut out = Vec::with_capacity(own_len);
    for record in records {
        if out.len() % SECTOR + record.len() > SECTOR {
            out.resize(out.len().div_ceil(SECTOR) * SECTOR, 0);
        }
        out.extend(record);
    }
    out.resize(own_len, 0);
    out
}

fn path_table_size(dirs: &[Numbered<'_, '_>], joliet: bool) -> usize {
    dirs.iter()
        .enumerate()
        .map(|(n, d)| {
            let len = if n == 0 {
                1
            } else {
                identifier(d.name, false, joliet).len()
            };
            8 + len + len % 2
        })
        .sum()
}

/// The L (little-endian) or M (big-endian) path table of a tree.
fn path_table(dirs: &[Numbered<'_, '_>], tree: &Tree, big: bool) -> Vec<u8> {
    let mut out = Vec::new();
    for (n, numbered) in dirs.iter().enumerate() {
        let ident = if n == 0 {
            vec![0]
        } else {
            identifier(numbered.name, false, tree.joliet)
        };
        out.push(ident.len() as u8);
        out.push(0);
        let extent = tree.extents[n].0 as u32;
        let parent = (numbered.parent + 1) as u16;
        if big {
            out.extend(extent.to_be_bytes());
            out.extend(parent.to_be_bytes());
        } else {
            out.extend(extent.to_le_bytes());
            out.extend(parent.to_le_bytes());
        }
        out.extend(&ident);
        if ident.len() % 2 == 1 {
            out.push(0);
        }
    }
    out
}

fn volume_descriptor(tree: &Tree, total: usize, label: &str, preparer: &str) -> Vec<u8> {
    let mut d = vec![0u8; SECTOR];
    d[0] = if tree.joliet { 2 } else { 1 };
    d[1..6].copy_from_slice(b"CD001");
    d[6] = 1;
    text_field(&mut d[8..40], "", tree.joliet);
    text_field(&mut d[40..72], label, tree.joliet);
    both32(&mut d[80..88], total);
    if tree.joliet {
        // UCS-2 level 3.
        d[88..91].copy_from_slice(b"%/E");
    }
    both16(&mut d[120..124], 1);
    both16(&mut d[124..128], 1);
    both16(&mut d[128..132], SECTOR);
    let (l_table, size) = tree.path_table;
    both32(&mut d[132..140], size);
    d[140..144].copy_from_slice(&(l_table as u32).to_le_bytes());
    let m_table = l_table + size.div_ceil(SECTOR);
    d[148..152].copy_from_slice(&(m_table as u32).to_be_bytes());
    let (root, root_sectors) = tree.extents[0];
    let root_record = dir_record(&[0], root, root_sectors * SECTOR, true);
    d[156..190].copy_from_slice(&root_record);
    text_field(&mut d[190..318], "", tree.joliet);
    text_field(&mut d[318..446], preparer, tree.joliet);
    text_field(&mut d[446..574], preparer, tree.joliet);
    text_field(&mut d[574..702], "", tree.joliet);
    for range in [702..739, 739..776, 776..813] {
        text_field(&mut d[range], "", tree.joliet);
    }
    for at in [813, 830, 864] {
        d[at..at + 17].copy_from_slice(VOLUME_DATE);
    }
    d[847..863].copy_from_slice(b"0000000000000000");
    d[881] = 1;
    d
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::redfish::IsoImage;

    #[test]
    fn the_simulated_maintenance_os_reads_what_is_written() {
        let schema = vec![b's'; 5000];
        let files: Vec<(&str, &[u8])> = vec![
            ("recipe.json", b"{\"task_target\": \"x.target\"}\n"),
            ("recipe.schema.json", &schema),
            ("user-data", b"#cloud-config\n"),
            ("assets/unattend.xml", b"<unattend/>"),
            ("assets/a-b", b"1"),
            ("assets/a_b", b"2"),
            ("empty", b""),
        ];
        let image = write_image(files.clone(), "MFTASK", "metalform");
        assert_eq!(image.len() % SECTOR, 0);
        let iso = IsoImage::parse(&image).expect("an ISO 9660 image");
        assert_eq!(iso.label, "MFTASK");
        for (path, bytes) in &files {
            assert_eq!(iso.read(path), Some(*bytes), "{path}");
        }
        assert_eq!(iso.read("missing"), None);
        // Deterministic, whatever the order of the input.
        let mut reversed = files.clone();
        reversed.reverse();
        assert_eq!(write_image(reversed, "MFTASK", "metalform"), image);
    }

    #[test]
    fn large_directories_span_sectors() {
        let names: Vec<String> = (0..200)
            .map(|i| format!("assets/file-{i:03}.bin"))
            .collect();
        let files: Vec<(&str, &[u8])> = names.iter().map(|n| (n.as_str(), &b"x"[..])).collect();
        let image = write_image(files, "MFTASK", "metalform");
        let iso = IsoImage::parse(&image).unwrap();
        for name in &names {
            assert_eq!(iso.read(name), Some(&b"x"[..]), "{name}");
        }
    }

    #[test]
    fn primary_identifiers_follow_ecma_119() {
        assert_eq!(
            identifier("recipe.schema.json", true, false),
            b"RECIPE_SCHEMA.JSON;1"
        );
        assert_eq!(identifier("user-data", true, false), b"USER_DATA.;1");
        assert_eq!(identifier("assets", false, false), b"ASSETS");
        assert_eq!(
            identifier("ab", true, true),
            [0, b'a', 0, b'b', 0, b';', 0, b'1']
        );
    }
}
