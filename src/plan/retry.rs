//! Retry backoff in the plan (DESIGN.md §4; seed 000 §4.6, §4.9; issue 17): a job that failed
//! retryably is not retried before the next try its failure recorded — the item waits, saying
//! when — unless the node's manifests changed since it failed, which retries it at once.
//!
//! Pure: the clock is the planner's value (`PlanOptions::now`, else the snapshot's time); the
//! wait itself was computed when the job failed (`crate::backoff`, in the executor).

use crate::lifecycle::JobState;
use crate::model::{Fleet, Node, until};
use crate::observe::ObservedJob;

use super::planner::{Clock, Decision};
use super::types::{Action, BlockCause, node_spec_hash};

/// Hold a retry of `job` until its next try, or let it through (saying why it runs now).
pub(super) fn gate(
    fleet: &Fleet,
    node: &Node,
    job: Option<&ObservedJob>,
    decision: Decision,
    clock: &Clock,
) -> Decision {
    let Some(job) = job.filter(|j| j.state == JobState::FailedRetryable) else {
        return decision;
    };
    let retries = matches!(
        decision.action,
        Action::Resume { .. } | Action::Rerun { .. }
    ) && decision.action.job_id() == Some(job.id);
    let Some(next_try_at) = job.next_try_at.filter(|_| retries) else {
        return decision;
    };
    let failures = u32::try_from(job.retry_failures).unwrap_or(u32::MAX);
    let attempt = failures.saturating_add(1);
    let changed = job
        .retry_spec
        .as_ref()
        .is_some_and(|spec| Some(spec) != node_spec_hash(fleet, node).as_ref());
    if changed {
        return Decision {
            reason: format!(
                "{} (the node's manifests changed since it failed: retried now, its backoff starts again)",
                decision.reason
            ),
            ..decision
        };
    }
    if next_try_at <= clock.now {
        return Decision {
            reason: format!(
                "{} (attempt {attempt}, after {failures} failure{} in a row and its backoff)",
                decision.reason,
                if failures == 1 { "" } else { "s" }
            ),
            ..decision
        };
    }
    let would = decision.action.name().to_owned();
    Decision {
        node_id: decision.node_id,
        job_id: decision.job_id,
        system_id: decision.system_id.clone(),
        ..Decision::blocked(
            BlockCause::RetryBackoff {
                job_id: job.id,
                failures,
                next_try_at,
                would: would.clone(),
            },
            format!(
                "retry waits: next try in {} (attempt {attempt}); would {would}: {}",
                until(clock.now, next_try_at),
                decision.reason
            ),
        )
    }
}
