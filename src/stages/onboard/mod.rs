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

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures::future::BoxFuture;
use serde_json::json;

use super::{StageFailure, StageOutcome};
use crate::clock::Clock;
use crate::lifecycle::{OnboardingStage, PolicyTimeout};
use crate::model::Site;
use crate::plan::NodeTarget;
use crate::provider::bmc::BmcPower;
use crate::provider::host::HostAccess;
use crate::provider::maas::{MaasClient, MaasError, Machine};
use crate::secrets::{PowerCredentials, Secret, SecretStore};
use crate::store::{Actor, Job, Observed, Store, StoreError};
pub use facts::{
    CloudInitFacts, DeployFacts, DeployFailureFacts, DiscoveryFacts, EnrollmentFacts, Facts,
    HwSyncFacts, StageClock, TakeOverFacts,
};

/// What a site's MAAS answered to the preflight of 000 §4.14 (reachable, token valid).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SitePreflight {
    pub maas_version: String,
    pub user: String,
    pub is_admin: bool,
}

/// How stages reach a site's MAAS (the API key is read from the site's secret reference when
/// the client is first needed).
pub trait MaasAccess: Send + Sync + std::fmt::Debug {
    fn client<'a>(&'a self, site: &'a Site) -> BoxFuture<'a, Result<MaasClient, StageFailure>>;

    /// The preflight (`version/` + `whoami`), made once per site and run.
    fn preflight<'a>(
        &'a self,
        site: &'a Site,
    ) -> BoxFuture<'a, Result<SitePreflight, StageFailure>>;
}

/// Persist the journal facts in the middle of a stage (the deploy intent, before the call).
pub trait Checkpoint: Send + Sync {
    fn checkpoint<'a>(&'a self, facts: &'a Facts) -> BoxFuture<'a, Result<(), StoreError>>;
}

/// How a site's BMCs and deployed hosts are reached: production tools, or a simulator's
/// stand-ins (one simulator per site, as one MAAS region per site).
#[derive(Debug, Clone)]
pub struct SitePeers {
    pub bmc: Arc<dyn BmcPower>,
    pub host: Arc<dyn HostAccess>,
}

/// The peers of every site: a default, and per-site exceptions.
#[derive(Debug, Clone)]
pub struct Peers {
    pub default: SitePeers,
    pub per_site: std::collections::BTreeMap<String, SitePeers>,
}

impl Peers {
    pub fn uniform(bmc: Arc<dyn BmcPower>, host: Arc<dyn HostAccess>) -> Peers {
        Peers {
            default: SitePeers { bmc, host },
            per_site: Default::default(),
        }
    }

    pub fn for_site(&self, site: &str) -> &SitePeers {
        self.per_site.get(site).unwrap_or(&self.default)
    }
}

/// Everything the stages share for a run.
#[derive(Clone)]
pub struct StageEnv {
    pub store: Store,
    pub secrets: Arc<dyn SecretStore>,
    pub maas: Arc<dyn MaasAccess>,
    pub peers: Peers,
    pub clock: Arc<dyn Clock>,
    /// What cloud-init tells the node agent to call (docs/contracts.md §5).
    pub enroll_url: String,
    /// The agent binary and the CA cloud-init installs with it (docs/agent.md).
    pub agent_install: crate::cloudinit::AgentInstall,
    /// Who the journal writes are made by.
    pub actor: Actor,
    /// The executor's poll interval (waits inside stages are derived from it).
    pub poll_interval: Duration,
}

impl std::fmt::Debug for StageEnv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StageEnv")
            .field("store", &self.store)
            .field("enroll_url", &self.enroll_url)
            .finish_non_exhaustive()
    }
}

/// What one node's executor keeps in memory only: the rendered payload holds a fresh
/// enrollment token, the BMC login a password (000 §3.2: read at use time, never stored).
#[derive(Debug, Default)]
pub struct NodeMemory {
    pub user_data: Option<Secret>,
    pub power: Option<PowerCredentials>,
    /// The last machine seen, for the job's diagnostics (000 §4.12).
    pub observed: Option<Observed>,
    /// Why the current stage last waited (a timeout reports it).
    pub last_wait: Option<String>,
}

/// One pass of one stage.
pub struct StageCtx<'a> {
    pub env: &'a StageEnv,
    pub target: &'a NodeTarget,
    pub job: &'a Job,
    pub facts: &'a mut Facts,
    pub memory: &'a mut NodeMemory,
    pub journal: &'a dyn Checkpoint,
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
        self.facts
            .clock
            .as_ref()
            .and_then(|c| (self.now - c.started_at).to_std().ok())
            .unwrap_or_default()
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
        match maas.read_machine(&system_id).await {
            Ok(machine) => {
                self.observe(&machine);
                Ok(machine)
            }
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
        self.journal
            .checkpoint(self.facts)
            .await
            .map_err(|e| StageFailure::store(&e))
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
