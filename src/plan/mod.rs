//! Plans (DESIGN.md §4; seed 000 §4.3–§4.16, §3.5, §6.4; seed 001 §4.3, §6.2): the pure planner
//! — (model, observed snapshot with the store's view) → [`Plan`] with a reason per item —, its
//! renderings, plan files and staleness checks.
//!
//! | file | what |
//! |---|---|
//! | `types` | [`Plan`], [`PlanItem`], [`Action`], [`BlockCause`], [`NodeTarget`] |
//! | `planner` | [`plan`]: pure, deterministic |
//! | `matching` | which MAAS machine is which node (000 §4.16, fail closed) |
//! | `guard` | the mass-destruction guard |
//! | `exits` | the way out of an inventory state onboarding must not touch (reactivate, reimage) |
//! | `prune` | nodes that left the manifests: left alone, or pruned under guards; policies to record |
//! | `windows` | maintenance windows: disruptive items wait for one |
//! | `retry` | retry backoff: a failed job is retried at its next try, or when its manifests change |
//! | `payload` | each node's user-data as a deploy would render it now, against the last render |
//! | `fresh` | [`check_fresh`]: what moved since a plan was made |
//! | `render` | text, JSON and markdown |
//! | `document` | the plan's JSON document (sites and profiles written once) |
//! | `file` | [`save`] and [`load`] of plan files (the only I/O here) |
//! | `trust` | plan-file signatures, and what differs from the plan made now |

mod document;
mod exits;
pub use document::content_id;
mod file;
mod fresh;
mod guard;
mod matching;
mod payload;
mod planner;
mod prune;
pub mod render;
mod retry;
mod trust;
mod types;
mod windows;

pub use file::{PlanFileError, from_json, load, save, to_json};
pub use fresh::{Moved, StalePlan, check_fresh, describe_revision, revision_id, short_id};
pub use planner::plan;
pub use prune::{PolicyUpdate, policy_updates};
pub use trust::{SIGNATURE_PREFIX, UntrustedPlan, differences, sign, verify};
pub use types::{
    Action, BlockCause, Candidate, MatchKey, NodeTarget, PLAN_FORMAT, PauseSource, PayloadSettings,
    Plan, PlanItem, PlanOptions, SitePlan, Summary, UserDataApplies, UserDataChange,
    node_spec_hash,
};
