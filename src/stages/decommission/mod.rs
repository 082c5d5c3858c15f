//! The decommission stages of seed 000 §5.2–§5.5 (names of 001 §5.2), each an idempotent
//! `ensure_*` with the failure model of §5.8: bounded retries, then manual intervention when
//! ownership becomes ambiguous (the agent unreachable, MAAS not converging, uninstall failing
//! after retirement).
//!
//! | file | stages |
//! |---|---|
//! | `host` | disable_node, force_release_allocations, drain_node, cleanup_storage, scrub_gpu, validate_clean_node, enable_node (agent tasks, 000 §5.6) |
//! | `maas` | load_site_config, release_maas_node (erase with the no-erase fallback), power_off_maas_node, remove_maas_record |
//! | `inventory` | retire_gpuaas_node, remove_gpuaas_node_record, cleanup_secrets |
//! | `redeploy` | the reimage's redeploy stages, run by the onboarding stages of the same names |
//!
//! The journal of a decommission keeps the onboarding [`Facts`] (clock, retries, machine, and
//! for a reimage the redeploy's facts) with this family's own under `decommission`.

mod host;
mod inventory;
mod maas;
mod redeploy;

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::json;
use uuid::Uuid;

use super::onboard::Facts;
use super::{
    Checkpoint, JournalFacts, NodeMemory, StageClock, StageEnv, StageFailure, StageOutcome,
};
use crate::agent::TaskType;
use crate::lifecycle::{DecommissionMode, DecommissionStage, FailureClass};
use crate::model::EraseMode;
use crate::plan::NodeTarget;
use crate::store::{Fence, Job, JobSpec, TaskStatus};

pub use redeploy::onboarding_stage;

/// What the executor needs for one node's decommission.
#[derive(Debug, Clone, PartialEq)]
pub struct DecommissionTarget {
    pub node_id: Uuid,
    pub site: String,
    pub hostname: String,
    /// The node as the manifests resolve it (site, profile, BMC login): required by the modes
    /// that work on MAAS (reimage, full decommission, retire); soft reset and storage cleanup
    /// only talk to the node agent.
    pub resolved: Option<NodeTarget>,
}

impl DecommissionTarget {
    pub fn label(&self) -> String {
        format!("{}/{}", self.site, self.hostname)
    }
}

/// A release this job issued (written before the MAAS call, like the deploy intent: a
/// restarted executor re-reads the machine instead of releasing again).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReleaseFacts {
    pub intent_at: DateTime<Utc>,
    /// none | quick | secure
    pub erase: String,
    /// MAAS took it (its answer, or a re-read showing Releasing/Disk erasing/Ready).
    pub received: bool,
    /// This release is the no-erase fallback after a failed erase.
    pub fallback: bool,
}

/// A power-off this job issued.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PowerOffFacts {
    pub intent_at: DateTime<Utc>,
    pub received: bool,
}

/// This family's facts, beside the onboarding ones.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct DecommissionExtra {
    /// The agent task of each step (`<stage>/<task type>`): re-ensured on every pass, so a
    /// stale lease is re-queued and a live one never duplicated (001 §8).
    pub tasks: BTreeMap<String, Uuid>,
    /// Releases issued, oldest first (the erase and, if it failed, the no-erase fallback).
    pub releases: Vec<ReleaseFacts>,
    pub power_off: Option<PowerOffFacts>,
    /// The machine was Deployed when the job started (a retire/decommission of a machine that
    /// was already released has nothing to release).
    pub started_deployed: Option<bool>,
    /// Follow-up work the job could not do but did not block on (000 §5.8 CleanupSecrets,
    /// RemoveMaasRecord: "mark follow-up action").
    pub follow_ups: Vec<String>,
    /// A reimage: the manifest's `reimage.generation` it was started for, journaled on its
    /// first stage and recorded on the node when it completes (the planner compares it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reimage_generation: Option<u64>,
    /// The node's state when DisableNode took it out of scheduling (an offline or quarantined
    /// node is `draining` or `quarantined` afterwards): whether an agent can take the tasks
    /// that follow depends on it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disabled_from: Option<crate::lifecycle::NodeState>,
}

/// A decommission's journal facts.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct DecommissionFacts {
    #[serde(flatten)]
    pub base: Facts,
    pub decommission: DecommissionExtra,
}

impl DecommissionFacts {
    pub fn from_details(details: &serde_json::Value) -> Self {
        serde_json::from_value(details.clone()).unwrap_or_default()
    }

    pub fn to_details(&self) -> serde_json::Value {
        serde_json::to_value(self).unwrap_or_default()
    }

    /// The last release this job issued.
    pub fn release(&self) -> Option<&ReleaseFacts> {
        self.decommission.releases.last()
    }
}

impl JournalFacts for DecommissionFacts {
    fn from_details(details: &serde_json::Value) -> Self {
        DecommissionFacts::from_details(details)
    }

    fn to_details(&self) -> serde_json::Value {
        DecommissionFacts::to_details(self)
    }

    fn clock(&mut self) -> &mut Option<StageClock> {
        self.base.clock()
    }

    fn retries(&mut self) -> &mut u32 {
        self.base.retries()
    }

    fn operator_moved(&mut self, from_top: bool) {
        self.base.operator_moved(from_top);
    }

    fn node_id(&self) -> Option<Uuid> {
        self.base.node_id
    }

    fn system_id(&self) -> Option<String> {
        self.base.system_id.clone()
    }
}

/// How long the decommission stages wait: the profile's `timeouts` (agentTask, release,
/// powerOff), or their defaults for a node the manifests no longer resolve.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DecommissionTiming {
    /// An agent task must finish within this (from its stage attempt's start); then the agent
    /// counts as unreachable (000 §5.8 DrainNode).
    pub agent_task: Duration,
    /// MAAS must finish a release (and its erase) within this.
    pub release: Duration,
    /// MAAS must report the machine off within this.
    pub power_off: Duration,
}

impl DecommissionTiming {
    pub fn of(timeouts: &crate::model::Timeouts) -> Self {
        Self {
            agent_task: timeouts.agent_task,
            release: timeouts.release,
            power_off: timeouts.power_off,
        }
    }

    /// The target's profile's, else the defaults.
    pub fn for_target(target: &DecommissionTarget) -> Self {
        match &target.resolved {
            Some(resolved) => Self::of(&resolved.profile.timeouts),
            None => Self::of(&crate::model::Timeouts::defaults()),
        }
    }
}

/// One pass of one decommission stage.
pub struct DecommissionCtx<'a> {
    pub env: &'a StageEnv,
    pub target: &'a DecommissionTarget,
    pub job: &'a Job,
    pub facts: &'a mut DecommissionFacts,
    pub memory: &'a mut NodeMemory,
    pub journal: &'a dyn Checkpoint<DecommissionFacts>,
    /// The executor's lease: node transitions made by stages carry it.
    pub fence: Fence,
    pub timing: DecommissionTiming,
    pub now: DateTime<Utc>,
}

impl DecommissionCtx<'_> {
    pub fn mode(&self) -> DecommissionMode {
        self.job
            .mode()
            .unwrap_or(DecommissionMode::FullDecommission)
    }

    /// `storage_cleanup` of the request: none | local | weka | all (soft reset default none;
    /// storage-only cleanup default all).
    pub fn storage_scope(&self) -> String {
        let asked = match &self.job.spec {
            JobSpec::Decommission {
                storage_cleanup, ..
            } => storage_cleanup.clone(),
            JobSpec::Onboarding { .. } | JobSpec::Provisioning { .. } => None,
        };
        asked.unwrap_or_else(|| {
            if self.mode() == DecommissionMode::StorageCleanup {
                "all".into()
            } else {
                "none".into()
            }
        })
    }

    /// The erase mode of the request, else the node's (manifest), else quick.
    pub fn erase(&self) -> EraseMode {
        let asked = match &self.job.spec {
            JobSpec::Decommission { erase, .. } => erase.as_deref().and_then(parse_erase),
            JobSpec::Onboarding { .. } | JobSpec::Provisioning { .. } => None,
        };
        asked
            .or_else(|| {
                self.target
                    .resolved
                    .as_ref()
                    .map(|t| t.node.decommission.erase)
            })
            .unwrap_or(EraseMode::Quick)
    }

    /// Site policy `release_fallback_no_erase` (the profile's `release.fallbackNoErase`).
    pub fn fallback_no_erase(&self) -> bool {
        self.target
            .resolved
            .as_ref()
            .is_none_or(|t| t.profile.release.fallback_no_erase)
    }

    pub fn resolved(&self) -> Result<&NodeTarget, StageFailure> {
        self.target.resolved.as_ref().ok_or_else(|| {
            StageFailure::new(
                FailureClass::InputConfigError,
                "node_not_in_manifests",
                format!(
                    "{} is not in the fleet's manifests, so its site and profile are unknown",
                    self.target.label()
                ),
            )
            .details(json!({"hint": "add the node back to the manifests (with its lifecycle) and retry"}))
        })
    }

    /// How long the current stage attempt has been running.
    pub fn elapsed(&self) -> Duration {
        StageClock::elapsed(self.facts.base.clock.as_ref(), self.now)
    }

    pub async fn checkpoint(&self) -> Result<(), StageFailure> {
        super::checkpoint(self.journal, self.facts).await
    }

    /// Run agent tasks one after another (000 §5.6): each is ensured (created once, re-queued
    /// when its lease went stale, never duplicated while live), then waited for. Done when
    /// all succeeded; a failed task or an agent that does not finish in time is a failure.
    pub async fn run_tasks(
        &mut self,
        stage: DecommissionStage,
        tasks: &[(TaskType, serde_json::Value)],
    ) -> Result<Option<String>, StageFailure> {
        let store = self.env.store.clone();
        for (task_type, params) in tasks {
            let key = format!("{stage}/{task_type}");
            let known = match self.facts.decommission.tasks.get(&key) {
                Some(id) => Some(store.task(*id).await.map_err(|e| StageFailure::store(&e))?),
                None => None,
            };
            let task = match known {
                Some(task) if task.status == TaskStatus::Succeeded => continue,
                Some(task) if task.status == TaskStatus::Failed => {
                    // Failed: the next attempt (a retry) starts a fresh task.
                    self.facts.decommission.tasks.remove(&key);
                    self.checkpoint().await?;
                    return Err(StageFailure::new(
                        FailureClass::PostDeployConnectivityFailure,
                        "agent_task_failed",
                        format!(
                            "the node agent reported {task_type} failed: {}",
                            task.result_message.as_deref().unwrap_or("no message")
                        ),
                    )
                    .details(json!({
                        "task_id": task.id,
                        "task": task_type.as_str(),
                        "result": task.result_details,
                    })));
                }
                // Open: a stale lease is re-queued, a live one or a queued task left alone.
                Some(task) => {
                    store
                        .requeue_if_stale(task.id)
                        .await
                        .map_err(|e| StageFailure::store(&e))?
                        .0
                }
                // None yet: create it (idempotent: an open one of the type is reused).
                None => {
                    let (task, _) = store
                        .ensure_task(
                            self.target.node_id,
                            task_type.as_str(),
                            params,
                            Some(&self.job.id.to_string()),
                        )
                        .await
                        .map_err(|e| StageFailure::store(&e))?;
                    self.facts.decommission.tasks.insert(key, task.id);
                    self.checkpoint().await?;
                    task
                }
            };
            if task.status == TaskStatus::Succeeded {
                continue;
            }
            if self.elapsed() > self.timing.agent_task {
                return Err(StageFailure::new(
                    FailureClass::PostDeployConnectivityFailure,
                    "agent_unreachable",
                    format!(
                        "the node agent did not finish {task_type} within {} (task {} is {}, handed out {} time(s))",
                        crate::model::duration::format(self.timing.agent_task),
                        task.id,
                        task.status.as_str(),
                        task.dispatch_count
                    ),
                )
                .details(json!({"task_id": task.id, "task": task_type.as_str(),
                    "hint": "check the node agent on the host; MAAS was not touched"})));
            }
            return Ok(Some(format!(
                "waiting for the node agent to run {task_type} ({})",
                task.status.as_str()
            )));
        }
        Ok(None)
    }
}

/// `none`, `quick`, `secure`.
pub fn parse_erase(text: &str) -> Option<EraseMode> {
    Some(match text {
        "none" => EraseMode::None,
        "quick" => EraseMode::Quick,
        "secure" => EraseMode::Secure,
        _ => return None,
    })
}

pub fn erase_name(mode: EraseMode) -> &'static str {
    match mode {
        EraseMode::None => "none",
        EraseMode::Quick => "quick",
        EraseMode::Secure => "secure",
    }
}

/// Run one pass of a decommission stage. The reimage's redeploy stages are the onboarding
/// stages of the same name (`redeploy`).
pub async fn run_stage(stage: DecommissionStage, ctx: &mut DecommissionCtx<'_>) -> StageOutcome {
    use DecommissionStage as D;
    let result = match stage {
        D::DisableNode => host::ensure_node_disabled(ctx).await,
        D::ForceReleaseAllocations => host::ensure_allocations_released(ctx).await,
        D::DrainNode => host::ensure_node_drained(ctx).await,
        D::CleanupStorage => host::ensure_storage_clean(ctx).await,
        D::ScrubGpu => host::ensure_gpu_scrubbed(ctx).await,
        D::ValidateCleanNode => host::ensure_node_clean(ctx).await,
        D::EnableNode => host::ensure_node_enabled(ctx).await,
        D::LoadSiteConfig => maas::ensure_site_config_loaded(ctx).await,
        D::ReleaseMaasNode => maas::ensure_machine_released(ctx).await,
        D::PowerOffMaasNode => maas::ensure_machine_off(ctx).await,
        D::RemoveMaasRecord => maas::ensure_maas_record_removed(ctx).await,
        D::RetireGpuaasNode => inventory::ensure_node_retired(ctx).await,
        D::RemoveGpuaasNodeRecord => inventory::ensure_node_record_removed(ctx).await,
        D::CleanupSecrets => inventory::ensure_secrets_cleaned(ctx).await,
        D::ConfigureStorage
        | D::ApplyRocePhase2
        | D::EnsurePxeInterfaceAuto
        | D::RenderCloudInit
        | D::DeployViaMaas
        | D::WaitForDeployed
        | D::EnsureHardwareSyncConfigured
        | D::WaitForHardwareSyncHealthy
        | D::WaitForAgentEnrollment => redeploy::run(stage, ctx).await,
    };
    result.unwrap_or_else(StageOutcome::Failed)
}

/// How many automatic retries a decommission stage gets (000 §5.8): inventory writes 3,
/// agent tasks and MAAS calls a bounded 2, transient trouble 3; the redeploy stages keep the
/// onboarding bounds ([`super::retry_budget`]; `None`: until the stage's timeout).
pub fn retry_budget(stage: DecommissionStage, class: FailureClass) -> Option<u32> {
    use DecommissionStage as D;
    match (stage, class) {
        (_, FailureClass::UpstreamTransient) => Some(3),
        (D::DisableNode | D::RetireGpuaasNode | D::EnableNode, _) => Some(3),
        _ => match onboarding_stage(stage) {
            Some(onboarding) => super::retry_budget(onboarding, class),
            None => Some(2),
        },
    }
}
