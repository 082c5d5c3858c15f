//! The status pages as HTML (seed 001 §9 views): pure functions of `view.rs`'s data. maud
//! escapes every value interpolated with `(…)`; nothing here writes unescaped text from the
//! store, the manifests or MAAS.

use chrono::{DateTime, Utc};
use maud::{DOCTYPE, Markup, html};

use super::view::{
    FleetSnapshot, JobView, LatestPlan, NodeDetail, NodeQuery, NodeRow, SiteOverview,
    counted_states,
};
use crate::lifecycle::NodeState;
use crate::plan::render::{summary_line, symbol};
use crate::plan::{Action, describe_revision, short_id};

/// How many rows the node list shows at most (narrow the filters for the rest).
pub const MAX_ROWS: usize = 2_000;

/// Where the pages live.
pub const BASE: &str = "/ui";

fn time(t: DateTime<Utc>) -> String {
    t.format("%Y-%m-%d %H:%M:%SZ").to_string()
}

/// `42 s ago`, `5 min ago`, `3 h ago`, `2 d ago`.
pub fn age(now: DateTime<Utc>, then: DateTime<Utc>) -> String {
    let secs = (now - then).num_seconds().max(0);
    match secs {
        0..60 => format!("{secs} s ago"),
        60..3_600 => format!("{} min ago", secs / 60),
        3_600..86_400 => format!("{} h ago", secs / 3_600),
        _ => format!("{} d ago", secs / 86_400),
    }
}

fn when(now: DateTime<Utc>, then: Option<DateTime<Utc>>) -> Markup {
    match then {
        Some(t) => html! { time datetime=(t.to_rfc3339()) title=(time(t)) { (age(now, t)) } },
        None => html! { span.muted { "never" } },
    }
}

fn node_href(site: &str, hostname: &str) -> String {
    // A path segment: form encoding, with its `+` for space spelled `%20`.
    let enc = |s: &str| {
        url::form_urlencoded::byte_serialize(s.as_bytes())
            .collect::<String>()
            .replace('+', "%20")
    };
    format!("{BASE}/nodes/{}/{}", enc(site), enc(hostname))
}

fn nodes_href(query: &NodeQuery) -> String {
    let q = query.to_query_string();
    if q.is_empty() {
        format!("{BASE}/nodes")
    } else {
        format!("{BASE}/nodes?{q}")
    }
}

/// Which page the navigation marks as current.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Section {
    Overview,
    Nodes,
    Plan,
}

/// The page frame: navigation, the snapshot's time, the refresh interval (read by
/// status.js), and `body` as the part status.js swaps in place.
pub fn layout(
    title: &str,
    section: Option<Section>,
    taken_at: DateTime<Utc>,
    refresh_secs: u64,
    before: Markup,
    body: Markup,
) -> Markup {
    let nav = [
        (Section::Overview, "Overview", format!("{BASE}/")),
        (Section::Nodes, "Nodes", format!("{BASE}/nodes")),
        (Section::Plan, "Plan", format!("{BASE}/plan")),
    ];
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · metalform" }
                link rel="stylesheet" href={ (BASE) "/assets/status.css" };
                script src={ (BASE) "/assets/status.js" } defer {}
                noscript { meta http-equiv="refresh" content=(refresh_secs.max(1) * 2); }
            }
            body data-refresh=(refresh_secs) {
                header {
                    a.brand href={ (BASE) "/" } { "metalform" }
                    nav {
                        @for (s, label, href) in &nav {
                            a href=(href) aria-current=[(section == Some(*s)).then_some("page")] { (label) }
                        }
                    }
                    p #as-of .muted {
                        "as of " (time(taken_at))
                        @if refresh_secs > 0 { " · refreshes every " (refresh_secs) " s" }
                    }
                }
                (before)
                main #live { (body) }
            }
        }
    }
}

/// An error page (bad filter, unknown node, store unavailable, no access).
pub fn error_page(status: u16, message: &str, hint: Option<&str>) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                title { (status) " · metalform" }
                link rel="stylesheet" href={ (BASE) "/assets/status.css" };
            }
            body {
                header { a.brand href={ (BASE) "/" } { "metalform" } }
                main {
                    h1 { "Error " (status) }
                    p.error { (message) }
                    @if let Some(hint) = hint { p.hint { "hint: " (hint) } }
                }
            }
        }
    }
}

fn state_badge(label: &str) -> Markup {
    html! { span class={ "state state-" (label) } { (label) } }
}

fn revision_line(snapshot: &FleetSnapshot) -> Markup {
    html! {
        @match &snapshot.revision {
            Some((revision, at)) => p {
                "Fleet " code { (describe_revision(revision)) }
                ", accepted " (when(snapshot.taken_at, Some(*at)))
            },
            None => p.warn { "The daemon has not read a valid fleet from its source yet." },
        }
    }
}

/// The fleet overview: per site, the nodes by coarse state (001 §3.1), drift, failures, jobs in
/// progress and the last plan's summary.
pub fn overview(snapshot: &FleetSnapshot, refresh_secs: u64) -> Markup {
    let states: Vec<NodeState> = counted_states().collect();
    let body = html! {
        h1 { "Fleet" }
        (revision_line(snapshot))
        @if snapshot.sites.is_empty() {
            p.muted { "No sites yet." }
        } @else {
            div.scroll { table.overview {
                thead { tr {
                    th { "site" } th.num { "nodes" }
                    @for state in &states { th.num { (state.as_str().replace('_', " ")) } }
                    th.num { "not onboarded" } th.num { "provisioned" } th.num { "in progress" } th.num { "failed" } th.num { "drift" }
                    th { "plan" }
                } }
                tbody {
                    @for site in &snapshot.sites { (site_row(site, &states, snapshot)) }
                }
            } }
        }
    };
    layout(
        "Fleet",
        Some(Section::Overview),
        snapshot.taken_at,
        refresh_secs,
        html! {},
        body,
    )
}

fn count_cell(n: usize, query: NodeQuery) -> Markup {
    html! {
        @if n == 0 { td.num.zero { "0" } }
        @else { td.num { a href=(nodes_href(&query)) { (n) } } }
    }
}

fn site_row(site: &SiteOverview, states: &[NodeState], snapshot: &FleetSnapshot) -> Markup {
    let query = |f: &dyn Fn(&mut NodeQuery)| {
        let mut q = NodeQuery {
            site: Some(site.site.clone()),
            ..NodeQuery::default()
        };
        f(&mut q);
        q
    };
    let plan = snapshot
        .plans
        .iter()
        .find(|(name, _)| name.as_str() == site.site)
        .map(|(_, p)| p);
    html! {
        tr {
            th scope="row" {
                a href=(nodes_href(&query(&|_| {}))) { (site.site) }
                @if !site.in_manifests { " " span.muted { "(not in the manifests)" } }
            }
            td.num { (site.nodes) }
            @for state in states {
                (count_cell(site.by_state.get(state).copied().unwrap_or(0), query(&|q| q.state = Some(state.as_str().to_owned()))))
            }
            (count_cell(site.not_onboarded, query(&|q| q.state = Some(super::view::NOT_ONBOARDED.to_owned()))))
            (count_cell(site.provisioned, query(&|q| q.state = Some(super::view::PROVISIONED.to_owned()))))
            td.num { (site.in_progress) }
            (count_cell(site.failed, query(&|q| q.failed = true)))
            (count_cell(site.drifted, query(&|q| q.drift = true)))
            td {
                @match plan {
                    Some(p) => a href={ (BASE) "/plan#site-" (site.site) } { (summary_line(&p.plan.summary)) },
                    None => span.muted { "not planned yet" },
                }
            }
        }
    }
}

/// The filter form above the node list (outside the part that refreshes, so typing is kept).
pub fn node_filters(snapshot: &FleetSnapshot, query: &NodeQuery) -> Markup {
    let states: Vec<&str> = counted_states()
        .map(NodeState::as_str)
        .chain(super::view::OUTSIDE_INVENTORY)
        .collect();
    html! {
        form.filters method="get" action={ (BASE) "/nodes" } {
            label { "site " select name="site" {
                option value="" { "any" }
                @for site in &snapshot.sites {
                    option value=(site.site) selected[query.site.as_deref() == Some(site.site.as_str())] { (site.site) }
                }
            } }
            label { "state " select name="state" {
                option value="" { "any" }
                @for state in &states {
                    option value=(state) selected[query.state.as_deref() == Some(*state)] { (state) }
                }
            } }
            label { "group " select name="group" {
                option value="" { "any" }
                @for group in &snapshot.groups {
                    option value=(group) selected[query.group.as_deref() == Some(group.as_str())] { (group) }
                }
            } }
            label { input type="checkbox" name="drift" value="1" checked[query.drift]; " drift" }
            label { input type="checkbox" name="failed" value="1" checked[query.failed]; " failed" }
            button type="submit" { "Filter" }
            a href={ (BASE) "/nodes" } { "clear" }
        }
    }
}

/// The node list with its filters applied.
pub fn nodes(snapshot: &FleetSnapshot, query: &NodeQuery, refresh_secs: u64) -> Markup {
    let matching: Vec<&NodeRow> = snapshot.rows.iter().filter(|r| query.matches(r)).collect();
    let shown = matching.len().min(MAX_ROWS);
    let body = html! {
        h1 { "Nodes" }
        p #count {
            (matching.len()) " of " (snapshot.rows.len()) " nodes"
            @if shown < matching.len() { "; the first " (shown) " are shown: narrow the filters for the rest" }
        }
        @if matching.is_empty() {
            p.muted { "No node matches these filters." }
        } @else {
            div.scroll { table.nodes {
                thead { tr {
                    th { "site" } th { "hostname" } th { "state" } th { "group" } th { "MAAS" }
                    th { "job" } th { "drift" } th { "agent contact" } th { "flags" }
                } }
                tbody {
                    @for row in matching.iter().take(shown) { (node_row(row, snapshot.taken_at)) }
                }
            } }
        }
    };
    layout(
        "Nodes",
        Some(Section::Nodes),
        snapshot.taken_at,
        refresh_secs,
        node_filters(snapshot, query),
        body,
    )
}

fn flags(row: &NodeRow) -> Vec<&'static str> {
    let mut flags = Vec::new();
    if row.retired {
        flags.push("retired");
    }
    if row.protected {
        flags.push("protected");
    }
    if row.paused {
        flags.push("paused");
    }
    if !row.in_manifests {
        flags.push("not in the manifests");
    }
    flags
}

fn node_row(row: &NodeRow, now: DateTime<Utc>) -> Markup {
    html! {
        tr class={ "node" @if row.failed() { " failed" } @if row.drift.is_some() { " drifted" } } {
            td { (row.site) }
            td { a.host href=(node_href(&row.site, &row.hostname)) { (row.hostname) } }
            td { (state_badge(row.state_label())) }
            td { (row.group.as_deref().unwrap_or("")) }
            td {
                (row.maas_status.as_deref().unwrap_or(""))
                @if let Some(power) = &row.power_state { " " span.muted { "(power " (power) ")" } }
            }
            td {
                @if let Some(job) = &row.job {
                    (job.what()) ": " (state_badge(job.state.as_str())) " at " code { (job.stage) }
                    @if job.attempt > 1 { " (attempt " (job.attempt) ")" }
                }
            }
            td.drift { (row.drift.as_deref().unwrap_or("")) }
            td { @if row.state.is_some() { (when(now, row.agent_contact)) } }
            td.muted { (flags(row).join(", ")) }
        }
    }
}

/// One node: lifecycle, provision state, jobs with their stage timelines, drift, agent contact
/// and its recent audit events.
pub fn node(detail: &NodeDetail, refresh_secs: u64) -> Markup {
    let now = detail.taken_at;
    let title = format!("{}/{}", detail.site, detail.hostname);
    let body = html! {
        h1 { (detail.hostname) " " span.muted { "site " (detail.site) } }
        section.facts {
            h2 { "Lifecycle" }
            dl {
                dt { "state" }
                dd { (state_badge(super::view::state_label(detail.node.as_ref().map(|n| n.status), detail.provisioned))) }
                @if let Some(manifest) = &detail.manifest {
                    dt { "manifest" }
                    dd {
                        "lifecycle " code { (manifest.lifecycle) }
                        ", profile " code { (manifest.profile) }
                        @if let Some(group) = &manifest.group { ", group " code { (group) } }
                        ", sku " code { (manifest.sku) } ", BMC " code { (manifest.bmc.ipmi_ip) }
                        " (" (manifest.provenance) ")"
                    }
                } @else {
                    dt { "manifest" } dd.warn { "not in the manifests" }
                }
                @if let Some(node) = &detail.node {
                    dt { "node id" } dd { code { (node.id) } }
                    @if node.retired { dt { "retired" } dd { (node.retired_reason.as_deref().unwrap_or("no reason recorded")) } }
                    @if node.protected { dt { "protected" } dd { (node.protected_reason.as_deref().unwrap_or("yes")) } }
                    @if node.paused { dt { "paused" } dd { "the reconciler leaves this node alone" } }
                    @if let Some(host) = &node.host { dt { "host" } dd { code { (host) } } }
                    dt { "agent contact" } dd { (when(now, node.last_agent_contact_at)) }
                    dt { "updated" } dd { (when(now, Some(node.updated_at))) }
                }
            }
        }
        section.facts {
            h2 { "Provisioning" }
            dl {
                dt { "provision state" }
                dd { @match &detail.provision {
                    Some(view) => {
                        code { (view.state) }
                        @if let Some(target) = view.target { " → " code { (target) } }
                        @if view.maintenance { " " span.warn { "(maintenance)" } }
                    },
                    None => span.muted { "not observed yet" },
                } }
                @if let Some(maas) = &detail.maas {
                    dt { "MAAS" }
                    dd {
                        (maas.last_maas_status.as_deref().unwrap_or("unknown"))
                        " (power " (maas.last_maas_power_state.as_deref().unwrap_or("unknown")) ")"
                        ", system " code { (maas.maas_system_id) }
                        @if !maas.last_maas_ips.is_empty() { ", " (maas.last_maas_ips.join(" ")) }
                    }
                    dt { "observed" } dd { (when(now, maas.last_reconciled_at)) }
                }
            }
        }
        section #drift {
            h2 { "Drift" }
            @match &detail.maas {
                Some(maas) if maas.drift_detected => {
                    p.warn { "Open drift" }
                    (details_list(&maas.drift_details))
                },
                Some(maas) if maas.drift_details.get("rule").is_some() => {
                    p { "Resolved " (when(now, maas.drift_resolved_at)) }
                    (details_list(&maas.drift_details))
                },
                _ => p.muted { "No drift recorded." },
            }
        }
        section #jobs {
            h2 { "Jobs" }
            @if detail.jobs.is_empty() {
                p.muted { "No job yet." }
            }
            @for (i, view) in detail.jobs.iter().enumerate() {
                (job_section(view, i == 0, now))
            }
        }
        section #events {
            h2 { "Recent events" }
            @if detail.audit.is_empty() {
                p.muted { "No event recorded." }
            } @else {
                table {
                    thead { tr { th { "when" } th { "action" } th { "by" } th { "from → to" } th { "reason" } } }
                    tbody {
                        @for row in &detail.audit {
                            tr {
                                td { (when(now, Some(row.at))) }
                                td { code { (row.action) } }
                                td { (row.actor) " " span.muted { "(" (row.role) ")" } }
                                td {
                                    (row.prior_state.as_deref().unwrap_or(""))
                                    @if row.expected_target.is_some() { " → " (row.expected_target.as_deref().unwrap_or("")) }
                                }
                                td { (row.reason.as_deref().unwrap_or("")) }
                            }
                        }
                    }
                }
            }
        }
    };
    layout(&title, None, now, refresh_secs, html! {}, body)
}

fn details_list(details: &serde_json::Value) -> Markup {
    let entries: Vec<(String, String)> = match details.as_object() {
        Some(map) => map
            .iter()
            .map(|(k, v)| {
                let text = match v {
                    serde_json::Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                (k.clone(), text)
            })
            .collect(),
        None => vec![("details".into(), details.to_string())],
    };
    html! {
        dl.details { @for (k, v) in &entries { dt { (k) } dd { (v) } } }
    }
}

fn job_section(view: &JobView, current: bool, now: DateTime<Utc>) -> Markup {
    let job = &view.job;
    let what = match job.mode() {
        Some(mode) => format!("{} ({mode})", job.kind),
        None => job.kind.to_string(),
    };
    html! {
        details.job open[current || job.state.is_open()] {
            summary {
                (what) " " (state_badge(job.state.as_str()))
                " at " code { (job.stage) }
                " · requested " (when(now, Some(job.requested_at)))
                @if let Some(by) = &job.requested_by { " by " (by) }
            }
            dl {
                dt { "job id" } dd { code { (job.id) } }
                dt { "attempt" } dd { (job.attempt) }
                @if let Some(class) = job.failure_class { dt { "failure class" } dd { (class) } }
                @if let Some(message) = &job.error_message {
                    dt { "error" } dd.error {
                        @if let Some(code) = &job.error_code { code { (code) } ": " }
                        (message)
                    }
                }
                @if let Some(action) = &job.recommended_action { dt { "next action" } dd { (action) } }
                @if let Some(at) = job.completed_at { dt { "ended" } dd { (when(now, Some(at))) } }
            }
            @if !view.steps.is_empty() {
                ol.timeline {
                    @for step in &view.steps {
                        li class={ "step step-" (step.status.as_str()) @if step.stage == job.stage { " current" } } {
                            span.stage { (step.stage) }
                            " " span.status { (step.status.as_str()) }
                            @if step.attempts > 1 { " " span.muted { "×" (step.attempts) } }
                            @if let Some(at) = step.last_at { " " (when(now, Some(at))) }
                            @if let Some(message) = &step.message { " " span.message { (message) } }
                        }
                    }
                }
            }
        }
    }
}

/// The daemon's last plan of each site, with the age of the MAAS observation it used.
pub fn plan(snapshot: &FleetSnapshot, refresh_secs: u64) -> Markup {
    let now = snapshot.taken_at;
    let body = html! {
        h1 { "Plan" }
        (revision_line(snapshot))
        @if snapshot.plans.is_empty() {
            p.muted { "No site has been planned yet: the daemon plans each site at its reconcile." }
        }
        @for (site, latest) in &snapshot.plans { (site_plan(site.as_str(), latest, now)) }
    };
    layout(
        "Plan",
        Some(Section::Plan),
        now,
        refresh_secs,
        html! {},
        body,
    )
}

fn site_plan(site: &str, latest: &LatestPlan, now: DateTime<Utc>) -> Markup {
    let plan = &latest.plan;
    let shown: Vec<_> = plan
        .items
        .iter()
        .filter(|i| i.action != Action::Noop || !i.settled)
        .collect();
    let settled = plan.items.len() - shown.len();
    html! {
        section.site-plan id={ "site-" (site) } {
            h2 { "site " (site) }
            p {
                "Plan " code { (short_id(&plan.id)) } " of " code { (describe_revision(&plan.fleet_revision)) }
                "; MAAS observed " (when(now, Some(latest.observed_at)))
            }
            @for s in &plan.sites {
                @if !s.readable { p.warn { "MAAS could not be read: " (s.error.as_deref().unwrap_or("unknown error")) } }
                @if let Some(guard) = &s.guard { p.warn { (guard) } }
            }
            p.summary { strong { (summary_line(&plan.summary)) } }
            @if !shown.is_empty() {
                table.plan {
                    thead { tr { th { "" } th { "node" } th { "action" } th { "reason" } } }
                    tbody {
                        @for item in &shown {
                            tr class={ "item" @if item.destructive { " destructive" } } {
                                td.symbol { code { (symbol(item)) } }
                                td { a href=(node_href(item.node.site.as_str(), item.node.hostname.as_str())) { (item.node.hostname) } }
                                td { (item.action.name()) @if item.destructive { " " span.warn { "destructive" } } }
                                td {
                                    (item.reason)
                                    @if let Some(drift) = &item.drift { " " span.drift { "[drift: " (drift) "]" } }
                                }
                            }
                        }
                    }
                }
            }
            @if settled > 0 { p.muted { (settled) " node(s) in service as the manifests want them." } }
        }
    }
}
