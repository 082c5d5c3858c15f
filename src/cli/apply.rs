//! `metalform apply [PLANFILE] [--auto-approve] [--allow-destructive]` (DESIGN.md §3, §4; seed
//! 000 §4.3–§4.14): run a plan's items as durable onboarding journals, serving the enrollment
//! endpoint meanwhile, with progress on stderr and the result table on stdout.
//!
//! The runtime built here (store, secrets, MAAS clients, BMC and host access, enrollment
//! endpoint, executor) is shared with `metalform onboardings` and `metalform demo`.

use std::collections::BTreeMap;
use std::io::{BufRead, IsTerminal, Write};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::agent::EnrollmentServer;
use crate::apply::{
    ApplyReport, Executor, ExecutorOptions, NodeOutcome, NodeTarget, Progress, SiteMaas, StageEnv,
    StderrProgress, Work, WorkItem,
};
use crate::clock::SystemClock;
use crate::lifecycle::{JobKind, JobState, NodeState};
use crate::model::{Fleet, Lifecycle, SiteStatus};
use crate::provider::bmc::{IpmiTool, SimBmc};
use crate::provider::host::{SimHost, SshHost};
use crate::provider::maas::MaasClientOptions;
use crate::secrets::SecretStore;
use crate::source::FleetSource;
use crate::stages::onboard::{Peers, SitePeers};
use crate::store::{self, Actor, JobFilter, Store};

use super::status::{store_error, table};
use super::{CliError, Exit, GlobalArgs};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Apply without asking (required when stdin is not a terminal).
    #[arg(long)]
    pub auto_approve: bool,
    /// Allow items that destroy something (release, erase, redeploy of a machine in use).
    #[arg(long)]
    pub allow_destructive: bool,
    #[command(flatten)]
    pub exec: ExecArgs,
}

/// What every command that runs stages needs.
#[derive(Debug, Clone, clap::Args)]
pub struct ExecArgs {
    /// Fleet directory; the default state store lives in its .metalform/.
    #[arg(long, default_value = ".", value_name = "DIR")]
    pub fleet: PathBuf,
    /// Use the fleet as of this git revision.
    #[arg(long, value_name = "REV")]
    pub rev: Option<String>,
    /// Secret store: vault://HOST:PORT (token from VAULT_TOKEN) or file://PATH.
    #[arg(long, env = "METALFORM_SECRETS", value_name = "URL")]
    pub secrets: Option<String>,
    /// Where the enrollment endpoint listens while stages run. Keep it stable: deployed hosts
    /// carry its URL.
    #[arg(
        long,
        env = "METALFORM_AGENT_LISTEN",
        default_value = "127.0.0.1:8740",
        value_name = "ADDR"
    )]
    pub agent_listen: SocketAddr,
    /// The base URL deployed hosts reach the enrollment endpoint at (required unless
    /// --sim-control is given).
    #[arg(long, env = "METALFORM_AGENT_URL", value_name = "URL")]
    pub agent_url: Option<url::Url>,
    /// Drive BMCs and deployed hosts through a simulator's control API instead of ipmitool and
    /// ssh: `URL` for every site, or `SITE=URL` (repeat or comma-separate).
    #[arg(
        long = "sim-control",
        env = "METALFORM_SIM_CONTROL",
        value_delimiter = ',',
        value_name = "[SITE=]URL"
    )]
    pub sim_control: Vec<String>,
    /// SSH private key for the hardware-sync credentials push (default: ssh's own).
    #[arg(long, env = "METALFORM_SSH_IDENTITY", value_name = "FILE")]
    pub ssh_identity: Option<PathBuf>,
    /// Who is acting, for the audit log (default: $USER).
    #[arg(long = "as", value_name = "NAME")]
    pub actor: Option<String>,
    #[arg(long, hide = true, default_value = "10s", value_parser = parse_duration)]
    pub poll_interval: Duration,
    #[arg(long, hide = true, default_value = "60s", value_parser = parse_duration)]
    pub lease_ttl: Duration,
    #[arg(long, hide = true, default_value = "2s", value_parser = parse_duration)]
    pub retry_base: Duration,
    #[arg(long, hide = true)]
    pub seed: Option<u64>,
}

fn parse_duration(text: &str) -> Result<Duration, String> {
    crate::model::duration::parse(text).map_err(|e| e.to_string())
}

/// The operator behind a command.
pub(super) fn operator(name: Option<&str>) -> Actor {
    let name = name
        .map(str::to_owned)
        .or_else(|| std::env::var("USER").ok())
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| "operator".into());
    Actor::admin(name)
}

/// Everything a command that runs stages has open.
pub(super) struct Runtime {
    pub fleet: Fleet,
    pub store: Store,
    pub executor: Executor,
    pub maas: Arc<SiteMaas>,
    enrollment: EnrollmentServer,
}

/// `[SITE=]URL` entries into per-site simulator peers.
fn sim_peers(entries: &[String]) -> Result<Option<Peers>, CliError> {
    if entries.is_empty() {
        return Ok(None);
    }
    let mut default = None;
    let mut per_site = BTreeMap::new();
    for entry in entries {
        let (site, url) = match entry.split_once('=') {
            Some((site, url)) => (Some(site.trim()), url.trim()),
            None => (None, entry.trim()),
        };
        let url = url::Url::parse(url).map_err(|e| {
            CliError::argument(format!("--sim-control `{entry}`: {e}")).hint(
                "pass the simulator's base URL, e.g. http://127.0.0.1:5240, optionally as SITE=URL",
            )
        })?;
        let peers = SitePeers {
            bmc: Arc::new(SimBmc::new(&url)),
            host: Arc::new(SimHost::new(&url)),
        };
        match site {
            Some(site) => {
                per_site.insert(site.to_owned(), peers);
            }
            None => default = Some(peers),
        }
    }
    let default = match default.or_else(|| per_site.values().next().cloned()) {
        Some(default) => default,
        None => unreachable!("at least one entry"),
    };
    Ok(Some(Peers { default, per_site }))
}

pub(super) fn load_fleet(exec: &ExecArgs) -> Result<Fleet, CliError> {
    let source = FleetSource::new(&exec.fleet, exec.rev.as_deref());
    match crate::manifest::load_fleet(&source) {
        Ok(loaded) => Ok(loaded.fleet),
        Err(crate::manifest::LoadError::Source(err)) => Err(super::validate::source_error(err)),
        Err(err @ crate::manifest::LoadError::Invalid { .. }) => {
            Err(CliError::user(err.to_string()).hint(format!(
                "run `metalform validate --fleet {}` for every problem",
                exec.fleet.display()
            )))
        }
    }
}

pub(super) async fn open_store(
    global: &GlobalArgs,
    fleet_dir: &std::path::Path,
) -> Result<Store, CliError> {
    let url = match &global.state {
        Some(url) => url.clone(),
        None => {
            if !fleet_dir.is_dir() {
                return Err(CliError::user(format!(
                    "fleet directory `{}` does not exist",
                    fleet_dir.display()
                ))
                .hint("pass --fleet DIR (the fleet repository) or --state URL"));
            }
            store::default_url(fleet_dir)
        }
    };
    Store::open(&url, Arc::new(SystemClock))
        .await
        .map_err(store_error)
}

pub(super) fn open_secrets(exec: &ExecArgs) -> Result<Arc<dyn SecretStore>, CliError> {
    let url = exec.secrets.as_deref().ok_or_else(|| {
        CliError::user("no secret store: stages read MAAS keys and BMC logins at run time")
            .hint("pass --secrets vault://HOST:PORT (with VAULT_TOKEN) or --secrets file://PATH, or set METALFORM_SECRETS")
    })?;
    crate::secrets::open(url).map_err(|e| {
        let hint = e.hint().unwrap_or("check the --secrets URL");
        CliError::user(e.to_string()).hint(hint)
    })
}

impl Runtime {
    pub async fn start(
        global: &GlobalArgs,
        exec: &ExecArgs,
        actor: Actor,
        options: ExecutorOptions,
        progress: Arc<dyn Progress>,
    ) -> Result<Runtime, CliError> {
        let fleet = load_fleet(exec)?;
        let secrets = open_secrets(exec)?;
        let peers = match sim_peers(&exec.sim_control)? {
            Some(peers) => peers,
            None => Peers::uniform(
                Arc::new(IpmiTool::default()),
                Arc::new(SshHost {
                    identity: exec.ssh_identity.clone(),
                    ..SshHost::default()
                }),
            ),
        };
        let public_url = match (&exec.agent_url, exec.sim_control.is_empty()) {
            (Some(url), _) => Some(url.clone()),
            (None, false) => None,
            (None, true) => {
                return Err(CliError::user(
                    "no --agent-url: deployed hosts would not know where to enroll",
                )
                .hint("pass --agent-url http://ADDRESS:PORT/ that the hosts' deploy network reaches (and --agent-listen to bind it)"));
            }
        };
        let store = open_store(global, &exec.fleet).await?;
        let enrollment = EnrollmentServer::start(store.clone(), exec.agent_listen, public_url)
            .await
            .map_err(|e| CliError::user(e.to_string()).hint(e.hint()))?;
        let maas = Arc::new(SiteMaas::new(secrets.clone(), MaasClientOptions::default()));
        let env = StageEnv {
            store: store.clone(),
            secrets,
            maas: maas.clone(),
            peers,
            clock: Arc::new(SystemClock),
            enroll_url: enrollment.enroll_url(),
            actor,
            poll_interval: exec.poll_interval,
        };
        let options = ExecutorOptions {
            poll_interval: exec.poll_interval,
            retry_base: exec.retry_base,
            lease_ttl: exec.lease_ttl,
            seed: exec.seed.unwrap_or(options.seed),
            ..options
        };
        Ok(Runtime {
            fleet,
            store,
            executor: Executor::new(env, options, progress),
            maas,
            enrollment,
        })
    }

    pub fn target(&self, site: &str, hostname: &str) -> Result<NodeTarget, CliError> {
        self.fleet
            .nodes
            .values()
            .find(|n| n.id.site.as_str() == site && n.id.hostname.as_str() == hostname)
            .and_then(|node| NodeTarget::from_fleet(&self.fleet, node))
            .ok_or_else(|| {
                CliError::user(format!("{site}/{hostname} is not in the fleet's manifests"))
                    .hint("the stages need the node's site and profile: add it back to the manifests, or cancel the job")
            })
    }

    pub async fn shutdown(self) {
        self.enrollment.shutdown().await;
        self.store.close().await;
    }
}

/// One item of the (temporary) plan, as shown.
struct Planned {
    item: Option<WorkItem>,
    symbol: char,
    node: String,
    reason: String,
}

/// TEMPORARY until the planner (src/plan, issue 5 part P) is merged; deleted at the merge.
/// Onboard every active, unpaused node of an active site whose node record is not active yet;
/// continue interrupted jobs; leave failed jobs to the operator.
async fn temporary_plan_items(fleet: &Fleet, store: &Store) -> Result<Vec<Planned>, CliError> {
    let open = store
        .list_jobs(
            JobKind::Onboarding,
            &JobFilter {
                open_only: true,
                ..JobFilter::default()
            },
        )
        .await
        .map_err(store_error)?;
    let mut planned = Vec::new();
    for node in fleet.nodes.values() {
        let label = node.id.to_string();
        let Some(target) = NodeTarget::from_fleet(fleet, node) else {
            continue;
        };
        let skip = |reason: &str| Planned {
            item: None,
            symbol: '=',
            node: label.clone(),
            reason: reason.to_owned(),
        };
        if node.lifecycle != Lifecycle::Active || node.paused {
            planned.push(skip("not an active, unpaused node"));
            continue;
        }
        let job = open
            .iter()
            .find(|j| j.site == node.id.site.as_str() && j.hostname == node.id.hostname.as_str());
        if let Some(job) = job {
            planned.push(match job.state {
                JobState::Pending | JobState::Running => Planned {
                    item: Some(WorkItem {
                        target,
                        work: Work::Resume { job_id: job.id },
                    }),
                    symbol: '~',
                    node: label.clone(),
                    reason: format!("continue onboarding {} at {}", job.id, job.stage),
                },
                state => Planned {
                    item: None,
                    symbol: '!',
                    node: label.clone(),
                    reason: format!(
                        "onboarding {} is {state} at {}: see `metalform onboardings show {}`",
                        job.id, job.stage, job.id
                    ),
                },
            });
            continue;
        }
        let record = store
            .find_node(node.id.site.as_str(), node.id.hostname.as_str())
            .await
            .map_err(store_error)?;
        if record
            .as_ref()
            .is_some_and(|r| r.status == NodeState::Active)
        {
            planned.push(skip("active"));
            continue;
        }
        if target.site.status == SiteStatus::Disabled {
            planned.push(Planned {
                item: None,
                symbol: '!',
                node: label.clone(),
                reason: "site disabled: no new onboarding".into(),
            });
            continue;
        }
        planned.push(Planned {
            item: Some(WorkItem {
                target,
                work: Work::Onboard,
            }),
            symbol: '+',
            node: label,
            reason: "not onboarded yet".into(),
        });
    }
    Ok(planned)
}

fn confirm(question: &str) -> Result<bool, CliError> {
    eprint!("{question} Only 'yes' will be accepted: ");
    let _ = std::io::stderr().flush();
    let mut answer = String::new();
    std::io::stdin().lock().read_line(&mut answer)?;
    Ok(answer.trim() == "yes")
}

pub async fn run(global: &GlobalArgs, args: Args) -> Result<Exit, CliError> {
    let actor = operator(args.exec.actor.as_deref());
    let progress: Arc<dyn Progress> = Arc::new(StderrProgress::new());
    let runtime = Runtime::start(
        global,
        &args.exec,
        actor,
        ExecutorOptions {
            reason: Some("metalform apply".into()),
            ..ExecutorOptions::default()
        },
        progress,
    )
    .await?;
    let result = apply(&runtime, &args).await;
    runtime.shutdown().await;
    result
}

/// What applying now would do, as shown to the operator.
pub(super) struct PlanView {
    pub items: Vec<WorkItem>,
    /// One line per item that is not unchanged, then a summary line.
    pub text: String,
}

/// Plan against the store now.
pub(super) async fn plan_now(runtime: &Runtime) -> Result<PlanView, CliError> {
    let planned = temporary_plan_items(&runtime.fleet, &runtime.store).await?;
    let changes = planned.iter().filter(|p| p.item.is_some()).count();
    let mut text = String::new();
    for p in planned.iter().filter(|p| p.symbol != '=') {
        text.push_str(&format!("{} {}  {}\n", p.symbol, p.node, p.reason));
    }
    text.push_str(&format!(
        "\nPlan: {changes} to apply, {} unchanged, {} blocked.\n",
        planned.iter().filter(|p| p.symbol == '=').count(),
        planned.iter().filter(|p| p.symbol == '!').count(),
    ));
    Ok(PlanView {
        items: planned.into_iter().filter_map(|p| p.item).collect(),
        text,
    })
}

async fn apply(runtime: &Runtime, args: &Args) -> Result<Exit, CliError> {
    let plan = plan_now(runtime).await?;
    print!("{}", plan.text);
    if plan.items.is_empty() {
        println!("No changes.");
        return Ok(Exit::Success);
    }
    if !args.auto_approve {
        if !std::io::stdin().is_terminal() {
            return Err(CliError::user(
                "refusing to apply without confirmation: stdin is not a terminal",
            )
            .hint("review the plan above and pass --auto-approve"));
        }
        if !confirm("Apply these changes?")? {
            println!("Apply cancelled.");
            return Ok(Exit::Success);
        }
    }
    let report = runtime.executor.run(plan.items).await;
    print!("{}", render_report(&report));
    eprintln!(
        "{} MAAS request(s) made by this apply",
        runtime.maas.metrics().total()
    );
    finish(&report)
}

/// The result table of an apply.
pub(super) fn render_report(report: &ApplyReport) -> String {
    let rows: Vec<Vec<String>> = report
        .results
        .iter()
        .map(|r| {
            let (result, detail) = match &r.outcome {
                NodeOutcome::Converged { state } => (state.to_string(), String::new()),
                NodeOutcome::Failed {
                    state,
                    class,
                    code,
                    message,
                } => (state.to_string(), format!("{class}/{code}: {message}")),
                NodeOutcome::Left { reason } => ("not run".into(), reason.clone()),
                NodeOutcome::Aborted { reason } => ("stopped".into(), reason.clone()),
            };
            vec![
                r.node.clone(),
                result,
                r.job_id
                    .map(|j| j.to_string())
                    .unwrap_or_else(|| "-".into()),
                detail,
            ]
        })
        .collect();
    let mut out = String::from("\n");
    out.push_str(&table(&["NODE", "RESULT", "JOB", "DETAIL"], &rows));
    out.push_str(&format!(
        "\nApply: {} converged, {} failed, {} not run.\n",
        report.converged(),
        report.failed(),
        report.not_run()
    ));
    out
}

/// Exit 0 when every node converged; 1 with what to do otherwise.
pub(super) fn finish(report: &ApplyReport) -> Result<Exit, CliError> {
    if report.failed() == 0 && report.not_run() == 0 {
        return Ok(Exit::Success);
    }
    Err(CliError::user(format!(
        "{} node(s) failed and {} were not run",
        report.failed(),
        report.not_run()
    ))
    .hint("`metalform onboardings list --open` shows each job's failure class and next action"))
}
