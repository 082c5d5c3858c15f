//! Drift reconciliation records (seed 000 §6.3 heartbeat, §6.5 `node_maas_state`, §6.6 resolve):
//! the agent's last contact, every node's observed MAAS state, and one transactional write per
//! node that records the observation, marks or clears the drift, moves the node (quarantine,
//! offline, back to active), updates its host address and audits it — or changes nothing.
//!
//! What to write is decided by the pure drift rules (`crate::drift`); this file only makes
//! each decision one transaction checked against the node it was made on.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde_json::{Value, json};
use uuid::Uuid;

use crate::lifecycle::{NodeState, Owner};

use super::db::{Param, Tx, params};
use super::leases::{Fence, check_fence};
use super::nodes::{
    Node, NodeAudit, NodeTransition, lock_node, open_jobs, read_node, transition_in, write_node,
};
use super::records::{
    Actor, AuditEntry, MaasState, MaasStateUpdate, maas_state_from_row, read_maas_state,
    write_audit, write_maas_state,
};
use super::{Store, StoreError, format_time, parse_opt_time, parse_uuid};

/// What MAAS showed for a node's machine: `status: None` when the machine is absent.
#[derive(Debug, Clone, PartialEq)]
pub struct MaasObservation {
    pub site: String,
    pub system_id: String,
    pub status: Option<String>,
    pub power_state: Option<String>,
    pub ips: Vec<String>,
}

/// What happens to the drift fields of `node_maas_state` (000 §6.5).
#[derive(Debug, Clone, PartialEq)]
pub enum DriftMark {
    /// Leave them as they are.
    Leave,
    /// The drift healed on its own: `drift_detected` false, `drift_resolved_at` now (only when
    /// drift was flagged).
    Clear,
    /// Drift detected: flag it with these details, `drift_resolved_at` null.
    Flag(Value),
    /// Drift recorded and resolved at once (healed by an auto-action, or acknowledged by an
    /// operator): these details, not detected, resolved now.
    Resolved(Value),
}

/// One node's reconciliation, written in one transaction.
#[derive(Debug, Clone, PartialEq)]
pub struct DriftRecord {
    pub node_id: Uuid,
    /// The generation of the node the decision was made on; a node that moved since is
    /// refused with [`StoreError::StaleGeneration`] and nothing is written.
    pub expected_generation: i64,
    /// The observation to record; `None` leaves the observed fields alone.
    pub observation: Option<MaasObservation>,
    pub mark: DriftMark,
    /// A coarse transition (quarantine, offline, back to active), checked by the lifecycle
    /// rules and audited with `reason`.
    pub transition: Option<(NodeState, Owner)>,
    /// A new deployed address (000 §8.1 `host`).
    pub host: Option<String>,
    pub actor: Actor,
    pub reason: Option<String>,
    /// An audit row of its own (drift detected, resolved, acknowledged): action and details.
    pub audit: Option<(String, Value)>,
    /// Refuse ([`StoreError::JobOpen`]) when an onboarding or decommission is open for the
    /// node: the job owns it (no double ownership).
    pub refuse_if_job_open: bool,
    /// Refuse unless this node lease is still held (the pass acted under it).
    pub fence: Option<Fence>,
}

impl DriftRecord {
    pub fn new(node: &Node, actor: Actor) -> Self {
        Self {
            node_id: node.id,
            expected_generation: node.generation,
            observation: None,
            mark: DriftMark::Leave,
            transition: None,
            host: None,
            actor,
            reason: None,
            audit: None,
            refuse_if_job_open: true,
            fence: None,
        }
    }
}

async fn write_mark(
    tx: &mut Tx,
    now: &str,
    node: Uuid,
    mark: &DriftMark,
) -> Result<(), StoreError> {
    let id = node.to_string();
    match mark {
        DriftMark::Leave => {}
        DriftMark::Clear => {
            tx.execute(
                "UPDATE node_maas_state SET drift_detected = $1, drift_resolved_at = $2,
                    updated_at = $2 WHERE node_id = $3 AND drift_detected = $4",
                &params![false, now, id, true],
            )
            .await?;
        }
        DriftMark::Flag(details) => {
            tx.execute(
                "UPDATE node_maas_state SET drift_detected = $1, drift_details = $2,
                    drift_resolved_at = NULL, updated_at = $3 WHERE node_id = $4",
                &params![true, details.to_string(), now, id],
            )
            .await?;
        }
        DriftMark::Resolved(details) => {
            tx.execute(
                "UPDATE node_maas_state SET drift_detected = $1, drift_details = $2,
                    drift_resolved_at = $3, updated_at = $3 WHERE node_id = $4",
                &params![false, details.to_string(), now, id],
            )
            .await?;
        }
    }
    Ok(())
}

impl Store {
    /// The node agent's last authenticated contact (000 §6.3): its enrollment or its latest
    /// call with its agent token, whichever is newer. `None`: never heard from.
    pub async fn last_agent_contact(
        &self,
        node: Uuid,
    ) -> Result<Option<DateTime<Utc>>, StoreError> {
        let mut tx = self.pool.read().await?;
        read_node(&mut tx, node).await?;
        Ok(contacts(&mut tx, Some(node), None).await?.remove(&node))
    }

    /// The last agent contact of every node that has one (of one site): one query.
    pub async fn agent_contacts(
        &self,
        site: Option<&str>,
    ) -> Result<BTreeMap<Uuid, DateTime<Utc>>, StoreError> {
        let mut tx = self.pool.read().await?;
        contacts(&mut tx, None, site).await
    }

    /// Every node's MAAS state row (of one site), ordered by node id.
    pub async fn maas_states(&self, site: Option<&str>) -> Result<Vec<MaasState>, StoreError> {
        let mut tx = self.pool.read().await?;
        let rows = match site {
            Some(site) => {
                tx.fetch_all(
                    "SELECT * FROM node_maas_state WHERE site = $1 ORDER BY node_id",
                    &params![site],
                )
                .await?
            }
            None => {
                tx.fetch_all("SELECT * FROM node_maas_state ORDER BY node_id", &[])
                    .await?
            }
        };
        rows.iter().map(maas_state_from_row).collect()
    }

    /// Write one node's reconciliation (see [`DriftRecord`]) in one transaction: all of it or,
    /// when a check refuses, nothing.
    pub async fn record_drift(
        &self,
        record: &DriftRecord,
    ) -> Result<(Node, Option<MaasState>), StoreError> {
        let now = self.now();
        let mut tx = self.pool.write().await?;
        let written = write_drift(&mut tx, now, record).await?;
        tx.commit().await?;
        Ok(written)
    }

    /// Write many nodes' reconciliations in one transaction (the drift pass of a site). Each
    /// record is checked as [`Store::record_drift`] checks it, and one that a check refuses
    /// writes nothing and gets its refusal in the answer (in `records` order), while the others
    /// are written; a database failure fails them all.
    pub async fn record_drift_batch(
        &self,
        records: &[DriftRecord],
    ) -> Result<Vec<Result<(), StoreError>>, StoreError> {
        let now = self.now();
        let mut tx = self.pool.write().await?;
        let mut results = Vec::with_capacity(records.len());
        for record in records {
            results.push(match write_drift(&mut tx, now, record).await {
                Ok(_) => Ok(()),
                Err(
                    refused @ (StoreError::StaleGeneration { .. } | StoreError::JobOpen { .. }),
                ) => Err(refused),
                Err(other) => return Err(other),
            });
        }
        tx.commit().await?;
        Ok(results)
    }

    /// Record that the drift pass saw these nodes' machines again exactly as last recorded:
    /// only `last_reconciled_at` moves, in one statement per thousand nodes. Nothing a job
    /// or an operator owns changes, so no node check is needed.
    pub async fn touch_reconciled(&self, nodes: &[Uuid]) -> Result<(), StoreError> {
        if nodes.is_empty() {
            return Ok(());
        }
        let at = format_time(self.now());
        let mut tx = self.pool.write().await?;
        for chunk in nodes.chunks(1000) {
            let mut values: Vec<Param> = vec![Param::from(at.as_str())];
            let mut marks = Vec::with_capacity(chunk.len());
            for node in chunk {
                values.push(Param::from(node.to_string()));
                marks.push(format!("${}", values.len()));
            }
            tx.execute(
                format!(
                    "UPDATE node_maas_state SET last_reconciled_at = $1 WHERE node_id IN ({})",
                    marks.join(", ")
                ),
                &values,
            )
            .await?;
        }
        tx.commit().await
    }
}

/// One node's reconciliation in `tx` (see [`DriftRecord`]); the checks come before any
/// write, so a refused record leaves nothing behind.
async fn write_drift(
    tx: &mut Tx,
    now: DateTime<Utc>,
    record: &DriftRecord,
) -> Result<(Node, Option<MaasState>), StoreError> {
    let at = format_time(now);
    lock_node(tx, record.node_id).await?;
    let node = read_node(tx, record.node_id).await?;
    if node.generation != record.expected_generation {
        return Err(StoreError::StaleGeneration {
            node: node.id.to_string(),
            expected: record.expected_generation,
            found: node.generation,
        });
    }
    if let Some(fence) = &record.fence {
        check_fence(tx, fence).await?;
    }
    if record.refuse_if_job_open
        && let Some((kind, _, state, job)) = open_jobs(tx, node.id).await?.into_iter().next()
    {
        return Err(StoreError::JobOpen {
            node: node.id.to_string(),
            kind: kind.as_str(),
            job,
            state: state.to_string(),
        });
    }
    let mut node = node;
    if let Some((to, by)) = record.transition {
        let mut request = NodeTransition::new(to, by, record.actor.clone());
        request.reason = record.reason.clone();
        node = transition_in(tx, now, node.id, &request, None).await?;
    }
    if let Some(host) = &record.host
        && node.host.as_deref() != Some(host.as_str())
    {
        let target = node.status;
        node = write_node(
            tx,
            now,
            &node,
            vec![("host", Param::from(host.as_str()))],
            NodeAudit {
                actor: &record.actor,
                reason: record.reason.clone(),
                action: "node.set_host",
                target,
                correlation_ids: json!({"owner": Owner::Reconciler.as_str()}),
                details: json!({"from": node.host, "to": host}),
            },
        )
        .await?;
    }
    if let Some(observation) = &record.observation {
        write_maas_state(
            tx,
            now,
            &MaasStateUpdate {
                node_id: node.id,
                site: observation.site.clone(),
                maas_system_id: observation.system_id.clone(),
                status: observation.status.clone(),
                power_state: observation.power_state.clone(),
                ips: observation.ips.clone(),
                drift: None,
            },
        )
        .await?;
    }
    write_mark(tx, &at, node.id, &record.mark).await?;
    if let Some((action, details)) = &record.audit {
        write_audit(
            tx,
            now,
            &AuditEntry {
                actor: record.actor.clone(),
                reason: record.reason.clone(),
                action: action.clone(),
                subject_kind: "node".into(),
                subject_id: node.id.to_string(),
                prior_state: Some(node.status.as_str().into()),
                expected_target: Some(node.status.as_str().into()),
                correlation_ids: json!({}),
                details: details.clone(),
            },
        )
        .await?;
    }
    let state = read_maas_state(tx, node.id).await?;
    Ok((node, state))
}

/// Last contact per node: `nodes.last_agent_contact_at`, written by the enrollment and by every
/// authenticated agent call (`Store::authenticate_agent`, each task poll).
async fn contacts(
    tx: &mut Tx,
    node: Option<Uuid>,
    site: Option<&str>,
) -> Result<BTreeMap<Uuid, DateTime<Utc>>, StoreError> {
    let mut sql = String::from(
        "SELECT n.id AS id, n.last_agent_contact_at AS contact FROM nodes n
         WHERE n.last_agent_contact_at IS NOT NULL",
    );
    let mut values: Vec<Param> = Vec::new();
    if let Some(node) = node {
        values.push(Param::from(node.to_string()));
        sql.push_str(&format!(" AND n.id = ${}", values.len()));
    }
    if let Some(site) = site {
        values.push(Param::from(site));
        sql.push_str(&format!(" AND n.site = ${}", values.len()));
    }
    let mut out = BTreeMap::new();
    for row in tx.fetch_all(sql, &values).await? {
        if let Some(at) = parse_opt_time(row.opt_text("contact")?)? {
            out.insert(parse_uuid(&row.text("id")?)?, at);
        }
    }
    Ok(out)
}
