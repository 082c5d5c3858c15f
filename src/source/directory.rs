//! Reading a fleet from disk: a directory tree, or one manifest file (DESIGN.md §3 `--fleet`).

use std::path::Path;

use sha2::{Digest, Sha256};

use super::{Snapshot, SourceError, SourceFile, display_root_of, is_manifest_name, is_walked_dir};
use crate::model::Revision;

pub(super) fn read(path: &Path) -> Result<Snapshot, SourceError> {
    let io = |source| SourceError::Io {
        path: path.to_path_buf(),
        source,
    };
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
        files.push(SourceFile {
            path: name,
            bytes: std::fs::read(path).map_err(io)?,
        });
    } else {
        display_root = display_root_of(path);
        walk(path, "", &mut files)?;
        files.sort_by(|a, b| a.path.cmp(&b.path));
    }
    Ok(Snapshot {
        revision: Revision::WorkingTree {
            content_hash: content_hash(&files),
        },
        display_root,
        files,
    })
}

fn walk(dir: &Path, prefix: &str, files: &mut Vec<SourceFile>) -> Result<(), SourceError> {
    let io = |path: &Path, source| SourceError::Io {
        path: path.to_path_buf(),
        source,
    };
    for entry in std::fs::read_dir(dir).map_err(|e| io(dir, e))? {
        let entry = entry.map_err(|e| io(dir, e))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let path = entry.path();
        // Follows symlinks, like an editor opening the fleet would.
        let metadata = std::fs::metadata(&path).map_err(|e| io(&path, e))?;
        let relative = format!("{prefix}{name}");
        if metadata.is_dir() {
            if is_walked_dir(&name) {
                walk(&path, &format!("{relative}/"), files)?;
            }
        } else if is_manifest_name(&name) {
            files.push(SourceFile {
                path: relative,
                bytes: std::fs::read(&path).map_err(|e| io(&path, e))?,
            });
        }
    }
    Ok(())
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
