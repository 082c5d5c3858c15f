//! `metalform status [NODE] [--fleet DIR] [--site S] [--retired] [--format text|json]`
//! (issue 4; seed 001 §9): the inventory view shows the coarse state per node, and when the
//! reconciler next tries a node whose job failed retryably; `status NODE` shows the lifecycle
//! detail view (job state, stage, attempt, failure class, last observed MAAS state, next try,
//! recommended next action). Creates and migrates the store if needed.

use std::path::PathBuf;

use serde_json::json;

use super::output::{ReportFormat, detail_view, table, time};
use super::world::{find_node, store_error, with_store_read};
use super::{CliError, Exit, GlobalArgs};
use crate::lifecycle::{JobKind, JobState, NodeState, ProvisionView};
use crate::store::{
    Job, JobFilter, JobSpec, MaasState, NextTry, Node, NodeFilter, StageEventRow, Store,
};

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
    let waits = next_tries(store, args.site.as_deref()).await?;
    let wait_of = |n: &Node| waits.get(&(n.site.clone(), n.hostname.clone()));
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
                    "next_try": wait_of(n),
                    "updated_at": n.updated_at,
                })).collect::<Vec<_>>(),
                "summary": {"total": nodes.len(), "by_state": summary},
            });
            println!("{}", serde_json::to_string_pretty(&doc).expect("JSON"));
        }
        ReportFormat::Text => {
            // The RETRY column only when a node waits for its next try.
            let retrying = nodes.iter().any(|n| wait_of(n).is_some());
            let rows: Vec<Vec<String>> = nodes
                .iter()
                .map(|n| {
                    let mut row = vec![
                        n.site.clone(),
                        n.hostname.clone(),
                        n.status.to_string(),
                        flags(n),
                        n.id.to_string(),
                    ];
                    if retrying {
                        row.push(wait_of(n).map_or_else(|| "-".into(), |w| w.text.clone()));
                    }
                    row
                })
                .collect();
            let mut headers = vec!["SITE", "HOSTNAME", "STATE", "FLAGS", "NODE ID"];
            if retrying {
                headers.push("RETRY");
            }
            let mut out = table(&headers, &rows);
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

/// The next try of every node (site, hostname) whose job failed retryably and backs off.
async fn next_tries(
    store: &Store,
    site: Option<&str>,
) -> Result<std::collections::BTreeMap<(String, String), NextTry>, CliError> {
    let now = store.clock().now();
    let filter = JobFilter {
        site: site.map(str::to_owned),
        state: Some(JobState::FailedRetryable),
        ..JobFilter::default()
    };
    let mut waits = std::collections::BTreeMap::new();
    for kind in JobKind::ALL {
        for job in store.list_jobs(*kind, &filter).await.map_err(store_error)? {
            if let Some(wait) = job.next_try(now) {
                waits.insert((job.site.clone(), job.hostname.clone()), wait);
            }
        }
    }
    Ok(waits)
}

async fn detail(store: &Store, args: &Args, wanted: &str) -> Result<Exit, CliError> {
    let record = find_record(store, args.site.as_deref(), wanted).await?;
    let (node, maas, job, view) = match &record {
        Record::Node(id) => {
            let view = store.node_view(*id).await.map_err(store_error)?;
            (Some(view.node), view.maas, view.job, view.view)
        }
        Record::Job(job) => {
            let facts = crate::lifecycle::NodeFacts {
                node: None,
                maas: job
                    .last_maas_status
                    .as_deref()
                    .and_then(crate::lifecycle::MaasStatus::from_name),
                job: Some(crate::lifecycle::JobActivity {
                    kind: job.kind,
                    mode: job.mode(),
                    state: job.state,
                    stage: job.stage.clone(),
                }),
                retired: false,
                retired_reason: None,
                protected: false,
                protected_reason: None,
            };
            let view = crate::lifecycle::provision_view(&facts);
            (None, None, Some(job.as_ref().clone()), view)
        }
    };
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
                "provision_state": view.as_ref().map(|v| v.provision_state),
                "target_provision_state": view.as_ref().and_then(|v| v.target_provision_state),
                "job": job,
                "next_try": job.as_ref().and_then(|j| j.next_try(store.clock().now())),
                "events": events,
            });
            println!("{}", serde_json::to_string_pretty(&doc).expect("JSON"));
        }
        ReportFormat::Text => print!(
            "{}",
            render_detail(
                node.as_ref(),
                maas.as_ref(),
                job.as_ref(),
                view.as_ref(),
                &events,
                store.clock().now(),
            )
        ),
    }
    Ok(Exit::Success)
}

/// What `status NODE` found: an inventory row (live, or a deleted identity), or — for a node
/// whose onboarding failed before its record was made — its latest job.
enum Record {
    Node(uuid::Uuid),
    Job(Box<Job>),
}

/// Any record of `wanted` (a node id or a hostname): the live node, else the newest deleted
/// identity of that hostname, else its newest job.
async fn find_record(store: &Store, site: Option<&str>, wanted: &str) -> Result<Record, CliError> {
    let not_found = match find_node(store, site, wanted).await {
        Ok(node) => return Ok(Record::Node(node.id)),
        Err(err)
            if uuid::Uuid::parse_str(wanted).is_err() && err.class == super::ErrorClass::User =>
        {
            err
        }
        Err(err) => return Err(err),
    };
    if not_found.message.contains("several sites") {
        return Err(not_found);
    }
    let deleted = store
        .list_nodes(&NodeFilter {
            site: site.map(str::to_owned),
            hostname: Some(wanted.to_owned()),
            include_deleted: true,
            ..NodeFilter::default()
        })
        .await
        .map_err(store_error)?;
    if let Some(node) = deleted.iter().max_by_key(|n| n.updated_at) {
        return Ok(Record::Node(node.id));
    }
    let filter = JobFilter {
        site: site.map(str::to_owned),
        hostname: Some(wanted.to_owned()),
        ..JobFilter::default()
    };
    let mut jobs = Vec::new();
    for kind in crate::lifecycle::JobKind::ALL {
        jobs.extend(store.list_jobs(*kind, &filter).await.map_err(store_error)?);
    }
    match jobs.into_iter().max_by_key(|j| (j.requested_at, j.id)) {
        Some(job) => Ok(Record::Job(Box::new(job))),
        None => Err(not_found),
    }
}

fn render_detail(
    node: Option<&Node>,
    maas: Option<&MaasState>,
    job: Option<&Job>,
    view: Option<&ProvisionView>,
    events: &[StageEventRow],
    now: chrono::DateTime<chrono::Utc>,
) -> String {
    let mut lines: Vec<(String, String)> = Vec::new();
    let provision = view.map(|v| match v.target_provision_state {
        Some(target) => format!("{} (target {target})", v.provision_state),
        None => v.provision_state.to_string(),
    });
    let Some(node) = node else {
        // Only a job knows the node: its onboarding failed before the record was made.
        if let Some(job) = job {
            lines.push((
                "node".into(),
                format!("{} (site {})", job.hostname, job.site),
            ));
        }
        lines.push((
            "id".into(),
            "none: not in the inventory (its onboarding stopped before creating the record)".into(),
        ));
        if let Some(provision) = provision {
            lines.push(("provision".into(), provision));
        }
        job_lines(&mut lines, job, now);
        return detail_view(&lines, "recent events", events);
    };
    lines.extend([
        (
            "node".into(),
            format!("{} (site {})", node.hostname, node.site),
        ),
        ("id".into(), node.id.to_string()),
        ("state".into(), node.status.to_string()),
    ]);
    if let Some(provision) = provision {
        lines.push(("provision".into(), provision));
    }
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
    job_lines(&mut lines, job, now);
    detail_view(&lines, "recent events", events)
}

/// The job part of the detail view.
fn job_lines(
    lines: &mut Vec<(String, String)>,
    job: Option<&Job>,
    now: chrono::DateTime<chrono::Utc>,
) {
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
            if let Some(wait) = job.next_try(now) {
                lines.push((
                    "retry".into(),
                    format!(
                        "{} at {}, after {} failure{} in a row (`metalform jobs retry {}` does not wait)",
                        wait.text,
                        time(wait.at),
                        wait.failures,
                        if wait.failures == 1 { "" } else { "s" },
                        job.id
                    ),
                ));
            }
            if let Some(action) = &job.recommended_action {
                lines.push(("next action".into(), action.clone()));
            }
            lines.push(("updated".into(), time(job.updated_at)));
        }
    }
}
