//! Audit log (000 §4.12), node MAAS state (000 §6.5), plans/applies (DESIGN.md §4) and the
//! domain-event outbox (000 §8.0).

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::{Value, json};
use uuid::Uuid;

use super::db::{Param, Row, Select, Tx, params, text_literal};
use super::{Store, StoreError, format_time, parse_json, parse_opt_time, parse_time, parse_uuid};

/// The role an actor acts in (bearer-token roles of the daemon, plus metalform itself).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    Admin,
    Agent,
    /// metalform's own executor, reconciler or CLI acting on a manifest change.
    System,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Admin => "admin",
            Role::Agent => "agent",
            Role::System => "system",
        }
    }
}

/// Who performs a write.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Actor {
    pub name: String,
    pub role: Role,
}

impl Actor {
    pub fn system(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            role: Role::System,
        }
    }

    pub fn admin(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            role: Role::Admin,
        }
    }
}

/// One audit row to write (000 §4.12: actor and role, reason, prior state, requested action,
/// expected target, correlation ids).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AuditEntry {
    pub actor: Actor,
    pub reason: Option<String>,
    pub action: String,
    pub subject_kind: String,
    pub subject_id: String,
    pub prior_state: Option<String>,
    pub expected_target: Option<String>,
    pub correlation_ids: Value,
    pub details: Value,
}

/// Which audit rows [`Store::audit_query`] reads.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuditQuery {
    /// Rows about any of these subjects (a node's id and its jobs' ids); `None`: any subject.
    pub subject_ids: Option<Vec<String>>,
    pub actor: Option<String>,
    pub action: Option<String>,
    /// From this instant (inclusive).
    pub since: Option<DateTime<Utc>>,
    /// Before this instant.
    pub until: Option<DateTime<Utc>>,
    pub limit: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AuditRecord {
    pub id: i64,
    pub at: DateTime<Utc>,
    pub actor: String,
    pub role: String,
    pub reason: Option<String>,
    pub action: String,
    pub subject_kind: String,
    pub subject_id: String,
    pub prior_state: Option<String>,
    pub expected_target: Option<String>,
    pub correlation_ids: Value,
    pub details: Value,
}

pub(crate) async fn write_audit(
    tx: &mut Tx,
    at: DateTime<Utc>,
    entry: &AuditEntry,
) -> Result<(), StoreError> {
    tx.execute(
        "INSERT INTO audit_log (at, actor, role, reason, action, subject_kind, subject_id,
            prior_state, expected_target, correlation_ids, details)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
        &params![
            format_time(at),
            entry.actor.name.clone(),
            entry.actor.role.as_str(),
            entry.reason.clone(),
            entry.action.clone(),
            entry.subject_kind.clone(),
            entry.subject_id.clone(),
            entry.prior_state.clone(),
            entry.expected_target.clone(),
            entry.correlation_ids.to_string(),
            entry.details.to_string(),
        ],
    )
    .await?;
    Ok(())
}

fn audit_from_row(row: &Row) -> Result<AuditRecord, StoreError> {
    Ok(AuditRecord {
        id: row.int("id")?,
        at: parse_time(&row.text("at")?)?,
        actor: row.text("actor")?,
        role: row.text("role")?,
        reason: row.opt_text("reason")?,
        action: row.text("action")?,
        subject_kind: row.text("subject_kind")?,
        subject_id: row.text("subject_id")?,
        prior_state: row.opt_text("prior_state")?,
        expected_target: row.opt_text("expected_target")?,
        correlation_ids: parse_json(&row.text("correlation_ids")?)?,
        details: parse_json(&row.text("details")?)?,
    })
}

/// The last observed MAAS state of a node (000 §6.5).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MaasState {
    pub node_id: Uuid,
    pub site: String,
    pub maas_system_id: String,
    pub last_maas_status: Option<String>,
    pub last_maas_power_state: Option<String>,
    pub last_maas_ips: Vec<String>,
    pub last_reconciled_at: Option<DateTime<Utc>>,
    pub drift_detected: bool,
    pub drift_details: Value,
    pub drift_resolved_at: Option<DateTime<Utc>>,
}

/// An observation to record; `drift: Some(details)` flags drift, `Some(Value::Null)` clears it
/// (resolved now), `None` leaves the drift fields alone.
#[derive(Debug, Clone, PartialEq)]
pub struct MaasStateUpdate {
    pub node_id: Uuid,
    pub site: String,
    pub maas_system_id: String,
    pub status: Option<String>,
    pub power_state: Option<String>,
    pub ips: Vec<String>,
    pub drift: Option<Value>,
}

pub(crate) fn maas_state_from_row(row: &Row) -> Result<MaasState, StoreError> {
    let ips: Vec<String> = serde_json::from_value(parse_json(&row.text("last_maas_ips")?)?)
        .map_err(|e| StoreError::Corrupt(format!("last_maas_ips: {e}")))?;
    Ok(MaasState {
        node_id: parse_uuid(&row.text("node_id")?)?,
        site: row.text("site")?,
        maas_system_id: row.text("maas_system_id")?,
        last_maas_status: row.opt_text("last_maas_status")?,
        last_maas_power_state: row.opt_text("last_maas_power_state")?,
        last_maas_ips: ips,
        last_reconciled_at: parse_opt_time(row.opt_text("last_reconciled_at")?)?,
        drift_detected: row.bool("drift_detected")?,
        drift_details: parse_json(&row.text("drift_details")?)?,
        drift_resolved_at: parse_opt_time(row.opt_text("drift_resolved_at")?)?,
    })
}

pub(crate) async fn read_maas_state(
    tx: &mut Tx,
    node: Uuid,
) -> Result<Option<MaasState>, StoreError> {
    tx.fetch_optional(
        "SELECT * FROM node_maas_state WHERE node_id = $1",
        &params![node.to_string()],
    )
    .await?
    .as_ref()
    .map(maas_state_from_row)
    .transpose()
}

/// Insert or update a node's MAAS state row inside `tx` (see [`MaasStateUpdate`]).
pub(crate) async fn write_maas_state(
    tx: &mut Tx,
    at: DateTime<Utc>,
    update: &MaasStateUpdate,
) -> Result<MaasState, StoreError> {
    let now = format_time(at);
    let ips = json!(update.ips).to_string();
    tx.execute(
        "INSERT INTO node_maas_state (node_id, site, maas_system_id, last_maas_status,
            last_maas_power_state, last_maas_ips, last_reconciled_at, updated_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $7)
         ON CONFLICT (node_id) DO UPDATE SET site = $2, maas_system_id = $3,
            last_maas_status = $4, last_maas_power_state = $5, last_maas_ips = $6,
            last_reconciled_at = $7, updated_at = $7",
        &params![
            update.node_id.to_string(),
            update.site.clone(),
            update.maas_system_id.clone(),
            update.status.clone(),
            update.power_state.clone(),
            ips,
            now.clone(),
        ],
    )
    .await?;
    match &update.drift {
        Some(Value::Null) => {
            tx.execute(
                "UPDATE node_maas_state SET drift_detected = $1, drift_resolved_at = $2
                 WHERE node_id = $3 AND drift_detected = $4",
                &params![false, now, update.node_id.to_string(), true],
            )
            .await?;
        }
        Some(details) => {
            tx.execute(
                "UPDATE node_maas_state SET drift_detected = $1, drift_details = $2,
                    drift_resolved_at = NULL WHERE node_id = $3",
                &params![true, details.to_string(), update.node_id.to_string()],
            )
            .await?;
        }
        None => {}
    }
    read_maas_state(tx, update.node_id)
        .await?
        .ok_or_else(|| StoreError::Corrupt("node_maas_state row vanished".into()))
}

/// A plan to record (the plan file's header; the body is the plan's JSON).
#[derive(Debug, Clone, PartialEq)]
pub struct NewPlan {
    pub fleet_revision: Option<String>,
    pub snapshot_fingerprint: String,
    pub store_serial: i64,
    pub parent_id: Option<Uuid>,
    pub summary: Value,
    pub body: Value,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PlanRecord {
    pub id: Uuid,
    pub created_at: DateTime<Utc>,
    pub fleet_revision: Option<String>,
    pub snapshot_fingerprint: String,
    pub store_serial: i64,
    pub parent_id: Option<Uuid>,
    pub summary: Value,
    pub body: Value,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ApplyRecord {
    pub id: Uuid,
    pub plan_id: Uuid,
    pub actor: String,
    pub status: String,
    pub started_at: DateTime<Utc>,
    pub finished_at: Option<DateTime<Utc>>,
    pub details: Value,
}

fn plan_from_row(row: &Row) -> Result<PlanRecord, StoreError> {
    Ok(PlanRecord {
        id: parse_uuid(&row.text("id")?)?,
        created_at: parse_time(&row.text("created_at")?)?,
        fleet_revision: row.opt_text("fleet_revision")?,
        snapshot_fingerprint: row.text("snapshot_fingerprint")?,
        store_serial: row.int("store_serial")?,
        parent_id: row
            .opt_text("parent_id")?
            .as_deref()
            .map(parse_uuid)
            .transpose()?,
        summary: parse_json(&row.text("summary")?)?,
        body: parse_json(&row.text("body")?)?,
    })
}

fn apply_from_row(row: &Row) -> Result<ApplyRecord, StoreError> {
    Ok(ApplyRecord {
        id: parse_uuid(&row.text("id")?)?,
        plan_id: parse_uuid(&row.text("plan_id")?)?,
        actor: row.text("actor")?,
        status: row.text("status")?,
        started_at: parse_time(&row.text("started_at")?)?,
        finished_at: parse_opt_time(row.opt_text("finished_at")?)?,
        details: parse_json(&row.text("details")?)?,
    })
}

/// A domain event to announce (000 §8.0), e.g. `node.onboarding.completed`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DomainEvent {
    pub event_type: String,
    pub subject_id: String,
    pub payload: Value,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OutboxEvent {
    pub id: i64,
    pub event_type: String,
    pub subject_id: String,
    pub payload: Value,
    pub created_at: DateTime<Utc>,
    pub attempts: i64,
}

/// Arbitrary constant naming the write-order lock among other advisory locks.
const WRITE_ORDER_LOCK: i64 = 0x6d66_6f75_7462_6f78; // "mfoutbox"

/// `statement` as it runs in the transaction's turn among the writers of the outbox and of
/// the store serial, held until it commits (PostgreSQL; SQLite has one writer anyway). Outbox
/// ids must become visible in id order, or a sink's cursor could pass an event whose
/// transaction commits after a later one, so event writers take turns. Serial writers take
/// the same turn before they touch the serial's row: were the two taken in either order, a
/// transaction holding the row and waiting for the turn and one holding the turn and waiting
/// for the row would deadlock.
///
/// The statement takes the turn itself: it reads `turn` (` FROM turn`), on PostgreSQL a
/// subquery that takes the lock, before it writes a row. A statement of its own would hold the
/// turn one more round trip, which every other writer of every replica waits through; two
/// daemons sharing a store spent more time waiting for the turn than writing. On SQLite
/// ` FROM turn` is dropped. Re-entrant: a transaction that holds its turn takes it again at
/// once. On PostgreSQL both writers put their statement off to the commit
/// ([`Tx::execute_at_commit`]), which sends it with the COMMIT in one message: the turn is
/// then held while the server runs them, not while the writer's process waits to be
/// scheduled between round trips. So the lock's key is written in (a constant).
fn in_write_turn(tx: &Tx, statement: &str) -> String {
    if tx.backend() == super::db::Backend::Postgres {
        format!("WITH turn AS (SELECT pg_advisory_xact_lock({WRITE_ORDER_LOCK})) {statement}")
    } else {
        statement.replace(" FROM turn", "")
    }
}

/// Bump the store serial inside a writing transaction, in the write turn: on PostgreSQL with
/// the COMMIT (see [`in_write_turn`]), once however many times the transaction asks; SQLite,
/// with one writer, bumps it at once.
pub(crate) async fn bump_serial(tx: &mut Tx) -> Result<(), StoreError> {
    let sql = in_write_turn(
        tx,
        "UPDATE store_serial SET value = value + 1 FROM turn WHERE store_serial.id = 1",
    );
    tx.execute_once_at_commit(sql).await
}

/// Write `event` to the outbox, in the write turn: on PostgreSQL with the COMMIT (see
/// [`in_write_turn`]), its values written in.
pub(crate) async fn write_outbox(
    tx: &mut Tx,
    at: DateTime<Utc>,
    event: &DomainEvent,
) -> Result<(), StoreError> {
    let values = [
        event.event_type.clone(),
        event.subject_id.clone(),
        event.payload.to_string(),
        format_time(at),
    ];
    let insert = |selected: &str| {
        format!(
            "INSERT INTO outbox (event_type, subject_id, payload, created_at) SELECT {selected} FROM turn"
        )
    };
    if tx.backend() == super::db::Backend::Postgres {
        let written = values
            .iter()
            .map(|v| text_literal(v))
            .collect::<Result<Vec<_>, _>>()?;
        let sql = in_write_turn(tx, &insert(&written.join(", ")));
        tx.execute_at_commit(sql).await
    } else {
        let sql = in_write_turn(tx, &insert("$1, $2, $3, $4"));
        tx.execute(sql, &values.map(Param::from)).await.map(|_| ())
    }
}

impl Store {
    /// Record an audit row on its own (operator actions that change nothing else).
    pub async fn audit(&self, entry: &AuditEntry) -> Result<(), StoreError> {
        let mut tx = self.pool.write().await?;
        write_audit(&mut tx, self.now(), entry).await?;
        tx.commit().await
    }

    /// Audit rows about one subject, oldest first.
    pub async fn audit_log(
        &self,
        subject_kind: &str,
        subject_id: &str,
    ) -> Result<Vec<AuditRecord>, StoreError> {
        let mut tx = self.pool.read().await?;
        tx.fetch_all(
            "SELECT * FROM audit_log WHERE subject_kind = $1 AND subject_id = $2 ORDER BY id",
            &params![subject_kind, subject_id],
        )
        .await?
        .iter()
        .map(audit_from_row)
        .collect()
    }

    /// Audit rows matching `query`, newest first, at most `query.limit`.
    pub async fn audit_query(&self, query: &AuditQuery) -> Result<Vec<AuditRecord>, StoreError> {
        let mut select = Select::all_of("audit_log");
        if let Some(subjects) = &query.subject_ids {
            select.and_in("subject_id", subjects.iter().cloned());
        }
        if let Some(actor) = &query.actor {
            select.and("actor =", actor.as_str());
        }
        if let Some(action) = &query.action {
            select.and("action =", action.as_str());
        }
        if let Some(since) = query.since {
            select.and("at >=", format_time(since));
        }
        if let Some(until) = query.until {
            select.and("at <", format_time(until));
        }
        let mut tx = self.pool.read().await?;
        select
            .fetch(&mut tx, &format!("id DESC LIMIT {}", query.limit))
            .await?
            .iter()
            .map(audit_from_row)
            .collect()
    }

    pub async fn maas_state(&self, node: Uuid) -> Result<Option<MaasState>, StoreError> {
        let mut tx = self.pool.read().await?;
        read_maas_state(&mut tx, node).await
    }

    /// Nodes with unresolved drift, by node id.
    pub async fn drifted(&self) -> Result<Vec<MaasState>, StoreError> {
        let mut tx = self.pool.read().await?;
        tx.fetch_all(
            "SELECT * FROM node_maas_state WHERE drift_detected = $1 ORDER BY node_id",
            &params![true],
        )
        .await?
        .iter()
        .map(maas_state_from_row)
        .collect()
    }

    pub async fn record_plan(&self, plan: &NewPlan) -> Result<PlanRecord, StoreError> {
        let id = Uuid::new_v4();
        let now = self.now();
        let mut tx = self.pool.write().await?;
        tx.execute(
            "INSERT INTO plans (id, created_at, fleet_revision, snapshot_fingerprint, store_serial,
                parent_id, summary, body) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
            &params![
                id.to_string(),
                format_time(now),
                plan.fleet_revision.clone(),
                plan.snapshot_fingerprint.clone(),
                plan.store_serial,
                plan.parent_id.map(|p| p.to_string()),
                plan.summary.to_string(),
                plan.body.to_string(),
            ],
        )
        .await?;
        tx.commit().await?;
        self.plan(id).await
    }

    pub async fn plan(&self, id: Uuid) -> Result<PlanRecord, StoreError> {
        self.by_id("plans", "plan", id, plan_from_row).await
    }

    /// Start an apply of a recorded plan.
    pub async fn start_apply(
        &self,
        plan_id: Uuid,
        actor: &Actor,
    ) -> Result<ApplyRecord, StoreError> {
        self.plan(plan_id).await?;
        let id = Uuid::new_v4();
        let mut tx = self.pool.write().await?;
        tx.execute(
            "INSERT INTO applies (id, plan_id, actor, status, started_at) VALUES ($1, $2, $3, $4, $5)",
            &params![
                id.to_string(),
                plan_id.to_string(),
                actor.name.clone(),
                "running",
                format_time(self.now()),
            ],
        )
        .await?;
        tx.commit().await?;
        self.apply_record(id).await
    }

    /// Finish an apply with a status (`succeeded`, `failed`, `interrupted`).
    pub async fn finish_apply(
        &self,
        id: Uuid,
        status: &str,
        details: &Value,
    ) -> Result<ApplyRecord, StoreError> {
        let mut tx = self.pool.write().await?;
        let n = tx
            .execute(
                "UPDATE applies SET status = $1, finished_at = $2, details = $3 WHERE id = $4",
                &params![
                    status,
                    format_time(self.now()),
                    details.to_string(),
                    id.to_string()
                ],
            )
            .await?;
        if n == 0 {
            return Err(StoreError::NotFound {
                kind: "apply",
                id: id.to_string(),
            });
        }
        tx.commit().await?;
        self.apply_record(id).await
    }

    pub async fn apply_record(&self, id: Uuid) -> Result<ApplyRecord, StoreError> {
        self.by_id("applies", "apply", id, apply_from_row).await
    }

    /// Append a domain event on its own (most events are written by the job updates that cause
    /// them, in the same transaction).
    pub async fn publish(&self, event: &DomainEvent) -> Result<(), StoreError> {
        let mut tx = self.pool.write().await?;
        write_outbox(&mut tx, self.now(), event).await?;
        tx.commit().await
    }

    /// Undelivered events, oldest first.
    pub async fn pending_events(&self, limit: i64) -> Result<Vec<OutboxEvent>, StoreError> {
        let mut tx = self.pool.read().await?;
        tx.fetch_all(
            "SELECT * FROM outbox WHERE delivered_at IS NULL ORDER BY id LIMIT $1",
            &params![limit],
        )
        .await?
        .iter()
        .map(outbox_from_row)
        .collect()
    }

    /// Events after `sink`'s delivery cursor, oldest first.
    pub async fn events_for_sink(
        &self,
        sink: &str,
        limit: i64,
    ) -> Result<Vec<OutboxEvent>, StoreError> {
        let mut tx = self.pool.read().await?;
        tx.fetch_all(
            "SELECT * FROM outbox WHERE id > COALESCE(
                (SELECT delivered_through FROM outbox_cursors WHERE sink = $1), 0)
             ORDER BY id LIMIT $2",
            &params![sink, limit],
        )
        .await?
        .iter()
        .map(outbox_from_row)
        .collect()
    }

    /// `sink` acknowledged `event`: move its cursor there (only forwards) and mark the event
    /// delivered, in one transaction fenced by the sink's delivery lease, so a deliverer whose
    /// lease another replica took over moves nothing.
    pub async fn mark_delivered_to(
        &self,
        sink: &str,
        event: i64,
        fence: &super::Fence,
    ) -> Result<(), StoreError> {
        let now = self.now();
        let mut tx = self.pool.write().await?;
        super::leases::check_fence(&mut tx, fence).await?;
        tx.execute(
            "INSERT INTO outbox_cursors (sink, delivered_through, updated_at) VALUES ($1, $2, $3)
             ON CONFLICT (sink) DO UPDATE SET delivered_through = excluded.delivered_through,
                updated_at = excluded.updated_at
             WHERE outbox_cursors.delivered_through < excluded.delivered_through",
            &params![sink, event, format_time(now)],
        )
        .await?;
        tx.execute(
            "UPDATE outbox SET delivered_at = COALESCE(delivered_at, $1), attempts = attempts + 1
             WHERE id = $2",
            &params![format_time(now), event],
        )
        .await?;
        tx.commit().await
    }

    /// Mark events delivered (after the sink acknowledged them).
    pub async fn mark_delivered(&self, ids: &[i64]) -> Result<(), StoreError> {
        let now = format_time(self.now());
        let mut tx = self.pool.write().await?;
        for id in ids {
            tx.execute(
                "UPDATE outbox SET delivered_at = $1, attempts = attempts + 1 WHERE id = $2",
                &params![now.clone(), *id],
            )
            .await?;
        }
        tx.commit().await
    }

    /// Count a failed delivery attempt (the event stays pending).
    pub async fn mark_delivery_failed(&self, id: i64) -> Result<(), StoreError> {
        let mut tx = self.pool.write().await?;
        tx.execute(
            "UPDATE outbox SET attempts = attempts + 1 WHERE id = $1",
            &params![id],
        )
        .await?;
        tx.commit().await
    }
}

fn outbox_from_row(row: &super::db::Row) -> Result<OutboxEvent, StoreError> {
    Ok(OutboxEvent {
        id: row.int("id")?,
        event_type: row.text("event_type")?,
        subject_id: row.text("subject_id")?,
        payload: parse_json(&row.text("payload")?)?,
        created_at: parse_time(&row.text("created_at")?)?,
        attempts: row.int("attempts")?,
    })
}

#[cfg(all(test, feature = "services"))]
mod write_turn_tests {
    use std::sync::Arc;
    use std::time::Duration;

    use sqlx::{AssertSqlSafe, Connection};

    use super::*;

    async fn fresh_database() -> String {
        let admin = std::env::var("METALFORM_TEST_POSTGRES_URL")
            .expect("METALFORM_TEST_POSTGRES_URL: run scripts/test-all, which starts PostgreSQL");
        let mut conn = sqlx::PgConnection::connect(&admin).await.unwrap();
        let name = format!("mf_{}", Uuid::new_v4().simple());
        sqlx::query(AssertSqlSafe(format!("CREATE DATABASE {name}")))
            .execute(&mut conn)
            .await
            .unwrap();
        let mut url = url::Url::parse(&admin).unwrap();
        url.set_path(&name);
        url.into()
    }

    async fn fresh_store() -> Store {
        Store::open(&fresh_database().await, Arc::new(crate::clock::SystemClock))
            .await
            .unwrap()
    }

    fn event(n: u32) -> DomainEvent {
        DomainEvent {
            event_type: "node.onboarding.completed".into(),
            subject_id: format!("job-{n}"),
            payload: json!({ "n": n }),
        }
    }

    /// One transaction bumps the serial and then writes an event, another writes an event and
    /// then bumps the serial, interleaved: both commit (taken in opposite orders, the serial's
    /// row and the outbox's turn deadlocked and PostgreSQL aborted one of them).
    #[tokio::test]
    async fn serial_and_outbox_writers_in_either_order_do_not_deadlock() {
        let store = fresh_store().await;
        let before = store.serial().await.unwrap();
        let mut first = store.pool.write().await.unwrap();
        bump_serial(&mut first).await.unwrap();
        let other = store.clone();
        let second = tokio::spawn(async move {
            let mut tx = other.pool.write().await?;
            write_outbox(&mut tx, other.now(), &event(2)).await?;
            bump_serial(&mut tx).await?;
            tx.commit().await?;
            Ok::<(), StoreError>(())
        });
        // The second transaction is under way (and waits for its turn) before the first goes on.
        tokio::time::sleep(Duration::from_millis(300)).await;
        write_outbox(&mut first, store.now(), &event(1))
            .await
            .unwrap();
        first.commit().await.unwrap();
        second.await.unwrap().expect("the second writer commits");
        assert_eq!(store.serial().await.unwrap(), before + 2);
    }

    /// A replica paused inside a transaction holds its row locks, and the other replicas
    /// wait for them only until its idle limit. Here it paused in a fenced write to a node
    /// (the check holds the node lease's row); its lease ran out and the other replica takes
    /// the node over, which waits for that row: PostgreSQL ends the paused session, the
    /// takeover goes through, and the paused transaction, woken, fails as worth retrying
    /// and has written nothing. Without the limit the takeover waits until it wakes.
    #[tokio::test]
    async fn a_replica_paused_inside_a_transaction_holds_the_others_up_only_until_its_idle_limit() {
        let url = fresh_database().await;
        let clock: Arc<dyn crate::clock::Clock> = Arc::new(crate::clock::SystemClock);
        // A lease TTL of 3 s: an idle limit of 1 s.
        let paused_replica = Store::open_for_replica(&url, clock.clone(), Duration::from_secs(3))
            .await
            .unwrap();
        let other = Store::open_for_replica(&url, clock, Duration::from_secs(3))
            .await
            .unwrap();
        let before = other.serial().await.unwrap();
        let ttl = chrono::Duration::milliseconds(500);
        let lease = paused_replica
            .acquire_lease("node:n1", "replica-a", ttl)
            .await
            .unwrap();
        let mut paused = paused_replica.pool.write().await.unwrap();
        super::super::leases::check_fence(&mut paused, &lease.fence())
            .await
            .unwrap();
        write_outbox(&mut paused, paused_replica.now(), &event(0))
            .await
            .unwrap();
        bump_serial(&mut paused).await.unwrap();
        tokio::time::sleep(Duration::from_millis(600)).await;
        let taken = tokio::time::timeout(
            Duration::from_secs(30),
            other.acquire_lease("node:n1", "replica-b", ttl),
        )
        .await
        .expect("the takeover goes on while the paused replica still holds its transaction")
        .unwrap();
        assert_eq!(taken.holder, "replica-b");
        assert_eq!(taken.fencing, lease.fencing + 1);
        let woken = paused
            .commit()
            .await
            .expect_err("the paused transaction was ended");
        assert!(woken.is_transient(), "{woken}");
        assert_eq!(other.serial().await.unwrap(), before);
        assert!(other.pending_events(10).await.unwrap().is_empty());
    }

    /// Each session gets the idle limit: the default, a replica's from its lease TTL, or the
    /// operator's own from the URL, left as it is.
    #[tokio::test]
    async fn each_session_gets_the_idle_limit_unless_the_url_sets_its_own() {
        let url = fresh_database().await;
        let clock: Arc<dyn crate::clock::Clock> = Arc::new(crate::clock::SystemClock);
        let own = format!("{url}?options[idle_in_transaction_session_timeout]=2500");
        for (store, expected) in [
            (Store::open(&url, clock.clone()).await.unwrap(), "10s"),
            (
                Store::open_for_replica(&url, clock.clone(), Duration::from_secs(15))
                    .await
                    .unwrap(),
                "5s",
            ),
            (Store::open(&own, clock.clone()).await.unwrap(), "2500ms"),
        ] {
            let mut tx = store.pool.read().await.unwrap();
            let row = tx
                .fetch_one("SHOW idle_in_transaction_session_timeout", &[])
                .await
                .unwrap();
            assert_eq!(
                row.text("idle_in_transaction_session_timeout").unwrap(),
                expected
            );
        }
    }

    /// A connection the server ended while it sat in the pool (a restart, say) is replaced as
    /// it is taken (the pool checks it first): the next store call succeeds. One ended inside
    /// a transaction fails it as worth retrying.
    #[tokio::test]
    async fn a_connection_ended_by_the_server_is_replaced_or_retried() {
        let url = fresh_database().await;
        let store = Store::open(&url, Arc::new(crate::clock::SystemClock))
            .await
            .unwrap();
        let before = store.serial().await.unwrap();
        let admin = std::env::var("METALFORM_TEST_POSTGRES_URL").unwrap();
        let mut conn = sqlx::PgConnection::connect(&admin).await.unwrap();
        let database = url::Url::parse(&url)
            .unwrap()
            .path()
            .trim_start_matches('/')
            .to_owned();
        let ended: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity
             WHERE datname = $1 AND pid <> pg_backend_pid()) AS ended",
        )
        .bind(&database)
        .fetch_one(&mut conn)
        .await
        .unwrap();
        assert!(ended > 0, "the store's connections were ended");
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(store.serial().await.unwrap(), before);
        // Ended inside a transaction (a server restarting, say): worth retrying, as nothing
        // of the transaction was written.
        let mut tx = store.pool.write().await.unwrap();
        bump_serial(&mut tx).await.unwrap();
        write_outbox(&mut tx, store.now(), &event(1)).await.unwrap();
        let pid: i32 = {
            let row = tx
                .fetch_one("SELECT pg_backend_pid()::BIGINT AS pid", &[])
                .await
                .unwrap();
            row.int("pid").unwrap() as i32
        };
        sqlx::query("SELECT pg_terminate_backend($1)")
            .bind(pid)
            .execute(&mut conn)
            .await
            .unwrap();
        let error = tx.commit().await.expect_err("the session was ended");
        assert!(error.is_transient(), "{error}");
        assert_eq!(store.serial().await.unwrap(), before);
    }

    /// A value written into a statement reads back as itself, whatever it holds: quotes,
    /// backslashes, what would end the constant or the statement, other scripts; and an event
    /// carrying such text reaches the outbox unchanged.
    #[tokio::test]
    async fn text_written_into_a_statement_reads_back_as_itself() {
        let store = fresh_store().await;
        let mut values: Vec<String> = [
            "",
            "plain",
            "it's",
            "\\",
            "ends in a backslash \\",
            "\\'",
            "''",
            "E'x'",
            "$$ dollar $$",
            "'; DROP TABLE outbox; --",
            "line\nbreak\ttab\r",
            "\\x41 \\u0041 \\101",
            "ünïcödé ∑ 🚀",
        ]
        .map(String::from)
        .to_vec();
        // And random strings over the characters that matter, from a fixed seed.
        let alphabet: Vec<char> = "ab'\\\"$;-\n E\u{e9}\u{1f680}".chars().collect();
        let mut seed: u64 = 0x5eed;
        for _ in 0..200 {
            let mut text = String::new();
            for _ in 0..(seed % 24) {
                seed = seed
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                text.push(alphabet[(seed >> 33) as usize % alphabet.len()]);
            }
            values.push(text);
        }
        let mut tx = store.pool.read().await.unwrap();
        for value in &values {
            let literal = text_literal(value).unwrap();
            let row = tx
                .fetch_one(format!("SELECT {literal} AS v"), &[])
                .await
                .unwrap();
            assert_eq!(&row.text("v").unwrap(), value, "{literal}");
        }
        drop(tx);
        let tricky = DomainEvent {
            event_type: "node.onboarding.completed".into(),
            subject_id: "it's \\ a 'node'".into(),
            payload: json!({ "message": "quote ' backslash \\ dollar $$ end '); --" }),
        };
        let mut tx = store.pool.write().await.unwrap();
        write_outbox(&mut tx, store.now(), &tricky).await.unwrap();
        tx.commit().await.unwrap();
        let written = store.pending_events(10).await.unwrap();
        assert_eq!(written.len(), 1);
        assert_eq!(written[0].subject_id, tricky.subject_id);
        assert_eq!(written[0].payload, tricky.payload);
    }

    /// The statements put off to the commit run with it or not at all: one failing at the
    /// commit rolls the whole transaction back (the event written before it, the serial's
    /// bump put off before it), and the store's next writer commits as usual.
    #[tokio::test]
    async fn a_commit_whose_put_off_statement_fails_writes_nothing() {
        let store = fresh_store().await;
        let before = store.serial().await.unwrap();
        let mut tx = store.pool.write().await.unwrap();
        write_outbox(&mut tx, store.now(), &event(1)).await.unwrap();
        bump_serial(&mut tx).await.unwrap();
        tx.execute_at_commit("UPDATE store_serial SET value = 'not a number'".into())
            .await
            .unwrap();
        let error = tx.commit().await.expect_err("the put-off statement fails");
        assert!(error.to_string().contains("committing"), "{error}");
        assert_eq!(store.serial().await.unwrap(), before);
        assert!(store.pending_events(10).await.unwrap().is_empty());
        for n in 2..=9 {
            let mut tx = store.pool.write().await.unwrap();
            write_outbox(&mut tx, store.now(), &event(n)).await.unwrap();
            bump_serial(&mut tx).await.unwrap();
            tx.commit().await.unwrap();
        }
        assert_eq!(store.serial().await.unwrap(), before + 8);
        let written: Vec<String> = store
            .pending_events(10)
            .await
            .unwrap()
            .into_iter()
            .map(|e| e.subject_id)
            .collect();
        assert_eq!(
            written,
            (2..=9).map(|n| format!("job-{n}")).collect::<Vec<_>>()
        );
    }

    /// A transaction that asks for the serial's bump (twice here) holds neither the turn nor
    /// the serial's row until it commits: another writer bumps and commits meanwhile without
    /// waiting. Each committed transaction moves the serial once; one rolled back, not at all.
    #[tokio::test]
    async fn the_serial_moves_once_per_transaction_when_it_commits() {
        let store = fresh_store().await;
        let before = store.serial().await.unwrap();
        let mut first = store.pool.write().await.unwrap();
        bump_serial(&mut first).await.unwrap();
        bump_serial(&mut first).await.unwrap();
        let other = store.clone();
        let second = tokio::time::timeout(Duration::from_secs(5), async move {
            let mut tx = other.pool.write().await?;
            bump_serial(&mut tx).await?;
            tx.commit().await
        })
        .await
        .expect("the second writer does not wait for the first, still open");
        second.unwrap();
        assert_eq!(store.serial().await.unwrap(), before + 1);
        first.commit().await.unwrap();
        assert_eq!(store.serial().await.unwrap(), before + 2);
        let mut rolled_back = store.pool.write().await.unwrap();
        bump_serial(&mut rolled_back).await.unwrap();
        drop(rolled_back);
        assert_eq!(store.serial().await.unwrap(), before + 2);
    }
}
