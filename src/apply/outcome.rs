//! What the engine reports: where each node's work ended ([`NodeOutcome`], [`NodeResult`]) and
//! a run's [`ApplyReport`] (DESIGN.md §4; the CLI's result table, the daemon's metrics).

use serde::Serialize;
use uuid::Uuid;

use super::progress::ProgressStatus;
use crate::lifecycle::{FailureClass, JobState};

/// Where one node ended up.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum NodeOutcome {
    /// The job completed (or was reconciled): the node is active.
    Converged { state: JobState },
    /// The job failed; its state says whether an automatic path remains.
    Failed {
        state: JobState,
        class: FailureClass,
        code: String,
        message: String,
    },
    /// Nothing was done (a live executor holds the node, a failed job awaits an operator).
    Left { reason: String },
    /// This executor stopped working on the node (lease taken over, store unusable).
    Aborted { reason: String },
    /// Handed to other workers: a Redfish provisioning job queued for the provisioning
    /// workers (the daemon), which serve its task ISO and its status webhook.
    Queued { reason: String },
}

impl NodeOutcome {
    /// The node's last progress line: its status and message.
    pub(crate) fn progress(&self) -> (ProgressStatus, String) {
        match self {
            NodeOutcome::Converged { state } => (ProgressStatus::Converged, format!("job {state}")),
            NodeOutcome::Failed {
                state,
                class,
                code,
                message,
            } => (
                ProgressStatus::Failed,
                format!("{state} ({class}, {code}): {message}"),
            ),
            NodeOutcome::Left { reason } | NodeOutcome::Aborted { reason } => {
                (ProgressStatus::Left, reason.clone())
            }
            NodeOutcome::Queued { reason } => (ProgressStatus::Begin, reason.clone()),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NodeResult {
    /// `site/hostname`.
    pub node: String,
    pub job_id: Option<Uuid>,
    #[serde(flatten)]
    pub outcome: NodeOutcome,
}

/// Every node's result, ordered by site and hostname.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ApplyReport {
    pub results: Vec<NodeResult>,
}

impl ApplyReport {
    pub fn converged(&self) -> usize {
        self.count(|o| matches!(o, NodeOutcome::Converged { .. }))
    }

    pub fn failed(&self) -> usize {
        self.count(|o| matches!(o, NodeOutcome::Failed { .. }))
    }

    pub fn not_run(&self) -> usize {
        self.count(|o| matches!(o, NodeOutcome::Left { .. } | NodeOutcome::Aborted { .. }))
    }

    fn count(&self, f: impl Fn(&NodeOutcome) -> bool) -> usize {
        self.results.iter().filter(|r| f(&r.outcome)).count()
    }

    /// Every node converged.
    pub fn all_converged(&self) -> bool {
        self.converged() == self.results.len()
    }

    pub fn result(&self, node: &str) -> Option<&NodeResult> {
        self.results.iter().find(|r| r.node == node)
    }
}
