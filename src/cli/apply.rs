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
//! access, the agent channel on its own TLS listener — the daemon's implementation —, the
//! executor) is shared with `metalform onboardings` and `metalform demo`.

use std::collections::BTreeMap;
use std::io::{BufRead, IsTerminal, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::agent::{AgentServer, AgentServerConfig};
use crate::apply::{
    ApplyReport, Executor, ExecutorOptions, FreshnessError, JsonProgress, NodeOutcome, PlanRefused,
    PlanWork, Progress, SiteMaas, StageEnv, StderrProgress, verify_plan_file, work_items,
};
use crate::clock::SystemClock;
use crate::cloudinit::{AgentBinary, AgentInstall};
use crate::listener::TlsSetting;
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
    /// Write a machine-readable stream on stdout instead of the plan, progress and table: one
    /// JSON object per line (`plan`, then a `stage` event per stage transition, a `result` per
    /// node, and a closing `summary`). Needs a plan file or --auto-approve.
    #[arg(long)]
    pub json: bool,
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
    /// Where the agent channel (enrollment, tasks) listens while stages run. Keep it stable:
    /// deployed hosts carry its URL.
    #[arg(
        long,
        env = "METALFORM_AGENT_LISTEN",
        default_value = "127.0.0.1:8741",
        value_name = "ADDR"
    )]
    pub agent_listen: SocketAddr,
    /// The base URL deployed hosts reach the agent channel at, https:// (required unless
    /// --sim-control is given).
    #[arg(long, env = "METALFORM_AGENT_URL", value_name = "URL")]
    pub agent_url: Option<url::Url>,
    #[command(flatten)]
    pub agent_tls: AgentTlsArgs,
    #[command(flatten)]
    pub agent_binary: AgentBinaryArgs,
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
    /// The backoff of a job that ends failed_retryable: its first wait, doubling per failure
    /// in a row up to the cap.
    #[arg(long, hide = true, default_value = "60s", value_parser = parse_duration)]
    pub failed_retry_base: Duration,
    #[arg(long, hide = true, default_value = "1h", value_parser = parse_duration)]
    pub failed_retry_cap: Duration,
    #[arg(long, hide = true)]
    pub seed: Option<u64>,
}

/// The agent channel's TLS: the operator's certificate, or a development CA kept with the
/// fleet's state; plain HTTP only when asked for.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct AgentTlsArgs {
    /// The agent channel's certificate chain (PEM; with --agent-tls-key).
    #[arg(
        long,
        env = "METALFORM_AGENT_TLS_CERT",
        value_name = "FILE",
        requires = "agent_tls_key"
    )]
    pub agent_tls_cert: Option<PathBuf>,
    /// The certificate's private key (PEM).
    #[arg(
        long,
        env = "METALFORM_AGENT_TLS_KEY",
        value_name = "FILE",
        requires = "agent_tls_cert"
    )]
    pub agent_tls_key: Option<PathBuf>,
    /// The CA bundle deployed hosts pin for the agent channel (default with
    /// --agent-tls-cert: their system roots).
    #[arg(long, env = "METALFORM_AGENT_TLS_CLIENT_CA", value_name = "FILE")]
    pub agent_tls_client_ca: Option<PathBuf>,
    /// Where the development CA lives when no certificate is given (made on first use;
    /// default: the fleet's .metalform/agent-ca/). Keep it: deployed hosts pin it.
    #[arg(long, env = "METALFORM_AGENT_CA_DIR", value_name = "DIR")]
    pub agent_ca_dir: Option<PathBuf>,
    /// Serve the agent channel over plain HTTP (a lab, or TLS ended in front of metalform).
    #[arg(long, conflicts_with_all = ["agent_tls_cert", "agent_ca_dir"])]
    pub agent_plain_http: bool,
}

impl AgentTlsArgs {
    /// The TLS setting for a listener on `listen` reached at `public_url`.
    pub fn setting(
        &self,
        fleet_dir: &Path,
        listen: SocketAddr,
        public_url: Option<&url::Url>,
    ) -> TlsSetting {
        if self.agent_plain_http {
            return TlsSetting::Off;
        }
        match (&self.agent_tls_cert, &self.agent_tls_key) {
            (Some(cert), Some(key)) => TlsSetting::Files {
                cert: cert.clone(),
                key: key.clone(),
                client_ca: self.agent_tls_client_ca.clone(),
            },
            _ => TlsSetting::DevCa {
                dir: self
                    .agent_ca_dir
                    .clone()
                    .unwrap_or_else(|| fleet_dir.join(".metalform").join("agent-ca")),
                names: crate::agent::server_certificate_names(listen, public_url),
            },
        }
    }
}

/// The node agent deployed hosts install (docs/agent.md "Install").
#[derive(Debug, Clone, Default, clap::Args)]
pub struct AgentBinaryArgs {
    /// Where deployed hosts download the node agent (`metalform-agent`); without it they start
    /// an agent unit already in their image, or only enroll.
    #[arg(
        long,
        env = "METALFORM_AGENT_BINARY_URL",
        value_name = "URL",
        requires = "agent_binary_sha256"
    )]
    pub agent_binary_url: Option<url::Url>,
    /// The SHA-256 the downloaded agent must have (64 hex digits): hosts refuse anything else.
    #[arg(
        long,
        env = "METALFORM_AGENT_BINARY_SHA256",
        value_name = "HEX",
        requires = "agent_binary_url"
    )]
    pub agent_binary_sha256: Option<String>,
}

impl AgentBinaryArgs {
    pub fn binary(&self) -> Result<Option<AgentBinary>, CliError> {
        let (Some(url), Some(sha256)) = (&self.agent_binary_url, &self.agent_binary_sha256) else {
            return Ok(None);
        };
        let sha256 = sha256.trim().to_ascii_lowercase();
        if sha256.len() != 64 || !sha256.chars().all(|c| c.is_ascii_hexdigit()) {
            return Err(
                CliError::argument("--agent-binary-sha256 must be 64 hex digits")
                    .hint("sha256sum metalform-agent prints it"),
            );
        }
        Ok(Some(AgentBinary {
            url: url.to_string(),
            sha256,
        }))
    }
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

/// How stages reach BMCs and deployed hosts, the agent channel's URL and TLS, and the agent
/// hosts install; checked before anything else is opened.
pub(super) struct Peering {
    peers: Peers,
    public_url: Option<url::Url>,
    tls: TlsSetting,
    binary: Option<AgentBinary>,
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
                .hint("pass --agent-url https://ADDRESS:PORT/ that the hosts' deploy network reaches (and --agent-listen to bind it)"));
            }
        };
        let tls = exec
            .agent_tls
            .setting(&exec.fleet.fleet, exec.agent_listen, public_url.as_ref());
        Ok(Peering {
            peers,
            public_url,
            tls,
            binary: exec.agent_binary.binary()?,
        })
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
    agents: AgentServer,
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
        let world = World::open(global, &exec.fleet, &exec.secrets, options.lease_ttl).await?;
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
        let mut config = AgentServerConfig::new(exec.agent_listen, peering.public_url, peering.tls);
        config.limits = config.limits.one_peer_on_loopback(exec.agent_listen);
        let agents = match AgentServer::start(world.store.clone(), config).await {
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
            enroll_url: agents.enroll_url(),
            agent_install: AgentInstall {
                binary: peering.binary,
                ca_bundle: agents.client_ca().map(str::to_owned),
            },
            actor,
            poll_interval: exec.poll_interval,
            agent_signals: Some(agents.channel().signals().clone()),
        };
        let options = ExecutorOptions {
            poll_interval: exec.poll_interval,
            retry_base: exec.retry_base,
            failed_retry: crate::backoff::Backoff::new(
                exec.failed_retry_base,
                exec.failed_retry_cap.max(exec.failed_retry_base),
            ),
            lease_ttl: exec.lease_ttl,
            seed: exec.seed.unwrap_or(options.seed),
            ..options
        };
        Ok(Runtime {
            fleet,
            world,
            executor: Executor::new(env, options, progress),
            maas,
            agents,
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
        self.agents.shutdown().await;
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
    if args.json && args.planfile.is_none() && !args.auto_approve {
        return Err(CliError::argument(
            "--json cannot ask for confirmation: stdout carries the event stream",
        )
        .hint(
            "apply a reviewed plan file (`metalform plan --out PLANFILE`), or add --auto-approve",
        ));
    }
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
    let world = World::open(
        global,
        &args.exec.fleet,
        &args.exec.secrets,
        args.exec.lease_ttl,
    )
    .await?
    .patience(args.wait.patience());
    let (items, blocked) = match prepare(&args, &fleet, &world, plan_file).await {
        Ok(Prepared::Run { work, blocked }) => (work, blocked),
        Ok(Prepared::Nothing { blocked }) => {
            world.close().await;
            if args.json {
                print!("{}", report_json(&ApplyReport::default(), &[], 0));
            }
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
    let progress: Arc<dyn Progress> = if args.json {
        Arc::new(JsonProgress::new())
    } else {
        Arc::new(StderrProgress::new())
    };
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
    let maas_requests = runtime.maas.metrics().total();
    let findings = findings(&runtime.world.store, &report).await;
    if args.json {
        print!("{}", report_json(&report, &findings, maas_requests));
    } else {
        print!("{}", render_outcome(&report, &diverged(&findings)));
        print!("{}", render_findings(&findings));
        eprintln!("{maas_requests} MAAS request(s) made by this apply");
    }
    runtime.shutdown().await;
    let exit = finish(&report)?;
    not_as_declared(&findings)?;
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
    if args.json {
        println!(
            "{}",
            serde_json::json!({
                "event": "plan",
                "plan_id": plan.id,
                "fleet_revision": plan.fleet_revision,
                "summary": plan.summary,
            })
        );
    } else {
        print!(
            "{}",
            render::render_text(
                &plan,
                render::TextOptions {
                    show_unchanged: false
                }
            )
        );
    }
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
            _ if args.json => {}
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
    render_outcome(report, &[])
}

/// The result table of an apply whose nodes `diverged` ended their jobs but are not what
/// their manifests say: those are not counted converged.
fn render_outcome(report: &ApplyReport, diverged: &[&str]) -> String {
    let rows: Vec<Vec<String>> = report
        .results
        .iter()
        .map(|r| {
            let (result, detail) = match &r.outcome {
                NodeOutcome::Converged { .. } if diverged.contains(&r.node.as_str()) => (
                    "diverged".into(),
                    "not what its manifest says (see the warnings below)".into(),
                ),
                NodeOutcome::Converged { state } => (state.to_string(), String::new()),
                NodeOutcome::Failed {
                    state,
                    class,
                    code,
                    message,
                } => (state.to_string(), format!("{class}/{code}: {message}")),
                NodeOutcome::Left { reason } => ("not run".into(), reason.clone()),
                NodeOutcome::Aborted { reason } => ("stopped".into(), reason.clone()),
                NodeOutcome::Queued { reason } => ("queued".into(), reason.clone()),
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
    let differing = if diverged.is_empty() {
        String::new()
    } else {
        format!(", {} not as declared", diverged.len())
    };
    out.push_str(&format!(
        "\nApply: {} converged{differing}, {} failed, {} not run.\n",
        report.converged() - diverged.len(),
        report.failed(),
        report.not_run()
    ));
    out
}

/// A warning an onboarding of this apply left on its node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Finding {
    /// `site/hostname`.
    pub node: String,
    pub message: String,
    /// The node is not what its manifest says (it is not counted converged).
    pub mismatch: bool,
}

/// The warnings of the onboardings this apply converged, in the report's node order (a failed
/// node shows its failure instead).
async fn findings(store: &crate::store::Store, report: &ApplyReport) -> Vec<Finding> {
    let mut out = Vec::new();
    for result in &report.results {
        let (Some(id), NodeOutcome::Converged { .. }) = (result.job_id, &result.outcome) else {
            continue;
        };
        // A decommission's id is not an onboarding's: it has no warnings to read.
        let Ok(job) = store.job(crate::lifecycle::JobKind::Onboarding, id).await else {
            continue;
        };
        let facts = crate::stages::onboard::Facts::from_details(&job.stage_details);
        for warning in &facts.warnings {
            out.push(Finding {
                node: result.node.clone(),
                message: warning.clone(),
                mismatch: facts.mismatches.contains(warning),
            });
        }
    }
    out
}

/// The warnings after the result table, those that keep a node from converging marked.
pub(super) fn render_findings(findings: &[Finding]) -> String {
    if findings.is_empty() {
        return String::new();
    }
    let mut out = format!("\nWarnings ({}):\n", findings.len());
    for finding in findings {
        let mark = if finding.mismatch {
            " [not as the manifest says]"
        } else {
            ""
        };
        out.push_str(&format!("  {}: {}{mark}\n", finding.node, finding.message));
    }
    crate::sanitize::terminal::escape(&out).into_owned()
}

/// The nodes with a warning that they differ from their manifests, once each.
fn diverged(findings: &[Finding]) -> Vec<&str> {
    let mut nodes: Vec<&str> = findings
        .iter()
        .filter(|f| f.mismatch)
        .map(|f| f.node.as_str())
        .collect();
    nodes.dedup();
    nodes
}

/// Nodes whose onboarding ended but which differ from their manifests: not converged (exit 1).
fn not_as_declared(findings: &[Finding]) -> Result<(), CliError> {
    let nodes = diverged(findings);
    if nodes.is_empty() {
        return Ok(());
    }
    Err(CliError::user(format!(
        "{} node(s) are not what their manifests say: {}",
        nodes.len(),
        nodes.join(", ")
    ))
    .hint("the warnings above say what differs and what brings the node in line"))
}

/// The end of `apply --json`: a `result` line per node, a `warning` line per warning, then
/// the `summary` line.
pub(super) fn report_json(
    report: &ApplyReport,
    findings: &[Finding],
    maas_requests: u64,
) -> String {
    let mut out = String::new();
    for r in &report.results {
        let (result, state, detail) = match &r.outcome {
            NodeOutcome::Converged { state } => ("converged", Some(state.to_string()), None),
            NodeOutcome::Failed {
                state,
                class,
                code,
                message,
            } => (
                "failed",
                Some(state.to_string()),
                Some(format!("{class}/{code}: {message}")),
            ),
            NodeOutcome::Left { reason } => ("not_run", None, Some(reason.clone())),
            NodeOutcome::Aborted { reason } => ("stopped", None, Some(reason.clone())),
            NodeOutcome::Queued { reason } => ("queued", None, Some(reason.clone())),
        };
        let line = serde_json::json!({
            "event": "result",
            "node": r.node,
            "result": result,
            "job_state": state,
            "job_id": r.job_id,
            "detail": detail,
        });
        out.push_str(&line.to_string());
        out.push('\n');
    }
    for finding in findings {
        let line = serde_json::json!({
            "event": "warning",
            "node": finding.node,
            "message": finding.message,
            "mismatch": finding.mismatch,
        });
        out.push_str(&line.to_string());
        out.push('\n');
    }
    let differing = diverged(findings);
    let summary = serde_json::json!({
        "event": "summary",
        "converged": report.converged() - differing.len(),
        "diverged": differing.len(),
        "failed": report.failed(),
        "not_run": report.not_run(),
        "warnings": findings.len(),
        "maas_requests": maas_requests,
    });
    out.push_str(&summary.to_string());
    out.push('\n');
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apply::NodeResult;
    use crate::lifecycle::JobState;

    fn converged(node: &str) -> NodeResult {
        NodeResult {
            node: node.into(),
            job_id: None,
            outcome: NodeOutcome::Converged {
                state: JobState::Completed,
            },
        }
    }

    #[test]
    fn warnings_are_listed_and_a_mismatch_is_not_converged() {
        let report = ApplyReport {
            results: vec![converged("dc1/a"), converged("dc1/b")],
        };
        let findings = vec![
            Finding {
                node: "dc1/a".into(),
                message: "eno8303 of abc123 has no subnet to link AUTO".into(),
                mismatch: false,
            },
            Finding {
                node: "dc1/b".into(),
                message: "def456 was deployed without hardware sync".into(),
                mismatch: true,
            },
        ];
        assert_eq!(
            render_findings(&findings),
            "\nWarnings (2):\n  dc1/a: eno8303 of abc123 has no subnet to link AUTO\n  \
             dc1/b: def456 was deployed without hardware sync [not as the manifest says]\n"
        );
        let err = not_as_declared(&findings).unwrap_err();
        assert_eq!(
            err.to_string(),
            "error: 1 node(s) are not what their manifests say: dc1/b\n\
             hint: the warnings above say what differs and what brings the node in line"
        );
        assert!(not_as_declared(&findings[..1]).is_ok());
        // The table does not count the differing node converged.
        let table = render_outcome(&report, &diverged(&findings));
        assert!(
            table.ends_with("\nApply: 1 converged, 1 not as declared, 0 failed, 0 not run.\n"),
            "{table}"
        );
        let row = table.lines().find(|l| l.starts_with("dc1/b")).unwrap();
        assert!(row.contains("diverged"), "{table}");
        assert!(render_report(&report).ends_with("\nApply: 2 converged, 0 failed, 0 not run.\n"));
        let json = report_json(&report, &findings, 7);
        let last: serde_json::Value = serde_json::from_str(json.lines().last().unwrap()).unwrap();
        assert_eq!(
            last,
            serde_json::json!({"event": "summary", "converged": 1, "diverged": 1, "failed": 0,
                "not_run": 0, "warnings": 2, "maas_requests": 7})
        );
        assert_eq!(
            json.lines()
                .filter(|l| l.contains("\"event\":\"warning\""))
                .count(),
            2
        );
    }
}
