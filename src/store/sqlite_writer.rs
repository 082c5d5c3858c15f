//! The SQLite store's connections driven on the calling thread (DESIGN.md §6): the one write
//! connection, whose transaction runs from its BEGIN to its COMMIT without handing each
//! statement to a worker thread and waiting to be woken with the answer, and the connection
//! of large reads ([`BulkReader`]), whose rows are not handed over one by one either.
//!
//! SQLite does a write transaction of the store in tens of microseconds; through an async
//! driver each statement was a hand-off to the connection's thread and back, and the writers'
//! turn was held for all of those wake-ups (docs/performance.md). Nothing here waits on
//! anything but SQLite itself: the lock another process may hold is waited for asynchronously
//! at BEGIN, and the connection has no busy timeout, so a statement never sleeps on a thread
//! that runs other tasks.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rusqlite::types::{Null, Value};
use rusqlite::{Connection, ErrorCode, OpenFlags};

use super::db::Param;

/// How long BEGIN waits for another process's write to end, as the pool's busy timeout.
const LOCK_WAIT: Duration = Duration::from_secs(30);

/// The connection that writes, and whether a transaction is open on it.
#[derive(Debug)]
pub(crate) struct SqliteWriter {
    /// Opened by the first write: a command that only reads has no writer connection.
    conn: Option<Connection>,
    path: PathBuf,
    /// The store was closed: no more writes.
    pub closed: bool,
    /// A transaction was begun and neither committed nor rolled back yet.
    open: bool,
}

/// A row read by a write transaction: its values, by column name.
#[derive(Debug, Clone)]
pub(crate) struct LocalRow {
    columns: Arc<[Box<str>]>,
    values: Vec<Value>,
}

impl LocalRow {
    pub fn get(&self, column: &str) -> Option<&Value> {
        let at = self.columns.iter().position(|c| &**c == column)?;
        self.values.get(at)
    }
}

impl SqliteWriter {
    pub fn new(path: &Path) -> Self {
        Self {
            conn: None,
            path: path.to_owned(),
            closed: false,
            open: false,
        }
    }

    fn connect(path: &Path) -> rusqlite::Result<Connection> {
        // The pool that came first created the file and set it to WAL, which is kept in the
        // file; the rest of the connection's settings are per connection.
        let conn = Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )?;
        conn.execute_batch("PRAGMA foreign_keys = ON; PRAGMA synchronous = NORMAL;")?;
        // Waiting for another process happens at BEGIN, asynchronously (see `begin`).
        conn.busy_timeout(Duration::ZERO)?;
        // The store's statements are a few dozen texts; those built per call (IN lists) age out.
        conn.set_prepared_statement_cache_capacity(256);
        Ok(conn)
    }

    /// Begin an IMMEDIATE transaction (the write lock taken now). Another process holding the
    /// lock is waited for here, without blocking the thread, for up to [`LOCK_WAIT`].
    pub async fn begin(&mut self) -> rusqlite::Result<()> {
        // A transaction still open on the connection (its ROLLBACK failed) would fail every
        // BEGIN from now on: a new connection ends it, as closing one rolls its transaction
        // back.
        if self.conn.as_ref().is_some_and(|conn| !conn.is_autocommit()) {
            tracing::warn!(
                "the state store's write connection was left inside a transaction; it is reopened"
            );
            self.conn = None;
        }
        if self.conn.is_none() {
            self.conn = Some(Self::connect(&self.path)?);
        }
        let started = tokio::time::Instant::now();
        let mut pause = Duration::from_millis(1);
        loop {
            match self.connection().execute_batch("BEGIN IMMEDIATE") {
                Ok(()) => {
                    self.open = true;
                    return Ok(());
                }
                Err(e)
                    if e.sqlite_error_code() == Some(ErrorCode::DatabaseBusy)
                        && started.elapsed() < LOCK_WAIT =>
                {
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_millis(50));
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// The connection of the open transaction, for [`execute`] and [`query_map`].
    pub fn connection(&mut self) -> &mut Connection {
        self.conn
            .as_mut()
            .expect("a write begins on an open connection")
    }

    pub fn commit(&mut self) -> rusqlite::Result<()> {
        // A failed COMMIT (a deferred constraint) leaves the transaction open: the write's
        // end rolls it back.
        self.connection().execute_batch("COMMIT")?;
        self.open = false;
        Ok(())
    }

    /// End the open transaction, if one is. Failing, the ROLLBACK found none open (SQLite
    /// already rolled it back) or the connection is gone; one it left open is ended by the
    /// next [`begin`](Self::begin).
    pub fn roll_back(&mut self) {
        if !self.open {
            return;
        }
        if let Some(conn) = self.conn.as_mut() {
            let _ = conn.execute_batch("ROLLBACK");
        }
        self.open = false;
    }

    /// No more writes; the connection is closed.
    pub fn close(&mut self) {
        self.closed = true;
        self.conn = None;
    }
}

/// Run a statement to its end; the number of rows it changed.
pub fn execute(conn: &Connection, sql: &str, params: &[Param]) -> rusqlite::Result<u64> {
    {
        let mut stmt = conn.prepare_cached(sql)?;
        bind(&mut stmt, params)?;
        // Stepped to its end like any query: a statement may return rows (RETURNING).
        let mut rows = stmt.raw_query();
        while rows.next()?.is_some() {}
    }
    Ok(conn.changes())
}

/// Each row of a query, turned into a `T` as it is read and added to `out`; SQLite's errors
/// as `failed` says.
pub fn query_map<T, E>(
    conn: &Connection,
    sql: &str,
    params: &[Param],
    mut out: Vec<T>,
    mut each: impl FnMut(LocalRow) -> Result<T, E>,
    failed: impl Fn(rusqlite::Error) -> E,
) -> Result<Vec<T>, E> {
    let mut stmt = conn.prepare_cached(sql).map_err(&failed)?;
    bind(&mut stmt, params).map_err(&failed)?;
    let columns: Arc<[Box<str>]> = stmt.column_names().into_iter().map(Box::from).collect();
    let mut rows = stmt.raw_query();
    while let Some(row) = rows.next().map_err(&failed)? {
        let values = (0..columns.len())
            .map(|i| row.get::<_, Value>(i))
            .collect::<rusqlite::Result<_>>()
            .map_err(&failed)?;
        out.push(each(LocalRow {
            columns: columns.clone(),
            values,
        })?);
    }
    Ok(out)
}

/// The connection large reads run on, kept between reads (with its prepared statements).
///
/// A read through the pool hands every row from the connection's worker thread to the caller
/// through a channel, with a copy of each of its values and a wake-up: reading a 10,000-node
/// fleet's inventory and jobs that way was the longest part of a `plan` (docs/performance.md).
/// Here the rows are read on the thread that runs the read (a blocking-pool thread: see
/// `Pool::read_bulk`). SQLite in WAL mode never makes a reader wait for a writer, so the thread
/// waits on nothing but SQLite's own work.
///
/// One read at a time: a daemon reading its 20 sites' rows four at a time peaked 20–30 MiB
/// higher than one at a time, for no gain (its reconciles wait on MAAS), and a command makes
/// one large read.
#[derive(Debug)]
pub(crate) struct BulkReader {
    path: PathBuf,
    /// The connection between two reads.
    idle: std::sync::Mutex<Option<Connection>>,
    /// The read's turn: further reads wait for it (a daemon reconciles every site at once).
    /// Closed with the store.
    pub turn: Arc<tokio::sync::Semaphore>,
}

/// How long a read waits for SQLite's busy cases (a WAL being recovered after a crash).
const READ_WAIT: Duration = Duration::from_secs(5);

impl BulkReader {
    pub fn new(path: &Path) -> Self {
        Self {
            path: path.to_owned(),
            idle: std::sync::Mutex::new(None),
            turn: Arc::new(tokio::sync::Semaphore::new(1)),
        }
    }

    /// A read transaction on the kept connection or a new one (taken with the turn).
    pub fn begin(self: &Arc<Self>) -> rusqlite::Result<BulkRead> {
        let kept = self.idle.lock().unwrap_or_else(|e| e.into_inner()).take();
        let conn = match kept {
            Some(conn) => conn,
            None => {
                let conn = Connection::open_with_flags(
                    &self.path,
                    OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
                )?;
                // It reads only; nothing written through it by mistake could go unnoticed.
                // Its sorts (a site's current jobs, newest first: megabytes at most) stay in
                // memory instead of going through a temporary file.
                conn.execute_batch("PRAGMA query_only = ON; PRAGMA temp_store = MEMORY;")?;
                conn.busy_timeout(READ_WAIT)?;
                conn.set_prepared_statement_cache_capacity(64);
                conn
            }
        };
        // Deferred: the snapshot is taken by the first statement and kept to the end.
        conn.execute_batch("BEGIN")?;
        Ok(BulkRead {
            conn: Some(conn),
            reader: self.clone(),
        })
    }

    /// No more reads; the kept connection is closed (one in use when its read ends).
    pub fn close(&self) {
        self.turn.close();
        self.idle.lock().unwrap_or_else(|e| e.into_inner()).take();
    }
}

/// A read transaction of [`BulkReader`]; its end gives the connection back.
#[derive(Debug)]
pub(crate) struct BulkRead {
    conn: Option<Connection>,
    reader: Arc<BulkReader>,
}

impl BulkRead {
    pub fn connection(&mut self) -> &mut Connection {
        self.conn
            .as_mut()
            .expect("a read's connection is kept until it ends")
    }
}

impl Drop for BulkRead {
    fn drop(&mut self) {
        let Some(conn) = self.conn.take() else {
            return;
        };
        // A connection whose transaction would not end is not used again, nor is one of a
        // store closed meanwhile.
        if conn.execute_batch("ROLLBACK").is_ok() && !self.reader.turn.is_closed() {
            *self.reader.idle.lock().unwrap_or_else(|e| e.into_inner()) = Some(conn);
        }
    }
}

/// Bind `params` to the statement's `$n` placeholders (SQLite names them `$1`, `$2`, … and may
/// number them in another order, by first appearance).
fn bind(stmt: &mut rusqlite::Statement<'_>, params: &[Param]) -> rusqlite::Result<()> {
    for index in 1..=stmt.parameter_count() {
        let name = stmt.parameter_name(index).unwrap_or("?");
        let value = name
            .strip_prefix('$')
            .and_then(|n| n.parse::<usize>().ok())
            .and_then(|n| params.get(n.checked_sub(1)?))
            .ok_or_else(|| {
                rusqlite::Error::InvalidParameterName(format!(
                    "{name} (the statement has {} values)",
                    params.len()
                ))
            })?;
        match value {
            Param::Text(Some(text)) => stmt.raw_bind_parameter(index, text.as_str()),
            Param::Int(Some(int)) => stmt.raw_bind_parameter(index, int),
            Param::Bool(b) => stmt.raw_bind_parameter(index, i64::from(*b)),
            Param::Text(None) | Param::Int(None) => stmt.raw_bind_parameter(index, Null),
        }?;
    }
    Ok(())
}

/// A unique or primary key index refused the write.
pub(crate) fn is_unique_violation(err: &rusqlite::Error) -> bool {
    matches!(
        err,
        rusqlite::Error::SqliteFailure(e, _)
            if e.extended_code == rusqlite::ffi::SQLITE_CONSTRAINT_UNIQUE
                || e.extended_code == rusqlite::ffi::SQLITE_CONSTRAINT_PRIMARYKEY
    )
}

/// Another writer held the lock for longer than the wait, or the database was locked.
pub(crate) fn is_busy(err: &rusqlite::Error) -> bool {
    matches!(
        err.sqlite_error_code(),
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn count(path: &Path) -> i64 {
        Connection::open(path)
            .unwrap()
            .query_row("SELECT count(*) FROM t", [], |row| row.get(0))
            .unwrap()
    }

    /// A transaction the writer lost track of (as after a ROLLBACK that failed) does not
    /// block every later write: the next BEGIN starts on a new connection, and what the lost
    /// transaction wrote is gone.
    #[tokio::test]
    async fn a_transaction_left_open_is_ended_by_the_next_begin() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("w.db");
        Connection::open(&path)
            .unwrap()
            .execute_batch("PRAGMA journal_mode = WAL; CREATE TABLE t (id INTEGER PRIMARY KEY)")
            .unwrap();
        let mut writer = SqliteWriter::new(&path);
        writer.begin().await.unwrap();
        execute(
            writer.connection(),
            "INSERT INTO t (id) VALUES ($1)",
            &[Param::Int(Some(1))],
        )
        .unwrap();
        writer.open = false;
        writer.roll_back();

        writer.begin().await.unwrap();
        execute(
            writer.connection(),
            "INSERT INTO t (id) VALUES ($1)",
            &[Param::Int(Some(2))],
        )
        .unwrap();
        writer.commit().unwrap();
        assert_eq!(count(&path), 1);
        let ids: Vec<i64> = query_map(
            writer.connection(),
            "SELECT id FROM t",
            &[],
            Vec::new(),
            |row| match row.get("id") {
                Some(Value::Integer(id)) => Ok(*id),
                other => panic!("{other:?}"),
            },
            |e| e,
        )
        .unwrap();
        assert_eq!(ids, [2]);
    }
}
