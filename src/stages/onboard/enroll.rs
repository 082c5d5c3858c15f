//! `wait_for_agent_enrollment` (seed 000 §4.3, §4.6 "Regenerate enrollment token, wait again.
//! Max 2 attempts ... Mark failed_enrollment. Do NOT release from MAAS", §4.13 "adopt a late
//! enrollment"; §9.1 "whenever reconciliation detects sync drift … re-sync"; 001 §3.3
//! enrolling -> active "after successful agent enrollment and health checks").
//!
//! The node becomes active here, after the enrollment endpoint recorded the agent's contact
//! and the health checks pass: MAAS still has the machine Deployed and, when the profile
//! requires it, hardware sync is healthy. While it is not, the enrolled agent gets a typed
//! `node.hw_sync_reseed` task (the SSH push comes back only when the agent could not). A
//! refresh extends the expiry of the token the host already has (docs/contracts.md §5): the
//! host cannot learn a new one without a redeploy.
//!
//! A machine adopted as it runs (deployed without metalform's payload) has no agent yet: its
//! node record is created here and its enrollment delivered to the host as a follow-up — the
//! agent's env file written and its unit restarted.

use crate::lifecycle::MaasStatus;
use serde_json::json;

use super::StageCtx;
use super::deploy::deploy_address;
use super::hwsync::{adopted_as_is, adopted_without_sync, push_credentials};
use super::render::ensure_node_record;
use crate::agent::AgentWatch;
use crate::cloudinit::{AGENT_CA_PATH, AGENT_ENV_PATH};
use crate::lifecycle::PolicyTimeout;
use crate::provider::host::HostTarget;
use crate::provider::maas::{Machine, MachineSummary};
use crate::secrets::Secret;
use crate::stages::{StageFailure, StageOutcome, StageWait};
use crate::store::TaskStatus;

/// The task the agent runs to restart the MAAS hardware-sync units (docs/agent-protocol.md).
const RESEED_TASK: &str = "node.hw_sync_reseed";
/// The agent's systemd unit, restarted after its env file changes.
const AGENT_UNIT: &str = "metalform-agent.service";

pub(super) async fn ensure_agent_enrolled(
    ctx: &mut StageCtx<'_>,
) -> Result<StageOutcome, StageFailure> {
    // The machine's summary (a poll the site's polls carry together); the full machine is
    // read only to reach the host.
    let machine = ctx.machine_summary().await?;
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
    let node_id = match ctx.job.node_id.or(ctx.facts.node_id) {
        Some(node) => node,
        None if adopted_as_is(ctx) => ensure_node_record(ctx).await?,
        None => {
            return Err(StageFailure::ambiguity(
                "no_node_record",
                "the journal has no node record for this onboarding; rerun it from the top",
            ));
        }
    };
    // Watched before the store is read: an enrollment recorded after the read wakes the wait.
    let watch = ctx
        .env
        .agent_signals
        .as_ref()
        .map(|signals| signals.watch(node_id));
    let store = &ctx.env.store;
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
        if let Some(waiting) = hardware_sync_check(ctx, node_id, &machine).await? {
            return Ok(waiting);
        }
        ctx.facts.enrollment.enrolled_at = Some(enrolled_at);
        return Ok(StageOutcome::complete(
            format!(
                "agent enrolled at {}; node active",
                enrolled_at.format("%H:%M:%S")
            ),
            json!({"node_id": node_id, "enrolled_at": enrolled_at, "warnings": ctx.facts.warnings}),
        ));
    }
    if adopted_as_is(ctx) && ctx.facts.enrollment.delivered_at.is_none() {
        let machine = ctx.machine().await?;
        return deliver_enrollment(ctx, node_id, &machine).await;
    }
    if ctx.timed_out(PolicyTimeout::Enrollment).is_some() {
        if ctx.facts.enrollment.token_refreshes == 0 {
            let ttl = ctx.token_ttl();
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
    Ok(agent_wait(ctx, watch))
}

/// The wait for an agent that has not enrolled yet. With this process's listener watching,
/// its enrollment wakes the wait, and the store is read again only at the slow fallback (an
/// agent that enrolled through another replica), or when the enrollment timeout is due.
fn agent_wait(ctx: &StageCtx<'_>, watch: Option<AgentWatch>) -> StageOutcome {
    let reason = "waiting for the node agent to enroll";
    let Some(watch) = watch else {
        return StageOutcome::wait(reason);
    };
    let until_timeout = ctx
        .timeout_of(PolicyTimeout::Enrollment)
        .saturating_sub(ctx.elapsed());
    // Just past the deadline, so that pass finds it passed.
    let poll = watch
        .fallback(ctx.env.poll_interval)
        .min(until_timeout + std::time::Duration::from_millis(10))
        .max(ctx.env.poll_interval);
    StageOutcome::Wait(StageWait {
        reason: reason.into(),
        poll: Some(poll),
        wake: Some(watch),
    })
}

/// The health check of hardware sync once the agent is there (000 §9.1): `None` when the node
/// may go active. While MAAS sees no healthy sync, the agent gets a `node.hw_sync_reseed` task;
/// when the agent could not (no credentials on the host), the credentials are pushed over SSH
/// again, the way the first seed went.
async fn hardware_sync_check(
    ctx: &mut StageCtx<'_>,
    node_id: uuid::Uuid,
    machine: &MachineSummary,
) -> Result<Option<StageOutcome>, StageFailure> {
    if !ctx.target.profile.hardware_sync.required {
        return Ok(None);
    }
    let sync = machine.hardware_sync();
    if adopted_as_is(ctx) && !sync.enabled {
        // Nothing but a redeploy turns it on: active, with the warning on the job.
        ctx.facts.mismatch(adopted_without_sync(&machine.system_id));
        return Ok(None);
    }
    let health = sync.health(ctx.now);
    if health.is_healthy() {
        return Ok(None);
    }
    if let Some(limit) = ctx.timed_out(PolicyTimeout::HwSyncHealth) {
        return Err(StageFailure::timeout(
            PolicyTimeout::HwSyncHealth,
            limit,
            "the agent enrolled but hardware sync did not become healthy again",
        )
        .details(json!({
            "sync": {"enable_hw_sync": sync.enabled, "last_sync": sync.last_sync, "sync_interval": sync.sync_interval},
            "reseeds_queued": ctx.facts.enrollment.reseeds_queued,
            "hint": "MAAS was left alone and the node is not active; check the hardware-sync timer and maas-run-scripts on the host",
        })));
    }
    let store = &ctx.env.store;
    let owner = ctx.job.id.to_string();
    let latest = store
        .tasks_for_node(node_id)
        .await
        .map_err(|e| StageFailure::store(&e))?
        .into_iter()
        .filter(|t| t.task_type == RESEED_TASK && t.owner_job.as_deref() == Some(owner.as_str()))
        .max_by_key(|t| t.created_at);
    let agent_failed = latest
        .as_ref()
        .filter(|t| t.status == TaskStatus::Failed)
        .and_then(|t| t.result_message.clone());
    if let Some(why) = &agent_failed
        && latest.as_ref().is_some_and(|t| {
            ctx.facts
                .hw_sync
                .as_ref()
                .is_none_or(|h| h.pushed_at < t.updated_at)
        })
    {
        // The agent could not reseed with what the host has: push the credentials again.
        let full = ctx.machine().await?;
        match push_credentials(ctx, &full).await {
            Ok(mut facts) => {
                facts.reseeds = ctx.facts.hw_sync.as_ref().map_or(0, |h| h.reseeds) + 1;
                ctx.facts.hw_sync = Some(facts);
                ctx.checkpoint().await?;
            }
            Err(push) => {
                return Ok(Some(StageOutcome::wait(format!(
                    "hardware sync unhealthy ({health:?}); the agent's reseed failed ({why}) and \
                     the credentials could not be pushed ({push})"
                ))));
            }
        }
    }
    let open = latest
        .as_ref()
        .is_some_and(|t| matches!(t.status, TaskStatus::Queued | TaskStatus::Dispatched));
    let settled_since = latest
        .as_ref()
        .and_then(|t| t.completed_at)
        .is_some_and(|done| (ctx.now - done).to_std().unwrap_or_default() < reseed_pause(ctx));
    if !open && !settled_since {
        let params = json!({
            "system_id": machine.system_id,
            "maas_url": ctx.target.site.maas.url.as_str().trim_end_matches('/'),
            "creds_path": crate::cloudinit::MAAS_CREDS_PATH,
            "token_key": ctx.maas().await?.get_token(&machine.system_id).await
                .ok().flatten().map(|t| t.token_key),
            "interval_seconds": ctx.target.profile.hardware_sync.interval.as_secs(),
            "reason": format!("{health:?}"),
        });
        store
            .ensure_task(node_id, RESEED_TASK, &params, Some(&owner))
            .await
            .map_err(|e| StageFailure::store(&e))?;
        ctx.facts.enrollment.reseeds_queued += 1;
        ctx.checkpoint().await?;
    }
    Ok(Some(StageOutcome::wait(format!(
        "agent enrolled; hardware sync unhealthy ({health:?}): {RESEED_TASK} queued for its agent"
    ))))
}

/// Between reseeds: one sync interval (at least five polls), for MAAS to see the next sync.
fn reseed_pause(ctx: &StageCtx<'_>) -> std::time::Duration {
    ctx.target
        .profile
        .hardware_sync
        .interval
        .max(ctx.env.poll_interval * 5)
}

/// An adopted host gets its agent enrollment: the agent channel's CA (when it has one), a fresh
/// token with the profile's TTL in the agent's env file, and its unit restarted. A host that cannot be reached is tried again on
/// the next pass, with another token (the one it never received is expired).
async fn deliver_enrollment(
    ctx: &mut StageCtx<'_>,
    node_id: uuid::Uuid,
    machine: &Machine,
) -> Result<StageOutcome, StageFailure> {
    let Some(address) = deploy_address(ctx, machine) else {
        return Ok(StageOutcome::wait(format!(
            "{} reports no deployed address to deliver its enrollment to",
            machine.system_id
        )));
    };
    let store = &ctx.env.store;
    let (token, expires_at, _) = store
        .replace_enrollment_token(
            node_id,
            Some(&ctx.job.id.to_string()),
            ctx.token_ttl(),
            ctx.fence,
        )
        .await
        .map_err(|e| StageFailure::store(&e))?;
    let env = Secret::new(format!(
        "# metalform: node-agent enrollment of an adopted host (docs/agent.md)\n\
         METALFORM_ENROLL_URL=\"{}\"\nMETALFORM_ENROLL_TOKEN=\"{}\"\nMETALFORM_NODE=\"{}\"\n\
         METALFORM_SYSTEM_ID=\"{}\"\n",
        ctx.env.enroll_url,
        token.expose(),
        ctx.target.hostname(),
        machine.system_id
    ));
    let host = HostTarget {
        system_id: machine.system_id.clone(),
        hostname: ctx.target.hostname().to_owned(),
        address: address.clone(),
        user: ctx.target.site.deploy.user.clone(),
    };
    let peers = ctx.peers();
    // The CA the agent pins for the agent channel, as cloud-init would have installed it.
    let ca = match &ctx.env.agent_install.ca_bundle {
        Some(pem) => {
            peers
                .host
                .write_file(&host, AGENT_CA_PATH, &Secret::new(pem.clone()), 0o644)
                .await
        }
        None => Ok(()),
    };
    let delivered = match ca {
        Ok(()) => match peers
            .host
            .write_file(&host, AGENT_ENV_PATH, &env, 0o600)
            .await
        {
            Ok(()) => peers.host.restart_units(&host, &[AGENT_UNIT]).await,
            Err(err) => Err(err),
        },
        Err(err) => Err(err),
    };
    if let Err(err) = delivered {
        return Ok(StageOutcome::wait(format!(
            "the enrollment of adopted {} could not be delivered to {address}: {err}",
            machine.system_id
        )));
    }
    ctx.facts.enrollment.delivered_at = Some(ctx.now);
    ctx.checkpoint().await?;
    Ok(StageOutcome::wait(format!(
        "adopted {}: enrollment delivered to {address} (token valid until {}); waiting for its agent",
        machine.system_id,
        expires_at.format("%Y-%m-%d %H:%M:%SZ")
    )))
}
