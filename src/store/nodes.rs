//! Node inventory rows (001 §3; seed 004 retired/protected; DESIGN.md §2 paused). Every change
//! goes through the lifecycle rules inside the writing transaction and is audited.

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::json;
use uuid::Uuid;

use crate::lifecycle::{
    DecommissionMode, IronicEvent, IronicNode, JobActivity, JobKind, JobState, NodeFacts,
    NodeState, Owner, Provider, ProvisionState, ProvisionView, TransitionContext, Verb,
    check_initial, check_job_node_state, check_transition, provision_view,
};

use super::db::{Param, Row, Select, Tx, params};
use super::jobs::Job;
use super::leases::{Fence, check_fence};
use super::records::{
    Actor, AuditEntry, MaasState, MaasStateUpdate, read_maas_state, write_audit, write_maas_state,
};
use super::{
    Store, StoreError, bump_serial, format_time, parse_name, parse_opt_time, parse_time, parse_uuid,
};
use crate::model::NodePolicy;

/// One node record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Node {
    pub id: Uuid,
    pub site: String,
    pub hostname: String,
    pub status: NodeState,
    pub provider: Provider,
    pub retired: bool,
    pub retired_reason: Option<String>,
    pub protected: bool,
    pub protected_reason: Option<String>,
    pub paused: bool,
    /// Bumped by every write to the row (optimistic concurrency / fencing).
    pub generation: i64,
    pub sku: Option<String>,
    pub gpus: Option<i64>,
    pub ipmi_ip: Option<String>,
    /// The deployed address (000 §8.1 `host`).
    pub host: Option<String>,
    pub last_agent_contact_at: Option<DateTime<Utc>>,
    /// The manifest's `reimage.generation` last applied to the node (onboarding's deploy or a
    /// completed reimage); `None` for rows from before schema version 3.
    pub reimage_generation: Option<i64>,
    /// The release policy the manifests last gave the node (schema version 9); `None` until
    /// one is recorded.
    pub release_policy: Option<NodePolicy>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// A node to create.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewNode {
    pub site: String,
    pub hostname: String,
    pub provider: Provider,
    /// `bootstrap_issued` or `enrolling`.
    pub status: NodeState,
    pub sku: Option<String>,
    pub gpus: Option<i64>,
    pub ipmi_ip: Option<String>,
}

/// A coarse-state change request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeTransition {
    pub to: NodeState,
    /// The lifecycle owner making the change (001 §3.3).
    pub by: Owner,
    pub actor: Actor,
    pub reason: Option<String>,
    /// Refuse if the node's generation moved since it was read.
    pub expected_generation: Option<i64>,
    /// Refuse unless this lease is still held (a stale executor cannot move the node back).
    pub fence: Option<Fence>,
}

impl NodeTransition {
    pub fn new(to: NodeState, by: Owner, actor: Actor) -> Self {
        Self {
            to,
            by,
            actor,
            reason: None,
            expected_generation: None,
            fence: None,
        }
    }
}

/// Filters for [`Store::list_nodes`]; all optional, combined with AND.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeFilter {
    pub site: Option<String>,
    pub status: Option<NodeState>,
    /// `Some(true)`: only nodes flagged retired (seed 004 `--retired`).
    pub retired: Option<bool>,
    /// Only nodes with this hostname.
    pub hostname: Option<String>,
    /// Deleted identities are left out unless asked for.
    pub include_deleted: bool,
}

pub(crate) fn node_from_row(row: &Row) -> Result<Node, StoreError> {
    Ok(Node {
        id: parse_uuid(&row.text("id")?)?,
        site: row.text("site")?,
        hostname: row.text("hostname")?,
        status: parse_name(&row.text("status")?)?,
        provider: parse_name(&row.text("provider")?)?,
        retired: row.bool("retired")?,
        retired_reason: row.opt_text("retired_reason")?,
        protected: row.bool("protected")?,
        protected_reason: row.opt_text("protected_reason")?,
        paused: row.bool("paused")?,
        generation: row.int("generation")?,
        sku: row.opt_text("sku")?,
        gpus: row.opt_int("gpus")?,
        ipmi_ip: row.opt_text("ipmi_ip")?,
        host: row.opt_text("host")?,
        last_agent_contact_at: parse_opt_time(row.opt_text("last_agent_contact_at")?)?,
        reimage_generation: row.opt_int("reimage_generation")?,
        release_policy: row
            .opt_text("release_policy")?
            .map(|text| {
                serde_json::from_str(&text)
                    .map_err(|e| StoreError::Corrupt(format!("nodes.release_policy: {e}")))
            })
            .transpose()?,
        created_at: parse_time(&row.text("created_at")?)?,
        updated_at: parse_time(&row.text("updated_at")?)?,
    })
}

/// Take the node row's write lock before reading what a check depends on (the node and its
/// jobs). On PostgreSQL this serialises node transitions and job updates of one node, so a
/// check never runs on a state another transaction is about to change (no write skew); on
/// SQLite the writing transaction already holds the database lock.
pub(crate) async fn lock_node(tx: &mut Tx, id: Uuid) -> Result<(), StoreError> {
    tx.execute(
        "UPDATE nodes SET generation = generation WHERE id = $1",
        &params![id.to_string()],
    )
    .await?;
    Ok(())
}

pub(crate) async fn read_node(tx: &mut Tx, id: Uuid) -> Result<Node, StoreError> {
    node_from_row(&tx.fetch_by_id("nodes", "node", id).await?)
}

/// The open (non-terminal) jobs of a node: (kind, mode, state, id).
pub(crate) async fn open_jobs(
    tx: &mut Tx,
    node: Uuid,
) -> Result<Vec<(JobKind, Option<DecommissionMode>, JobState, String)>, StoreError> {
    let terminal: Vec<Param> = JobState::ALL
        .iter()
        .filter(|s| s.is_terminal())
        .map(|s| Param::from(s.as_str()))
        .collect();
    let mut params = vec![Param::from(node.to_string())];
    params.extend(terminal);
    let mut jobs = Vec::new();
    for row in tx
        .fetch_all(
            "SELECT id, status FROM onboardings WHERE node_id = $1 AND status NOT IN ($2, $3, $4)",
            &params,
        )
        .await?
    {
        jobs.push((
            JobKind::Onboarding,
            None,
            parse_name(&row.text("status")?)?,
            row.text("id")?,
        ));
    }
    for row in tx
        .fetch_all(
            "SELECT id, status, mode FROM decommissions WHERE node_id = $1 AND status NOT IN ($2, $3, $4)",
            &params,
        )
        .await?
    {
        jobs.push((
            JobKind::Decommission,
            Some(parse_name(&row.text("mode")?)?),
            parse_name(&row.text("status")?)?,
            row.text("id")?,
        ));
    }
    Ok(jobs)
}

/// Apply a validated coarse transition inside `tx`; returns the updated node. A node already
/// in the target state is returned unchanged (idempotent re-entry, 000 §4.8). `job_override`
/// replaces the state of one open job for the consistency check (a job update moving both).
pub(crate) async fn transition_in(
    tx: &mut Tx,
    now: DateTime<Utc>,
    id: Uuid,
    request: &NodeTransition,
    job_override: Option<(&str, JobState)>,
) -> Result<Node, StoreError> {
    lock_node(tx, id).await?;
    let node = read_node(tx, id).await?;
    if let Some(expected) = request.expected_generation
        && expected != node.generation
    {
        return Err(StoreError::StaleGeneration {
            node: id.to_string(),
            expected,
            found: node.generation,
        });
    }
    if let Some(fence) = &request.fence {
        check_fence(tx, fence).await?;
    }
    if node.status == request.to {
        return Ok(node);
    }
    let jobs = open_jobs(tx, id).await?;
    let ctx = TransitionContext {
        owning_operation: jobs.iter().any(|(kind, _, state, job_id)| {
            let state = match job_override {
                Some((jid, s)) if jid == job_id => s,
                _ => *state,
            };
            *kind == JobKind::Decommission && state.is_open()
        }),
        identity_retained: !jobs.iter().any(|(kind, mode, _, _)| {
            *kind == JobKind::Decommission && *mode == Some(DecommissionMode::FullDecommission)
        }),
        protected: node.protected,
    };
    check_transition(node.status, request.to, request.by, &ctx).map_err(|source| {
        StoreError::Transition {
            node: id.to_string(),
            source,
        }
    })?;
    for (kind, mode, state, job_id) in &jobs {
        let state = match job_override {
            Some((jid, s)) if jid == job_id => s,
            _ => *state,
        };
        check_job_node_state(*kind, *mode, state, request.to).map_err(|source| {
            StoreError::JobState {
                kind: kind.as_str(),
                job: job_id.clone(),
                source,
            }
        })?;
    }
    write_node(
        tx,
        now,
        &node,
        vec![("status", Param::from(request.to.as_str()))],
        NodeAudit {
            actor: &request.actor,
            reason: request.reason.clone(),
            action: "node.transition",
            target: request.to,
            correlation_ids: json!({"owner": request.by.as_str()}),
            details: json!({}),
        },
    )
    .await
}

/// The audit facts of one node write.
pub(crate) struct NodeAudit<'a> {
    pub actor: &'a Actor,
    pub reason: Option<String>,
    pub action: &'a str,
    pub target: NodeState,
    pub correlation_ids: serde_json::Value,
    pub details: serde_json::Value,
}

/// Finish a node write inside `tx`: the update conditional on the generation that was read
/// (a concurrent writer makes it fail), the audit row, the store serial; returns the new row.
pub(crate) async fn write_node(
    tx: &mut Tx,
    now: DateTime<Utc>,
    node: &Node,
    assignments: Vec<(&'static str, Param)>,
    audit: NodeAudit<'_>,
) -> Result<Node, StoreError> {
    let mut sets = String::new();
    let mut values = Vec::new();
    for (column, value) in assignments {
        values.push(value);
        sets.push_str(&format!("{column} = ${}, ", values.len()));
    }
    let n = values.len();
    values.extend([
        Param::from(format_time(now)),
        Param::from(node.id.to_string()),
        Param::from(node.generation),
    ]);
    let sql = format!(
        "UPDATE nodes SET {sets}generation = generation + 1, updated_at = ${}
         WHERE id = ${} AND generation = ${}",
        n + 1,
        n + 2,
        n + 3
    );
    if tx.execute(sql, &values).await? != 1 {
        return Err(StoreError::Concurrent {
            kind: "node",
            id: node.id.to_string(),
        });
    }
    write_audit(
        tx,
        now,
        &AuditEntry {
            actor: audit.actor.clone(),
            reason: audit.reason,
            action: audit.action.into(),
            subject_kind: "node".into(),
            subject_id: node.id.to_string(),
            prior_state: Some(node.status.as_str().into()),
            expected_target: Some(audit.target.as_str().into()),
            correlation_ids: audit.correlation_ids,
            details: audit.details,
        },
    )
    .await?;
    bump_serial(tx).await?;
    read_node(tx, node.id).await
}

/// What the provider-neutral view of a node is computed from (seed 002): its row, the last
/// MAAS status seen (the open job's when it has one, else the drift pass's record), and what
/// its open job is doing.
pub fn node_facts(node: &Node, maas: Option<&MaasState>, job: Option<&Job>) -> NodeFacts {
    let open = job.filter(|j| j.state.is_open());
    let status = open
        .and_then(|j| j.last_maas_status.as_deref())
        .or_else(|| maas.and_then(|m| m.last_maas_status.as_deref()))
        .and_then(crate::lifecycle::MaasStatus::from_name);
    NodeFacts {
        node: Some(node.status),
        maas: status,
        job: open.map(|j| JobActivity {
            kind: j.kind,
            mode: j.mode(),
            state: j.state,
            stage: j.stage.clone(),
        }),
        retired: node.retired,
        retired_reason: node.retired_reason.clone(),
        protected: node.protected,
        protected_reason: node.protected_reason.clone(),
    }
}

/// The node's state in the provider-neutral (Ironic) view, ignoring jobs (the flag rules of
/// seed 004 are about the machine's state).
/// The provider state the retired and protected flags are checked against: what MAAS last
/// reported (the inventory state alone does not say where the machine stands).
pub(crate) fn provider_view(node: &Node, maas: Option<&MaasState>) -> Option<IronicNode> {
    provision_view(&node_facts(node, maas, None))
        .filter(|v| v.source != crate::lifecycle::ViewSource::Inventory)
        .map(|v| v.node)
}

/// A node with what its lifecycle detail view and the API show: its last MAAS record, its
/// latest job, and its provider-neutral view.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NodeView {
    pub node: Node,
    pub maas: Option<MaasState>,
    pub job: Option<Job>,
    pub view: Option<ProvisionView>,
}

impl Store {
    /// Create a node in an initial state with a new id. The (site, hostname) pair must not
    /// belong to another live node.
    pub async fn create_node(&self, new: &NewNode, actor: &Actor) -> Result<Node, StoreError> {
        check_initial(new.status).map_err(|source| StoreError::Transition {
            node: new.hostname.clone(),
            source,
        })?;
        if new.site.is_empty() || new.hostname.is_empty() {
            return Err(StoreError::Invalid(
                "a node needs a site and a hostname".into(),
            ));
        }
        let id = Uuid::new_v4();
        let now = self.now();
        let mut tx = self.pool.write().await?;
        let duplicate = || StoreError::DuplicateNode {
            site: new.site.clone(),
            hostname: new.hostname.clone(),
        };
        if find_live(&mut tx, &new.site, &new.hostname)
            .await?
            .is_some()
        {
            return Err(duplicate());
        }
        // Two replicas may create the same node at once (one resuming a job the other held
        // when it stopped): on PostgreSQL both pass the read above, and the index refuses the
        // second insert once the first commits. That is the same duplicate.
        tx.execute(
            "INSERT INTO nodes (id, site, hostname, status, provider, generation, sku, gpus,
                ipmi_ip, created_at, updated_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $10)",
            &params![
                id.to_string(),
                new.site.clone(),
                new.hostname.clone(),
                new.status.as_str(),
                new.provider.as_str(),
                1i64,
                new.sku.clone(),
                new.gpus,
                new.ipmi_ip.clone(),
                format_time(now),
            ],
        )
        .await
        .map_err(|err| {
            if err.is_unique_violation() {
                duplicate()
            } else {
                err
            }
        })?;
        write_audit(
            &mut tx,
            now,
            &AuditEntry {
                actor: actor.clone(),
                reason: None,
                action: "node.create".into(),
                subject_kind: "node".into(),
                subject_id: id.to_string(),
                prior_state: None,
                expected_target: Some(new.status.as_str().into()),
                correlation_ids: json!({}),
                details: json!({"site": new.site, "hostname": new.hostname}),
            },
        )
        .await?;
        bump_serial(&mut tx).await?;
        let node = read_node(&mut tx, id).await?;
        tx.commit().await?;
        Ok(node)
    }

    pub async fn node(&self, id: Uuid) -> Result<Node, StoreError> {
        self.by_id("nodes", "node", id, node_from_row).await
    }

    /// The live (not deleted) node with this hostname in this site.
    pub async fn find_node(&self, site: &str, hostname: &str) -> Result<Option<Node>, StoreError> {
        let mut tx = self.pool.read().await?;
        find_live(&mut tx, site, hostname).await
    }

    /// Live nodes with this hostname in any site (for `status NODE` without `--site`).
    pub async fn find_nodes_by_hostname(&self, hostname: &str) -> Result<Vec<Node>, StoreError> {
        let mut tx = self.pool.read().await?;
        tx.fetch_all(
            "SELECT * FROM nodes WHERE hostname = $1 AND status <> $2 ORDER BY site",
            &params![hostname, NodeState::Deleted.as_str()],
        )
        .await?
        .iter()
        .map(node_from_row)
        .collect()
    }

    /// Nodes matching a filter, ordered by site then hostname.
    pub async fn list_nodes(&self, filter: &NodeFilter) -> Result<Vec<Node>, StoreError> {
        let mut tx = self.pool.read().await?;
        list_nodes_in(&mut tx, filter).await
    }

    /// Record what MAAS reports for a node (insert or update its single row).
    pub async fn upsert_maas_state(
        &self,
        update: &MaasStateUpdate,
    ) -> Result<MaasState, StoreError> {
        let now = self.now();
        let mut tx = self.pool.write().await?;
        read_node(&mut tx, update.node_id).await?;
        let state = write_maas_state(&mut tx, now, update).await?;
        tx.commit().await?;
        Ok(state)
    }

    /// Move a node between coarse states under the rules of 001 §3 (see [`NodeTransition`]).
    pub async fn transition_node(
        &self,
        id: Uuid,
        request: &NodeTransition,
    ) -> Result<Node, StoreError> {
        let now = self.now();
        let mut tx = self.pool.write().await?;
        let node = transition_in(&mut tx, now, id, request, None).await?;
        tx.commit().await?;
        Ok(node)
    }

    /// Several coarse moves in one transaction (each checked as [`Store::transition_node`]
    /// checks one): a node never rests in the states between. A reactivation takes a retired
    /// node `retired -> active -> quarantined` so it is never schedulable while rebuilt.
    pub async fn transition_node_through(
        &self,
        id: Uuid,
        requests: &[NodeTransition],
    ) -> Result<Node, StoreError> {
        let now = self.now();
        let mut tx = self.pool.write().await?;
        let mut node = read_node(&mut tx, id).await?;
        for request in requests {
            node = transition_in(&mut tx, now, id, request, None).await?;
        }
        tx.commit().await?;
        Ok(node)
    }

    /// Flag a node retired with a reason (seed 004). Allowed in any provider state except
    /// AVAILABLE; a node whose provider state is unknown is refused.
    pub async fn set_retired(
        &self,
        id: Uuid,
        reason: &str,
        actor: &Actor,
    ) -> Result<Node, StoreError> {
        if reason.trim().is_empty() {
            return Err(StoreError::Invalid(
                "a retirement needs a reason (retired_reason)".into(),
            ));
        }
        self.change_flag(
            id,
            actor,
            "node.set_retired",
            IronicEvent::SetRetired {
                reason: Some(reason.to_owned()),
            },
        )
        .await
    }

    pub async fn unset_retired(&self, id: Uuid, actor: &Actor) -> Result<Node, StoreError> {
        self.change_flag(id, actor, "node.unset_retired", IronicEvent::UnsetRetired)
            .await
    }

    /// Protect a node (blocks rebuild, undeploy and delete); only while ACTIVE or in RESCUE.
    pub async fn set_protected(
        &self,
        id: Uuid,
        reason: Option<&str>,
        actor: &Actor,
    ) -> Result<Node, StoreError> {
        self.change_flag(
            id,
            actor,
            "node.set_protected",
            IronicEvent::SetProtected {
                reason: reason.map(str::to_owned),
            },
        )
        .await
    }

    pub async fn unset_protected(&self, id: Uuid, actor: &Actor) -> Result<Node, StoreError> {
        self.change_flag(
            id,
            actor,
            "node.unset_protected",
            IronicEvent::UnsetProtected,
        )
        .await
    }

    async fn change_flag(
        &self,
        id: Uuid,
        actor: &Actor,
        action: &str,
        event: IronicEvent,
    ) -> Result<Node, StoreError> {
        let now = self.now();
        let mut tx = self.pool.write().await?;
        let node = read_node(&mut tx, id).await?;
        let maas = read_maas_state(&mut tx, id).await?;
        let needs_state = matches!(
            event,
            IronicEvent::SetRetired { .. } | IronicEvent::SetProtected { .. }
        );
        let next = match provider_view(&node, maas.as_ref()) {
            Some(view) => view.apply(&event).map_err(|source| StoreError::Provision {
                node: id.to_string(),
                source,
            })?,
            None if needs_state => {
                return Err(StoreError::ProviderStateUnknown {
                    node: id.to_string(),
                    flag: if matches!(event, IronicEvent::SetRetired { .. }) {
                        "retired"
                    } else {
                        "protected"
                    },
                });
            }
            None => IronicNode {
                retired: !matches!(event, IronicEvent::UnsetRetired) && node.retired,
                retired_reason: if matches!(event, IronicEvent::UnsetRetired) {
                    None
                } else {
                    node.retired_reason.clone()
                },
                protected: !matches!(event, IronicEvent::UnsetProtected) && node.protected,
                protected_reason: if matches!(event, IronicEvent::UnsetProtected) {
                    None
                } else {
                    node.protected_reason.clone()
                },
                ..IronicNode::new()
            },
        };
        let node = write_node(
            &mut tx,
            now,
            &node,
            vec![
                ("retired", Param::from(next.retired)),
                ("retired_reason", Param::from(next.retired_reason.clone())),
                ("protected", Param::from(next.protected)),
                (
                    "protected_reason",
                    Param::from(next.protected_reason.clone()),
                ),
            ],
            NodeAudit {
                actor,
                reason: next
                    .retired_reason
                    .clone()
                    .filter(|_| action == "node.set_retired"),
                action,
                target: node.status,
                correlation_ids: json!({}),
                details: json!({"retired": next.retired, "protected": next.protected}),
            },
        )
        .await?;
        tx.commit().await?;
        Ok(node)
    }

    /// Whether a provisioning verb may run on a node now (seed 002/004): `provide` on a retired
    /// node, `rebuild`/`deleted` on a protected one are refused as conflicts.
    pub async fn check_verb(&self, id: Uuid, verb: Verb) -> Result<ProvisionState, StoreError> {
        let mut tx = self.pool.read().await?;
        let node = read_node(&mut tx, id).await?;
        let maas = read_maas_state(&mut tx, id).await?;
        let view = provider_view(&node, maas.as_ref()).ok_or(StoreError::ProviderStateUnknown {
            node: id.to_string(),
            flag: "verb",
        })?;
        view.apply(&IronicEvent::Verb(verb))
            .map(|n| n.state)
            .map_err(|source| StoreError::Provision {
                node: id.to_string(),
                source,
            })
    }

    /// Set or clear seed 004's retired flag as a lifecycle job does it: a retirement sets it
    /// (with the manifest's reason) before anything happens to the machine — the job itself
    /// takes the node out of scheduling, as Ironic's `manage` does for an AVAILABLE node —, a
    /// reactivation clears it first (seed 004: "the retired field needs to be set to False
    /// first"). Audited with the job; a no-op when the flag already says so.
    pub async fn set_retired_by_job(
        &self,
        id: Uuid,
        retired: Option<&str>,
        actor: &Actor,
        job: Uuid,
    ) -> Result<Node, StoreError> {
        if retired.is_some_and(|r| r.trim().is_empty()) {
            return Err(StoreError::Invalid(
                "a retirement needs a reason (retired_reason)".into(),
            ));
        }
        let now = self.now();
        let mut tx = self.pool.write().await?;
        lock_node(&mut tx, id).await?;
        let node = read_node(&mut tx, id).await?;
        let reason = retired.map(str::to_owned);
        if node.retired == retired.is_some() && (retired.is_none() || node.retired_reason == reason)
        {
            return Ok(node);
        }
        let action = match retired {
            Some(_) => "node.set_retired",
            None => "node.unset_retired",
        };
        let node = write_node(
            &mut tx,
            now,
            &node,
            vec![
                ("retired", Param::from(retired.is_some())),
                ("retired_reason", Param::from(reason.clone())),
            ],
            NodeAudit {
                actor,
                reason: reason.or_else(|| node.retired_reason.clone()),
                action,
                target: node.status,
                correlation_ids: json!({"job_id": job}),
                details: json!({"retired": retired.is_some()}),
            },
        )
        .await?;
        tx.commit().await?;
        Ok(node)
    }

    /// The node with its MAAS record, latest job and provider-neutral view.
    pub async fn node_view(&self, id: Uuid) -> Result<NodeView, StoreError> {
        let node = self.node(id).await?;
        let maas = self.maas_state(id).await?;
        let job = self.latest_job_for_node(id).await?;
        let view = provision_view(&node_facts(&node, maas.as_ref(), job.as_ref()));
        Ok(NodeView {
            node,
            maas,
            job,
            view,
        })
    }

    /// Pause or unpause a node (the reconciler leaves paused nodes alone).
    pub async fn set_paused(
        &self,
        id: Uuid,
        paused: bool,
        actor: &Actor,
    ) -> Result<Node, StoreError> {
        self.update_node_fields(id, actor, "node.set_paused", "paused", Param::from(paused))
            .await
    }

    /// Record the node's deployed address (000 §8.1 `host`).
    pub async fn set_host(&self, id: Uuid, host: &str, actor: &Actor) -> Result<Node, StoreError> {
        self.update_node_fields(id, actor, "node.set_host", "host", Param::from(host))
            .await
    }

    /// Record the manifest's `reimage.generation` as applied to the node (the planner plans a
    /// reimage when the manifest's is higher). Audited; a no-op when it is recorded already.
    pub async fn record_reimage_generation(
        &self,
        id: Uuid,
        generation: u64,
        actor: &Actor,
    ) -> Result<Node, StoreError> {
        let generation = stored_generation(generation);
        let node = self.node(id).await?;
        if node.reimage_generation == Some(generation) {
            return Ok(node);
        }
        self.update_node_fields(
            id,
            actor,
            "node.record_reimage_generation",
            "reimage_generation",
            Param::from(generation),
        )
        .await
    }

    /// Record the release policy the manifests give the node (pruning uses it once the node
    /// left them). Audited; a no-op when it is recorded already.
    pub async fn record_release_policy(
        &self,
        id: Uuid,
        policy: &NodePolicy,
        actor: &Actor,
    ) -> Result<Node, StoreError> {
        let node = self.node(id).await?;
        if node.release_policy.as_ref() == Some(policy) {
            return Ok(node);
        }
        let text = policy_text(policy)?;
        self.update_node_fields(
            id,
            actor,
            "node.record_release_policy",
            "release_policy",
            Param::from(text),
        )
        .await
    }

    /// What an onboarding's render records on its node, in one write: the reimage generation
    /// its deploy satisfies and the release policy the manifests give (what
    /// [`Store::record_reimage_generation`] and [`Store::record_release_policy`] record one by
    /// one, each with a read and a write of its own: on a wave's path). Audited once, naming
    /// what changed; a no-op when both are recorded already.
    pub async fn record_deploy_targets(
        &self,
        id: Uuid,
        generation: u64,
        policy: &NodePolicy,
        actor: &Actor,
    ) -> Result<Node, StoreError> {
        let generation = stored_generation(generation);
        let now = self.now();
        let mut tx = self.pool.write().await?;
        let node = read_node(&mut tx, id).await?;
        let mut assignments = Vec::new();
        let mut recorded = serde_json::Map::new();
        if node.reimage_generation != Some(generation) {
            assignments.push(("reimage_generation", Param::from(generation)));
            recorded.insert("reimage_generation".into(), json!(generation));
        }
        if node.release_policy.as_ref() != Some(policy) {
            assignments.push(("release_policy", Param::from(policy_text(policy)?)));
            recorded.insert("release_policy".into(), json!(policy));
        }
        if assignments.is_empty() {
            return Ok(node);
        }
        let target = node.status;
        let node = write_node(
            &mut tx,
            now,
            &node,
            assignments,
            NodeAudit {
                actor,
                reason: None,
                action: "node.record_deploy_targets",
                target,
                correlation_ids: json!({}),
                details: serde_json::Value::Object(recorded),
            },
        )
        .await?;
        tx.commit().await?;
        Ok(node)
    }

    /// Record agent contact (heartbeat, 000 §6.3). Not audited: it happens every poll.
    pub async fn touch_agent_contact(&self, id: Uuid) -> Result<(), StoreError> {
        let mut tx = self.pool.write().await?;
        let n = tx
            .execute(
                "UPDATE nodes SET last_agent_contact_at = $1 WHERE id = $2",
                &params![format_time(self.now()), id.to_string()],
            )
            .await?;
        if n == 0 {
            return Err(StoreError::NotFound {
                kind: "node",
                id: id.to_string(),
            });
        }
        tx.commit().await
    }

    async fn update_node_fields(
        &self,
        id: Uuid,
        actor: &Actor,
        action: &str,
        column: &'static str,
        value: Param,
    ) -> Result<Node, StoreError> {
        let now = self.now();
        let mut tx = self.pool.write().await?;
        let node = read_node(&mut tx, id).await?;
        let node = write_node(
            &mut tx,
            now,
            &node,
            vec![(column, value)],
            NodeAudit {
                actor,
                reason: None,
                action,
                target: node.status,
                correlation_ids: json!({}),
                details: json!({}),
            },
        )
        .await?;
        tx.commit().await?;
        Ok(node)
    }
}

/// A manifest's `reimage.generation` as the store keeps it. Generations are small counters; a
/// value beyond i64 would be a typo, held as the max.
fn stored_generation(generation: u64) -> i64 {
    i64::try_from(generation).unwrap_or(i64::MAX)
}

/// A release policy as its column holds it.
fn policy_text(policy: &NodePolicy) -> Result<String, StoreError> {
    serde_json::to_string(policy).map_err(|e| StoreError::Invalid(format!("release policy: {e}")))
}

async fn find_live(tx: &mut Tx, site: &str, hostname: &str) -> Result<Option<Node>, StoreError> {
    tx.fetch_optional(
        "SELECT * FROM nodes WHERE site = $1 AND hostname = $2 AND status <> $3",
        &params![site, hostname, NodeState::Deleted.as_str()],
    )
    .await?
    .as_ref()
    .map(node_from_row)
    .transpose()
}

/// [`Store::list_nodes`] inside a transaction.
pub(super) async fn list_nodes_in(
    tx: &mut Tx,
    filter: &NodeFilter,
) -> Result<Vec<Node>, StoreError> {
    let mut select = Select::all_of("nodes");
    if let Some(site) = &filter.site {
        select.and("site =", site);
    }
    if let Some(status) = filter.status {
        select.and("status =", status.as_str());
    }
    if let Some(retired) = filter.retired {
        select.and("retired =", retired);
    }
    if let Some(hostname) = &filter.hostname {
        select.and("hostname =", hostname);
    }
    if !filter.include_deleted {
        select.and("status <>", NodeState::Deleted.as_str());
    }
    select
        .fetch_map(tx, "site, hostname, created_at", |row| node_from_row(&row))
        .await
}
