//! Where desired state comes from (DESIGN.md §1, §3 `--fleet DIR`, `--rev REV`): a directory on
//! disk (or one manifest file), or a git revision read straight from the object database of the
//! repository holding the fleet — no checkout, so the working tree is never touched.
//!
//! A read yields a [`Snapshot`]: the manifest files (`*.yaml`, `*.yml`, `*.toml`; dot-files and
//! dot-directories such as `.metalform/` skipped) with their paths inside the fleet, and the
//! [`Revision`] they were read from.
//!
//! A fleet is input from whoever can commit to it, so the read is bounded ([`ReadLimits`],
//! docs/security.md "Hostile fleets"): regular files only (a FIFO or a device is refused
//! before it is opened), no symbolic link leading out of the fleet directory (none at all in a
//! git tree), each file and the whole fleet capped in size, directories nested at most so deep.
//! A refusal names the file and the reason, and comes before anything large is read.

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

/// How much a fleet read may take. `Default` is what the CLI and the daemon use unless
/// `METALFORM_MAX_FILE_SIZE` / `METALFORM_MAX_FLEET_SIZE` say otherwise ([`ReadLimits::from_env`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadLimits {
    /// The largest manifest file, in bytes (default 4 MiB: about 50,000 node entries).
    pub max_file_bytes: u64,
    /// All manifest files together, in bytes (default 64 MiB).
    pub max_total_bytes: u64,
    /// Directories below the fleet root (default 16).
    pub max_dir_depth: usize,
}

/// The environment variables that raise (or lower) the limits.
pub const MAX_FILE_SIZE_ENV: &str = "METALFORM_MAX_FILE_SIZE";
pub const MAX_FLEET_SIZE_ENV: &str = "METALFORM_MAX_FLEET_SIZE";

impl Default for ReadLimits {
    fn default() -> Self {
        Self {
            max_file_bytes: 4 << 20,
            max_total_bytes: 64 << 20,
            max_dir_depth: 16,
        }
    }
}

impl ReadLimits {
    /// The defaults, with `METALFORM_MAX_FILE_SIZE` and `METALFORM_MAX_FLEET_SIZE` (bytes, or
    /// a number with KiB, MiB or GiB) applied when set.
    pub fn from_env() -> Result<Self, SourceError> {
        let mut limits = Self::default();
        for (name, slot) in [
            (MAX_FILE_SIZE_ENV, &mut limits.max_file_bytes),
            (MAX_FLEET_SIZE_ENV, &mut limits.max_total_bytes),
        ] {
            if let Ok(value) = std::env::var(name) {
                *slot = parse_size(&value).ok_or_else(|| SourceError::InvalidLimit {
                    name,
                    value: value.clone(),
                })?;
            }
        }
        Ok(limits)
    }
}

/// `4194304`, `512KiB`, `4MiB`, `1GiB` (also `K`, `M`, `G`, `KB`, `MB`, `GB` as binary units).
pub fn parse_size(text: &str) -> Option<u64> {
    let text = text.trim();
    let digits = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(digits);
    let number: u64 = number.parse().ok()?;
    let shift = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        _ => return None,
    };
    number.checked_mul(1 << shift).filter(|n| *n > 0)
}

/// `4 MiB`, `700 KiB`, `12 bytes`.
pub fn show_size(bytes: u64) -> String {
    match bytes {
        n if n >= 1 << 20 && n % (1 << 20) == 0 => format!("{} MiB", n >> 20),
        n if n >= 1 << 20 => format!("{:.1} MiB", n as f64 / f64::from(1 << 20)),
        n if n >= 1 << 10 => format!("{} KiB", n >> 10),
        n => format!("{n} bytes"),
    }
}

/// What a read has used of its limits so far.
pub(crate) struct Budget {
    limits: ReadLimits,
    used: u64,
}

impl Budget {
    pub(crate) fn new(limits: ReadLimits) -> Self {
        Self { limits, used: 0 }
    }

    /// Admit a file of `size` bytes named `path` (as messages show it).
    pub(crate) fn admit(&mut self, path: &str, size: u64) -> Result<(), SourceError> {
        if size > self.limits.max_file_bytes {
            return Err(SourceError::TooLarge {
                path: path.to_owned(),
                size,
                limit: self.limits.max_file_bytes,
                whole_fleet: false,
            });
        }
        self.used = self.used.saturating_add(size);
        if self.used > self.limits.max_total_bytes {
            return Err(SourceError::TooLarge {
                path: path.to_owned(),
                size: self.used,
                limit: self.limits.max_total_bytes,
                whole_fleet: true,
            });
        }
        Ok(())
    }

    pub(crate) fn limits(&self) -> &ReadLimits {
        &self.limits
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// A file the fleet must not read: a symbolic link out of the fleet, a FIFO, a device.
    #[error("`{path}`: {reason}; not read")]
    Refused { path: String, reason: String },
    #[error("{}", too_large(path, *size, *limit, *whole_fleet))]
    TooLarge {
        path: String,
        size: u64,
        limit: u64,
        /// The fleet's total went over its cap at `path`.
        whole_fleet: bool,
    },
    #[error("{name}=`{value}` is not a size (write bytes, or a number with KiB, MiB or GiB)")]
    InvalidLimit { name: &'static str, value: String },
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

fn too_large(path: &str, size: u64, limit: u64, whole_fleet: bool) -> String {
    if whole_fleet {
        format!(
            "the fleet's manifests add up to more than {} at `{path}`; not read",
            show_size(limit)
        )
    } else {
        format!(
            "`{path}` is {}, more than the {} a manifest file may be; not read",
            show_size(size),
            show_size(limit)
        )
    }
}

impl SourceError {
    /// What the operator can do about it.
    pub fn hint(&self) -> Option<String> {
        Some(match self {
            SourceError::Refused { .. } => {
                "manifests are regular files inside the fleet directory: replace the link or special file with the file itself".into()
            }
            SourceError::TooLarge { whole_fleet: false, .. } => format!(
                "split the file, or raise the limit with {MAX_FILE_SIZE_ENV} (e.g. {MAX_FILE_SIZE_ENV}=16MiB)"
            ),
            SourceError::TooLarge { whole_fleet: true, .. } => format!(
                "check what the fleet directory holds, or raise the limit with {MAX_FLEET_SIZE_ENV} (e.g. {MAX_FLEET_SIZE_ENV}=256MiB)"
            ),
            SourceError::InvalidLimit { .. } => "e.g. 4194304, 512KiB, 16MiB or 1GiB".into(),
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

/// Read a fleet within the limits the environment sets ([`ReadLimits::from_env`]).
pub fn read(source: &FleetSource) -> Result<Snapshot, SourceError> {
    read_within(source, ReadLimits::from_env()?)
}

/// Read a fleet within `limits`.
pub fn read_within(source: &FleetSource, limits: ReadLimits) -> Result<Snapshot, SourceError> {
    let mut budget = Budget::new(limits);
    match source {
        FleetSource::Directory(path) => directory::read(path, &mut budget),
        FleetSource::GitRevision { fleet, rev } => git::read(fleet, rev, &mut budget),
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
    let mut budget = Budget::new(ReadLimits::from_env()?);
    git::read_commit(
        repo,
        commit,
        inside,
        display,
        &commit.id().to_string(),
        &mut budget,
    )
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

    #[test]
    fn sizes_read_as_bytes_or_binary_units() {
        assert_eq!(parse_size("4194304"), Some(4 << 20));
        assert_eq!(parse_size("512KiB"), Some(512 << 10));
        assert_eq!(parse_size(" 16MiB "), Some(16 << 20));
        assert_eq!(parse_size("1gib"), Some(1 << 30));
        assert_eq!(parse_size("2M"), Some(2 << 20));
        for bad in [
            "",
            "0",
            "MiB",
            "4 TiB",
            "-1",
            "1.5MiB",
            "99999999999999999999",
        ] {
            assert_eq!(parse_size(bad), None, "{bad}");
        }
        assert_eq!(show_size(4 << 20), "4 MiB");
        assert_eq!(show_size(1536 << 10), "1.5 MiB");
        assert_eq!(show_size(700 << 10), "700 KiB");
        assert_eq!(show_size(12), "12 bytes");
    }
}
