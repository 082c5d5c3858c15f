//! The registry of job kinds: what each kind offers ([`info`]) and the carrying out of a
//! recorded recovery action by the engine of the job's kind ([`Engine::carry_out`]). Adding a
//! kind adds one arm to each match here (docs/architecture.md "How to add a job kind").

use super::decommission::Decommission;
use super::engine::{Compensation, Continuing, Engine, Kind};
use super::jobs::KindInfo;
use super::onboarding::Onboarding;
use super::outcome::{ApplyReport, NodeOutcome, NodeResult};
use super::provisioning::Provisioning;
use super::recovery::{Execution, Recovery};
use crate::lifecycle::{JobKind, JobState};
use crate::plan::NodeTarget;

/// The kind's description.
pub fn info(kind: JobKind) -> &'static KindInfo {
    match kind {
        JobKind::Onboarding => &super::onboarding::INFO,
        JobKind::Decommission => &super::decommission::INFO,
        JobKind::Provisioning => &super::provisioning::INFO,
    }
}

impl<K: Kind> Engine<K> {
    /// Carry out a recorded action for its node (`target`, the node as the manifests resolve
    /// it): what [`Recovery::execution`] says, by the engine of the job's kind.
    pub async fn carry_out(&self, target: NodeTarget, recovery: &Recovery) -> ApplyReport {
        self.carry_out_on(Some(target), recovery).await
    }

    /// [`Engine::carry_out`] for a node the manifests may no longer resolve.
    pub async fn carry_out_on(
        &self,
        target: Option<NodeTarget>,
        recovery: &Recovery,
    ) -> ApplyReport {
        match recovery.job.kind {
            JobKind::Onboarding => carry::<Onboarding>(&self.of(), target, recovery).await,
            JobKind::Decommission => carry::<Decommission>(&self.of(), target, recovery).await,
            JobKind::Provisioning => carry::<Provisioning>(&self.of(), target, recovery).await,
        }
    }
}

async fn carry<K: Kind>(
    engine: &Engine<K>,
    target: Option<NodeTarget>,
    recovery: &Recovery,
) -> ApplyReport {
    let job = &recovery.job;
    let item = |resume| {
        let asked = Continuing {
            job,
            target: target.clone(),
            resume,
        };
        K::continue_job(asked).map_err(|reason| NodeResult {
            node: format!("{}/{}", job.site, job.hostname),
            job_id: Some(job.id),
            outcome: NodeOutcome::Left { reason },
        })
    };
    let run = async |item: Result<K::Item, NodeResult>| match item {
        Ok(item) => engine.run(vec![item]).await,
        Err(result) => ApplyReport {
            results: vec![result],
        },
    };
    match recovery.execution {
        Execution::Nothing => ApplyReport::default(),
        Execution::Continue => run(item(false)).await,
        Execution::FinishCompensation => run(item(true)).await,
        Execution::Compensate(how) => {
            let compensated = match item(false) {
                Ok(item) => engine.compensate(item, job.id, how).await,
                Err(result) => result,
            };
            let pending = engine
                .env()
                .store
                .job(K::KIND, job.id)
                .await
                .is_ok_and(|job| job.state == JobState::Pending);
            if how == Compensation::RestartClean && pending {
                run(item(false)).await
            } else {
                ApplyReport {
                    results: vec![compensated],
                }
            }
        }
    }
}
