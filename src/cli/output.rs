//! Output conventions (DESIGN.md §3): data on stdout, logs and progress on stderr, NO_COLOR.

use chrono::{DateTime, Utc};
use clap::ValueEnum;

use crate::store::StageEventRow;

/// `--format` for commands that print a report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Default)]
pub enum ReportFormat {
    #[default]
    Text,
    Json,
}

/// `--format` for commands whose output is also posted to pull requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Default)]
pub enum ReviewFormat {
    #[default]
    Text,
    Json,
    Markdown,
}

/// A plan in the asked format (`plan` and `show` print the same).
pub fn render_plan(
    plan: &crate::plan::Plan,
    format: ReviewFormat,
    show_unchanged: bool,
    max_bytes: usize,
) -> String {
    use crate::plan::render;
    match format {
        ReviewFormat::Text => render::render_text(plan, render::TextOptions { show_unchanged }),
        ReviewFormat::Json => render::render_json(plan),
        ReviewFormat::Markdown => render::render_markdown(plan, max_bytes),
    }
}

/// Colour is used only on a terminal and never when NO_COLOR is set (https://no-color.org).
pub fn use_color(stream_is_terminal: bool) -> bool {
    stream_is_terminal && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

pub fn time(t: DateTime<Utc>) -> String {
    t.format("%Y-%m-%d %H:%M:%SZ").to_string()
}

/// Left-aligned columns separated by two spaces; the last column is not padded.
pub fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            widths[i] = widths[i].max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let last = cells.len() - 1;
        let mut out = String::new();
        for (i, cell) in cells.into_iter().enumerate() {
            if i == last {
                out.push_str(cell);
            } else {
                out.push_str(&format!("{cell:<w$}  ", w = widths[i]));
            }
        }
        out.trim_end().to_owned() + "\n"
    };
    let mut out = line(header.to_vec());
    for row in rows {
        out.push_str(&line(row.iter().map(String::as_str).collect()));
    }
    out
}

/// A detail view: `key  value` lines aligned on the longest key, then the stage events under
/// `events_title`.
pub fn detail_view<K: AsRef<str>>(
    lines: &[(K, String)],
    events_title: &str,
    events: &[StageEventRow],
) -> String {
    let width = lines
        .iter()
        .map(|(k, _)| k.as_ref().len())
        .max()
        .unwrap_or(0);
    let mut out: String = lines
        .iter()
        .map(|(k, v)| format!("{:<width$}  {v}\n", k.as_ref()))
        .collect();
    if !events.is_empty() {
        out.push_str(&format!("\n{events_title}\n"));
        for event in events {
            out.push_str(&format!(
                "  {}  {}#{}  {}{}\n",
                time(event.occurred_at),
                event.stage,
                event.attempt,
                event.status,
                event
                    .message
                    .as_deref()
                    .map(|m| format!("  {m}"))
                    .unwrap_or_default()
            ));
        }
    }
    out
}
