//! The shared edge of the commands (DESIGN.md §3): the fleet, site and secret flags, loading
//! the fleet, opening the state store, and [`World`] (the state store, the secret store and the
//! MAAS clients) to observe and plan with. Commands call into this file, never into each other.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use super::CliError;
use super::GlobalArgs;
use super::state::Access;
use crate::model::Fleet;
use crate::observe::{
    self, MaasClients, ObserveError, Patience, SiteFilter, SiteObservation, Snapshot,
};
use crate::plan::{Plan, PlanOptions};
use crate::provider::maas::MaasClientOptions;
use crate::secrets::{self, SecretStore};
use crate::store::{Node, Store, StoreError};

/// Where the fleet is.
#[derive(Debug, Clone, clap::Args)]
pub struct FleetArgs {
    /// Fleet directory (holding sites/, profiles/, nodes/); its default state store lives in the
    /// XDG state directory.
    #[arg(long, value_name = "DIR", default_value = ".")]
    pub fleet: PathBuf,
    /// Read the fleet as of this git revision (commit, branch, tag) instead of the files on disk.
    #[arg(long, value_name = "REV")]
    pub rev: Option<String>,
}

/// Which of the fleet's sites to work on.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct SiteArgs {
    /// Only this site (repeatable); default: every site of the fleet.
    #[arg(long = "site", value_name = "SITE")]
    pub sites: Vec<String>,
}

impl SiteArgs {
    pub fn site_filter(&self) -> SiteFilter {
        SiteFilter::from_names(self.sites.iter().cloned())
    }
}

/// Where secrets (the sites' MAAS API keys, BMC logins) are read from.
#[derive(Debug, Clone, clap::Args)]
pub struct SecretArgs {
    /// Secret store: vault://HOST:PORT (https; token from VAULT_TOKEN, extra CA certificates
    /// from VAULT_CACERT), vault+http://HOST:PORT (plain http), or file://PATH (development).
    #[arg(long, env = "METALFORM_SECRETS", value_name = "URL")]
    pub secrets: Option<String>,
}

/// How long observing the sites' MAAS may take.
#[derive(Debug, Clone, clap::Args)]
pub struct TimeoutArgs {
    /// The longest to wait for the sites' MAAS, all at once; a site still silent then is
    /// unreadable (named, with its URL), and a slow one is named on stderr meanwhile.
    #[arg(long, value_name = "DURATION", default_value = "3m", value_parser = parse_duration)]
    pub timeout: Duration,
}

fn parse_duration(text: &str) -> Result<Duration, String> {
    crate::model::duration::parse(text).map_err(|e| e.to_string())
}

impl TimeoutArgs {
    /// Patience for the observation: the deadline, and slow sites named on stderr.
    pub fn patience(&self) -> Patience {
        Patience {
            deadline: Some(self.timeout),
            slow: Some(Arc::new(|site, url, waited| {
                eprintln!(
                    "still waiting for MAAS of site {site} at {url} ({}s of at most the --timeout)",
                    waited.as_secs()
                );
            })),
            // Every 10 s, or four times within a short --timeout.
            report_every: (self.timeout / 4)
                .clamp(Duration::from_millis(250), Duration::from_secs(10)),
        }
    }
}

/// What observing and planning read: the fleet, its sites, the secrets, how long to wait.
#[derive(Debug, Clone, clap::Args)]
pub struct WorldArgs {
    #[command(flatten)]
    pub fleet: FleetArgs,
    #[command(flatten)]
    pub sites: SiteArgs,
    #[command(flatten)]
    pub secrets: SecretArgs,
    #[command(flatten)]
    pub wait: TimeoutArgs,
}

impl WorldArgs {
    /// Observe the selected sites of `fleet` now (an unknown `--site` is refused before
    /// anything is opened): the snapshot, and the sites it covers.
    pub async fn observe_now(
        &self,
        global: &GlobalArgs,
        fleet: &Fleet,
    ) -> Result<(Snapshot, SiteFilter), CliError> {
        let sites = self.sites.site_filter();
        sites.resolve(fleet).map_err(unknown_site)?;
        let world = World::open_read_only(global, &self.fleet, &self.secrets)
            .await?
            .patience(self.wait.patience());
        let snapshot = world.observe(fleet, &sites).await;
        world.close().await;
        Ok((snapshot?, sites))
    }

    /// Load the fleet and observe its selected sites now. The state store's rows are read
    /// while the manifests load (on a large fleet both take about a tenth of a second, and the
    /// loading leaves a core idle much of that time). Errors come in the order of
    /// [`load_fleet`] then [`WorldArgs::observe_now`]: the fleet's, an unknown `--site`, the
    /// secret store's, the state store's.
    pub async fn load_and_observe(
        &self,
        global: &GlobalArgs,
    ) -> Result<(Fleet, Snapshot, SiteFilter), CliError> {
        let sites = self.sites.site_filter();
        let ahead = StoreAhead::start(global, &self.fleet.fleet, &sites);
        let fleet = load_fleet(&self.fleet)?;
        let Some(ahead) = ahead else {
            let (snapshot, sites) = self.observe_now(global, &fleet).await?;
            return Ok((fleet, snapshot, sites));
        };
        sites.resolve(&fleet).map_err(unknown_site)?;
        let secrets = open_secrets(&self.secrets)?;
        let (store, rows) = ahead.opened().await.map_err(store_error)?;
        let clients = MaasClients::new(MaasClientOptions::default());
        let snapshot = observe::observe_with_rows(
            &fleet,
            &sites,
            secrets.as_ref(),
            &clients,
            &self.wait.patience(),
            rows.rows(),
        )
        .await;
        store.close().await;
        Ok((fleet, snapshot.map_err(observe_error)?, sites))
    }
}

/// A store that exists, opened and its rows read on the runtime's workers while the caller
/// loads the fleet.
struct StoreAhead {
    opened: tokio::sync::oneshot::Receiver<Result<Store, StoreError>>,
    reading: Reading,
}

impl StoreAhead {
    /// `None` where opening the store has something to say first (no store yet, a legacy
    /// one, a bad URL): the caller opens it in its turn.
    fn start(global: &GlobalArgs, fleet_dir: &Path, sites: &SiteFilter) -> Option<Self> {
        let url = super::state::existing_url(global, fleet_dir)?;
        let sites = sites.clone();
        let (tell, opened) = tokio::sync::oneshot::channel();
        let task = tokio::spawn(async move {
            match Store::open(&url, Arc::new(crate::clock::SystemClock)).await {
                Ok(store) => {
                    let _ = tell.send(Ok(store.clone()));
                    observe::read_store_rows(&store, &sites).await
                }
                Err(err) => {
                    let _ = tell.send(Err(err));
                    Err(read_stopped())
                }
            }
        });
        Some(Self {
            opened,
            reading: Reading(task),
        })
    }

    /// The open store and its rows to come, or why it could not be opened.
    async fn opened(self) -> Result<(Store, Reading), StoreError> {
        match self.opened.await {
            Ok(Ok(store)) => Ok((store, self.reading)),
            Ok(Err(err)) => Err(err),
            // The read ended before it said: its own end says why.
            Err(_) => Err(self.reading.rows().await.err().unwrap_or_else(read_stopped)),
        }
    }
}

/// The store's rows being read, the read stopped when this is dropped unread (the fleet was
/// refused: its rows are not wanted).
struct Reading(tokio::task::JoinHandle<Result<observe::StoreRows, StoreError>>);

impl Reading {
    async fn rows(mut self) -> Result<observe::StoreRows, StoreError> {
        match (&mut self.0).await {
            Ok(rows) => rows,
            Err(join) if join.is_panic() => std::panic::resume_unwind(join.into_panic()),
            Err(_) => Err(read_stopped()),
        }
    }
}

impl Drop for Reading {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The runtime stopped the read: as for a store closed under it.
fn read_stopped() -> StoreError {
    StoreError::Database {
        context: "reading the inventory".into(),
        source: sqlx::Error::PoolClosed,
    }
}

/// Read and validate the fleet; an invalid fleet prints its diagnostics on stderr.
pub fn load_fleet(args: &FleetArgs) -> Result<Fleet, CliError> {
    let validation = super::fleet_dir::validate(&args.fleet, args.rev.as_deref())?;
    match validation.fleet {
        Some(fleet) => Ok(fleet),
        None => {
            let errors = validation.errors;
            for diagnostic in &errors {
                eprintln!("{diagnostic}");
            }
            let rev = args
                .rev
                .as_deref()
                .map(|r| format!(" --rev {r}"))
                .unwrap_or_default();
            Err(CliError::user(format!(
                "the fleet has {} error(s); nothing was planned, observed or applied",
                errors.len()
            ))
            .hint(format!(
                "run `metalform validate --fleet {}{rev}` and fix them",
                args.fleet.display()
            )))
        }
    }
}

pub fn open_secrets(args: &SecretArgs) -> Result<Arc<dyn SecretStore>, CliError> {
    let url = args.secrets.as_deref().ok_or_else(|| {
        CliError::user("no secret store to read the sites' MAAS API keys from").hint(
            "pass --secrets vault://HOST:PORT (or file://PATH), or set METALFORM_SECRETS; to plan without MAAS access, pass --observed FILE from `metalform observe`",
        )
    })?;
    // The file backend reads a missing file as empty (the demo writes one as it goes); a path
    // an operator typed must exist.
    if let Some(path) = url.strip_prefix("file://")
        && !path.is_empty()
        && !std::path::Path::new(path).is_file()
    {
        return Err(CliError::user(format!(
            "the secrets file {path} does not exist"
        ))
        .hint("check the path after file:// (docs/secrets.md shows the file's shape), or pass --secrets vault://HOST:PORT"));
    }
    secrets::open(url).map_err(|err| {
        let hint = err.hint();
        let error = CliError::user(err.to_string());
        match hint {
            Some(hint) => error.hint(hint),
            None => error,
        }
    })
}

/// What reading the world needs: the state store, the secret store, and MAAS clients that
/// share one request counter (observe, plan and apply use the same).
pub struct World {
    pub store: Store,
    pub secrets: Arc<dyn SecretStore>,
    pub clients: MaasClients,
    /// How long each site's MAAS is waited for.
    pub patience: Patience,
    /// An empty store's directory, for a read-only command without a store.
    scratch: Option<super::state::Opened>,
}

impl World {
    /// The secret store first (a missing `--secrets` creates no store), then the state store,
    /// for an executor holding leases of `lease_ttl`.
    pub async fn open(
        global: &GlobalArgs,
        fleet: &FleetArgs,
        secrets: &SecretArgs,
        lease_ttl: std::time::Duration,
    ) -> Result<World, CliError> {
        let secrets = open_secrets(secrets)?;
        let store = super::state::open_holding_leases(
            global,
            &fleet.fleet,
            Access::ReadWrite,
            Some(lease_ttl),
        )
        .await?
        .store;
        Ok(World {
            store,
            secrets,
            clients: MaasClients::new(MaasClientOptions::default()),
            patience: Patience::default(),
            scratch: None,
        })
    }

    /// [`World::open`] for observing and planning: the state store is only read, and never
    /// created (see `state.rs`).
    pub async fn open_read_only(
        global: &GlobalArgs,
        fleet: &FleetArgs,
        secrets: &SecretArgs,
    ) -> Result<World, CliError> {
        let secrets = open_secrets(secrets)?;
        let opened = super::state::open(global, &fleet.fleet, Access::ReadOnly).await?;
        Ok(World {
            store: opened.store.clone(),
            secrets,
            clients: MaasClients::new(MaasClientOptions::default()),
            patience: Patience::default(),
            scratch: Some(opened),
        })
    }

    /// Wait for each site's MAAS with `patience` (`--timeout`).
    pub fn patience(mut self, patience: Patience) -> Self {
        self.patience = patience;
        self
    }

    /// Observe the selected sites now: MAAS through the secret store's API keys, the store's
    /// inventory and jobs.
    pub async fn observe(&self, fleet: &Fleet, sites: &SiteFilter) -> Result<Snapshot, CliError> {
        observe::observe_within(
            fleet,
            sites,
            &self.store,
            self.secrets.as_ref(),
            &self.clients,
            &self.patience,
        )
        .await
        .map_err(observe_error)
    }

    /// Observe and plan the sites of `options` now.
    pub async fn plan(
        &self,
        fleet: &Fleet,
        options: &PlanOptions,
    ) -> Result<(Snapshot, Plan), CliError> {
        let snapshot = self.observe(fleet, &options.sites).await?;
        let plan = crate::plan::plan(fleet, &snapshot, options);
        Ok((snapshot, plan))
    }

    pub async fn close(self) {
        self.store.close().await;
        drop(self.scratch);
    }
}

pub fn observe_error(err: ObserveError) -> CliError {
    match err {
        ObserveError::UnknownSite(err) => unknown_site(err),
        ObserveError::Store(err) => store_error(err),
    }
}

pub fn unknown_site(err: observe::UnknownSite) -> CliError {
    CliError::user(err.to_string()).hint("pass --site with one of the fleet's sites")
}

/// A warning per unreadable site on stderr: the snapshot records it, the operator should know.
pub fn warn_unreadable(snapshot: &Snapshot) {
    for (site, observation) in &snapshot.sites {
        if let SiteObservation::Unreadable { error, hint, .. } = observation {
            let shown = |text: &str| {
                crate::sanitize::terminal::escape_line(&crate::sanitize::redact::text(text))
                    .into_owned()
            };
            eprintln!("warning: site {site} could not be read: {}", shown(error));
            if let Some(hint) = hint {
                eprintln!("hint: {}", shown(hint));
            }
        }
    }
}

/// Run `work` on the state store ([`open_store`]), closed afterwards whatever `work` returned.
pub async fn with_store<T>(
    global: &GlobalArgs,
    fleet_dir: &Path,
    work: impl AsyncFnOnce(&Store) -> Result<T, CliError>,
) -> Result<T, CliError> {
    with_access(global, fleet_dir, Access::ReadWrite, work).await
}

/// [`with_store`] for a command that only reads: it never creates a store.
pub async fn with_store_read<T>(
    global: &GlobalArgs,
    fleet_dir: &Path,
    work: impl AsyncFnOnce(&Store) -> Result<T, CliError>,
) -> Result<T, CliError> {
    with_access(global, fleet_dir, Access::ReadOnly, work).await
}

async fn with_access<T>(
    global: &GlobalArgs,
    fleet_dir: &Path,
    access: Access,
    work: impl AsyncFnOnce(&Store) -> Result<T, CliError>,
) -> Result<T, CliError> {
    let opened = super::state::open(global, fleet_dir, access).await?;
    let result = work(&opened.store).await;
    opened.close().await;
    result
}

/// The state store a command that writes works on (`--state URL`, else the fleet's default
/// store, docs/state-store.md), created and migrated if needed. The fleet directory must exist:
/// a typo must not create a store somewhere unexpected.
pub async fn open_store(global: &GlobalArgs, fleet_dir: &Path) -> Result<Store, CliError> {
    Ok(super::state::open(global, fleet_dir, Access::ReadWrite)
        .await?
        .store)
}

/// Classify a store error once, with what to do about it.
pub fn store_error(err: StoreError) -> CliError {
    let hint = match &err {
        StoreError::InvalidUrl { .. } => {
            Some("pass --state sqlite://PATH or --state postgres://USER@HOST:PORT/DB")
        }
        StoreError::Unreachable { .. } => Some(
            "check that the database is running and the --state URL (host, port, credentials) is right",
        ),
        StoreError::SchemaTooNew { .. } => {
            Some("upgrade metalform: a newer version wrote this store")
        }
        StoreError::UpgradeRefused { hint, .. } => Some(*hint),
        StoreError::Corrupt(_) => Some("restore the store from a backup or report a bug"),
        _ => None,
    };
    let unexpected = matches!(err, StoreError::Corrupt(_));
    let mut cli = if unexpected {
        CliError::unexpected(err.to_string())
    } else {
        CliError::user(err.to_string())
    };
    if let Some(hint) = hint {
        cli = cli.hint(hint);
    }
    cli
}

/// A node by id, or by hostname (with `site` when the hostname exists in several sites).
pub async fn find_node(store: &Store, site: Option<&str>, wanted: &str) -> Result<Node, CliError> {
    if let Ok(id) = uuid::Uuid::parse_str(wanted) {
        return store.node(id).await.map_err(store_error);
    }
    let candidates = match site {
        Some(site) => store
            .find_node(site, wanted)
            .await
            .map_err(store_error)?
            .into_iter()
            .collect(),
        None => store
            .find_nodes_by_hostname(wanted)
            .await
            .map_err(store_error)?,
    };
    match candidates.len() {
        1 => Ok(candidates.into_iter().next().expect("one")),
        0 => Err(CliError::user(format!(
            "no node `{wanted}`{} in the inventory",
            site.map(|s| format!(" in site `{s}`")).unwrap_or_default()
        ))
        .hint("run `metalform status` to list nodes; pass a hostname or a node id")),
        _ => {
            let sites: Vec<&str> = candidates.iter().map(|n| n.site.as_str()).collect();
            Err(CliError::user(format!(
                "hostname `{wanted}` exists in several sites: {}",
                sites.join(", ")
            ))
            .hint("pass --site SITE"))
        }
    }
}
