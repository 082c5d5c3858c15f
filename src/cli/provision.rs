//! `metalform provision NODE VERB --reason …` (issue 18, seed 002 "REST API impact"): a
//! provisioning verb on one node, checked against the node's provision state, carried out on
//! MAAS where it has an equivalent (`crate::apply::provision`), and audited.

use std::time::Duration;

use serde_json::json;

use super::apply::operator;
use super::output::ReportFormat;
use super::world::{FleetArgs, SecretArgs, World, find_node, load_fleet, store_error};
use super::{CliError, Exit, GlobalArgs};
use crate::apply::SiteMaas;
use crate::apply::provision::{VerbDone, VerbError, VerbRequest, carry_out_verb};
use crate::lifecycle::{Verb, VerbRefusal};

/// The node lease a verb holds while it acts.
const VERB_LEASE_TTL: Duration = Duration::from_secs(60);

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The node: a hostname (with --site when it exists in several sites) or a node id.
    pub node: String,
    /// The verb: inspect (MAAS commission), clean (erase), provide (mark fixed), rescue,
    /// unrescue, abort; manage, active, rebuild and deleted say which manifest change does it.
    #[arg(value_parser = parse_verb)]
    pub verb: Verb,
    /// Why (recorded in the audit log; required).
    #[arg(long, value_name = "TEXT")]
    pub reason: Option<String>,
    #[arg(long, value_name = "SITE")]
    pub site: Option<String>,
    #[command(flatten)]
    pub fleet: FleetArgs,
    #[command(flatten)]
    pub secrets: SecretArgs,
    /// Who is acting, for the audit log (default: $USER).
    #[arg(long = "as", value_name = "NAME")]
    pub actor: Option<String>,
    #[arg(long, value_enum, default_value_t = ReportFormat::Text)]
    pub format: ReportFormat,
}

fn parse_verb(text: &str) -> Result<Verb, String> {
    // `deploy` and `delete` are what operators type; seed 002 names them `active`, `deleted`.
    let name = match text {
        "deploy" => "active",
        "delete" | "undeploy" => "deleted",
        other => other,
    };
    name.parse().map_err(|_| {
        let names: Vec<&str> = Verb::ALL.iter().map(|v| v.as_str()).collect();
        format!("unknown verb `{text}` (one of: {})", names.join(", "))
    })
}

pub async fn run(global: &GlobalArgs, args: Args) -> Result<Exit, CliError> {
    let reason = match args.reason.as_deref().map(str::trim) {
        Some(reason) if !reason.is_empty() => reason.to_owned(),
        _ => {
            return Err(CliError::argument(
                "a reason is required: it is recorded in the audit log",
            )
            .hint("pass --reason TEXT"));
        }
    };
    let fleet = load_fleet(&args.fleet)?;
    let world = World::open(global, &args.fleet, &args.secrets, VERB_LEASE_TTL).await?;
    let result = async {
        let node = find_node(&world.store, args.site.as_deref(), &args.node).await?;
        let maas = SiteMaas::new(world.secrets.clone(), world.clients.clone());
        let request = VerbRequest {
            node_id: node.id,
            verb: args.verb,
            actor: operator(args.actor.as_deref()),
            reason,
            lease_ttl: VERB_LEASE_TTL,
        };
        carry_out_verb(&world.store, &maas, &fleet, &request)
            .await
            .map_err(verb_error)
    }
    .await;
    world.close().await;
    let done = result?;
    match args.format {
        ReportFormat::Json => println!(
            "{}",
            serde_json::to_string_pretty(&json!({"provision": done})).expect("JSON serialises")
        ),
        ReportFormat::Text => print!("{}", render(&done)),
    }
    Ok(Exit::Success)
}

fn render(done: &VerbDone) -> String {
    let after = done
        .after
        .as_ref()
        .map(|v| {
            let target = v
                .target_provision_state
                .map(|t| format!(" -> {t}"))
                .unwrap_or_default();
            format!("{}{target}", v.provision_state)
        })
        .unwrap_or_else(|| "unknown".into());
    format!(
        "{} on node {}: MAAS {} of machine {} (now {}); provision state {} -> {after}\n",
        done.verb,
        done.node_id,
        done.operation.op(),
        done.system_id,
        done.maas_status,
        done.before.provision_state,
    )
}

fn verb_error(err: VerbError) -> CliError {
    match err {
        VerbError::Store(e) => store_error(e),
        VerbError::Refused(refusal) => {
            let hint = match &refusal {
                VerbRefusal::Conflict { .. } => {
                    "run `metalform status NODE` for its provision state; docs/recovery.md lists the ways out"
                }
                VerbRefusal::OwnedByGit { .. } => "edit the node's manifest, then plan and apply",
                VerbRefusal::NotSupported { .. } => "docs/lifecycle.md lists what MAAS offers",
            };
            CliError::user(refusal.to_string()).hint(hint)
        }
        VerbError::JobOpen { job, .. } => CliError::user(err.to_string()).hint(format!(
            "`metalform jobs show {job}`; `metalform jobs cancel {job}` stops it"
        )),
        VerbError::Busy(_) => {
            CliError::user(err.to_string()).hint("wait for the other executor, then try again")
        }
        VerbError::Unknown(_) => CliError::user(err.to_string()),
        VerbError::NotFound(_) | VerbError::Unavailable(_) | VerbError::Maas { .. } => {
            CliError::user(err.to_string())
        }
    }
}
