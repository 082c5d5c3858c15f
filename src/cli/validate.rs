//! `metalform validate [--fleet DIR] [--rev REV] [--format text|json] [--deny-warnings]`
//! (DESIGN.md §2, §3): every problem of a fleet at once, each at FILE:LINE:COL; exit 1 when
//! there is an error (or, with --deny-warnings, a warning).

use std::path::PathBuf;

use serde::Serialize;

use super::output::ReportFormat;
use super::{CliError, Exit};
use crate::manifest::{self, Diagnostic, Validation};
use crate::model::Revision;
use crate::source::{self, FleetSource, Snapshot, SourceError};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Fleet directory (holding sites/, profiles/, nodes/), or one manifest file.
    #[arg(long, value_name = "DIR", default_value = ".")]
    pub fleet: PathBuf,
    /// Validate the fleet as of this git revision (commit, branch, tag), read from the
    /// repository's object database without a checkout.
    #[arg(long, value_name = "REV")]
    pub rev: Option<String>,
    #[arg(long, value_enum, default_value_t)]
    pub format: ReportFormat,
    /// Fail (exit 1) on warnings too.
    #[arg(long)]
    pub deny_warnings: bool,
}

pub fn run(args: Args) -> Result<Exit, CliError> {
    let snapshot = super::fleet_dir::read(&args.fleet, args.rev.as_deref())?;
    let validation = manifest::load(&snapshot);
    let failed =
        !validation.errors.is_empty() || (args.deny_warnings && !validation.warnings.is_empty());
    let output = match args.format {
        ReportFormat::Text => {
            render_text(&args.fleet.display().to_string(), &snapshot, &validation)
        }
        ReportFormat::Json => render_json(&snapshot, &validation, !failed),
    };
    print!("{output}");
    Ok(if failed {
        Exit::Findings
    } else {
        Exit::Success
    })
}

/// Read a fleet, turning a source problem into a user error with its hint.
pub(super) fn read_snapshot(source: &FleetSource) -> Result<Snapshot, CliError> {
    source::read(source).map_err(source_error)
}

pub(super) fn source_error(err: SourceError) -> CliError {
    let hint = err.hint();
    let error = CliError::user(err.to_string());
    match hint {
        Some(hint) => error.hint(hint),
        None => error,
    }
}

/// Diagnostics, then one summary line.
fn render_text(fleet: &str, snapshot: &Snapshot, validation: &Validation) -> String {
    let mut out = String::new();
    for diagnostic in validation.errors.iter().chain(&validation.warnings) {
        out.push_str(&diagnostic.to_string());
        out.push('\n');
    }
    let plural = |n: usize, word: &str| format!("{n} {word}{}", if n == 1 { "" } else { "s" });
    let subject = format!("fleet `{fleet}` at {}", snapshot.revision);
    let warnings = plural(validation.warnings.len(), "warning");
    let summary = match &validation.fleet {
        Some(fleet) => format!(
            "{subject}: valid — {}, {}, {} from {}; {warnings}",
            plural(fleet.sites.len(), "site"),
            plural(fleet.profiles.len(), "profile"),
            plural(fleet.nodes.len(), "node"),
            plural(validation.files, "file"),
        ),
        None => format!(
            "{subject}: invalid — {}, {warnings} in {}",
            plural(validation.errors.len(), "error"),
            plural(validation.files, "file"),
        ),
    };
    if !out.is_empty() {
        out.push('\n');
    }
    out.push_str(&summary);
    out.push('\n');
    out
}

#[derive(Serialize)]
struct JsonReport<'a> {
    valid: bool,
    fleet: &'a str,
    revision: &'a Revision,
    files: usize,
    documents: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    counts: Option<Counts>,
    errors: &'a [Diagnostic],
    warnings: &'a [Diagnostic],
}

#[derive(Serialize)]
struct Counts {
    sites: usize,
    profiles: usize,
    nodes: usize,
}

fn render_json(snapshot: &Snapshot, validation: &Validation, valid: bool) -> String {
    let report = JsonReport {
        valid,
        fleet: &snapshot.display_root,
        revision: &snapshot.revision,
        files: validation.files,
        documents: validation.documents,
        counts: validation.fleet.as_ref().map(|f| Counts {
            sites: f.sites.len(),
            profiles: f.profiles.len(),
            nodes: f.nodes.len(),
        }),
        errors: &validation.errors,
        warnings: &validation.warnings,
    };
    let mut text = serde_json::to_string_pretty(&report).unwrap_or_default();
    text.push('\n');
    text
}
