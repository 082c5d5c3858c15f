//! The MAAS-side stages (seed 000 §5.3 LoadSiteConfig, ReleaseMaasNode; §5.4 PowerOffMaasNode,
//! RemoveMaasRecord; §5.8). A release and a power-off are journaled as intents before the MAAS
//! call, and the machine is re-read before anything is sent: a restarted executor never issues
//! a release (or its erase) twice, and a machine someone else moved is not acted on.

use crate::lifecycle::MaasStatus;
use serde_json::json;

use super::{DecommissionCtx, ReleaseFacts, erase_name};
use crate::model::EraseMode;
use crate::provider::maas::{
    EraseMode as MaasErase, MaasClient, MaasError, MachineSummary, PowerState, ReleaseParams,
    StopMode,
};
use crate::stages::{StageFailure, StageOutcome};

async fn client(ctx: &DecommissionCtx<'_>) -> Result<MaasClient, StageFailure> {
    let resolved = ctx.resolved()?;
    ctx.env.maas.client(&resolved.site).await
}

fn system_id(ctx: &DecommissionCtx<'_>) -> Result<String, StageFailure> {
    ctx.facts.base.system_id.clone().ok_or_else(|| {
        StageFailure::ambiguity(
            "no_machine_bound",
            "the node has no MAAS machine on record; it cannot be released from here",
        )
    })
}

/// Re-read the machine (000 §4.13); one that is gone is state ambiguity (§5.8). These stages
/// decide on its status and power alone, so its interfaces and disks are skipped while parsing:
/// the release wait reads it on every poll while MAAS erases the disks.
async fn machine(ctx: &mut DecommissionCtx<'_>) -> Result<MachineSummary, StageFailure> {
    let maas = client(ctx).await?;
    let system_id = system_id(ctx)?;
    match maas.read_machine_summary(&system_id).await {
        Ok(machine) => {
            ctx.memory.observed = Some(crate::store::Observed {
                status: Some(machine.status_label()),
                power_state: Some(machine.power_state.as_str().to_owned()),
                ips: machine.ip_addresses.clone(),
            });
            Ok(machine)
        }
        Err(MaasError::NotFound { .. }) => Err(StageFailure::ambiguity(
            "machine_deleted",
            format!("machine {system_id} is no longer in MAAS (deleted out of band)"),
        )),
        Err(err) => Err(StageFailure::maas(&err)),
    }
}

/// LoadSiteConfig: the site's MAAS reachable with a valid key, and the machine bound.
pub(super) async fn ensure_site_config_loaded(
    ctx: &mut DecommissionCtx<'_>,
) -> Result<StageOutcome, StageFailure> {
    let resolved = ctx.resolved()?.clone();
    let preflight = ctx.env.maas.preflight(&resolved.site).await?;
    if ctx.facts.base.system_id.is_none() {
        let bound = ctx
            .env
            .store
            .maas_state(ctx.target.node_id)
            .await
            .map_err(|e| StageFailure::store(&e))?
            .map(|m| m.maas_system_id)
            .or(resolved.system_id.clone());
        ctx.facts.base.system_id = bound;
    }
    let system_id = system_id(ctx)?;
    let machine = machine(ctx).await?;
    if ctx.facts.decommission.started_deployed.is_none() {
        ctx.facts.decommission.started_deployed = Some(machine.status == MaasStatus::Deployed);
    }
    Ok(StageOutcome::done(
        format!(
            "MAAS {} reachable; machine {system_id} is {}",
            preflight.maas_version,
            machine.status_label()
        ),
        json!({"maas_version": preflight.maas_version, "system_id": system_id,
            "status": machine.status_label()}),
    ))
}

fn maas_erase(mode: EraseMode) -> MaasErase {
    match mode {
        EraseMode::None => MaasErase::None,
        EraseMode::Quick => MaasErase::Quick,
        EraseMode::Secure => MaasErase::Secure,
    }
}

/// Journal the intent, then release. An answer that leaves the outcome unknown (timeout, 5xx)
/// is a failure; the retry re-reads the machine before deciding to send again.
async fn issue_release(
    ctx: &mut DecommissionCtx<'_>,
    mode: EraseMode,
    fallback: bool,
) -> Result<StageOutcome, StageFailure> {
    let system_id = system_id(ctx)?;
    ctx.facts.decommission.releases.push(ReleaseFacts {
        intent_at: ctx.now,
        erase: erase_name(mode).to_owned(),
        received: false,
        fallback,
    });
    ctx.checkpoint().await?;
    let maas = client(ctx).await?;
    let mut params = ReleaseParams::erasing(maas_erase(mode));
    params.comment = Some(format!(
        "metalform decommission {} ({})",
        ctx.job.id,
        ctx.mode()
    ));
    match maas.release(&system_id, &params).await {
        Ok(machine) => {
            if let Some(last) = ctx.facts.decommission.releases.last_mut() {
                last.received = true;
            }
            ctx.checkpoint().await?;
            let what = if fallback {
                "released without erase (fallback after the erase failed)".to_owned()
            } else {
                format!("release sent (erase {})", erase_name(mode))
            };
            Ok(StageOutcome::wait(format!(
                "{what}; {} is {}",
                system_id,
                machine.status_label()
            )))
        }
        Err(err) => Err(StageFailure::maas(&err)),
    }
}

/// ReleaseMaasNode: release with the erase mode, fall back to no erase when the erase fails and
/// the site allows it, wait for Ready.
pub(super) async fn ensure_machine_released(
    ctx: &mut DecommissionCtx<'_>,
) -> Result<StageOutcome, StageFailure> {
    use MaasStatus as S;
    let machine = machine(ctx).await?;
    let last = ctx.facts.release().cloned();
    match machine.status.known() {
        Some(S::Ready) => {
            if let Some(last) = ctx.facts.decommission.releases.last_mut() {
                last.received = true;
            }
            let how = match &last {
                Some(r) if r.fallback => "released without erase (fallback)".to_owned(),
                Some(r) => format!("released (erase {})", r.erase),
                None => "already Ready: nothing to release".to_owned(),
            };
            let out = StageOutcome::done(
                format!("{} is Ready; {how}", machine.system_id),
                json!({"releases": ctx.facts.decommission.releases}),
            );
            Ok(if last.is_none() {
                StageOutcome::skipped(format!("{} is already Ready", machine.system_id))
            } else {
                out
            })
        }
        Some(S::Releasing | S::DiskErasing) => {
            if let Some(last) = ctx.facts.decommission.releases.last_mut() {
                last.received = true;
            }
            if ctx.elapsed() > ctx.timing.release {
                return Err(StageFailure::ambiguity(
                    "release_timeout",
                    format!(
                        "{} is still {} after {}: MAAS does not converge",
                        machine.system_id,
                        machine.status_label(),
                        crate::model::duration::format(ctx.timing.release)
                    ),
                ));
            }
            Ok(StageOutcome::wait(format!(
                "{} is {}",
                machine.system_id,
                machine.status_label()
            )))
        }
        Some(S::FailedDiskErasing) => {
            let fell_back = last.as_ref().is_some_and(|r| r.fallback);
            if !fell_back && ctx.fallback_no_erase() {
                return issue_release(ctx, EraseMode::None, true).await;
            }
            Err(StageFailure::ambiguity(
                "erase_failed",
                format!(
                    "{} failed to erase its disks{}",
                    machine.system_id,
                    if fell_back {
                        " and the no-erase release did not help either"
                    } else {
                        "; the site policy does not allow a release without erase"
                    }
                ),
            )
            .details(json!({"system_id": machine.system_id, "releases": ctx.facts.decommission.releases})))
        }
        Some(S::Deployed | S::Deploying | S::Allocated | S::FailedDeployment | S::Broken) => {
            if last.as_ref().is_some_and(|r| r.received) {
                // This job's release took effect, yet the machine is in use again.
                return Err(StageFailure::ambiguity(
                    "machine_redeployed",
                    format!(
                        "{} is {} after this job released it (changed out of band)",
                        machine.system_id,
                        machine.status_label()
                    ),
                ));
            }
            // No release yet, or one that never reached MAAS (the machine did not move): send.
            let fallback = last.as_ref().is_some_and(|r| r.fallback);
            let mode = if fallback {
                EraseMode::None
            } else {
                ctx.erase()
            };
            if last.is_some() {
                ctx.facts.decommission.releases.pop();
            }
            issue_release(ctx, mode, fallback).await
        }
        _ => Err(StageFailure::ambiguity(
            "unexpected_maas_status",
            format!(
                "{} is {}, which a decommission cannot release from",
                machine.system_id,
                machine.status_label()
            ),
        )),
    }
}

/// PowerOffMaasNode.
pub(super) async fn ensure_machine_off(
    ctx: &mut DecommissionCtx<'_>,
) -> Result<StageOutcome, StageFailure> {
    let machine = machine(ctx).await?;
    if machine.power_state == PowerState::Off {
        return Ok(match &ctx.facts.decommission.power_off {
            Some(_) => StageOutcome::done(format!("{} is off", machine.system_id), json!({})),
            None => StageOutcome::skipped(format!("{} is already off", machine.system_id)),
        });
    }
    if let Some(intent) = &ctx.facts.decommission.power_off
        && intent.received
    {
        if ctx.elapsed() > ctx.timing.power_off {
            return Err(StageFailure::ambiguity(
                "power_off_timeout",
                format!(
                    "{} still reports power {} after the power-off",
                    machine.system_id,
                    machine.power_state.as_str()
                ),
            ));
        }
        return Ok(StageOutcome::wait(format!(
            "{} powering off",
            machine.system_id
        )));
    }
    ctx.facts.decommission.power_off = Some(super::PowerOffFacts {
        intent_at: ctx.now,
        received: false,
    });
    ctx.checkpoint().await?;
    let maas = client(ctx).await?;
    maas.power_off(
        &machine.system_id,
        StopMode::Hard,
        Some("metalform decommission"),
    )
    .await
    .map_err(|e| StageFailure::maas(&e))?;
    if let Some(intent) = ctx.facts.decommission.power_off.as_mut() {
        intent.received = true;
    }
    ctx.checkpoint().await?;
    Ok(StageOutcome::wait(format!(
        "power-off sent to {}",
        machine.system_id
    )))
}

/// RemoveMaasRecord: only when the node asks for it (`decommission.removeFromMaas`); best effort
/// (000 §5.8): a failure is recorded as a follow-up, the decommission still completes.
pub(super) async fn ensure_maas_record_removed(
    ctx: &mut DecommissionCtx<'_>,
) -> Result<StageOutcome, StageFailure> {
    let remove = ctx.resolved()?.node.decommission.remove_from_maas;
    let system_id = system_id(ctx)?;
    if !remove {
        return Ok(StageOutcome::skipped(format!(
            "machine {system_id} left in MAAS for its audit trail (decommission.removeFromMaas is false)"
        )));
    }
    let maas = client(ctx).await?;
    match maas.delete_machine(&system_id).await {
        Ok(()) | Err(MaasError::NotFound { .. }) => Ok(StageOutcome::done(
            format!("machine {system_id} deleted from MAAS"),
            json!({"system_id": system_id}),
        )),
        Err(err) => {
            let note = format!("delete machine {system_id} from MAAS: {err}");
            if !ctx.facts.decommission.follow_ups.contains(&note) {
                ctx.facts.decommission.follow_ups.push(note.clone());
            }
            Ok(StageOutcome::done(
                format!("could not delete {system_id} from MAAS (follow-up recorded): {err}"),
                json!({"follow_up": note}),
            ))
        }
    }
}
