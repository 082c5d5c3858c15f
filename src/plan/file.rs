//! Plan files (DESIGN.md §4): `metalform plan --out PLANFILE` writes the plan as JSON (the
//! same document `--format json` prints); `metalform apply PLANFILE` reads it back. The file
//! names its fleet revision, snapshot fingerprint, store serial and parent; its id is the hash
//! of its content, checked on load, so an edited or truncated file is refused rather than run.
//!
//! The planner itself is pure; this module is the file I/O around it.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use super::document::content_id;
use super::types::{PLAN_FORMAT, Plan};

#[derive(Debug, thiserror::Error)]
pub enum PlanFileError {
    #[error("cannot read the plan file {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot write the plan file {path}: {source}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}:{line}:{column}: not a metalform plan: {message}")]
    Parse {
        path: PathBuf,
        line: usize,
        column: usize,
        message: String,
    },
    #[error("{path}: plan format {found} is not the format this metalform reads ({PLAN_FORMAT})")]
    Format { path: PathBuf, found: u32 },
    #[error(
        "{path}: the plan's content does not match its id {id} (the file was changed after `metalform plan` wrote it)"
    )]
    Modified { path: PathBuf, id: String },
}

impl PlanFileError {
    /// What to do.
    pub fn hint(&self) -> &'static str {
        match self {
            PlanFileError::Read { .. } => "check the path of the plan file",
            PlanFileError::Write { .. } => {
                "check that the directory exists and is writable, or pick another --out path"
            }
            PlanFileError::Parse { .. } | PlanFileError::Modified { .. } => {
                "plan again with `metalform plan --out PLANFILE`; plan files are not edited by hand"
            }
            PlanFileError::Format { .. } => {
                "plan again with this metalform (`metalform plan --out PLANFILE`)"
            }
        }
    }
}

/// The plan as pretty JSON: the plan file, and what `metalform plan --format json` prints.
pub fn to_json(plan: &Plan) -> String {
    let mut text = serde_json::to_string_pretty(plan).expect("a plan serialises");
    text.push('\n');
    text
}

/// Write the plan file, atomically (a reader never sees half a plan).
pub fn save(plan: &Plan, path: &Path) -> Result<(), PlanFileError> {
    let write_error = |source| PlanFileError::Write {
        path: path.to_path_buf(),
        source,
    };
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let mut file = tempfile::NamedTempFile::new_in(dir).map_err(write_error)?;
    file.write_all(to_json(plan).as_bytes())
        .and_then(|()| file.as_file().sync_all())
        .map_err(write_error)?;
    file.persist(path).map_err(|e| write_error(e.error))?;
    Ok(())
}

/// Read a plan file and check that its content still matches its id.
pub fn load(path: &Path) -> Result<Plan, PlanFileError> {
    let text = std::fs::read_to_string(path).map_err(|source| PlanFileError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    from_json(&text, path)
}

/// Parse a plan document (`path` names it in errors).
pub fn from_json(text: &str, path: &Path) -> Result<Plan, PlanFileError> {
    #[derive(serde::Deserialize)]
    struct Header {
        format: u32,
    }
    let parse_error = |err: serde_json::Error| PlanFileError::Parse {
        path: path.to_path_buf(),
        line: err.line(),
        column: err.column(),
        message: err.to_string(),
    };
    let header: Header = serde_json::from_str(text).map_err(parse_error)?;
    if header.format != PLAN_FORMAT {
        return Err(PlanFileError::Format {
            path: path.to_path_buf(),
            found: header.format,
        });
    }
    let plan: Plan = serde_json::from_str(text).map_err(parse_error)?;
    if content_id(&plan) != plan.id {
        return Err(PlanFileError::Modified {
            path: path.to_path_buf(),
            id: plan.id,
        });
    }
    Ok(plan)
}
