//! Manifests (DESIGN.md §2, seed 000 §3–§4.1): raw spanned documents -> validated typed model,
//! with diagnostics at file:line:col.
//!
//! The pipeline, per fleet snapshot: parse every file (YAML: several documents per file; TOML:
//! one) into a spanned tree; check each document against its kind's JSON Schema (schema/,
//! embedded); deserialise the documents the schema accepted; resolve them into the model while
//! running the semantic checks (references, duplicates, addresses, durations, regexes,
//! lifecycle rules). Every problem is reported at once; warnings are kept apart. A fleet is
//! returned only when there is no error.

pub mod csv_import;
mod diagnostic;
pub mod document;
pub mod maas_import;
mod provisioner;
mod resolve;
pub mod schema;
mod suggest;
pub(crate) mod toml;
pub mod tree;
pub(crate) mod yaml;

use std::sync::Arc;

pub use diagnostic::{Diagnostic, Severity};
pub use schema::Kind;
pub use yaml::SyntaxError;

use crate::model::Fleet;
use crate::source::{FleetSource, Snapshot, SourceError};
use tree::{Node, PathSegment, display_path};

/// The outcome of validating a snapshot.
#[derive(Debug, Clone)]
pub struct Validation {
    /// The resolved fleet; `None` when there is any error.
    pub fleet: Option<Fleet>,
    /// Sorted by file and position.
    pub errors: Vec<Diagnostic>,
    /// Sorted by file and position.
    pub warnings: Vec<Diagnostic>,
    /// What was read.
    pub files: usize,
    pub documents: usize,
}

/// A fleet that loaded without errors, with the warnings it produced.
#[derive(Debug, Clone)]
pub struct Loaded {
    pub fleet: Fleet,
    pub warnings: Vec<Diagnostic>,
}

#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error(transparent)]
    Source(#[from] SourceError),
    #[error("the fleet has {} error(s); first: {}", errors.len(), errors.first().map(Diagnostic::headline).unwrap_or_default())]
    Invalid {
        errors: Vec<Diagnostic>,
        warnings: Vec<Diagnostic>,
    },
}

/// Read and validate a fleet; what `plan`, `apply` and the daemon call.
pub fn load_fleet(source: &FleetSource) -> Result<Loaded, LoadError> {
    let snapshot = crate::source::read(source)?;
    let validation = load(&snapshot);
    match validation.fleet {
        Some(fleet) => Ok(Loaded {
            fleet,
            warnings: validation.warnings,
        }),
        None => Err(LoadError::Invalid {
            errors: validation.errors,
            warnings: validation.warnings,
        }),
    }
}

/// One parsed document and where it came from.
pub(crate) struct ParsedDocument {
    pub file: Arc<str>,
    pub root: Node,
}

/// Collects diagnostics, locating field paths in their documents.
#[derive(Default)]
pub(crate) struct Findings {
    pub diagnostics: Vec<Diagnostic>,
}

impl Findings {
    /// A finding at `path` inside `document`; `at_key` points at the field name rather than
    /// its value.
    #[allow(clippy::too_many_arguments)]
    pub fn add(
        &mut self,
        severity: Severity,
        document: &ParsedDocument,
        path: &[PathSegment],
        at_key: bool,
        code: &'static str,
        message: String,
        hint: Option<String>,
    ) {
        let located = document.root.locate(path);
        let pos = match located.key_pos {
            Some(key) if at_key || !located.found => key,
            _ => located.value_pos,
        };
        self.diagnostics.push(Diagnostic {
            severity,
            code,
            file: document.file.to_string(),
            line: pos.line,
            column: pos.column,
            path: display_path(path),
            message,
            hint,
        });
    }

    pub fn error(
        &mut self,
        document: &ParsedDocument,
        path: &[PathSegment],
        code: &'static str,
        message: String,
        hint: Option<String>,
    ) {
        self.add(Severity::Error, document, path, false, code, message, hint);
    }

    pub fn warning(
        &mut self,
        document: &ParsedDocument,
        path: &[PathSegment],
        code: &'static str,
        message: String,
        hint: Option<String>,
    ) {
        self.add(
            Severity::Warning,
            document,
            path,
            false,
            code,
            message,
            hint,
        );
    }

    /// A finding about a whole file (it does not parse, it is empty).
    fn file(
        &mut self,
        severity: Severity,
        file: &str,
        pos: tree::Pos,
        code: &'static str,
        message: String,
        hint: Option<String>,
    ) {
        self.diagnostics.push(Diagnostic {
            severity,
            code,
            file: file.to_string(),
            line: pos.line.max(1),
            column: pos.column.max(1),
            path: String::new(),
            message,
            hint,
        });
    }
}

/// Validate a snapshot and, when it has no errors, resolve it into a fleet.
pub fn load(snapshot: &Snapshot) -> Validation {
    let mut findings = Findings::default();
    let mut documents = Vec::new();
    let mut typed = Vec::new();
    for part in read_files(snapshot) {
        let offset = documents.len();
        documents.extend(part.documents);
        typed.extend(part.typed.into_iter().map(|(i, t)| (offset + i, t)));
        findings.diagnostics.extend(part.findings.diagnostics);
    }
    let fleet = resolve::resolve(&documents, &typed, snapshot.revision.clone(), &mut findings);
    let (mut errors, mut warnings): (Vec<_>, Vec<_>) = findings
        .diagnostics
        .into_iter()
        .partition(|d| d.severity == Severity::Error);
    errors.sort_by(|a, b| a.sort_key().cmp(&b.sort_key()));
    warnings.sort_by(|a, b| a.sort_key().cmp(&b.sort_key()));
    Validation {
        fleet: if errors.is_empty() { fleet } else { None },
        errors,
        warnings,
        files: snapshot.files.len(),
        documents: documents.len(),
    }
}

/// The documents of one manifest file as spanned trees: every document of a YAML stream, or
/// the one document of a `.toml` file.
pub fn parse_documents(path: &str, text: &str) -> Result<Vec<Node>, SyntaxError> {
    if path.ends_with(".toml") {
        toml::parse(text).map(|doc| vec![doc])
    } else {
        yaml::parse(text)
    }
}

/// The documents of some files, each checked against its schema, with what that found.
#[derive(Default)]
struct FilesRead {
    documents: Vec<ParsedDocument>,
    /// Index into `documents`, typed form (documents the schema accepted).
    typed: Vec<(usize, resolve::Typed)>,
    findings: Findings,
}

/// Below this many bytes of manifests, threads cost more than they save.
const PARALLEL_BYTES: usize = 256 * 1024;

/// Parse and schema-check every file. Files are independent, so a large fleet is split into
/// contiguous runs of files of about equal size, one per core; results keep file order.
fn read_files(snapshot: &Snapshot) -> Vec<FilesRead> {
    let total: usize = snapshot.files.iter().map(|f| f.bytes.len()).sum();
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(8);
    let read = |files: &[crate::source::SourceFile]| {
        let mut out = FilesRead::default();
        for file in files {
            let display: Arc<str> = snapshot.display_path(file).into();
            let first = out.documents.len();
            parse_file(
                &display,
                &file.path,
                &file.bytes,
                &mut out.documents,
                &mut out.findings,
            );
            for i in first..out.documents.len() {
                if let Some(typed) = resolve::classify(&out.documents[i], &mut out.findings) {
                    out.typed.push((i, typed));
                }
            }
        }
        out
    };
    if threads < 2 || total < PARALLEL_BYTES {
        return vec![read(&snapshot.files)];
    }
    let mut chunks = Vec::new();
    let (mut start, mut bytes) = (0, 0);
    for (i, file) in snapshot.files.iter().enumerate() {
        bytes += file.bytes.len();
        if bytes * threads >= total * (chunks.len() + 1) {
            chunks.push(&snapshot.files[start..=i]);
            start = i + 1;
        }
    }
    if start < snapshot.files.len() {
        chunks.push(&snapshot.files[start..]);
    }
    std::thread::scope(|scope| {
        let handles: Vec<_> = chunks
            .into_iter()
            .map(|chunk| {
                scope.spawn(move || {
                    crate::memory::thread_started();
                    read(chunk)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
            })
            .collect()
    })
}

fn parse_file(
    display: &Arc<str>,
    path: &str,
    bytes: &[u8],
    documents: &mut Vec<ParsedDocument>,
    findings: &mut Findings,
) {
    let start = tree::Pos { line: 1, column: 1 };
    let text = match std::str::from_utf8(bytes) {
        Ok(text) => text,
        Err(err) => {
            let before = &bytes[..err.valid_up_to()];
            let line = before.iter().filter(|b| **b == b'\n').count() as u32 + 1;
            findings.file(
                Severity::Error,
                display,
                tree::Pos { line, column: 1 },
                "not-utf8",
                "the file is not UTF-8 text".into(),
                Some("save manifests as UTF-8".into()),
            );
            return;
        }
    };
    let parsed = if path.ends_with(".toml") {
        toml::parse(text)
            .map(|doc| vec![doc])
            .map_err(|e| (e, "toml-syntax", "TOML"))
    } else {
        yaml::parse(text).map_err(|e| (e, "yaml-syntax", "YAML"))
    };
    match parsed {
        Ok(parsed) if parsed.is_empty() => findings.file(
            Severity::Warning,
            display,
            start,
            "empty-file",
            "the file holds no documents".into(),
            None,
        ),
        Ok(parsed) => documents.extend(parsed.into_iter().map(|root| ParsedDocument {
            file: display.clone(),
            root,
        })),
        Err((err, code, language)) => findings.file(
            Severity::Error,
            display,
            err.pos,
            code,
            format!("{language} syntax: {}", err.message),
            None,
        ),
    }
}
