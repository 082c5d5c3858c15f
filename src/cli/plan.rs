//! `metalform plan [--fleet DIR] [--rev REV] [--site S]... [--observed FILE] [--out PLANFILE]
//! [--format text|json|markdown] [--detailed-exitcode]` (DESIGN.md §3, §4; docs/plan.md):
//! observe (or read an exported snapshot), plan, print, and optionally write the plan file that
//! `metalform apply PLANFILE` runs.
//!
//! Exit codes: 0 success (with `--detailed-exitcode`: no changes), 2 changes present (only with
//! `--detailed-exitcode`), 3 nodes need an operator, listed on stderr (only with
//! `--detailed-exitcode`), 1 error (bad fleet, unreadable snapshot, store or secret trouble, a
//! site whose MAAS could not be observed — the plan is still printed, but it is not the whole
//! plan). Observing waits at most `--timeout`, naming slow sites on stderr meanwhile.
//!
//! It reads top-down: arguments → the fleet → the observation (a snapshot file, or the state
//! store, secrets and MAAS opened and observed now) → the plan → the plan file and the output.

use std::mem::ManuallyDrop;
use std::path::PathBuf;

use super::output::{ReviewFormat, render_plan};
use super::world::{
    SiteArgs, WorldArgs, load_fleet, open_store, store_error, unknown_site, warn_unreadable,
};
use super::{CliError, Exit, GlobalArgs};
use crate::model::{Fleet, SiteName};
use crate::observe::{SiteFilter, Snapshot};
use crate::plan::{self, PlanOptions};

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub world: WorldArgs,
    /// Plan against a snapshot written by `metalform observe` instead of observing now (no MAAS
    /// or store access needed).
    #[arg(long, value_name = "FILE")]
    pub observed: Option<PathBuf>,
    /// Write the plan file for `metalform apply PLANFILE`.
    #[arg(long, value_name = "PLANFILE")]
    pub out: Option<PathBuf>,
    /// Output format: terraform-like text, the plan file's JSON, or markdown for a PR comment.
    #[arg(long, value_enum, default_value_t)]
    pub format: ReviewFormat,
    /// Exit 0 when there is nothing to do, 2 when there are changes, 3 when nodes need an
    /// operator first (listed on stderr), 1 on error (an unobservable site is one).
    #[arg(long)]
    pub detailed_exitcode: bool,
    /// Text only: list unchanged nodes too.
    #[arg(long)]
    pub show_unchanged: bool,
    /// Markdown only: the largest comment to produce, in bytes (GitHub allows 65536).
    #[arg(long, value_name = "BYTES", default_value_t = 60_000)]
    pub max_bytes: usize,
    /// Plan disruptive items although their maintenance window is closed; each says which
    /// window it overrides, and applying the plan audits it.
    #[arg(long)]
    pub ignore_windows: bool,
    /// The agent install deployed hosts get (as apply or the daemon deploy it): with it, new
    /// onboardings show their user-data, and deployed nodes show how their user-data would
    /// change with it. Without it, each node is compared with the agent install it was last
    /// deployed with.
    #[command(flatten)]
    pub agent: super::render::AgentPayloadArgs,
}

pub async fn run(global: &GlobalArgs, args: Args) -> Result<Exit, CliError> {
    let (fleet, snapshot, sites) = match &args.observed {
        Some(path) => {
            let fleet = load_fleet(&args.world.fleet)?;
            let snapshot = read_snapshot(path)?;
            let sites = observed_sites(&fleet, &args.world.sites, &snapshot, path)?;
            (fleet, snapshot, sites)
        }
        None => args.world.load_and_observe(global).await?,
    };
    warn_unreadable(&snapshot);
    let payload = if args.agent.given() {
        Some(plan::PayloadSettings {
            enroll_url: args.agent.enroll_url(),
            agent: args.agent.install()?,
        })
    } else {
        None
    };
    let options = PlanOptions {
        sites,
        ignore_windows: args.ignore_windows,
        payload,
        ..PlanOptions::default()
    };
    let plan = plan::plan(&fleet, &snapshot, &options);
    // The process ends with this command: the observation, the fleet and the plan (hundreds
    // of thousands of allocations on a large fleet, and no secret among them) go with it
    // instead of being freed one by one (8 ms of a 10,000-node plan).
    std::mem::forget(snapshot);
    let (fleet, plan) = (ManuallyDrop::new(fleet), ManuallyDrop::new(plan));
    if let Some(out) = &args.out {
        // Signed with the state store's key: `apply` runs only plans this store signed.
        let mut signed = plan.clone();
        let store = open_store(global, &args.world.fleet.fleet).await?;
        let key = store.plan_signing_key().await;
        store.close().await;
        plan::sign(&mut signed, &key.map_err(store_error)?);
        plan::save(&signed, out).map_err(|err| CliError::user(err.to_string()).hint(err.hint()))?;
        eprintln!(
            "Saved the plan to {}; apply it with `metalform apply {}`.",
            out.display(),
            out.display()
        );
    }
    print!(
        "{}",
        render_plan(&plan, args.format, args.show_unchanged, args.max_bytes)
    );
    unobserved(&fleet, &plan)?;
    if !args.detailed_exitcode {
        return Ok(Exit::Success);
    }
    let blocked: Vec<&crate::plan::PlanItem> = plan.needing_operator().collect();
    if !blocked.is_empty() {
        for item in &blocked {
            eprintln!(
                "blocked: {}: {}",
                item.node,
                crate::sanitize::terminal::escape_line(&item.reason)
            );
        }
        eprintln!(
            "{} node(s) need an operator before the fleet can converge",
            blocked.len()
        );
        return Ok(Exit::Blocked);
    }
    Ok(if plan.has_changes() {
        Exit::Changes
    } else {
        Exit::Success
    })
}

/// A plan with a site whose MAAS could not be observed is not the whole plan: an error naming
/// each such site, its MAAS URL and why.
fn unobserved(fleet: &Fleet, plan: &plan::Plan) -> Result<(), CliError> {
    let sites: Vec<String> = plan
        .sites
        .iter()
        .filter(|s| !s.readable)
        .map(|s| {
            let url = fleet
                .sites
                .get(&s.site)
                .map(|site| crate::sanitize::redact::url(site.maas.url.as_str()))
                .unwrap_or_default();
            format!(
                "site {} (MAAS at {url}): {}",
                s.site,
                s.error.as_deref().unwrap_or("unknown error")
            )
        })
        .collect();
    if sites.is_empty() {
        return Ok(());
    }
    Err(CliError::user(format!(
        "{} site(s) could not be observed, so their nodes were not planned: {}",
        sites.len(),
        sites.join("; ")
    ))
    .hint("check that each MAAS is up and reachable and its API key readable, then plan again"))
}

fn read_snapshot(path: &std::path::Path) -> Result<Snapshot, CliError> {
    let text = std::fs::read_to_string(path).map_err(|err| {
        CliError::user(format!(
            "cannot read the snapshot {}: {err}",
            path.display()
        ))
        .hint("write one with `metalform observe [--site S] > FILE`")
    })?;
    Snapshot::from_json(&text).map_err(|err| {
        CliError::user(format!(
            "{}: not a metalform snapshot: {err}",
            path.display()
        ))
        .hint("write it with `metalform observe [--site S] > FILE` (same metalform version)")
    })
}

/// The sites to plan from a snapshot: `--site` (each must be in it), else every site it
/// observed. Each must be a site of the fleet.
fn observed_sites(
    fleet: &Fleet,
    args: &SiteArgs,
    snapshot: &Snapshot,
    path: &std::path::Path,
) -> Result<SiteFilter, CliError> {
    let observed: Vec<&str> = snapshot.sites.keys().map(SiteName::as_str).collect();
    if observed.is_empty() {
        return Err(
            CliError::user(format!("the snapshot {} observed no site", path.display()))
                .hint("write it with `metalform observe [--site S] > FILE`"),
        );
    }
    let filter = if args.sites.is_empty() {
        SiteFilter::from_names(observed.iter().copied())
    } else {
        if let Some(missing) = args
            .sites
            .iter()
            .find(|s| !snapshot.sites.contains_key(s.as_str()))
        {
            return Err(CliError::user(format!(
                "the snapshot {} has no observation of site `{missing}` (it observed: {})",
                path.display(),
                observed.join(", ")
            ))
            .hint(format!(
                "observe it: `metalform observe --site {missing} > FILE`"
            )));
        }
        args.site_filter()
    };
    filter.resolve(fleet).map_err(unknown_site)?;
    Ok(filter)
}
