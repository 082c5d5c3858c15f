//! `metalform observe [--fleet DIR] [--rev REV] [--site S]... [--secrets URL]` (issue 5,
//! docs/plan.md): observe the sites' MAAS (one machines list per site), the inventory and the
//! jobs, and print the snapshot as JSON, so that `metalform plan --observed FILE` can plan
//! without MAAS or store access (CI). An unreadable site is recorded as such, with a warning
//! on stderr.

use super::world::{WorldArgs, warn_unreadable};
use super::{CliError, Exit, GlobalArgs};

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub world: WorldArgs,
}

pub async fn run(global: &GlobalArgs, args: Args) -> Result<Exit, CliError> {
    let (_, snapshot, _) = args.world.load_and_observe(global).await?;
    warn_unreadable(&snapshot);
    print!("{}", snapshot.to_json());
    Ok(Exit::Success)
}
