//! `metalform diff --base REV [--head REV] [--fleet DIR] [--format text|json|markdown]`
//! (DESIGN.md §3): the desired-state change between two revisions of a fleet, per site, profile
//! and node, with destructive changes flagged. Head defaults to the files on disk.
//!
//! The comparison is `crate::model::diff`; this file renders it. Markdown is for PR comments: a
//! summary table, the destructive changes, details in collapsible sections, and a size cap that
//! says exactly what it left out. JSON is documented in docs/diff-json.md.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;

use serde::Serialize;
use serde_json::Value;

use super::output::ReviewFormat;
use super::validate::read_snapshot;
use super::{CliError, Exit};
use crate::manifest;
use crate::model::diff::{
    ChangeKind, EntityChange, EntityKind, FieldChange, FleetDiff, KindSummary,
};
use crate::model::{Fleet, diff};
use crate::sanitize::{markdown, terminal};
use crate::source::FleetSource;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Fleet directory (holding sites/, profiles/, nodes/), inside a git work tree.
    #[arg(long, value_name = "DIR", default_value = ".")]
    pub fleet: PathBuf,
    /// The revision to compare from (e.g. `main`, `HEAD~1`, a commit id).
    #[arg(long, value_name = "REV")]
    pub base: String,
    /// The revision to compare to; default: the files on disk (working tree).
    #[arg(long, value_name = "REV")]
    pub head: Option<String>,
    #[arg(long, value_enum, default_value_t)]
    pub format: ReviewFormat,
    /// Markdown only: the largest comment to produce, in bytes (GitHub allows 65536).
    #[arg(long, value_name = "BYTES", default_value_t = 60_000)]
    pub max_bytes: usize,
}

pub fn run(args: Args) -> Result<Exit, CliError> {
    let base = load_side(
        &FleetSource::new(&args.fleet, Some(&args.base)),
        "base",
        &args,
    )?;
    let head = load_side(
        &FleetSource::new(&args.fleet, args.head.as_deref()),
        "head",
        &args,
    )?;
    let diff = diff::diff(&base, &head);
    let output = match args.format {
        ReviewFormat::Text => render_text(&diff),
        ReviewFormat::Json => render_json(&diff),
        ReviewFormat::Markdown => render_markdown(&diff, args.max_bytes),
    };
    print!("{output}");
    Ok(Exit::Success)
}

/// Read and validate one side; an invalid side is reported with its diagnostics on stderr.
fn load_side(source: &FleetSource, side: &str, args: &Args) -> Result<Fleet, CliError> {
    let snapshot = read_snapshot(source)?;
    let validation = manifest::load(&snapshot);
    if let Some(fleet) = validation.fleet {
        return Ok(fleet);
    }
    for diagnostic in &validation.errors {
        eprintln!("{diagnostic}");
    }
    let rev = match source {
        FleetSource::GitRevision { rev, .. } => format!(" --rev {rev}"),
        FleetSource::Directory(_) => String::new(),
    };
    Err(CliError::user(format!(
        "the {side} fleet ({}) has {} error(s); diff compares valid fleets",
        snapshot.revision,
        validation.errors.len()
    ))
    .hint(format!(
        "run `metalform validate --fleet {}{rev}` and fix them",
        args.fleet.display()
    )))
}

/// A field value as text: strings bare (quoted when they hold spaces or are empty), lists in
/// brackets, absence as `(unset)`.
fn show(value: Option<&Value>) -> String {
    match value {
        None => "(unset)".into(),
        Some(Value::String(s)) if s.is_empty() || s.contains(char::is_whitespace) => {
            serde_json::to_string(s).unwrap_or_default()
        }
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(items)) => {
            let items: Vec<String> = items.iter().map(|v| show(Some(v))).collect();
            format!("[{}]", items.join(", "))
        }
        Some(other) => other.to_string(),
    }
}

fn symbol(change: ChangeKind) -> char {
    match change {
        ChangeKind::Added => '+',
        ChangeKind::Removed => '-',
        ChangeKind::Changed => '~',
    }
}

/// The one-line identity of an added or removed node: what a reviewer checks first.
fn node_summary(fields: &[FieldChange], added: bool) -> String {
    let get = |path: &str| {
        fields
            .iter()
            .find(|f| f.path == path)
            .and_then(|f| {
                if added {
                    f.after.as_ref()
                } else {
                    f.before.as_ref()
                }
            })
            .map(|v| show(Some(v)))
    };
    let mut parts = Vec::new();
    if let Some(group) = get("group") {
        parts.push(format!("group {group}"));
    }
    for (label, path) in [
        ("profile", "profile"),
        ("sku", "sku"),
        ("bmc", "bmc.ipmiIp"),
        ("lifecycle", "lifecycle"),
    ] {
        if let Some(value) = get(path) {
            parts.push(format!("{label} {value}"));
        }
    }
    parts.join(", ")
}

fn summary_line(diff: &FleetDiff) -> String {
    if diff.is_empty() {
        return "No desired-state changes.".into();
    }
    let summary = diff.summary();
    let mut parts = Vec::new();
    for (kind, counts) in &summary {
        let mut bits = Vec::new();
        for (n, word) in [
            (counts.added, "added"),
            (counts.changed, "changed"),
            (counts.removed, "removed"),
        ] {
            if n > 0 {
                bits.push(format!("{n} {word}"));
            }
        }
        if !bits.is_empty() {
            parts.push(format!("{}s: {}", kind.as_str(), bits.join(", ")));
        }
    }
    format!(
        "Summary: {}; {} destructive.",
        parts.join("; "),
        diff.destructive_count()
    )
}

/// The diff as text, with any control character in a value shown as an escape.
pub fn render_text(diff: &FleetDiff) -> String {
    terminal::escape(&text_unescaped(diff)).into_owned()
}

fn text_unescaped(diff: &FleetDiff) -> String {
    let mut out = format!("Fleet diff: {} → {}\n", diff.base, diff.head);
    for change in &diff.changes {
        out.push('\n');
        let marker = symbol(change.change);
        let kind = change.kind.as_str();
        match (change.kind, change.change) {
            (EntityKind::Node, ChangeKind::Added | ChangeKind::Removed) => {
                let summary = node_summary(&change.fields, change.change == ChangeKind::Added);
                let _ = writeln!(out, "{marker} {kind} {} ({summary})", change.id);
            }
            (_, ChangeKind::Removed) => {
                let _ = writeln!(out, "{marker} {kind} {}", change.id);
            }
            (_, ChangeKind::Added) => {
                let _ = writeln!(out, "{marker} {kind} {}", change.id);
                for field in &change.fields {
                    let _ = writeln!(out, "      {}: {}", field.path, show(field.after.as_ref()));
                }
            }
            (_, ChangeKind::Changed) => {
                let _ = writeln!(out, "{marker} {kind} {}", change.id);
                for field in &change.fields {
                    let _ = writeln!(
                        out,
                        "      {}: {} → {}",
                        field.path,
                        show(field.before.as_ref()),
                        show(field.after.as_ref())
                    );
                }
            }
        }
        for reason in &change.destructive {
            let _ = writeln!(out, "    ! destructive: {reason}");
        }
        for note in &change.notes {
            let _ = writeln!(out, "    note: {note}");
        }
    }
    out.push('\n');
    out.push_str(&summary_line(diff));
    out.push('\n');
    out
}

#[derive(Serialize)]
struct JsonSummary {
    sites: KindSummary,
    profiles: KindSummary,
    nodes: KindSummary,
}

/// The documented JSON shape (docs/diff-json.md).
#[derive(Serialize)]
struct JsonDiff<'a> {
    format: &'static str,
    base: &'a crate::model::Revision,
    head: &'a crate::model::Revision,
    summary: JsonSummary,
    destructive: usize,
    changes: &'a [EntityChange],
}

pub fn render_json(diff: &FleetDiff) -> String {
    let report = JsonDiff {
        format: "metalform.diff/v1",
        base: &diff.base,
        head: &diff.head,
        summary: {
            let summary = diff.summary();
            JsonSummary {
                sites: summary[&EntityKind::Site],
                profiles: summary[&EntityKind::Profile],
                nodes: summary[&EntityKind::Node],
            }
        },
        destructive: diff.destructive_count(),
        changes: &diff.changes,
    };
    let mut text = serde_json::to_string_pretty(&report).unwrap_or_default();
    text.push('\n');
    text
}

/// Inside a table cell: a code span (the same escaping as the plan's markdown).
fn cell(text: &str) -> String {
    markdown::code(text)
}

fn markdown_row(change: &EntityChange) -> String {
    let id = format!(
        "{}{}",
        if change.is_destructive() {
            "⚠️ "
        } else {
            ""
        },
        cell(&change.id)
    );
    let mut rows = String::new();
    match change.change {
        ChangeKind::Added | ChangeKind::Removed if change.kind == EntityKind::Node => {
            let summary = node_summary(&change.fields, change.change == ChangeKind::Added);
            let _ = writeln!(
                rows,
                "| {id} | {} | {} | | |",
                word(change.change),
                markdown::text(&summary)
            );
        }
        ChangeKind::Removed => {
            let _ = writeln!(rows, "| {id} | removed | | | |");
        }
        _ => {
            for (i, field) in change.fields.iter().enumerate() {
                let (first, what) = if i == 0 {
                    (id.as_str(), word(change.change))
                } else {
                    ("", "")
                };
                let _ = writeln!(
                    rows,
                    "| {first} | {what} | {} | {} | {} |",
                    cell(&field.path),
                    field
                        .before
                        .as_ref()
                        .map_or(String::new(), |v| cell(&show(Some(v)))),
                    field
                        .after
                        .as_ref()
                        .map_or(String::new(), |v| cell(&show(Some(v)))),
                );
            }
        }
    }
    for note in &change.notes {
        let _ = writeln!(rows, "| | note | {} | | |", markdown::text(note));
    }
    rows
}

fn word(change: ChangeKind) -> &'static str {
    match change {
        ChangeKind::Added => "added",
        ChangeKind::Removed => "removed",
        ChangeKind::Changed => "changed",
    }
}

/// Room kept for the note on what was left out: a third of the cap, at most 1000 bytes.
fn markdown_reserve(max_bytes: usize) -> usize {
    (max_bytes / 3).min(1_000)
}

pub fn render_markdown(diff: &FleetDiff, max_bytes: usize) -> String {
    let budget = max_bytes.saturating_sub(markdown_reserve(max_bytes)).max(1);
    let mut out = String::from("### metalform diff\n\n");
    let _ = writeln!(
        out,
        "{} → {}\n",
        cell(&diff.base.to_string()),
        cell(&diff.head.to_string())
    );
    if diff.is_empty() {
        out.push_str("No desired-state changes.\n");
        return out;
    }
    out.push_str("| | added | changed | removed | destructive |\n|---|---:|---:|---:|---:|\n");
    for (kind, c) in diff.summary() {
        let _ = writeln!(
            out,
            "| {}s | {} | {} | {} | {} |",
            kind.as_str(),
            c.added,
            c.changed,
            c.removed,
            c.destructive
        );
    }
    out.push('\n');

    // What was left out, by kind and change: (kind, change) -> (count, first id, last id).
    let mut omitted: BTreeMap<(EntityKind, ChangeKind), (usize, String, String)> = BTreeMap::new();
    let mut omit = |change: &EntityChange| {
        let entry = omitted
            .entry((change.kind, change.change))
            .or_insert_with(|| (0, change.id.clone(), change.id.clone()));
        entry.0 += 1;
        entry.2 = change.id.clone();
    };

    let destructive: Vec<&EntityChange> =
        diff.changes.iter().filter(|c| c.is_destructive()).collect();
    let mut destructive_left_out = 0;
    if !destructive.is_empty() {
        let _ = writeln!(
            out,
            "#### ⚠️ Destructive once applied ({})\n",
            destructive.len()
        );
        for change in &destructive {
            let line = format!(
                "- **{} {}**: {}\n",
                change.kind.as_str(),
                markdown::text(&change.id),
                markdown::text(&change.destructive.join("; "))
            );
            if out.len() + line.len() > budget {
                destructive_left_out += 1;
                continue;
            }
            out.push_str(&line);
        }
        out.push('\n');
    }

    for kind in [EntityKind::Site, EntityKind::Profile, EntityKind::Node] {
        let changes: Vec<&EntityChange> = diff.changes.iter().filter(|c| c.kind == kind).collect();
        if changes.is_empty() {
            continue;
        }
        let open = format!(
            "<details><summary>{}s: {} change(s)</summary>\n\n| {} | change | field | before | after |\n|---|---|---|---|---|\n",
            capitalise(kind.as_str()),
            changes.len(),
            kind.as_str()
        );
        let close = "\n</details>\n\n";
        let rows: Vec<String> = changes.iter().map(|c| markdown_row(c)).collect();
        // Open a section only when at least its first row fits.
        if out.len() + open.len() + rows[0].len() + close.len() > budget {
            changes.iter().for_each(|c| omit(c));
            continue;
        }
        out.push_str(&open);
        for (change, rows) in changes.iter().zip(&rows) {
            if out.len() + rows.len() + close.len() > budget {
                omit(change);
                continue;
            }
            out.push_str(rows);
        }
        out.push_str(close);
    }

    if !omitted.is_empty() || destructive_left_out > 0 {
        let _ = write!(out, "**Left out to stay under {max_bytes} bytes:** ");
        let mut parts: Vec<String> = omitted
            .iter()
            .map(|((kind, change), (count, first, last))| {
                let range = if first == last {
                    markdown::code(first)
                } else {
                    format!("{} … {}", markdown::code(first), markdown::code(last))
                };
                format!("{count} {} {}(s) ({range})", word(*change), kind.as_str())
            })
            .collect();
        if destructive_left_out > 0 {
            parts.push(format!(
                "{destructive_left_out} line(s) of the destructive list"
            ));
        }
        out.push_str(&parts.join("; "));
        out.push_str(". Run `metalform diff --format text` for the full diff.\n");
    }
    out
}

fn capitalise(word: &str) -> String {
    let mut chars = word.chars();
    chars
        .next()
        .map(|c| c.to_uppercase().chain(chars).collect())
        .unwrap_or_default()
}
