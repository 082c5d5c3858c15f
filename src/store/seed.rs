//! A converged fleet written straight into the store: the store half of the simulator's
//! converged scenario (docs/simulator.md), so that measuring a converged fleet needs no
//! onboarding first. Each node is active, its agent heard from, bound to its Deployed machine
//! by a completed onboarding (and, if asked, older completed ones before it, and completed
//! reimages after it: the finished jobs a fleet collects over its life) and a `node_maas_state`
//! row — what an onboarding that ran to its end leaves behind.

use chrono::Duration;
use serde_json::json;
use uuid::Uuid;

use crate::lifecycle::{DecommissionMode, JobKind, JobState, NodeState, OnboardingStage, Provider};

use super::db::params;
use super::jobs::mark_superseded;
use super::{Store, StoreError, bump_serial, format_time};

/// One node of a converged fleet and the machine it runs on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConvergedNode {
    pub site: String,
    pub hostname: String,
    pub sku: Option<String>,
    pub gpus: Option<i64>,
    pub ipmi_ip: Option<String>,
    /// The MAAS machine it is deployed on, with what MAAS shows of it.
    pub system_id: String,
    pub maas_status: String,
    pub power_state: String,
    pub ips: Vec<String>,
    /// The deployed address.
    pub host: Option<String>,
}

/// How many nodes one seeding transaction writes.
const CHUNK: usize = 1000;

/// The finished jobs each node of a converged fleet has besides its current onboarding.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ConvergedHistory {
    /// Older completed onboardings before it, a day apart.
    pub onboardings: usize,
    /// Completed reimages after it, a day apart, the last one ending now (the onboarding then
    /// ended that many days ago).
    pub reimages: usize,
}

impl Store {
    /// Write `nodes` as a converged fleet (see the module), each with the finished jobs of
    /// `history`; returns their ids in order. Refused (nothing written for that chunk) when a
    /// live node of the same site and hostname exists.
    pub async fn seed_converged(
        &self,
        nodes: &[ConvergedNode],
        history: ConvergedHistory,
    ) -> Result<Vec<Uuid>, StoreError> {
        let now = self.now();
        let at = format_time(now);
        let onboarded = now - Duration::days(history.reimages as i64);
        let last_stage = OnboardingStage::ALL
            .last()
            .expect("onboarding has stages")
            .as_str();
        let reimage = DecommissionMode::Reimage;
        let reimaged_stage = reimage
            .stages()
            .last()
            .expect("a reimage has stages")
            .as_str();
        let mut ids = Vec::with_capacity(nodes.len());
        for chunk in nodes.chunks(CHUNK) {
            let mut tx = self.pool.write().await?;
            for node in chunk {
                let id = Uuid::new_v4();
                tx.execute(
                    "INSERT INTO nodes (id, site, hostname, status, provider, generation, sku,
                        gpus, ipmi_ip, host, last_agent_contact_at, reimage_generation,
                        created_at, updated_at)
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $11, $11)",
                    &params![
                        id.to_string(),
                        node.site.clone(),
                        node.hostname.clone(),
                        NodeState::Active.as_str(),
                        Provider::Maas.as_str(),
                        1i64,
                        node.sku.clone(),
                        node.gpus,
                        node.ipmi_ip.clone(),
                        node.host.clone(),
                        at.clone(),
                        0i64,
                    ],
                )
                .await?;
                let ips = json!(node.ips).to_string();
                // The columns every finished job of this node starts with, a new id each.
                let completed = |stage: &str| {
                    params![
                        Uuid::new_v4().to_string(),
                        id.to_string(),
                        node.site.clone(),
                        node.hostname.clone(),
                        node.system_id.clone(),
                        "seed",
                        stage,
                        1i64,
                        JobState::Completed.as_str()
                    ]
                };
                for age in (0..=history.onboardings).rev() {
                    // The current onboarding ends when the reimages begin; each older one a day
                    // before the next.
                    let when = format_time(onboarded - Duration::days(age as i64));
                    tx.execute(
                        "INSERT INTO onboardings (id, node_id, site, hostname, maas_system_id,
                            requested_by, current_stage, current_attempt, status,
                            last_maas_status, last_maas_power_state, last_maas_ips,
                            requested_at, started_at, completed_at, updated_at, ipmi_ip)
                         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $13,
                            $13, $13, $14)",
                        &[
                            completed(last_stage).as_slice(),
                            &params![
                                node.maas_status.clone(),
                                node.power_state.clone(),
                                ips.clone(),
                                when,
                                node.ipmi_ip.clone(),
                            ],
                        ]
                        .concat(),
                    )
                    .await?;
                }
                for after in 1..=history.reimages {
                    let when = format_time(onboarded + Duration::days(after as i64));
                    tx.execute(
                        "INSERT INTO decommissions (id, node_id, site, hostname, maas_system_id,
                            requested_by, current_stage, current_attempt, status, mode,
                            requested_at, started_at, completed_at, updated_at)
                         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $11, $11, $11)",
                        &[
                            completed(reimaged_stage).as_slice(),
                            &params![reimage.as_str(), when],
                        ]
                        .concat(),
                    )
                    .await?;
                }
                tx.execute(
                    "INSERT INTO node_maas_state (node_id, site, maas_system_id,
                        last_maas_status, last_maas_power_state, last_maas_ips,
                        last_reconciled_at, updated_at)
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $7)",
                    &params![
                        id.to_string(),
                        node.site.clone(),
                        node.system_id.clone(),
                        node.maas_status.clone(),
                        node.power_state.clone(),
                        ips,
                        at.clone(),
                    ],
                )
                .await?;
                for kind in [JobKind::Onboarding, JobKind::Decommission] {
                    mark_superseded(&mut tx, kind, &node.site, &node.hostname, Some(id)).await?;
                }
                ids.push(id);
            }
            bump_serial(&mut tx).await?;
            tx.commit().await?;
        }
        Ok(ids)
    }
}
