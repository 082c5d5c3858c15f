//! Job services over every kind (seed 000 §4.2 and §5.7 read models, §4.9 and §5.8 recovery,
//! §4.12 audit, §4.15): what `metalform jobs` and the admin API's job routes call, once for all
//! kinds. What differs between kinds is data ([`KindInfo`]): the recovery actions it offers,
//! the facts its detail view shows, the extra fields of its JSON, a list column, and whether a
//! cancel is compensated with the store alone (answered at once) or by an executor.
//! `kinds::info` finds a kind's description.

use std::time::Duration;

use futures::future::BoxFuture;
use serde::Serialize;
use uuid::Uuid;

use super::lease::{LeaseRefusal, NodeLease};
use crate::lifecycle::{JobKind, JobState, RecoveryAction};
use crate::store::{Actor, Fence, Job, JobFilter, StageEventRow, Store, StoreError};

/// How many stage events a job's view carries (the most recent ones).
pub const EVENTS_SHOWN: i64 = 500;

/// A kind's cancel compensated with the store alone, under the node lease's fence.
pub type StoreCompensation =
    for<'a> fn(&'a Store, &'a Actor, &'a Job, &'a Fence) -> BoxFuture<'a, Result<(), StoreError>>;

/// A column of a job list: its header and its value for a job.
pub type Column = (&'static str, fn(&Job) -> String);

/// What the job services, the CLI and the API know of one kind.
pub struct KindInfo {
    pub kind: JobKind,
    /// `onboardings`, `decommissions`: the kind's collection (routes, JSON, CLI aliases).
    pub plural: &'static str,
    /// The recovery actions the kind offers (000 §4.9).
    pub actions: &'static [RecoveryAction],
    /// An example of a recovery reason, for the hint when one is missing.
    pub reason_example: &'static str,
    /// A column of the job list.
    pub column: Option<Column>,
    /// The kind's own lines of a job's detail view: its request (shown after the stage) and
    /// what its journal did (after the last observed state).
    pub request: fn(&Job) -> Vec<(&'static str, String)>,
    pub journal: fn(&Job) -> Vec<(&'static str, String)>,
    /// The kind's own fields of a job's JSON view.
    pub extras: fn(&Job) -> serde_json::Map<String, serde_json::Value>,
    /// The stages need the node's site and profile from the manifests (else some of the
    /// kind's jobs run for a node the manifests no longer have).
    pub needs_manifests: bool,
    /// Set when a cancel needs nothing but the store: it is compensated at once.
    pub cancel_with_store: Option<StoreCompensation>,
}

impl KindInfo {
    pub fn offers(&self, action: RecoveryAction) -> bool {
        self.actions.contains(&action)
    }
}

/// Why a service refused.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    #[error("{kind} `{id}` not found")]
    NotFound { kind: &'static str, id: String },
    /// The request conflicts with the node's or the job's state.
    #[error("{message}")]
    Conflict {
        reason: ConflictReason,
        message: String,
    },
    /// The manifests own this change: edit them instead.
    #[error("{message}")]
    OwnedByGit { file: String, message: String },
    #[error(transparent)]
    Store(StoreError),
}

/// The typed reason of a conflict (the API maps each to a 409 body).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConflictReason {
    /// The node already has an open job of this kind.
    JobOpen(JobKind),
    /// The node is not in a state this action works from.
    NodeState,
    /// The job is not in a state this action works from.
    JobState,
    /// The node is protected.
    Protected,
}

impl From<StoreError> for ServiceError {
    fn from(err: StoreError) -> Self {
        let conflict = |reason| ServiceError::Conflict {
            reason,
            message: err.to_string(),
        };
        match err {
            StoreError::NotFound { kind, id } => ServiceError::NotFound { kind, id },
            StoreError::JobOpen { kind, .. } => conflict(ConflictReason::JobOpen(
                kind.parse().unwrap_or(JobKind::Decommission),
            )),
            StoreError::Provision { .. } => conflict(ConflictReason::Protected),
            StoreError::Recovery { .. } => conflict(ConflictReason::JobState),
            StoreError::JobState { .. } | StoreError::Transition { .. } => {
                conflict(ConflictReason::NodeState)
            }
            other => ServiceError::Store(other),
        }
    }
}

/// One job with its stage events and the kind's own fields.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct JobView {
    pub job: Job,
    pub events: Vec<StageEventRow>,
    #[serde(flatten)]
    pub extras: serde_json::Map<String, serde_json::Value>,
}

/// Jobs of one kind, newest first.
pub async fn list(
    store: &Store,
    kind: JobKind,
    filter: &JobFilter,
) -> Result<Vec<Job>, StoreError> {
    store.list_jobs(kind, filter).await
}

/// Jobs of every kind, newest first.
pub async fn list_all(store: &Store, filter: &JobFilter) -> Result<Vec<Job>, StoreError> {
    let mut jobs = Vec::new();
    for kind in JobKind::ALL {
        jobs.extend(store.list_jobs(*kind, filter).await?);
    }
    jobs.sort_by(|a, b| b.requested_at.cmp(&a.requested_at).then(a.id.cmp(&b.id)));
    Ok(jobs)
}

/// One job of the kind with its recent stage events.
pub async fn show(store: &Store, info: &KindInfo, id: Uuid) -> Result<JobView, ServiceError> {
    let kind = info.kind;
    let job = store.job(kind, id).await?;
    let events = store.job_events(kind, job.id, EVENTS_SHOWN).await?;
    let extras = (info.extras)(&job);
    Ok(JobView {
        job,
        events,
        extras,
    })
}

/// Cancel a job whose kind compensates a cancel with the store alone (000 §4.9 `cancel`,
/// §5.7): audited, then compensated under the node lease; ends `cancelled`. A live executor
/// holding the node is waited for up to `lease_ttl` × 1.5; it stops at its next step since the
/// job moved.
pub async fn cancel_now(
    store: &Store,
    info: &KindInfo,
    job: Uuid,
    actor: &Actor,
    reason: Option<&str>,
    lease_ttl: Duration,
) -> Result<Job, ServiceError> {
    let kind = info.kind;
    let Some(compensate) = info.cancel_with_store else {
        return Err(ServiceError::Conflict {
            reason: ConflictReason::JobState,
            message: format!("a {kind} is cancelled by an executor, not by the store alone"),
        });
    };
    let moved = store
        .recover_job(kind, job, RecoveryAction::Cancel, actor, reason)
        .await?;
    let holder = format!("cancel:{}", super::default_holder());
    let lease = NodeLease::acquire_node(store, &moved.site, &moved.hostname, &holder, lease_ttl)
        .await
        .map_err(|refusal| match refusal {
            LeaseRefusal::Busy { holder, until } => ServiceError::Conflict {
                reason: ConflictReason::JobState,
                message: format!(
                    "{kind} {job} is compensating, but executor {holder} holds the node until {until}; it finishes the cancel"
                ),
            },
            LeaseRefusal::Store(err) => ServiceError::Store(err),
        })?;
    // The executor that held the node may have finished this very cancel before giving the
    // node up: the cancel asked for is done, not refused.
    let done = matches!(store.job(kind, job).await, Ok(now) if now.state == JobState::Cancelled);
    let result = if done {
        Ok(())
    } else {
        compensate(store, actor, &moved, &lease.fence()).await
    };
    lease.release().await;
    result?;
    Ok(store.job(kind, job).await?)
}
