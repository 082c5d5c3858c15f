//! Versioned, forward-only migrations applied on open (DESIGN.md §6). Each migration runs in
//! the transaction that records it; two processes opening the same store at once serialise on a
//! PostgreSQL transaction-scoped advisory lock or SQLite's write lock (BEGIN IMMEDIATE with a
//! busy timeout), so the second one finds the work done.

use super::StoreError;
use super::db::{Backend, Pool, Tx, params};

struct Migration {
    version: i64,
    name: &'static str,
    sql: &'static str,
}

/// Every migration, oldest first. Never edit a released one: add the next.
const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        name: "init",
        sql: include_str!("migrations/0001_init.sql"),
    },
    Migration {
        version: 2,
        name: "agents",
        sql: include_str!("migrations/0002_agents.sql"),
    },
    Migration {
        version: 3,
        name: "reimage_generation",
        sql: include_str!("migrations/0003_reimage_generation.sql"),
    },
    Migration {
        version: 6,
        name: "plan_signing_key",
        sql: include_str!("migrations/0006_plan_signing_key.sql"),
    },
    Migration {
        version: 8,
        name: "provisioning",
        sql: include_str!("migrations/0008_provisioning.sql"),
    },
    Migration {
        version: 9,
        name: "lifecycle_exits",
        sql: include_str!("migrations/0009_lifecycle_exits.sql"),
    },
    Migration {
        version: 10,
        name: "replicas",
        sql: include_str!("migrations/0010_replicas.sql"),
    },
    Migration {
        version: 11,
        name: "retry_backoff",
        sql: include_str!("migrations/0011_retry_backoff.sql"),
    },
    Migration {
        version: 14,
        name: "agent_tasks_status",
        sql: include_str!("migrations/0014_agent_tasks_status.sql"),
    },
    Migration {
        version: 15,
        name: "slot_subject",
        sql: include_str!("migrations/0015_slot_subject.sql"),
    },
    Migration {
        version: 16,
        name: "one_open_onboarding",
        sql: include_str!("migrations/0016_one_open_onboarding.sql"),
    },
    Migration {
        version: 17,
        name: "current_job_indexes",
        sql: include_str!("migrations/0017_current_job_indexes.sql"),
    },
    Migration {
        version: 18,
        name: "superseded_jobs",
        sql: include_str!("migrations/0018_superseded_jobs.sql"),
    },
];

/// The schema version this build writes.
pub const SCHEMA_VERSION: i64 = 18;

/// The versions of every migration this build knows, oldest first (what a migrated store
/// records in `schema_migrations`; numbers may have gaps: each branch of work takes the
/// number it was given).
pub fn migration_versions() -> Vec<i64> {
    MIGRATIONS.iter().map(|m| m.version).collect()
}

/// Arbitrary constant naming metalform's migration lock among other advisory locks.
const PG_MIGRATION_LOCK: i64 = 0x6d65_7461_6c66_6f72; // "metalfor"

fn render(sql: &str, backend: Backend) -> String {
    let id = match backend {
        Backend::Sqlite => "INTEGER PRIMARY KEY AUTOINCREMENT",
        Backend::Postgres => "BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY",
    };
    sql.replace("{{id}}", id)
}

/// Apply the pending migrations; returns the versions applied by this call.
pub(crate) async fn migrate(pool: &Pool, now: &str) -> Result<Vec<i64>, StoreError> {
    let mut tx = pool.write().await?;
    if tx.backend() == Backend::Postgres {
        tx.execute(
            "SELECT pg_advisory_xact_lock($1)",
            &params![PG_MIGRATION_LOCK],
        )
        .await?;
    }
    tx.execute(
        "CREATE TABLE IF NOT EXISTS schema_migrations (
            version BIGINT PRIMARY KEY,
            name TEXT NOT NULL,
            applied_at TEXT NOT NULL
        )",
        &[],
    )
    .await?;
    let applied: Vec<i64> = tx
        .fetch_all(
            "SELECT version FROM schema_migrations ORDER BY version",
            &[],
        )
        .await?
        .iter()
        .map(|r| r.int("version"))
        .collect::<Result<_, _>>()?;
    if let Some(newest) = applied.iter().max().copied()
        && newest > SCHEMA_VERSION
    {
        return Err(StoreError::SchemaTooNew {
            found: newest,
            known: SCHEMA_VERSION,
        });
    }
    let mut done = Vec::new();
    for migration in MIGRATIONS {
        if applied.contains(&migration.version) {
            continue;
        }
        refuse_what_cannot_migrate(&mut tx, migration.version).await?;
        tx.execute_script(render(migration.sql, tx.backend()))
            .await?;
        if migration.version == 18 {
            // The new column starts false on every row: decide it from the rows themselves.
            super::jobs::mark_all_superseded(&mut tx).await?;
        }
        tx.execute(
            "INSERT INTO schema_migrations (version, name, applied_at) VALUES ($1, $2, $3)",
            &params![migration.version, migration.name, now],
        )
        .await?;
        done.push(migration.version);
    }
    tx.commit().await?;
    Ok(done)
}

/// Data a migration cannot carry over on its own, refused before anything is changed (the
/// whole upgrade is one transaction), with what the operator can do about it.
async fn refuse_what_cannot_migrate(tx: &mut Tx, version: i64) -> Result<(), StoreError> {
    if version != 16 {
        return Ok(());
    }
    // Two open onboardings of one node: only a race between replicas leaves them (docs/ha.md).
    // Which one to keep is the operator's call, so none is cancelled here.
    let rows = tx
        .fetch_all(
            "WITH open AS (SELECT site, hostname, id, status, requested_at FROM onboardings
                 WHERE status NOT IN ('completed', 'cancelled', 'reconciled'))
             SELECT site, hostname, id, status FROM open
             WHERE (site, hostname) IN
                 (SELECT site, hostname FROM open GROUP BY site, hostname HAVING count(*) > 1)
             ORDER BY site, hostname, requested_at, id",
            &[],
        )
        .await?;
    let mut nodes: Vec<(String, Vec<String>)> = Vec::new();
    for row in &rows {
        let node = format!("{}/{}", row.text("site")?, row.text("hostname")?);
        let job = format!("{} ({})", row.text("id")?, row.text("status")?);
        match nodes.last_mut() {
            Some((last, jobs)) if *last == node => jobs.push(job),
            _ => nodes.push((node, vec![job])),
        }
    }
    if nodes.is_empty() {
        return Ok(());
    }
    let listed: Vec<String> = nodes
        .iter()
        .map(|(node, jobs)| format!("{node}: {}", jobs.join(", ")))
        .collect();
    Err(StoreError::UpgradeRefused {
        version,
        reason: format!(
            "more than one open onboarding of the same node ({}); this version allows one per node",
            listed.join("; ")
        ),
        hint: "with the metalform version that wrote this store, cancel the onboardings you do not \
               want (`metalform onboardings cancel JOB --reason TEXT`), then run this version again",
    })
}
