//! `metalform drift list|status|resolve|run` (seed 000 §6.6; docs/drift.md): the nodes whose
//! MAAS state drifted from the inventory, the reconciliation summary, the operator's resolve
//! (acknowledge, or reactivate a quarantined node), and one drift pass now.

use serde_json::json;

use super::apply::operator;
use super::output::{ReportFormat, table, time};
use super::world::{
    WorldArgs, find_node, load_fleet, open_secrets, open_store, store_error, unknown_site,
    with_store, with_store_read,
};
use super::{CliError, Exit, GlobalArgs};
use crate::drift::{
    self, ActionResult, DriftEnv, DriftFilter, DriftPolicy, DriftReport, DriftSummary, Resolution,
    ResolveError,
};
use crate::observe::MaasClients;
use crate::provider::maas::MaasClientOptions;

/// `metalform drift …`.
pub type Args = super::Subcommands<Command>;

#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Nodes with open drift (with --all, resolved drift too), then the summary.
    List(ListArgs),
    /// The reconciliation summary: nodes ok, drifted, never reconciled, per site.
    Status(StatusArgs),
    /// Acknowledge a node's drift, or reactivate a quarantined node whose machine is Deployed
    /// again. Audited.
    Resolve(ResolveArgs),
    /// Run one drift pass now, as the daemon does at each reconcile: observe MAAS, record, act.
    Run(RunArgs),
}

#[derive(Debug, clap::Args)]
pub struct ListArgs {
    /// Fleet directory (for the default state store).
    #[arg(long, default_value = ".", value_name = "DIR")]
    pub fleet: std::path::PathBuf,
    #[arg(long, value_name = "SITE")]
    pub site: Option<String>,
    /// Also drift that was acknowledged or healed.
    #[arg(long)]
    pub all: bool,
    #[arg(long, value_enum, default_value_t = ReportFormat::Text)]
    pub format: ReportFormat,
}

#[derive(Debug, clap::Args)]
pub struct StatusArgs {
    #[arg(long, default_value = ".", value_name = "DIR")]
    pub fleet: std::path::PathBuf,
    #[arg(long, value_enum, default_value_t = ReportFormat::Text)]
    pub format: ReportFormat,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ResolveAction {
    /// Mark the drift seen and resolved; the node stays as it is.
    Acknowledge,
    /// Quarantined → active, when MAAS last showed the machine Deployed.
    Reactivate,
}

#[derive(Debug, clap::Args)]
pub struct ResolveArgs {
    /// The node: a hostname (with --site when it exists in several sites) or a node id.
    pub node: String,
    /// Why (recorded in the audit log; required).
    #[arg(long, value_name = "TEXT")]
    pub reason: Option<String>,
    #[arg(long, value_enum, default_value_t = ResolveAction::Acknowledge)]
    pub action: ResolveAction,
    #[arg(long, value_name = "SITE")]
    pub site: Option<String>,
    #[arg(long, default_value = ".", value_name = "DIR")]
    pub fleet: std::path::PathBuf,
    /// Who is acting, for the audit log (default: $USER).
    #[arg(long = "as", value_name = "NAME")]
    pub actor: Option<String>,
    #[arg(long, value_enum, default_value_t = ReportFormat::Text)]
    pub format: ReportFormat,
}

#[derive(Debug, clap::Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub world: WorldArgs,
    /// The self-heal policy as TOML (the daemon's `[drift]` table, docs/drift.md); default:
    /// every auto-action of the table, heartbeat threshold 5m.
    #[arg(long, value_name = "FILE")]
    pub policy: Option<std::path::PathBuf>,
    #[arg(long, value_enum, default_value_t = ReportFormat::Text)]
    pub format: ReportFormat,
}

pub async fn run(global: &GlobalArgs, args: Args) -> Result<Exit, CliError> {
    match args.command {
        Command::List(list) => {
            with_store_read(global, &list.fleet, async |store| {
                list_drift(store, &list).await
            })
            .await
        }
        Command::Status(status) => {
            let summary = with_store_read(global, &status.fleet, async |store| {
                drift::summary(store).await.map_err(store_error)
            })
            .await?;
            match status.format {
                ReportFormat::Json => print_json(&json!({"summary": summary})),
                ReportFormat::Text => print!("{}", render_summary(&summary)),
            }
            Ok(Exit::Success)
        }
        Command::Resolve(resolve) => {
            with_store(global, &resolve.fleet, async |store| {
                resolve_drift(store, &resolve).await
            })
            .await
        }
        Command::Run(run) => run_pass(global, &run).await,
    }
}

fn print_json(value: &serde_json::Value) {
    println!(
        "{}",
        serde_json::to_string_pretty(value).expect("JSON serialises")
    );
}

async fn list_drift(store: &crate::store::Store, args: &ListArgs) -> Result<Exit, CliError> {
    let filter = DriftFilter {
        site: args.site.clone(),
        include_resolved: args.all,
    };
    let entries = drift::list(store, &filter).await.map_err(store_error)?;
    let summary = drift::summary(store).await.map_err(store_error)?;
    match args.format {
        ReportFormat::Json => print_json(&json!({"drift": entries, "summary": summary})),
        ReportFormat::Text => {
            let rows: Vec<Vec<String>> = entries
                .iter()
                .map(|e| {
                    vec![
                        e.site.clone(),
                        e.hostname.clone(),
                        e.node_state.to_string(),
                        e.rule.clone().unwrap_or_else(|| "-".into()),
                        e.severity.clone().unwrap_or_else(|| "-".into()),
                        format!(
                            "{} ({})",
                            e.maas_status.as_deref().unwrap_or("absent"),
                            if e.maas_system_id.is_empty() {
                                "-"
                            } else {
                                &e.maas_system_id
                            }
                        ),
                        match (e.drift_detected, e.drift_resolved_at) {
                            (true, _) => "open".to_owned(),
                            (false, Some(at)) => format!("resolved {}", time(at)),
                            (false, None) => "resolved".to_owned(),
                        },
                        e.node_id.to_string(),
                    ]
                })
                .collect();
            let mut out = table(
                &[
                    "SITE", "HOSTNAME", "STATE", "RULE", "SEVERITY", "MAAS", "DRIFT", "NODE ID",
                ],
                &rows,
            );
            let open = entries.iter().filter(|e| e.drift_detected).count();
            out.push_str(&format!(
                "\n{open} node{} with open drift{}\n",
                if open == 1 { "" } else { "s" },
                if args.all {
                    format!(", {} resolved", entries.len() - open)
                } else {
                    String::new()
                }
            ));
            out.push_str(&render_summary(&summary));
            print!("{out}");
        }
    }
    Ok(Exit::Success)
}

fn render_summary(summary: &DriftSummary) -> String {
    let mut out = format!(
        "{} watched node{}: {} ok, {} drifted, {} unreconciled",
        summary.nodes,
        if summary.nodes == 1 { "" } else { "s" },
        summary.counts.ok,
        summary.counts.drifted,
        summary.counts.unreconciled
    );
    if let Some(at) = summary.last_reconciled_at {
        out.push_str(&format!(" (last reconciled {})", time(at)));
    }
    out.push('\n');
    if !summary.by_rule.is_empty() {
        let rules: Vec<String> = summary
            .by_rule
            .iter()
            .map(|(rule, n)| format!("{rule} {n}"))
            .collect();
        out.push_str(&format!("open drift by rule: {}\n", rules.join(", ")));
    }
    out
}

fn resolve_error(err: ResolveError) -> CliError {
    let hint = err.hint();
    let error = match err {
        ResolveError::Store(e) => return store_error(e),
        ResolveError::MissingReason => CliError::argument(err.to_string()),
        other => CliError::user(other.to_string()),
    };
    match hint {
        Some(hint) => error.hint(hint),
        None => error,
    }
}

async fn resolve_drift(store: &crate::store::Store, args: &ResolveArgs) -> Result<Exit, CliError> {
    let node = find_node(store, args.site.as_deref(), &args.node).await?;
    let resolution = match args.action {
        ResolveAction::Acknowledge => Resolution::Acknowledge,
        ResolveAction::Reactivate => Resolution::Reactivate,
    };
    let actor = operator(args.actor.as_deref());
    let reason = args.reason.as_deref().unwrap_or_default();
    let resolved = drift::resolve(store, node.id, resolution, &actor, reason)
        .await
        .map_err(resolve_error)?;
    match args.format {
        ReportFormat::Json => print_json(&json!({"resolved": resolved})),
        ReportFormat::Text => println!(
            "{}/{} ({}): {}; node {} -> {}",
            resolved.node.site,
            resolved.node.hostname,
            resolved.node.id,
            match resolution {
                Resolution::Acknowledge => "drift acknowledged",
                Resolution::Reactivate => "reactivated",
            },
            node.status,
            resolved.node.status
        ),
    }
    Ok(Exit::Success)
}

fn read_policy(path: Option<&std::path::Path>) -> Result<DriftPolicy, CliError> {
    let Some(path) = path else {
        return Ok(DriftPolicy::default());
    };
    let text = std::fs::read_to_string(path).map_err(|e| {
        CliError::user(format!("cannot read {}: {e}", path.display()))
            .hint("pass --policy FILE with a TOML self-heal policy (docs/drift.md)")
    })?;
    toml::from_str(&text).map_err(|e| {
        CliError::user(format!("{}: {}", path.display(), e.message().trim())).hint(
            "keys: heartbeat_threshold, heartbeat, quarantine, update_host, release_retired, absent_guard_fraction",
        )
    })
}

async fn run_pass(global: &GlobalArgs, args: &RunArgs) -> Result<Exit, CliError> {
    let policy = read_policy(args.policy.as_deref())?;
    let world = &args.world;
    let fleet = load_fleet(&world.fleet)?;
    let sites = world
        .sites
        .site_filter()
        .resolve(&fleet)
        .map_err(unknown_site)?;
    let secrets = open_secrets(&world.secrets)?;
    let store = open_store(global, &world.fleet.fleet).await?;
    let env = DriftEnv::new(
        store.clone(),
        secrets,
        MaasClients::new(MaasClientOptions::default()),
        policy,
    );
    let mut reports = Vec::new();
    for site in sites {
        match drift::reconcile_site(&env, site, None).await {
            Ok(report) => reports.push(report),
            Err(err) => {
                store.close().await;
                return Err(CliError::user(err.to_string()));
            }
        }
    }
    store.close().await;
    for report in &reports {
        if let Some(error) = &report.unreadable {
            eprintln!(
                "warning: site {}: {error}; no MAAS rule was applied there",
                report.site
            );
        }
    }
    match args.format {
        ReportFormat::Json => print_json(&json!({"reports": reports})),
        ReportFormat::Text => {
            for report in &reports {
                print!("{}", render_report(report));
            }
        }
    }
    Ok(Exit::Success)
}

fn render_report(report: &DriftReport) -> String {
    let rows: Vec<Vec<String>> = report
        .findings
        .iter()
        .map(|f| {
            vec![
                f.hostname.clone(),
                f.node_state.to_string(),
                f.rule.to_string(),
                f.severity.to_string(),
                f.observed.clone(),
            ]
        })
        .collect();
    let mut out = format!("site {} at {}\n", report.site, time(report.reconciled_at));
    out.push_str(&table(
        &["HOSTNAME", "STATE", "RULE", "SEVERITY", "MAAS"],
        &rows,
    ));
    for action in &report.actions {
        let (label, why) = match &action.result {
            ActionResult::Taken => ("taken", None),
            ActionResult::Held(why) => ("held", Some(why)),
            ActionResult::Skipped(why) => ("skipped", Some(why)),
            ActionResult::Failed(why) => ("FAILED", Some(why)),
        };
        out.push_str(&format!(
            "{label:7} {} {}{}\n",
            action.hostname,
            action.action.as_str(),
            why.map(|w| format!(": {w}")).unwrap_or_default()
        ));
    }
    if let Some(guard) = &report.guard {
        out.push_str(&format!("guard: {guard}\n"));
    }
    if !report.unmanaged.is_empty() {
        out.push_str(&format!(
            "{} unmanaged MAAS machine(s) (no node): {}\n",
            report.unmanaged.len(),
            report.unmanaged.join(", ")
        ));
    }
    for error in &report.errors {
        out.push_str(&format!("error: {error}\n"));
    }
    out
}
