//! `metalform decommissions list|show|retry|cancel` (seed 000 §5.7 decommission monitoring,
//! §5.8 recovery; seed 001 §5, §8), over the library services of `crate::apply::decommission`
//! that the admin API calls too. `retry` runs the job's remaining stages like `apply` (so it
//! takes the same execution flags); `cancel` compensates without touching MAAS.

use std::sync::Arc;

use serde_json::json;
use uuid::Uuid;

use super::apply::{ExecArgs, Runtime, finish, operator, render_report, required_reason};
use super::output::ReportFormat;
use super::status::{detail_view, store_error, table, time, with_store, with_store_read};
use super::{CliError, Exit, GlobalArgs};
use crate::apply::decommission::{
    DecommissionExecutor, DecommissionJob, DecommissionView, DecommissionWork, ServiceError,
    cancel_decommission, list_decommissions, retry_decommission, show_decommission,
};
use crate::apply::{ExecutorOptions, Progress, StderrProgress};
use crate::lifecycle::{JobKind, JobState};
use crate::stages::decommission::{DecommissionFacts, DecommissionTarget};
use crate::store::{Job, JobFilter, Store};

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    pub command: Command,
}

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
    Cancel(CancelArgs),
}

#[derive(Debug, clap::Args)]
pub struct ListArgs {
    #[arg(long, default_value = ".", value_name = "DIR")]
    pub fleet: std::path::PathBuf,
    #[arg(long, value_name = "SITE")]
    pub site: Option<String>,
    /// Only this node's decommissions (hostname or node id).
    #[arg(long, value_name = "NODE")]
    pub node: Option<String>,
    /// Only jobs in this job state (running, failed_manual_intervention, …).
    #[arg(long, value_name = "STATE")]
    pub job_state: Option<JobState>,
    /// Only jobs that are not finished.
    #[arg(long)]
    pub open: bool,
    #[arg(long, value_enum, default_value_t = ReportFormat::Text)]
    pub format: ReportFormat,
}

#[derive(Debug, clap::Args)]
pub struct ShowArgs {
    /// A job id, or a hostname (its latest decommission).
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
    /// A job id, or a hostname (its latest decommission).
    pub job: String,
    /// Why (recorded in the audit log; required).
    #[arg(long, value_name = "TEXT")]
    pub reason: Option<String>,
    #[arg(long, value_name = "SITE")]
    pub site: Option<String>,
    #[command(flatten)]
    pub exec: ExecArgs,
}

#[derive(Debug, clap::Args)]
pub struct CancelArgs {
    /// A job id, or a hostname (its latest decommission).
    pub job: String,
    #[arg(long, value_name = "TEXT")]
    pub reason: Option<String>,
    #[arg(long, value_name = "SITE")]
    pub site: Option<String>,
    #[arg(long, default_value = ".", value_name = "DIR")]
    pub fleet: std::path::PathBuf,
    /// Who is acting, for the audit log (default: $USER).
    #[arg(long = "as", value_name = "NAME")]
    pub actor: Option<String>,
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
        Command::Retry(args) => retry(global, *args).await,
        Command::Cancel(args) => cancel(global, args).await,
    }
}

fn service_error(err: ServiceError) -> CliError {
    match err {
        ServiceError::Store(e) => store_error(e),
        other @ ServiceError::NotFound { .. } => {
            CliError::user(other.to_string()).hint("`metalform decommissions list` shows the jobs")
        }
        other => CliError::user(other.to_string()).hint(
            "`metalform decommissions show JOB` shows the job's state and the recommended action",
        ),
    }
}

/// The hint's example of a decommission recovery reason.
const REASON_EXAMPLE: &str = "agent restarted on the host (ticket OPS-117)";

/// A job by id, or the latest decommission of a hostname.
async fn find_job(store: &Store, wanted: &str, site: Option<&str>) -> Result<Job, CliError> {
    if let Ok(id) = Uuid::parse_str(wanted) {
        return store
            .job(JobKind::Decommission, id)
            .await
            .map_err(store_error);
    }
    let jobs = store
        .list_jobs(
            JobKind::Decommission,
            &JobFilter {
                site: site.map(str::to_owned),
                ..JobFilter::default()
            },
        )
        .await
        .map_err(store_error)?;
    let mine: Vec<&Job> = jobs
        .iter()
        .filter(|j| j.hostname.eq_ignore_ascii_case(wanted))
        .collect();
    let sites: std::collections::BTreeSet<&str> = mine.iter().map(|j| j.site.as_str()).collect();
    match (mine.first(), sites.len()) {
        (None, _) => Err(CliError::user(format!(
            "no decommission `{wanted}`{}",
            site.map(|s| format!(" in site `{s}`")).unwrap_or_default()
        ))
        .hint("pass a job id or a hostname; `metalform decommissions list` shows them")),
        (Some(job), 1) => Ok((*job).clone()),
        (Some(_), _) => Err(CliError::user(format!(
            "hostname `{wanted}` has decommissions in several sites: {}",
            sites.into_iter().collect::<Vec<_>>().join(", ")
        ))
        .hint("pass --site SITE or the job id")),
    }
}

async fn list_jobs(store: &Store, args: &ListArgs) -> Result<Exit, CliError> {
    let node_id = match &args.node {
        None => None,
        Some(node) => match Uuid::parse_str(node) {
            Ok(id) => Some(id),
            Err(_) => {
                let found = store
                    .find_nodes_by_hostname(node)
                    .await
                    .map_err(store_error)?;
                let found: Vec<_> = found
                    .into_iter()
                    .filter(|n| args.site.as_ref().is_none_or(|s| &n.site == s))
                    .collect();
                match found.as_slice() {
                    [] => {
                        return Err(CliError::user(format!("no node `{node}`"))
                            .hint("pass a hostname or node id; `metalform status` lists them"));
                    }
                    [one] => Some(one.id),
                    _ => {
                        return Err(CliError::user(format!(
                            "`{node}` names {} nodes (a deleted identity and its successor, or several sites)",
                            found.len()
                        ))
                        .hint("pass the node id, or --site"));
                    }
                }
            }
        },
    };
    let jobs = list_decommissions(
        store,
        &JobFilter {
            node_id,
            site: args.site.clone(),
            state: args.job_state,
            open_only: args.open,
            ..JobFilter::default()
        },
    )
    .await
    .map_err(service_error)?;
    match args.format {
        ReportFormat::Json => println!(
            "{}",
            serde_json::to_string_pretty(&json!({"decommissions": jobs})).expect("JSON")
        ),
        ReportFormat::Text => {
            let rows: Vec<Vec<String>> = jobs
                .iter()
                .map(|j| {
                    vec![
                        j.site.clone(),
                        j.hostname.clone(),
                        j.mode().map(|m| m.to_string()).unwrap_or_default(),
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
                    &[
                        "SITE", "HOSTNAME", "MODE", "STATE", "STAGE", "FAILURE", "JOB"
                    ],
                    &rows
                )
            );
            println!("\n{} decommission(s)", jobs.len());
        }
    }
    Ok(Exit::Success)
}

async fn show_job(store: &Store, args: &ShowArgs) -> Result<Exit, CliError> {
    let job = find_job(store, &args.job, args.site.as_deref()).await?;
    let view = show_decommission(store, job.id)
        .await
        .map_err(service_error)?;
    match args.format {
        ReportFormat::Json => println!("{}", serde_json::to_string_pretty(&view).expect("JSON")),
        ReportFormat::Text => print!("{}", render(&view)),
    }
    Ok(Exit::Success)
}

fn render(view: &DecommissionView) -> String {
    let job = &view.job;
    let facts = DecommissionFacts::from_details(&job.stage_details);
    let mut lines: Vec<(&str, String)> = vec![
        ("job", format!("decommission {}", job.id)),
        ("node", format!("{}/{}", job.site, job.hostname)),
        (
            "mode",
            job.mode().map(|m| m.to_string()).unwrap_or_default(),
        ),
        ("state", job.state.to_string()),
        ("stage", format!("{} (attempt {})", job.stage, job.attempt)),
    ];
    if let crate::store::JobSpec::Decommission {
        erase,
        storage_cleanup,
        reason,
        ..
    } = &job.spec
    {
        if let Some(erase) = erase {
            lines.push(("erase", erase.clone()));
        }
        if let Some(scope) = storage_cleanup {
            lines.push(("storage cleanup", scope.clone()));
        }
        if let Some(reason) = reason {
            lines.push(("reason", reason.clone()));
        }
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
        lines.push((
            "last maas",
            format!(
                "{status} (power {})",
                job.last_maas_power_state.as_deref().unwrap_or("unknown")
            ),
        ));
    }
    for release in &facts.decommission.releases {
        lines.push((
            "release",
            format!(
                "erase {}{}, {}",
                release.erase,
                if release.fallback { " (fallback)" } else { "" },
                if release.received {
                    "received by MAAS"
                } else {
                    "intent recorded, not confirmed"
                }
            ),
        ));
    }
    for note in &view.follow_ups {
        lines.push(("follow-up", note.clone()));
    }
    if let Some(action) = &job.recommended_action {
        lines.push(("next action", action.clone()));
    }
    lines.push(("requested", time(job.requested_at)));
    lines.push(("updated", time(job.updated_at)));
    detail_view(&lines, "events", &view.events)
}

async fn retry(global: &GlobalArgs, args: ActionArgs) -> Result<Exit, CliError> {
    let reason = required_reason(args.reason.as_deref(), "retry", REASON_EXAMPLE)?;
    let actor = operator(args.exec.actor.as_deref());
    let progress: Arc<dyn Progress> = Arc::new(StderrProgress::new());
    let runtime = Runtime::start(
        global,
        &args.exec,
        actor.clone(),
        ExecutorOptions {
            reason: Some(reason.clone()),
            ..ExecutorOptions::default()
        },
        progress.clone(),
    )
    .await?;
    let result = async {
        let job = find_job(&runtime.world.store, &args.job, args.site.as_deref()).await?;
        let node = job
            .node_id
            .ok_or_else(|| CliError::unexpected(format!("decommission {} has no node", job.id)))?;
        let moved = retry_decommission(&runtime.world.store, job.id, &actor, Some(&reason))
            .await
            .map_err(service_error)?;
        eprintln!(
            "retry: decommission {} {} -> {} at {} (audited as {})",
            job.id, job.state, moved.state, moved.stage, actor.name
        );
        let executor = DecommissionExecutor::new(
            runtime.executor.env().clone(),
            runtime.executor.options().clone(),
            progress,
        );
        let report = executor
            .run(vec![DecommissionWork {
                target: DecommissionTarget {
                    node_id: node,
                    site: job.site.clone(),
                    hostname: job.hostname.clone(),
                    resolved: runtime.target(&job.site, &job.hostname).ok(),
                },
                job: DecommissionJob::Existing(job.id),
            }])
            .await;
        print!("{}", render_report(&report));
        finish(&report)
    }
    .await;
    runtime.shutdown().await;
    result
}

async fn cancel(global: &GlobalArgs, args: CancelArgs) -> Result<Exit, CliError> {
    let reason = required_reason(args.reason.as_deref(), "cancel", REASON_EXAMPLE)?;
    let actor = operator(args.actor.as_deref());
    with_store(global, &args.fleet, async |store| {
        let job = find_job(store, &args.job, args.site.as_deref()).await?;
        let done = cancel_decommission(
            store,
            job.id,
            &actor,
            Some(&reason),
            ExecutorOptions::default().lease_ttl,
        )
        .await
        .map_err(service_error)?;
        println!(
            "decommission {} is {} (was {} at {}; audited as {})",
            done.id, done.state, job.state, job.stage, actor.name
        );
        Ok(Exit::Success)
    })
    .await
}
