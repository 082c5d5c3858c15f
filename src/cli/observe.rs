//! `metalform observe [--fleet DIR] [--rev REV] [--site S]... [--secrets URL]` (issue 5,
//! docs/plan.md): observe the sites' MAAS (one machines list per site), the inventory and the
//! jobs, and print the snapshot as JSON, so that `metalform plan --observed FILE` can plan
//! without MAAS or store access (CI). An unreadable site is recorded as such, with a warning
//! on stderr.
//!
//! Also the shared edge of `observe`, `plan` and `apply`: the fleet, site and secret flags,
//! loading the fleet, and [`World`] (the state store, the secret store and the MAAS clients)
//! to observe and plan with.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use super::status::{open_store, store_error};
use super::validate::source_error;
use super::{CliError, Exit, GlobalArgs};
use crate::manifest::{self, LoadError};
use crate::model::Fleet;
use crate::observe::{
    self, MaasClients, ObserveError, Patience, SiteFilter, SiteObservation, Snapshot,
};
use crate::plan::Plan;
use crate::provider::maas::MaasClientOptions;
use crate::secrets::{self, SecretStore};
use crate::source::FleetSource;
use crate::store::Store;

/// Where the fleet is.
#[derive(Debug, Clone, clap::Args)]
pub struct FleetArgs {
    /// Fleet directory (holding sites/, profiles/, nodes/); the default state store lives in its
    /// .metalform/.
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

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub fleet: FleetArgs,
    #[command(flatten)]
    pub sites: SiteArgs,
    #[command(flatten)]
    pub secrets: SecretArgs,
    #[command(flatten)]
    pub wait: TimeoutArgs,
}

pub async fn run(global: &GlobalArgs, args: Args) -> Result<Exit, CliError> {
    let fleet = load_fleet(&args.fleet)?;
    let sites = args.sites.site_filter();
    // Refuse an unknown --site before touching anything.
    sites.resolve(&fleet).map_err(unknown_site)?;
    let world = World::open(global, &args.fleet, &args.secrets)
        .await?
        .patience(args.wait.patience());
    let snapshot = world.observe(&fleet, &sites).await;
    world.close().await;
    let snapshot = snapshot?;
    warn_unreadable(&snapshot);
    print!("{}", snapshot.to_json());
    Ok(Exit::Success)
}

/// Read and validate the fleet; an invalid fleet prints its diagnostics on stderr.
pub(super) fn load_fleet(args: &FleetArgs) -> Result<Fleet, CliError> {
    let source = FleetSource::new(&args.fleet, args.rev.as_deref());
    match manifest::load_fleet(&source) {
        Ok(loaded) => Ok(loaded.fleet),
        Err(LoadError::Source(err)) => Err(source_error(err)),
        Err(LoadError::Invalid { errors, .. }) => {
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

pub(super) fn open_secrets(args: &SecretArgs) -> Result<Arc<dyn SecretStore>, CliError> {
    let url = args.secrets.as_deref().ok_or_else(|| {
        CliError::user("no secret store to read the sites' MAAS API keys from").hint(
            "pass --secrets vault://HOST:PORT (or file://PATH), or set METALFORM_SECRETS; to plan without MAAS access, pass --observed FILE from `metalform observe`",
        )
    })?;
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
pub(super) struct World {
    pub store: Store,
    pub secrets: Arc<dyn SecretStore>,
    pub clients: MaasClients,
    /// How long each site's MAAS is waited for.
    pub patience: Patience,
}

impl World {
    /// The secret store first (a missing `--secrets` creates no store), then the state store.
    pub async fn open(
        global: &GlobalArgs,
        fleet: &FleetArgs,
        secrets: &SecretArgs,
    ) -> Result<World, CliError> {
        let secrets = open_secrets(secrets)?;
        let store = open_store(global, &fleet.fleet).await?;
        Ok(World {
            store,
            secrets,
            clients: MaasClients::new(MaasClientOptions::default()),
            patience: Patience::default(),
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

    /// Observe and plan the selected sites now (`crate::apply::plan_now`).
    pub async fn plan(
        &self,
        fleet: &Fleet,
        sites: &SiteFilter,
    ) -> Result<(Snapshot, Plan), CliError> {
        crate::apply::plan_now(
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

    pub async fn close(self) {
        self.store.close().await;
    }
}

pub(super) fn observe_error(err: ObserveError) -> CliError {
    match err {
        ObserveError::UnknownSite(err) => unknown_site(err),
        ObserveError::Store(err) => store_error(err),
    }
}

pub(super) fn unknown_site(err: observe::UnknownSite) -> CliError {
    CliError::user(err.to_string()).hint("pass --site with one of the fleet's sites")
}

/// A warning per unreadable site on stderr: the snapshot records it, the operator should know.
pub(super) fn warn_unreadable(snapshot: &Snapshot) {
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
