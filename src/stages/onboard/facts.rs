//! The onboarding journal's facts (seed 000 §4.5 "persistent state per onboarding", §4.12
//! stage-specific details): what earlier stages learned and did, stored as the job's
//! `stage_details` on every journal write so a restarted executor continues from them.
//!
//! Nothing secret goes here: references and digests only, never a token or the payload.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::stages::{JournalFacts, StageClock};

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Facts {
    /// The MAAS machine this job works on (`maas_system_id`).
    pub system_id: Option<String>,
    /// How it was found: `plan`, `hostname`, `power_address`, `pxe_mac`, `created`,
    /// `discovered`, `auto_claimed`.
    pub matched_by: Option<String>,
    /// The secret reference of the BMC login used (never the value).
    pub power_credentials: Option<String>,
    pub discovery: Option<DiscoveryFacts>,
    /// The boot disk chosen by `configure_storage` (`boss_disk_id`).
    pub boss_disk_id: Option<i64>,
    /// Its `id_path`, which the data-disk layer leaves alone.
    pub boss_disk_path: Option<String>,
    pub roce_applied: Option<u32>,
    /// The node record (`gpuaas_node_id`).
    pub node_id: Option<Uuid>,
    pub cloud_init: Option<CloudInitFacts>,
    /// The deploy of the current round: written *before* the MAAS call, so a restarted
    /// executor knows a deploy may have been sent and re-reads the machine instead.
    pub deploy: Option<DeployFacts>,
    /// Deploys issued so far (datasource retries start a new round).
    pub deploy_rounds: u32,
    pub datasource_retries: u32,
    pub deploy_failure: Option<DeployFailureFacts>,
    /// `deploy_ip_addresses`.
    pub deploy_ips: Vec<String>,
    pub hw_sync: Option<HwSyncFacts>,
    pub enrollment: EnrollmentFacts,
    /// Non-fatal problems (RoCE links that could not be applied, interval drift).
    pub warnings: Vec<String>,
    /// The warnings that mean the node is not what its manifest says (also in `warnings`):
    /// `apply` does not count such a node converged.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub mismatches: Vec<String>,
    /// When the current stage attempt began (timeouts are measured from here, so a restarted
    /// executor continues the same deadline).
    pub clock: Option<StageClock>,
    /// Automatic retries of the current stage so far.
    pub retries: u32,
    /// The operator allowed this onboarding to release a machine in use (a destructive plan
    /// item applied with `--allow-destructive`).
    pub take_over: Option<TakeOverFacts>,
}

/// Permission to release one machine in use, and whether it was used.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TakeOverFacts {
    /// The machine the plan saw in use; no other is released.
    pub system_id: String,
    pub plan_id: String,
    /// When this job released it (once).
    pub released_at: Option<DateTime<Utc>>,
    /// What it was then: status and owner.
    pub was: Option<String>,
}

/// PXE discovery started by this job (000 §4.16).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DiscoveryFacts {
    pub started_at: DateTime<Utc>,
    /// `New` machines that existed before the PXE boot: not discovered by this run.
    pub new_before: Vec<String>,
    pub power_cycled: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CloudInitFacts {
    /// Digest of the rendered payload (the payload itself lives only in memory: it holds a
    /// token).
    pub digest: String,
    pub rendered_at: DateTime<Utc>,
    pub token_expires_at: DateTime<Utc>,
    /// What it was rendered from, without secrets (`plan` renders it again to show changes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payload: Option<crate::cloudinit::PayloadRecord>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeployFacts {
    pub round: u32,
    pub intent_at: DateTime<Utc>,
    /// MAAS acknowledged the deploy (or a re-read showed it was received).
    pub received: bool,
    pub distro_series: String,
    /// The machine's newest MAAS event before this deploy: classification reads only what
    /// happened after it (an earlier round's failure must not colour this one).
    pub events_after: Option<i64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeployFailureFacts {
    /// `datasource_like` or `generic` (000 §4.3 ClassifyDeployFailure).
    pub class: String,
    pub evidence: Option<String>,
    /// The machine's MAAS events could be read for the classification.
    #[serde(default)]
    pub events_read: bool,
    /// The compensating release back to Ready was sent (recorded just before it is): a run
    /// resumed after it finds the machine releasing by its own doing.
    #[serde(default)]
    pub releasing: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HwSyncFacts {
    pub ssh_address: String,
    pub pushed_at: DateTime<Utc>,
    /// MAAS's `last_sync` when the credentials were pushed: a later one proves a fresh cycle
    /// (compared with MAAS's own clock, so clock skew does not matter).
    pub last_sync_at_push: Option<DateTime<Utc>>,
    pub reseeds: u32,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct EnrollmentFacts {
    /// Enrollment-token refreshes (000 §4.6: "Max 2 attempts").
    pub token_refreshes: u32,
    pub enrolled_at: Option<DateTime<Utc>>,
    /// An adopted host (deployed without metalform's payload) got its enrollment token here.
    pub delivered_at: Option<DateTime<Utc>>,
    /// The `node.hw_sync_reseed` tasks queued because the sync was unhealthy after enrollment.
    pub reseeds_queued: u32,
}

impl Facts {
    /// Read from a job's `stage_details`; an empty or foreign document starts afresh.
    pub fn from_details(details: &serde_json::Value) -> Facts {
        serde_json::from_value(details.clone()).unwrap_or_default()
    }

    pub fn to_details(&self) -> serde_json::Value {
        serde_json::to_value(self).unwrap_or_default()
    }

    pub fn warn(&mut self, warning: impl Into<String>) {
        let warning = warning.into();
        if !self.warnings.contains(&warning) {
            self.warnings.push(warning);
        }
    }

    /// A warning that means the node differs from its manifest (the profile asks for
    /// something the machine does not have).
    pub fn mismatch(&mut self, warning: impl Into<String>) {
        let warning = warning.into();
        if !self.mismatches.contains(&warning) {
            self.mismatches.push(warning.clone());
        }
        self.warn(warning);
    }
}

impl JournalFacts for Facts {
    fn from_details(details: &serde_json::Value) -> Self {
        Facts::from_details(details)
    }

    fn to_details(&self) -> serde_json::Value {
        Facts::to_details(self)
    }

    fn clock(&mut self) -> &mut Option<StageClock> {
        &mut self.clock
    }

    fn retries(&mut self) -> &mut u32 {
        &mut self.retries
    }

    fn operator_moved(&mut self, from_top: bool) {
        self.retries = 0;
        self.enrollment.token_refreshes = 0;
        if from_top {
            // Rerun from the top: the bounded datasource redeploy is available again.
            self.datasource_retries = 0;
        }
    }

    fn node_id(&self) -> Option<Uuid> {
        self.node_id
    }

    fn system_id(&self) -> Option<String> {
        self.system_id.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn facts_round_trip_and_tolerate_foreign_documents() {
        let mut facts = Facts {
            system_id: Some("abc123".into()),
            deploy_rounds: 1,
            ..Facts::default()
        };
        facts.warn("x");
        facts.warn("x");
        assert_eq!(facts.warnings.len(), 1);
        assert_eq!(Facts::from_details(&facts.to_details()), facts);
        assert_eq!(
            Facts::from_details(&serde_json::json!({"something": "else"})),
            Facts::default()
        );
        assert_eq!(
            Facts::from_details(&serde_json::json!([1])),
            Facts::default()
        );
    }
}
