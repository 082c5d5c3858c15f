//! Plan output (DESIGN.md §3, docs/plan.md): text like terraform's (a symbol per action, one
//! line per item, a summary line), the plan file's JSON, and markdown for pull-request comments.
//! Pure functions of the plan.

use std::fmt::Write as _;

use super::fresh::{describe_revision, short_id};
use super::types::{
    Action, BlockCause, Plan, PlanItem, SitePlan, Summary, UserDataApplies, UserDataChange,
};
use crate::sanitize::{markdown, terminal};

/// Text rendering options.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TextOptions {
    /// List unchanged items too (by default only their count per site is shown).
    pub show_unchanged: bool,
}

/// The symbol of an item: `+` onboard, `-/+` destructive onboard, `~/+` reimage, `-`
/// decommission, `x` retire, `^` reactivate, `--` prune, `>` resume, `~` rerun, `<=` adopt,
/// `@` waits (for a maintenance window, or for a failed job's next try), `!` blocked, `*`
/// unchanged with a note (drift, not onboarded on purpose, not in the manifests), `=`
/// unchanged and settled.
pub fn symbol(item: &PlanItem) -> &'static str {
    match &item.action {
        Action::Onboard if item.destructive => "-/+",
        Action::Onboard => "+",
        Action::Reimage { .. } => "~/+",
        Action::Decommission => "-",
        Action::Retire => "x",
        Action::Provision { .. } => "+",
        Action::Reactivate => "^",
        Action::Prune => "--",
        Action::Blocked {
            cause: BlockCause::MaintenanceWindow { .. } | BlockCause::RetryBackoff { .. },
        } => "@",
        Action::Resume { .. } | Action::ResumeDecommission { .. } => ">",
        Action::Rerun { .. } => "~",
        Action::Adopt { .. } => "<=",
        Action::Blocked { .. } => "!",
        Action::Noop if has_note(item) => "*",
        Action::Noop => "=",
    }
}

const LEGEND: &[(&str, &str)] = &[
    ("+", "onboard"),
    ("-/+", "onboard a machine in use: destroys its workload"),
    (
        "~/+",
        "reimage: release (erasing its disks) and redeploy, same node id",
    ),
    (
        "-",
        "decommission: release, power off and remove from the fleet",
    ),
    (
        "x",
        "retire: release and power off, identity kept as retired",
    ),
    (
        "^",
        "reactivate: clear the retired flag, clean and redeploy, same node id",
    ),
    (
        "--",
        "prune: removed from the manifests, decommissioned with its recorded release policy",
    ),
    (">", "resume a job where it stopped"),
    ("~", "rerun a failed job from the top"),
    ("<=", "adopt what MAAS and the agent report"),
    (
        "@",
        "waits for a maintenance window or a failed job's next try",
    ),
    ("!", "blocked: needs an operator"),
    ("*", "no change, but see the note"),
    ("=", "no change"),
];

/// Noop items worth a line: drift, a node not onboarded on purpose, one the manifests no
/// longer name, or one whose user-data would change.
fn has_note(item: &PlanItem) -> bool {
    !item.settled || item.user_data.is_some()
}

/// `user-data sha256:… -> sha256:… (…)`: which payload, and when it reaches the host.
fn user_data_heading(change: &UserDataChange) -> String {
    let when = match change.applies {
        UserDataApplies::ThisDeploy => "deployed by this item",
        UserDataApplies::NextDeploy => "reaches the host at its next reimage",
    };
    match &change.before {
        Some(before) => format!(
            "user-data {} -> {} ({when})",
            short_id(before),
            short_id(&change.after)
        ),
        None => format!("user-data {} (new, {when})", short_id(&change.after)),
    }
}

fn shown_in_text(item: &PlanItem, options: TextOptions) -> bool {
    item.action != Action::Noop || has_note(item) || options.show_unchanged
}

fn line_reason(item: &PlanItem) -> String {
    let mut reason = item.reason.clone();
    if let Some(drift) = &item.drift {
        let _ = write!(reason, " [drift: {drift}]");
    }
    reason
}

fn plural(n: usize, word: &str) -> String {
    format!("{n} {word}{}", if n == 1 { "" } else { "s" })
}

/// `Plan: 3 to onboard, 1 to resume; 2 blocked; 20 unchanged.` plus the destructive warning.
pub fn summary_line(summary: &Summary) -> String {
    let mut changes = Vec::new();
    for (n, what) in [
        (summary.onboard, "onboard"),
        (summary.reimage, "reimage"),
        (summary.decommission, "decommission"),
        (summary.retire, "retire"),
        (summary.provision, "provision"),
        (summary.reactivate, "reactivate"),
        (summary.prune, "prune"),
        (summary.resume, "resume"),
        (summary.rerun, "rerun"),
        (summary.adopt, "adopt"),
    ] {
        if n > 0 {
            changes.push(format!("{n} to {what}"));
        }
    }
    let mut parts = Vec::new();
    if changes.is_empty() {
        parts.push("no changes".to_owned());
    } else {
        parts.push(changes.join(", "));
    }
    if summary.blocked > 0 {
        parts.push(format!("{} blocked", summary.blocked));
    }
    parts.push(format!("{} unchanged", summary.noop));
    let mut line = format!("Plan: {}.", parts.join("; "));
    if summary.destructive > 0 {
        let items = match summary.destructive {
            1 => "1 item is".to_owned(),
            n => format!("{n} items are"),
        };
        let _ = write!(
            line,
            " {items} destructive: apply needs --allow-destructive."
        );
    }
    line
}

fn site_heading(site: &SitePlan) -> String {
    let mut heading = format!("site {}", site.site);
    if site.disabled {
        heading.push_str(" (disabled)");
    }
    if site.readable {
        let version = site
            .maas_version
            .as_deref()
            .map(|v| format!("MAAS {v}, "))
            .unwrap_or_else(|| "MAAS ".to_owned());
        let _ = write!(
            heading,
            ": {version}{} listed",
            plural(site.machines, "machine")
        );
        if site.unmanaged_machines > 0 {
            let _ = write!(
                heading,
                " ({} not in the manifests)",
                site.unmanaged_machines
            );
        }
    } else {
        let _ = write!(
            heading,
            ": MAAS could not be read: {}",
            site.error.as_deref().unwrap_or("unknown error")
        );
    }
    heading
}

/// The plan as text. Reasons carry what MAAS and the manifests said (hostnames, errors): any
/// control character in them is shown as an escape, never sent to the terminal.
pub fn render_text(plan: &Plan, options: TextOptions) -> String {
    terminal::escape(&text_unescaped(plan, options)).into_owned()
}

fn text_unescaped(plan: &Plan, options: TextOptions) -> String {
    let mut out = format!(
        "Plan {} of {}, store serial {}\n",
        short_id(&plan.id),
        describe_revision(&plan.fleet_revision),
        plan.store_serial
    );
    let shown: Vec<&PlanItem> = plan
        .items
        .iter()
        .filter(|i| shown_in_text(i, options))
        .collect();
    let used: Vec<&(&str, &str)> = LEGEND
        .iter()
        .filter(|(s, _)| shown.iter().any(|i| symbol(i) == *s))
        .collect();
    if !used.is_empty() {
        out.push_str("\nSymbols:\n");
        for (s, meaning) in used {
            let _ = writeln!(out, "  {s:>3}  {meaning}");
        }
    }
    let width = shown
        .iter()
        .map(|i| i.node.to_string().len())
        .max()
        .unwrap_or(0);
    let action_width = shown
        .iter()
        .map(|i| i.action.name().len())
        .max()
        .unwrap_or(0)
        .max(7);
    for site in &plan.sites {
        let _ = write!(out, "\n{}\n", site_heading(site));
        if let Some(guard) = site.guard.as_ref().filter(|_| site.readable) {
            let _ = writeln!(out, "  guard: {guard}");
        }
        let mut hidden = 0;
        for item in plan.items.iter().filter(|i| i.node.site == site.site) {
            if !shown_in_text(item, options) {
                hidden += 1;
                continue;
            }
            let _ = writeln!(
                out,
                "{:>5} {:<width$}  {:<action_width$}  {}",
                symbol(item),
                item.node.to_string(),
                item.action.name(),
                line_reason(item)
            );
            if let Some(change) = &item.user_data {
                let _ = writeln!(out, "{:8}{}", "", user_data_heading(change));
                for line in change.layers.iter().chain(&change.diff) {
                    let _ = writeln!(out, "{:10}{line}", "");
                }
            }
        }
        if hidden > 0 {
            let _ = writeln!(
                out,
                "        {} not shown",
                plural(hidden, "unchanged node")
            );
        }
    }
    let _ = write!(out, "\n{}\n", summary_line(&plan.summary));
    out
}

/// The plan as JSON: the plan file's document (docs/plan.md).
pub fn render_json(plan: &Plan) -> String {
    super::file::to_json(plan)
}

/// Room kept for the closing lines: a third of the cap, at most 1000 bytes.
fn reserve(max_bytes: usize) -> usize {
    (max_bytes / 3).min(1_000)
}

/// The plan as markdown for a pull-request comment, at most about `max_bytes` long: what does
/// not fit is counted, never silently dropped.
pub fn render_markdown(plan: &Plan, max_bytes: usize) -> String {
    let budget = max_bytes.saturating_sub(reserve(max_bytes)).max(1);
    let mut out = String::from("### metalform plan\n\n");
    let _ = writeln!(
        out,
        "Plan `{}` of `{}`, store serial {}\n",
        short_id(&plan.id),
        describe_revision(&plan.fleet_revision),
        plan.store_serial
    );
    // The decommission columns appear only in plans that have such items.
    let leaving = plan.summary.reimage + plan.summary.decommission + plan.summary.retire > 0;
    out.push_str("| site | MAAS | onboard | resume | rerun | adopt |");
    if leaving {
        out.push_str(" reimage | decommission | retire |");
    }
    out.push_str(" blocked | unchanged |\n|---|---|---:|---:|---:|---:|");
    if leaving {
        out.push_str("---:|---:|---:|");
    }
    out.push_str("---:|---:|\n");
    for site in &plan.sites {
        let maas = if site.readable {
            format!(
                "{}{}",
                site.maas_version
                    .as_deref()
                    .map(|v| format!("{v}, "))
                    .unwrap_or_default(),
                plural(site.machines, "machine")
            )
        } else {
            "⚠️ unreadable".to_owned()
        };
        let s = &site.summary;
        let _ = write!(
            out,
            "| {}{} | {} | {} | {} | {} | {} |",
            site.site,
            if site.disabled { " (disabled)" } else { "" },
            markdown::text(&maas),
            s.onboard,
            s.resume,
            s.rerun,
            s.adopt,
        );
        if leaving {
            let _ = write!(out, " {} | {} | {} |", s.reimage, s.decommission, s.retire);
        }
        let _ = writeln!(out, " {} | {} |", s.blocked, s.noop);
    }
    out.push('\n');
    for site in &plan.sites {
        if let Some(guard) = &site.guard {
            let _ = writeln!(out, "> ⚠️ **{}**: {}\n", site.site, markdown::text(guard));
        }
    }

    let mut left_out: Vec<String> = Vec::new();
    let mut section =
        |out: &mut String, title: String, header: &str, rows: Vec<String>, collapsed: bool| {
            if rows.is_empty() {
                return;
            }
            let (open, close) = if collapsed {
                (
                    format!("<details><summary>{title}</summary>\n\n{header}"),
                    "\n</details>\n\n".to_owned(),
                )
            } else {
                (format!("#### {title}\n\n{header}"), "\n".to_owned())
            };
            if out.len() + open.len() + rows[0].len() + close.len() > budget {
                left_out.push(format!("{} ({})", title, rows.len()));
                return;
            }
            out.push_str(&open);
            let mut skipped = 0;
            for row in &rows {
                if out.len() + row.len() + close.len() > budget {
                    skipped += 1;
                    continue;
                }
                out.push_str(row);
            }
            out.push_str(&close);
            if skipped > 0 {
                left_out.push(format!("{skipped} row(s) of {title}"));
            }
        };

    // One markdown table row: `| a | b | … |`.
    let row = |cells: &[String]| format!("| {} |\n", cells.join(" | "));
    let code = |text: &dyn std::fmt::Display| markdown::code(&text.to_string());
    let destructive: Vec<String> = plan
        .items
        .iter()
        .filter(|i| i.destructive)
        .map(|i| {
            row(&[
                code(&i.node),
                i.action.name().into(),
                markdown::text(&i.reason),
            ])
        })
        .collect();
    let blocked: Vec<String> = plan
        .items
        .iter()
        .filter(|i| matches!(i.action, Action::Blocked { .. }))
        .map(|i| row(&[code(&i.node), markdown::text(&i.reason)]))
        .collect();
    let changes: Vec<String> = plan
        .changes()
        .filter(|i| !i.destructive)
        .map(|i| {
            let action = i.action.name().into();
            row(&[
                code(&symbol(i)),
                code(&i.node),
                action,
                markdown::text(&i.reason),
            ])
        })
        .collect();
    let unchanged: Vec<String> = plan
        .items
        .iter()
        .filter(|i| i.action == Action::Noop)
        .map(|i| row(&[code(&i.node), markdown::text(&line_reason(i))]))
        .collect();

    let user_data: Vec<String> = plan
        .items
        .iter()
        .filter_map(|i| i.user_data.as_ref().map(|change| (i, change)))
        .map(|(i, change)| {
            let mut entry = format!(
                "{}: {}\n\n",
                code(&i.node),
                markdown::text(&user_data_heading(change))
            );
            for layer in &change.layers {
                let _ = writeln!(entry, "- {}", markdown::text(layer));
            }
            entry.push('\n');
            if !change.diff.is_empty() {
                entry.push_str(&markdown::code_block("diff", &change.diff));
                entry.push('\n');
            }
            entry
        })
        .collect();

    const NODE_ACTION_REASON: &str = "| node | action | reason |\n|---|---|---|\n";
    const NODE_REASON: &str = "| node | reason |\n|---|---|\n";
    const CHANGE: &str = "| | node | action | reason |\n|---|---|---|---|\n";
    let sections = [
        (
            "⚠️ Destructive: apply needs `--allow-destructive`",
            NODE_ACTION_REASON,
            destructive,
            false,
        ),
        ("⛔ Blocked: needs an operator", NODE_REASON, blocked, false),
        ("Changes", CHANGE, changes, false),
        ("Unchanged", NODE_REASON, unchanged, true),
        ("User-data (secrets redacted)", "", user_data, true),
    ];
    for (label, header, rows, collapsed) in sections {
        let title = format!("{label} ({})", rows.len());
        section(&mut out, title, header, rows, collapsed);
    }

    if !left_out.is_empty() {
        let _ = writeln!(
            out,
            "**Left out to stay under {max_bytes} bytes:** {}. Run `metalform plan` for the full plan.\n",
            left_out.join("; ")
        );
    }
    let _ = writeln!(out, "**{}**", summary_line(&plan.summary));
    out
}
