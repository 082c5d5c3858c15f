//! `metalform onboardings list|show|retry|resume|rerun|restart-clean|cancel|adopt|mark-manual`
//! (seed 000 §4.2 monitoring, §4.9 operator recovery semantics, §4.12 audit, §4.15; seed 001 §8).
//!
//! Each action is one distinct operation: the store records it in the job and the audit log
//! (actor, role, reason, prior state and stage, requested action, expected target, correlation
//! ids) in one transaction, then the actions that need execution run it — the stages for
//! retry, resume, rerun and adopt; the compensation for cancel and restart-clean.

use std::sync::Arc;

use serde_json::json;
use uuid::Uuid;

use super::apply::{ExecArgs, Runtime, finish, operator, render_report, required_reason};
use super::output::ReportFormat;
use super::status::{detail_view, store_error, table, time, with_store, with_store_read};
use super::{CliError, Exit, GlobalArgs};
use crate::apply::recovery::{self, Execution};
use crate::apply::{ExecutorOptions, Progress, StderrProgress};
use crate::lifecycle::{JobKind, JobState, RecoveryAction};
use crate::stages::onboard::Facts;
use crate::store::{Job, JobFilter, Store};

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    pub command: Command,
}

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

#[derive(Debug, clap::Args)]
pub struct ListArgs {
    /// Fleet directory (for the default state store).
    #[arg(long, default_value = ".", value_name = "DIR")]
    pub fleet: std::path::PathBuf,
    #[arg(long, value_name = "SITE")]
    pub site: Option<String>,
    /// Only jobs in this job state (pending, running, failed_retryable, …).
    #[arg(long, value_name = "STATE")]
    pub job_state: Option<JobState>,
    /// Only jobs that are not finished (pending, running, failed, compensating).
    #[arg(long)]
    pub open: bool,
    #[arg(long, value_enum, default_value_t = ReportFormat::Text)]
    pub format: ReportFormat,
}

#[derive(Debug, clap::Args)]
pub struct ShowArgs {
    /// A job id, or a hostname (its latest onboarding).
    pub job: String,
    #[arg(long, default_value = ".", value_name = "DIR")]
    pub fleet: std::path::PathBuf,
    #[arg(long, value_name = "SITE")]
    pub site: Option<String>,
    #[arg(long, value_enum, default_value_t = ReportFormat::Text)]
    pub format: ReportFormat,
}

#[derive(Debug, clap::Args)]
pub struct ActionArgs {
    /// A job id, or a hostname (its latest onboarding).
    pub job: String,
    /// Why (recorded in the audit log; required).
    #[arg(long, value_name = "TEXT")]
    pub reason: Option<String>,
    #[arg(long, value_name = "SITE")]
    pub site: Option<String>,
    #[command(flatten)]
    pub exec: ExecArgs,
}

pub async fn run(global: &GlobalArgs, args: Args) -> Result<Exit, CliError> {
    match args.command {
        Command::List(list) => {
            with_store_read(global, &list.fleet, async |store| {
                list_jobs(store, &list).await
            })
            .await
        }
        Command::Show(show) => {
            with_store_read(global, &show.fleet, async |store| {
                show_job(store, &show).await
            })
            .await
        }
        Command::Retry(a) => act(global, a, RecoveryAction::RetryStage).await,
        Command::Resume(a) => act(global, a, RecoveryAction::Resume).await,
        Command::Rerun(a) => act(global, a, RecoveryAction::Rerun).await,
        Command::RestartClean(a) => act(global, a, RecoveryAction::RestartClean).await,
        Command::Cancel(a) => act(global, a, RecoveryAction::Cancel).await,
        Command::Adopt(a) => act(global, a, RecoveryAction::AdoptObservedState).await,
        Command::MarkManual(a) => {
            act(global, a, RecoveryAction::MarkManualInterventionRequired).await
        }
    }
}

/// A job by id, or the latest onboarding of a hostname.
async fn find_job(store: &Store, wanted: &str, site: Option<&str>) -> Result<Job, CliError> {
    if let Ok(id) = Uuid::parse_str(wanted) {
        return store
            .job(JobKind::Onboarding, id)
            .await
            .map_err(store_error);
    }
    let jobs = store
        .list_jobs(
            JobKind::Onboarding,
            &JobFilter {
                site: site.map(str::to_owned),
                ..JobFilter::default()
            },
        )
        .await
        .map_err(store_error)?;
    let mine: Vec<&Job> = jobs.iter().filter(|j| j.hostname == wanted).collect();
    let sites: std::collections::BTreeSet<&str> = mine.iter().map(|j| j.site.as_str()).collect();
    match (mine.first(), sites.len()) {
        (None, _) => Err(CliError::user(format!(
            "no onboarding `{wanted}`{}",
            site.map(|s| format!(" in site `{s}`")).unwrap_or_default()
        ))
        .hint("pass a job id or a hostname; `metalform onboardings list` shows them")),
        (Some(job), 1) => Ok((*job).clone()),
        (Some(_), _) => Err(CliError::user(format!(
            "hostname `{wanted}` has onboardings in several sites: {}",
            sites.into_iter().collect::<Vec<_>>().join(", ")
        ))
        .hint("pass --site SITE or the job id")),
    }
}

async fn list_jobs(store: &Store, args: &ListArgs) -> Result<Exit, CliError> {
    let jobs = store
        .list_jobs(
            JobKind::Onboarding,
            &JobFilter {
                site: args.site.clone(),
                state: args.job_state,
                open_only: args.open,
                ..JobFilter::default()
            },
        )
        .await
        .map_err(store_error)?;
    match args.format {
        ReportFormat::Json => {
            println!(
                "{}",
                serde_json::to_string_pretty(&json!({"onboardings": jobs})).expect("JSON")
            );
        }
        ReportFormat::Text => {
            let rows: Vec<Vec<String>> = jobs
                .iter()
                .map(|j| {
                    vec![
                        j.site.clone(),
                        j.hostname.clone(),
                        j.state.to_string(),
                        format!("{}#{}", j.stage, j.attempt),
                        j.failure_class
                            .map(|c| c.to_string())
                            .unwrap_or_else(|| "-".into()),
                        j.id.to_string(),
                    ]
                })
                .collect();
            print!(
                "{}",
                table(
                    &["SITE", "HOSTNAME", "STATE", "STAGE", "FAILURE", "JOB"],
                    &rows
                )
            );
            println!("\n{} onboarding(s)", jobs.len());
        }
    }
    Ok(Exit::Success)
}

async fn show_job(store: &Store, args: &ShowArgs) -> Result<Exit, CliError> {
    let job = find_job(store, &args.job, args.site.as_deref()).await?;
    let events = store
        .job_events(JobKind::Onboarding, job.id, 200)
        .await
        .map_err(store_error)?;
    match args.format {
        ReportFormat::Json => {
            println!(
                "{}",
                serde_json::to_string_pretty(&json!({"job": job, "events": events})).expect("JSON")
            );
        }
        ReportFormat::Text => print!("{}", render_job(&job, &events)),
    }
    Ok(Exit::Success)
}

fn render_job(job: &Job, events: &[crate::store::StageEventRow]) -> String {
    let facts = Facts::from_details(&job.stage_details);
    let mut lines: Vec<(&str, String)> = vec![
        ("job", format!("onboarding {}", job.id)),
        ("node", format!("{}/{}", job.site, job.hostname)),
        ("state", job.state.to_string()),
        ("stage", format!("{} (attempt {})", job.stage, job.attempt)),
    ];
    if job.adopted {
        lines.push(("adopted", "yes (success ends reconciled)".into()));
    }
    if let Some(class) = job.failure_class {
        lines.push(("failure class", class.to_string()));
    }
    if let Some(message) = &job.error_message {
        lines.push((
            "error",
            match &job.error_code {
                Some(code) => format!("{code}: {message}"),
                None => message.clone(),
            },
        ));
    }
    if let Some(system_id) = &job.maas_system_id {
        lines.push(("machine", system_id.clone()));
    }
    if let Some(status) = &job.last_maas_status {
        let mut text = format!(
            "{status} (power {})",
            job.last_maas_power_state.as_deref().unwrap_or("unknown")
        );
        if !job.last_maas_ips.is_empty() {
            text.push_str(&format!(", ips {}", job.last_maas_ips.join(" ")));
        }
        lines.push(("last maas", text));
    }
    if let Some(node) = job.node_id {
        lines.push(("node record", node.to_string()));
    }
    if let Some(deploy) = &facts.deploy {
        lines.push((
            "deploy",
            format!(
                "round {} ({}), {}",
                deploy.round,
                deploy.distro_series,
                if deploy.received {
                    "received by MAAS"
                } else {
                    "intent recorded, not confirmed"
                }
            ),
        ));
    }
    if !facts.warnings.is_empty() {
        lines.push(("warnings", facts.warnings.join("; ")));
    }
    if job.error_details != json!({}) {
        lines.push(("details", job.error_details.to_string()));
    }
    if let Some(action) = &job.recommended_action {
        lines.push(("next action", action.clone()));
    }
    lines.push(("requested", time(job.requested_at)));
    lines.push(("updated", time(job.updated_at)));
    detail_view(&lines, "events", events)
}

async fn act(
    global: &GlobalArgs,
    args: ActionArgs,
    action: RecoveryAction,
) -> Result<Exit, CliError> {
    let reason = required_reason(
        args.reason.as_deref(),
        &action.to_string(),
        "BOSS card replaced (ticket HW-2291)",
    )?;
    let actor = operator(args.exec.actor.as_deref());
    if action == RecoveryAction::MarkManualInterventionRequired {
        // Recorded only: nothing to execute.
        return with_store(global, &args.exec.fleet.fleet, async |store| {
            let job = find_job(store, &args.job, args.site.as_deref()).await?;
            let recovery = recovery::record(store, job.id, action, &actor, &reason)
                .await
                .map_err(recovery_error)?;
            println!(
                "onboarding {} is {} at {}: automation is frozen until an operator recovers it",
                recovery.job.id, recovery.job.state, recovery.job.stage
            );
            Ok(Exit::Success)
        })
        .await;
    }
    let progress: Arc<dyn Progress> = Arc::new(StderrProgress::new());
    let runtime = Runtime::start(
        global,
        &args.exec,
        actor.clone(),
        ExecutorOptions {
            reason: Some(reason.clone()),
            ..ExecutorOptions::default()
        },
        progress,
    )
    .await?;
    let result = async {
        let job = find_job(&runtime.world.store, &args.job, args.site.as_deref()).await?;
        let target = runtime.target(&job.site, &job.hostname)?;
        let recovery = recovery::record(&runtime.world.store, job.id, action, &actor, &reason)
            .await
            .map_err(recovery_error)?;
        if recovery.execution != Execution::FinishCompensation {
            eprintln!(
                "{action}: onboarding {} {} -> {} (audited as {})",
                job.id, recovery.prior.state, recovery.job.state, actor.name
            );
        }
        let report = runtime.executor.carry_out(target, &recovery).await;
        print!("{}", render_report(&report));
        let finished_cancel =
            action == RecoveryAction::Cancel || recovery.execution == Execution::FinishCompensation;
        if finished_cancel {
            let job = runtime
                .world
                .store
                .job(JobKind::Onboarding, job.id)
                .await
                .map_err(store_error)?;
            if job.state == JobState::Cancelled {
                return Ok(Exit::Success);
            }
            if action == RecoveryAction::Cancel {
                return Err(CliError::user(format!(
                    "onboarding {} is {} after the cancel",
                    job.id, job.state
                ))
                .hint(format!("see `metalform onboardings show {}`", job.id)));
            }
        }
        finish(&report)
    }
    .await;
    runtime.shutdown().await;
    result
}

fn recovery_error(err: crate::store::StoreError) -> CliError {
    let conflict = err.is_conflict();
    let cli = store_error(err);
    if conflict {
        cli.hint(
            "`metalform onboardings show JOB` shows the job's state and the recommended action",
        )
    } else {
        cli
    }
}
