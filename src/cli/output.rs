//! Output conventions (DESIGN.md §3): data on stdout, logs and progress on stderr, NO_COLOR.

use clap::ValueEnum;

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

/// Colour is used only on a terminal and never when NO_COLOR is set (https://no-color.org).
pub fn use_color(stream_is_terminal: bool) -> bool {
    stream_is_terminal && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}
