//! Deployment (seed 000 §4.3 DeployViaMaas, WaitForDeployed, ClassifyDeployFailure,
//! RecoverForDatasourceRetry; §4.6 retries and compensation; §4.10 "never issue deploy again
//! without checking if machine already advanced/faulted"; §4.13 refresh before every
//! destructive step).
//!
//! Deploy is never issued twice for one round: the intent is written to the journal before the
//! call; a restarted executor (or an answer that leaves the outcome unknown) re-reads the
//! machine — Deploying/Deployed means MAAS received it, Ready/Allocated that it did not.

use crate::lifecycle::MaasStatus;
use regex::Regex;
use serde_json::json;

use super::commission::{adopt_advanced, error_snippet, unexpected};
use super::{DeployFacts, DeployFailureFacts, StageCtx};
use crate::lifecycle::{FailureClass, JobState, OnboardingStage, PolicyTimeout};
use crate::provider::maas::{
    DeployParams, EventLevel, EventsQuery, MaasError, Machine, ReleaseParams,
};
use crate::stages::{Retry, StageFailure, StageOutcome, bounded};

/// MAAS's name for a custom image: GPUaaS images are uploaded as `custom/<name>`; profile
/// authors may leave the namespace out (000 §3.6).
pub(crate) fn maas_distro_series(profile_value: &str) -> String {
    if profile_value.starts_with("gpuaas-") {
        format!("custom/{profile_value}")
    } else {
        profile_value.to_owned()
    }
}

fn mark_received(ctx: &mut StageCtx<'_>) {
    if let Some(deploy) = ctx.facts.deploy.as_mut() {
        deploy.received = true;
    }
}

pub(super) async fn ensure_deploy_issued(
    ctx: &mut StageCtx<'_>,
) -> Result<StageOutcome, StageFailure> {
    use MaasStatus as S;
    // The refresh before the deploy (000 §4.13) decides on the status alone.
    let machine = ctx.machine_summary().await?;
    let sid = machine.system_id.clone();
    match ctx.facts.deploy.clone() {
        Some(intent) => match machine.status.known() {
            Some(S::Deploying | S::Deployed) => {
                mark_received(ctx);
                return Ok(StageOutcome::done(
                    format!(
                        "deploy (round {}) was received by MAAS: {sid} is {}",
                        intent.round,
                        machine.status_label()
                    ),
                    json!({"round": intent.round, "adopted": true}),
                ));
            }
            Some(S::FailedDeployment) => {
                mark_received(ctx);
                return Ok(StageOutcome::jump(
                    OnboardingStage::ClassifyDeployFailure,
                    format!("deploy (round {}) failed in MAAS", intent.round),
                    json!({"round": intent.round}),
                ));
            }
            Some(S::Ready | S::Allocated) if intent.received => {
                return Err(StageFailure::ambiguity(
                    "deployment_undone",
                    format!(
                        "{sid} was deploying for this job and is {} now: released out of band?",
                        machine.status_label()
                    ),
                ));
            }
            // Not received: the deploy may be issued (again) for this round.
            Some(S::Ready | S::Allocated) => {}
            _ => return Err(unexpected(&machine, "deploy")),
        },
        None => {
            if let Some(adopted) = adopt_advanced(ctx, &machine) {
                return adopted;
            }
            if !matches!(machine.status.known(), Some(S::Ready | S::Allocated)) {
                return Err(unexpected(&machine, "deploy"));
            }
        }
    }
    let Some(user_data) = ctx.memory.user_data.clone() else {
        // The payload (with its token) lived in a process that is gone: render a fresh one.
        ctx.facts.deploy = None;
        return Ok(StageOutcome::jump(
            OnboardingStage::RenderCloudInit,
            "no rendered payload in memory (executor restarted before deploying): rendering again with a fresh token",
            json!({}),
        ));
    };
    let renewed = renew_short_token(ctx).await?;
    let distro_series = maas_distro_series(&ctx.target.profile.image.distro_series);
    let round = ctx
        .facts
        .deploy
        .as_ref()
        .map(|d| d.round)
        .unwrap_or(ctx.facts.deploy_rounds + 1);
    let maas = ctx.maas().await?;
    let events_after = maas
        .query_events(&EventsQuery::machine(sid.clone(), EventLevel::Debug, 1))
        .await
        .map_err(|e| StageFailure::maas(&e))?
        .newest_id();
    ctx.facts.deploy = Some(DeployFacts {
        round,
        intent_at: ctx.now,
        received: false,
        distro_series: distro_series.clone(),
        events_after,
    });
    ctx.facts.deploy_rounds = round;
    // The intent is durable before MAAS hears of the deploy.
    ctx.checkpoint().await?;
    let params = DeployParams {
        user_data: Some(user_data),
        distro_series: Some(distro_series.clone()),
        enable_hw_sync: Some(ctx.target.profile.hardware_sync.required),
        comment: Some(format!("metalform onboarding {}", ctx.job.id)),
        ..DeployParams::default()
    };
    match maas.deploy(&sid, &params).await {
        Ok(machine) => {
            ctx.observe(&machine);
            mark_received(ctx);
            // The payload is in MAAS now; drop our copy of the token.
            ctx.memory.user_data = None;
            let renewal = renewed.map_or(String::new(), |at| {
                format!(
                    "; the enrollment token, rendered before a place was free, renewed until {}",
                    at.format("%Y-%m-%d %H:%M:%SZ")
                )
            });
            Ok(StageOutcome::done(
                format!("deploy of {distro_series} issued to {sid} (round {round}){renewal}"),
                json!({"round": round, "distro_series": distro_series, "token_renewed_until": renewed}),
            ))
        }
        Err(err) if err.is_outcome_unknown() => {
            // MAAS may have applied it: look before anything else.
            let machine = ctx.machine_summary().await?;
            if matches!(machine.status.known(), Some(S::Deploying | S::Deployed)) {
                mark_received(ctx);
                ctx.memory.user_data = None;
                return Ok(StageOutcome::done(
                    format!(
                        "deploy outcome was unknown; {sid} is {}",
                        machine.status_label()
                    ),
                    json!({"round": round, "outcome_unknown": true}),
                ));
            }
            Err(StageFailure::maas(&err))
        }
        Err(err @ MaasError::Conflict { .. }) => {
            // Re-read on the retry: a concurrent change may have moved the machine on.
            let mut failure = StageFailure::maas(&err);
            failure.retry = Retry::Budget;
            Err(failure)
        }
        Err(err) => Err(StageFailure::maas(&err)),
    }
}

/// The payload was rendered before the node had its place under `maxParallel` (nodes prepare
/// ahead), so its token may have waited: it must still outlast the deploy and the first boot
/// from now, or a whole lifetime when the profile's is shorter than those. A token short of
/// that gets a fresh lifetime; it is this payload's, the node's newest.
/// Returns the renewed token's expiry.
async fn renew_short_token(
    ctx: &mut StageCtx<'_>,
) -> Result<Option<chrono::DateTime<chrono::Utc>>, StageFailure> {
    let (Some(rendered), Some(node)) = (ctx.facts.cloud_init.as_ref(), ctx.facts.node_id) else {
        return Ok(None);
    };
    let ttl = ctx.token_ttl();
    let first_boot =
        ctx.timeout_of(PolicyTimeout::Deploy) + ctx.timeout_of(PolicyTimeout::Enrollment);
    let needed = chrono::Duration::from_std(first_boot)
        .unwrap_or(chrono::Duration::MAX)
        .min(ttl);
    // Some slack: a token rendered just before is never renewed.
    if rendered.token_expires_at - ctx.now >= needed - needed / 20 {
        return Ok(None);
    }
    ctx.env
        .store
        .extend_enrollment_tokens(node, ttl)
        .await
        .map_err(|e| StageFailure::store(&e))?;
    let expires_at = ctx.now + ttl;
    if let Some(rendered) = ctx.facts.cloud_init.as_mut() {
        rendered.token_expires_at = expires_at;
    }
    Ok(Some(expires_at))
}

/// The deployed addresses, the SSH interface's first.
pub(super) fn deploy_address(ctx: &StageCtx<'_>, machine: &Machine) -> Option<String> {
    machine
        .interface_named(&ctx.target.site.deploy.ssh_iface)
        .and_then(|i| i.links.iter().find_map(|l| l.ip_address.clone()))
        .or_else(|| machine.ip_addresses.first().cloned())
}

pub(super) async fn ensure_deployed(ctx: &mut StageCtx<'_>) -> Result<StageOutcome, StageFailure> {
    use MaasStatus as S;
    // A deployment takes minutes and is polled all along: while it is Deploying only the status
    // matters, so a poll asks for the status alone (answered from MAAS's event log while it
    // records no change; a machine object is ~28 KB, most of it interfaces and disks); any other
    // status is read again in full to act on.
    let polled = ctx.machine_status().await?;
    if polled.status.known() == Some(S::Deploying) && ctx.timed_out(PolicyTimeout::Deploy).is_none()
    {
        return Ok(StageOutcome::wait(format!(
            "{} is Deploying",
            polled.system_id
        )));
    }
    let machine = ctx.machine().await?;
    let sid = machine.system_id.clone();
    match machine.status.known() {
        Some(S::Deployed) => {
            ctx.facts.deploy_ips = machine.ip_addresses.clone();
            if let (Some(node), Some(address)) = (ctx.facts.node_id, deploy_address(ctx, &machine))
            {
                ctx.env
                    .store
                    .set_host(node, &address, &ctx.env.actor)
                    .await
                    .map_err(|e| StageFailure::store(&e))?;
            }
            Ok(StageOutcome::done(
                format!("{sid} Deployed ({})", machine.ip_addresses.join(", ")),
                json!({"ips": machine.ip_addresses}),
            ))
        }
        Some(S::Deploying) => {
            if let Some(limit) = ctx.timed_out(PolicyTimeout::Deploy) {
                // 000 §4.6 WaitForDeployed: compensate by releasing back to Ready.
                let released = release(ctx, &machine).await;
                return Err(StageFailure::timeout(
                    PolicyTimeout::Deploy,
                    limit,
                    &format!("{sid} did not finish deploying"),
                )
                .details(json!({"system_id": sid, "released_to_ready": released.is_ok()})));
            }
            Ok(StageOutcome::wait(format!("{sid} is Deploying")))
        }
        Some(S::FailedDeployment) => Ok(StageOutcome::jump(
            OnboardingStage::ClassifyDeployFailure,
            format!("{sid} ended in Failed deployment"),
            json!({}),
        )),
        Some(S::Allocated) if !ctx.owns_deployment() => Ok(StageOutcome::jump(
            OnboardingStage::DeployViaMaas,
            format!("{sid} is Allocated: the deploy did not start"),
            json!({}),
        )),
        _ => Err(StageFailure::ambiguity(
            "deployment_undone",
            format!(
                "{sid} was deploying for this job and is {} now (changed out of band)",
                machine.status_label()
            ),
        )
        .details(json!({"system_id": sid, "status": machine.status_label()}))),
    }
}

/// Release the machine back to Ready (the deploy compensation of 000 §4.6); the round is over.
async fn release(ctx: &mut StageCtx<'_>, machine: &Machine) -> Result<(), StageFailure> {
    let maas = ctx.maas().await?;
    maas.release(
        &machine.system_id,
        &ReleaseParams {
            comment: Some(format!("metalform onboarding {}: compensation", ctx.job.id)),
            ..ReleaseParams::default()
        },
    )
    .await
    .map_err(|e| StageFailure::maas(&e))?;
    ctx.facts.deploy = None;
    Ok(())
}

/// Datasource / cloud-init class failures (000 §4.3 ClassifyDeployFailure).
fn datasource_like(text: &str) -> bool {
    static PATTERN: std::sync::OnceLock<Regex> = std::sync::OnceLock::new();
    PATTERN
        .get_or_init(|| {
            Regex::new(r"(?i)datasource|cloud-init|cloud_init|cloudinit|modules:final")
                .expect("valid pattern")
        })
        .is_match(text)
}

pub(super) async fn ensure_deploy_failure_classified(
    ctx: &mut StageCtx<'_>,
) -> Result<StageOutcome, StageFailure> {
    let machine = ctx.machine().await?;
    let sid = machine.system_id.clone();
    match machine.status.known() {
        Some(MaasStatus::FailedDeployment) => {}
        Some(MaasStatus::Deployed | MaasStatus::Deploying) => {
            return Ok(StageOutcome::jump(
                OnboardingStage::WaitForDeployed,
                format!("{sid} is {} after all", machine.status_label()),
                json!({}),
            ));
        }
        // This stage classified the failure and released the machine, and its run stopped
        // before the outcome was journaled (a killed process, resumed): the classification
        // stands, and the release is not sent again.
        Some(MaasStatus::Releasing | MaasStatus::DiskErasing | MaasStatus::Ready)
            if let Some(recorded) = ctx.facts.deploy_failure.clone().filter(|f| f.releasing) =>
        {
            return Err(deploy_failure(ctx, &machine, &recorded, true).await);
        }
        _ => return Err(unexpected(&machine, "classify a deploy failure")),
    }
    let maas = ctx.maas().await?;
    // Best effort: without the events, the failure is generic (000 §4.6). Only this round's
    // events count.
    let query = EventsQuery {
        after: ctx.facts.deploy.as_ref().and_then(|d| d.events_after),
        ..EventsQuery::machine(sid.clone(), EventLevel::Info, 100)
    };
    let events = maas.query_events(&query).await.ok();
    let evidence = events.as_ref().and_then(|page| {
        page.events
            .iter()
            .map(|e| format!("{}: {}", e.event_type, e.description))
            .find(|text| datasource_like(text))
    });
    let class = if evidence.is_some() {
        "datasource_like"
    } else {
        "generic"
    };
    let mut classified = DeployFailureFacts {
        class: class.to_owned(),
        evidence: evidence.as_deref().map(|e| bounded(e, 300)),
        events_read: events.is_some(),
        releasing: false,
    };
    ctx.facts.deploy_failure = Some(classified.clone());
    let policy = &ctx.target.profile.deploy;
    let retries_left = policy.retry_on_datasource_failure
        && ctx.facts.datasource_retries < policy.max_retry_attempts;
    if evidence.is_some() && retries_left {
        return Ok(StageOutcome::jump(
            OnboardingStage::RecoverForDatasourceRetry,
            format!(
                "datasource/cloud-init failure; bounded redeploy {} of {}",
                ctx.facts.datasource_retries + 1,
                policy.max_retry_attempts
            ),
            json!({"class": class, "evidence": evidence}),
        ));
    }
    // Recorded before the release goes out, so that a run stopped after it finds the machine
    // releasing by this stage's doing, not by someone else's.
    classified.releasing = true;
    ctx.facts.deploy_failure = Some(classified.clone());
    ctx.checkpoint().await?;
    let released = release(ctx, &machine).await.is_ok();
    Err(deploy_failure(ctx, &machine, &classified, released).await)
}

/// The classified deploy failure the job ends with, after the compensating release (or its
/// failure, which leaves the machine to an operator).
async fn deploy_failure(
    ctx: &mut StageCtx<'_>,
    machine: &Machine,
    classified: &DeployFailureFacts,
    released: bool,
) -> StageFailure {
    let sid = &machine.system_id;
    let snippet = error_snippet(ctx, machine).await;
    let (code, state, message) = match (classified.class.as_str(), classified.events_read) {
        ("datasource_like", _) => (
            "datasource_failure_repeated",
            JobState::FailedManualIntervention,
            format!(
                "{sid}: datasource/cloud-init failure again after {} bounded redeploy(s)",
                ctx.facts.datasource_retries
            ),
        ),
        (_, true) => (
            "deploy_failed",
            JobState::FailedRetryable,
            format!("{sid}: deployment failed (not a datasource/cloud-init failure)"),
        ),
        (_, false) => (
            "deploy_failed_unclassified",
            JobState::FailedRetryable,
            format!("{sid}: deployment failed and its MAAS events could not be read"),
        ),
    };
    StageFailure::new(
        FailureClass::DeployCloudInitFailure,
        code,
        format!(
            "{message}; {}",
            if released {
                "released back to Ready"
            } else {
                "the release back to Ready failed"
            }
        ),
    )
    .details(json!({
        "system_id": sid,
        "class": classified.class,
        "evidence": classified.evidence,
        "maas_events": snippet,
        "released_to_ready": released,
    }))
    .never_retry()
    .state(if released {
        state
    } else {
        JobState::FailedManualIntervention
    })
}

pub(super) async fn ensure_recovered_for_redeploy(
    ctx: &mut StageCtx<'_>,
) -> Result<StageOutcome, StageFailure> {
    use MaasStatus as S;
    let machine = ctx.machine().await?;
    let sid = machine.system_id.clone();
    let maas = ctx.maas().await?;
    let recovery_failed = |what: &str, err: &MaasError| {
        let mut failure = StageFailure::maas(err);
        failure.class = FailureClass::DeployCloudInitFailure;
        failure.code = "datasource_recovery_failed".into();
        failure.message = format!("{what} {sid} for the redeploy failed: {err}");
        failure.retry = Retry::Budget;
        failure.state = Some(JobState::FailedManualIntervention);
        failure
    };
    match machine.status.known() {
        Some(S::Deploying) => {
            maas.abort(&sid, Some("metalform: datasource retry"))
                .await
                .map_err(|e| recovery_failed("aborting", &e))?;
            Ok(StageOutcome::wait(format!("{sid}: deployment aborted")))
        }
        Some(S::Deployed | S::FailedDeployment | S::Allocated) => {
            maas.release(
                &sid,
                &ReleaseParams {
                    comment: Some("metalform: datasource retry".into()),
                    ..ReleaseParams::default()
                },
            )
            .await
            .map_err(|e| recovery_failed("releasing", &e))?;
            Ok(StageOutcome::wait(format!("{sid}: releasing to Ready")))
        }
        Some(S::Releasing | S::DiskErasing) => {
            if let Some(limit) = ctx.timed_out(PolicyTimeout::Deploy) {
                return Err(StageFailure::timeout(
                    PolicyTimeout::Deploy,
                    limit,
                    &format!("{sid} did not get back to Ready for the redeploy"),
                )
                .state(JobState::FailedManualIntervention));
            }
            Ok(StageOutcome::wait(format!(
                "{sid} is {}",
                machine.status_label()
            )))
        }
        Some(S::Ready) => {
            ctx.facts.datasource_retries += 1;
            ctx.facts.deploy = None;
            ctx.facts.deploy_failure = None;
            Ok(StageOutcome::jump(
                OnboardingStage::ConfigureStorage,
                format!(
                    "{sid} is Ready; re-entering the deploy flow (redeploy {} of {})",
                    ctx.facts.datasource_retries, ctx.target.profile.deploy.max_retry_attempts
                ),
                json!({"datasource_retries": ctx.facts.datasource_retries}),
            ))
        }
        _ => Err(StageFailure::new(
            FailureClass::DeployCloudInitFailure,
            "datasource_recovery_failed",
            format!(
                "{sid} is {}: it cannot be brought back to Ready for the redeploy",
                machine.status_label()
            ),
        )
        .state(JobState::FailedManualIntervention)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn datasource_failures_are_recognised() {
        assert!(datasource_like(
            "Node installation failure: cloud-init: DataSourceNotFound: no datasource found"
        ));
        assert!(!datasource_like(
            "Node installation failure: curtin: installation failed"
        ));
        assert_eq!(maas_distro_series("gpuaas-rocm6"), "custom/gpuaas-rocm6");
        assert_eq!(maas_distro_series("ubuntu/noble"), "ubuntu/noble");
    }
}
