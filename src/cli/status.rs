//! `metalform status [NODE] [--fleet DIR] [--site S] [--retired] [--format text|json]`
//! (issue 4; seed 001 §9): the inventory view shows the coarse state per node; `status NODE`
//! shows the lifecycle detail view (job state, stage, attempt, failure class, last observed MAAS
//! state, recommended next action). Creates and migrates the store if needed.

use std::path::PathBuf;

use serde_json::json;

use super::output::{ReportFormat, detail_view, table, time};
use super::world::{find_node, store_error, with_store_read};
use super::{CliError, Exit, GlobalArgs};
use crate::lifecycle::NodeState;
use crate::store::{Job, JobSpec, MaasState, Node, NodeFilter, StageEventRow, Store};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Show the lifecycle detail view of one node (hostname or node id).
    pub node: Option<String>,
    /// Fleet directory; the default state store lives in its .metalform/.
    #[arg(long, default_value = ".", value_name = "DIR")]
    pub fleet: PathBuf,
    /// Only nodes of this site.
    #[arg(long, value_name = "SITE")]
    pub site: Option<String>,
    /// Only nodes flagged retired.
    #[arg(long)]
    pub retired: bool,
    /// Output format.
    #[arg(long, value_enum, default_value_t = ReportFormat::Text)]
    pub format: ReportFormat,
}

/// How many recent events the detail view shows.
const DETAIL_EVENTS: i64 = 10;

pub async fn run(global: &GlobalArgs, args: Args) -> Result<Exit, CliError> {
    with_store_read(global, &args.fleet, async |store| match &args.node {
        None => inventory(store, &args).await,
        Some(node) => detail(store, &args, node).await,
    })
    .await
}

fn flags(node: &Node) -> String {
    let mut flags = Vec::new();
    if node.retired {
        flags.push("retired");
    }
    if node.protected {
        flags.push("protected");
    }
    if node.paused {
        flags.push("paused");
    }
    if flags.is_empty() {
        "-".to_owned()
    } else {
        flags.join(",")
    }
}

async fn inventory(store: &Store, args: &Args) -> Result<Exit, CliError> {
    let nodes = store
        .list_nodes(&NodeFilter {
            site: args.site.clone(),
            retired: args.retired.then_some(true),
            ..NodeFilter::default()
        })
        .await
        .map_err(store_error)?;
    let mut counts: std::collections::BTreeMap<NodeState, usize> = Default::default();
    for node in &nodes {
        *counts.entry(node.status).or_default() += 1;
    }
    match args.format {
        ReportFormat::Json => {
            let summary: serde_json::Map<String, serde_json::Value> = counts
                .iter()
                .map(|(s, n)| (s.as_str().to_owned(), json!(n)))
                .collect();
            let doc = json!({
                "nodes": nodes.iter().map(|n| json!({
                    "id": n.id,
                    "site": n.site,
                    "hostname": n.hostname,
                    "state": n.status,
                    "provider": n.provider,
                    "retired": n.retired,
                    "retired_reason": n.retired_reason,
                    "protected": n.protected,
                    "paused": n.paused,
                    "updated_at": n.updated_at,
                })).collect::<Vec<_>>(),
                "summary": {"total": nodes.len(), "by_state": summary},
            });
            println!("{}", serde_json::to_string_pretty(&doc).expect("JSON"));
        }
        ReportFormat::Text => {
            let rows: Vec<Vec<String>> = nodes
                .iter()
                .map(|n| {
                    vec![
                        n.site.clone(),
                        n.hostname.clone(),
                        n.status.to_string(),
                        flags(n),
                        n.id.to_string(),
                    ]
                })
                .collect();
            let mut out = table(&["SITE", "HOSTNAME", "STATE", "FLAGS", "NODE ID"], &rows);
            let by_state: Vec<String> = counts.iter().map(|(s, n)| format!("{n} {s}")).collect();
            out.push_str(&format!(
                "\n{} node{}{}\n",
                nodes.len(),
                if nodes.len() == 1 { "" } else { "s" },
                if by_state.is_empty() {
                    String::new()
                } else {
                    format!(": {}", by_state.join(", "))
                }
            ));
            print!("{out}");
        }
    }
    Ok(Exit::Success)
}

async fn detail(store: &Store, args: &Args, wanted: &str) -> Result<Exit, CliError> {
    let node = find_node(store, args.site.as_deref(), wanted).await?;
    let maas = store.maas_state(node.id).await.map_err(store_error)?;
    let job = store
        .latest_job_for_node(node.id)
        .await
        .map_err(store_error)?;
    let events = match &job {
        Some(job) => store
            .job_events(job.kind, job.id, DETAIL_EVENTS)
            .await
            .map_err(store_error)?,
        None => Vec::new(),
    };
    match args.format {
        ReportFormat::Json => {
            let doc = json!({
                "node": node,
                "maas_state": maas,
                "job": job,
                "events": events,
            });
            println!("{}", serde_json::to_string_pretty(&doc).expect("JSON"));
        }
        ReportFormat::Text => print!(
            "{}",
            render_detail(&node, maas.as_ref(), job.as_ref(), &events)
        ),
    }
    Ok(Exit::Success)
}

fn render_detail(
    node: &Node,
    maas: Option<&MaasState>,
    job: Option<&Job>,
    events: &[StageEventRow],
) -> String {
    let mut lines: Vec<(String, String)> = vec![
        (
            "node".into(),
            format!("{} (site {})", node.hostname, node.site),
        ),
        ("id".into(), node.id.to_string()),
        ("state".into(), node.status.to_string()),
    ];
    let mut flag_text = Vec::new();
    if node.retired {
        flag_text.push(format!(
            "retired ({})",
            node.retired_reason.as_deref().unwrap_or("no reason")
        ));
    }
    if node.protected {
        flag_text.push(match &node.protected_reason {
            Some(r) => format!("protected ({r})"),
            None => "protected".into(),
        });
    }
    if node.paused {
        flag_text.push("paused".into());
    }
    if !flag_text.is_empty() {
        lines.push(("flags".into(), flag_text.join(", ")));
    }
    lines.push(("provider".into(), node.provider.to_string()));
    if let Some(host) = &node.host {
        lines.push(("host".into(), host.clone()));
    }
    lines.push((
        "maas".into(),
        match maas {
            None => "not observed yet".into(),
            Some(m) => {
                let mut text = format!(
                    "{} (power {}), system {}",
                    m.last_maas_status.as_deref().unwrap_or("unknown"),
                    m.last_maas_power_state.as_deref().unwrap_or("unknown"),
                    m.maas_system_id
                );
                if !m.last_maas_ips.is_empty() {
                    text.push_str(&format!(", ips {}", m.last_maas_ips.join(" ")));
                }
                if let Some(at) = m.last_reconciled_at {
                    text.push_str(&format!(", observed {}", time(at)));
                }
                if m.drift_detected {
                    text.push_str(&format!(", DRIFT {}", m.drift_details));
                }
                text
            }
        },
    ));
    match job {
        None => lines.push(("job".into(), "none".into())),
        Some(job) => {
            let what = match &job.spec {
                JobSpec::Onboarding { .. } => "onboarding".to_owned(),
                JobSpec::Decommission { mode, .. } => format!("decommission ({mode})"),
                JobSpec::Provisioning { status, .. } => format!("provisioning ({status})"),
            };
            lines.push(("job".into(), format!("{what} {}", job.id)));
            lines.push(("job state".into(), job.state.to_string()));
            lines.push((
                "stage".into(),
                format!("{} (attempt {})", job.stage, job.attempt),
            ));
            if let Some(class) = job.failure_class {
                lines.push(("failure class".into(), class.to_string()));
            }
            if let Some(message) = &job.error_message {
                lines.push((
                    "error".into(),
                    match &job.error_code {
                        Some(code) => format!("{code}: {message}"),
                        None => message.clone(),
                    },
                ));
            }
            if let Some(status) = &job.last_maas_status {
                lines.push((
                    "last maas".into(),
                    format!(
                        "{status} (power {})",
                        job.last_maas_power_state.as_deref().unwrap_or("unknown")
                    ),
                ));
            }
            if let Some(action) = &job.recommended_action {
                lines.push(("next action".into(), action.clone()));
            }
            lines.push(("updated".into(), time(job.updated_at)));
        }
    }
    detail_view(&lines, "recent events", events)
}
