//! Plan staleness (DESIGN.md §4: "`apply PLANFILE` refuses a stale plan"). A plan is fresh
//! when the fleet revision, the observed snapshot (per part: each site's MAAS, the inventory,
//! the jobs) and the store serial are all what they were when it was made. A stale plan says
//! exactly what moved and what to do.

use std::collections::BTreeSet;
use std::fmt;

use crate::model::Revision;
use crate::observe::Snapshot;

use super::types::Plan;

/// The full, comparable id of a fleet revision: `commit:<40 hex>` for a git commit, the
/// content hash (`sha256:<hex>`) for files on disk.
pub fn revision_id(revision: &Revision) -> String {
    match revision {
        Revision::Commit { id } => format!("commit:{id}"),
        Revision::WorkingTree { content_hash } => content_hash.clone(),
    }
}

/// A revision id as people read it: `commit 0123456789ab`, `working tree sha256:0123456789ab`.
pub fn describe_revision(id: &str) -> String {
    match id.strip_prefix("commit:") {
        Some(commit) => format!("commit {}", &commit[..commit.len().min(12)]),
        None => {
            let hash = id.strip_prefix("sha256:").unwrap_or(id);
            format!("working tree sha256:{}", &hash[..hash.len().min(12)])
        }
    }
}

/// One thing that moved since the plan was made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Moved {
    FleetRevision {
        planned: String,
        current: String,
    },
    /// A part of the observed snapshot changed: `site/<name>`, `inventory` or `jobs`.
    Observed {
        part: String,
    },
    /// The snapshot now covers a site the plan did not, or no longer one it did.
    SiteScope {
        part: String,
        planned: bool,
    },
    StoreSerial {
        planned: i64,
        current: i64,
    },
    /// The latest job now ran under another plan than the one the plan names as its parent.
    Parent {
        planned: Option<String>,
        current: Option<String>,
    },
}

impl fmt::Display for Moved {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Moved::FleetRevision { planned, current } => write!(
                f,
                "the fleet moved from {} to {}",
                describe_revision(planned),
                describe_revision(current)
            ),
            Moved::Observed { part } => match part.strip_prefix("site/") {
                Some(site) => write!(f, "MAAS of site {site} changed"),
                None => write!(f, "the {part} changed"),
            },
            Moved::SiteScope { part, planned } => write!(
                f,
                "{} {} observed now",
                part.strip_prefix("site/").unwrap_or(part),
                if *planned {
                    "was planned but is not"
                } else {
                    "was not planned but is"
                }
            ),
            Moved::StoreSerial { planned, current } => {
                write!(f, "the store changed (serial {planned} → {current})")
            }
            Moved::Parent { planned, current } => {
                let followed = planned.as_deref().map_or_else(
                    || "no earlier plan".to_owned(),
                    |id| format!("plan {}", short_id(id)),
                );
                match current {
                    Some(current) => write!(
                        f,
                        "plan {} ran since (this plan followed {followed})",
                        short_id(current)
                    ),
                    None => write!(
                        f,
                        "no job records the plan this one followed ({followed}) any more"
                    ),
                }
            }
        }
    }
}

/// A plan that no longer describes the world.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct StalePlan {
    pub plan_id: String,
    /// Everything that moved, in the order: fleet, snapshot parts, parent, store.
    pub moved: Vec<Moved>,
}

impl fmt::Display for StalePlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let moved: Vec<String> = self.moved.iter().map(ToString::to_string).collect();
        write!(
            f,
            "the plan {} is stale: {}",
            short_id(&self.plan_id),
            moved.join("; ")
        )
    }
}

impl StalePlan {
    /// What to do.
    pub fn hint(&self) -> &'static str {
        "make a new plan (`metalform plan --out PLANFILE`), review it, and apply that file"
    }
}

/// `sha256:0123456789ab`.
pub fn short_id(id: &str) -> String {
    let hash = id.strip_prefix("sha256:").unwrap_or(id);
    format!("sha256:{}", &hash[..hash.len().min(12)])
}

/// Is `plan` still what planning now would start from? `fleet_revision` is
/// [`revision_id`] of the fleet read now, `snapshot` an observation made now (of the plan's
/// sites at least; other sites are not compared), `store_serial` the store's serial read now.
pub fn check_fresh(
    plan: &Plan,
    fleet_revision: &str,
    snapshot: &Snapshot,
    store_serial: i64,
) -> Result<(), StalePlan> {
    let mut moved = Vec::new();
    if plan.fleet_revision != fleet_revision {
        moved.push(Moved::FleetRevision {
            planned: plan.fleet_revision.clone(),
            current: fleet_revision.to_owned(),
        });
    }
    let now = snapshot.fingerprint_parts_of(&plan.site_filter());
    let parts: BTreeSet<&String> = plan.snapshot_parts.keys().chain(now.keys()).collect();
    for part in parts {
        match (plan.snapshot_parts.get(part), now.get(part)) {
            (Some(a), Some(b)) if a != b => moved.push(Moved::Observed { part: part.clone() }),
            (Some(_), None) => moved.push(Moved::SiteScope {
                part: part.clone(),
                planned: true,
            }),
            (None, Some(_)) => moved.push(Moved::SiteScope {
                part: part.clone(),
                planned: false,
            }),
            _ => {}
        }
    }
    let parent = super::planner::parent_of(snapshot);
    if plan.parent != parent {
        moved.push(Moved::Parent {
            planned: plan.parent.clone(),
            current: parent,
        });
    }
    if plan.store_serial != store_serial {
        moved.push(Moved::StoreSerial {
            planned: plan.store_serial,
            current: store_serial,
        });
    }
    if moved.is_empty() {
        Ok(())
    } else {
        Err(StalePlan {
            plan_id: plan.id.clone(),
            moved,
        })
    }
}
