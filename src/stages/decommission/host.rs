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
    if let Some(why) = no_agent_there(ctx).await? {
        return Ok(StageOutcome::skipped(why));
    }
    match ctx.run_tasks(stage, tasks).await? {
        Some(waiting) => Ok(StageOutcome::wait(waiting)),
        None => Ok(StageOutcome::done(
            done,
            json!({"tasks": tasks.iter().map(|(t, _)| t.as_str()).collect::<Vec<_>>()}),
        )),
    }
}

/// Why no agent can take the tasks of a mode that releases the machine anyway: the node is
/// offline (its agent stopped polling, 000 §6.3), or quarantined because its machine left
/// Deployed (released, deleted or failed out of band, 000 §6.4) so the OS the agent ran in is
/// gone. Waiting would only end in `agent_unreachable` — a dead end for "offline ->
/// decommission" —; the release that follows erases the machine. Soft resets and storage
/// cleanups leave the machine alone and always need the agent.
async fn no_agent_there(ctx: &DecommissionCtx<'_>) -> Result<Option<String>, StageFailure> {
    if !ctx.mode().releases_machine() {
        return Ok(None);
    }
    // DisableNode moved an offline or quarantined node on (to draining or quarantined): what
    // it was then says whether an agent runs there.
    let state = match ctx.facts.decommission.disabled_from {
        Some(from) => from,
        None => node_state(ctx).await?,
    };
    match state {
        NodeState::Offline => {
            return Ok(Some(
                "node is offline: its agent is not polling, so nobody takes the tasks; the release cleans the machine".into(),
            ));
        }
        NodeState::Quarantined => {}
        _ => return Ok(None),
    }
    let observed = ctx
        .env
        .store
        .maas_state(ctx.target.node_id)
        .await
        .map_err(|e| StageFailure::store(&e))?;
    let status = observed.as_ref().and_then(|m| m.last_maas_status.clone());
    Ok(match status.as_deref() {
        Some("Deployed") => None,
        Some("") | None if observed.is_some() => Some(format!(
            "node is {state} and its machine is absent from MAAS: no agent runs there; the release cleans it"
        )),
        None => None,
        Some(other) => Some(format!(
            "node is {state} and MAAS shows its machine {other}: no agent runs there; the release cleans it"
        )),
    })
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
    if matches!(
        ctx.mode(),
        DecommissionMode::Reimage | DecommissionMode::Reactivate
    ) && ctx.facts.decommission.reimage_generation.is_none()
    {
        ctx.facts.decommission.reimage_generation = ctx
            .target
            .resolved
            .as_ref()
            .map(|t| t.node.reimage.generation);
    }
    let state = node_state(ctx).await?;
    if ctx.mode() == DecommissionMode::Reactivate && state == NodeState::Retired {
        return leave_retirement(ctx).await;
    }
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
    ctx.facts.decommission.disabled_from = Some(state);
    Ok(StageOutcome::done(
        format!("node {state} -> {target}: no new allocations"),
        json!({"from": state, "to": target}),
    ))
}

/// A reactivation's DisableNode for a retired node: out of retirement and at once out of
/// scheduling (`retired -> active -> quarantined` in one transaction, 001 §3.2: retired ->
/// active is the operator's reactivation, which the manifest change asked for).
async fn leave_retirement(ctx: &mut DecommissionCtx<'_>) -> Result<StageOutcome, StageFailure> {
    let reason = format!(
        "decommission {} (reactivate): lifecycle active in the manifests",
        ctx.job.id
    );
    let request = |to, by| {
        let mut request = NodeTransition::new(to, by, ctx.env.actor.clone());
        request.reason = Some(reason.clone());
        request.fence = Some(ctx.fence.clone());
        request
    };
    ctx.env
        .store
        .transition_node_through(
            ctx.target.node_id,
            &[
                request(NodeState::Active, Owner::Operator),
                request(NodeState::Quarantined, Owner::DecommissionWorkflow),
            ],
        )
        .await
        .map_err(|e| StageFailure::store(&e))?;
    Ok(StageOutcome::done(
        "node retired -> active -> quarantined: back from retirement, out of scheduling until redeployed",
        json!({"from": NodeState::Retired, "to": NodeState::Quarantined}),
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
