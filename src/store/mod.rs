//! State store (DESIGN.md §6; seeds 000 §4.2, §4.5, §4.12, §5.7, §6.5, §8.0; 001; 003
//! "Workers and Concurrency"): sqlx with runtime queries on SQLite (the embedded default) or
//! PostgreSQL (for HA), one code path for both.
//!
//! [`Store::open`] takes `sqlite://PATH` (creating the file and its directory) or
//! `postgres://…`, and migrates on open. Every write is a transaction that checks the
//! lifecycle rules (`crate::lifecycle`) before it changes anything: a write that breaks them is
//! refused with a typed [`StoreError`] and leaves the store as it was. Time comes from the
//! injected [`Clock`], never from the database.

mod agents;
pub(crate) mod db;
mod drift;
mod jobs;
mod leases;
mod migrate;
mod nodes;
mod plan_key;
mod provisioning;
mod records;
mod replicas;
mod seed;
mod sqlite_writer;
mod tasks;
mod tokens;

use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;

use chrono::{DateTime, Utc};

use crate::clock::Clock;
use crate::lifecycle::{IronicError, JobStateError, RecoveryError, TransitionError, UnknownName};

pub use agents::{
    AgentContact, AgentCredential, AgentEnrollment, AgentIdentity, ENROLLABLE_STATES,
    ENROLLMENT_REPLAY_WINDOW, EnrollError, Enrolled, EnrollmentNotices, EnrollmentRequest,
};
pub use db::Backend;
pub use drift::{DriftMark, DriftRecord, MaasObservation};
pub use jobs::{
    EventStatus, Job, JobFailure, JobFilter, JobSpec, JobUpdate, NewDecommission, NewOnboarding,
    NextTry, Observed, RetryWait, SiteRows, StageEvent, StageEventRow,
};
pub use leases::{Fence, Lease, LeaseSort, LeaseTarget, node_lease_name};
pub use migrate::{SCHEMA_VERSION, migration_versions};
pub use nodes::{NewNode, Node, NodeFilter, NodeTransition, NodeView, node_facts};
pub use provisioning::{
    Created, JobEvent, JobMediaState, NewProvisioning, ProvisioningFilter, Server, WebhookOutcome,
    note,
};
/// Every writer of the store serial bumps it in the outbox writers' turn.
pub(crate) use records::bump_serial;
pub use records::{
    Actor, ApplyRecord, AuditEntry, AuditQuery, AuditRecord, DomainEvent, MaasState,
    MaasStateUpdate, NewPlan, OutboxEvent, PlanRecord, Role,
};
pub use replicas::{FleetSetting, SlotOutcome, SlotPick, SlotRequest};
pub use seed::{ConvergedHistory, ConvergedNode};
pub use tasks::{AgentTask, EnsureOutcome, TaskOutcome, TaskStatus};
pub use tokens::{TokenClaim, TokenError, random_password, token_hash};

use db::{Pool, Tx};

/// `sqlite://<fleet>/.metalform/state.db` (docs/contracts.md §2).
pub fn default_url(fleet_dir: &Path) -> String {
    format!(
        "sqlite://{}",
        fleet_dir.join(".metalform").join("state.db").display()
    )
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("invalid state URL `{url}`: {reason}")]
    InvalidUrl { url: String, reason: String },
    #[error("cannot open the state store at {url}: {source}")]
    Unreachable {
        url: String,
        #[source]
        source: sqlx::Error,
    },
    #[error("state store error while {context}: {source}")]
    Database {
        context: String,
        #[source]
        source: sqlx::Error,
    },
    /// A SQLite statement run on the calling thread failed: a write, or a large read (see
    /// `sqlite_writer`).
    #[error("state store error while {context}: {source}")]
    Local {
        context: String,
        #[source]
        source: rusqlite::Error,
    },
    #[error("the state store has schema version {found}, newer than this metalform ({known})")]
    SchemaTooNew { found: i64, known: i64 },
    /// The store holds data the upgrade to `version` cannot carry over; nothing was changed.
    #[error("the state store cannot be upgraded to schema version {version}: {reason}")]
    UpgradeRefused {
        version: i64,
        reason: String,
        hint: &'static str,
    },
    #[error("the state store holds data this metalform cannot read: {0}")]
    Corrupt(String),
    #[error("{kind} `{id}` not found")]
    NotFound { kind: &'static str, id: String },
    #[error("a live node `{hostname}` already exists in site `{site}`")]
    DuplicateNode { site: String, hostname: String },
    #[error("node {node}: {source}")]
    Transition {
        node: String,
        #[source]
        source: TransitionError,
    },
    #[error("{kind} {job}: {source}")]
    JobState {
        kind: &'static str,
        job: String,
        #[source]
        source: JobStateError,
    },
    #[error("{kind} {job}: {source}")]
    Recovery {
        kind: &'static str,
        job: String,
        #[source]
        source: RecoveryError,
    },
    #[error("node {node}: {source}")]
    Provision {
        node: String,
        #[source]
        source: IronicError,
    },
    #[error(
        "node {node}: observed provider state is unknown, so `{flag}` cannot be checked; record the node's MAAS state first"
    )]
    ProviderStateUnknown { node: String, flag: &'static str },
    #[error("{0}")]
    Invalid(String),
    #[error(transparent)]
    UnknownName(#[from] UnknownName),
    #[error(
        "node {node} changed concurrently (generation {expected} expected, {found} found); re-read and retry"
    )]
    StaleGeneration {
        node: String,
        expected: i64,
        found: i64,
    },
    #[error("{kind} {id} changed concurrently; re-read and retry")]
    Concurrent { kind: &'static str, id: String },
    #[error("node {node} already has an open {kind} ({job}, {state})")]
    JobOpen {
        node: String,
        kind: &'static str,
        job: String,
        state: String,
    },
    #[error("server {serial} already has an active provisioning job ({job}, {status})")]
    ServerBusy {
        serial: String,
        job: String,
        status: String,
    },
    #[error(
        "idempotency key `{key}` belongs to provisioning job {job}, which was created with another recipe"
    )]
    IdempotencyConflict { key: String, job: String },
    #[error("lease `{name}` is held by `{holder}` until {expires_at}")]
    LeaseHeld {
        name: String,
        holder: String,
        expires_at: String,
    },
    #[error(
        "lease `{name}` (fencing {fencing}) is no longer held by `{holder}`: a newer holder fenced it off"
    )]
    LeaseLost {
        name: String,
        holder: String,
        fencing: i64,
    },
    #[error(transparent)]
    Token(#[from] TokenError),
}

impl StoreError {
    /// Worth retrying unchanged (connection trouble, lock timeouts, a concurrent writer).
    pub fn is_transient(&self) -> bool {
        match self {
            StoreError::Unreachable { .. } => true,
            StoreError::Database { source, .. } => match source {
                sqlx::Error::Io(_) | sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed => true,
                // PostgreSQL rolled the transaction back (deadlock_detected,
                // serialization_failure), or ended the session inside it (idle past the
                // limit, or the server shutting down or restarting: admin_shutdown,
                // crash_shutdown, cannot_connect_now): nothing of it was written, so it can
                // run again.
                sqlx::Error::Database(db) => matches!(
                    db.code().as_deref(),
                    Some("40P01" | "40001" | "25P03" | "57P01" | "57P02" | "57P03")
                ),
                _ => false,
            },
            // Another process held SQLite's write lock past the wait: nothing was written.
            StoreError::Local { source, .. } => sqlite_writer::is_busy(source),
            StoreError::StaleGeneration { .. } | StoreError::Concurrent { .. } => true,
            _ => false,
        }
    }

    /// A unique index refused an insert: another writer committed the same row first. On
    /// PostgreSQL a check read before the insert cannot see a row another transaction has not
    /// committed yet, so the index is the last word on such races.
    pub(crate) fn is_unique_violation(&self) -> bool {
        match self {
            StoreError::Database {
                source: sqlx::Error::Database(db),
                ..
            } => db.is_unique_violation(),
            StoreError::Local { source, .. } => sqlite_writer::is_unique_violation(source),
            _ => false,
        }
    }

    /// A refusal by the lifecycle rules or a conflict with the current state (HTTP 409).
    pub fn is_conflict(&self) -> bool {
        matches!(
            self,
            StoreError::Transition { .. }
                | StoreError::JobState { .. }
                | StoreError::Recovery { .. }
                | StoreError::Provision { .. }
                | StoreError::DuplicateNode { .. }
                | StoreError::JobOpen { .. }
                | StoreError::ServerBusy { .. }
                | StoreError::IdempotencyConflict { .. }
                | StoreError::LeaseHeld { .. }
                | StoreError::LeaseLost { .. }
                | StoreError::StaleGeneration { .. }
                | StoreError::Concurrent { .. }
        )
    }
}

/// Where a store lives, parsed from its URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreLocation {
    Sqlite(PathBuf),
    Postgres(String),
}

impl StoreLocation {
    pub fn parse(url: &str) -> Result<StoreLocation, StoreError> {
        let invalid = |reason: &str| StoreError::InvalidUrl {
            url: redact_url(url),
            reason: reason.to_owned(),
        };
        if let Some(path) = url.strip_prefix("sqlite://") {
            if path.is_empty() {
                return Err(invalid("no path after sqlite://"));
            }
            Ok(StoreLocation::Sqlite(PathBuf::from(path)))
        } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            Ok(StoreLocation::Postgres(url.to_owned()))
        } else {
            Err(invalid("expected sqlite://PATH or postgres://…"))
        }
    }
}

/// PostgreSQL's own default (`sslmode=prefer`) falls back to plain text without a word, and
/// does not check who answers. Unless the URL (or `PGSSLMODE`) says otherwise, a server that
/// is not on this host is reached with TLS and its certificate verified against the system's
/// roots (or `sslrootcert=`): `verify-full`. Plain text only when the operator writes
/// `sslmode=disable` (or `prefer`/`allow`).
fn tls_by_default(
    options: sqlx::postgres::PgConnectOptions,
    url: &str,
) -> sqlx::postgres::PgConnectOptions {
    let asked = url.contains("sslmode=")
        || url.contains("ssl-mode=")
        || std::env::var_os("PGSSLMODE").is_some();
    let host = options.get_host();
    let local = options.get_socket().is_some()
        || host.starts_with('/')
        || host == "localhost"
        || host
            .trim_matches(['[', ']'])
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback());
    if asked || local {
        options
    } else {
        options.ssl_mode(sqlx::postgres::PgSslMode::VerifyFull)
    }
}

#[cfg(test)]
mod tls_tests {
    use super::*;

    fn mode(url: &str) -> sqlx::postgres::PgSslMode {
        let options = sqlx::postgres::PgConnectOptions::from_str(url).unwrap();
        tls_by_default(options, url).get_ssl_mode()
    }

    #[test]
    fn a_remote_postgres_gets_verify_full_unless_the_url_says_otherwise() {
        use sqlx::postgres::PgSslMode::*;
        if std::env::var_os("PGSSLMODE").is_some() {
            return;
        }
        assert!(matches!(mode("postgres://m@db.example.net/m"), VerifyFull));
        assert!(matches!(mode("postgres://m@10.0.0.5:5432/m"), VerifyFull));
        // Said so: plain text, or a weaker mode.
        assert!(matches!(
            mode("postgres://m@db.example.net/m?sslmode=disable"),
            Disable
        ));
        assert!(matches!(
            mode("postgres://m@db.example.net/m?sslmode=require"),
            Require
        ));
        // This host: PostgreSQL's own default.
        assert!(matches!(mode("postgres://m@127.0.0.1:5432/m"), Prefer));
        assert!(matches!(mode("postgres://m@localhost/m"), Prefer));
    }
}

/// How long a transaction of this process may sit idle on PostgreSQL before the server ends
/// its session and rolls it back. A process paused inside a transaction (a CLI stopped with
/// Ctrl-Z, a frozen VM, a partitioned network) keeps its row locks until it wakes: the lease
/// rows its fenced writes checked, the rows it changed. Whoever takes its work over would wait
/// with it. This process's transactions wait for nothing but the store between statements, so
/// a healthy one is idle for a round trip; one ended by the limit wrote nothing, and the
/// paused process's next use of the store fails and is retried.
pub const IDLE_TRANSACTION_LIMIT: std::time::Duration = std::time::Duration::from_secs(10);

/// The idle limit for a replica holding leases of `lease_ttl`: a third of it, at least a second
/// and at most [`IDLE_TRANSACTION_LIMIT`]. A stall the other replicas wait through then ends
/// before their leases, renewed every third of a TTL, lapse.
pub fn idle_transaction_limit(lease_ttl: std::time::Duration) -> std::time::Duration {
    (lease_ttl / 3).clamp(std::time::Duration::from_secs(1), IDLE_TRANSACTION_LIMIT)
}

#[cfg(test)]
mod idle_limit_tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn a_replica_idles_in_a_transaction_for_a_third_of_its_lease_ttl_at_most() {
        assert_eq!(
            idle_transaction_limit(Duration::from_secs(3)),
            Duration::from_secs(1)
        );
        assert_eq!(
            idle_transaction_limit(Duration::from_secs(15)),
            Duration::from_secs(5)
        );
        assert_eq!(
            idle_transaction_limit(Duration::from_millis(600)),
            Duration::from_secs(1)
        );
        assert_eq!(
            idle_transaction_limit(Duration::from_secs(60)),
            IDLE_TRANSACTION_LIMIT
        );
    }
}

/// A URL fit to print: user, password and secret parameters masked
/// ([`crate::sanitize::redact::url`]).
pub fn redact_url(url: &str) -> String {
    crate::sanitize::redact::url(url)
}

/// The state store. Cheap to clone (a pool and a clock).
#[derive(Clone)]
pub struct Store {
    pool: Pool,
    clock: Arc<dyn Clock>,
    url: String,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").field("url", &self.url).finish()
    }
}

impl Store {
    /// Open (creating a SQLite file and its directory if needed) and migrate.
    pub async fn open(url: &str, clock: Arc<dyn Clock>) -> Result<Store, StoreError> {
        Self::open_with_idle_limit(url, clock, IDLE_TRANSACTION_LIMIT).await
    }

    /// [`Store::open`] for a replica holding leases of `lease_ttl` (see
    /// [`idle_transaction_limit`]).
    pub async fn open_for_replica(
        url: &str,
        clock: Arc<dyn Clock>,
        lease_ttl: std::time::Duration,
    ) -> Result<Store, StoreError> {
        Self::open_with_idle_limit(url, clock, idle_transaction_limit(lease_ttl)).await
    }

    async fn open_with_idle_limit(
        url: &str,
        clock: Arc<dyn Clock>,
        idle_limit: std::time::Duration,
    ) -> Result<Store, StoreError> {
        let shown = redact_url(url);
        let unreachable = |source| StoreError::Unreachable {
            url: shown.clone(),
            source,
        };
        let pool = match StoreLocation::parse(url)? {
            StoreLocation::Sqlite(path) => {
                if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                    // The store holds the plan-signing key and job details: owner only.
                    crate::secrets::create_private_dir(dir).map_err(|e| {
                        StoreError::InvalidUrl {
                            url: shown.clone(),
                            reason: format!("cannot create {}: {e}", dir.display()),
                        }
                    })?;
                }
                let pool = Pool::connect_sqlite(&path).await.map_err(unreachable)?;
                // SQLite creates the file (and its -wal/-shm, with the same mode) by the umask.
                use std::os::unix::fs::PermissionsExt as _;
                if let Err(e) =
                    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
                {
                    tracing::warn!(path = %path.display(), error = %e, "cannot make the state database owner-only");
                }
                pool
            }
            StoreLocation::Postgres(url) => {
                let options = sqlx::postgres::PgConnectOptions::from_str(&url).map_err(|e| {
                    StoreError::InvalidUrl {
                        url: shown.clone(),
                        reason: e.to_string(),
                    }
                })?;
                // An operator's own limit in the URL (`options=-c
                // idle_in_transaction_session_timeout=…`) stands.
                let idle_limit =
                    (!url.contains("idle_in_transaction_session_timeout")).then_some(idle_limit);
                Pool::connect_postgres(tls_by_default(options, &url), idle_limit)
                    .await
                    .map_err(unreachable)?
            }
        };
        let store = Store {
            pool,
            clock,
            url: shown,
        };
        migrate::migrate(&store.pool, &format_time(store.now())).await?;
        Ok(store)
    }

    pub fn backend(&self) -> Backend {
        self.pool.backend()
    }

    /// The store's URL with any password redacted.
    pub fn url(&self) -> &str {
        &self.url
    }

    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    pub(crate) fn now(&self) -> DateTime<Utc> {
        self.clock.now()
    }

    pub async fn close(&self) {
        self.pool.close().await
    }

    /// The row `id` of `table` (404-able as `kind`), read by `from_row`.
    pub(crate) async fn by_id<T>(
        &self,
        table: &str,
        kind: &'static str,
        id: uuid::Uuid,
        from_row: fn(&db::Row) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let mut tx = self.pool.read().await?;
        from_row(&tx.fetch_by_id(table, kind, id).await?)
    }

    /// The schema versions applied so far.
    pub async fn schema_versions(&self) -> Result<Vec<i64>, StoreError> {
        let mut tx = self.pool.read().await?;
        let rows = tx
            .fetch_all(
                "SELECT version FROM schema_migrations ORDER BY version",
                &[],
            )
            .await?;
        rows.iter().map(|r| r.int("version")).collect()
    }

    /// A number that changes whenever inventory or job state changes (plan files record it to
    /// detect a stale plan). One row read.
    pub async fn serial(&self) -> Result<i64, StoreError> {
        let mut tx = self.pool.read().await?;
        serial_in(&mut tx).await
    }
}

/// [`Store::serial`] inside a transaction.
pub(crate) async fn serial_in(tx: &mut Tx) -> Result<i64, StoreError> {
    tx.fetch_one("SELECT value FROM store_serial WHERE id = 1", &[])
        .await?
        .int("value")
}

/// Fixed-width RFC 3339 UTC with microseconds: text order is time order.
pub(crate) fn format_time(t: DateTime<Utc>) -> String {
    t.format("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()
}

pub(crate) fn parse_time(s: &str) -> Result<DateTime<Utc>, StoreError> {
    DateTime::parse_from_rfc3339(s)
        .map(|t| t.with_timezone(&Utc))
        .map_err(|e| StoreError::Corrupt(format!("timestamp `{s}`: {e}")))
}

pub(crate) fn parse_opt_time(s: Option<String>) -> Result<Option<DateTime<Utc>>, StoreError> {
    s.as_deref().map(parse_time).transpose()
}

pub(crate) fn parse_uuid(s: &str) -> Result<uuid::Uuid, StoreError> {
    uuid::Uuid::parse_str(s).map_err(|e| StoreError::Corrupt(format!("uuid `{s}`: {e}")))
}

pub(crate) fn parse_json(s: &str) -> Result<serde_json::Value, StoreError> {
    serde_json::from_str(s).map_err(|e| StoreError::Corrupt(format!("JSON `{s}`: {e}")))
}

pub(crate) fn parse_name<T: FromStr<Err = UnknownName>>(s: &str) -> Result<T, StoreError> {
    s.parse()
        .map_err(|e: UnknownName| StoreError::Corrupt(e.to_string()))
}
