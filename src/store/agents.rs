//! Node-agent enrollment (docs/contracts.md §5; seed 000 §4.3 WaitForAgentEnrollment, §4.6;
//! seed 001 §3.3): the single-use enrollment token is consumed, the enrollment is recorded on
//! the node (for the onboarding stage and the planner to read), the agent's contact time is
//! set, and an agent token is issued and stored as SHA-256 only — all in one transaction, so a
//! refused enrollment changes nothing.
//!
//! Enrollment does not make the node `active`: the onboarding's `wait_for_agent_enrollment`
//! does, after its health checks (001 §3.3). An enrollment that arrives after the onboarding
//! gave up (a late agent with a still-valid token) is accepted and recorded with the job's
//! state at that moment, so a later plan can adopt the node.

use std::collections::BTreeMap;

use chrono::{DateTime, Duration, Utc};
use serde::Serialize;
use serde_json::json;
use uuid::Uuid;

use super::TaskStatus;
use super::db::{Row, Tx, params};
use super::nodes::{lock_node, read_node};
use super::records::{Actor, AuditEntry, Role, read_maas_state, write_audit};
use super::tokens::{mark_used, random_token, token_hash};
use super::{
    Store, StoreError, TokenError, bump_serial, format_time, parse_json, parse_name, parse_time,
    parse_uuid,
};
use crate::lifecycle::{JobState, NodeState};
use crate::secrets::Secret;

/// How long after a successful enrollment the same agent may present the same token again and
/// get a new agent token, when the first answer was lost on the way (the agent then retries
/// with what it has). Only while the first agent token was never used.
pub const ENROLLMENT_REPLAY_WINDOW: Duration = Duration::minutes(10);

/// The node states an agent may enroll in: a node being onboarded (or bootstrapped by hand),
/// or one taken out of scheduling for a reimage.
pub const ENROLLABLE_STATES: &[NodeState] = &[
    NodeState::BootstrapIssued,
    NodeState::Enrolling,
    NodeState::Quarantined,
];

/// What an agent sends (docs/contracts.md §5), already size-checked by the endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnrollmentRequest {
    pub token: Secret,
    pub hostname: String,
    pub system_id: String,
    pub agent_version: String,
    /// The peer address the request came from, if known.
    pub remote_addr: Option<String>,
    /// First-boot layer outcomes the bootstrap reports (`site-bundle: ok|failed`, …).
    pub layers: BTreeMap<String, String>,
}

/// A recorded enrollment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AgentEnrollment {
    pub id: i64,
    pub node_id: Uuid,
    /// The onboarding the token was issued for.
    pub onboarding_id: Option<String>,
    /// That onboarding's state when the agent enrolled.
    pub onboarding_state: Option<JobState>,
    pub hostname: String,
    pub system_id: String,
    pub agent_version: String,
    pub remote_addr: Option<String>,
    pub layers: BTreeMap<String, String>,
    pub enrolled_at: DateTime<Utc>,
}

impl AgentEnrollment {
    /// The agent came after its onboarding stopped waiting (failed, cancelled or finished): a
    /// plan can adopt the node instead of redeploying it.
    pub fn is_late(&self) -> bool {
        self.onboarding_state
            .is_some_and(|s| !matches!(s, JobState::Pending | JobState::Running))
    }
}

/// An accepted enrollment and the agent token to hand back (once).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Enrolled {
    pub enrollment: AgentEnrollment,
    pub agent_token: Secret,
    /// The same agent presented the same token again within [`ENROLLMENT_REPLAY_WINDOW`]
    /// (its first answer was lost): a new agent token replaced the unused first one.
    pub replayed: bool,
}

/// Who an agent token belongs to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AgentIdentity {
    pub node_id: Uuid,
    pub enrollment_id: i64,
}

/// A current agent credential: whose it is, and whether it was ever used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentCredential {
    pub identity: AgentIdentity,
    /// The stored hash of the token (what [`AgentContact::credential`] names).
    pub token_hash: String,
    pub used: bool,
    /// The node has a task a poll could claim now.
    pub claimable: bool,
}

/// One agent contact to record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentContact {
    pub node_id: Uuid,
    /// The credential used, to mark it used.
    pub credential: Option<String>,
    pub at: DateTime<Utc>,
}

/// Why an enrollment was refused; nothing was changed.
#[derive(Debug, thiserror::Error)]
pub enum EnrollError {
    /// Unknown, expired or already used (HTTP 401).
    #[error(transparent)]
    InvalidToken(TokenError),
    /// The node is in a state that does not take enrollments (HTTP 409).
    #[error("node {hostname} is {status}: it is not waiting for an agent enrollment")]
    NotWaiting { hostname: String, status: NodeState },
    /// The token was issued for another machine (HTTP 409).
    #[error("the token was issued for {field} `{expected}`, but `{found}` presented it")]
    WrongMachine {
        field: &'static str,
        expected: String,
        found: String,
    },
    #[error(transparent)]
    Store(#[from] StoreError),
}

fn enrollment_from_row(row: &Row) -> Result<AgentEnrollment, StoreError> {
    let layers: BTreeMap<String, String> =
        serde_json::from_value(parse_json(&row.text("layers")?)?)
            .map_err(|e| StoreError::Corrupt(format!("agent_enrollments.layers: {e}")))?;
    Ok(AgentEnrollment {
        id: row.int("id")?,
        node_id: parse_uuid(&row.text("node_id")?)?,
        onboarding_id: row.opt_text("onboarding_id")?,
        onboarding_state: row
            .opt_text("onboarding_state")?
            .map(|s| parse_name(&s))
            .transpose()?,
        hostname: row.text("hostname")?,
        system_id: row.text("system_id")?,
        agent_version: row.text("agent_version")?,
        remote_addr: row.opt_text("remote_addr")?,
        layers,
        enrolled_at: parse_time(&row.text("enrolled_at")?)?,
    })
}

async fn read_enrollment(tx: &mut Tx, id: i64) -> Result<AgentEnrollment, StoreError> {
    let row = tx
        .fetch_one(
            "SELECT * FROM agent_enrollments WHERE id = $1",
            &params![id],
        )
        .await?;
    enrollment_from_row(&row)
}

/// The token row, if any: (node, onboarding, expires_at, used_at).
struct TokenRow {
    node_id: Uuid,
    onboarding_id: Option<String>,
    expires_at: String,
    used_at: Option<String>,
}

async fn read_token(tx: &mut Tx, hash: &str) -> Result<Option<TokenRow>, StoreError> {
    tx.fetch_optional(
        "SELECT node_id, onboarding_id, expires_at, used_at FROM enrollment_tokens
         WHERE token_hash = $1",
        &params![hash],
    )
    .await?
    .map(|row| {
        Ok(TokenRow {
            node_id: parse_uuid(&row.text("node_id")?)?,
            onboarding_id: row.opt_text("onboarding_id")?,
            expires_at: row.text("expires_at")?,
            used_at: row.opt_text("used_at")?,
        })
    })
    .transpose()
}

/// The enrollment a replay of `hash` would repeat: the token's enrollment by the same machine
/// within the window, whose agent token was never used.
async fn replayable(
    tx: &mut Tx,
    hash: &str,
    request: &EnrollmentRequest,
    now: DateTime<Utc>,
) -> Result<Option<AgentEnrollment>, StoreError> {
    let Some(row) = tx
        .fetch_optional(
            "SELECT * FROM agent_enrollments WHERE token_hash = $1 ORDER BY id DESC LIMIT 1",
            &params![hash],
        )
        .await?
    else {
        return Ok(None);
    };
    let enrollment = enrollment_from_row(&row)?;
    let same_machine = enrollment.hostname.eq_ignore_ascii_case(&request.hostname)
        && enrollment.system_id == request.system_id;
    if !same_machine || now - enrollment.enrolled_at > ENROLLMENT_REPLAY_WINDOW {
        return Ok(None);
    }
    let used = tx
        .fetch_optional(
            "SELECT token_hash FROM agent_credentials
             WHERE enrollment_id = $1 AND last_used_at IS NOT NULL",
            &params![enrollment.id],
        )
        .await?;
    Ok(used.is_none().then_some(enrollment))
}

impl Store {
    /// Enroll an agent (docs/contracts.md §5). See the module doc.
    pub async fn enroll_agent(&self, request: &EnrollmentRequest) -> Result<Enrolled, EnrollError> {
        let hash = token_hash(&request.token);
        let now = self.now();
        let at = format_time(now);
        let mut tx = self.pool.write().await?;
        let Some(token) = read_token(&mut tx, &hash).await? else {
            return Err(EnrollError::InvalidToken(TokenError::Unknown));
        };
        // Serialise with every other write to this node, then read the token again under it.
        lock_node(&mut tx, token.node_id).await?;
        let token = read_token(&mut tx, &hash)
            .await?
            .ok_or(EnrollError::InvalidToken(TokenError::Unknown))?;
        let replay = match &token.used_at {
            None if token.expires_at <= at => {
                return Err(EnrollError::InvalidToken(TokenError::Expired {
                    expired_at: token.expires_at,
                }));
            }
            None => None,
            Some(_) => Some(
                replayable(&mut tx, &hash, request, now)
                    .await?
                    .ok_or(EnrollError::InvalidToken(TokenError::AlreadyUsed))?,
            ),
        };
        let node = read_node(&mut tx, token.node_id).await?;
        if !ENROLLABLE_STATES.contains(&node.status) {
            return Err(EnrollError::NotWaiting {
                hostname: node.hostname,
                status: node.status,
            });
        }
        if !node.hostname.eq_ignore_ascii_case(&request.hostname) {
            return Err(EnrollError::WrongMachine {
                field: "hostname",
                expected: node.hostname,
                found: request.hostname.clone(),
            });
        }
        let onboarding = match &token.onboarding_id {
            Some(id) => tx
                .fetch_optional(
                    "SELECT status, maas_system_id FROM onboardings WHERE id = $1",
                    &params![id.clone()],
                )
                .await?
                .map(|row| -> Result<_, StoreError> {
                    Ok((
                        parse_name::<JobState>(&row.text("status")?)?,
                        row.opt_text("maas_system_id")?,
                    ))
                })
                .transpose()?,
            None => None,
        };
        let known_system_id = match read_maas_state(&mut tx, node.id).await? {
            Some(maas) => Some(maas.maas_system_id),
            None => onboarding.as_ref().and_then(|(_, sid)| sid.clone()),
        };
        if let Some(expected) = known_system_id
            && expected != request.system_id
        {
            return Err(EnrollError::WrongMachine {
                field: "MAAS system id",
                expected,
                found: request.system_id.clone(),
            });
        }

        let enrollment_id = match &replay {
            Some(previous) => previous.id,
            None => {
                let consumed = mark_used(&mut tx, &hash, &at).await?;
                if consumed != 1 {
                    return Err(EnrollError::InvalidToken(TokenError::AlreadyUsed));
                }
                let layers = serde_json::to_string(&request.layers)
                    .map_err(|e| StoreError::Invalid(format!("enrollment layers: {e}")))?;
                tx.fetch_one(
                    "INSERT INTO agent_enrollments (node_id, token_hash, onboarding_id,
                        onboarding_state, hostname, system_id, agent_version, remote_addr, layers,
                        enrolled_at)
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) RETURNING id",
                    &params![
                        node.id.to_string(),
                        hash.clone(),
                        token.onboarding_id.clone(),
                        onboarding.as_ref().map(|(s, _)| s.as_str()),
                        request.hostname.clone(),
                        request.system_id.clone(),
                        request.agent_version.clone(),
                        request.remote_addr.clone(),
                        layers,
                        at.clone(),
                    ],
                )
                .await?
                .int("id")?
            }
        };
        // One live agent identity per node: a new enrollment (or a replay) supersedes the rest.
        tx.execute(
            "UPDATE agent_credentials SET revoked_at = $1 WHERE node_id = $2 AND revoked_at IS NULL",
            &params![at.clone(), node.id.to_string()],
        )
        .await?;
        let agent_token = random_token();
        tx.execute(
            "INSERT INTO agent_credentials (token_hash, node_id, enrollment_id, created_at)
             VALUES ($1, $2, $3, $4)",
            &params![
                token_hash(&agent_token),
                node.id.to_string(),
                enrollment_id,
                at.clone()
            ],
        )
        .await?;
        tx.execute(
            "UPDATE nodes SET last_agent_contact_at = $1 WHERE id = $2",
            &params![at.clone(), node.id.to_string()],
        )
        .await?;
        if tx.backend() == super::Backend::Postgres {
            // Replicas sharing the store: the one running this node's job may not be the one
            // the agent reached; it hears of the enrollment at commit ([`EnrollmentNotices`]).
            tx.execute(
                "SELECT pg_notify($1, $2)",
                &params![ENROLLMENT_CHANNEL, node.id.to_string()],
            )
            .await?;
        }
        let enrollment = read_enrollment(&mut tx, enrollment_id).await?;
        write_audit(
            &mut tx,
            now,
            &AuditEntry {
                actor: Actor {
                    name: format!("agent:{}", request.hostname),
                    role: Role::Agent,
                },
                reason: None,
                action: if replay.is_some() {
                    "node.agent_enrollment_replayed".into()
                } else {
                    "node.agent_enrolled".into()
                },
                subject_kind: "node".into(),
                subject_id: node.id.to_string(),
                prior_state: Some(node.status.as_str().into()),
                expected_target: Some(node.status.as_str().into()),
                correlation_ids: json!({
                    "onboarding_id": enrollment.onboarding_id,
                    "enrollment_id": enrollment.id,
                }),
                details: json!({
                    "system_id": enrollment.system_id,
                    "agent_version": enrollment.agent_version,
                    "remote_addr": enrollment.remote_addr,
                    "onboarding_state": enrollment.onboarding_state.map(|s| s.as_str()),
                    "late": enrollment.is_late(),
                    "layers": enrollment.layers,
                }),
            },
        )
        .await?;
        bump_serial(&mut tx).await?;
        tx.commit().await?;
        Ok(Enrolled {
            enrollment,
            agent_token,
            replayed: replay.is_some(),
        })
    }

    /// The node's latest enrollment, if its agent ever enrolled (what
    /// `wait_for_agent_enrollment` polls).
    pub async fn agent_enrollment(
        &self,
        node: Uuid,
    ) -> Result<Option<AgentEnrollment>, StoreError> {
        self.pool
            .fetch_optional_once(
                "SELECT * FROM agent_enrollments WHERE node_id = $1 ORDER BY id DESC LIMIT 1",
                &params![node.to_string()],
            )
            .await?
            .as_ref()
            .map(enrollment_from_row)
            .transpose()
    }

    /// The latest enrollment of every node (of one site), ordered by node id: one query, for
    /// snapshots.
    pub async fn agent_enrollments(
        &self,
        site: Option<&str>,
    ) -> Result<Vec<AgentEnrollment>, StoreError> {
        let mut tx = self.pool.read().await?;
        let rows = match site {
            Some(site) => {
                tx.fetch_all(
                    "SELECT e.* FROM agent_enrollments e JOIN nodes n ON n.id = e.node_id
                     WHERE n.site = $1 ORDER BY e.node_id, e.id DESC",
                    &params![site],
                )
                .await?
            }
            None => {
                tx.fetch_all(
                    "SELECT * FROM agent_enrollments ORDER BY node_id, id DESC",
                    &[],
                )
                .await?
            }
        };
        let mut latest: Vec<AgentEnrollment> = Vec::new();
        for row in &rows {
            let enrollment = enrollment_from_row(row)?;
            if latest
                .last()
                .is_none_or(|l| l.node_id != enrollment.node_id)
            {
                latest.push(enrollment);
            }
        }
        Ok(latest)
    }

    /// Whose agent token this is, when it is current; nothing is written. A call the token
    /// is then refused for (another node's route, an admin route) is not agent contact.
    pub async fn agent_identity(
        &self,
        token: &Secret,
    ) -> Result<Option<AgentIdentity>, StoreError> {
        Ok(self.agent_credential(token).await?.map(|c| c.identity))
    }

    /// Check an agent's bearer token (the task API, issue 6): its node and enrollment when it
    /// is current, `None` when unknown or revoked. Records the use as agent contact at once
    /// (the agent channel instead looks up with [`Store::agent_credential`] and coalesces
    /// contacts through [`Store::record_agent_contacts`]).
    pub async fn authenticate_agent(
        &self,
        token: &Secret,
    ) -> Result<Option<AgentIdentity>, StoreError> {
        let Some(credential) = self.agent_credential(token).await? else {
            return Ok(None);
        };
        self.record_agent_contacts(&[AgentContact {
            node_id: credential.identity.node_id,
            credential: Some(credential.token_hash),
            at: self.now(),
        }])
        .await?;
        Ok(Some(credential.identity))
    }

    /// Who a bearer token belongs to, read only: nothing is recorded (a refused call is no
    /// contact). `None` when unknown or revoked. One statement, no transaction: the agent
    /// channel runs it for every poll, and it also says whether the node has a task to claim
    /// (the condition of `Store::claim_task`).
    pub async fn agent_credential(
        &self,
        token: &Secret,
    ) -> Result<Option<AgentCredential>, StoreError> {
        let hash = token_hash(token);
        let row = self
            .pool
            .fetch_optional_once(
                "SELECT c.node_id, c.enrollment_id, c.last_used_at,
                    CAST(CASE WHEN EXISTS (SELECT 1 FROM agent_tasks t WHERE t.node_id = c.node_id
                        AND (t.status = $2 OR (t.status = $3 AND t.lease_expires_at <= $4)))
                    THEN 1 ELSE 0 END AS BIGINT) AS claimable
                 FROM agent_credentials c WHERE c.token_hash = $1 AND c.revoked_at IS NULL",
                &params![
                    hash.clone(),
                    TaskStatus::Queued.as_str(),
                    TaskStatus::Dispatched.as_str(),
                    format_time(self.now())
                ],
            )
            .await?;
        row.map(|row| {
            Ok(AgentCredential {
                identity: AgentIdentity {
                    node_id: parse_uuid(&row.text("node_id")?)?,
                    enrollment_id: row.int("enrollment_id")?,
                },
                token_hash: hash.clone(),
                used: row.opt_text("last_used_at")?.is_some(),
                claimable: row.int("claimable")? != 0,
            })
        })
        .transpose()
    }

    /// Record agent contacts in one transaction (the agent channel's coalesced heartbeats,
    /// seed 000 §6.3): each node's last contact moves forward, never back; a credential named
    /// in a contact is marked used (the enrollment replay rule reads that). Nodes and
    /// credentials are each updated 100 to a statement: a flush of thousands of contacts is a
    /// few dozen statements.
    pub async fn record_agent_contacts(&self, contacts: &[AgentContact]) -> Result<(), StoreError> {
        if contacts.is_empty() {
            return Ok(());
        }
        let nodes = latest_times(contacts.iter().map(|c| (c.node_id.to_string(), c.at)));
        let credentials = latest_times(
            contacts
                .iter()
                .filter_map(|c| Some((c.credential.clone()?, c.at))),
        );
        let mut tx = self.pool.write().await?;
        advance_times(&mut tx, "nodes", "id", "last_agent_contact_at", &nodes).await?;
        advance_times(
            &mut tx,
            "agent_credentials",
            "token_hash",
            "last_used_at",
            &credentials,
        )
        .await?;
        tx.commit().await
    }

    /// The nodes with a task a poll could claim now (queued, or dispatched with an expired
    /// lease: the condition of `Store::claim_task`), in one read through the tasks' status
    /// index: its cost follows the open tasks, not the agents polling or the tasks ever run.
    /// The agent channel asks this once per poll step for every polling node together (no
    /// transaction: the statement is a consistent read on its own).
    pub async fn claimable_nodes(&self) -> Result<std::collections::BTreeSet<Uuid>, StoreError> {
        let rows = self
            .pool
            .fetch_all_once(
                "SELECT node_id FROM agent_tasks WHERE status = $2
                 UNION
                 SELECT node_id FROM agent_tasks WHERE status = $3 AND lease_expires_at <= $1",
                &params![
                    format_time(self.now()),
                    TaskStatus::Queued.as_str(),
                    TaskStatus::Dispatched.as_str()
                ],
            )
            .await?;
        rows.iter()
            .map(|row| parse_uuid(&row.text("node_id")?))
            .collect()
    }

    /// Revoke every live agent token of a node (decommission CleanupSecrets): its agent gets
    /// 401 from then on. Returns how many were revoked.
    pub async fn revoke_agent_credentials(&self, node: Uuid) -> Result<u64, StoreError> {
        let at = format_time(self.now());
        let mut tx = self.pool.write().await?;
        let n = tx
            .execute(
                "UPDATE agent_credentials SET revoked_at = $1 WHERE node_id = $2 AND revoked_at IS NULL",
                &params![at, node.to_string()],
            )
            .await?;
        if n > 0 {
            // Agent channels keep the credentials they checked until the serial moves.
            bump_serial(&mut tx).await?;
        }
        tx.commit().await?;
        Ok(n)
    }

    /// The store serial in one statement (the agent channel checks it every poll step).
    pub async fn serial_now(&self) -> Result<i64, StoreError> {
        self.pool
            .fetch_optional_once("SELECT value FROM store_serial WHERE id = 1", &[])
            .await?
            .ok_or_else(|| StoreError::Corrupt("no store serial".into()))?
            .int("value")
    }
}

/// The PostgreSQL channel an enrollment is announced on, with the node's id as payload.
const ENROLLMENT_CHANNEL: &str = "metalform_agent_enrolled";

/// Enrollments recorded by any process on a PostgreSQL store, as they commit: the node of each
/// (docs/ha.md). A replica wakes its own wait for that node's agent with them, wherever the
/// agent enrolled.
pub struct EnrollmentNotices {
    listener: sqlx::postgres::PgListener,
}

impl EnrollmentNotices {
    /// The next enrolled node. A lost connection is an error once; the next call connects
    /// again (notices sent meanwhile are lost: the waits' fallback poll covers them).
    pub async fn next(&mut self) -> Result<Uuid, StoreError> {
        loop {
            let notice = self
                .listener
                .recv()
                .await
                .map_err(super::db::db_err("receiving a notice"))?;
            // Another payload on this channel is not ours to act on.
            if let Ok(node) = Uuid::parse_str(notice.payload()) {
                return Ok(node);
            }
        }
    }
}

impl Store {
    /// Enrollments as they commit, on PostgreSQL; `None` on SQLite (one process runs the jobs
    /// of a SQLite store, and its own listener wakes them).
    pub async fn enrollment_notices(&self) -> Result<Option<EnrollmentNotices>, StoreError> {
        Ok(self
            .pool
            .listen(ENROLLMENT_CHANNEL)
            .await?
            .map(|listener| EnrollmentNotices { listener }))
    }
}

/// The latest time of each key, in key order (one lock order for every writer).
fn latest_times(
    pairs: impl Iterator<Item = (String, DateTime<Utc>)>,
) -> Vec<(String, DateTime<Utc>)> {
    let mut latest: BTreeMap<String, DateTime<Utc>> = BTreeMap::new();
    for (key, at) in pairs {
        let entry = latest.entry(key).or_insert(at);
        *entry = (*entry).max(at);
    }
    latest.into_iter().collect()
}

/// Move `column` of each keyed row forward to its time, never back, 100 rows to a statement:
/// `CASE key WHEN $1 THEN $2 … END` gives each row its own time. Keys must be distinct.
async fn advance_times(
    tx: &mut Tx,
    table: &str,
    key: &str,
    column: &str,
    times: &[(String, DateTime<Utc>)],
) -> Result<(), StoreError> {
    for chunk in times.chunks(100) {
        let mut arms = String::new();
        let mut keys = Vec::with_capacity(chunk.len());
        let mut bound = Vec::with_capacity(chunk.len() * 2);
        for (i, (value, at)) in chunk.iter().enumerate() {
            arms.push_str(&format!(" WHEN ${} THEN ${}", 2 * i + 1, 2 * i + 2));
            keys.push(format!("${}", 2 * i + 1));
            bound.push(super::db::Param::from(value.clone()));
            bound.push(super::db::Param::from(format_time(*at)));
        }
        let at = format!("(CASE {key}{arms} END)");
        let sql = format!(
            "UPDATE {table} SET {column} = {at}
             WHERE {key} IN ({}) AND ({column} IS NULL OR {column} < {at})",
            keys.join(", ")
        );
        tx.execute(sql, &bound).await?;
    }
    Ok(())
}
