//! Reading a fleet at a git revision (DESIGN.md §3 `--rev REV`): blobs come straight from the
//! object database of the repository that holds the fleet path; nothing is checked out.

use std::path::{Component, Path, PathBuf};

use git2::{ObjectType, Repository, TreeWalkMode, TreeWalkResult};

use super::{
    Budget, Snapshot, SourceError, SourceFile, display_root_of, is_manifest_name, is_walked_dir,
    join_display,
};
use crate::model::Revision;

pub(super) fn read(fleet: &Path, rev: &str, budget: &mut Budget) -> Result<Snapshot, SourceError> {
    let absolute = absolute_through_existing(fleet)?;
    let repo = Repository::discover(nearest_existing(&absolute)).map_err(|_| {
        SourceError::NotInRepository {
            path: fleet.to_path_buf(),
        }
    })?;
    let repo_path = repo.path().to_path_buf();
    let workdir = repo.workdir().ok_or_else(|| SourceError::BareRepository {
        repo: repo_path.clone(),
    })?;
    let workdir = workdir.canonicalize().map_err(|source| SourceError::Io {
        path: workdir.to_path_buf(),
        source,
    })?;
    let inside = absolute
        .strip_prefix(&workdir)
        .map_err(|_| SourceError::NotInRepository {
            path: fleet.to_path_buf(),
        })?;
    let inside: Vec<String> = inside
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    let inside = inside.join("/");

    let commit = repo
        .revparse_single(rev)
        .and_then(|object| object.peel_to_commit())
        .map_err(|_| SourceError::UnknownRevision {
            rev: rev.to_string(),
            repo: workdir.clone(),
        })?;
    read_commit(&repo, &commit, &inside, fleet, rev, budget)
}

/// The fleet at `inside` (a `/`-separated path in the tree, `""` for the root) of `commit`;
/// `fleet` is how the operator named it (for messages), `rev` how the revision was named.
/// Bare repositories work too (the daemon reads its fetched mirror).
pub(crate) fn read_commit(
    repo: &Repository,
    commit: &git2::Commit<'_>,
    inside: &str,
    fleet: &Path,
    rev: &str,
    budget: &mut Budget,
) -> Result<Snapshot, SourceError> {
    let git_err = |err: git2::Error| SourceError::Git {
        repo: repo.path().to_path_buf(),
        message: err.message().to_string(),
    };
    let root = commit.tree().map_err(git_err)?;
    let missing = || SourceError::MissingAtRevision {
        path: if inside.is_empty() {
            ".".into()
        } else {
            inside.to_owned()
        },
        rev: rev.to_string(),
    };

    let mut files = Vec::new();
    let display_root;
    if inside.is_empty() {
        display_root = display_root_of(fleet);
        collect_tree(repo, &root, &display_root, budget, &mut files)?;
    } else {
        let entry = root.get_path(Path::new(inside)).map_err(|_| missing())?;
        match entry.kind() {
            Some(ObjectType::Tree) => {
                display_root = display_root_of(fleet);
                let tree = repo.find_tree(entry.id()).map_err(git_err)?;
                collect_tree(repo, &tree, &display_root, budget, &mut files)?;
            }
            Some(ObjectType::Blob) => {
                display_root = fleet
                    .parent()
                    .map(display_root_of)
                    .unwrap_or_else(|| ".".into());
                let name = entry.name().unwrap_or_default().to_string();
                let shown = join_display(&display_root, &name);
                let bytes = read_blob(repo, &entry, &shown, budget)?;
                files.push(SourceFile { path: name, bytes });
            }
            _ => return Err(missing()),
        }
    }
    files.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(Snapshot {
        revision: Revision::Commit {
            id: commit.id().to_string(),
        },
        display_root,
        files,
    })
}

fn collect_tree(
    repo: &Repository,
    tree: &git2::Tree<'_>,
    display_root: &str,
    budget: &mut Budget,
    files: &mut Vec<SourceFile>,
) -> Result<(), SourceError> {
    let mut failure = None;
    let max_depth = budget.limits().max_dir_depth;
    let walked = tree.walk(TreeWalkMode::PreOrder, |dir, entry| {
        let name = entry.name().unwrap_or_default();
        let depth = dir.matches('/').count();
        let result = match entry.kind() {
            Some(ObjectType::Tree) if !is_walked_dir(name) => return TreeWalkResult::Skip,
            Some(ObjectType::Tree) if depth >= max_depth => Err(SourceError::Refused {
                path: join_display(display_root, &format!("{dir}{name}")),
                reason: format!("directories nested more than {max_depth} deep"),
            }),
            Some(ObjectType::Blob) if is_manifest_name(name) => {
                let shown = join_display(display_root, &format!("{dir}{name}"));
                read_blob(repo, entry, &shown, budget).map(|bytes| {
                    files.push(SourceFile {
                        path: format!("{dir}{name}"),
                        bytes,
                    })
                })
            }
            _ => Ok(()),
        };
        match result {
            Ok(()) => TreeWalkResult::Ok,
            Err(err) => {
                failure = Some(err);
                TreeWalkResult::Abort
            }
        }
    });
    if let Some(err) = failure {
        return Err(err);
    }
    walked.map_err(|err| SourceError::Git {
        repo: repo.path().to_path_buf(),
        message: err.message().to_string(),
    })
}

/// A manifest blob's bytes, within the budget: a symbolic link (mode 120000, whose blob is the
/// link's target) is refused, and the size is read from the object header before the blob.
fn read_blob(
    repo: &Repository,
    entry: &git2::TreeEntry<'_>,
    shown: &str,
    budget: &mut Budget,
) -> Result<Vec<u8>, SourceError> {
    let git_err = |err: git2::Error| SourceError::Git {
        repo: repo.path().to_path_buf(),
        message: err.message().to_string(),
    };
    if entry.filemode() == i32::from(git2::FileMode::Link) {
        return Err(SourceError::Refused {
            path: shown.to_owned(),
            reason: "a symbolic link in the git tree (links are not followed in a revision)".into(),
        });
    }
    let (size, _) = repo
        .odb()
        .and_then(|odb| odb.read_header(entry.id()))
        .map_err(git_err)?;
    budget.admit(shown, size as u64)?;
    let blob = repo.find_blob(entry.id()).map_err(git_err)?;
    Ok(blob.content().to_vec())
}

/// The absolute, symlink-resolved form of `path`, even when its last components do not exist on
/// disk any more (a fleet directory deleted in the work tree can still be read at an old rev).
fn absolute_through_existing(path: &Path) -> Result<PathBuf, SourceError> {
    let absolute = std::path::absolute(path).map_err(|source| SourceError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let existing = nearest_existing(&absolute);
    let canonical = existing.canonicalize().map_err(|source| SourceError::Io {
        path: existing.to_path_buf(),
        source,
    })?;
    let rest = absolute.strip_prefix(existing).unwrap_or(Path::new(""));
    let mut result = canonical;
    for component in rest.components() {
        match component {
            Component::ParentDir => {
                result.pop();
            }
            Component::Normal(part) => result.push(part),
            _ => {}
        }
    }
    Ok(result)
}

fn nearest_existing(path: &Path) -> &Path {
    path.ancestors()
        .find(|p| p.exists())
        .unwrap_or(Path::new("/"))
}
