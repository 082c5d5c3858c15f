//! `metalform decommissions list|show|retry|cancel` (seed 000 §5.7 decommission monitoring,
//! §5.8 recovery; seed 001 §5, §8): `metalform jobs … --kind decommission`, under the name
//! operators know. `retry` runs the job's remaining stages like `apply` (so it takes the same
//! execution flags); `cancel` compensates with the store alone, without touching MAAS.

use super::jobs::{self, ActionArgs, ListArgs, Request, ShowArgs, StoreActionArgs};
use super::{CliError, Exit, GlobalArgs};
use crate::lifecycle::{JobKind, RecoveryAction};

/// `metalform decommissions …`.
pub type Args = super::Subcommands<Command>;

#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// List decommission jobs, newest first.
    List(ListArgs),
    /// One job: mode, state, stage, failure, releases, follow-ups and its events.
    Show(ShowArgs),
    /// Rerun the failed stage and continue (needs apply's execution flags).
    Retry(Box<ActionArgs>),
    /// Stop the job (best effort): open agent tasks closed, the node given back when MAAS was
    /// not touched yet.
    Cancel(StoreActionArgs),
}

pub async fn run(global: &GlobalArgs, args: Args) -> Result<Exit, CliError> {
    let kind = Some(JobKind::Decommission);
    match args.command {
        Command::List(list) => jobs::list(global, kind, &list).await,
        Command::Show(show) => jobs::show(global, kind, &show).await,
        Command::Retry(a) => jobs::act(global, kind, RecoveryAction::RetryStage, &a).await,
        Command::Cancel(a) => {
            let request = Request::of_store(&a, RecoveryAction::Cancel);
            jobs::execute(global, kind, request, None).await
        }
    }
}
