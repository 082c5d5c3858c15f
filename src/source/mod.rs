//! Where desired state comes from (DESIGN.md §1, §3 `--fleet DIR`, `--rev REV`): a directory on
//! disk (or one manifest file), or a git revision read straight from the object database of the
//! repository holding the fleet — no checkout, so the working tree is never touched.
//!
//! A read yields a [`Snapshot`]: the manifest files (`*.yaml`, `*.yml`, `*.toml`; dot-files and
//! dot-directories such as `.metalform/` skipped) with their paths inside the fleet, and the
//! [`Revision`] they were read from.

mod directory;
mod git;

use std::path::{Path, PathBuf};

use crate::model::Revision;

/// Which fleet to read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FleetSource {
    /// Files on disk: a fleet directory, or a single manifest file.
    Directory(PathBuf),
    /// The fleet directory (or file) as it is in a git revision of the repository that holds it.
    GitRevision { fleet: PathBuf, rev: String },
}

impl FleetSource {
    /// `--fleet DIR` plus an optional `--rev REV`.
    pub fn new(fleet: impl Into<PathBuf>, rev: Option<&str>) -> Self {
        let fleet = fleet.into();
        match rev {
            Some(rev) => FleetSource::GitRevision {
                fleet,
                rev: rev.to_string(),
            },
            None => FleetSource::Directory(fleet),
        }
    }

    pub fn fleet_path(&self) -> &Path {
        match self {
            FleetSource::Directory(path) | FleetSource::GitRevision { fleet: path, .. } => path,
        }
    }
}

/// One manifest file of a snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceFile {
    /// Path inside the fleet, `/`-separated (e.g. `nodes/rack-c07.yaml`).
    pub path: String,
    /// The bytes as stored; decoding (UTF-8) is the manifest loader's job so it can report a
    /// bad file with its name.
    pub bytes: Vec<u8>,
}

/// The manifest files of a fleet at one revision, ordered by path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    pub revision: Revision,
    /// How the operator named the fleet (`fleet`, `.`, `examples/invalid`); prefixed to file
    /// paths in messages so they can be opened as printed.
    pub display_root: String,
    pub files: Vec<SourceFile>,
}

impl Snapshot {
    /// The path of a file as messages show it.
    pub fn display_path(&self, file: &SourceFile) -> String {
        join_display(&self.display_root, &file.path)
    }
}

fn join_display(root: &str, path: &str) -> String {
    match root {
        "" | "." => path.to_string(),
        root => format!("{}/{path}", root.trim_end_matches('/')),
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    #[error("fleet path `{path}` does not exist")]
    NotFound { path: PathBuf },
    #[error("cannot read `{path}`: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("`{path}` is not inside a git repository, so --rev cannot be read")]
    NotInRepository { path: PathBuf },
    #[error("the repository at `{repo}` is bare; --rev needs the fleet path inside a work tree")]
    BareRepository { repo: PathBuf },
    #[error("unknown revision `{rev}` in the repository at `{repo}`")]
    UnknownRevision { rev: String, repo: PathBuf },
    #[error("`{path}` does not exist in revision `{rev}`")]
    MissingAtRevision { path: String, rev: String },
    #[error("git error reading `{repo}`: {message}")]
    Git { repo: PathBuf, message: String },
}

impl SourceError {
    /// What the operator can do about it.
    pub fn hint(&self) -> Option<String> {
        Some(match self {
            SourceError::NotFound { .. } => {
                "pass --fleet DIR pointing at a directory with sites/, profiles/ and nodes/".into()
            }
            SourceError::NotInRepository { .. } => {
                "run without --rev to read the files on disk, or point --fleet into a git work tree"
                    .into()
            }
            SourceError::UnknownRevision { .. } => {
                "use a commit id, branch or tag that exists (see `git log --oneline`); fetch remote branches first (`git fetch origin`)".into()
            }
            SourceError::MissingAtRevision { .. } => {
                "the fleet directory was added later or moved; pick a newer revision or the right --fleet path".into()
            }
            _ => return None,
        })
    }
}

/// Read a fleet.
pub fn read(source: &FleetSource) -> Result<Snapshot, SourceError> {
    match source {
        FleetSource::Directory(path) => directory::read(path),
        FleetSource::GitRevision { fleet, rev } => git::read(fleet, rev),
    }
}

/// The fleet at `inside` (`/`-separated, `""` for the root) of a commit of an open repository,
/// bare or not — the daemon reads the mirror it fetched. `display` is prefixed to file paths
/// in messages.
pub fn read_commit(
    repo: &git2::Repository,
    commit: &git2::Commit<'_>,
    inside: &str,
    display: &Path,
) -> Result<Snapshot, SourceError> {
    git::read_commit(repo, commit, inside, display, &commit.id().to_string())
}

/// Whether a file name is a manifest the fleet reads.
fn is_manifest_name(name: &str) -> bool {
    !name.starts_with('.')
        && [".yaml", ".yml", ".toml"]
            .iter()
            .any(|ext| name.len() > ext.len() && name.ends_with(ext))
}

/// Whether a directory is walked: dot-directories (`.git`, `.metalform`) are not.
fn is_walked_dir(name: &str) -> bool {
    !name.starts_with('.')
}

/// How the operator's fleet path is shown: as given, minus a trailing slash and a leading `./`.
fn display_root_of(path: &Path) -> String {
    let text = path.to_string_lossy();
    let text = text.strip_prefix("./").unwrap_or(&text);
    let text = text.trim_end_matches('/');
    if text.is_empty() {
        ".".into()
    } else {
        text.into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manifest_names_and_display_paths() {
        assert!(is_manifest_name("dc1.yaml"));
        assert!(is_manifest_name("dc1.yml"));
        assert!(is_manifest_name("dc1.toml"));
        assert!(!is_manifest_name(".hidden.yaml"));
        assert!(!is_manifest_name("README.md"));
        assert!(!is_manifest_name(".yaml"));
        assert!(!is_walked_dir(".metalform"));
        assert_eq!(display_root_of(Path::new("./fleet/")), "fleet");
        assert_eq!(display_root_of(Path::new(".")), ".");
        assert_eq!(join_display(".", "sites/dc1.yaml"), "sites/dc1.yaml");
        assert_eq!(
            join_display("fleet", "sites/dc1.yaml"),
            "fleet/sites/dc1.yaml"
        );
    }
}
