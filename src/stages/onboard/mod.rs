//! The 16 onboarding stages of seed 000 §4.3 (names of 001 §4.2), each an idempotent
//! `ensure_*` with the retry, compensation and re-entry rules of §4.6 and §4.10, the manual
//! boundary of §4.11, the in-flight rules of §4.13, the timeouts of §4.14 and the discovery
//! policy of §4.16.
//!
//! | file | stages |
//! |---|---|
//! | `site` | load_site_config, resolve_power_credentials |
//! | `discovery` | create_or_find_in_maas |
//! | `commission` | commission_node, wait_for_ready |
//! | `prepare` | configure_storage, apply_roce_phase2, ensure_pxe_interface_auto |
//! | `render` | render_cloud_init |
//! | `deploy` | deploy_via_maas, wait_for_deployed, classify_deploy_failure, recover_for_datasource_retry |
//! | `hwsync` | ensure_hardware_sync_configured, wait_for_hardware_sync_healthy |
//! | `enroll` | wait_for_agent_enrollment |

mod commission;
mod deploy;
mod discovery;
mod enroll;
mod facts;
mod hwsync;
mod prepare;
mod render;
mod site;

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::json;

use super::{Checkpoint, StageFailure, StageOutcome};
use crate::lifecycle::{OnboardingStage, PolicyTimeout};
use crate::plan::NodeTarget;
use crate::provider::maas::{MaasClient, MaasError, Machine, MachineSummary};
use crate::secrets::PowerCredentials;
use crate::store::{Fence, Job, Observed};
// The stages' shared environment, under the paths it has always had.
pub use super::{MaasAccess, NodeMemory, Peers, SitePeers, SitePreflight, StageClock, StageEnv};
pub use facts::{
    CloudInitFacts, DeployFacts, DeployFailureFacts, DiscoveryFacts, EnrollmentFacts, Facts,
    HwSyncFacts, TakeOverFacts,
};

/// Why a stage about to boot the machine waits: the site's `maxParallel` machines are booting.
const SLOT_WAIT: &str =
    "waiting for a free place under the profile's maxParallel before booting the machine";

/// One pass of one stage.
pub struct StageCtx<'a> {
    pub env: &'a StageEnv,
    pub target: &'a NodeTarget,
    pub job: &'a Job,
    pub facts: &'a mut Facts,
    pub memory: &'a mut NodeMemory,
    pub journal: &'a dyn Checkpoint<Facts>,
    /// The node lease's fence: the token writes carry it.
    pub fence: &'a Fence,
    pub now: DateTime<Utc>,
}

impl StageCtx<'_> {
    pub async fn maas(&self) -> Result<MaasClient, StageFailure> {
        self.env.maas.client(&self.target.site).await
    }

    /// The site's BMC and host access.
    pub fn peers(&self) -> &SitePeers {
        self.env.peers.for_site(self.target.site_name())
    }

    /// How long the current stage attempt has been running (from the journal's clock).
    pub fn elapsed(&self) -> Duration {
        StageClock::elapsed(self.facts.clock.as_ref(), self.now)
    }

    /// The lifetime of the node's enrollment tokens (the profile's).
    pub fn token_ttl(&self) -> chrono::Duration {
        chrono::Duration::from_std(self.target.profile.enrollment.token_ttl)
            .unwrap_or(chrono::Duration::hours(2))
    }

    /// The profile's value of a policy timeout.
    pub fn timeout_of(&self, timeout: PolicyTimeout) -> Duration {
        let t = &self.target.profile.timeouts;
        match timeout {
            PolicyTimeout::Discovery => t.discovery,
            PolicyTimeout::Commission => t.commission,
            PolicyTimeout::Deploy => t.deploy,
            PolicyTimeout::HwSyncSeed => t.hw_sync_seed,
            PolicyTimeout::HwSyncHealth => t.hw_sync_health,
            PolicyTimeout::Enrollment => t.enrollment,
        }
    }

    /// `Some(limit)` once the stage has run longer than the policy allows.
    pub fn timed_out(&self, timeout: PolicyTimeout) -> Option<Duration> {
        let limit = self.timeout_of(timeout);
        (self.elapsed() > limit).then_some(limit)
    }

    /// Remember what MAAS said about the machine (the job's last observed state).
    pub fn observe(&mut self, machine: &Machine) {
        self.memory.observed = Some(Observed {
            status: Some(machine.status_label()),
            power_state: Some(machine.power_state.as_str().to_owned()),
            ips: machine.ip_addresses.clone(),
        });
    }

    pub fn system_id(&self) -> Result<&str, StageFailure> {
        self.facts.system_id.as_deref().ok_or_else(|| {
            StageFailure::ambiguity(
                "no_machine_bound",
                "the journal has no MAAS machine for this stage; rerun the onboarding from the top",
            )
        })
    }

    /// Re-read this job's machine (000 §4.13: refresh before acting). A machine that is gone
    /// is the manual-intervention case "machine deleted from MAAS mid-workflow" (§4.11).
    pub async fn machine(&mut self) -> Result<Machine, StageFailure> {
        let maas = self.maas().await?;
        let system_id = self.system_id()?.to_owned();
        let machine = self.bound_read(&system_id, maas.read_machine(&system_id).await)?;
        self.observe(&machine);
        Ok(machine)
    }

    /// Re-read this job's machine where its name, status and power decide (a poll, or a
    /// refresh before acting on its status): the same read as [`StageCtx::machine`], its
    /// interfaces, disks and the rest skipped while parsing; reads made while another of the
    /// site's is under way travel together in one list request (`MachinePolls::summary`).
    pub async fn machine_summary(&mut self) -> Result<MachineSummary, StageFailure> {
        self.polled(false).await
    }

    /// [`StageCtx::machine_summary`] for a wait that decides on the machine's status alone:
    /// while MAAS logged no status change for it, the site's polls answer from its last
    /// reading (`MachinePolls::status`), so the fields besides the status may be a few polls old.
    pub async fn machine_status(&mut self) -> Result<MachineSummary, StageFailure> {
        self.polled(true).await
    }

    async fn polled(&mut self, status_only: bool) -> Result<MachineSummary, StageFailure> {
        let polls = self.env.maas.polls(&self.target.site).await?;
        let system_id = self.system_id()?.to_owned();
        let read = if status_only {
            polls.status(&system_id).await
        } else {
            polls.summary(&system_id).await
        };
        let machine = self.bound_read(&system_id, read)?;
        self.memory.observed = Some(Observed {
            status: Some(machine.status_label()),
            power_state: Some(machine.power_state.as_str().to_owned()),
            ips: machine.ip_addresses.clone(),
        });
        Ok(machine)
    }

    /// A read of the bound machine, classified: gone is the failure of §4.11.
    fn bound_read<T>(
        &mut self,
        system_id: &str,
        read: Result<T, MaasError>,
    ) -> Result<T, StageFailure> {
        match read {
            Ok(machine) => Ok(machine),
            Err(MaasError::NotFound { .. }) => {
                self.memory.observed = Some(Observed {
                    status: Some("absent".into()),
                    power_state: None,
                    ips: Vec::new(),
                });
                Err(StageFailure::ambiguity(
                    "machine_deleted",
                    format!(
                        "machine {system_id} is no longer in MAAS (deleted out of band while the \
                         onboarding ran)"
                    ),
                )
                .details(json!({"system_id": system_id})))
            }
            Err(err) => Err(StageFailure::maas(&err)),
        }
    }

    /// The deploy of the current round reached MAAS, or the job adopted a deployed machine:
    /// a Deploying/Deployed machine is then this job's own.
    pub fn owns_deployment(&self) -> bool {
        self.job.adopted || self.facts.deploy.as_ref().is_some_and(|d| d.received)
    }

    pub async fn checkpoint(&self) -> Result<(), StageFailure> {
        super::checkpoint(self.journal, self.facts).await
    }
}

/// Run one pass of `stage`.
pub async fn run_stage(stage: OnboardingStage, ctx: &mut StageCtx<'_>) -> StageOutcome {
    use OnboardingStage as O;
    let result = match stage {
        O::LoadSiteConfig => site::ensure_site_config_loaded(ctx).await,
        O::ResolvePowerCredentials => site::ensure_power_credentials_resolved(ctx).await,
        O::CreateOrFindInMaas => discovery::ensure_machine_in_maas(ctx).await,
        O::CommissionNode => commission::ensure_commissioning_started(ctx).await,
        O::WaitForReady => commission::ensure_ready(ctx).await,
        O::ConfigureStorage => prepare::ensure_storage_configured(ctx).await,
        O::ApplyRocePhase2 => prepare::ensure_roce_phase2_applied(ctx).await,
        O::EnsurePxeInterfaceAuto => prepare::ensure_pxe_interface_auto(ctx).await,
        O::RenderCloudInit => render::ensure_node_and_payload(ctx).await,
        O::DeployViaMaas => deploy::ensure_deploy_issued(ctx).await,
        O::WaitForDeployed => deploy::ensure_deployed(ctx).await,
        O::ClassifyDeployFailure => deploy::ensure_deploy_failure_classified(ctx).await,
        O::RecoverForDatasourceRetry => deploy::ensure_recovered_for_redeploy(ctx).await,
        O::EnsureHardwareSyncConfigured => hwsync::ensure_hardware_sync_configured(ctx).await,
        O::WaitForHardwareSyncHealthy => hwsync::ensure_hardware_sync_healthy(ctx).await,
        O::WaitForAgentEnrollment => enroll::ensure_agent_enrolled(ctx).await,
    };
    result.unwrap_or_else(StageOutcome::Failed)
}

/// What MAAS is told to power the node with: its BMC address and login through the power
/// driver the manifests choose (`provisioner.powerDriver`, else the site's `power.type`) —
/// IPMI, or MAAS's own Redfish driver.
pub(crate) async fn maas_power(
    ctx: &mut StageCtx<'_>,
) -> Result<crate::provider::maas::PowerParameters, StageFailure> {
    use crate::provider::maas::{IpmiPower, PowerParameters};
    let power = power_credentials(ctx).await?;
    let address = ctx.target.node.bmc.ipmi_ip.to_string();
    let driver = match ctx.target.node.provisioner {
        crate::model::Provisioner::Maas {
            power_driver: Some(driver),
        } => driver,
        _ => ctx.target.site.power.kind,
    };
    Ok(match driver {
        crate::model::PowerType::Ipmi => {
            PowerParameters::Ipmi(IpmiPower::new(address, power.user, power.pass))
        }
        crate::model::PowerType::Redfish => PowerParameters::Other {
            power_type: "redfish".into(),
            parameters: [
                (
                    "power_address".to_owned(),
                    crate::secrets::Secret::new(address),
                ),
                (
                    "power_user".to_owned(),
                    crate::secrets::Secret::new(power.user),
                ),
                ("power_pass".to_owned(), power.pass),
            ]
            .into_iter()
            .collect(),
        },
    })
}

/// The power credentials of the node, read at use time (000 §3.2) and kept for the run.
pub(crate) async fn power_credentials(
    ctx: &mut StageCtx<'_>,
) -> Result<PowerCredentials, StageFailure> {
    if let Some(power) = &ctx.memory.power {
        return Ok(power.clone());
    }
    let reference = crate::secrets::SecretRef::new(
        ctx.target.power_credentials.path.clone(),
        ctx.target.power_credentials.key.as_deref(),
    );
    let power = ctx
        .env
        .secrets
        .power_credentials(&reference)
        .await
        .map_err(|e| StageFailure::secret(&e))?;
    ctx.memory.power = Some(power.clone());
    Ok(power)
}
