//! `metalform onboardings list|show|retry|resume|rerun|restart-clean|cancel|adopt|mark-manual`
//! (seed 000 §4.2, §4.9, §4.12, §4.15): `metalform jobs … --kind onboarding`, under the name
//! operators know.

use super::jobs::{self, ActionArgs, ListArgs, ShowArgs};
use super::{CliError, Exit, GlobalArgs};
use crate::lifecycle::{JobKind, RecoveryAction};

/// `metalform onboardings …`.
pub type Args = super::Subcommands<Command>;

#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// List onboarding jobs, newest first.
    List(ListArgs),
    /// One job: state, stage, failure, diagnostics, recommended action and its events.
    Show(ShowArgs),
    /// Rerun only the current (failed) stage.
    Retry(ActionArgs),
    /// Continue from the last safe checkpoint (after fixing a prerequisite, or when the
    /// executor of a running job was lost).
    Resume(ActionArgs),
    /// Re-enter from the first stage, adopting what already exists.
    Rerun(ActionArgs),
    /// Undo known progress (release what this job deployed, expire its tokens), then start
    /// again from the top.
    RestartClean(ActionArgs),
    /// Stop the job and compensate where the seed says to.
    Cancel(ActionArgs),
    /// Accept externally advanced state (a late enrollment, an operator's fix) and finish.
    Adopt(ActionArgs),
    /// Freeze automation on the job until a human resolves it.
    MarkManual(ActionArgs),
}

pub async fn run(global: &GlobalArgs, args: Args) -> Result<Exit, CliError> {
    let kind = Some(JobKind::Onboarding);
    let (action, args) = match args.command {
        Command::List(list) => return jobs::list(global, kind, &list).await,
        Command::Show(show) => return jobs::show(global, kind, &show).await,
        Command::Retry(a) => (RecoveryAction::RetryStage, a),
        Command::Resume(a) => (RecoveryAction::Resume, a),
        Command::Rerun(a) => (RecoveryAction::Rerun, a),
        Command::RestartClean(a) => (RecoveryAction::RestartClean, a),
        Command::Cancel(a) => (RecoveryAction::Cancel, a),
        Command::Adopt(a) => (RecoveryAction::AdoptObservedState, a),
        Command::MarkManual(a) => (RecoveryAction::MarkManualInterventionRequired, a),
    };
    jobs::act(global, kind, action, &args).await
}
