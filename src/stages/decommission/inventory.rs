//! The inventory stages of a full decommission and a retirement (seed 000 §5.4
//! RetireGPUaaSNode, RemoveGPUaaSNodeRecord, CleanupSecrets; 001 §3.2 draining -> retired ->
//! removing -> deleted, removing -> retired on uninstall failure).

use serde_json::json;

use super::DecommissionCtx;
use super::host::{node_state, transition};
use crate::agent::TaskType;
use crate::lifecycle::{DecommissionStage, FailureClass, JobState, NodeState, Owner};
use crate::stages::{StageFailure, StageOutcome};

/// RetireGPUaaSNode: draining -> retired.
pub(super) async fn ensure_node_retired(
    ctx: &mut DecommissionCtx<'_>,
) -> Result<StageOutcome, StageFailure> {
    match node_state(ctx).await? {
        NodeState::Retired | NodeState::Removing => {
            Ok(StageOutcome::skipped("node already retired"))
        }
        NodeState::Draining => {
            transition(
                ctx,
                NodeState::Retired,
                Owner::DecommissionWorkflow,
                "drained, released and powered off",
            )
            .await?;
            Ok(StageOutcome::done("node draining -> retired", json!({})))
        }
        other => Err(StageFailure::ambiguity(
            "node_not_draining",
            format!("node is {other}, not draining: something else moved it"),
        )),
    }
}

/// RemoveGPUaaSNodeRecord: retired -> removing, then the agent uninstalls itself. When this job
/// released the machine, or found it not deployed (released by an earlier retirement), the
/// agent went with the OS and there is nothing to uninstall.
/// An uninstall failure puts the node back to retired (identity preserved, 001 §5.3).
pub(super) async fn ensure_node_record_removed(
    ctx: &mut DecommissionCtx<'_>,
) -> Result<StageOutcome, StageFailure> {
    let state = node_state(ctx).await?;
    match state {
        NodeState::Retired => {
            transition(
                ctx,
                NodeState::Removing,
                Owner::DecommissionWorkflow,
                "removing the node record",
            )
            .await?;
        }
        NodeState::Removing => {}
        other => {
            return Err(StageFailure::ambiguity(
                "node_not_retired",
                format!("node is {other}, not retired"),
            ));
        }
    }
    if ctx.facts.release().is_some_and(|r| r.received) {
        return Ok(StageOutcome::done(
            "node removing; no uninstall: the agent went with the OS this job released",
            json!({"uninstall": "not needed"}),
        ));
    }
    if ctx.facts.decommission.started_deployed == Some(false) {
        return Ok(StageOutcome::done(
            "node removing; no uninstall: the machine was not deployed, so no agent runs there",
            json!({"uninstall": "not needed"}),
        ));
    }
    match ctx
        .run_tasks(
            DecommissionStage::RemoveGpuaasNodeRecord,
            &[(TaskType::NodeUninstall, json!({}))],
        )
        .await
    {
        Ok(Some(waiting)) => Ok(StageOutcome::wait(waiting)),
        Ok(None) => Ok(StageOutcome::done(
            "node removing; the agent uninstalled itself",
            json!({"uninstall": "succeeded"}),
        )),
        Err(failure) => {
            transition(
                ctx,
                NodeState::Retired,
                Owner::DecommissionWorkflow,
                "uninstall failed: the identity stays retired",
            )
            .await?;
            Err(StageFailure::new(
                FailureClass::PostDeployConnectivityFailure,
                "uninstall_failed",
                format!("{}; the node is back to retired", failure.message),
            )
            .details(*failure.details)
            .never_retry()
            .state(JobState::FailedRetryable))
        }
    }
}

/// CleanupSecrets: the node's agent tokens revoked, unused enrollment tokens expired, open
/// agent tasks closed. A failure becomes a follow-up note (000 §5.8: "may complete with
/// follow-up cleanup task recorded").
pub(super) async fn ensure_secrets_cleaned(
    ctx: &mut DecommissionCtx<'_>,
) -> Result<StageOutcome, StageFailure> {
    let store = &ctx.env.store;
    let node = ctx.target.node_id;
    let result = async {
        let revoked = store.revoke_agent_credentials(node).await?;
        let expired = store.expire_enrollment_tokens(node, &ctx.fence).await?;
        let closed = store
            .close_open_tasks(node, "the node was decommissioned")
            .await?;
        Ok::<_, crate::store::StoreError>((revoked, expired, closed))
    }
    .await;
    match result {
        Ok((revoked, expired, closed)) => Ok(StageOutcome::done(
            format!(
                "{revoked} agent token(s) revoked, {expired} enrollment token(s) expired, {closed} open task(s) closed"
            ),
            json!({"agent_tokens": revoked, "enrollment_tokens": expired, "tasks": closed}),
        )),
        Err(err) if err.is_transient() => Err(StageFailure::store(&err)),
        Err(err) => {
            let note = format!("clean up the secrets of node {node}: {err}");
            if !ctx.facts.decommission.follow_ups.contains(&note) {
                ctx.facts.decommission.follow_ups.push(note.clone());
            }
            Ok(StageOutcome::done(
                format!("secret cleanup failed (follow-up recorded): {err}"),
                json!({"follow_up": note}),
            ))
        }
    }
}
