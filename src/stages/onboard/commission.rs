//! `commission_node` and `wait_for_ready` (seed 000 §4.3 CommissionNode "status-aware",
//! WaitForMaasStatus(Ready); §4.6 "If Failed: log MAAS error details, mark failed_commission.
//! If timeout: mark failed_commission_timeout"; §4.10 refresh before deciding).

use crate::lifecycle::MaasStatus;
use serde_json::json;

use super::StageCtx;
use crate::lifecycle::{FailureClass, OnboardingStage, PolicyTimeout};
use crate::provider::maas::{
    CommissionParams, EventLevel, EventsQuery, Machine, MachineStanding, MachineSummary,
    ReleaseParams, UpdateMachineParams,
};
use crate::stages::{StageFailure, StageOutcome, bounded};

/// Where a machine already past commissioning belongs in this job, if anywhere (status-aware
/// adoption, 000 §4.9 rerun). `None`: keep going with the current stage.
pub(super) fn adopt_advanced(
    ctx: &StageCtx<'_>,
    machine: &impl MachineStanding,
) -> Option<Result<StageOutcome, StageFailure>> {
    use MaasStatus as S;
    let ours = ctx.owns_deployment();
    let jump = |to: OnboardingStage, why: &str| {
        Some(Ok(StageOutcome::jump(
            to,
            format!(
                "{} is {}: {why}",
                machine.system_id(),
                machine.status_label()
            ),
            json!({"status": machine.status_label()}),
        )))
    };
    match machine.status().known() {
        Some(S::Deploying | S::Deployed) if ours => {
            jump(OnboardingStage::WaitForDeployed, "this job's deployment")
        }
        Some(S::FailedDeployment) if ours => jump(
            OnboardingStage::ClassifyDeployFailure,
            "this job's deployment failed",
        ),
        Some(S::Deploying | S::Deployed | S::FailedDeployment) => Some(Err(StageFailure::ambiguity(
            "machine_deployed_elsewhere",
            format!(
                "{} is {} but this onboarding never deployed it (owner: {})",
                machine.system_id(),
                machine.status_label(),
                machine.owner().unwrap_or("none")
            ),
        )
        .details(json!({
            "system_id": machine.system_id(),
            "hint": "adopt it (metalform onboardings adopt) if it is this node, or release it in MAAS, then rerun",
        })))),
        Some(S::Allocated) if ctx.facts.deploy.is_some() => jump(
            OnboardingStage::DeployViaMaas,
            "allocated by this job's deploy, which did not start",
        ),
        _ => None,
    }
}

/// A destructive plan item applied with `--allow-destructive` (DESIGN.md §4): the machine the
/// plan saw in use, read again just now (000 §4.13: refresh before every destructive step) and
/// still in use by someone else, is released so that it can be onboarded. Only that machine,
/// only from a state MAAS releases from, and once per job; anything else is left to the
/// ownership rules of [`adopt_advanced`] (fail closed).
async fn release_taken_over(
    ctx: &mut StageCtx<'_>,
    machine: &MachineSummary,
) -> Result<Option<StageOutcome>, StageFailure> {
    use MaasStatus as S;
    let Some(take_over) = ctx.facts.take_over.clone() else {
        return Ok(None);
    };
    let in_use = matches!(
        machine.status.known(),
        Some(S::Allocated | S::Deploying | S::Deployed | S::FailedDeployment)
    );
    if !in_use
        || ctx.owns_deployment()
        || take_over.system_id != machine.system_id
        || take_over.released_at.is_some()
    {
        return Ok(None);
    }
    let maas = ctx.maas().await?;
    let plan = crate::plan::short_id(&take_over.plan_id);
    maas.release(
        &machine.system_id,
        &ReleaseParams {
            comment: Some(format!(
                "metalform onboarding {}: taken over as plan {plan} allowed (--allow-destructive)",
                ctx.job.id
            )),
            ..ReleaseParams::default()
        },
    )
    .await
    .map_err(|e| StageFailure::maas(&e))?;
    let was = format!(
        "{}, owner {}",
        machine.status_label(),
        machine.owner.as_deref().unwrap_or("none")
    );
    ctx.facts.take_over = Some(crate::stages::onboard::TakeOverFacts {
        released_at: Some(ctx.now),
        was: Some(was.clone()),
        ..take_over
    });
    ctx.checkpoint().await?;
    Ok(Some(StageOutcome::wait(format!(
        "{} was {was}: released to take it over, as plan {plan} allowed",
        machine.system_id
    ))))
}

/// The recent error events of a machine, bounded, for diagnostics (000 §4.12 "upstream
/// diagnostic snippet").
pub(super) async fn error_snippet(ctx: &StageCtx<'_>, machine: &Machine) -> Vec<String> {
    let Ok(maas) = ctx.maas().await else {
        return Vec::new();
    };
    match maas
        .query_events(&EventsQuery::machine(
            machine.system_id.clone(),
            EventLevel::Error,
            5,
        ))
        .await
    {
        Ok(page) => page
            .events
            .iter()
            .map(|e| bounded(&format!("{}: {}", e.event_type, e.description), 300))
            .collect(),
        Err(_) => Vec::new(),
    }
}

/// Name the machine and give MAAS the BMC login (000 §4.3 step 3).
async fn set_identity(
    ctx: &mut StageCtx<'_>,
    machine: &MachineSummary,
) -> Result<(), StageFailure> {
    let power = super::maas_power(ctx).await?;
    let maas = ctx.maas().await?;
    let update = UpdateMachineParams {
        hostname: (machine.hostname != ctx.target.hostname())
            .then(|| ctx.target.hostname().to_owned()),
        power: Some(power),
        ..UpdateMachineParams::default()
    };
    maas.update_machine(&machine.system_id, &update)
        .await
        .map_err(|e| StageFailure::maas(&e))?;
    Ok(())
}

pub(super) async fn ensure_commissioning_started(
    ctx: &mut StageCtx<'_>,
) -> Result<StageOutcome, StageFailure> {
    use MaasStatus as S;
    // Everything decided here is in the machine's summary.
    let machine = ctx.machine_summary().await?;
    if let Some(released) = release_taken_over(ctx, &machine).await? {
        return Ok(released);
    }
    if let Some(adopted) = adopt_advanced(ctx, &machine) {
        return adopted;
    }
    let maas = ctx.maas().await?;
    let sid = machine.system_id.clone();
    match machine.status.known() {
        Some(S::New | S::FailedCommissioning | S::Broken) if !ctx.memory.boot_allowed() => {
            Ok(StageOutcome::wait(super::SLOT_WAIT))
        }
        Some(S::New) => {
            set_identity(ctx, &machine).await?;
            maas.accept(&[&sid])
                .await
                .map_err(|e| StageFailure::maas(&e))?;
            Ok(StageOutcome::done(
                format!("{sid} accepted; commissioning"),
                json!({"action": "accept"}),
            ))
        }
        Some(S::Commissioning | S::Testing) => Ok(StageOutcome::skipped(format!(
            "{sid} is already {}",
            machine.status_label()
        ))),
        Some(S::Ready) => {
            set_identity(ctx, &machine).await?;
            Ok(StageOutcome::skipped(format!(
                "{sid} is already Ready (commissioned)"
            )))
        }
        Some(S::FailedCommissioning | S::Broken) => {
            set_identity(ctx, &machine).await?;
            maas.commission(
                &sid,
                &CommissionParams {
                    enable_ssh: Some(true),
                    skip_bmc_config: Some(true),
                    ..CommissionParams::default()
                },
            )
            .await
            .map_err(|e| StageFailure::maas(&e))?;
            Ok(StageOutcome::done(
                format!("{sid} was {}; commissioning again", machine.status_label()),
                json!({"action": "commission", "from": machine.status_label()}),
            ))
        }
        // MAAS is still releasing it (a datasource retry, an operator's release): soon Ready.
        Some(S::Releasing | S::DiskErasing) => Ok(StageOutcome::wait(format!(
            "{sid} is {}",
            machine.status_label()
        ))),
        _ => Err(unexpected(&machine, "commission")),
    }
}

pub(super) fn unexpected(machine: &impl MachineStanding, what: &str) -> StageFailure {
    StageFailure::ambiguity(
        "unexpected_maas_status",
        format!(
            "{} is {}, which this onboarding cannot {what} from",
            machine.system_id(),
            machine.status_label()
        ),
    )
    .details(json!({"system_id": machine.system_id(), "status": machine.status_label()}))
}

pub(super) async fn ensure_ready(ctx: &mut StageCtx<'_>) -> Result<StageOutcome, StageFailure> {
    use MaasStatus as S;
    // Polled while commissioning runs: the status is all it decides on (a failure reads the
    // machine in full for MAAS's reasons).
    let machine = ctx.machine_status().await?;
    if let Some(adopted) = adopt_advanced(ctx, &machine) {
        return adopted;
    }
    match machine.status.known() {
        Some(S::Ready) => Ok(StageOutcome::done(
            format!("{} is Ready", machine.system_id),
            json!({"status": "Ready"}),
        )),
        Some(S::FailedCommissioning | S::FailedTesting | S::Broken) => {
            let full = ctx.machine().await?;
            let events = error_snippet(ctx, &full).await;
            let reason = full
                .error_description
                .clone()
                .filter(|d| !d.is_empty())
                .or_else(|| full.status_message.clone())
                .unwrap_or_default();
            Err(StageFailure::new(
                FailureClass::HardwareMismatch,
                "failed_commission",
                format!(
                    "commissioning of {} ended {}: {}",
                    machine.system_id,
                    machine.status_label(),
                    bounded(&reason, 300)
                ),
            )
            .details(json!({"system_id": machine.system_id, "maas_events": events}))
            .never_retry())
        }
        Some(S::New | S::Commissioning | S::Testing | S::Releasing | S::DiskErasing) => {
            if let Some(limit) = ctx.timed_out(PolicyTimeout::Commission) {
                return Err(StageFailure::timeout(
                    PolicyTimeout::Commission,
                    limit,
                    &format!(
                        "{} did not become Ready (still {})",
                        machine.system_id,
                        machine.status_label()
                    ),
                ));
            }
            Ok(StageOutcome::wait(format!(
                "{} is {}",
                machine.system_id,
                machine.status_label()
            )))
        }
        _ => Err(unexpected(&machine, "wait for Ready")),
    }
}
