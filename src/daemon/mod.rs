//! Long-running reconciler (seed 000 §6, DESIGN.md §6; docs/daemon.md): source polling, per-site
//! reconcile ticks, admin and agent HTTP API, metrics, graceful shutdown.
//!
//! One loop owns the schedule. It polls the fleet source (and, with `--watch`, is woken by a
//! new commit in a local repository); a newly accepted revision makes every site due. Each
//! site is reconciled at its interval, when due, or when the API asks: observe → plan →
//! dispatch the plan's change items the self-heal policy allows → the drift pass (seed 000
//! §6.3–§6.5) on the same observation (one MAAS machines list per site per reconcile), under
//! the `[drift]` policy; its report feeds the metrics and the JSON logs. Dispatched nodes run
//! as their own tasks under per-(site, profile) concurrency limits, so a site's next reconcile
//! does not wait for a long deploy; a node already running is not dispatched twice.
//!
//! Shutdown (SIGTERM) stops taking work — no polls, no reconciles, the API answers 503 to new
//! work — raises the executor's stop signal so running nodes stop at their next stage boundary
//! (journaled; leases released), waits for them, delivers pending events once more and
//! returns. A restarted daemon plans the interrupted jobs as `resume` and continues them.

pub mod config;
pub mod metrics;
pub mod provisioner;
pub mod server;
pub mod sharing;
mod slots;
pub mod source;
pub mod work;

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::FutureExt;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinSet;

pub use config::{ConfigError, DaemonConfig, SelfHealPolicy};
pub use metrics::Metrics;
pub use source::{ReadOutcome, SourceReader};

use crate::api::{
    ApiState, ApiToken, Control, ControlError, FleetRevision, ReconcileSummary, Tokens,
};
use crate::apply::decommission::{DecommissionExecutor, DecommissionWork};
use crate::apply::recovery::Recovery;
use crate::apply::{
    Executor, ExecutorOptions, Progress, ProgressEvent, SiteMaas, StageEnv, StopSignal, WorkItem,
};
use crate::clock::{Clock, SystemClock};
use crate::drift::{ActionResult, DriftEnv, DriftReport, Severity};
use crate::lifecycle::{JobKind, JobState};
use crate::model::SiteName;
use crate::observe::{MaasClients, SiteFilter, SiteObservation};
use crate::plan::PlanOptions;
use crate::provider::bmc::{IpmiTool, SimBmc};
use crate::provider::host::{SimHost, SshHost};
use crate::provider::maas::{MaasClientOptions, MaasMetrics};
use crate::secrets::SecretStore;
use crate::stages::onboard::{Peers, SitePeers};
use crate::store::{Actor, Store, StoreError};

/// Why the daemon could not start.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("secret store: {0}")]
    Secrets(#[from] crate::secrets::SecretError),
    #[error("API token `{name}`: {message}")]
    Token { name: String, message: String },
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot watch {path}: {message}")]
    Watch { path: String, message: String },
    #[error("fleet source: {0}")]
    Source(String),
    #[error("{message}")]
    Listener { message: String, hint: String },
    #[error("{message}")]
    Agent { message: String, hint: &'static str },
    #[error("{0}")]
    Replica(String),
}

impl DaemonError {
    pub fn hint(&self) -> Option<String> {
        match self {
            DaemonError::Config(e) => e.hint.clone(),
            DaemonError::Secrets(e) => e.hint().map(str::to_owned),
            DaemonError::Token { .. } => Some(
                "set the token's environment variable, or write its secret (see [[api.tokens]] in docs/daemon.md)".into(),
            ),
            DaemonError::Bind { .. } => {
                Some("choose a free address for api.listen, or stop what holds the port".into())
            }
            DaemonError::Watch { .. } => {
                Some("--watch needs source.repository to be a local repository".into())
            }
            DaemonError::Store(_) => Some("check [state] url and that the store is reachable".into()),
            DaemonError::Replica(_) => Some(
                "replicas sharing a store must agree: see docs/ha.md".into(),
            ),
            DaemonError::Source(_) => Some(
                "see [source] in docs/daemon.md: git must be installed, the token readable, the ssh key present".into(),
            ),
            DaemonError::Listener { hint, .. } => Some(hint.clone()),
            DaemonError::Agent { hint, .. } => Some((*hint).into()),
        }
    }
}

/// How the daemon runs beyond its configuration file.
#[derive(Debug, Clone, Default)]
pub struct DaemonOptions {
    /// Follow a local repository with filesystem notifications besides polling.
    pub watch: bool,
}

/// Requests from the API to the loop.
enum Command {
    Reconcile {
        site: SiteName,
        actor: Actor,
        /// The operator's reason to override maintenance windows this once.
        ignore_windows: Option<String>,
        reply: oneshot::Sender<ReconcileSummary>,
    },
}

/// An operator's override of maintenance windows for the next reconcile of a site.
#[derive(Debug, Clone)]
struct WindowOverride {
    actor: Actor,
    reason: String,
}

/// What the loop, the API and the node tasks share.
struct Core {
    config: DaemonConfig,
    store: Store,
    secrets: Arc<dyn SecretStore>,
    clients: MaasClients,
    /// The drift pass's environment (store, secrets, the same MAAS clients, `[drift]`).
    drift: DriftEnv,
    executor: Executor,
    decommissions: DecommissionExecutor,
    stop: StopSignal,
    metrics: Arc<Metrics>,
    accepting: AtomicBool,
    fleet: watch::Sender<Option<Arc<FleetRevision>>>,
    /// Nodes (`site/hostname`) dispatched and not finished.
    in_flight: Mutex<BTreeSet<String>>,
    /// This replica's share of the sites; maxParallel slots are counted in the store.
    sharing: Arc<sharing::Sharing>,
    /// The `maxParallel` slots (in the store) and the nodes this replica admits.
    slots: Arc<slots::StoreSlots>,
    /// Node runs and recovery executions.
    tasks: Mutex<JoinSet<()>>,
    commands: mpsc::UnboundedSender<Command>,
    /// The last source problem, for /healthz.
    source_problem: Mutex<Option<String>>,
    /// Replaced whole when the credentials are reloaded (SIGHUP).
    source: std::sync::RwLock<SourceReader>,
    /// Each site's plan from its last reconcile (the status pages show it).
    plans: Mutex<BTreeMap<SiteName, Arc<crate::web::LatestPlan>>>,
}

/// Progress → JSON log lines and stage metrics.
struct LogProgress {
    metrics: Arc<Metrics>,
}

impl Progress for LogProgress {
    fn report(&self, event: ProgressEvent) {
        self.metrics.stage_event(&event);
        tracing::info!(
            target: "metalform::stage",
            node = %event.node,
            stage = %event.stage,
            status = event.status.label(),
            // Not `message`: the event's own message is that key already.
            detail = %event.message,
            "stage"
        );
    }
}

/// A running daemon.
pub struct RunningDaemon {
    core: Arc<Core>,
    credentials: Credentials,
    local_addr: SocketAddr,
    agent_addr: SocketAddr,
    agent_ca: Option<String>,
    enroll_url: String,
    shutdown: watch::Sender<bool>,
    main: tokio::task::JoinHandle<()>,
}

impl RunningDaemon {
    /// The address the admin API listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The address the agent channel listens on.
    pub fn agent_addr(&self) -> SocketAddr {
        self.agent_addr
    }

    /// The CA deployed hosts pin for the agent channel (the development CA's, or the
    /// configured `tls_client_ca`).
    pub fn agent_ca(&self) -> Option<&str> {
        self.agent_ca.as_deref()
    }

    /// What cloud-init carries.
    pub fn enroll_url(&self) -> &str {
        &self.enroll_url
    }

    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.core.metrics
    }

    pub fn store(&self) -> &Store {
        &self.core.store
    }

    /// The fleet revision accepted last.
    pub fn revision(&self) -> Option<Arc<FleetRevision>> {
        self.core.fleet.borrow().clone()
    }

    /// Stop gracefully (what SIGTERM does) and wait until everything rested.
    pub async fn shutdown(self) {
        let _ = self.shutdown.send(true);
        let _ = self.main.await;
    }

    /// Wait until the daemon stopped (after [`RunningDaemon::shutdown`] from elsewhere, or a
    /// signal).
    pub async fn wait(self) {
        let _ = self.main.await;
    }

    /// A handle that triggers the graceful shutdown.
    pub fn shutdown_trigger(&self) -> watch::Sender<bool> {
        self.shutdown.clone()
    }

    /// A handle that reloads the credentials (what SIGHUP does).
    pub fn credentials(&self) -> Credentials {
        self.credentials.clone()
    }
}

/// Reloads the API tokens and the source token from where the configuration says they are
/// (environment or secret store), so a rotated token takes effect without a restart.
#[derive(Clone)]
pub struct Credentials {
    core: Arc<Core>,
    api: ApiState,
}

impl Credentials {
    /// Read every token again; only when all of them read are they swapped in (the old ones
    /// stop working at once). On error nothing changes.
    pub async fn reload(&self) -> Result<(), DaemonError> {
        let config = &self.core.config;
        let tokens = read_tokens(config, self.core.secrets.as_ref()).await?;
        let source = source_reader(config, self.core.secrets.as_ref()).await?;
        self.api.replace_tokens(tokens);
        *self.core.source.write().expect("source lock") = source;
        tracing::info!(
            api_tokens = config.tokens.len(),
            source_token = config.source.token.is_some(),
            "credentials reloaded"
        );
        Ok(())
    }
}

/// Read the configured API tokens now (environment or secret store).
async fn read_tokens(
    config: &DaemonConfig,
    secrets: &dyn SecretStore,
) -> Result<Tokens, DaemonError> {
    let mut tokens = Vec::new();
    for token in &config.tokens {
        let value = read_token(&token.source, secrets)
            .await
            .map_err(|message| DaemonError::Token {
                name: token.name.clone(),
                message,
            })?;
        if value.len() < 16 {
            return Err(DaemonError::Token {
                name: token.name.clone(),
                message: "the token is shorter than 16 characters".into(),
            });
        }
        // One value under two names would act with the first one's role (an agent token that
        // is also the admin token is an admin token): every token must be its own.
        if let Some(twin) = tokens
            .iter()
            .find(|t: &&ApiToken| t.value.expose() == value)
        {
            return Err(DaemonError::Token {
                name: token.name.clone(),
                message: format!(
                    "it has the same value as token `{}` ({} role); every API token must differ, admin and agent tokens above all",
                    twin.name,
                    match twin.role {
                        crate::api::TokenRole::Admin => "admin",
                        crate::api::TokenRole::Agent => "agent",
                    }
                ),
            });
        }
        tokens.push(ApiToken {
            name: token.name.clone(),
            role: token.role,
            value: crate::secrets::Secret::new(value),
        });
    }
    Ok(Tokens::new(&tokens))
}

/// A token's value from its environment variable or the secret store.
async fn read_token(
    source: &config::TokenSource,
    secrets: &dyn SecretStore,
) -> Result<String, String> {
    match source {
        config::TokenSource::Env(var) => {
            std::env::var(var).map_err(|_| format!("environment variable {var} is not set"))
        }
        config::TokenSource::Vault { path, key } => secrets
            .read(path)
            .await
            .and_then(|data| data.field(key).cloned())
            .map(|value| value.expose().to_owned())
            .map_err(|e| e.to_string()),
    }
}

/// The source reader, once `git` runs, the token is read and the ssh files exist.
async fn source_reader(
    config: &DaemonConfig,
    secrets: &dyn SecretStore,
) -> Result<SourceReader, DaemonError> {
    source::check_git().await.map_err(DaemonError::Source)?;
    let source = &config.source;
    for (name, path) in [
        ("ssh_key", &source.ssh_key),
        ("known_hosts", &source.known_hosts),
    ] {
        if let Some(path) = path
            && let Err(e) = std::fs::metadata(path)
        {
            return Err(DaemonError::Source(format!(
                "source.{name} {}: {e}",
                path.display()
            )));
        }
    }
    let token = match &source.token {
        None => None,
        Some(token) => Some(crate::secrets::Secret::new(
            read_token(&token.source, secrets)
                .await
                .map_err(|e| DaemonError::Source(format!("source.token: {e}")))
                .and_then(|value| {
                    // A token git might echo must be long enough to be masked as a whole.
                    crate::sanitize::Redactor::new()
                        .add("source.token", &value)
                        .map_err(|e| DaemonError::Source(e.to_string()))
                        .map(|()| value)
                })?,
        )),
    };
    Ok(SourceReader::new(source.clone(), &config.data_dir, token))
}

/// A listener's TLS: the development CA lives in `<data_dir>/dev-ca` (both listeners share
/// it) and names the listening address and the public URL's host.
fn tls_setting(
    config: &DaemonConfig,
    choice: &config::TlsChoice,
    listen: SocketAddr,
    public_url: Option<&url::Url>,
) -> crate::listener::TlsSetting {
    match choice {
        config::TlsChoice::Off => crate::listener::TlsSetting::Off,
        config::TlsChoice::Files {
            cert,
            key,
            client_ca,
        } => crate::listener::TlsSetting::Files {
            cert: cert.clone(),
            key: key.clone(),
            client_ca: client_ca.clone(),
        },
        config::TlsChoice::DevCa => crate::listener::TlsSetting::DevCa {
            dir: config.data_dir.join("dev-ca"),
            names: crate::agent::server_certificate_names(listen, public_url),
        },
    }
}

fn listener_error(err: crate::listener::ListenerError, key: &str) -> DaemonError {
    match err {
        crate::listener::ListenerError::Bind { addr, source } => DaemonError::Bind { addr, source },
        other => DaemonError::Listener {
            hint: format!("{} ({key})", other.hint()),
            message: other.to_string(),
        },
    }
}

fn peers(config: &DaemonConfig) -> Peers {
    let sim = |url: &url::Url| SitePeers {
        bmc: Arc::new(SimBmc::new(url)),
        host: Arc::new(SimHost::new(url)),
    };
    let mut real = Peers::uniform(
        Arc::new(IpmiTool::default()),
        Arc::new(SshHost {
            identity: config.ssh_identity.clone(),
            ..SshHost::default()
        }),
    );
    for (site, url) in &config.sim_control {
        if site == "*" {
            real.default = sim(url);
        } else {
            real.per_site.insert(site.clone(), sim(url));
        }
    }
    real
}

/// Start the daemon: open the store and secrets, read the tokens, bind the HTTP server, and
/// spawn the loop. Returns once it listens.
pub async fn start(
    config: DaemonConfig,
    options: DaemonOptions,
) -> Result<RunningDaemon, DaemonError> {
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    // The fleet mirror and the daemon's files: owner only.
    crate::secrets::create_private_dir(&config.data_dir).map_err(|e| DaemonError::Watch {
        path: config.data_dir.display().to_string(),
        message: e.to_string(),
    })?;
    let store =
        Store::open_for_replica(&config.state_url, clock.clone(), config.executor.lease_ttl)
            .await?;
    let secrets = crate::secrets::open(&config.secrets_url)?;
    let tokens = read_tokens(&config, secrets.as_ref()).await?;
    let source = source_reader(&config, secrets.as_ref()).await?;
    let admin = crate::listener::bind(
        "admin",
        config.listen,
        &tls_setting(&config, &config.api_tls, config.listen, None),
        config.api_limits.clone(),
    )
    .await
    .map_err(|e| listener_error(e, "api.listen"))?;
    let local_addr = admin.local_addr();
    let agents = crate::agent::AgentServer::start(
        store.clone(),
        crate::agent::AgentServerConfig {
            listen: config.agent.listen,
            public_url: config.agent.public_url.clone(),
            tls: tls_setting(
                &config,
                &config.agent.tls,
                config.agent.listen,
                config.agent.public_url.as_ref(),
            ),
            limits: config.agent.limits.clone(),
            channel: crate::agent::ChannelOptions {
                timing: crate::agent::TaskTiming {
                    lease: config.agent.task_lease,
                    ..crate::agent::TaskTiming::default()
                },
                contact_flush: config.agent.contact_flush,
            },
        },
    )
    .await
    .map_err(|e| DaemonError::Agent {
        hint: e.hint(),
        message: e.to_string(),
    })?;

    let holder = crate::apply::default_holder().replacen("apply@", "daemon@", 1);
    let own_url = url::Url::parse(&agents.enroll_url()).expect("the agent channel's URL");
    sharing::agree_enroll_url(&store, config.agent.public_url.as_ref(), &own_url, &holder)
        .await
        .map_err(DaemonError::Replica)?;

    let maas_metrics = MaasMetrics::new();
    let metrics = Metrics::new(maas_metrics.clone());
    let maas_options = MaasClientOptions {
        metrics: maas_metrics.clone(),
        ..MaasClientOptions::default()
    };
    let stop = StopSignal::default();
    let env = StageEnv {
        store: store.clone(),
        secrets: secrets.clone(),
        maas: Arc::new(SiteMaas::new(
            secrets.clone(),
            MaasClients::new(maas_options.clone()),
        )),
        peers: peers(&config),
        clock: clock.clone(),
        enroll_url: agents.enroll_url(),
        agent_install: crate::cloudinit::AgentInstall {
            binary: config.agent.binary.clone(),
            ca_bundle: agents.client_ca().map(str::to_owned),
        },
        actor: Actor::system("metalform-daemon"),
        poll_interval: config.executor.poll_interval,
        agent_signals: Some(agents.channel().signals().clone()),
    };
    let progress: Arc<dyn Progress> = Arc::new(LogProgress {
        metrics: metrics.clone(),
    });
    let sharing = Arc::new(sharing::Sharing::new(
        store.clone(),
        holder.clone(),
        config.executor.lease_ttl,
    ));
    let slots = Arc::new(slots::StoreSlots::new(
        store.clone(),
        sharing.clone(),
        config.executor.lease_ttl,
        config.executor.poll_interval,
    ));
    let executor = Executor::new(
        env,
        ExecutorOptions {
            poll_interval: config.executor.poll_interval,
            retry_base: config.executor.retry_base,
            failed_retry: config.executor.failed_retry,
            lease_ttl: config.executor.lease_ttl,
            holder: holder.clone(),
            seed: config.executor.seed.unwrap_or_else(rand::random),
            reason: Some("metalform daemon: reconcile".into()),
            stop: stop.clone(),
            shared_slots: crate::apply::SharedSlotSource(Some(slots.clone())),
            ..ExecutorOptions::default()
        },
        progress.clone(),
    );
    let decommissions =
        DecommissionExecutor::new(executor.env().clone(), executor.options().clone(), progress);
    let (commands, command_rx) = mpsc::unbounded_channel();
    let (fleet, _) = watch::channel(None);
    let clients = MaasClients::new(maas_options);
    let drift = DriftEnv::new(
        store.clone(),
        secrets.clone(),
        clients.clone(),
        config.drift.clone(),
    );
    let core = Arc::new(Core {
        clients,
        drift,
        config,
        store,
        secrets,
        executor,
        decommissions,
        stop,
        metrics,
        accepting: AtomicBool::new(true),
        fleet,
        in_flight: Mutex::new(BTreeSet::new()),
        sharing,
        slots,
        tasks: Mutex::new(JoinSet::new()),
        commands,
        source_problem: Mutex::new(None),
        source: std::sync::RwLock::new(source),
        plans: Mutex::new(BTreeMap::new()),
    });

    let control: Arc<dyn Control> = Arc::new(Handle { core: core.clone() });
    let api = ApiState::new(
        core.store.clone(),
        core.secrets.clone(),
        core.clients.clone(),
        tokens,
        control,
        core.config.max_body_bytes,
    );
    let (shutdown, shutdown_rx) = watch::channel(false);
    let credentials = Credentials {
        core: core.clone(),
        api: api.clone(),
    };
    // The Redfish provisioner (seed 003): its routes, and its workers beside the loop. Task ISOs
    // are served by the admin listener: its own address unless `media_base_url` says otherwise.
    let admin_url = url::Url::parse(&format!("{}://{local_addr}/", admin.scheme())).expect("a URL");
    let provisioning = match &core.config.provisioner {
        Some(config) => {
            let running = provisioner::start(
                config,
                &admin_url,
                &core.store,
                core.secrets.clone(),
                Arc::new(api.clone()),
                core.metrics.clone(),
                Arc::new(LogProgress {
                    metrics: core.metrics.clone(),
                }),
                core.stop.clone(),
            )
            .await?;
            let workers = running.workers.clone();
            core.tasks
                .lock()
                .expect("lock")
                .spawn(async move { workers.run().await });
            crate::api::provisioning::router(running.api)
        }
        None => provisioner::disabled_router(),
    };
    let app = server::app(core.clone(), api).merge(provisioning);
    let enroll_url = agents.enroll_url();
    let agent_addr = agents.local_addr();
    let agent_ca = agents.client_ca().map(str::to_owned);
    let watcher = if options.watch {
        Some(watch_source(&core)?)
    } else {
        None
    };
    tracing::info!(
        addr = %local_addr,
        agent_addr = %agent_addr,
        enroll_url = %enroll_url,
        repository = %core.config.source.repository,
        branch = %core.config.source.branch,
        watch = options.watch,
        "metalform daemon started"
    );
    let main = tokio::spawn(run(
        core.clone(),
        Listeners {
            admin: admin.serve(app),
            agents,
        },
        shutdown_rx,
        command_rx,
        watcher,
    ));
    Ok(RunningDaemon {
        core,
        credentials,
        local_addr,
        agent_addr,
        agent_ca,
        enroll_url,
        shutdown,
        main,
    })
}

/// A filesystem watcher on the source repository, poking the loop on every change.
struct SourceWatch {
    _watcher: notify::RecommendedWatcher,
    pokes: mpsc::UnboundedReceiver<()>,
}

fn watch_source(core: &Core) -> Result<SourceWatch, DaemonError> {
    use notify::Watcher;
    // The repository's git directory: a new commit moves a ref there.
    let path = core
        .config
        .source
        .local_path()
        .and_then(|path| git2::Repository::open(path).ok())
        .map(|repo| repo.path().to_path_buf())
        .ok_or_else(|| DaemonError::Watch {
            path: core.config.source.repository.clone(),
            message: "not a local git repository".into(),
        })?;
    let (tx, pokes) = mpsc::unbounded_channel();
    let mut watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        if event.is_ok() {
            let _ = tx.send(());
        }
    })
    .map_err(|e| DaemonError::Watch {
        path: path.display().to_string(),
        message: e.to_string(),
    })?;
    watcher
        .watch(&path, notify::RecursiveMode::Recursive)
        .map_err(|e| DaemonError::Watch {
            path: path.display().to_string(),
            message: e.to_string(),
        })?;
    Ok(SourceWatch {
        _watcher: watcher,
        pokes,
    })
}

/// The API's view of the daemon.
struct Handle {
    core: Arc<Core>,
}

impl Control for Handle {
    fn accepting(&self) -> bool {
        self.core.accepting.load(Ordering::SeqCst)
    }

    fn fleet(&self) -> Option<Arc<FleetRevision>> {
        self.core.fleet.borrow().clone()
    }

    fn reconcile(
        &self,
        site: SiteName,
        actor: Actor,
        ignore_windows: Option<String>,
    ) -> Result<crate::api::ReconcileFuture, ControlError> {
        if !self.accepting() {
            return Err(ControlError::ShuttingDown);
        }
        let (reply, answer) = oneshot::channel();
        let name = site.to_string();
        self.core
            .commands
            .send(Command::Reconcile {
                site,
                actor,
                ignore_windows,
                reply,
            })
            .map_err(|_| ControlError::ShuttingDown)?;
        Ok(async move {
            answer.await.unwrap_or_else(|_| ReconcileSummary {
                site: name,
                error: Some("the daemon stopped before the reconcile ran".into()),
                ..ReconcileSummary::default()
            })
        }
        .boxed())
    }

    fn lease_ttl(&self) -> std::time::Duration {
        self.core.config.executor.lease_ttl
    }

    fn plans(&self) -> Vec<(SiteName, Arc<crate::web::LatestPlan>)> {
        crate::web::DaemonView::plans(self)
    }

    fn carry_out(
        &self,
        target: crate::plan::NodeTarget,
        recovery: Recovery,
    ) -> Result<(), ControlError> {
        if !self.accepting() {
            return Err(ControlError::ShuttingDown);
        }
        let label = target.label();
        if !self
            .core
            .in_flight
            .lock()
            .expect("lock")
            .insert(label.clone())
        {
            // The node is running already; the recorded action takes effect there (its job
            // moved), nothing more to start.
            return Ok(());
        }
        let core = self.core.clone();
        self.core.tasks.lock().expect("lock").spawn(async move {
            let report = core.executor.carry_out(target, &recovery).await;
            core.metrics.applied(&report);
            core.in_flight.lock().expect("lock").remove(&label);
        });
        Ok(())
    }
}

impl crate::web::DaemonView for Handle {
    fn fleet(&self) -> Option<Arc<FleetRevision>> {
        self.core.fleet.borrow().clone()
    }

    fn plans(&self) -> Vec<(SiteName, Arc<crate::web::LatestPlan>)> {
        let fleet = self.core.fleet.borrow().clone();
        self.core
            .plans
            .lock()
            .expect("lock")
            .iter()
            // A site taken out of the fleet is planned no more: its last plan is not current.
            .filter(|(site, _)| {
                fleet
                    .as_ref()
                    .is_none_or(|f| f.fleet.sites.contains_key(*site))
            })
            .map(|(site, plan)| (site.clone(), plan.clone()))
            .collect()
    }
}

/// When each site is due, and who is waiting for it.
#[derive(Default)]
struct Schedule {
    due: BTreeMap<SiteName, Instant>,
    running: BTreeSet<SiteName>,
    waiting: BTreeMap<SiteName, Vec<oneshot::Sender<ReconcileSummary>>>,
    /// Maintenance windows overridden for the site's next reconcile.
    overrides: BTreeMap<SiteName, WindowOverride>,
}

/// The daemon's two listeners: the admin API and the agent channel.
struct Listeners {
    admin: crate::listener::Server,
    agents: crate::agent::AgentServer,
}

async fn run(
    core: Arc<Core>,
    listeners: Listeners,
    mut shutdown: watch::Receiver<bool>,
    mut commands: mpsc::UnboundedReceiver<Command>,
    watcher: Option<SourceWatch>,
) {
    let mut http_stop = shutdown.clone();
    // Both listeners stop with the loop, each within its shutdown grace: waiting agent polls
    // answer at once, idle connections close, requests in flight finish or are dropped.
    let http = tokio::spawn(async move {
        let _ = http_stop.wait_for(|s| *s).await;
        tokio::join!(listeners.admin.shutdown(), listeners.agents.shutdown());
    });
    let events = core.config.events.clone().map(|events| {
        let sink = match events.sink {
            config::EventSink::File(path) => crate::events::Sink::File(path),
            config::EventSink::Webhook(url) => crate::events::Sink::webhook(url, events.timeout),
        };
        let outbox = crate::events::Outbox::new(
            core.store.clone(),
            sink,
            crate::events::Pacing {
                retry_base: events.retry_base,
                retry_cap: events.retry_cap,
                ..crate::events::Pacing::default()
            },
            Arc::new(EventMetrics(core.metrics.clone())),
        )
        .holder(core.sharing.replica(), core.config.executor.lease_ttl);
        let mut stop = shutdown.clone();
        tokio::spawn(async move {
            outbox
                .run(async move {
                    let _ = stop.wait_for(|s| *s).await;
                })
                .await;
        })
    });

    // This replica's share of the sites, renewed every third of a lease TTL.
    let sharing = {
        let core = core.clone();
        let mut stop = shutdown.clone();
        tokio::spawn(async move {
            let every = (core.config.executor.lease_ttl / 3).min(Duration::from_secs(5));
            let mut rounds = tokio::time::interval(every);
            rounds.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = stop.wait_for(|s| *s) => return,
                    _ = rounds.tick() => {}
                }
                let sites: BTreeSet<SiteName> = core
                    .fleet
                    .borrow()
                    .as_ref()
                    .map(|f| f.fleet.sites.keys().cloned().collect())
                    .unwrap_or_default();
                if !sites.is_empty() {
                    core.sharing.tick(&sites).await;
                }
            }
        })
    };

    // Enrollments other replicas' listeners record wake this replica's waits (PostgreSQL): the
    // load balancer sends an agent to any replica, the node's job runs on one of them.
    let _enrollments = match core.store.enrollment_notices().await {
        Ok(Some(notices)) => core
            .executor
            .env()
            .agent_signals
            .clone()
            .map(|signals| tokio::spawn(relay_enrollments(notices, signals, shutdown.clone()))),
        Ok(None) => None,
        Err(err) => {
            tracing::warn!(error = %err, "cannot listen for other replicas' enrollments; their nodes are noticed at the enrollment wait's fallback poll");
            None
        }
    };

    let mut seen: Option<String> = None;
    let mut schedule = Schedule::default();
    let mut reconciles: JoinSet<(SiteName, ReconcileSummary)> = JoinSet::new();
    let mut poll = tokio::time::interval(core.config.source.poll_interval);
    poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let (mut pokes, _watcher) = match watcher {
        Some(w) => (Some(w.pokes), Some(w._watcher)),
        None => (None, None),
    };
    let mut reap = tokio::time::interval(Duration::from_secs(1));
    // The fetch runs beside the loop (a slow remote must not hold up reconciles, API requests
    // or SIGTERM); a poll asked for while one runs starts when it ends.
    let mut polling = SourcePoll::default();

    loop {
        let next_due = schedule
            .due
            .iter()
            .filter(|(site, _)| !schedule.running.contains(*site))
            .map(|(_, at)| *at)
            .min();
        let sleep_until = next_due.unwrap_or_else(|| Instant::now() + Duration::from_secs(3600));
        tokio::select! {
            _ = async { let _ = shutdown.wait_for(|s| *s).await; } => break,
            _ = poll.tick() => polling.start(&core, &seen),
            Some(()) = async { match pokes.as_mut() { Some(p) => p.recv().await, None => None } } => {
                // Debounce: a commit touches several files of .git.
                tokio::time::sleep(Duration::from_millis(200)).await;
                if let Some(p) = pokes.as_mut() { while p.try_recv().is_ok() {} }
                polling.start(&core, &seen);
            }
            outcome = polling.finished() => {
                take_outcome(&core, outcome, &mut seen, &mut schedule);
                if std::mem::take(&mut polling.again) {
                    polling.start(&core, &seen);
                }
            }
            Some(command) = commands.recv() => match command {
                Command::Reconcile { site, actor, ignore_windows, reply } => {
                    tracing::info!(site = %site, actor = %actor.name, ignore_windows = ignore_windows.is_some(), "reconcile requested");
                    if let Some(reason) = ignore_windows {
                        schedule.overrides.insert(site.clone(), WindowOverride { actor, reason });
                    }
                    schedule.waiting.entry(site.clone()).or_default().push(reply);
                    schedule.due.insert(site, Instant::now());
                }
            },
            Some(done) = reconciles.join_next() => {
                if let Ok((site, summary)) = done {
                    schedule.running.remove(&site);
                    // Waiters that asked while it ran wait for the next one (already due).
                    if schedule.due.get(&site).is_none_or(|at| *at > Instant::now()) {
                        for reply in schedule.waiting.remove(&site).unwrap_or_default() {
                            let _ = reply.send(summary.clone());
                        }
                    }
                    let interval = core.config.interval_of(site.as_str());
                    schedule.due.entry(site).or_insert(Instant::now() + interval);
                }
            }
            _ = tokio::time::sleep_until(sleep_until.into()) => {
                let Some(fleet) = core.fleet.borrow().clone() else { continue };
                let now = Instant::now();
                let due: Vec<SiteName> = schedule
                    .due
                    .iter()
                    .filter(|(site, at)| **at <= now && !schedule.running.contains(*site))
                    .map(|(site, _)| site.clone())
                    .collect();
                for site in due {
                    schedule.due.remove(&site);
                    if !fleet.fleet.sites.contains_key(&site) {
                        for reply in schedule.waiting.remove(&site).unwrap_or_default() {
                            let _ = reply.send(ReconcileSummary {
                                site: site.to_string(),
                                error: Some("the site is no longer in the fleet".into()),
                                ..ReconcileSummary::default()
                            });
                        }
                        continue;
                    }
                    schedule.running.insert(site.clone());
                    let core = core.clone();
                    let fleet = fleet.clone();
                    let window_override = schedule.overrides.remove(&site);
                    reconciles.spawn(async move {
                        let summary = reconcile_site(&core, &fleet, &site, window_override).await;
                        (site, summary)
                    });
                }
            }
            _ = reap.tick() => {
                let mut tasks = core.tasks.lock().expect("lock");
                while tasks.try_join_next().is_some() {}
                for site in core.sharing.take_newly_held() {
                    schedule.due.insert(site, Instant::now());
                }
            }
        }
    }

    // Shutdown: no new work; running nodes stop at their next stage boundary. A fetch in
    // flight is abandoned (its git process is killed).
    tracing::info!("shutting down: running stages finish to their next checkpoint");
    polling.abort();
    core.accepting.store(false, Ordering::SeqCst);
    core.stop.stop();
    while let Some(done) = reconciles.join_next().await {
        if let Ok((site, summary)) = done {
            for reply in schedule.waiting.remove(&site).unwrap_or_default() {
                let _ = reply.send(summary.clone());
            }
        }
    }
    let mut tasks = std::mem::take(&mut *core.tasks.lock().expect("lock"));
    while tasks.join_next().await.is_some() {}
    let _ = sharing.await;
    core.sharing.leave().await;
    let _ = http.await;
    if let Some(events) = events {
        let _ = events.await;
    }
    if let Some(events) = &core.config.events {
        // One more pass: the events the stopped stages wrote.
        let sink = match &events.sink {
            config::EventSink::File(path) => crate::events::Sink::File(path.clone()),
            config::EventSink::Webhook(url) => {
                crate::events::Sink::webhook(url.clone(), events.timeout)
            }
        };
        crate::events::Outbox::new(
            core.store.clone(),
            sink,
            crate::events::Pacing::default(),
            Arc::new(EventMetrics(core.metrics.clone())),
        )
        .holder(core.sharing.replica(), core.config.executor.lease_ttl)
        .deliver_pending()
        .await;
    }
    core.store.close().await;
    tracing::info!("metalform daemon stopped");
}

struct EventMetrics(Arc<Metrics>);

impl crate::events::DeliveryObserver for EventMetrics {
    fn delivered(&self, _event: &crate::store::OutboxEvent) {
        self.0.event_delivered();
    }

    fn failed(&self, _event: &crate::store::OutboxEvent, _error: &crate::events::DeliveryError) {
        self.0.event_failed();
    }
}

/// The source poll in flight, if any.
#[derive(Default)]
struct SourcePoll {
    running: Option<tokio::task::JoinHandle<ReadOutcome>>,
    /// A poll was asked for while one ran.
    again: bool,
}

impl SourcePoll {
    fn start(&mut self, core: &Arc<Core>, seen: &Option<String>) {
        if self.running.is_some() {
            self.again = true;
            return;
        }
        let reader = core.source.read().expect("source lock").clone();
        let last = core.fleet.borrow().clone();
        let seen = seen.clone();
        self.running = Some(tokio::spawn(async move { reader.poll(seen, last).await }));
    }

    /// The outcome of the running poll (pending while none runs).
    async fn finished(&mut self) -> ReadOutcome {
        let Some(running) = self.running.as_mut() else {
            return std::future::pending().await;
        };
        let outcome = running.await.unwrap_or_else(|e| ReadOutcome::Failed {
            reason: format!("the source poll stopped: {e}"),
        });
        self.running = None;
        outcome
    }

    fn abort(&mut self) {
        if let Some(running) = self.running.take() {
            running.abort();
        }
    }
}

/// Take a poll's outcome; an accepted revision makes every site due now.
fn take_outcome(
    core: &Arc<Core>,
    outcome: ReadOutcome,
    seen: &mut Option<String>,
    schedule: &mut Schedule,
) {
    core.metrics.source_read(outcome.label());
    match outcome {
        ReadOutcome::Unchanged => {}
        ReadOutcome::Accepted(revision) => {
            tracing::info!(
                revision = %revision.revision,
                sites = revision.fleet.sites.len(),
                nodes = revision.fleet.nodes.len(),
                "fleet revision accepted"
            );
            *seen = revision.revision.strip_prefix("commit:").map(str::to_owned);
            let now = Instant::now();
            for site in revision.fleet.sites.keys() {
                schedule.due.insert(site.clone(), now);
            }
            *core.source_problem.lock().expect("lock") = None;
            core.fleet.send_replace(Some(revision));
        }
        ReadOutcome::Rejected { commit, reason } => {
            tracing::error!(commit = %commit, reason = %reason, "fleet revision rejected: nothing acts on it; the last accepted revision stays");
            *seen = Some(commit.clone());
            *core.source_problem.lock().expect("lock") =
                Some(format!("commit {commit} rejected: {reason}"));
        }
        ReadOutcome::Failed { reason } => {
            tracing::error!(reason = %reason, "cannot read the fleet source; retrying at the next poll");
            *core.source_problem.lock().expect("lock") = Some(reason);
        }
    }
}

/// The `metalform_jobs` gauge of a site: onboarding and decommission jobs by state. Every
/// state is set (zero when none), so a job that moved on leaves no stale count behind.
async fn record_job_counts(core: &Arc<Core>, site: &SiteName) {
    for kind in [JobKind::Onboarding, JobKind::Decommission] {
        let Ok(found) = core.store.job_counts(kind, Some(site.as_str())).await else {
            continue;
        };
        let mut counts: BTreeMap<JobState, usize> =
            JobState::ALL.iter().map(|state| (*state, 0)).collect();
        counts.extend(found);
        for (state, n) in counts {
            core.metrics
                .jobs(kind.as_str(), site.as_str(), state.as_str(), n);
        }
    }
}

/// One site's reconcile: observe, plan, dispatch what the policy allows.
async fn reconcile_site(
    core: &Arc<Core>,
    fleet: &Arc<FleetRevision>,
    site: &SiteName,
    window_override: Option<WindowOverride>,
) -> ReconcileSummary {
    let started = Instant::now();
    let mut summary = ReconcileSummary {
        site: site.to_string(),
        revision: Some(fleet.revision.clone()),
        ..ReconcileSummary::default()
    };
    if !core.sharing.holds(site) {
        // Not taken yet (just started, a new site): a sharing round now rather than later.
        let sites: BTreeSet<SiteName> = fleet.fleet.sites.keys().cloned().collect();
        core.sharing.tick(&sites).await;
    }
    if !core.sharing.holds(site) {
        // Another replica's share: it observes, plans and applies this site.
        let holder = core.sharing.holder_of(site).await;
        summary.error = Some(match holder {
            Some(holder) => format!("site {site} is reconciled by replica {holder}"),
            None => format!(
                "site {site} is not held by this replica yet; it is taken at the next sharing round"
            ),
        });
        return summary;
    }
    let filter = SiteFilter::Only([site.clone()].into());
    let (mut snapshot, inventory) = match crate::observe::observe_keeping(
        &fleet.fleet,
        &filter,
        &core.store,
        core.secrets.as_ref(),
        &core.clients,
        &crate::observe::Patience::default(),
        crate::drift::InventoryView::from,
    )
    .await
    {
        Ok(observed) => observed,
        Err(err) => {
            tracing::error!(site = %site, error = %err, "reconcile: cannot observe");
            core.metrics
                .reconciled(site.as_str(), "error", started.elapsed().as_secs_f64());
            summary.error = Some(err.to_string());
            return summary;
        }
    };
    let unreadable = snapshot.sites.values().find_map(|o| match o {
        SiteObservation::Unreadable { error, .. } => Some(error.clone()),
        _ => None,
    });
    let options = PlanOptions {
        sites: filter,
        prune: core.config.prune,
        ignore_windows: window_override.is_some(),
        now: None,
        // The payload this daemon deploys: plans show each node's user-data change with it.
        payload: Some(crate::plan::PayloadSettings {
            enroll_url: Some(core.executor.env().enroll_url.clone()),
            agent: core.executor.env().agent_install.clone(),
        }),
    };
    // Kept for the status pages as it is: the pass reads the same plan, not a copy of it.
    let latest = Arc::new(crate::web::LatestPlan {
        plan: crate::plan::plan(&fleet.fleet, &snapshot, &options),
        observed_at: snapshot.taken_at,
    });
    let plan = &latest.plan;
    core.metrics.planned(site.as_str(), plan);
    core.plans
        .lock()
        .expect("lock")
        .insert(site.clone(), latest.clone());
    let policies_written = match record_before_dispatch(
        core,
        fleet,
        &snapshot,
        plan,
        window_override,
    )
    .await
    {
        Ok(written) => written,
        Err(err) => {
            tracing::error!(site = %site, error = %err, "reconcile: cannot record release policies or window overrides");
            summary.error = Some(err.to_string());
            return summary;
        }
    };
    summary.plan = plan.sites.first().map(|s| s.summary);
    let dispatch = work::dispatch(plan, &core.config.self_heal);
    for (node, why) in &dispatch.held {
        tracing::warn!(node = %node, why = %why, "plan item held by the self-heal policy");
    }
    summary.held = dispatch.held.len();
    queue_provisions(core, fleet, &dispatch.provisions, &mut summary).await;
    let runs = dispatch.items.into_iter().map(NodeRun::Onboarding).chain(
        dispatch
            .decommissions
            .into_iter()
            .map(NodeRun::Decommission),
    );
    for run in runs {
        if spawn_node(core, run) {
            summary.started += 1;
        } else {
            summary.in_flight += 1;
        }
    }
    record_job_counts(core, site).await;
    // The drift pass on the observation this reconcile made (the pass re-reads a machine
    // before it acts on it, so the list taken before the dispatch decides nothing by itself;
    // nodes just dispatched have open jobs and are left to them).
    let mut drift_failed = false;
    if core.stop.is_stopped() {
        tracing::info!(site = %site, "drift pass skipped: shutting down");
    } else if let Some((site_config, observation)) =
        fleet.fleet.sites.get(site).zip(snapshot.sites.remove(site))
    {
        // A reconcile that wrote no node and started nothing opened no job since the
        // observation: its rows are still what the drift pass decides on. One that did leaves
        // the pass to read them anew, so that the nodes just dispatched are seen with their
        // open jobs.
        let unchanged = policies_written == 0 && summary.started == 0;
        let inventory = unchanged.then_some(inventory);
        match crate::drift::reconcile_observed_site(
            &core.drift,
            site_config,
            observation,
            inventory,
        )
        .await
        {
            Ok(report) => {
                core.metrics.drift(&report);
                log_drift(&report);
                summary.drift = Some(report.pass_summary());
            }
            Err(err) => {
                tracing::error!(site = %site, error = %err, "drift pass failed");
                summary.error = Some(format!("drift pass: {err}"));
                drift_failed = true;
            }
        }
    }
    let outcome = if let Some(error) = unreadable {
        summary.error = Some(error);
        "unreadable"
    } else if drift_failed {
        "error"
    } else {
        "ok"
    };
    core.metrics
        .reconciled(site.as_str(), outcome, started.elapsed().as_secs_f64());
    tracing::info!(
        site = %site,
        revision = %fleet.revision,
        started = summary.started,
        in_flight = summary.in_flight,
        held = summary.held,
        outcome,
        "site reconciled"
    );
    summary
}

/// Record the manifests' Redfish servers and queue the plan's provisionings for the workers
/// (held, with a warning, when the daemon runs no provisioner).
async fn queue_provisions(
    core: &Arc<Core>,
    fleet: &Arc<FleetRevision>,
    items: &[crate::apply::provisioning::ProvisionItem],
    summary: &mut ReconcileSummary,
) {
    use crate::apply::provisioning::{queue, sync_servers};
    let Some(config) = &core.config.provisioner else {
        for item in items {
            tracing::warn!(node = %item.target.label(), "Redfish provisioning held: the daemon has no [provisioner]");
        }
        summary.held += items.len();
        return;
    };
    if let Err(err) = sync_servers(&core.store, &fleet.fleet).await {
        tracing::error!(error = %err, "cannot record the Redfish servers");
        return;
    }
    let report = queue(
        &core.store,
        core.metrics.as_ref(),
        items,
        Some(&config.settings.maintenance_iso_url),
        "metalform-daemon",
    )
    .await;
    for result in &report.results {
        tracing::info!(node = %result.node, job = ?result.job_id, outcome = ?result.outcome, "Redfish provisioning");
    }
    summary.started += report.results.len();
    core.metrics.applied(&report);
}

/// What a reconcile writes before it dispatches work: the release policies the manifests give
/// the site's nodes now, and the audit of each item run outside its maintenance window.
/// Returns how many nodes' release policies changed.
async fn record_before_dispatch(
    core: &Arc<Core>,
    fleet: &Arc<FleetRevision>,
    snapshot: &crate::observe::Snapshot,
    plan: &crate::plan::Plan,
    window_override: Option<WindowOverride>,
) -> Result<usize, crate::store::StoreError> {
    let actor = Actor::system("metalform-daemon");
    let written = crate::apply::records::sync_release_policies(
        &core.store,
        &fleet.fleet,
        &snapshot.inventory,
        &actor,
    )
    .await?;
    if let Some(WindowOverride { actor, reason }) = window_override {
        crate::apply::records::audit_window_overrides(&core.store, plan, &actor, Some(&reason))
            .await?;
    }
    Ok(written)
}

/// One JSON log line per drift finding that is new (at its severity), per action carried
/// out, skipped or failed, and one for the pass. Open drift that was logged when detected is
/// not repeated every interval; `/metrics` and `drift list` show it.
fn log_drift(report: &DriftReport) {
    let site = report.site.as_str();
    if let Some(error) = &report.unreadable {
        tracing::warn!(target: "metalform::drift", site, error = %error, "drift: MAAS unreadable; only the heartbeat was checked");
    }
    if let Some(guard) = &report.guard {
        tracing::warn!(target: "metalform::drift", site, guard = %guard, "drift: absence guard held the quarantines back");
    }
    for finding in report.findings.iter().filter(|f| f.newly_detected) {
        // Empty when the machine is absent or unknown (`observed` says which).
        let maas = finding
            .machine
            .as_ref()
            .map(|m| m.status.name.as_str())
            .unwrap_or("");
        macro_rules! detected {
            ($level:ident) => {
                tracing::$level!(
                    target: "metalform::drift",
                    site,
                    node = %finding.node_id,
                    hostname = %finding.hostname,
                    rule = finding.rule.as_str(),
                    severity = finding.severity.as_str(),
                    alert = finding.rule.alert(),
                    maas_status = maas,
                    system_id = finding.system_id.as_deref().unwrap_or(""),
                    expected = %finding.expected,
                    observed = %finding.observed,
                    "drift detected: {}",
                    finding.message
                )
            };
        }
        match finding.severity {
            Severity::Critical => detected!(error),
            Severity::Warn => detected!(warn),
            Severity::Info => detected!(info),
            Severity::Debug | Severity::None => detected!(debug),
        }
    }
    for outcome in &report.actions {
        macro_rules! action {
            ($level:ident) => {
                tracing::$level!(
                    target: "metalform::drift",
                    site,
                    node = %outcome.node_id,
                    hostname = %outcome.hostname,
                    action = outcome.action.as_str(),
                    result = outcome.result.label(),
                    reason = outcome.result.reason().unwrap_or(""),
                    "drift action"
                )
            };
        }
        match outcome.result {
            ActionResult::Taken | ActionResult::Skipped(_) => action!(info),
            ActionResult::Failed(_) => action!(error),
            // Held again at every pass while the policy or the node says so.
            ActionResult::Held(_) => action!(debug),
        }
    }
    for error in &report.errors {
        tracing::warn!(target: "metalform::drift", site, error = %error, "drift: node not recorded");
    }
    let by_rule = serde_json::to_string(&report.by_rule).unwrap_or_default();
    tracing::info!(
        target: "metalform::drift",
        site,
        findings = report.findings.len(),
        by_rule = %by_rule,
        taken = report.taken().count(),
        actions = report.actions.len(),
        "drift pass"
    );
}

/// One node's work: an onboarding job or a decommission job.
enum NodeRun {
    Onboarding(WorkItem),
    Decommission(DecommissionWork),
}

impl NodeRun {
    /// `site/hostname`: one run per node at a time, whichever kind.
    fn label(&self) -> String {
        match self {
            NodeRun::Onboarding(item) => item.target.label(),
            NodeRun::Decommission(work) => format!("{}/{}", work.target.site, work.target.hostname),
        }
    }

    /// The node's profile, for its (site, profile) `maxParallel`; an agent-only decommission
    /// of a node no longer in the manifests runs alone.
    fn profile(&self) -> Option<&crate::model::Profile> {
        match self {
            NodeRun::Onboarding(item) => Some(&item.target.profile),
            NodeRun::Decommission(work) => work.target.resolved.as_ref().map(|t| &t.profile),
        }
    }

    fn site(&self) -> &str {
        match self {
            NodeRun::Onboarding(item) => item.target.site_name(),
            NodeRun::Decommission(work) => &work.target.site,
        }
    }

    /// Whether the run starts a new job (else it continues one that was admitted before, which
    /// may hold a slot kept for it: waiting for admission behind nodes that wait for that very
    /// slot would never end).
    fn starts_a_job(&self) -> bool {
        match self {
            NodeRun::Onboarding(item) => item.work == crate::apply::Work::Onboard,
            NodeRun::Decommission(work) => {
                matches!(
                    work.job,
                    crate::apply::decommission::DecommissionJob::New(_)
                )
            }
        }
    }
}

/// Run one node's work as its own task (under its site/profile limit); false when the node is
/// running already.
///
/// `maxParallel` is counted in the store across every replica. A node with a profile takes its
/// slot inside its run, where the run needs one; a replica admits the limit of new onboardings,
/// twice as many once every slot is taken (the nodes ahead prepare meanwhile), and the limit
/// of new decommissions, and runs every open job it continues. A run with no profile (an
/// agent-only decommission) runs alone under a slot taken before it starts.
fn spawn_node(core: &Arc<Core>, run: NodeRun) -> bool {
    let label = run.label();
    if !core.in_flight.lock().expect("lock").insert(label.clone()) {
        return false;
    }
    let group = format!(
        "{}/{}",
        run.site(),
        run.profile().map_or("-".to_owned(), |p| p.name.to_string())
    );
    let parallel = run
        .profile()
        .map_or(1, |p| p.concurrency.max_parallel.max(1));
    let task_core = core.clone();
    core.tasks.lock().expect("lock").spawn(async move {
        let slots = &task_core.slots;
        let stop = &task_core.stop;
        let prepares_ahead = matches!(run, NodeRun::Onboarding(_));
        let ready = if run.profile().is_none() {
            let slot = tokio::select! {
                slot = slots.take(&group, parallel, &label) => slot,
                _ = stop.stopped() => None,
            };
            slot.map(|slot| (None, Some(slot)))
        } else if run.starts_a_job() {
            let admission = tokio::select! {
                admission = slots.admit(&group, parallel, prepares_ahead) => admission,
                _ = stop.stopped() => None,
            };
            match admission {
                Some(admission) if !slots.elsewhere(&label).await => Some((Some(admission), None)),
                _ => None,
            }
        } else {
            Some((None, None))
        };
        if let Some((_admission, slot)) = ready {
            let report = match run {
                NodeRun::Onboarding(item) => task_core.executor.run(vec![item]).await,
                NodeRun::Decommission(work) => task_core.decommissions.run(vec![work]).await,
            };
            task_core.metrics.applied(&report);
            if let Some(slot) = slot {
                slot.release().await;
            }
        }
        task_core.in_flight.lock().expect("lock").remove(&label);
    });
    true
}

/// Wake this replica's wait for each node whose enrollment any process recorded, until
/// shutdown. A lost connection is logged and the listener connects again at its next notice.
async fn relay_enrollments(
    mut notices: crate::store::EnrollmentNotices,
    signals: crate::agent::AgentSignals,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        let notice = tokio::select! {
            _ = stop.wait_for(|s| *s) => return,
            notice = notices.next() => notice,
        };
        match notice {
            Ok(node) => signals.notify(node),
            Err(err) => {
                tracing::warn!(error = %err, "enrollment notices interrupted; listening again");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
}

/// `/healthz`: what the daemon is doing.
fn health(core: &Core) -> (bool, serde_json::Value) {
    let fleet = core.fleet.borrow().clone();
    let accepting = core.accepting.load(Ordering::SeqCst);
    let problem = core.source_problem.lock().expect("lock").clone();
    let ok = accepting && fleet.is_some();
    (
        ok,
        serde_json::json!({
            "status": if !accepting { "shutting_down" } else if fleet.is_some() { "ok" } else { "starting" },
            "revision": fleet.as_ref().map(|f| f.revision.clone()),
            "accepted_at": fleet.as_ref().map(|f| f.accepted_at),
            "source_problem": problem,
            "nodes_in_flight": core.in_flight.lock().expect("lock").len(),
            "replica": core.sharing.view(),
        }),
    )
}
