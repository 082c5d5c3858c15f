//! The onboarding job kind (seed 000 §4.3–§4.16, DESIGN.md §4): the 16 stages of
//! `crate::stages::onboard` on the engine, with how work is taken up (onboard a node; resume,
//! rerun or adopt its job; continue a job an operator recovered), the plan's take-over
//! permission, completion (the node becomes `active` and its MAAS binding is recorded) and the
//! compensation table of 000 §4.6:
//!
//! | stage the job was in | cancel | restart clean |
//! |---|---|---|
//! | up to ensure_pxe_interface_auto | nothing (the machine stays as it is in MAAS) | forget the binding |
//! | render_cloud_init | expire the enrollment tokens | same, forget the binding |
//! | deploy_via_maas … recover_for_datasource_retry | release the machine back to Ready, expire tokens | same |
//! | hardware sync, enrollment | expire tokens; MAAS is left alone (the OS runs) | release to Ready, expire tokens |
//!
//! The node record stays (`enrolling`): a cancelled onboarding keeps the identity for the next
//! one, which recovers it (000 §4.6 "Duplicate: recover existing node_id").

use futures::future::BoxFuture;
use serde_json::json;
use uuid::Uuid;

use super::engine::{Compensation, Continuing, Kind, Pass, Run, Stop, profile_limit};
use super::jobs::KindInfo;
use super::outcome::NodeOutcome;
use super::progress::ProgressStatus;
use crate::lifecycle::{
    FailureClass, JobKind, JobState, MaasStatus, NodeState, OnboardingStage, Owner, RecoveryAction,
};
use crate::plan::NodeTarget;
use crate::provider::maas::{MaasError, ReleaseParams};
use crate::stages::onboard::{Facts, StageCtx, TakeOverFacts};
use crate::stages::{Next, NodeMemory, StageDone, StageFailure, StageOutcome};
use crate::store::{
    EventStatus, Job, JobFailure, JobFilter, JobUpdate, MaasStateUpdate, NewOnboarding, StageEvent,
    Store, StoreError,
};

/// What to do for one node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Work {
    /// Start an onboarding (or continue the node's open, running one).
    Onboard,
    /// Continue an open job; a failed one is resumed (an audited recovery action).
    Resume { job_id: Uuid },
    /// Re-enter a failed job from the top with status-aware adoption.
    Rerun { job_id: Uuid },
    /// Accept a machine that is already deployed; success ends `reconciled`.
    Adopt {
        job_id: Option<Uuid>,
        system_id: String,
    },
    /// Run a job an operator already moved (`metalform jobs resume|retry|…`).
    Continue { job_id: Uuid },
}

#[derive(Debug, Clone, PartialEq)]
pub struct WorkItem {
    pub target: NodeTarget,
    pub work: Work,
    /// The plan item this work comes from, if any.
    pub plan: Option<FromPlan>,
}

impl WorkItem {
    /// Work that no plan asked for (an operator's recovery action, a test).
    pub fn new(target: NodeTarget, work: Work) -> Self {
        Self {
            target,
            work,
            plan: None,
        }
    }
}

/// The plan item a work item comes from: its plan id goes into the `plan_id` of the jobs it
/// creates, and the plan id and the item's reason into the audit of the recovery actions it
/// takes (resume, rerun, adopt).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FromPlan {
    pub plan_id: String,
    pub reason: String,
    /// A destructive onboard item applied with `--allow-destructive`: the machine in use (its
    /// system id at plan time) the onboarding may release to take it over. Recorded in the
    /// job's journal, so a restarted apply keeps the permission and no other machine gets it.
    pub takes_over: Option<String>,
}

impl FromPlan {
    /// `plan sha256:0123456789ab: REASON`, the audit reason.
    pub fn audit_reason(&self) -> String {
        format!(
            "plan {}: {}",
            crate::plan::short_id(&self.plan_id),
            self.reason
        )
    }
}

/// The onboarding kind.
pub struct Onboarding;

/// What the job services, the CLI and the API need to know of the kind.
pub(super) const INFO: KindInfo = KindInfo {
    kind: JobKind::Onboarding,
    plural: "onboardings",
    actions: RecoveryAction::ALL,
    reason_example: "BOSS card replaced (ticket HW-2291)",
    column: None,
    request: request_lines,
    journal: journal_lines,
    extras: |_| serde_json::Map::new(),
    needs_manifests: true,
    cancel_with_store: None,
};

/// What an onboarding's detail view shows of its request.
fn request_lines(job: &Job) -> Vec<(&'static str, String)> {
    if job.adopted {
        vec![("adopted", "yes (success ends reconciled)".into())]
    } else {
        Vec::new()
    }
}

/// What an onboarding's detail view shows of its journal: the node record, the deploy round,
/// warnings.
fn journal_lines(job: &Job) -> Vec<(&'static str, String)> {
    let facts = Facts::from_details(&job.stage_details);
    let mut lines = Vec::new();
    if let Some(node) = job.node_id {
        lines.push(("node record", node.to_string()));
    }
    if let Some(deploy) = &facts.deploy {
        lines.push((
            "deploy",
            format!(
                "round {} ({}), {}",
                deploy.round,
                deploy.distro_series,
                if deploy.received {
                    "received by MAAS"
                } else {
                    "intent recorded, not confirmed"
                }
            ),
        ));
    }
    if !facts.warnings.is_empty() {
        lines.push(("warnings", facts.warnings.join("; ")));
    }
    lines
}

impl Kind for Onboarding {
    const KIND: JobKind = JobKind::Onboarding;
    type Stage = OnboardingStage;
    type Facts = Facts;
    type Item = WorkItem;

    /// The job the plan item names, when it names one.
    fn job_of(item: &WorkItem) -> Option<Uuid> {
        item.target.job_id
    }

    fn node(item: &WorkItem) -> (&str, &str) {
        (item.target.site_name(), item.target.hostname())
    }

    fn limit(item: &WorkItem) -> Option<((String, String), usize)> {
        Some(profile_limit(&item.target))
    }

    /// `maxParallel` bounds the machines a site boots at once (the seed's concern: rack
    /// controllers' PXE capacity), from the commissioning of a machine that needs one, or its
    /// deploy, to the agent's enrollment; nodes ahead prepare meanwhile, so a slot freed by one
    /// node goes to a node ready to deploy at once.
    const PREPARES_AHEAD: bool = true;

    /// Finding the machine boots nothing (a discovery asks for a slot before it PXE-boots a
    /// machine MAAS does not have), nor do configuring a Ready one and rendering its payload.
    fn needs_slot(stage: OnboardingStage, memory: &NodeMemory) -> bool {
        use OnboardingStage as S;
        let seen_ready = || {
            memory
                .observed
                .as_ref()
                .and_then(|o| o.status.as_deref())
                .and_then(MaasStatus::from_name)
                == Some(MaasStatus::Ready)
        };
        match stage {
            S::LoadSiteConfig
            | S::ResolvePowerCredentials
            | S::CreateOrFindInMaas
            | S::ConfigureStorage
            | S::ApplyRocePhase2
            | S::EnsurePxeInterfaceAuto
            // The deploy renews the token if it waited too long for the place.
            | S::RenderCloudInit => false,
            // Commissioning boots the machine; one just seen Ready is not commissioned (the
            // stage asks for a slot if MAAS says otherwise by then).
            S::CommissionNode | S::WaitForReady => !seen_ready(),
            S::DeployViaMaas
            | S::WaitForDeployed
            | S::ClassifyDeployFailure
            | S::RecoverForDatasourceRetry
            | S::EnsureHardwareSyncConfigured
            | S::WaitForHardwareSyncHealthy
            | S::WaitForAgentEnrollment => true,
        }
    }

    /// A failed onboarding is retried by the reconciler (resume or rerun) after its backoff.
    fn retry_spec(item: &WorkItem) -> Option<String> {
        Some(item.target.spec_hash())
    }

    fn continue_job(asked: Continuing<'_>) -> Result<WorkItem, String> {
        let job_id = asked.job.id;
        let work = if asked.resume {
            Work::Resume { job_id }
        } else {
            Work::Continue { job_id }
        };
        let target = asked.target.ok_or(
            "the node is not in the fleet's manifests: the stages need its site and profile",
        )?;
        Ok(WorkItem::new(target, work))
    }

    fn take_up<'a>(run: &'a mut Run<'_, Self>) -> BoxFuture<'a, Result<Job, Stop>> {
        Box::pin(take_up(run))
    }

    /// Record the plan's permission to release a machine in use (journaled by the next write,
    /// before any stage acts on it).
    fn prepare(run: &Run<'_, Self>, facts: &mut Facts) {
        if facts.take_over.is_some() {
            return;
        }
        if let Some(plan) = &run.item.plan
            && let Some(system_id) = &plan.takes_over
        {
            facts.take_over = Some(TakeOverFacts {
                system_id: system_id.clone(),
                plan_id: plan.plan_id.clone(),
                released_at: None,
                was: None,
            });
        }
    }

    fn run_stage<'a>(stage: OnboardingStage, pass: Pass<'a, Self>) -> BoxFuture<'a, StageOutcome> {
        Box::pin(async move {
            let mut ctx = StageCtx {
                env: pass.env,
                target: &pass.item.target,
                job: pass.job,
                facts: pass.facts,
                memory: pass.memory,
                journal: pass.journal,
                fence: &pass.fence,
                now: pass.now,
            };
            crate::stages::onboard::run_stage(stage, &mut ctx).await
        })
    }

    fn next(
        _job: &Job,
        stage: OnboardingStage,
        done: &StageDone,
    ) -> Result<Option<OnboardingStage>, StageFailure> {
        match done.next {
            Next::Normal => Ok(stage.next()),
            Next::Complete => Ok(None),
            Next::Jump(to) => to
                .parse()
                .map(Some)
                .map_err(|e: crate::lifecycle::UnknownName| {
                    StageFailure::ambiguity("unknown_stage", e.to_string())
                }),
        }
    }

    fn is_first(_job: &Job, stage: OnboardingStage) -> bool {
        stage == OnboardingStage::first()
    }

    fn retry_budget(stage: OnboardingStage, class: FailureClass) -> Option<u32> {
        crate::stages::retry_budget(stage, class)
    }

    fn completion<'a>(
        _run: &'a Run<'_, Self>,
        _job: &'a Job,
    ) -> BoxFuture<'a, Result<Option<(NodeState, Owner)>, StoreError>> {
        Box::pin(async { Ok(Some((NodeState::Active, Owner::OnboardingWorkflow))) })
    }

    /// The runtime MAAS binding of an active node (000 §6.5); a failure here does not undo
    /// the onboarding, the reconciler records it again.
    fn completed<'a>(run: &'a Run<'_, Self>, job: &'a Job, facts: &'a Facts) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            if let (Some(node), Some(system_id), Some(observed)) = (
                job.node_id,
                facts.system_id.clone(),
                run.memory().observed.clone(),
            ) {
                let _ = run
                    .store()
                    .upsert_maas_state(&MaasStateUpdate {
                        node_id: node,
                        site: run.item.target.site_name().to_owned(),
                        maas_system_id: system_id,
                        status: observed.status,
                        power_state: observed.power_state,
                        ips: observed.ips,
                        drift: None,
                    })
                    .await;
            }
        })
    }

    fn compensate<'a>(
        run: &'a Run<'_, Self>,
        job: &'a Job,
        how: Compensation,
    ) -> BoxFuture<'a, Result<NodeOutcome, StoreError>> {
        Box::pin(compensate(run, job, how))
    }
}

/// Why the executor takes a recovery action (resume, rerun, adopt): the plan item's reason,
/// else the executor's.
fn audit_reason(run: &Run<'_, Onboarding>) -> Option<String> {
    run.item
        .plan
        .as_ref()
        .map(FromPlan::audit_reason)
        .or_else(|| run.options().reason.clone())
}

/// The open onboarding of a site/hostname, if any.
async fn open_onboarding(
    store: &Store,
    site: &str,
    hostname: &str,
) -> Result<Option<Job>, StoreError> {
    // The node's own open jobs: a wave keeps dozens of a site's open, read whole otherwise.
    let jobs = store
        .list_jobs(
            JobKind::Onboarding,
            &JobFilter {
                site: Some(site.to_owned()),
                hostname: Some(hostname.to_owned()),
                open_only: true,
                ..JobFilter::default()
            },
        )
        .await?;
    Ok(jobs.into_iter().next())
}

fn new_onboarding(run: &Run<'_, Onboarding>) -> NewOnboarding {
    let target = &run.item.target;
    NewOnboarding {
        node_id: target.node_id,
        site: target.site_name().to_owned(),
        hostname: target.hostname().to_owned(),
        ipmi_ip: Some(target.node.bmc.ipmi_ip.to_string()),
        pxe_mac: target.node.pxe_mac.map(|m| m.to_string()),
        batch_id: run.options().batch_id.clone(),
        requested_by: Some(run.env().actor.name.clone()),
        plan_id: run.item.plan.as_ref().map(|p| p.plan_id.clone()),
    }
}

/// Create the node's onboarding. Refused as open only when another executor created one since
/// this one looked (it lost the node's lease while paused): that one carries the node on.
async fn create_onboarding(run: &Run<'_, Onboarding>) -> Result<Job, Stop> {
    match run.store().create_onboarding(&new_onboarding(run)).await {
        Err(StoreError::JobOpen { job, .. }) => Err(Stop::Result(NodeOutcome::Aborted {
            reason: format!(
                "another executor started onboarding {job} meanwhile; it carries the node on"
            ),
        })),
        other => Ok(other?),
    }
}

/// Find or create the job the work item names, and move it to where it can run.
async fn take_up(run: &mut Run<'_, Onboarding>) -> Result<Job, Stop> {
    let target = &run.item.target;
    let reason = audit_reason(run);
    let job = match &run.item.work {
        Work::Onboard => {
            match open_onboarding(run.store(), target.site_name(), target.hostname()).await? {
                Some(job) if matches!(job.state, JobState::Pending | JobState::Running) => {
                    run.report(
                        "-",
                        ProgressStatus::Begin,
                        &format!(
                            "continuing onboarding {} at {} (an earlier run stopped)",
                            job.id, job.stage
                        ),
                    );
                    job
                }
                Some(job) => {
                    return Err(Stop::left(format!(
                        "onboarding {} is {} at {}: recover it with `metalform onboardings`",
                        job.id, job.state, job.stage
                    )));
                }
                None => {
                    // Another executor (a second apply, a daemon replica) may have finished the
                    // node while this one waited for the lease: nothing to onboard then.
                    if let Some(node) = run
                        .store()
                        .find_node(target.site_name(), target.hostname())
                        .await?
                        .filter(|n| n.status != NodeState::Enrolling)
                    {
                        return Err(Stop::left(format!(
                            "node {} is {}: nothing to onboard",
                            node.id, node.status
                        )));
                    }
                    let job = create_onboarding(run).await?;
                    run.report(
                        "-",
                        ProgressStatus::Begin,
                        &format!("onboarding {} created", job.id),
                    );
                    job
                }
            }
        }
        Work::Resume { job_id } | Work::Rerun { job_id } => {
            let action = if matches!(run.item.work, Work::Rerun { .. }) {
                RecoveryAction::Rerun
            } else {
                RecoveryAction::Resume
            };
            let job = run.store().job(JobKind::Onboarding, *job_id).await?;
            let job = if job.state == JobState::Compensating {
                // An operator's cancel or restart-clean whose executor stopped: finish it.
                run.finish_compensation(&job).await?
            } else if job.state.is_failed() {
                run.store()
                    .recover_job(
                        JobKind::Onboarding,
                        *job_id,
                        action,
                        &run.env().actor,
                        reason.as_deref(),
                    )
                    .await?
            } else {
                job
            };
            run.report(
                "-",
                ProgressStatus::Begin,
                &format!("{action} onboarding {} at {}", job.id, job.stage),
            );
            job
        }
        Work::Adopt { job_id, system_id } => take_up_adoption(run, *job_id, system_id).await?,
        Work::Continue { job_id } => {
            let job = run.store().job(JobKind::Onboarding, *job_id).await?;
            run.report(
                "-",
                ProgressStatus::Begin,
                &format!("onboarding {} {} at {}", job.id, job.state, job.stage),
            );
            job
        }
    };
    match job.state {
        JobState::Pending | JobState::Running => Ok(job),
        other => Err(Stop::left(format!(
            "onboarding {} is {other}; nothing to run",
            job.id
        ))),
    }
}

/// Accept a machine that is already deployed (and enrolled): bind it and let the stages check
/// it; success ends `reconciled` (000 §4.9 adopt_observed_state).
async fn take_up_adoption(
    run: &Run<'_, Onboarding>,
    job_id: Option<Uuid>,
    system_id: &str,
) -> Result<Job, Stop> {
    let target = &run.item.target;
    let job = match job_id {
        Some(id) => run.store().job(JobKind::Onboarding, id).await?,
        None => match open_onboarding(run.store(), target.site_name(), target.hostname()).await? {
            Some(job) => job,
            None => create_onboarding(run).await?,
        },
    };
    if job.state.is_terminal() || job.state == JobState::Compensating {
        return Err(Stop::left(format!(
            "onboarding {} is {}; nothing to adopt",
            job.id, job.state
        )));
    }
    // A failed job is recovered first (failed -> running, audited); a pending or running one
    // is bound to the machine first, then marked adopted.
    let job = if job.state.is_failed() {
        mark_adopted(run, job).await?
    } else {
        job
    };
    let mut facts = Facts::from_details(&job.stage_details);
    facts.system_id = Some(system_id.to_owned());
    facts.matched_by = Some("adopted".into());
    let node = match job.node_id.or(target.node_id) {
        Some(id) => Some(id),
        None => run
            .store()
            .find_node(target.site_name(), target.hostname())
            .await?
            .map(|n| n.id),
    };
    facts.node_id = node;
    let mut update = JobUpdate::new(JobState::Running);
    update.stage_details = Some(facts.to_details());
    update.maas_system_id = Some(system_id.to_owned());
    update.node_id = job.node_id.is_none().then_some(node).flatten();
    update.fence = Some(run.fence());
    let job = run
        .store()
        .advance_job(JobKind::Onboarding, job.id, &update)
        .await?;
    let job = mark_adopted(run, job).await?;
    run.report(
        "-",
        ProgressStatus::Begin,
        &format!("adopting {system_id} (onboarding {})", job.id),
    );
    Ok(job)
}

/// The audited adopt_observed_state recovery action (000 §4.9) on a job not adopted yet, or
/// failed.
async fn mark_adopted(run: &Run<'_, Onboarding>, job: Job) -> Result<Job, StoreError> {
    if job.ends_reconciled && !job.state.is_failed() {
        return Ok(job);
    }
    let reason =
        audit_reason(run).unwrap_or_else(|| "adopting a machine that is already deployed".into());
    run.store()
        .recover_job(
            JobKind::Onboarding,
            job.id,
            RecoveryAction::AdoptObservedState,
            &run.env().actor,
            Some(&reason),
        )
        .await
}

/// The compensation of the table above, under the node lease.
async fn compensate(
    run: &Run<'_, Onboarding>,
    job: &Job,
    how: Compensation,
) -> Result<NodeOutcome, StoreError> {
    let store = run.store();
    let job_id = job.id;
    let facts = Facts::from_details(&job.stage_details);
    let stage: OnboardingStage = job.stage.parse()?;
    let mut actions: Vec<String> = Vec::new();
    let deploy_stage = matches!(
        stage,
        OnboardingStage::DeployViaMaas
            | OnboardingStage::WaitForDeployed
            | OnboardingStage::ClassifyDeployFailure
            | OnboardingStage::RecoverForDatasourceRetry
    );
    let ours = facts.deploy.is_some() || job.adopted;
    let release = ours
        && match how {
            Compensation::Cancel => deploy_stage,
            Compensation::RestartClean => true,
        };
    if release && let Some(system_id) = facts.system_id.clone() {
        match release_to_ready(run, &system_id).await {
            Ok(Some(what)) => actions.push(what),
            Ok(None) => {}
            Err(err) => {
                let message = format!("compensation failed: releasing {system_id}: {err}");
                let mut update = JobUpdate::new(JobState::FailedManualIntervention);
                update.failure = Some(JobFailure {
                    class: if err.is_retryable() {
                        FailureClass::UpstreamTransient
                    } else {
                        FailureClass::StateAmbiguity
                    },
                    code: "compensation_failed".into(),
                    message: message.clone(),
                    details: json!({"system_id": system_id, "compensation": format!("{how:?}")}),
                });
                update.fence = Some(run.fence());
                let failed = store
                    .advance_job(JobKind::Onboarding, job_id, &update)
                    .await?;
                return Ok(NodeOutcome::Failed {
                    state: failed.state,
                    class: failed.failure_class.unwrap_or(FailureClass::StateAmbiguity),
                    code: "compensation_failed".into(),
                    message,
                });
            }
        }
    }
    if let Some(node) = job.node_id.or(facts.node_id) {
        let expired = store.expire_enrollment_tokens(node, &run.fence()).await?;
        if expired > 0 {
            actions.push(format!("{expired} enrollment token(s) expired"));
        }
    }
    if actions.is_empty() {
        actions.push("nothing to undo at this stage".into());
    }
    let message = actions.join("; ");
    let event = StageEvent {
        stage: job.stage.clone(),
        attempt: job.attempt,
        status: EventStatus::Compensated,
        message: Some(message.clone()),
        details: json!({"compensation": format!("{how:?}"), "actions": actions}),
    };
    let mut update = match how {
        Compensation::Cancel => JobUpdate::new(JobState::Cancelled),
        Compensation::RestartClean => {
            let mut update = JobUpdate::new(JobState::Pending);
            update.stage = Some(OnboardingStage::first().as_str().into());
            update.attempt = Some(0);
            // Known progress is reset; only the node record is kept for the new start.
            let fresh = Facts {
                node_id: job.node_id.or(facts.node_id),
                ..Facts::default()
            };
            update.stage_details = Some(fresh.to_details());
            update
        }
    };
    update.event = Some(event);
    update.fence = Some(run.fence());
    let done = store
        .advance_job(JobKind::Onboarding, job_id, &update)
        .await?;
    run.report(
        &job.stage,
        ProgressStatus::Succeeded,
        &format!("compensated: {message}"),
    );
    Ok(NodeOutcome::Left {
        reason: format!("onboarding {job_id} {}: {message}", done.state),
    })
}

/// Release a machine this job deployed back to Ready. `Ok(None)`: nothing to release.
async fn release_to_ready(
    run: &Run<'_, Onboarding>,
    system_id: &str,
) -> Result<Option<String>, MaasError> {
    let maas = run
        .env()
        .maas
        .client(&run.item.target.site)
        .await
        .map_err(|f| MaasError::Config { message: f.message })?;
    let machine = match maas.read_machine(system_id).await {
        Ok(machine) => machine,
        Err(MaasError::NotFound { .. }) => {
            return Ok(Some(format!("{system_id} is no longer in MAAS")));
        }
        Err(err) => return Err(err),
    };
    use MaasStatus as S;
    if !matches!(
        machine.status.known(),
        Some(S::Allocated | S::Deploying | S::Deployed | S::FailedDeployment)
    ) {
        return Ok(None);
    }
    maas.release(
        system_id,
        &ReleaseParams {
            comment: Some("metalform: onboarding compensation".into()),
            ..ReleaseParams::default()
        },
    )
    .await?;
    Ok(Some(format!(
        "{system_id} released back to Ready (was {})",
        machine.status_label()
    )))
}
