//! `metalform show PLANFILE [--format text|json|markdown]` (docs/plan.md): print a plan file
//! written by `metalform plan --out`, as `plan` printed it, without touching MAAS or the store.
//! A file that is not a plan, or was edited after it was written, is refused.

use std::path::PathBuf;

use super::output::{ReviewFormat, render_plan};
use super::{CliError, Exit};
use crate::plan;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The plan file (`metalform plan --out PLANFILE`).
    #[arg(value_name = "PLANFILE")]
    pub planfile: PathBuf,
    /// Output format: terraform-like text, the plan file's JSON, or markdown for a PR comment.
    #[arg(long, value_enum, default_value_t)]
    pub format: ReviewFormat,
    /// Text only: list unchanged nodes too.
    #[arg(long)]
    pub show_unchanged: bool,
    /// Markdown only: the largest comment to produce, in bytes (GitHub allows 65536).
    #[arg(long, value_name = "BYTES", default_value_t = 60_000)]
    pub max_bytes: usize,
}

pub fn run(args: Args) -> Result<Exit, CliError> {
    let plan = plan::load(&args.planfile)
        .map_err(|err| CliError::user(err.to_string()).hint(err.hint()))?;
    print!(
        "{}",
        render_plan(&plan, args.format, args.show_unchanged, args.max_bytes)
    );
    Ok(Exit::Success)
}
