//! `metalform apply [PLANFILE] [--auto-approve] [--allow-destructive]` (DESIGN.md §3, §4; seed
//! 000 §4.3–§4.14, §5; docs/apply.md): run a plan's change items as durable onboarding and
//! decommission journals,
//! serving the enrollment endpoint meanwhile, with progress on stderr and the result table on
//! stdout.
//!
//! Without PLANFILE it observes and plans now, shows the plan and asks; with one it first checks
//! that the plan is still fresh (the fleet, each planned site's MAAS, the inventory, the jobs
//! and the store serial are as they were) and refuses a stale plan. Destructive items need
//! `--allow-destructive`. Every refusal happens before anything is changed.
//!
//! The runtime built here (the store, secret store and MAAS clients of [`World`], BMC and host
//! access, the enrollment endpoint, the executor) is shared with `metalform onboardings` and
//! `metalform demo`.

use std::collections::BTreeMap;
use std::io::{BufRead, IsTerminal, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::agent::EnrollmentServer;
use crate::apply::{
    ApplyReport, Executor, ExecutorOptions, FreshnessError, NodeOutcome, PlanRefused, PlanWork,
    Progress, SiteMaas, StageEnv, StderrProgress, verify_plan_file, work_items,
};
use crate::clock::SystemClock;
use crate::model::Fleet;
use crate::plan::{self, NodeTarget, Plan, PlanFileError, render};
use crate::provider::bmc::{IpmiTool, SimBmc};
use crate::provider::host::{SimHost, SshHost};
use crate::stages::onboard::{Peers, SitePeers};
use crate::store::Actor;

use super::output::table;
use super::world::{
    FleetArgs, SecretArgs, SiteArgs, TimeoutArgs, World, load_fleet, observe_error, store_error,
    unknown_site, warn_unreadable,
};
use super::{CliError, Exit, GlobalArgs};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// A plan file written by `metalform plan --out`: apply exactly that plan, after checking
    /// that it is not stale. Without it, apply plans now and asks.
    #[arg(value_name = "PLANFILE")]
    pub planfile: Option<PathBuf>,
    /// Apply without asking (required when stdin is not a terminal).
    #[arg(long)]
    pub auto_approve: bool,
    /// Allow items that destroy something: onboarding a machine that runs a workload metalform
    /// did not deploy, and every reimage, decommission, retirement and prune.
    #[arg(long)]
    pub allow_destructive: bool,
    /// Run disruptive items although their maintenance window is closed (only when apply
    /// plans itself; a plan file made with `plan --ignore-windows` carries it). Audited per
    /// item, with --reason.
    #[arg(long)]
    pub ignore_windows: bool,
    /// Why (recorded in the audit log; required when a maintenance window is overridden).
    #[arg(long, value_name = "TEXT")]
    pub reason: Option<String>,
    #[command(flatten)]
    pub sites: SiteArgs,
    #[command(flatten)]
    pub wait: TimeoutArgs,
    #[command(flatten)]
    pub exec: ExecArgs,
}

/// What every command that runs stages needs.
#[derive(Debug, Clone, clap::Args)]
pub struct ExecArgs {
    #[command(flatten)]
    pub fleet: FleetArgs,
    #[command(flatten)]
    pub secrets: SecretArgs,
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

/// The `--reason` of an audited recovery action (`what`), trimmed; refused when missing or
/// blank, with `example` as the hint.
pub(super) fn required_reason(
    reason: Option<&str>,
    what: &str,
    example: &str,
) -> Result<String, CliError> {
    reason
        .map(str::trim)
        .filter(|r| !r.is_empty())
        .map(str::to_owned)
        .ok_or_else(|| {
            CliError::argument(format!(
                "{what} needs --reason: every recovery action is audited"
            ))
            .hint(format!("say why, e.g. --reason \"{example}\""))
        })
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

/// How stages reach BMCs and deployed hosts, and the enrollment URL hosts are given; checked
/// before anything else is opened.
pub(super) struct Peering {
    peers: Peers,
    public_url: Option<url::Url>,
}

impl Peering {
    pub fn from_args(exec: &ExecArgs) -> Result<Peering, CliError> {
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
        Ok(Peering { peers, public_url })
    }
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

/// Everything a command that runs stages has open.
pub(super) struct Runtime {
    pub fleet: Fleet,
    pub world: World,
    pub executor: Executor,
    pub maas: Arc<SiteMaas>,
    enrollment: EnrollmentServer,
}

impl Runtime {
    /// Load the fleet, open the stores and start the runtime.
    pub async fn start(
        global: &GlobalArgs,
        exec: &ExecArgs,
        actor: Actor,
        options: ExecutorOptions,
        progress: Arc<dyn Progress>,
    ) -> Result<Runtime, CliError> {
        let peering = Peering::from_args(exec)?;
        let fleet = load_fleet(&exec.fleet)?;
        let world = World::open(global, &exec.fleet, &exec.secrets).await?;
        Runtime::over(fleet, world, peering, exec, actor, options, progress).await
    }

    /// Start the enrollment endpoint and the executor over what is open already.
    pub async fn over(
        fleet: Fleet,
        world: World,
        peering: Peering,
        exec: &ExecArgs,
        actor: Actor,
        options: ExecutorOptions,
        progress: Arc<dyn Progress>,
    ) -> Result<Runtime, CliError> {
        let enrollment = match EnrollmentServer::start(
            world.store.clone(),
            exec.agent_listen,
            peering.public_url,
        )
        .await
        {
            Ok(server) => server,
            Err(e) => {
                world.close().await;
                return Err(CliError::user(e.to_string()).hint(e.hint()));
            }
        };
        let maas = Arc::new(SiteMaas::new(world.secrets.clone(), world.clients.clone()));
        let env = StageEnv {
            store: world.store.clone(),
            secrets: world.secrets.clone(),
            maas: maas.clone(),
            peers: peering.peers,
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
            world,
            executor: Executor::new(env, options, progress),
            maas,
            enrollment,
        })
    }

    /// A node of the fleet, resolved for the stages.
    pub fn target(&self, site: &str, hostname: &str) -> Result<NodeTarget, CliError> {
        self.fleet
            .nodes
            .values()
            .find(|n| n.id.site.as_str() == site && n.id.hostname.as_str() == hostname)
            .and_then(|node| NodeTarget::resolve(&self.fleet, node))
            .ok_or_else(|| {
                CliError::user(format!("{site}/{hostname} is not in the fleet's manifests"))
                    .hint("the stages need the node's site and profile: add it back to the manifests, or cancel the job")
            })
    }

    pub async fn shutdown(self) {
        self.enrollment.shutdown().await;
        self.world.close().await;
    }
}

fn confirm(question: &str) -> Result<bool, CliError> {
    eprint!("{question} Only 'yes' will be accepted: ");
    let _ = std::io::stderr().flush();
    let mut answer = String::new();
    std::io::stdin().lock().read_line(&mut answer)?;
    Ok(answer.trim() == "yes")
}

pub(super) fn plan_file_error(err: PlanFileError) -> CliError {
    let hint = err.hint();
    CliError::user(err.to_string()).hint(hint)
}

pub(super) fn plan_refused(err: PlanRefused) -> CliError {
    let hint = err.hint();
    CliError::user(err.to_string()).hint(hint)
}

fn freshness_error(err: FreshnessError) -> CliError {
    match err {
        FreshnessError::Untrusted(untrusted) => {
            let hint = untrusted.hint();
            CliError::user(untrusted.to_string()).hint(hint)
        }
        FreshnessError::Stale(stale) => {
            let hint = stale.hint();
            CliError::user(stale.to_string()).hint(hint)
        }
        FreshnessError::Observe(err) => observe_error(err),
        FreshnessError::Store(err) => store_error(err),
    }
}

/// The fleet a plan file is checked against, read the way the plan's was: a plan made from a
/// git commit (`plan --rev REV`) against `--rev` when given, else the repository's `HEAD`; a
/// plan made from the files on disk against the files on disk (or `--rev`, when given).
fn fleet_args_for(plan: &Plan, args: &FleetArgs) -> FleetArgs {
    let from_commit = plan.fleet_revision.starts_with("commit:");
    FleetArgs {
        rev: match &args.rev {
            None if from_commit => Some("HEAD".to_owned()),
            rev => rev.clone(),
        },
        ..args.clone()
    }
}

pub async fn run(global: &GlobalArgs, args: Args) -> Result<Exit, CliError> {
    let peering = Peering::from_args(&args.exec)?;
    let plan_file = match &args.planfile {
        Some(path) => {
            if !args.sites.sites.is_empty() {
                return Err(CliError::argument(
                    "--site cannot be combined with a plan file: the plan names its sites",
                )
                .hint("apply the plan file as it is, or make one with `metalform plan --site S --out PLANFILE`"));
            }
            if args.ignore_windows {
                return Err(CliError::argument(
                    "--ignore-windows cannot be combined with a plan file: the plan decided which items wait for their window",
                )
                .hint("make the plan with `metalform plan --ignore-windows --out PLANFILE` and apply that file"));
            }
            Some((path.clone(), plan::load(path).map_err(plan_file_error)?))
        }
        None => None,
    };
    let fleet_args = match &plan_file {
        Some((_, plan)) => fleet_args_for(plan, &args.exec.fleet),
        None => args.exec.fleet.clone(),
    };
    let fleet = load_fleet(&fleet_args)?;
    let sites = args.sites.site_filter();
    sites.resolve(&fleet).map_err(unknown_site)?;
    let world = World::open(global, &args.exec.fleet, &args.exec.secrets)
        .await?
        .patience(args.wait.patience());
    let (items, blocked) = match prepare(&args, &fleet, &world, plan_file).await {
        Ok(Prepared::Run { work, blocked }) => (work, blocked),
        Ok(Prepared::Nothing { blocked }) => {
            world.close().await;
            return not_converged(&blocked).map(|()| Exit::Success);
        }
        Ok(Prepared::Declined) => {
            world.close().await;
            return Ok(Exit::Success);
        }
        Err(err) => {
            world.close().await;
            return Err(err);
        }
    };
    let actor = operator(args.exec.actor.as_deref());
    let progress: Arc<dyn Progress> = Arc::new(StderrProgress::new());
    let runtime = Runtime::over(
        fleet,
        world,
        peering,
        &args.exec,
        actor,
        ExecutorOptions {
            reason: Some("metalform apply".into()),
            ..ExecutorOptions::default()
        },
        progress,
    )
    .await?;
    let report = runtime.executor.run_work(items).await;
    print!("{}", render_report(&report));
    eprintln!(
        "{} MAAS request(s) made by this apply",
        runtime.maas.metrics().total()
    );
    runtime.shutdown().await;
    let exit = finish(&report)?;
    not_converged(&blocked)?;
    Ok(exit)
}

/// What [`prepare`] found to do.
enum Prepared {
    /// Run this; the nodes listed are blocked until an operator acts.
    Run {
        work: PlanWork,
        blocked: Vec<(String, String)>,
    },
    /// Nothing to run; these nodes are blocked until an operator acts.
    Nothing { blocked: Vec<(String, String)> },
    /// The operator said no.
    Declined,
}

/// While nodes wait for an operator the fleet is not converged, whatever this pass did: an
/// error (exit 1) listing each with why.
fn not_converged(blocked: &[(String, String)]) -> Result<(), CliError> {
    if blocked.is_empty() {
        return Ok(());
    }
    let listed: Vec<String> = blocked
        .iter()
        .map(|(node, reason)| format!("{node} ({reason})"))
        .collect();
    Err(CliError::user(format!(
        "the fleet is not converged: {} node(s) need an operator: {}",
        blocked.len(),
        listed.join("; ")
    ))
    .hint("`metalform onboardings list --open` shows each job's failure class and next action; resolve them, then apply again"))
}

/// The plan to run — the plan file after its checks, or a plan made now — shown on stdout,
/// turned into work items (destructive ones refused unless allowed) and confirmed; with the
/// nodes it leaves blocked for an operator.
async fn prepare(
    args: &Args,
    fleet: &Fleet,
    world: &World,
    plan_file: Option<(PathBuf, Plan)>,
) -> Result<Prepared, CliError> {
    let from_file = plan_file.is_some();
    let plan = match plan_file {
        Some((path, plan)) => {
            // What runs is the plan made now, which must be the file's (see verify_plan_file).
            let now = verify_plan_file(
                &plan,
                fleet,
                &world.store,
                world.secrets.as_ref(),
                &world.clients,
            )
            .await
            .map_err(freshness_error)?;
            eprintln!(
                "{}: the plan {} is signed by this store and fresh (fleet, MAAS, inventory, jobs and store unchanged)",
                display(&path),
                plan::short_id(&plan.id)
            );
            now
        }
        None => {
            let options = crate::plan::PlanOptions {
                sites: args.sites.site_filter(),
                ignore_windows: args.ignore_windows,
                ..crate::plan::PlanOptions::default()
            };
            let (snapshot, plan) = world.plan(fleet, &options).await?;
            warn_unreadable(&snapshot);
            plan
        }
    };
    print!(
        "{}",
        render::render_text(
            &plan,
            render::TextOptions {
                show_unchanged: false
            }
        )
    );
    let items = work_items(&plan, args.allow_destructive).map_err(plan_refused)?;
    let overridden: Vec<String> = plan
        .changes()
        .filter_map(|i| Some(format!("{} ({})", i.node, i.window_ignored.as_ref()?)))
        .collect();
    let reason = args
        .reason
        .as_deref()
        .map(str::trim)
        .filter(|r| !r.is_empty());
    if !overridden.is_empty() && reason.is_none() {
        return Err(CliError::argument(format!(
            "the plan overrides the maintenance window of {}: say why with --reason (the override is audited)",
            overridden.join(", ")
        ))
        .hint("e.g. --reason \"emergency kernel patch (CHG-4411)\""));
    }
    let actor = operator(args.exec.actor.as_deref());
    let blocked: Vec<(String, String)> = plan
        .needing_operator()
        .map(|item| (item.node.to_string(), item.reason.clone()))
        .collect();
    if items.is_empty() {
        match plan.summary.blocked {
            0 => println!("No changes."),
            n => println!("Nothing to apply: {n} item(s) blocked (see the plan above)."),
        }
        sync_policies(world, fleet, &actor).await?;
        return Ok(Prepared::Nothing { blocked });
    }
    // A plan file was reviewed when it was made (terraform's rule); a plan made now is shown
    // and needs a yes.
    if !from_file && !args.auto_approve {
        if !std::io::stdin().is_terminal() {
            return Err(CliError::user(
                "refusing to apply without confirmation: stdin is not a terminal",
            )
            .hint("review the plan above and pass --auto-approve, or save it with `metalform plan --out PLANFILE` and apply that file"));
        }
        if !confirm("Apply these changes?")? {
            println!("Apply cancelled.");
            return Ok(Prepared::Declined);
        }
    }
    crate::apply::records::audit_window_overrides(&world.store, &plan, &actor, reason)
        .await
        .map_err(store_error)?;
    sync_policies(world, fleet, &actor).await?;
    Ok(Prepared::Run {
        work: items,
        blocked,
    })
}

/// Record the release policies the manifests give the inventory's nodes now (pruning uses
/// them once a node leaves the manifests).
async fn sync_policies(world: &World, fleet: &Fleet, actor: &Actor) -> Result<(), CliError> {
    crate::apply::records::sync_release_policies_now(&world.store, fleet, actor)
        .await
        .map_err(store_error)?;
    Ok(())
}

fn display(path: &Path) -> String {
    path.display().to_string()
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
    // Details quote MAAS and BMC answers: shown, never obeyed by the terminal.
    out.push_str(&crate::sanitize::terminal::escape(&table(
        &["NODE", "RESULT", "JOB", "DETAIL"],
        &rows,
    )));
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
    .hint("`metalform onboardings list --open` and `metalform decommissions list --open` show each job's failure class and next action"))
}
