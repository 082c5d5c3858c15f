//! The host-side stages (seed 000 §5.2 DisableNode, DrainNode, CleanupStorage, ScrubGPU,
//! ValidateCleanNode, EnableNode; §5.4 ForceReleaseAllocations; §5.6 task catalog), done by the
//! node agent through typed tasks, and the coarse-state moves that take the node out of
//! scheduling and give it back (001 §3.2).

use serde_json::json;

use super::DecommissionCtx;
use crate::agent::TaskType;
use crate::lifecycle::{DecommissionMode, DecommissionStage, FailureClass, NodeState, Owner};
use crate::stages::{StageFailure, StageOutcome};
use crate::store::NodeTransition;

/// Run the stage's tasks; `Ok(done message)` once all succeeded, a wait while they run.
async fn tasks_stage(
    ctx: &mut DecommissionCtx<'_>,
    stage: DecommissionStage,
    tasks: &[(TaskType, serde_json::Value)],
    done: String,
) -> Result<StageOutcome, StageFailure> {
    // A node already `retired` when its removal starts was drained by its retirement (the
    // job's own move to retired comes after these stages), and its machine was released
    // with the agent's OS: there is no one to hand the tasks to.
    if matches!(
        stage,
        DecommissionStage::ForceReleaseAllocations | DecommissionStage::DrainNode
    ) && node_state(ctx).await? == NodeState::Retired
    {
        return Ok(StageOutcome::skipped(
            "node already retired: drained when it was retired",
        ));
    }
    match ctx.run_tasks(stage, tasks).await? {
        Some(waiting) => Ok(StageOutcome::wait(waiting)),
        None => Ok(StageOutcome::done(
            done,
            json!({"tasks": tasks.iter().map(|(t, _)| t.as_str()).collect::<Vec<_>>()}),
        )),
    }
}

/// Move the node under the executor's lease.
pub(super) async fn transition(
    ctx: &DecommissionCtx<'_>,
    to: NodeState,
    by: Owner,
    why: &str,
) -> Result<(), StageFailure> {
    let mut request = NodeTransition::new(to, by, ctx.env.actor.clone());
    request.reason = Some(format!(
        "decommission {} ({}): {why}",
        ctx.job.id,
        ctx.mode()
    ));
    request.fence = Some(ctx.fence.clone());
    ctx.env
        .store
        .transition_node(ctx.target.node_id, &request)
        .await
        .map_err(|e| StageFailure::store(&e))?;
    Ok(())
}

/// The node's inventory state now.
pub(super) async fn node_state(ctx: &DecommissionCtx<'_>) -> Result<NodeState, StageFailure> {
    Ok(ctx
        .env
        .store
        .node(ctx.target.node_id)
        .await
        .map_err(|e| StageFailure::store(&e))?
        .status)
}

/// DisableNode: out of scheduling. Modes that give the node back (soft reset, reimage) hold it
/// `quarantined`; the removing modes start the drain lifecycle (`draining`, 001 §3.3).
pub(super) async fn ensure_node_disabled(
    ctx: &mut DecommissionCtx<'_>,
) -> Result<StageOutcome, StageFailure> {
    if ctx.mode() == DecommissionMode::Reimage
        && ctx.facts.decommission.reimage_generation.is_none()
    {
        ctx.facts.decommission.reimage_generation = ctx
            .target
            .resolved
            .as_ref()
            .map(|t| t.node.reimage.generation);
    }
    let state = node_state(ctx).await?;
    let target = match ctx.mode() {
        DecommissionMode::FullDecommission | DecommissionMode::Retire => NodeState::Draining,
        _ => NodeState::Quarantined,
    };
    let already = match target {
        NodeState::Draining => matches!(
            state,
            NodeState::Draining | NodeState::Retired | NodeState::Removing
        ),
        _ => state == NodeState::Quarantined,
    };
    if already {
        return Ok(StageOutcome::skipped(format!(
            "node is {state}: already out of scheduling"
        )));
    }
    if !matches!(state, NodeState::Active | NodeState::Offline) && target == NodeState::Quarantined
    {
        return Err(StageFailure::ambiguity(
            "node_not_in_service",
            format!(
                "node is {state}; a {} needs it active or offline",
                ctx.mode()
            ),
        ));
    }
    transition(
        ctx,
        target,
        Owner::DecommissionWorkflow,
        "unavailable for new allocations",
    )
    .await?;
    Ok(StageOutcome::done(
        format!("node {state} -> {target}: no new allocations"),
        json!({"from": state, "to": target}),
    ))
}

/// ForceReleaseAllocations (full decommission): every allocation ends, users removed.
pub(super) async fn ensure_allocations_released(
    ctx: &mut DecommissionCtx<'_>,
) -> Result<StageOutcome, StageFailure> {
    tasks_stage(
        ctx,
        DecommissionStage::ForceReleaseAllocations,
        &[(TaskType::AllocationRevokeUser, json!({"force": true}))],
        "allocations force-released".into(),
    )
    .await
}

/// DrainNode: close terminals, revoke allocation users, drain.
pub(super) async fn ensure_node_drained(
    ctx: &mut DecommissionCtx<'_>,
) -> Result<StageOutcome, StageFailure> {
    tasks_stage(
        ctx,
        DecommissionStage::DrainNode,
        &[
            (TaskType::TerminalClose, json!({})),
            (TaskType::AllocationRevokeUser, json!({"force": false})),
            (TaskType::NodeDrain, json!({})),
        ],
        "terminals closed, users revoked, node drained".into(),
    )
    .await
}

/// CleanupStorage: local scratch and/or Weka, as the request says; `none` skips.
pub(super) async fn ensure_storage_clean(
    ctx: &mut DecommissionCtx<'_>,
) -> Result<StageOutcome, StageFailure> {
    let scope = ctx.storage_scope();
    if scope == "none" {
        return Ok(StageOutcome::skipped(
            "storage_cleanup none: nothing to clean",
        ));
    }
    tasks_stage(
        ctx,
        DecommissionStage::CleanupStorage,
        &[(TaskType::NodeStorageCleanup, json!({"scope": scope}))],
        format!("storage cleaned ({scope})"),
    )
    .await
}

/// ScrubGPU: reset GPU memory.
pub(super) async fn ensure_gpu_scrubbed(
    ctx: &mut DecommissionCtx<'_>,
) -> Result<StageOutcome, StageFailure> {
    tasks_stage(
        ctx,
        DecommissionStage::ScrubGpu,
        &[(TaskType::NodeGpuScrub, json!({}))],
        "GPU memory reset".into(),
    )
    .await
}

/// ValidateCleanNode: no tenant residue. Residue quarantines the node and stops for a human
/// (000 §5.2 "If validation fails: quarantine node, alert admin"); it is not retried.
pub(super) async fn ensure_node_clean(
    ctx: &mut DecommissionCtx<'_>,
) -> Result<StageOutcome, StageFailure> {
    let checked = ctx
        .run_tasks(
            DecommissionStage::ValidateCleanNode,
            &[(TaskType::NodeValidateClean, json!({}))],
        )
        .await;
    match checked {
        Ok(Some(waiting)) => Ok(StageOutcome::wait(waiting)),
        Ok(None) => Ok(StageOutcome::done(
            "no tenant users, processes, mounts or GPU memory left",
            json!({}),
        )),
        Err(failure) if failure.code == "agent_task_failed" => {
            let state = node_state(ctx).await?;
            if matches!(state, NodeState::Active | NodeState::Offline) {
                transition(
                    ctx,
                    NodeState::Quarantined,
                    Owner::DecommissionWorkflow,
                    "cleanup validation found tenant residue",
                )
                .await?;
            }
            Err(StageFailure::new(
                FailureClass::PostDeployConnectivityFailure,
                "validation_residue",
                format!(
                    "{}; the node is quarantined until an operator checks it",
                    failure.message
                ),
            )
            .details(*failure.details)
            .never_retry()
            .state(crate::lifecycle::JobState::FailedManualIntervention))
        }
        Err(other) => Err(other),
    }
}

/// EnableNode: the node goes back into scheduling when the job completes (the executor makes
/// the move in the completion's transaction); here the agent must be answering.
pub(super) async fn ensure_node_enabled(
    ctx: &mut DecommissionCtx<'_>,
) -> Result<StageOutcome, StageFailure> {
    let state = node_state(ctx).await?;
    if !matches!(
        state,
        NodeState::Quarantined | NodeState::Active | NodeState::Offline
    ) {
        return Err(StageFailure::ambiguity(
            "node_moved",
            format!("node is {state}: something else took it over during the decommission"),
        ));
    }
    if let Some(generation) = ctx.facts.decommission.reimage_generation {
        ctx.env
            .store
            .record_reimage_generation(ctx.target.node_id, generation, &ctx.env.actor)
            .await
            .map_err(|e| StageFailure::store(&e))?;
    }
    Ok(StageOutcome::complete(
        format!("node {state} -> active: available for allocations"),
        json!({"from": state}),
    ))
}
