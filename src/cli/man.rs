//! `metalform man --dir DIR` (README "Install"): write a man page per command, generated from
//! the same clap definitions as `--help` (`metalform.1`, `metalform-plan.1`,
//! `metalform-onboardings-retry.1`, …), so `man metalform-plan` works once DIR is on MANPATH.

use std::path::{Path, PathBuf};

use clap::CommandFactory;

use super::{Cli, CliError, Exit};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Where to write the pages, e.g. ~/.local/share/man/man1 (created if missing).
    #[arg(long, value_name = "DIR")]
    pub dir: PathBuf,
}

pub fn run(args: Args) -> Result<Exit, CliError> {
    std::fs::create_dir_all(&args.dir).map_err(|e| {
        CliError::user(format!("cannot create {}: {e}", args.dir.display()))
            .hint("pass --dir pointing at a directory you can write to")
    })?;
    let written = write_pages(Cli::command(), &args.dir)?;
    eprintln!(
        "Wrote {written} man pages to {}; `man metalform` reads them when that directory's parent is on MANPATH.",
        args.dir.display()
    );
    Ok(Exit::Success)
}

/// One page for `command` and one for each subcommand, recursively; the number written.
fn write_pages(command: clap::Command, dir: &Path) -> Result<usize, CliError> {
    let mut command = command;
    command.build();
    let mut written = 0;
    let mut pending = vec![command];
    while let Some(command) = pending.pop() {
        let name = command
            .get_display_name()
            .unwrap_or_else(|| command.get_name())
            .to_owned();
        let file = dir.join(format!("{name}.1"));
        let mut page = Vec::new();
        clap_mangen::Man::new(command.clone())
            .render(&mut page)
            .map_err(|e| CliError::unexpected(format!("cannot render {name}.1: {e}")))?;
        std::fs::write(&file, page)
            .map_err(|e| CliError::user(format!("cannot write {}: {e}", file.display())))?;
        written += 1;
        pending.extend(
            command
                .get_subcommands()
                .filter(|s| s.get_name() != "help")
                .cloned(),
        );
    }
    Ok(written)
}
