//! A node in the provider-neutral view (seed 002 with seed 004's flags): its `provision_state`
//! and `target_provision_state`, mapped from what metalform is doing to it (its open job's kind,
//! mode, state and stage) and else from what MAAS reports; and what each verb of seed 002 means
//! for a MAAS-driven node — a MAAS operation, a change the manifests own, or nothing MAAS offers.
//!
//! Pure: the store reads the facts, the API and the CLI show the result, and the verb service
//! (`crate::apply::provision`) carries the MAAS operation out.

use super::ironic::{IronicError, IronicEvent, IronicNode, ProvisionState, Verb};
use super::job::{DecommissionMode, JobKind, JobState};
use super::maas_status::MaasStatus;
use super::node_state::NodeState;
use super::stages::{DecommissionStage, OnboardingStage};

use ProvisionState as P;

/// What metalform's open job is doing to the node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobActivity {
    pub kind: JobKind,
    pub mode: Option<DecommissionMode>,
    pub state: JobState,
    pub stage: String,
}

/// Everything the view of one node is computed from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeFacts {
    /// The coarse state, when the inventory has the node.
    pub node: Option<NodeState>,
    /// The last MAAS status seen for its machine.
    pub maas: Option<MaasStatus>,
    /// Its open job (or the one a report is about).
    pub job: Option<JobActivity>,
    pub retired: bool,
    pub retired_reason: Option<String>,
    pub protected: bool,
    pub protected_reason: Option<String>,
}

/// Where a view's state came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ViewSource {
    /// The node's open job.
    Job,
    /// MAAS's status of its machine.
    Maas,
    /// Only the inventory state (MAAS not observed yet).
    Inventory,
}

/// The provider-neutral view of a node.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ProvisionView {
    pub provision_state: ProvisionState,
    pub target_provision_state: Option<ProvisionState>,
    /// MAAS marks the machine unusable (Broken, Missing): Ironic's maintenance flag.
    pub maintenance: bool,
    pub source: ViewSource,
    #[serde(skip)]
    pub node: IronicNode,
}

/// The node's view, or `None` when nothing says where it stands (no job, never observed in
/// MAAS, and an inventory state that implies no machine state).
pub fn provision_view(facts: &NodeFacts) -> Option<ProvisionView> {
    let from_maas = facts.maas.map(|status| {
        let view = status.provider_view();
        let (state, target) = match (view.state, view.target) {
            // Seed 004: a retired node is never AVAILABLE; a cleaned one waits in MANAGEABLE.
            (P::Available, _) if facts.retired => (P::Manageable, None),
            (state, Some(P::Available)) if facts.retired => (state, Some(P::Manageable)),
            other => other,
        };
        (state, target, view.maintenance)
    });
    let from_job = facts
        .job
        .as_ref()
        .and_then(|job| job_view(job, facts.retired));
    let (state, target, maintenance, source) = match (from_job, from_maas) {
        (Some((state, target)), maas) => (
            state,
            target,
            maas.is_some_and(|(_, _, m)| m),
            ViewSource::Job,
        ),
        (None, Some((state, target, maintenance))) => {
            (state, target, maintenance, ViewSource::Maas)
        }
        (None, None) => {
            let state = match facts.node? {
                NodeState::Active | NodeState::Offline => P::Active,
                NodeState::BootstrapIssued | NodeState::Enrolling => P::Enroll,
                _ => return None,
            };
            (state, None, false, ViewSource::Inventory)
        }
    };
    Some(ProvisionView {
        provision_state: state,
        target_provision_state: target,
        maintenance,
        source,
        node: IronicNode {
            state,
            target,
            retired: facts.retired,
            retired_reason: facts.retired_reason.clone(),
            protected: facts.protected,
            protected_reason: facts.protected_reason.clone(),
        },
    })
}

/// The state a job puts the node in, while it works (or after it failed): onboarding is
/// manage (verify credentials, create-or-find), inspect (commission) and deploy; a reimage is a
/// rebuild; a retirement or full decommission is a delete (teardown, then cleaning by MAAS's
/// erase); a reactivation is provide (cleaning to AVAILABLE) then deploy. A pending job has not
/// started, a compensating one is undoing (MAAS says where the machine is), and a soft reset
/// or storage cleanup leaves the provision state alone.
fn job_view(job: &JobActivity, retired: bool) -> Option<(ProvisionState, Option<ProvisionState>)> {
    let failed = job.state.is_failed();
    if !failed && job.state != JobState::Running {
        return None;
    }
    let released = if retired { P::Manageable } else { P::Available };
    let phase = match job.kind {
        JobKind::Onboarding => onboarding_phase(job.stage.parse().ok()?),
        // A Redfish provisioning writes the server's disk from the maintenance OS.
        JobKind::Provisioning => Phase::Deploying,
        JobKind::Decommission => {
            let stage: DecommissionStage = job.stage.parse().ok()?;
            match job.mode.unwrap_or(DecommissionMode::FullDecommission) {
                DecommissionMode::SoftReset | DecommissionMode::StorageCleanup => return None,
                DecommissionMode::Reimage => redeploy_phase(stage, Phase::Deploying),
                DecommissionMode::Reactivate => {
                    redeploy_phase(stage, Phase::Cleaning(P::Available))
                }
                DecommissionMode::FullDecommission | DecommissionMode::Retire => {
                    use DecommissionStage as D;
                    match stage {
                        D::DisableNode | D::ForceReleaseAllocations | D::DrainNode => {
                            Phase::Deleting(released)
                        }
                        D::LoadSiteConfig | D::ReleaseMaasNode => Phase::Cleaning(released),
                        // Released and erased: what is left is inventory work; MAAS says where
                        // the machine is.
                        _ => return None,
                    }
                }
            }
        }
    };
    Some(phase.state(failed))
}

/// A process of seed 002, with its -ING and -WAIT states and where it fails to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Verifying,
    Inspecting,
    InspectWait,
    Deploying,
    DeployWait,
    Deleting(ProvisionState),
    Cleaning(ProvisionState),
}

impl Phase {
    fn state(self, failed: bool) -> (ProvisionState, Option<ProvisionState>) {
        match (self, failed) {
            (Phase::Verifying, false) => (P::Verifying, Some(P::Manageable)),
            // A failed verification is back in ENROLL (Ironic).
            (Phase::Verifying, true) => (P::Enroll, None),
            (Phase::Inspecting, false) => (P::Inspecting, Some(P::Manageable)),
            (Phase::InspectWait, false) => (P::InspectWait, Some(P::Manageable)),
            (Phase::Inspecting | Phase::InspectWait, true) => (P::InspectFail, Some(P::Manageable)),
            (Phase::Deploying, false) => (P::Deploying, Some(P::Active)),
            (Phase::DeployWait, false) => (P::DeployWait, Some(P::Active)),
            (Phase::Deploying | Phase::DeployWait, true) => (P::DeployFail, Some(P::Active)),
            (Phase::Deleting(to), false) => (P::Deleting, Some(to)),
            (Phase::Deleting(to), true) => (P::Error, Some(to)),
            (Phase::Cleaning(to), false) => (P::Cleaning, Some(to)),
            (Phase::Cleaning(to), true) => (P::CleanFail, Some(to)),
        }
    }
}

fn onboarding_phase(stage: OnboardingStage) -> Phase {
    use OnboardingStage as O;
    match stage {
        O::LoadSiteConfig | O::ResolvePowerCredentials | O::CreateOrFindInMaas => Phase::Verifying,
        O::CommissionNode => Phase::Inspecting,
        O::WaitForReady => Phase::InspectWait,
        O::ConfigureStorage
        | O::ApplyRocePhase2
        | O::EnsurePxeInterfaceAuto
        | O::RenderCloudInit
        | O::DeployViaMaas => Phase::Deploying,
        // MAAS installs, then cloud-init, hardware sync and the agent run on the host.
        O::WaitForDeployed
        | O::ClassifyDeployFailure
        | O::RecoverForDatasourceRetry
        | O::EnsureHardwareSyncConfigured
        | O::WaitForHardwareSyncHealthy
        | O::WaitForAgentEnrollment => Phase::DeployWait,
    }
}

/// A reimage or reactivation: `before` until the machine is released, then deploying.
fn redeploy_phase(stage: DecommissionStage, before: Phase) -> Phase {
    use DecommissionStage as D;
    match stage {
        D::DisableNode
        | D::DrainNode
        | D::CleanupStorage
        | D::LoadSiteConfig
        | D::ReleaseMaasNode
        | D::ForceReleaseAllocations
        | D::ScrubGpu
        | D::ValidateCleanNode => before,
        D::ConfigureStorage
        | D::ApplyRocePhase2
        | D::EnsurePxeInterfaceAuto
        | D::RenderCloudInit
        | D::DeployViaMaas => Phase::Deploying,
        _ => Phase::DeployWait,
    }
}

/// What a MAAS-driven node does for a verb.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MaasOperation {
    /// `op=commission` (inspect).
    Commission,
    /// `op=release` with the node's erase mode; a Ready machine is allocated first so MAAS
    /// takes the release (clean).
    Erase { allocate_first: bool },
    /// `op=mark_fixed`: Broken -> Ready (provide).
    MarkFixed,
    /// `op=abort`: Disk erasing -> Failed disk erasing, Testing -> the status before it.
    Abort,
    /// `op=rescue_mode`.
    Rescue,
    /// `op=exit_rescue_mode`.
    ExitRescue,
}

impl MaasOperation {
    /// The MAAS `op=` name(s), for messages and audit.
    pub fn op(self) -> &'static str {
        match self {
            MaasOperation::Commission => "commission",
            MaasOperation::Erase {
                allocate_first: false,
            } => "release (erase)",
            MaasOperation::Erase {
                allocate_first: true,
            } => "allocate, then release (erase)",
            MaasOperation::MarkFixed => "mark_fixed",
            MaasOperation::Abort => "abort",
            MaasOperation::Rescue => "rescue_mode",
            MaasOperation::ExitRescue => "exit_rescue_mode",
        }
    }
}

/// Why a verb is not carried out.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerbRefusal {
    /// Seed 002's transitions (and seed 004's flags) refuse it in the node's state: a conflict
    /// that names the current state.
    #[error("{}", conflict_text(source, *state, *target))]
    Conflict {
        source: IronicError,
        state: ProvisionState,
        target: Option<ProvisionState>,
    },
    /// The manifests own this change: `change` says what to edit.
    #[error("`{verb}` on a node metalform deploys is a change to its manifest: {change}")]
    OwnedByGit { verb: Verb, change: &'static str },
    /// MAAS has no operation for it.
    #[error("`{verb}` is not supported by this provider (MAAS): {why}")]
    NotSupported { verb: Verb, why: &'static str },
}

fn conflict_text(
    source: &IronicError,
    state: ProvisionState,
    target: Option<ProvisionState>,
) -> String {
    let heading = target
        .map(|t| format!(", heading to {t}"))
        .unwrap_or_default();
    match source {
        // Names the state already.
        IronicError::VerbNotAllowed { .. } if heading.is_empty() => source.to_string(),
        IronicError::VerbNotAllowed { .. } => format!("{source}{heading}"),
        _ => format!("{source} (provision_state {state}{heading})"),
    }
}

/// What `verb` does to a node in `view` whose machine MAAS reports as `maas`: seed 002's
/// transitions first (a verb illegal in the current state, or refused by the retired or
/// protected flag, is a conflict), then the MAAS operation, the manifest change, or why MAAS
/// offers nothing.
pub fn plan_verb(
    view: &ProvisionView,
    verb: Verb,
    maas: Option<MaasStatus>,
) -> Result<MaasOperation, VerbRefusal> {
    view.node
        .apply(&IronicEvent::Verb(verb))
        .map_err(|source| VerbRefusal::Conflict {
            source,
            state: view.provision_state,
            target: view.target_provision_state,
        })?;
    use MaasStatus as M;
    let unsupported = |why| Err(VerbRefusal::NotSupported { verb, why });
    let git = |change| Err(VerbRefusal::OwnedByGit { verb, change });
    match verb {
        Verb::Manage => unsupported(
            "MAAS has no manageable hold: a Ready machine can always be allocated; keep a node out of service with `lifecycle: retired` or `paused: true` in its manifest",
        ),
        Verb::Inspect => match maas {
            Some(M::Ready | M::Broken | M::New | M::FailedCommissioning) => {
                Ok(MaasOperation::Commission)
            }
            _ => unsupported(
                "MAAS commissions only New, Ready, Broken or Failed commissioning machines",
            ),
        },
        Verb::Clean => match maas {
            Some(M::Broken) => Ok(MaasOperation::Erase {
                allocate_first: false,
            }),
            Some(M::Ready) => Ok(MaasOperation::Erase {
                allocate_first: true,
            }),
            _ => unsupported(
                "MAAS erases disks only when it releases a Ready, Allocated or Broken machine",
            ),
        },
        Verb::Provide => match maas {
            Some(M::Broken) => Ok(MaasOperation::MarkFixed),
            _ => unsupported("MAAS makes only a Broken machine available again (mark_fixed)"),
        },
        Verb::Deploy => git("list the node with `lifecycle: active`; onboarding deploys it"),
        Verb::Rebuild => git("bump `reimage.generation` in the node's manifest"),
        Verb::Delete => {
            git("set `lifecycle: retired` (keep the identity) or `lifecycle: decommissioned`")
        }
        Verb::Rescue => Ok(MaasOperation::Rescue),
        Verb::Unrescue => Ok(MaasOperation::ExitRescue),
        Verb::Abort => match maas {
            Some(M::DiskErasing | M::Testing) => Ok(MaasOperation::Abort),
            _ => unsupported("MAAS aborts only an erase or a test run"),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(maas: Option<MaasStatus>) -> NodeFacts {
        NodeFacts {
            node: Some(NodeState::Active),
            maas,
            job: None,
            retired: false,
            retired_reason: None,
            protected: false,
            protected_reason: None,
        }
    }

    fn job(
        kind: JobKind,
        mode: Option<DecommissionMode>,
        state: JobState,
        stage: &str,
    ) -> JobActivity {
        JobActivity {
            kind,
            mode,
            state,
            stage: stage.into(),
        }
    }

    fn view(facts: &NodeFacts) -> (ProvisionState, Option<ProvisionState>) {
        let v = provision_view(facts).unwrap();
        (v.provision_state, v.target_provision_state)
    }

    #[test]
    fn jobs_decide_while_they_work_and_maas_otherwise() {
        let mut f = facts(Some(MaasStatus::Deployed));
        assert_eq!(view(&f), (P::Active, None));
        f.job = Some(job(
            JobKind::Onboarding,
            None,
            JobState::Running,
            "wait_for_ready",
        ));
        assert_eq!(view(&f), (P::InspectWait, Some(P::Manageable)));
        f.job = Some(job(
            JobKind::Onboarding,
            None,
            JobState::FailedManualIntervention,
            "wait_for_agent_enrollment",
        ));
        assert_eq!(view(&f), (P::DeployFail, Some(P::Active)));
        f.job = Some(job(
            JobKind::Decommission,
            Some(DecommissionMode::Reimage),
            JobState::Running,
            "drain_node",
        ));
        assert_eq!(view(&f), (P::Deploying, Some(P::Active)));
        f.job = Some(job(
            JobKind::Decommission,
            Some(DecommissionMode::SoftReset),
            JobState::Running,
            "scrub_gpu",
        ));
        assert_eq!(
            view(&f),
            (P::Active, None),
            "a soft reset leaves MAAS alone"
        );
        f.retired = true;
        f.job = Some(job(
            JobKind::Decommission,
            Some(DecommissionMode::Retire),
            JobState::FailedManualIntervention,
            "release_maas_node",
        ));
        assert_eq!(view(&f), (P::CleanFail, Some(P::Manageable)));
    }

    #[test]
    fn a_retired_node_that_was_cleaned_is_manageable_never_available() {
        let mut f = facts(Some(MaasStatus::Ready));
        assert_eq!(view(&f), (P::Available, None));
        f.retired = true;
        assert_eq!(view(&f), (P::Manageable, None));
        f.maas = Some(MaasStatus::DiskErasing);
        assert_eq!(view(&f), (P::CleanWait, Some(P::Manageable)));
    }

    #[test]
    fn verbs_are_checked_against_seed_002_then_mapped_to_maas() {
        let mut f = facts(Some(MaasStatus::Ready));
        f.retired = true;
        f.retired_reason = Some("EOL".into());
        let v = provision_view(&f).unwrap();
        let err = plan_verb(&v, Verb::Provide, f.maas).unwrap_err();
        assert_eq!(
            err.to_string(),
            "conflict: node is retired (EOL); unset `retired` before `provide` (provision_state MANAGEABLE)"
        );
        assert_eq!(
            plan_verb(&v, Verb::Clean, f.maas),
            Ok(MaasOperation::Erase {
                allocate_first: true
            })
        );
        assert_eq!(
            plan_verb(&v, Verb::Inspect, f.maas),
            Ok(MaasOperation::Commission)
        );
        let err = plan_verb(&v, Verb::Rescue, f.maas).unwrap_err();
        assert_eq!(
            err.to_string(),
            "verb `rescue` is not allowed in state MANAGEABLE"
        );
        let active = provision_view(&facts(Some(MaasStatus::Deployed))).unwrap();
        assert_eq!(
            plan_verb(&active, Verb::Rescue, Some(MaasStatus::Deployed)),
            Ok(MaasOperation::Rescue)
        );
        assert!(matches!(
            plan_verb(&active, Verb::Rebuild, Some(MaasStatus::Deployed)),
            Err(VerbRefusal::OwnedByGit { .. })
        ));
        let available = provision_view(&facts(Some(MaasStatus::Ready))).unwrap();
        assert_eq!(
            plan_verb(&available, Verb::Manage, Some(MaasStatus::Ready))
                .unwrap_err()
                .to_string(),
            "`manage` is not supported by this provider (MAAS): MAAS has no manageable hold: a Ready machine can always be allocated; keep a node out of service with `lifecycle: retired` or `paused: true` in its manifest"
        );
        let erasing = provision_view(&facts(Some(MaasStatus::DiskErasing))).unwrap();
        assert_eq!(
            plan_verb(&erasing, Verb::Abort, Some(MaasStatus::DiskErasing)),
            Ok(MaasOperation::Abort)
        );
    }
}
