//! Reading a fleet from disk: a directory tree, or one manifest file (DESIGN.md §3 `--fleet`).
//!
//! Only regular files are opened. A symbolic link is followed only when it leads to a file or
//! directory inside the fleet (an editor's or a generator's link), never out of it: a link to
//! `/dev/zero`, `/etc/shadow` or another checkout is refused by name. Files are opened without
//! following a final link and without blocking, then checked again on the open handle, so a
//! file swapped for a FIFO between the check and the open is refused too. Sizes are checked
//! before reading and the read itself stops one byte past the limit.

use std::collections::HashSet;
use std::fs::File;
use std::io::Read as _;
use std::os::unix::fs::{FileTypeExt as _, OpenOptionsExt as _};
use std::path::Path;

use super::{
    Budget, Snapshot, SourceError, SourceFile, display_root_of, is_manifest_name, is_walked_dir,
    join_display,
};
use crate::model::Revision;

pub(super) fn read(path: &Path, budget: &mut Budget) -> Result<Snapshot, SourceError> {
    let io = |source| SourceError::Io {
        path: path.to_path_buf(),
        source,
    };
    // The path the operator named may itself be a link (a checkout under ~/fleets): follow it.
    let metadata = match std::fs::metadata(path) {
        Ok(metadata) => metadata,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
            return Err(SourceError::NotFound {
                path: path.to_path_buf(),
            });
        }
        Err(err) => return Err(io(err)),
    };
    let mut files = Vec::new();
    let display_root;
    if metadata.is_file() {
        // A single manifest file: its directory is the root, so messages show the path as given.
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        display_root = path
            .parent()
            .map(display_root_of)
            .unwrap_or_else(|| ".".into());
        let shown = path.display().to_string();
        let target = path.canonicalize().map_err(io)?;
        files.push(SourceFile {
            path: name,
            bytes: read_regular(&target, &shown, budget)?,
        });
    } else if metadata.is_dir() {
        display_root = display_root_of(path);
        let root = path.canonicalize().map_err(io)?;
        walk(&root, &display_root, budget, &mut files)?;
        files.sort_by(|a, b| a.path.cmp(&b.path));
    } else {
        return Err(SourceError::Refused {
            path: path.display().to_string(),
            reason: format!(
                "{}, not a fleet directory or manifest file",
                kind_of(&metadata.file_type())
            ),
        });
    }
    Ok(Snapshot {
        revision: Revision::WorkingTree {
            content_hash: content_hash(&files),
        },
        display_root,
        files,
    })
}

/// Walk the fleet directory (`root`, symlinks resolved) in name order, reading every manifest
/// into `files`. Links are followed (walkdir) but checked here: one leading out of the fleet is
/// refused, a directory reached twice (a link to a sibling, or to an ancestor) is read once.
fn walk(
    root: &Path,
    display_root: &str,
    budget: &mut Budget,
    files: &mut Vec<SourceFile>,
) -> Result<(), SourceError> {
    let io = |path: &Path, source| SourceError::Io {
        path: path.to_path_buf(),
        source,
    };
    let max_depth = budget.limits().max_dir_depth;
    let mut visited = HashSet::from([root.to_path_buf()]);
    // A stable order: the first problem reported is the same on every run.
    let mut entries = walkdir::WalkDir::new(root)
        .min_depth(1)
        .follow_links(true)
        .sort_by_file_name()
        .into_iter();
    while let Some(next) = entries.next() {
        let entry = match next {
            Ok(entry) => entry,
            // A link back to a directory being walked: that directory is read once already.
            Err(err) if err.loop_ancestor().is_some() => continue,
            Err(err) => match err.path().map(Path::to_path_buf) {
                Some(link) if link.is_symlink() => {
                    dangling_link(&link, root, display_root)?;
                    continue;
                }
                Some(path) => return Err(io(&path, io_error_of(err))),
                None => return Err(io(root, io_error_of(err))),
            },
        };
        let name = entry.file_name().to_string_lossy().into_owned();
        let is_dir = entry.file_type().is_dir();
        // Dot-files and dot-directories (.git, .metalform) are not part of the fleet, and
        // only what the fleet would read is looked at: other names are never opened.
        if !is_walked_dir(&name) || !(is_dir || is_manifest_name(&name)) {
            if is_dir {
                entries.skip_current_dir();
            }
            continue;
        }
        let relative = relative_of(entry.path(), root);
        let shown = join_display(display_root, &relative);
        let target = if entry.path_is_symlink() {
            let target = entry
                .path()
                .canonicalize()
                .map_err(|e| io(entry.path(), e))?;
            if !target.starts_with(root) {
                // Outside the fleet: refused when the fleet would read it (a manifest, or a
                // directory it would walk); a README linked from elsewhere is not looked at.
                return Err(SourceError::Refused {
                    path: shown,
                    reason: format!(
                        "a symbolic link to `{}`, outside the fleet directory",
                        target.display()
                    ),
                });
            }
            target
        } else {
            entry.path().to_path_buf()
        };
        if is_dir {
            if entry.depth() > max_depth {
                return Err(SourceError::Refused {
                    path: shown,
                    reason: format!("directories nested more than {max_depth} deep"),
                });
            }
            let resolved = target.canonicalize().map_err(|e| io(&target, e))?;
            if !visited.insert(resolved) {
                entries.skip_current_dir();
            }
            continue;
        }
        let bytes = read_regular(&target, &shown, budget)?;
        files.push(SourceFile {
            path: relative,
            bytes,
        });
    }
    Ok(())
}

/// A link whose target does not exist: with a manifest's name it is a missing manifest.
fn dangling_link(link: &Path, root: &Path, display_root: &str) -> Result<(), SourceError> {
    let name = link
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    if !is_manifest_name(&name) {
        return Ok(());
    }
    let written = std::fs::read_link(link)
        .map(|t| t.display().to_string())
        .unwrap_or_default();
    Err(SourceError::Refused {
        path: join_display(display_root, &relative_of(link, root)),
        reason: format!("a symbolic link to `{written}`, which does not exist"),
    })
}

/// `path` below `root`, `/`-separated, as manifests are named in messages.
fn relative_of(path: &Path, root: &Path) -> String {
    path.strip_prefix(root)
        .unwrap_or(path)
        .components()
        .map(|c| c.as_os_str().to_string_lossy())
        .collect::<Vec<_>>()
        .join("/")
}

fn io_error_of(err: walkdir::Error) -> std::io::Error {
    let message = err.to_string();
    err.into_io_error()
        .unwrap_or_else(|| std::io::Error::other(message))
}

/// A regular file's bytes, within the budget. `shown` names it in errors.
fn read_regular(path: &Path, shown: &str, budget: &mut Budget) -> Result<Vec<u8>, SourceError> {
    let io = |source| SourceError::Io {
        path: path.to_path_buf(),
        source,
    };
    let not_regular = |file_type: &std::fs::FileType| SourceError::Refused {
        path: shown.to_owned(),
        reason: format!("{}, not a regular file", kind_of(file_type)),
    };
    // Devices and FIFOs are refused before they are opened (opening some has effects).
    let metadata = std::fs::symlink_metadata(path).map_err(io)?;
    if !metadata.is_file() {
        return Err(not_regular(&metadata.file_type()));
    }
    // O_NONBLOCK: opening a FIFO does not wait for a writer; O_NOFOLLOW: `path` is resolved
    // already, so a link appearing here since is refused rather than followed.
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOFOLLOW)
        .open(path)
        .map_err(|err| match err.raw_os_error() {
            Some(libc::ELOOP) => SourceError::Refused {
                path: shown.to_owned(),
                reason: "became a symbolic link while the fleet was read".into(),
            },
            _ => io(err),
        })?;
    let metadata = file.metadata().map_err(io)?;
    if !metadata.is_file() {
        return Err(not_regular(&metadata.file_type()));
    }
    budget.admit(shown, metadata.len())?;
    read_capped(&mut file, budget.limits().max_file_bytes).map_err(|err| match err {
        ReadCapped::Io(source) => io(source),
        ReadCapped::Over(size) => SourceError::TooLarge {
            path: shown.to_owned(),
            size,
            limit: budget.limits().max_file_bytes,
            whole_fleet: false,
        },
    })
}

enum ReadCapped {
    Io(std::io::Error),
    /// The file grew past the limit while it was read (at least this many bytes).
    Over(u64),
}

fn read_capped(file: &mut File, limit: u64) -> Result<Vec<u8>, ReadCapped> {
    let mut bytes = Vec::new();
    file.take(limit.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(ReadCapped::Io)?;
    if bytes.len() as u64 > limit {
        return Err(ReadCapped::Over(bytes.len() as u64));
    }
    Ok(bytes)
}

/// What a non-regular file is, as operators say it.
fn kind_of(file_type: &std::fs::FileType) -> &'static str {
    if file_type.is_fifo() {
        "a FIFO (named pipe)"
    } else if file_type.is_char_device() {
        "a character device"
    } else if file_type.is_block_device() {
        "a block device"
    } else if file_type.is_socket() {
        "a socket"
    } else if file_type.is_symlink() {
        "a symbolic link"
    } else if file_type.is_dir() {
        "a directory"
    } else {
        "not a regular file"
    }
}

/// `sha256:<hex>` over every file's path and bytes, in path order.
pub(super) fn content_hash(files: &[SourceFile]) -> String {
    let mut hasher = ring::digest::Context::new(&ring::digest::SHA256);
    for file in files {
        hasher.update(file.path.as_bytes());
        hasher.update(&[0]);
        hasher.update(&(file.bytes.len() as u64).to_le_bytes());
        hasher.update(&file.bytes);
    }
    format!("sha256:{}", hex::encode(hasher.finish()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A working tree's id is compared with ids written before (a plan file's revision): it
    /// stays SHA-256 over each path, a NUL, the length (8 bytes, little-endian) and the bytes
    /// (the value is Python's `hashlib.sha256` of the same stream).
    #[test]
    fn content_hash_is_sha256_of_paths_lengths_and_bytes() {
        let files = [
            SourceFile {
                path: "nodes/a.yaml".into(),
                bytes: b"kind: Node\n".to_vec(),
            },
            SourceFile {
                path: "site.yaml".into(),
                bytes: Vec::new(),
            },
        ];
        assert_eq!(
            content_hash(&files),
            "sha256:b1204d93fe6a379215401dda8aeab06f9bae425f03911796a9e31c09b0838aba"
        );
    }
}
