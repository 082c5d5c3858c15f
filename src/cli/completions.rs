//! `metalform completions SHELL` (DESIGN.md §3).

use clap::CommandFactory;

use super::{Cli, CliError, Exit};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The shell to generate completions for.
    pub shell: clap_complete::Shell,
}

pub fn run(args: Args) -> Result<Exit, CliError> {
    let mut cmd = Cli::command();
    clap_complete::generate(args.shell, &mut cmd, "metalform", &mut std::io::stdout());
    Ok(Exit::Success)
}
