//! The node agent, `metalform agent` (seed 000 §4.3 WaitForAgentEnrollment, §5.2–§5.6, §6.3,
//! §9.1, §11; seed 001 §8; docs/agent.md): what runs on every deployed host.
//!
//! It enrolls once with the single-use token cloud-init left in `/etc/metalform/agent.env`
//! and keeps the agent token it gets in its state directory (0600); it re-enrolls only when an
//! operator says so (`metalform agent enroll --force`). Then it long-polls its task URL — each
//! poll is a heartbeat — and runs one task at a time through the catalog's executors, renewing
//! the task's lease while it works (by the length the server gave, never by this host's
//! clock), and reports the result. For a while after a task (and after starting) it
//! long-polls back to back, so a workflow's next task starts at once; otherwise it heartbeats —
//! a short poll every heartbeat interval, on a connection it does not keep — so an idle fleet
//! holds no connections open on the control plane. A result is journaled before it is sent, so a lost answer
//! or a crash is followed by the same report again; a `409 lease_lost` answer drops it. A task
//! handed out again after the agent died skips the changes its journal says were made. When
//! the server is unreachable it backs off with jitter. A refusal only an operator can fix (a
//! revoked token, an unusable configuration) stops it with exit status 78, which the systemd
//! unit does not restart into.

pub mod catalog;
pub mod client;
pub mod config;
pub mod exec;
pub mod probe;
pub mod state;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rand::RngExt as _;
use serde_json::json;

use client::{Answer, Client};
use config::{EnvFile, NodeConfig};
use exec::{DryRun, HostRunner, Identity, Report, Runner, TaskContext, TaskExecutor};
use state::{Credentials, Journal, StateDir};

use crate::agent::tasks::{ResultBody, ResultStatus, TaskBody};

/// The agent's version as it reports it.
pub const AGENT_VERSION: &str = concat!("metalform-agent/", env!("CARGO_PKG_VERSION"));

/// Exit status for a refusal only an operator can fix (sysexits EX_CONFIG); the unit's
/// `RestartPreventExitStatus`.
pub const EXIT_NEEDS_OPERATOR: u8 = 78;

/// Where things are; what the command line and the defaults say.
#[derive(Debug, Clone)]
pub struct Options {
    pub config: PathBuf,
    pub env_file: PathBuf,
    pub state_dir: PathBuf,
    pub ca_file: Option<PathBuf>,
    pub dry_run: bool,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            config: "/etc/metalform/agent.toml".into(),
            env_file: crate::cloudinit::AGENT_ENV_PATH.into(),
            state_dir: "/var/lib/metalform-agent".into(),
            ca_file: None,
            dry_run: false,
        }
    }
}

/// Why the agent stopped without being asked to.
#[derive(Debug, thiserror::Error)]
pub enum AgentStop {
    /// Needs an operator: exit 78.
    #[error("{message}")]
    NeedsOperator { message: String, hint: String },
    /// Something else went wrong: exit 1.
    #[error("{0}")]
    Failed(String),
}

impl AgentStop {
    fn operator(message: impl Into<String>, hint: impl Into<String>) -> Self {
        AgentStop::NeedsOperator {
            message: message.into(),
            hint: hint.into(),
        }
    }
}

impl From<state::StateError> for AgentStop {
    fn from(err: state::StateError) -> Self {
        let hint = match &err {
            state::StateError::Locked { .. } => {
                "stop the other agent (systemctl status metalform-agent), or give this one its own --state-dir"
            }
            _ => {
                "check the state directory's ownership and space (docs/agent.md \"Troubleshooting\")"
            }
        };
        AgentStop::operator(err.to_string(), hint)
    }
}

/// How a run ended normally.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stopped {
    /// Asked to (SIGTERM, SIGINT).
    Signalled,
    /// `node.uninstall` ran: the agent removed itself.
    Uninstalled,
}

/// Everything a running agent holds.
struct Agent {
    options: Options,
    config: NodeConfig,
    env: EnvFile,
    identity: Identity,
    state: StateDir,
    client: Client,
    runner: Arc<dyn Runner>,
    catalog: Arc<Vec<Box<dyn TaskExecutor>>>,
}

/// The CA the agent pins: `--ca-file`, `[server] ca_file`, or `/etc/metalform/ca.pem` when it
/// exists (what cloud-init writes).
fn ca_of(options: &Options, config: &NodeConfig) -> Result<Option<(String, String)>, AgentStop> {
    let path = options
        .ca_file
        .clone()
        .or_else(|| config.server.ca_file.clone())
        .or_else(|| {
            let default = Path::new(crate::cloudinit::AGENT_CA_PATH);
            default.exists().then(|| default.to_owned())
        });
    let Some(path) = path else {
        return Ok(None);
    };
    let pem = std::fs::read_to_string(&path).map_err(|e| {
        AgentStop::operator(
            format!("cannot read the CA bundle {}: {e}", path.display()),
            "cloud-init writes it to /etc/metalform/ca.pem; or give --ca-file",
        )
    })?;
    Ok(Some((path.display().to_string(), pem)))
}

impl Agent {
    fn open(options: Options) -> Result<Agent, AgentStop> {
        let config = NodeConfig::load(&options.config).map_err(|e| {
            AgentStop::operator(
                e.to_string(),
                "see docs/agent.md \"Configuration\" for every key",
            )
        })?;
        let env = EnvFile::load(&options.env_file).map_err(|e| {
            AgentStop::operator(e.to_string(), "cloud-init writes /etc/metalform/agent.env")
        })?;
        let identity = env.identity();
        let state = StateDir::open(&options.state_dir)?;
        let ca = ca_of(&options, &config)?;
        let client = Client::new(ca.as_ref().map(|(p, pem)| (p.as_str(), pem.clone())))
            .map_err(|e| AgentStop::operator(e.to_string(), "give a PEM CA bundle"))?;
        let host_runner = HostRunner {
            timeout: config.commands.timeout.0,
        };
        let runner: Arc<dyn Runner> = if options.dry_run {
            Arc::new(DryRun { inner: host_runner })
        } else {
            Arc::new(host_runner)
        };
        Ok(Agent {
            options,
            config,
            env,
            identity,
            state,
            client,
            runner,
            catalog: Arc::new(catalog::catalog()),
        })
    }

    /// Back-off after the `attempt`th failure in a row: doubling from `retry_base` to
    /// `retry_cap`, with full jitter (so a fleet whose control plane came back does not call
    /// in step).
    fn backoff(&self, attempt: u32) -> Duration {
        let base = self
            .config
            .server
            .retry_base
            .0
            .max(Duration::from_millis(10));
        let cap = self.config.server.retry_cap.0.max(base);
        let ceiling = base.saturating_mul(1u32 << attempt.min(16)).min(cap);
        let millis = ceiling.as_millis().max(1) as u64;
        Duration::from_millis(rand::rng().random_range(millis / 2..=millis))
    }

    /// The credentials: kept, or by enrolling with the environment file's token.
    async fn credentials(&self, stop: &mut Signals) -> Result<Option<Credentials>, AgentStop> {
        if let Some(credentials) = self.state.credentials()? {
            return Ok(Some(credentials));
        }
        let (Some(url), Some(token)) = (
            self.env.get("METALFORM_ENROLL_URL"),
            self.env.get("METALFORM_ENROLL_TOKEN"),
        ) else {
            return Err(AgentStop::operator(
                format!(
                    "not enrolled and {} has no METALFORM_ENROLL_URL and METALFORM_ENROLL_TOKEN",
                    self.options.env_file.display()
                ),
                "the host's cloud-init payload carries them; to enroll by hand: metalform agent enroll --url URL --token TOKEN",
            ));
        };
        enroll(self, url, token, stop).await
    }

    fn save_journal(&self, journal: &Journal) {
        if let Err(err) = self.state.save_journal(journal) {
            tracing::error!(task = %journal.task_id, error = %err, "task journal not written");
        }
    }
}

/// SIGTERM and SIGINT, as a future that resolves once one came.
struct Signals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
    seen: bool,
}

impl Signals {
    fn new() -> Result<Signals, AgentStop> {
        use tokio::signal::unix::{SignalKind, signal};
        let err = |e: std::io::Error| AgentStop::Failed(format!("cannot handle signals: {e}"));
        Ok(Signals {
            term: signal(SignalKind::terminate()).map_err(err)?,
            int: signal(SignalKind::interrupt()).map_err(err)?,
            seen: false,
        })
    }

    async fn wait(&mut self) {
        if self.seen {
            return;
        }
        tokio::select! {
            _ = self.term.recv() => {}
            _ = self.int.recv() => {}
        }
        self.seen = true;
    }

    /// Sleep `duration` unless a signal comes first: true when one did.
    async fn sleep(&mut self, duration: Duration) -> bool {
        tokio::select! {
            _ = tokio::time::sleep(duration) => self.seen,
            _ = self.wait() => true,
        }
    }
}

/// Enroll with `token` at `url` (retrying while the server is unreachable); the credentials
/// are saved before they are used.
async fn enroll(
    agent: &Agent,
    url: &str,
    token: &str,
    stop: &mut Signals,
) -> Result<Option<Credentials>, AgentStop> {
    let body = json!({
        "token": token,
        "hostname": agent.identity.hostname,
        "system_id": agent.identity.system_id,
        "agent_version": AGENT_VERSION,
        "layers": layer_outcomes(&agent.config),
    });
    let mut failures = 0;
    loop {
        match agent.client.enroll(url, &body).await {
            Answer::Ok(answer) => {
                let node_id = answer.node_id.parse().map_err(|_| {
                    AgentStop::Failed(format!(
                        "the server answered a node id that is not one: {}",
                        answer.node_id
                    ))
                })?;
                let credentials = Credentials {
                    node_id,
                    agent_token: answer.agent_token,
                    tasks_url: answer.tasks_url,
                    enroll_url: url.to_owned(),
                    heartbeat_interval_seconds: answer.heartbeat_interval_seconds,
                    enrolled_at: chrono::Utc::now().to_rfc3339(),
                };
                agent.state.save_credentials(&credentials)?;
                tracing::info!(node = %credentials.node_id, tasks_url = %credentials.tasks_url, "enrolled");
                return Ok(Some(credentials));
            }
            Answer::Refused { status, error } => {
                return Err(AgentStop::operator(
                    format!(
                        "enrollment refused ({status} {}): {}",
                        error.error, error.message
                    ),
                    "an enrollment token works once and expires: redeploy or reimage the node for a new one, or run metalform agent enroll --token NEW_TOKEN (docs/agent.md)",
                ));
            }
            Answer::Empty => {}
            Answer::Transient(reason) => {
                let wait = agent.backoff(failures);
                failures += 1;
                tracing::warn!(url, reason = %reason, retry_in_ms = wait.as_millis() as u64, attempt = failures, "enrollment: the control plane is unreachable or busy; retrying");
                if stop.sleep(wait).await {
                    return Ok(None);
                }
            }
        }
    }
}

/// The first-boot layer outcomes cloud-init's runner recorded (`/var/lib/metalform/layers`).
fn layer_outcomes(config: &NodeConfig) -> serde_json::Map<String, serde_json::Value> {
    let dir = config.host.root.join("var/lib/metalform/layers");
    let mut layers = serde_json::Map::new();
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten().take(16) {
            let Ok(text) = std::fs::read_to_string(entry.path()) else {
                continue;
            };
            if let Some(status) = text.lines().find_map(|l| l.strip_prefix("status=")) {
                layers.insert(
                    entry
                        .file_name()
                        .to_string_lossy()
                        .chars()
                        .take(64)
                        .collect(),
                    json!(status.chars().take(64).collect::<String>()),
                );
            }
        }
    }
    layers
}

/// Run the agent until a signal, an uninstall, or a refusal that needs an operator.
pub async fn run(options: Options) -> Result<Stopped, AgentStop> {
    let agent = Agent::open(options)?;
    let mut signals = Signals::new()?;
    tracing::info!(
        version = AGENT_VERSION,
        hostname = %agent.identity.hostname,
        state_dir = %agent.state.dir().display(),
        dry_run = agent.options.dry_run,
        "metalform agent starting"
    );
    let Some(credentials) = agent.credentials(&mut signals).await? else {
        return Ok(Stopped::Signalled);
    };
    // Results a crash or an outage kept from the control plane go first.
    for mut journal in agent.state.unreported()? {
        if let Some(result) = journal.result.clone() {
            if report(&agent, &credentials, &mut journal, &result, &mut signals).await? {
                return Ok(Stopped::Signalled);
            }
            if after_report(&agent, &journal).await {
                return Ok(Stopped::Uninstalled);
            }
        }
    }
    poll_loop(&agent, &credentials, &mut signals).await
}

async fn poll_loop(
    agent: &Agent,
    credentials: &Credentials,
    signals: &mut Signals,
) -> Result<Stopped, AgentStop> {
    let wait = agent.config.server.poll_wait.0.min(Duration::from_secs(60));
    let hot_period = agent.config.server.hot_period.0;
    let heartbeat = Duration::from_secs(credentials.heartbeat_interval_seconds.clamp(5, 300));
    // Busy (just started, or a task just ran): long-poll back to back, so the next task of a
    // workflow starts at once. Idle: a short poll every heartbeat interval.
    let mut hot_until = tokio::time::Instant::now() + hot_period;
    let mut failures = 0;
    loop {
        let hot = tokio::time::Instant::now() < hot_until;
        let polled = tokio::select! {
            polled = agent.client.poll(
                &credentials.tasks_url,
                &credentials.agent_token,
                if hot { wait } else { Duration::ZERO },
                !hot,
            ) => polled,
            _ = signals.wait() => return Ok(Stopped::Signalled),
        };
        match polled {
            Answer::Ok(answer) => {
                failures = 0;
                if let Some(stopped) = run_task(agent, credentials, answer.task, signals).await? {
                    return Ok(stopped);
                }
                hot_until = tokio::time::Instant::now() + hot_period;
            }
            Answer::Empty => {
                failures = 0;
                if !hot {
                    // ±10 %: a fleet started together does not heartbeat in step.
                    let pause = heartbeat.mul_f64(rand::rng().random_range(0.9..1.1));
                    if signals.sleep(pause).await {
                        return Ok(Stopped::Signalled);
                    }
                }
            }
            Answer::Refused { status, error } => return Err(refused(status, &error)),
            Answer::Transient(reason) => {
                let pause = agent.backoff(failures);
                failures += 1;
                tracing::warn!(reason = %reason, retry_in_ms = pause.as_millis() as u64, attempt = failures, "task poll failed; retrying");
                if signals.sleep(pause).await {
                    return Ok(Stopped::Signalled);
                }
            }
        }
    }
}

/// What a refused task call means for the agent.
fn refused(status: u16, error: &crate::agent::ErrorBody) -> AgentStop {
    match (status, error.error.as_str()) {
        (401, _) => AgentStop::operator(
            format!(
                "the control plane refuses this agent's token ({}): {}",
                error.error, error.message
            ),
            "it was revoked (the node was decommissioned or enrolled again); to enroll again: metalform agent enroll --force --token NEW_TOKEN (docs/agent.md)",
        ),
        _ => AgentStop::operator(
            format!(
                "the control plane refused a task call ({status} {}): {}",
                error.error, error.message
            ),
            "the credentials do not match this node; see docs/agent.md \"Troubleshooting\"",
        ),
    }
}

/// Run one task (or report the result it already has) and report it. `Some` when the agent
/// must stop.
async fn run_task(
    agent: &Agent,
    credentials: &Credentials,
    task: TaskBody,
    signals: &mut Signals,
) -> Result<Option<Stopped>, AgentStop> {
    let mut journal = agent
        .state
        .journal(task.id)?
        .unwrap_or_else(|| Journal::new(task.id, &task.task_type));
    journal.dispatches += 1;
    journal.reported = None;
    agent.save_journal(&journal);
    let result = match journal.result.clone() {
        // It ran to its end before, and the report did not get through: the same report again.
        Some(result) => {
            tracing::info!(task = %task.id, r#type = %task.task_type, "task already done; reporting its result again");
            result
        }
        None => {
            tracing::info!(task = %task.id, r#type = %task.task_type, dispatch = journal.dispatches, "task started");
            let (result, then, ran) = execute(agent, credentials, &task, &mut journal).await;
            journal.result = Some(result.clone());
            journal.after_report = then
                .iter()
                .map(|cmd| {
                    std::iter::once(cmd.program.clone())
                        .chain(cmd.args.clone())
                        .collect()
                })
                .collect();
            agent.save_journal(&journal);
            tracing::info!(task = %task.id, r#type = %task.task_type, status = ?result.status, message = result.message.as_deref().unwrap_or(""), commands = ran, "task finished");
            result
        }
    };
    let signalled = report(agent, credentials, &mut journal, &result, signals).await?;
    agent.state.prune();
    if after_report(agent, &journal).await {
        return Ok(Some(Stopped::Uninstalled));
    }
    Ok(signalled.then_some(Stopped::Signalled))
}

/// The changes a task left for after its report (`node.uninstall` removing the agent), once
/// the control plane stored the result; true when there were any (the agent then stops).
async fn after_report(agent: &Agent, journal: &Journal) -> bool {
    if journal.after_report.is_empty() || journal.reported.as_deref() != Some("stored") {
        return false;
    }
    for line in &journal.after_report {
        let Some((program, args)) = line.split_first() else {
            continue;
        };
        let cmd = exec::Cmd {
            program: program.clone(),
            args: args.to_vec(),
            changes: true,
        };
        tracing::info!(command = %cmd.line(), "uninstall");
        let runner = agent.runner.clone();
        match tokio::task::spawn_blocking(move || runner.run(&cmd)).await {
            Ok(Ok(out)) if out.ok() => {}
            Ok(Ok(out)) => tracing::warn!(output = %out.tail(), "uninstall step failed"),
            Ok(Err(err)) => tracing::warn!(error = %err, "uninstall step failed"),
            Err(err) => tracing::warn!(error = %err, "uninstall step failed"),
        }
    }
    true
}

/// Run the task's executor on a blocking thread, renewing its lease meanwhile.
async fn execute(
    agent: &Agent,
    credentials: &Credentials,
    task: &TaskBody,
    journal: &mut Journal,
) -> (ResultBody, Vec<exec::Cmd>, usize) {
    let Some(index) = agent
        .catalog
        .iter()
        .position(|e| e.task_type().as_str() == task.task_type)
    else {
        let known: Vec<&str> = agent
            .catalog
            .iter()
            .map(|e| e.task_type().as_str())
            .collect();
        return (
            ResultBody {
                status: ResultStatus::Failed,
                message: Some(format!(
                    "{AGENT_VERSION} does not run task type `{}` (it runs: {})",
                    task.task_type,
                    known.join(", ")
                )),
                details: json!({"code": "unknown_task_type"}),
            },
            Vec::new(),
            0,
        );
    };
    let catalog = agent.catalog.clone();
    let config = agent.config.clone();
    let identity = agent.identity.clone();
    let runner = agent.runner.clone();
    let state_dir = agent.state.dir().to_owned();
    let params = task.params.clone();
    let mut owned = journal.clone();
    let saver = agent.state.journal_writer();
    let work = tokio::task::spawn_blocking(move || {
        let host = probe::HostView::new(&config.host.root);
        // Each change is journaled as soon as it succeeded (a crash right after it must not
        // make it again).
        let mut save = |j: &Journal| saver.save(j);
        let mut ctx = TaskContext::new(
            &config,
            &identity,
            &host,
            &state_dir,
            runner.as_ref(),
            &mut owned,
            &mut save,
        );
        let outcome = catalog[index].run(&params, &mut ctx);
        let ran = ctx.ran.len();
        (outcome, ran, owned)
    });
    tokio::pin!(work);
    // Renew at a third of the lease: two renewals may fail before it runs out.
    let every = Duration::from_secs(task.lease_seconds.max(3) / 3);
    let mut renew = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    let outcome = loop {
        tokio::select! {
            done = &mut work => break done,
            _ = renew.tick() => match agent.client.renew(&credentials.tasks_url, &credentials.agent_token, task.id).await {
                Answer::Ok(_) => tracing::debug!(task = %task.id, "lease renewed"),
                Answer::Refused { status: 409, .. } => tracing::warn!(task = %task.id, "lease lost while the task runs (it will be handed out again); finishing this run, its result will be dropped"),
                other => tracing::warn!(task = %task.id, answer = ?other, "lease renewal failed; retrying at the next renewal"),
            },
        }
    };
    match outcome {
        Ok((outcome, ran, after)) => {
            *journal = after;
            let (result, then) = into_result(outcome);
            (result, then, ran)
        }
        Err(panic) => (
            ResultBody {
                status: ResultStatus::Failed,
                message: Some(format!("the agent failed while running the task: {panic}")),
                details: json!({"code": "agent_error"}),
            },
            Vec::new(),
            0,
        ),
    }
}

fn into_result(outcome: Result<Report, exec::TaskFailure>) -> (ResultBody, Vec<exec::Cmd>) {
    match outcome {
        Ok(report) => (
            ResultBody {
                status: ResultStatus::Succeeded,
                message: Some(report.message),
                details: report.details,
            },
            report.then,
        ),
        Err(failure) => {
            let mut details = failure.details;
            if let Some(map) = details.as_object_mut() {
                map.insert("code".into(), json!(failure.code));
            } else {
                details = json!({"code": failure.code, "details": details});
            }
            (
                ResultBody {
                    status: ResultStatus::Failed,
                    message: Some(failure.message),
                    details,
                },
                Vec::new(),
            )
        }
    }
}

/// The largest result body the server takes (docs/agent-protocol.md).
const MAX_RESULT: usize = crate::agent::tasks::MAX_RESULT_BYTES;

/// A result that fits the server's limits: the message cut to 4,000 characters, the details
/// dropped (with a note) when the whole would be over 64 KiB.
fn fitted(result: &ResultBody) -> ResultBody {
    let mut fitted = result.clone();
    if let Some(message) = &mut fitted.message
        && message.chars().count() > 4000
    {
        *message = message.chars().take(4000).collect();
    }
    let size = serde_json::to_vec(&fitted).map(|b| b.len()).unwrap_or(0);
    if size > MAX_RESULT - 1024 {
        fitted.details = json!({"truncated": true, "size": size});
    }
    fitted
}

/// Report `result` until the control plane has it or says it does not want it. True when a
/// signal came while retrying (the journal keeps the result for the next start).
async fn report(
    agent: &Agent,
    credentials: &Credentials,
    journal: &mut Journal,
    result: &ResultBody,
    signals: &mut Signals,
) -> Result<bool, AgentStop> {
    let body = fitted(result);
    let mut failures = 0;
    loop {
        let answer = agent
            .client
            .report(
                &credentials.tasks_url,
                &credentials.agent_token,
                journal.task_id,
                &body,
            )
            .await;
        let outcome = match answer {
            Answer::Ok(_) => "stored",
            Answer::Refused { status: 409, .. } => {
                tracing::warn!(task = %journal.task_id, "result dropped: the lease was lost (the task was handed out again or finished)");
                "lease_lost"
            }
            Answer::Refused { status: 404, .. } => {
                tracing::warn!(task = %journal.task_id, "result dropped: the control plane has no such task any more");
                "gone"
            }
            Answer::Refused { status, error } if status == 401 => {
                agent.save_journal(journal);
                return Err(refused(status, &error));
            }
            Answer::Refused { status, error } => {
                tracing::error!(task = %journal.task_id, status, error = %error.message, "result refused; dropped");
                "refused"
            }
            Answer::Empty | Answer::Transient(_) => {
                let pause = agent.backoff(failures);
                failures += 1;
                tracing::warn!(task = %journal.task_id, retry_in_ms = pause.as_millis() as u64, "result not delivered; retrying");
                if signals.sleep(pause).await {
                    return Ok(true);
                }
                continue;
            }
        };
        journal.reported = Some(outcome.to_owned());
        agent.save_journal(journal);
        tracing::info!(task = %journal.task_id, outcome, "result reported");
        return Ok(false);
    }
}

/// Forget the credentials and enroll again with `token` (the documented operator step).
pub async fn reenroll(
    options: Options,
    url: Option<String>,
    token: String,
) -> Result<Credentials, AgentStop> {
    let agent = Agent::open(options)?;
    let url = url
        .or_else(|| agent.env.get("METALFORM_ENROLL_URL").map(str::to_owned))
        .ok_or_else(|| {
            AgentStop::operator(
                "no enrollment URL: --url is not given and agent.env has none",
                "pass --url https://<control plane>:8741/agent/v1/enroll",
            )
        })?;
    if agent.state.forget_credentials()? {
        tracing::warn!("previous credentials forgotten");
    }
    let mut signals = Signals::new()?;
    enroll(&agent, &url, &token, &mut signals)
        .await?
        .ok_or_else(|| AgentStop::Failed("interrupted".into()))
}

/// What `metalform agent status` shows (never the token).
pub fn status(options: &Options) -> Result<serde_json::Value, AgentStop> {
    let state = StateDir::open(&options.state_dir)?;
    let credentials = state.credentials()?;
    let pending: Vec<String> = state
        .unreported()?
        .iter()
        .map(|j| format!("{} {}", j.task_id, j.task_type))
        .collect();
    Ok(json!({
        "enrolled": credentials.is_some(),
        "node_id": credentials.as_ref().map(|c| c.node_id),
        "tasks_url": credentials.as_ref().map(|c| c.tasks_url.clone()),
        "enrolled_at": credentials.as_ref().map(|c| c.enrolled_at.clone()),
        "unreported_results": pending,
        "state_dir": options.state_dir,
    }))
}
