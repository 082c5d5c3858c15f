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
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

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
        let mut walk = Walk {
            root: &root,
            display_root: &display_root,
            budget,
            visited: HashSet::from([root.clone()]),
            files: &mut files,
        };
        walk.dir(&root, "", 0)?;
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

/// A walk of the fleet directory.
struct Walk<'a> {
    /// The fleet directory, symlinks resolved.
    root: &'a Path,
    display_root: &'a str,
    budget: &'a mut Budget,
    /// Directories entered (resolved), so a link to an ancestor cannot loop.
    visited: HashSet<PathBuf>,
    files: &'a mut Vec<SourceFile>,
}

impl Walk<'_> {
    fn dir(&mut self, dir: &Path, prefix: &str, depth: usize) -> Result<(), SourceError> {
        let io = |path: &Path, source| SourceError::Io {
            path: path.to_path_buf(),
            source,
        };
        if depth > self.budget.limits().max_dir_depth {
            return Err(SourceError::Refused {
                path: join_display(self.display_root, prefix.trim_end_matches('/')),
                reason: format!(
                    "directories nested more than {} deep",
                    self.budget.limits().max_dir_depth
                ),
            });
        }
        let mut entries = std::fs::read_dir(dir)
            .map_err(|e| io(dir, e))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| io(dir, e))?;
        // A stable order: the first problem reported is the same on every run.
        entries.sort_by_key(|e| e.file_name());
        for entry in entries {
            let name = entry.file_name().to_string_lossy().into_owned();
            // Dot-files and dot-directories (.git, .metalform) are not part of the fleet.
            if !is_walked_dir(&name) {
                continue;
            }
            let file_type = entry.file_type().map_err(|e| io(&entry.path(), e))?;
            // Only what the fleet would read is looked at: other names are never opened.
            if !(file_type.is_symlink() || file_type.is_dir() || is_manifest_name(&name)) {
                continue;
            }
            let relative = format!("{prefix}{name}");
            let shown = join_display(self.display_root, &relative);
            let target = if file_type.is_symlink() {
                match self.inside_link(&entry.path(), &name, &shown)? {
                    Some(target) => target,
                    None => continue,
                }
            } else {
                entry.path()
            };
            let metadata = std::fs::metadata(&target).map_err(|e| io(&target, e))?;
            if metadata.is_dir() {
                let resolved = target.canonicalize().map_err(|e| io(&target, e))?;
                if self.visited.insert(resolved.clone()) {
                    self.dir(&resolved, &format!("{relative}/"), depth + 1)?;
                }
            } else if is_manifest_name(&name) {
                let bytes = read_regular(&target, &shown, self.budget)?;
                self.files.push(SourceFile {
                    path: relative,
                    bytes,
                });
            }
        }
        Ok(())
    }

    /// Where a link inside the fleet leads, when that is inside the fleet too; `None` for a
    /// link whose name the fleet would not read anyway.
    fn inside_link(
        &self,
        link: &Path,
        name: &str,
        shown: &str,
    ) -> Result<Option<PathBuf>, SourceError> {
        let refused = |reason: String| SourceError::Refused {
            path: shown.to_owned(),
            reason,
        };
        let Ok(target) = link.canonicalize() else {
            // A dangling link with a manifest's name is a missing manifest.
            if is_manifest_name(name) {
                let written = std::fs::read_link(link)
                    .map(|t| t.display().to_string())
                    .unwrap_or_default();
                return Err(refused(format!(
                    "a symbolic link to `{written}`, which does not exist"
                )));
            }
            return Ok(None);
        };
        if target.starts_with(self.root) {
            return Ok(Some(target));
        }
        // Outside the fleet: refused when the fleet would read it (a manifest, or a directory
        // it would walk); a README linked from elsewhere is simply not looked at.
        if is_manifest_name(name) || target.is_dir() {
            return Err(refused(format!(
                "a symbolic link to `{}`, outside the fleet directory",
                target.display()
            )));
        }
        Ok(None)
    }
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
    let mut hasher = Sha256::new();
    for file in files {
        hasher.update(file.path.as_bytes());
        hasher.update([0]);
        hasher.update((file.bytes.len() as u64).to_le_bytes());
        hasher.update(&file.bytes);
    }
    format!("sha256:{}", hex::encode(hasher.finalize()))
}
