//! `wait_for_agent_enrollment` (seed 000 §4.3, §4.6 "Regenerate enrollment token, wait again.
//! Max 2 attempts ... Mark failed_enrollment. Do NOT release from MAAS", §4.13 "adopt a late
//! enrollment"; 001 §3.3 enrolling -> active "after successful agent enrollment and health
//! checks").
//!
//! The node becomes active here, after the enrollment endpoint recorded the agent's contact
//! and the health checks pass: MAAS still has the machine Deployed and, when the profile
//! requires it, hardware sync is healthy. A refresh extends the expiry of the token the host
//! already has (docs/contracts.md §5): the host cannot learn a new one without a redeploy.

use crate::lifecycle::MaasStatus;
use serde_json::json;

use super::StageCtx;
use crate::lifecycle::PolicyTimeout;
use crate::stages::{StageFailure, StageOutcome};

pub(super) async fn ensure_agent_enrolled(
    ctx: &mut StageCtx<'_>,
) -> Result<StageOutcome, StageFailure> {
    let node_id = ctx.job.node_id.or(ctx.facts.node_id).ok_or_else(|| {
        StageFailure::ambiguity(
            "no_node_record",
            "the journal has no node record for this onboarding; rerun it from the top",
        )
    })?;
    let store = &ctx.env.store;
    let machine = ctx.machine().await?;
    if machine.status != MaasStatus::Deployed {
        return Err(StageFailure::ambiguity(
            "machine_left_deployed",
            format!(
                "{} is {} while its agent was expected to enroll (changed out of band)",
                machine.system_id,
                machine.status_label()
            ),
        ));
    }
    let enrollment = store
        .agent_enrollment(node_id)
        .await
        .map_err(|e| StageFailure::store(&e))?;
    // This machine's agent, since this round's deploy (an earlier round's enrollment does not
    // count for a redeployed host).
    let enrollment = enrollment.filter(|e| {
        e.system_id == machine.system_id
            && ctx
                .facts
                .deploy
                .as_ref()
                .is_none_or(|d| e.enrolled_at >= d.intent_at)
    });
    if let Some(enrolled_at) = enrollment.as_ref().map(|e| e.enrolled_at) {
        // Health checks before the node is schedulable.
        if ctx.target.profile.hardware_sync.required && !machine.hardware_sync().is_healthy(ctx.now)
        {
            if let Some(limit) = ctx.timed_out(PolicyTimeout::Enrollment) {
                return Err(StageFailure::timeout(
                    PolicyTimeout::HwSyncHealth,
                    limit,
                    "the agent enrolled but hardware sync did not stay healthy",
                ));
            }
            return Ok(StageOutcome::wait(
                "agent enrolled; waiting for hardware sync to be healthy again",
            ));
        }
        ctx.facts.enrollment.enrolled_at = Some(enrolled_at);
        return Ok(StageOutcome::complete(
            format!(
                "agent enrolled at {}; node active",
                enrolled_at.format("%H:%M:%S")
            ),
            json!({"node_id": node_id, "enrolled_at": enrolled_at}),
        ));
    }
    if ctx.timed_out(PolicyTimeout::Enrollment).is_some() {
        if ctx.facts.enrollment.token_refreshes == 0 {
            let ttl = chrono::Duration::from_std(ctx.target.profile.enrollment.token_ttl)
                .unwrap_or(chrono::Duration::hours(2));
            let refreshed = store
                .extend_enrollment_tokens(node_id, ttl)
                .await
                .map_err(|e| StageFailure::store(&e))?;
            ctx.facts.enrollment.token_refreshes += 1;
            // The second attempt gets a full timeout of its own.
            if let Some(clock) = ctx.facts.clock.as_mut() {
                clock.started_at = ctx.now;
            }
            ctx.checkpoint().await?;
            return Ok(StageOutcome::wait(format!(
                "no enrollment yet: {refreshed} token(s) refreshed, waiting once more"
            )));
        }
        let expiry = store
            .enrollment_token_expiry(node_id)
            .await
            .map_err(|e| StageFailure::store(&e))?;
        return Err(StageFailure::timeout(
            PolicyTimeout::Enrollment,
            ctx.timeout_of(PolicyTimeout::Enrollment),
            &format!(
                "the node agent of {} did not enroll, after one token refresh,",
                machine.system_id
            ),
        )
        .details(json!({
            "node_id": node_id,
            "token_refreshes": ctx.facts.enrollment.token_refreshes,
            "token_expires_at": expiry,
            "hint": "the machine stays deployed in MAAS; if the agent enrolls later, adopt the onboarding",
        })));
    }
    Ok(StageOutcome::wait("waiting for the node agent to enroll"))
}
