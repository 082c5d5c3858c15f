//! The reimage's redeploy (seed 000 §5.3 ConfigureStorage … WaitForAgentEnrollment): the
//! onboarding stages of the same names, run on the decommission's journal. The node keeps its
//! id (001 §3.3: reimage is an OS reset, not a node replacement): `render_cloud_init` issues a
//! fresh enrollment token for the existing node record, and the agent re-enrolls into it.

use futures::future::BoxFuture;

use super::{DecommissionCtx, DecommissionExtra, DecommissionFacts};
use crate::lifecycle::{DecommissionStage, OnboardingStage};
use crate::stages::Checkpoint;
use crate::stages::onboard::{Facts, StageCtx};
use crate::stages::{Next, StageFailure, StageOutcome};
use crate::store::StoreError;

/// The onboarding stage a redeploy stage runs, if it is one.
pub fn onboarding_stage(stage: DecommissionStage) -> Option<OnboardingStage> {
    use DecommissionStage as D;
    use OnboardingStage as O;
    Some(match stage {
        D::ConfigureStorage => O::ConfigureStorage,
        D::ApplyRocePhase2 => O::ApplyRocePhase2,
        D::EnsurePxeInterfaceAuto => O::EnsurePxeInterfaceAuto,
        D::RenderCloudInit => O::RenderCloudInit,
        D::DeployViaMaas => O::DeployViaMaas,
        D::WaitForDeployed => O::WaitForDeployed,
        D::EnsureHardwareSyncConfigured => O::EnsureHardwareSyncConfigured,
        D::WaitForHardwareSyncHealthy => O::WaitForHardwareSyncHealthy,
        D::WaitForAgentEnrollment => O::WaitForAgentEnrollment,
        _ => return None,
    })
}

/// An onboarding stage's mid-stage checkpoint, written with this family's facts beside it.
struct Bridge<'a> {
    journal: &'a dyn Checkpoint<DecommissionFacts>,
    extra: DecommissionExtra,
}

impl Checkpoint<Facts> for Bridge<'_> {
    fn checkpoint<'a>(&'a self, facts: &'a Facts) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            let whole = DecommissionFacts {
                base: facts.clone(),
                decommission: self.extra.clone(),
            };
            self.journal.checkpoint(&whole).await
        })
    }
}

pub(super) async fn run(
    stage: DecommissionStage,
    ctx: &mut DecommissionCtx<'_>,
) -> Result<StageOutcome, StageFailure> {
    let onboarding = onboarding_stage(stage).ok_or_else(|| {
        StageFailure::ambiguity(
            "not_a_redeploy_stage",
            format!("{stage} is not a redeploy stage"),
        )
    })?;
    let target = ctx.resolved()?.clone();
    let bridge = Bridge {
        journal: ctx.journal,
        extra: ctx.facts.decommission.clone(),
    };
    let outcome = {
        let mut inner = StageCtx {
            env: ctx.env,
            target: &target,
            job: ctx.job,
            facts: &mut ctx.facts.base,
            memory: ctx.memory,
            journal: &bridge,
            fence: &ctx.fence,
            now: ctx.now,
        };
        crate::stages::onboard::run_stage(onboarding, &mut inner).await
    };
    Ok(match outcome {
        // The last onboarding stage completes an onboarding; here enable_node follows.
        StageOutcome::Done(mut done) if done.next == Next::Complete => {
            done.next = Next::Normal;
            StageOutcome::Done(done)
        }
        other => other,
    })
}
