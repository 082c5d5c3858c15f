//! `metalform jobs list|show|retry|resume|rerun|restart-clean|cancel|adopt|mark-manual` (seed
//! 000 §4.2 and §5.7 monitoring, §4.9 and §5.8 operator recovery, §4.12 audit, §4.15; seed 001
//! §8): every kind of job through one set of commands. `metalform onboardings …` and
//! `metalform decommissions …` are this with the kind given.
//!
//! Each recovery action is one distinct operation: the store records it in the job and the
//! audit log (actor, role, reason, prior state and stage, requested action, expected target,
//! correlation ids) in one transaction, then the actions that need execution run it — the
//! stages for retry, resume, rerun and adopt; the compensation for cancel and restart-clean
//! (at once when the kind compensates with the store alone).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::json;
use uuid::Uuid;

use super::apply::{ExecArgs, Runtime, finish, operator, render_report, required_reason};
use super::output::{ReportFormat, detail_view, table, time};
use super::world::{find_node, store_error, with_store, with_store_read};
use super::{CliError, Exit, GlobalArgs};
use crate::apply::jobs::{self, JobView, KindInfo, ServiceError};
use crate::apply::kinds::info;
use crate::apply::recovery::{self, Execution};
use crate::apply::{ExecutorOptions, Progress, StderrProgress};
use crate::lifecycle::{JobKind, JobState, RecoveryAction};
use crate::store::{Actor, Job, JobFilter, Store};

/// `metalform jobs …`.
pub type Args = super::Subcommands<Command>;

#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// List jobs, newest first.
    List(KindOf<ListArgs>),
    /// One job: state, stage, failure, diagnostics, recommended action and its events.
    Show(KindOf<ShowArgs>),
    /// Rerun only the current (failed) stage, and continue.
    Retry(KindOf<ActionArgs>),
    /// Continue from the last safe checkpoint (after fixing a prerequisite, or when the
    /// executor of a running job was lost).
    Resume(KindOf<ActionArgs>),
    /// Re-enter from the first stage, adopting what already exists.
    Rerun(KindOf<ActionArgs>),
    /// Undo known progress (release what the job deployed, expire its tokens), then start
    /// again from the top.
    RestartClean(KindOf<ActionArgs>),
    /// Stop the job and compensate where the seed says to.
    Cancel(KindOf<ActionArgs>),
    /// Accept externally advanced state (a late enrollment, an operator's fix) and finish.
    Adopt(KindOf<ActionArgs>),
    /// Freeze automation on the job until a human resolves it.
    MarkManual(KindOf<ActionArgs>),
}

/// A command's arguments, and the kind of job it is about.
#[derive(Debug, clap::Args)]
pub struct KindOf<T: clap::Args> {
    /// The kind of job (onboarding, decommission); default: every kind.
    #[arg(long, value_name = "KIND")]
    pub kind: Option<JobKind>,
    #[command(flatten)]
    pub args: T,
}

#[derive(Debug, clap::Args)]
pub struct ListArgs {
    /// Fleet directory (for the default state store).
    #[arg(long, default_value = ".", value_name = "DIR")]
    pub fleet: PathBuf,
    #[arg(long, value_name = "SITE")]
    pub site: Option<String>,
    /// Only this node's jobs (hostname or node id).
    #[arg(long, value_name = "NODE")]
    pub node: Option<String>,
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
    /// A job id, or a hostname (its latest job).
    pub job: String,
    #[arg(long, default_value = ".", value_name = "DIR")]
    pub fleet: PathBuf,
    #[arg(long, value_name = "SITE")]
    pub site: Option<String>,
    #[arg(long, value_enum, default_value_t = ReportFormat::Text)]
    pub format: ReportFormat,
}

#[derive(Debug, clap::Args)]
pub struct ActionArgs {
    /// A job id, or a hostname (its latest job).
    pub job: String,
    /// Why (recorded in the audit log; required).
    #[arg(long, value_name = "TEXT")]
    pub reason: Option<String>,
    #[arg(long, value_name = "SITE")]
    pub site: Option<String>,
    #[command(flatten)]
    pub exec: ExecArgs,
}

/// A recovery action that needs nothing but the state store (a cancel the kind compensates
/// with the store alone, mark-manual).
#[derive(Debug, clap::Args)]
pub struct StoreActionArgs {
    /// A job id, or a hostname (its latest job).
    pub job: String,
    /// Why (recorded in the audit log; required).
    #[arg(long, value_name = "TEXT")]
    pub reason: Option<String>,
    #[arg(long, value_name = "SITE")]
    pub site: Option<String>,
    #[arg(long, default_value = ".", value_name = "DIR")]
    pub fleet: PathBuf,
    /// Who is acting, for the audit log (default: $USER).
    #[arg(long = "as", value_name = "NAME")]
    pub actor: Option<String>,
}

pub async fn run(global: &GlobalArgs, args: Args) -> Result<Exit, CliError> {
    let act = async |action, a: KindOf<ActionArgs>| act(global, a.kind, action, &a.args).await;
    match args.command {
        Command::List(a) => list(global, a.kind, &a.args).await,
        Command::Show(a) => show(global, a.kind, &a.args).await,
        Command::Retry(a) => act(RecoveryAction::RetryStage, a).await,
        Command::Resume(a) => act(RecoveryAction::Resume, a).await,
        Command::Rerun(a) => act(RecoveryAction::Rerun, a).await,
        Command::RestartClean(a) => act(RecoveryAction::RestartClean, a).await,
        Command::Cancel(a) => act(RecoveryAction::Cancel, a).await,
        Command::Adopt(a) => act(RecoveryAction::AdoptObservedState, a).await,
        Command::MarkManual(a) => act(RecoveryAction::MarkManualInterventionRequired, a).await,
    }
}

/// Record and carry out `action` with the execution flags of `args`.
pub(super) async fn act(
    global: &GlobalArgs,
    kind: Option<JobKind>,
    action: RecoveryAction,
    args: &ActionArgs,
) -> Result<Exit, CliError> {
    execute(global, kind, Request::of(args, action), Some(&args.exec)).await
}

/// `{kind}s`, or `jobs` for every kind.
fn plural(kind: Option<JobKind>) -> &'static str {
    kind.map_or("jobs", |k| info(k).plural)
}

/// A job by id, or the latest job of a hostname, of `kind` or of any kind.
async fn find_job(
    store: &Store,
    kind: Option<JobKind>,
    wanted: &str,
    site: Option<&str>,
) -> Result<Job, CliError> {
    let kinds = match kind {
        Some(kind) => vec![kind],
        None => JobKind::ALL.to_vec(),
    };
    let noun = kind.map_or_else(|| "job".to_owned(), |k| k.to_string());
    if let Ok(id) = Uuid::parse_str(wanted) {
        for kind in &kinds {
            match store.job(*kind, id).await {
                Err(crate::store::StoreError::NotFound { .. }) => continue,
                found => return found.map_err(store_error),
            }
        }
        return Err(CliError::user(format!("{noun} `{id}` not found"))
            .hint(format!("`metalform {} list` shows them", plural(kind))));
    }
    let filter = JobFilter {
        site: site.map(str::to_owned),
        ..JobFilter::default()
    };
    let jobs = list_of(store, kind, &filter).await?;
    let mine: Vec<&Job> = jobs
        .iter()
        .filter(|j| j.hostname.eq_ignore_ascii_case(wanted))
        .collect();
    let sites: std::collections::BTreeSet<&str> = mine.iter().map(|j| j.site.as_str()).collect();
    match (mine.first(), sites.len()) {
        (None, _) => Err(CliError::user(format!(
            "no {noun} `{wanted}`{}",
            site.map(|s| format!(" in site `{s}`")).unwrap_or_default()
        ))
        .hint(format!(
            "pass a job id or a hostname; `metalform {} list` shows them",
            plural(kind)
        ))),
        (Some(job), 1) => Ok((*job).clone()),
        (Some(_), _) => Err(CliError::user(format!(
            "hostname `{wanted}` has {} in several sites: {}",
            plural(kind),
            sites.into_iter().collect::<Vec<_>>().join(", ")
        ))
        .hint("pass --site SITE or the job id")),
    }
}

async fn list_of(
    store: &Store,
    kind: Option<JobKind>,
    filter: &JobFilter,
) -> Result<Vec<Job>, CliError> {
    match kind {
        Some(kind) => jobs::list(store, kind, filter).await,
        None => jobs::list_all(store, filter).await,
    }
    .map_err(store_error)
}

pub(super) async fn list(
    global: &GlobalArgs,
    kind: Option<JobKind>,
    args: &ListArgs,
) -> Result<Exit, CliError> {
    with_store_read(global, &args.fleet, async |store| {
        let node_id = match &args.node {
            None => None,
            Some(node) => Some(find_node(store, args.site.as_deref(), node).await?.id),
        };
        let filter = JobFilter {
            node_id,
            site: args.site.clone(),
            state: args.job_state,
            open_only: args.open,
            ..JobFilter::default()
        };
        let jobs = list_of(store, kind, &filter).await?;
        match args.format {
            ReportFormat::Json => println!(
                "{}",
                serde_json::to_string_pretty(&json!({ plural(kind): jobs })).expect("JSON")
            ),
            ReportFormat::Text => print!("{}", render_list(kind, &jobs)),
        }
        Ok(Exit::Success)
    })
    .await
}

fn render_list(kind: Option<JobKind>, jobs: &[Job]) -> String {
    let column = kind.and_then(|k| info(k).column);
    let mut header = vec!["SITE", "HOSTNAME"];
    match (kind, column) {
        (None, _) => header.push("KIND"),
        (Some(_), Some((name, _))) => header.push(name),
        (Some(_), None) => {}
    }
    header.extend(["STATE", "STAGE", "FAILURE", "JOB"]);
    let rows: Vec<Vec<String>> = jobs
        .iter()
        .map(|j| {
            let mut row = vec![j.site.clone(), j.hostname.clone()];
            match (kind, column) {
                (None, _) => row.push(describe(j)),
                (Some(_), Some((_, value))) => row.push(value(j)),
                (Some(_), None) => {}
            }
            row.extend([
                j.state.to_string(),
                format!("{}#{}", j.stage, j.attempt),
                j.failure_class
                    .map(|c| c.to_string())
                    .unwrap_or_else(|| "-".into()),
                j.id.to_string(),
            ]);
            row
        })
        .collect();
    let noun = kind.map_or_else(|| "job".to_owned(), |k| k.to_string());
    format!("{}\n{} {noun}(s)\n", table(&header, &rows), jobs.len())
}

/// `onboarding`, `decommission (soft_reset)`: a job's kind with its list column.
pub(super) fn describe(job: &Job) -> String {
    match info(job.kind).column {
        Some((_, value)) => format!("{} ({})", job.kind, value(job)),
        None => job.kind.to_string(),
    }
}

pub(super) async fn show(
    global: &GlobalArgs,
    kind: Option<JobKind>,
    args: &ShowArgs,
) -> Result<Exit, CliError> {
    with_store_read(global, &args.fleet, async |store| {
        let job = find_job(store, kind, &args.job, args.site.as_deref()).await?;
        let view = jobs::show(store, info(job.kind), job.id)
            .await
            .map_err(service_error)?;
        match args.format {
            ReportFormat::Json => {
                println!("{}", serde_json::to_string_pretty(&view).expect("JSON"))
            }
            ReportFormat::Text => print!("{}", render(&view)),
        }
        Ok(Exit::Success)
    })
    .await
}

fn render(view: &JobView) -> String {
    let job = &view.job;
    let info = info(job.kind);
    let mut lines: Vec<(&str, String)> = vec![
        ("job", format!("{} {}", job.kind, job.id)),
        ("node", format!("{}/{}", job.site, job.hostname)),
        ("state", job.state.to_string()),
        ("stage", format!("{} (attempt {})", job.stage, job.attempt)),
    ];
    lines.extend((info.request)(job));
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
    lines.extend((info.journal)(job));
    if job.error_details != json!({}) {
        lines.push(("details", job.error_details.to_string()));
    }
    if let Some(action) = &job.recommended_action {
        lines.push(("next action", action.clone()));
    }
    lines.push(("requested", time(job.requested_at)));
    lines.push(("updated", time(job.updated_at)));
    detail_view(&lines, "events", &view.events)
}

/// One recovery action as asked on the command line.
pub(super) struct Request<'a> {
    pub action: RecoveryAction,
    pub job: &'a str,
    pub reason: Option<&'a str>,
    pub site: Option<&'a str>,
    /// The fleet directory (default state store) and the actor, for actions that need only
    /// the store.
    pub fleet: &'a Path,
    pub actor: Option<&'a str>,
}

impl<'a> Request<'a> {
    pub fn of(args: &'a ActionArgs, action: RecoveryAction) -> Self {
        Self {
            action,
            job: &args.job,
            reason: args.reason.as_deref(),
            site: args.site.as_deref(),
            fleet: &args.exec.fleet.fleet,
            actor: args.exec.actor.as_deref(),
        }
    }

    pub fn of_store(args: &'a StoreActionArgs, action: RecoveryAction) -> Self {
        Self {
            action,
            job: &args.job,
            reason: args.reason.as_deref(),
            site: args.site.as_deref(),
            fleet: &args.fleet,
            actor: args.actor.as_deref(),
        }
    }
}

/// Whether the action needs nothing but the store for this kind.
fn store_only(info: &KindInfo, action: RecoveryAction) -> bool {
    action == RecoveryAction::MarkManualInterventionRequired
        || (action == RecoveryAction::Cancel && info.cancel_with_store.is_some())
}

/// Record and carry out one recovery action. `exec`: the flags to run stages with (a command
/// without them can only take the actions that need the store alone).
pub(super) async fn execute(
    global: &GlobalArgs,
    kind: Option<JobKind>,
    request: Request<'_>,
    exec: Option<&ExecArgs>,
) -> Result<Exit, CliError> {
    let action = request.action;
    let example = info(kind.unwrap_or(JobKind::Onboarding)).reason_example;
    let reason = required_reason(request.reason, &action.to_string(), example)?;
    let actor = operator(request.actor);
    if let Some(kind) = kind {
        offered(info(kind), action)?;
    }
    // The kind decides what the action needs; without --kind the job tells.
    let kind = match kind {
        Some(kind) => kind,
        None => {
            with_store(global, request.fleet, async |store| {
                let job = find_job(store, None, request.job, request.site).await?;
                offered(info(job.kind), action)?;
                Ok(job.kind)
            })
            .await?
        }
    };
    if store_only(info(kind), action) {
        return with_store(global, request.fleet, async |store| {
            store_action(store, kind, &request, &actor, &reason).await
        })
        .await;
    }
    let Some(exec) = exec else {
        return Err(CliError::argument(format!(
            "{action} of a {kind} runs stages: use `metalform jobs {}` with its execution flags",
            action_command(action)
        )));
    };
    let progress: Arc<dyn Progress> = Arc::new(StderrProgress::new());
    let runtime = Runtime::start(
        global,
        exec,
        actor.clone(),
        ExecutorOptions {
            reason: Some(reason.clone()),
            ..ExecutorOptions::default()
        },
        progress,
    )
    .await?;
    let result = run_action(&runtime, kind, &request, &actor, &reason).await;
    runtime.shutdown().await;
    result
}

/// The `metalform jobs` subcommand of an action.
fn action_command(action: RecoveryAction) -> &'static str {
    action.route().trim_end_matches("-intervention")
}

/// Refuse an action the kind does not offer.
fn offered(info: &KindInfo, action: RecoveryAction) -> Result<(), CliError> {
    if info.offers(action) {
        return Ok(());
    }
    let offered: Vec<&str> = info.actions.iter().map(|a| action_command(*a)).collect();
    Err(CliError::argument(format!(
        "{} take no {}: they offer {}",
        info.plural,
        action_command(action),
        offered.join(", ")
    )))
}

/// Mark-manual, or a cancel the kind compensates with the store alone.
async fn store_action(
    store: &Store,
    kind: JobKind,
    request: &Request<'_>,
    actor: &Actor,
    reason: &str,
) -> Result<Exit, CliError> {
    let job = find_job(store, Some(kind), request.job, request.site).await?;
    if request.action == RecoveryAction::Cancel {
        let done = jobs::cancel_now(
            store,
            info(kind),
            job.id,
            actor,
            Some(reason),
            ExecutorOptions::default().lease_ttl,
        )
        .await
        .map_err(service_error)?;
        println!(
            "{kind} {} is {} (was {} at {}; audited as {})",
            done.id, done.state, job.state, job.stage, actor.name
        );
        return Ok(Exit::Success);
    }
    let recovery = recovery::record(store, kind, job.id, request.action, actor, reason)
        .await
        .map_err(recovery_error)?;
    println!(
        "{kind} {} is {} at {}: automation is frozen until an operator recovers it",
        recovery.job.id, recovery.job.state, recovery.job.stage
    );
    Ok(Exit::Success)
}

/// Record the action, then carry it out with the runtime's executor.
async fn run_action(
    runtime: &Runtime,
    kind: JobKind,
    request: &Request<'_>,
    actor: &Actor,
    reason: &str,
) -> Result<Exit, CliError> {
    let action = request.action;
    let store = &runtime.world.store;
    let job = find_job(store, Some(kind), request.job, request.site).await?;
    // The stages need the node's site and profile; an agent-only job runs without them.
    let target = match runtime.target(&job.site, &job.hostname) {
        Ok(target) => Some(target),
        Err(err) if info(kind).needs_manifests => return Err(err),
        Err(_) => None,
    };
    let recovery = recovery::record(store, kind, job.id, action, actor, reason)
        .await
        .map_err(recovery_error)?;
    if recovery.execution != Execution::FinishCompensation {
        eprintln!(
            "{action}: {kind} {} {} -> {} at {} (audited as {})",
            job.id, recovery.prior.state, recovery.job.state, recovery.job.stage, actor.name
        );
    }
    let report = runtime.executor.carry_out_on(target, &recovery).await;
    print!("{}", render_report(&report));
    let finished_cancel =
        action == RecoveryAction::Cancel || recovery.execution == Execution::FinishCompensation;
    if finished_cancel {
        let job = store.job(kind, job.id).await.map_err(store_error)?;
        if job.state == JobState::Cancelled {
            return Ok(Exit::Success);
        }
        if action == RecoveryAction::Cancel {
            return Err(CliError::user(format!(
                "{kind} {} is {} after the cancel",
                job.id, job.state
            ))
            .hint(format!("see `metalform jobs show {}`", job.id)));
        }
    }
    finish(&report)
}

fn service_error(err: ServiceError) -> CliError {
    match err {
        ServiceError::Store(e) => store_error(e),
        other @ ServiceError::NotFound { .. } => {
            CliError::user(other.to_string()).hint("`metalform jobs list` shows the jobs")
        }
        other => CliError::user(other.to_string())
            .hint("`metalform jobs show JOB` shows the job's state and the recommended action"),
    }
}

fn recovery_error(err: crate::store::StoreError) -> CliError {
    let conflict = err.is_conflict();
    let cli = store_error(err);
    if conflict {
        cli.hint("`metalform jobs show JOB` shows the job's state and the recommended action")
    } else {
        cli
    }
}
