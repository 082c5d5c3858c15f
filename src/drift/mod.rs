//! Drift reconciliation between MAAS and the inventory (seed 000 §6: §6.3 the agent heartbeat
//! and the periodic MAAS reconciler, §6.4 the rules, §6.5 `node_maas_state`, §6.6 the admin
//! read models and resolve; seed 001 §3.3: the reconciler owns active ↔ offline and
//! active/offline → quarantined).
//!
//! - `rules`: pure — observed site × inventory × last agent contact × now × policy → findings.
//! - `pass`: the I/O edge — [`reconcile_site`] observes (or takes the daemon's observation),
//!   evaluates, records every node's MAAS state and carries out the auto-actions the
//!   [`DriftPolicy`] allows, under the node's lease and after re-reading the machine.
//! - `service`: [`list`], [`summary`], [`resolve`] for the API and the CLI.

mod pass;
mod policy;
mod rules;
mod service;

pub use pass::{
    ActionOutcome, ActionResult, DriftEnv, DriftError, DriftPassSummary, DriftReport,
    InventoryView, reconcile_observed_site, reconcile_site,
};
pub use policy::DriftPolicy;
pub use rules::{
    DriftAction, DriftMarking, Finding, Held, MaasView, MachineFacts, NodeInput, OpenJob, Rule,
    Severity, SiteEvaluation, count_by_rule, evaluate_node, evaluate_site,
};
pub use service::{
    DriftCounts, DriftEntry, DriftFilter, DriftSummary, Resolution, ResolveError, Resolved,
    WATCHED_STATES, list, resolve, summary,
};
