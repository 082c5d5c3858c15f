//! Stage catalogs: the 16 onboarding stages (seed 001 §4.2, order of 000 §4.3) with the safe
//! re-entry rules of 000 §4.10, and the decommission stages (001 §5.2) with each mode's stage
//! list (000 §5.2–§5.5).

use super::job::DecommissionMode;

named_enum! {
    "onboarding stage",
    pub enum OnboardingStage {
        LoadSiteConfig = "load_site_config",
        ResolvePowerCredentials = "resolve_power_credentials",
        CreateOrFindInMaas = "create_or_find_in_maas",
        CommissionNode = "commission_node",
        WaitForReady = "wait_for_ready",
        ConfigureStorage = "configure_storage",
        ApplyRocePhase2 = "apply_roce_phase2",
        EnsurePxeInterfaceAuto = "ensure_pxe_interface_auto",
        RenderCloudInit = "render_cloud_init",
        DeployViaMaas = "deploy_via_maas",
        WaitForDeployed = "wait_for_deployed",
        ClassifyDeployFailure = "classify_deploy_failure",
        RecoverForDatasourceRetry = "recover_for_datasource_retry",
        EnsureHardwareSyncConfigured = "ensure_hardware_sync_configured",
        WaitForHardwareSyncHealthy = "wait_for_hardware_sync_healthy",
        WaitForAgentEnrollment = "wait_for_agent_enrollment",
    }
}

named_enum! {
    "decommission stage",
    /// The superset catalog of 001 §5.2, plus the stages the mode workflows of 000 §5.2–§5.4
    /// name outside it (`enable_node` and the reimage redeploy stages, which share their names
    /// with the onboarding stages they repeat).
    pub enum DecommissionStage {
        DisableNode = "disable_node",
        ForceReleaseAllocations = "force_release_allocations",
        DrainNode = "drain_node",
        CleanupStorage = "cleanup_storage",
        ScrubGpu = "scrub_gpu",
        ValidateCleanNode = "validate_clean_node",
        LoadSiteConfig = "load_site_config",
        ReleaseMaasNode = "release_maas_node",
        PowerOffMaasNode = "power_off_maas_node",
        RetireGpuaasNode = "retire_gpuaas_node",
        RemoveGpuaasNodeRecord = "remove_gpuaas_node_record",
        CleanupSecrets = "cleanup_secrets",
        RemoveMaasRecord = "remove_maas_record",
        ConfigureStorage = "configure_storage",
        ApplyRocePhase2 = "apply_roce_phase2",
        EnsurePxeInterfaceAuto = "ensure_pxe_interface_auto",
        RenderCloudInit = "render_cloud_init",
        DeployViaMaas = "deploy_via_maas",
        WaitForDeployed = "wait_for_deployed",
        EnsureHardwareSyncConfigured = "ensure_hardware_sync_configured",
        WaitForHardwareSyncHealthy = "wait_for_hardware_sync_healthy",
        WaitForAgentEnrollment = "wait_for_agent_enrollment",
        EnableNode = "enable_node",
    }
}

/// One stage of a job kind's stage table, by its canonical name (stages jump to each other by
/// name; the executor parses a journal's stage back with `FromStr`).
pub trait StageName:
    Copy
    + PartialEq
    + Send
    + Sync
    + std::fmt::Display
    + std::str::FromStr<Err = super::UnknownName>
    + 'static
{
    fn name(self) -> &'static str;
}

impl StageName for OnboardingStage {
    fn name(self) -> &'static str {
        self.as_str()
    }
}

impl StageName for DecommissionStage {
    fn name(self) -> &'static str {
        self.as_str()
    }
}

/// Whether a stage needs cleanup before it is re-entered (000 §4.10 "Requires cleanup first?").
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Cleanup {
    No,
    Maybe,
    Sometimes,
}

/// The re-entry rule of one stage (000 §4.10).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Reentry {
    /// Safe to run again from the top without looking first. `false` = "not blindly".
    pub safe_from_top: bool,
    /// Observed state must be refreshed before the stage acts.
    pub refresh_first: bool,
    pub cleanup_first: Cleanup,
}

impl OnboardingStage {
    pub fn first() -> Self {
        OnboardingStage::LoadSiteConfig
    }

    /// Position in the catalog, from 0.
    pub fn index(self) -> usize {
        Self::ALL.iter().position(|s| *s == self).unwrap_or(0)
    }

    /// The next stage on the normal path; `None` after the last. The deploy-failure branch
    /// (`classify_deploy_failure`, `recover_for_datasource_retry`) is entered only on failure,
    /// so the normal successor of `wait_for_deployed` is hardware-sync configuration.
    pub fn next(self) -> Option<Self> {
        use OnboardingStage as O;
        match self {
            O::WaitForDeployed | O::ClassifyDeployFailure | O::RecoverForDatasourceRetry => {
                Some(O::EnsureHardwareSyncConfigured)
            }
            other => Self::ALL.get(other.index() + 1).copied(),
        }
    }

    /// The stage changes MAAS or the machine in a way that cannot be undone by re-running it;
    /// observed state is refreshed right before it (000 §4.13).
    pub fn is_destructive(self) -> bool {
        matches!(
            self,
            OnboardingStage::DeployViaMaas | OnboardingStage::RecoverForDatasourceRetry
        )
    }

    /// 000 §4.10. `render_cloud_init` is the table's CreateGPUaaSNodeAndRenderCloudInit;
    /// `commission_node`'s wait is `wait_for_ready`. The two deploy-failure stages are not in the
    /// table: classification is a read, recovery refreshes and retries once (§4.6).
    pub fn reentry(self) -> Reentry {
        use Cleanup::*;
        use OnboardingStage as O;
        let (safe_from_top, refresh_first, cleanup_first) = match self {
            O::LoadSiteConfig | O::ResolvePowerCredentials => (true, false, No),
            O::CreateOrFindInMaas
            | O::CommissionNode
            | O::WaitForReady
            | O::ConfigureStorage
            | O::ApplyRocePhase2
            | O::ClassifyDeployFailure
            | O::RecoverForDatasourceRetry
            | O::EnsureHardwareSyncConfigured
            | O::WaitForHardwareSyncHealthy => (true, true, No),
            O::EnsurePxeInterfaceAuto
            | O::RenderCloudInit
            | O::WaitForDeployed
            | O::WaitForAgentEnrollment => (true, true, Maybe),
            O::DeployViaMaas => (false, true, Sometimes),
        };
        Reentry {
            safe_from_top,
            refresh_first,
            cleanup_first,
        }
    }
}

/// A full decommission (000 §5.4).
const FULL_DECOMMISSION: &[DecommissionStage] = {
    use DecommissionStage as D;
    &[
        D::DisableNode,
        D::ForceReleaseAllocations,
        D::DrainNode,
        D::LoadSiteConfig,
        D::ReleaseMaasNode,
        D::PowerOffMaasNode,
        D::RetireGpuaasNode,
        D::RemoveGpuaasNodeRecord,
        D::CleanupSecrets,
        D::RemoveMaasRecord,
    ]
};

/// Where a full decommission retires the node.
const RETIRED_AT: usize = 6;

/// Release and redeploy, back in scheduling (000 §5.3 from the release on): the tail a reimage
/// and a reactivation share.
const REDEPLOY: [DecommissionStage; 11] = {
    use DecommissionStage as D;
    [
        D::LoadSiteConfig,
        D::ReleaseMaasNode,
        D::ConfigureStorage,
        D::ApplyRocePhase2,
        D::EnsurePxeInterfaceAuto,
        D::RenderCloudInit,
        D::DeployViaMaas,
        D::WaitForDeployed,
        D::EnsureHardwareSyncConfigured,
        D::WaitForHardwareSyncHealthy,
        D::WaitForAgentEnrollment,
    ]
};

/// A reimage (000 §5.3): out of scheduling, drained, storage cleaned, then redeployed.
const REIMAGE: &[DecommissionStage] = &then_redeploy::<3, 15>([
    DecommissionStage::DisableNode,
    DecommissionStage::DrainNode,
    DecommissionStage::CleanupStorage,
]);

/// A reimage of a node no agent runs on: out of retirement and scheduling, the machine cleaned
/// (released with erase if it still runs an OS) and redeployed.
const REACTIVATE: &[DecommissionStage] = &then_redeploy::<1, 13>([DecommissionStage::DisableNode]);

/// `head`, then [`REDEPLOY`], then `enable_node`: `L` must be `N` + 12 (checked at compile time).
const fn then_redeploy<const N: usize, const L: usize>(
    head: [DecommissionStage; N],
) -> [DecommissionStage; L] {
    assert!(L == N + REDEPLOY.len() + 1);
    let mut out = [DecommissionStage::EnableNode; L];
    let mut i = 0;
    while i < N {
        out[i] = head[i];
        i += 1;
    }
    while i < N + REDEPLOY.len() {
        out[i] = REDEPLOY[i - N];
        i += 1;
    }
    out
}

impl DecommissionMode {
    /// The stages of one mode, in order (000 §5.2 soft reset, §5.3 reimage, §5.4 full
    /// decommission, §5.5 storage-only cleanup).
    pub fn stages(self) -> &'static [DecommissionStage] {
        use DecommissionStage as D;
        match self {
            DecommissionMode::SoftReset => &[
                D::DisableNode,
                D::DrainNode,
                D::CleanupStorage,
                D::ScrubGpu,
                D::ValidateCleanNode,
                D::EnableNode,
            ],
            DecommissionMode::Reimage => REIMAGE,
            DecommissionMode::FullDecommission => FULL_DECOMMISSION,
            DecommissionMode::StorageCleanup => &[D::CleanupStorage, D::ValidateCleanNode],
            // The first half of a full decommission, up to the retirement.
            DecommissionMode::Retire => &FULL_DECOMMISSION[..RETIRED_AT + 1],
            DecommissionMode::Reactivate => REACTIVATE,
        }
    }

    pub fn first_stage(self) -> DecommissionStage {
        self.stages()[0]
    }

    /// The stage after `stage` in this mode, `None` at the end or if the mode lacks `stage`.
    pub fn next_stage(self, stage: DecommissionStage) -> Option<DecommissionStage> {
        let stages = self.stages();
        let at = stages.iter().position(|s| *s == stage)?;
        stages.get(at + 1).copied()
    }
}

impl DecommissionStage {
    /// The 13 stages of 001 §5.2's superset catalog.
    pub const CATALOG_001: &'static [DecommissionStage] = &[
        DecommissionStage::DisableNode,
        DecommissionStage::ForceReleaseAllocations,
        DecommissionStage::DrainNode,
        DecommissionStage::CleanupStorage,
        DecommissionStage::ScrubGpu,
        DecommissionStage::ValidateCleanNode,
        DecommissionStage::LoadSiteConfig,
        DecommissionStage::ReleaseMaasNode,
        DecommissionStage::PowerOffMaasNode,
        DecommissionStage::RetireGpuaasNode,
        DecommissionStage::RemoveGpuaasNodeRecord,
        DecommissionStage::CleanupSecrets,
        DecommissionStage::RemoveMaasRecord,
    ];
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn onboarding_catalog_has_sixteen_stages_in_order() {
        assert_eq!(OnboardingStage::ALL.len(), 16);
        assert_eq!(OnboardingStage::first().as_str(), "load_site_config");
        assert_eq!(
            OnboardingStage::WaitForDeployed.next(),
            Some(OnboardingStage::EnsureHardwareSyncConfigured)
        );
        assert_eq!(OnboardingStage::WaitForAgentEnrollment.next(), None);
        assert!(!OnboardingStage::DeployViaMaas.reentry().safe_from_top);
    }

    #[test]
    fn reimage_and_reactivate_share_the_redeploy_tail() {
        let names = |mode: DecommissionMode| -> Vec<&str> {
            mode.stages().iter().map(|s| s.as_str()).collect()
        };
        let redeploy = [
            "load_site_config",
            "release_maas_node",
            "configure_storage",
            "apply_roce_phase2",
            "ensure_pxe_interface_auto",
            "render_cloud_init",
            "deploy_via_maas",
            "wait_for_deployed",
            "ensure_hardware_sync_configured",
            "wait_for_hardware_sync_healthy",
            "wait_for_agent_enrollment",
            "enable_node",
        ];
        let reimage: Vec<&str> = ["disable_node", "drain_node", "cleanup_storage"]
            .into_iter()
            .chain(redeploy)
            .collect();
        let reactivate: Vec<&str> = ["disable_node"].into_iter().chain(redeploy).collect();
        assert_eq!(names(DecommissionMode::Reimage), reimage);
        assert_eq!(names(DecommissionMode::Reactivate), reactivate);
    }

    #[test]
    fn every_mode_uses_catalog_stages_and_full_removal_retires_before_removing() {
        for mode in DecommissionMode::ALL {
            assert!(!mode.stages().is_empty());
        }
        let full = DecommissionMode::FullDecommission.stages();
        let retire = full
            .iter()
            .position(|s| *s == DecommissionStage::RetireGpuaasNode);
        let remove = full
            .iter()
            .position(|s| *s == DecommissionStage::RemoveGpuaasNodeRecord);
        assert!(retire < remove);
        assert_eq!(DecommissionStage::CATALOG_001.len(), 13);
        assert_eq!(
            DecommissionMode::Retire.stages().last(),
            Some(&DecommissionStage::RetireGpuaasNode)
        );
        for stage in full {
            assert!(DecommissionStage::CATALOG_001.contains(stage));
        }
    }
}
