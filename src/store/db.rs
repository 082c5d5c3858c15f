//! One code path over two backends (DESIGN.md §6): SQL is written once with `$N` placeholders
//! (SQLite reads them as numbered parameters), values travel as a small [`Param`] enum bound
//! with the same Rust type on both sides, and rows are read by column name through [`Row`].
//!
//! Timestamps are fixed-width RFC 3339 UTC text (so text order is time order), ids are uuid
//! text, JSON is text. Only the migrations' id columns differ between the backends.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgPoolOptions, PgRow};
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteConnection, SqliteJournalMode, SqlitePoolOptions, SqliteRow,
    SqliteSynchronous,
};
use sqlx::{AssertSqlSafe, Postgres, Row as _, Sqlite, Transaction};

use super::StoreError;

/// Which database a store talks to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

#[derive(Debug, Clone)]
pub(crate) enum Pool {
    Sqlite(SqlitePool),
    Postgres(sqlx::PgPool),
}

/// A bound value. Nulls are typed because PostgreSQL checks parameter types.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Param {
    Text(Option<String>),
    Int(Option<i64>),
    Bool(bool),
}

impl From<&str> for Param {
    fn from(v: &str) -> Self {
        Param::Text(Some(v.to_owned()))
    }
}
impl From<String> for Param {
    fn from(v: String) -> Self {
        Param::Text(Some(v))
    }
}
impl From<&String> for Param {
    fn from(v: &String) -> Self {
        Param::Text(Some(v.clone()))
    }
}
impl From<Option<String>> for Param {
    fn from(v: Option<String>) -> Self {
        Param::Text(v)
    }
}
impl From<Option<&str>> for Param {
    fn from(v: Option<&str>) -> Self {
        Param::Text(v.map(str::to_owned))
    }
}
impl From<i64> for Param {
    fn from(v: i64) -> Self {
        Param::Int(Some(v))
    }
}
impl From<Option<i64>> for Param {
    fn from(v: Option<i64>) -> Self {
        Param::Int(v)
    }
}
impl From<bool> for Param {
    fn from(v: bool) -> Self {
        Param::Bool(v)
    }
}

/// `params![a, b, …]` → `[Param; N]` (pass as `&params![…]`).
macro_rules! params {
    ($($value:expr),* $(,)?) => {
        [$($crate::store::db::Param::from($value)),*]
    };
}
pub(crate) use params;

pub(crate) type Sql = Cow<'static, str>;

/// `SELECT * FROM table WHERE …`, built condition by condition with numbered parameters.
pub(crate) struct Select {
    sql: String,
    params: Vec<Param>,
}

impl Select {
    pub fn all_of(table: &str) -> Self {
        Self {
            sql: format!("SELECT * FROM {table} WHERE 1 = 1"),
            params: Vec::new(),
        }
    }

    /// ` AND {condition} $n` (`condition` ends with its operator: `site =`, `status <>`).
    pub fn and(&mut self, condition: &str, value: impl Into<Param>) {
        self.params.push(value.into());
        self.sql
            .push_str(&format!(" AND {condition} ${}", self.params.len()));
    }

    /// ` AND {column} IN ($n, …)`; no values selects nothing.
    pub fn and_in(&mut self, column: &str, values: impl IntoIterator<Item = String>) {
        let mut numbers = Vec::new();
        for value in values {
            self.params.push(value.into());
            numbers.push(format!("${}", self.params.len()));
        }
        if numbers.is_empty() {
            self.sql.push_str(" AND 1 = 0");
        } else {
            self.sql
                .push_str(&format!(" AND {column} IN ({})", numbers.join(", ")));
        }
    }

    pub async fn fetch(mut self, tx: &mut Tx, order_by: &str) -> Result<Vec<Row>, StoreError> {
        self.sql.push_str(&format!(" ORDER BY {order_by}"));
        tx.fetch_all(self.sql, &self.params).await
    }
}

/// A row of either backend, read by column name.
pub(crate) enum Row {
    Sqlite(SqliteRow),
    Postgres(PgRow),
}

macro_rules! get {
    ($row:expr, $col:expr, $ty:ty) => {
        match $row {
            Row::Sqlite(r) => r.try_get::<$ty, _>($col),
            Row::Postgres(r) => r.try_get::<$ty, _>($col),
        }
        .map_err(|source| StoreError::Database {
            context: format!("reading column `{}`", $col),
            source,
        })
    };
}

impl Row {
    pub fn text(&self, col: &str) -> Result<String, StoreError> {
        get!(self, col, String)
    }
    pub fn opt_text(&self, col: &str) -> Result<Option<String>, StoreError> {
        get!(self, col, Option<String>)
    }
    pub fn int(&self, col: &str) -> Result<i64, StoreError> {
        get!(self, col, i64)
    }
    pub fn opt_int(&self, col: &str) -> Result<Option<i64>, StoreError> {
        get!(self, col, Option<i64>)
    }
    pub fn bool(&self, col: &str) -> Result<bool, StoreError> {
        get!(self, col, bool)
    }
}

macro_rules! bind_all {
    ($query:expr, $params:expr) => {{
        let mut q = $query;
        for p in $params {
            q = match p {
                Param::Text(v) => q.bind(v.clone()),
                Param::Int(v) => q.bind(*v),
                Param::Bool(v) => q.bind(*v),
            };
        }
        q
    }};
}

/// A SQLite store: a pool of connections that read, and the one connection that writes.
///
/// SQLite has one writer at a time, so the process keeps one connection for its writes,
/// behind a fair async mutex that is the writers' turn. A writer takes the lock the moment
/// the last one commits (writers that met on SQLite's lock would wait in its busy handler,
/// which sleeps 1, 2, 5 … 100 ms between tries). The connection is never given back to a
/// pool, which would check it with one more round trip before the next writer could have it,
/// and its page cache stays warm, since no other connection of the process writes. Another
/// process (a CLI beside the daemon) still waits on the busy timeout.
#[derive(Debug, Clone)]
pub(crate) struct SqlitePool {
    pool: sqlx::SqlitePool,
    writer: Arc<tokio::sync::Mutex<SqliteWriter>>,
}

/// The connection that writes, and whether a transaction is open on it.
#[derive(Debug)]
pub(crate) struct SqliteWriter {
    /// Opened by the first write: a command that only reads has no writer connection.
    conn: Option<SqliteConnection>,
    options: SqliteConnectOptions,
    /// The store was closed: no more writes.
    closed: bool,
    /// A transaction was begun and neither committed nor rolled back yet.
    open: bool,
}

/// A SQLite write under way: the writer's turn, held until it commits or is rolled back.
pub(crate) struct WriteTurn {
    writer: Option<tokio::sync::OwnedMutexGuard<SqliteWriter>>,
    /// Statements not sent yet: they go with the next one, in one round trip.
    pending: Pending,
}

/// Statements a SQLite write has not sent yet (see [`Tx::execute_later`]).
#[derive(Default)]
struct Pending {
    sql: String,
    params: Vec<Param>,
}

impl Pending {
    /// Add `sql` (numbered from `$1`) after what is pending, its parameters renumbered after
    /// the ones already there.
    fn push(&mut self, sql: &str, params: &[Param]) {
        if !self.sql.is_empty() {
            self.sql.push_str(";\n");
        }
        renumber_into(&mut self.sql, sql, self.params.len());
        self.params.extend_from_slice(params);
    }
}

/// Append `sql` to `out` with each `$n` placeholder moved up by `offset`. The store's SQL is
/// written by this crate: a `$` followed by digits is a placeholder, never text.
fn renumber_into(out: &mut String, sql: &str, offset: usize) {
    if offset == 0 {
        out.push_str(sql);
        return;
    }
    let mut rest = sql;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..=at]);
        rest = &rest[at + 1..];
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits > 0 {
            let n: usize = rest[..digits].parse().expect("digits");
            out.push_str(&(n + offset).to_string());
            rest = &rest[digits..];
        }
    }
    out.push_str(rest);
}

impl SqliteWriter {
    /// End the open transaction. Failing, the ROLLBACK found none open (or the connection is
    /// gone): either way none is open after it.
    async fn roll_back(&mut self) {
        if let Some(conn) = self.conn.as_mut() {
            let _ = sqlx::raw_sql("ROLLBACK").execute(conn).await;
        }
        self.open = false;
    }
}

impl WriteTurn {
    fn conn(&mut self) -> &mut SqliteConnection {
        self.writer
            .as_mut()
            .and_then(|w| w.conn.as_mut())
            .expect("a write holds its turn and an open connection until it ends")
    }

    /// Send what is pending, as one script; nothing is left pending.
    async fn send_pending(&mut self) -> Result<(), sqlx::Error> {
        let pending = std::mem::take(&mut self.pending);
        bind_all!(
            sqlx::query::<Sqlite>(AssertSqlSafe(pending.sql)),
            &pending.params
        )
        .execute(self.conn())
        .await
        .map(|_| ())
    }
}

impl Drop for WriteTurn {
    /// A write dropped before its commit (an error, a cancelled task) is rolled back by a task
    /// that keeps the turn until it is done; outside a runtime the next writer rolls it back.
    fn drop(&mut self) {
        let Some(mut writer) = self.writer.take().filter(|w| w.open) else {
            return;
        };
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move { writer.roll_back().await });
        }
    }
}

/// The row of `table` whose `id` is `$1`.
fn by_id(table: &str) -> String {
    format!("SELECT * FROM {table} WHERE id = $1")
}

/// A transaction on either backend; a SQLite write holds the writer's turn until it ends.
pub(crate) enum Tx {
    SqliteRead(Transaction<'static, Sqlite>),
    SqliteWrite(WriteTurn),
    Postgres(Transaction<'static, Postgres>),
}

/// The connection a transaction's statements run on.
enum Conn<'a> {
    Sqlite(&'a mut SqliteConnection),
    Postgres(&'a mut sqlx::PgConnection),
}

fn db_err(context: &str) -> impl FnOnce(sqlx::Error) -> StoreError + '_ {
    move |source| StoreError::Database {
        context: context.to_owned(),
        source,
    }
}

impl Tx {
    fn conn(&mut self) -> Conn<'_> {
        match self {
            Tx::SqliteRead(tx) => Conn::Sqlite(tx),
            Tx::SqliteWrite(turn) => Conn::Sqlite(turn.conn()),
            Tx::Postgres(tx) => Conn::Postgres(tx),
        }
    }

    /// Run a statement; the number of rows it changed.
    pub async fn execute(
        &mut self,
        sql: impl Into<Sql>,
        params: &[Param],
    ) -> Result<u64, StoreError> {
        // Sent on its own: SQLite's count of changed rows is the last change's, so a BEGIN
        // sent before it would count the previous transaction's, and pending writes their own.
        self.flush().await?;
        let sql = AssertSqlSafe(sql.into());
        match self.conn() {
            Conn::Sqlite(conn) => bind_all!(sqlx::query::<Sqlite>(sql), params)
                .execute(conn)
                .await
                .map(|r| r.rows_affected()),
            Conn::Postgres(conn) => bind_all!(sqlx::query::<Postgres>(sql), params)
                .execute(conn)
                .await
                .map(|r| r.rows_affected()),
        }
        .map_err(db_err("executing a statement"))
    }

    pub async fn fetch_all(
        &mut self,
        sql: impl Into<Sql>,
        params: &[Param],
    ) -> Result<Vec<Row>, StoreError> {
        // Pending statements return no rows: the rows are this query's.
        let (sql, params) = self.with_pending(sql.into(), params);
        let params = &*params;
        let sql = AssertSqlSafe(sql);
        match self.conn() {
            Conn::Sqlite(conn) => bind_all!(sqlx::query::<Sqlite>(sql), params)
                .fetch_all(conn)
                .await
                .map(|rows| rows.into_iter().map(Row::Sqlite).collect()),
            Conn::Postgres(conn) => bind_all!(sqlx::query::<Postgres>(sql), params)
                .fetch_all(conn)
                .await
                .map(|rows| rows.into_iter().map(Row::Postgres).collect()),
        }
        .map_err(db_err("running a query"))
    }

    /// The rows of a query, each turned into a `T` as it arrives: a large read holds its
    /// results, never all of its rows at once as well.
    pub async fn fetch_map<T>(
        &mut self,
        sql: impl Into<Sql>,
        params: &[Param],
        mut each: impl FnMut(&Row) -> Result<T, StoreError>,
    ) -> Result<Vec<T>, StoreError> {
        use futures::TryStreamExt;
        let (sql, params) = self.with_pending(sql.into(), params);
        let params = &*params;
        let sql = AssertSqlSafe(sql);
        let mut out = Vec::new();
        match self.conn() {
            Conn::Sqlite(conn) => {
                let mut rows = bind_all!(sqlx::query::<Sqlite>(sql), params).fetch(conn);
                while let Some(row) = rows.try_next().await.map_err(db_err("running a query"))? {
                    out.push(each(&Row::Sqlite(row))?);
                }
            }
            Conn::Postgres(conn) => {
                let mut rows = bind_all!(sqlx::query::<Postgres>(sql), params).fetch(conn);
                while let Some(row) = rows.try_next().await.map_err(db_err("running a query"))? {
                    out.push(each(&Row::Postgres(row))?);
                }
            }
        }
        Ok(out)
    }

    pub async fn fetch_optional(
        &mut self,
        sql: impl Into<Sql>,
        params: &[Param],
    ) -> Result<Option<Row>, StoreError> {
        Ok(self.fetch_all(sql, params).await?.into_iter().next())
    }

    pub async fn fetch_one(
        &mut self,
        sql: impl Into<Sql>,
        params: &[Param],
    ) -> Result<Row, StoreError> {
        self.fetch_optional(sql, params)
            .await?
            .ok_or_else(|| StoreError::Corrupt("a query that returns one row returned none".into()))
    }

    /// The row of `table` whose `id` column is `id`; [`StoreError::NotFound`] names it `kind`.
    pub async fn fetch_by_id(
        &mut self,
        table: &str,
        kind: &'static str,
        id: impl ToString,
    ) -> Result<Row, StoreError> {
        let id = id.to_string();
        let found = self
            .fetch_optional(by_id(table), &[Param::from(id.as_str())])
            .await?;
        found.ok_or(StoreError::NotFound { kind, id })
    }

    /// A statement whose result nobody reads (an insert of a record, a counter's bump): on a
    /// SQLite write it is sent with the next statement or the commit, one round trip fewer,
    /// in the same order; its error, if any, is that later call's. Elsewhere it runs now.
    pub async fn execute_later(
        &mut self,
        sql: impl Into<Sql>,
        params: &[Param],
    ) -> Result<(), StoreError> {
        match self {
            Tx::SqliteWrite(turn) => {
                turn.pending.push(&sql.into(), params);
                Ok(())
            }
            _ => self.execute(sql, params).await.map(|_| ()),
        }
    }

    /// `sql` preceded by what a SQLite write has pending.
    fn with_pending<'p>(&mut self, sql: Sql, params: &'p [Param]) -> (Sql, Cow<'p, [Param]>) {
        match self {
            Tx::SqliteWrite(turn) if !turn.pending.sql.is_empty() => {
                let mut pending = std::mem::take(&mut turn.pending);
                pending.push(&sql, params);
                (pending.sql.into(), Cow::Owned(pending.params))
            }
            _ => (sql, Cow::Borrowed(params)),
        }
    }

    /// Send what a SQLite write has pending, on its own.
    async fn flush(&mut self) -> Result<(), StoreError> {
        let Tx::SqliteWrite(turn) = self else {
            return Ok(());
        };
        if turn.pending.sql.is_empty() {
            return Ok(());
        }
        turn.send_pending()
            .await
            .map_err(db_err("executing a statement"))
    }

    /// Run a script of several statements (migrations), no parameters.
    pub async fn execute_script(&mut self, sql: String) -> Result<(), StoreError> {
        self.flush().await?;
        let sql = AssertSqlSafe(sql);
        match self.conn() {
            Conn::Sqlite(conn) => sqlx::raw_sql(sql).execute(conn).await.map(|_| ()),
            Conn::Postgres(conn) => sqlx::raw_sql(sql).execute(conn).await.map(|_| ()),
        }
        .map_err(db_err("running a migration"))
    }

    pub async fn commit(self) -> Result<(), StoreError> {
        match self {
            Tx::SqliteRead(tx) => tx.commit().await,
            Tx::SqliteWrite(mut turn) => {
                // What is pending goes with the COMMIT.
                turn.pending.push("COMMIT", &[]);
                let committed = turn.send_pending().await;
                if let (Ok(()), Some(writer)) = (&committed, turn.writer.as_mut()) {
                    writer.open = false;
                }
                // A failed COMMIT (SQLITE_BUSY) leaves the transaction open: the turn's drop
                // rolls it back.
                committed
            }
            Tx::Postgres(tx) => tx.commit().await,
        }
        .map_err(db_err("committing"))
    }

    pub fn backend(&self) -> Backend {
        match self {
            Tx::SqliteRead(_) | Tx::SqliteWrite(_) => Backend::Sqlite,
            Tx::Postgres(_) => Backend::Postgres,
        }
    }
}

impl Pool {
    pub async fn connect_sqlite(path: &std::path::Path) -> Result<Pool, sqlx::Error> {
        let options = SqliteConnectOptions::new()
            .filename(path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Normal)
            .foreign_keys(true)
            // Writers queue on BEGIN IMMEDIATE instead of failing with SQLITE_BUSY.
            .busy_timeout(Duration::from_secs(30));
        // Two processes creating the same file at once can see SQLITE_BUSY from the connection
        // pragmas (switching to WAL needs an exclusive lock and does not wait on the busy
        // handler); the first one finishes within milliseconds, so retry for a while.
        let mut attempt = 0;
        loop {
            match SqlitePoolOptions::new()
                .max_connections(4)
                .acquire_timeout(Duration::from_secs(30))
                .connect_with(options.clone())
                .await
            {
                Ok(pool) => {
                    return Ok(Pool::Sqlite(SqlitePool {
                        pool,
                        writer: Arc::new(tokio::sync::Mutex::new(SqliteWriter {
                            conn: None,
                            options,
                            closed: false,
                            open: false,
                        })),
                    }));
                }
                Err(sqlx::Error::Database(e))
                    if e.code().as_deref() == Some("5") && attempt < 100 =>
                {
                    attempt += 1;
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(e) => return Err(e),
            }
        }
    }

    pub async fn connect_postgres(options: PgConnectOptions) -> Result<Pool, sqlx::Error> {
        let pool = PgPoolOptions::new()
            .max_connections(8)
            .acquire_timeout(Duration::from_secs(5))
            .connect_with(options)
            .await?;
        Ok(Pool::Postgres(pool))
    }

    /// A transaction that will write. On SQLite it begins IMMEDIATE (the write lock taken
    /// before its first statement, which the BEGIN is sent with), so two writers queue on the
    /// busy timeout instead of failing on upgrade.
    pub async fn write(&self) -> Result<Tx, StoreError> {
        match self {
            Pool::Sqlite(p) => {
                let mut writer = p.writer.clone().lock_owned().await;
                if writer.closed {
                    // As the pool answers once closed: a store that is gone, for the caller.
                    return Err(db_err("starting a transaction")(sqlx::Error::PoolClosed));
                }
                if writer.conn.is_none() {
                    let conn = sqlx::ConnectOptions::connect(&writer.options)
                        .await
                        .map_err(db_err("opening the store's writer connection"))?;
                    writer.conn = Some(conn);
                }
                if writer.open {
                    // Left open by a write whose rollback could not be spawned.
                    writer.roll_back().await;
                }
                // The BEGIN goes with the first statement. Open from now: a write dropped
                // after that statement started is rolled back (a ROLLBACK that finds no
                // transaction does nothing).
                writer.open = true;
                let mut pending = Pending::default();
                pending.push("BEGIN IMMEDIATE", &[]);
                Ok(Tx::SqliteWrite(WriteTurn {
                    writer: Some(writer),
                    pending,
                }))
            }
            Pool::Postgres(p) => p
                .begin()
                .await
                .map(Tx::Postgres)
                .map_err(db_err("starting a transaction")),
        }
    }

    /// A transaction that only reads (a consistent snapshot).
    pub async fn read(&self) -> Result<Tx, StoreError> {
        match self {
            Pool::Sqlite(p) => p.pool.begin().await.map(Tx::SqliteRead),
            Pool::Postgres(p) => p.begin().await.map(Tx::Postgres),
        }
        .map_err(db_err("starting a transaction"))
    }

    /// One query on its own, without a transaction around it (one round trip to the
    /// database: for hot read paths where a single statement is the whole read).
    pub async fn fetch_all_once(
        &self,
        sql: impl Into<Sql>,
        params: &[Param],
    ) -> Result<Vec<Row>, StoreError> {
        let sql = AssertSqlSafe(sql.into());
        match self {
            Pool::Sqlite(p) => bind_all!(sqlx::query::<Sqlite>(sql), params)
                .fetch_all(&p.pool)
                .await
                .map(|rows| rows.into_iter().map(Row::Sqlite).collect()),
            Pool::Postgres(p) => bind_all!(sqlx::query::<Postgres>(sql), params)
                .fetch_all(p)
                .await
                .map(|rows| rows.into_iter().map(Row::Postgres).collect()),
        }
        .map_err(db_err("running a query"))
    }

    /// [`Pool::fetch_all_once`] for at most one row.
    pub async fn fetch_optional_once(
        &self,
        sql: impl Into<Sql>,
        params: &[Param],
    ) -> Result<Option<Row>, StoreError> {
        Ok(self.fetch_all_once(sql, params).await?.into_iter().next())
    }

    /// [`Tx::fetch_by_id`] as one query on its own.
    pub async fn fetch_by_id_once(
        &self,
        table: &str,
        kind: &'static str,
        id: impl ToString,
    ) -> Result<Row, StoreError> {
        let id = id.to_string();
        let found = self
            .fetch_optional_once(by_id(table), &[Param::from(id.as_str())])
            .await?;
        found.ok_or(StoreError::NotFound { kind, id })
    }

    pub fn backend(&self) -> Backend {
        match self {
            Pool::Sqlite(_) => Backend::Sqlite,
            Pool::Postgres(_) => Backend::Postgres,
        }
    }

    pub async fn close(&self) {
        match self {
            Pool::Sqlite(p) => {
                // After the writes under way (they hold the turn).
                let conn = {
                    let mut writer = p.writer.lock().await;
                    writer.closed = true;
                    writer.conn.take()
                };
                if let Some(conn) = conn {
                    let _ = sqlx::Connection::close(conn).await;
                }
                p.pool.close().await
            }
            Pool::Postgres(p) => p.close().await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn sqlite() -> (tempfile::TempDir, Pool) {
        let dir = tempfile::tempdir().unwrap();
        let pool = Pool::connect_sqlite(&dir.path().join("t.db"))
            .await
            .unwrap();
        let mut tx = pool.write().await.unwrap();
        tx.execute_script("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT NOT NULL)".into())
            .await
            .unwrap();
        tx.commit().await.unwrap();
        (dir, pool)
    }

    async fn values(pool: &Pool) -> Vec<String> {
        let rows = pool
            .fetch_all_once("SELECT v FROM t ORDER BY id", &[])
            .await
            .unwrap();
        rows.iter().map(|r| r.text("v").unwrap()).collect()
    }

    #[test]
    fn placeholders_are_renumbered_after_the_pending_ones() {
        let mut out = String::new();
        renumber_into(
            &mut out,
            "UPDATE t SET v = $2 WHERE id = $1 AND '$x' <> $10",
            3,
        );
        assert_eq!(out, "UPDATE t SET v = $5 WHERE id = $4 AND '$x' <> $13");
    }

    #[tokio::test]
    async fn later_statements_run_in_order_before_the_next_one_and_at_commit() {
        let (_dir, pool) = sqlite().await;
        let mut tx = pool.write().await.unwrap();
        tx.execute_later("INSERT INTO t (id, v) VALUES ($1, $2)", &params![1i64, "a"])
            .await
            .unwrap();
        tx.execute_later("UPDATE t SET v = $1 WHERE id = $2", &params!["b", 1i64])
            .await
            .unwrap();
        // A query sees what was sent before it.
        let seen = tx.fetch_all("SELECT v FROM t", &[]).await.unwrap();
        assert_eq!(seen.len(), 1);
        assert_eq!(seen[0].text("v").unwrap(), "b");
        tx.execute_later("INSERT INTO t (id, v) VALUES ($1, $2)", &params![2i64, "c"])
            .await
            .unwrap();
        // Nothing is visible to others before the commit, which sends the last one.
        assert!(values(&pool).await.is_empty());
        tx.commit().await.unwrap();
        assert_eq!(values(&pool).await, ["b", "c"]);
    }

    #[tokio::test]
    async fn a_later_statement_that_fails_fails_the_commit_and_writes_nothing() {
        let (_dir, pool) = sqlite().await;
        let mut tx = pool.write().await.unwrap();
        tx.execute_later("INSERT INTO t (id, v) VALUES ($1, $2)", &params![1i64, "a"])
            .await
            .unwrap();
        tx.execute_later("INSERT INTO t (id, v) VALUES ($1, NULL)", &params![2i64])
            .await
            .unwrap();
        let err = tx.commit().await.unwrap_err();
        assert!(err.to_string().contains("NOT NULL"), "{err}");
        // The turn's drop rolled the write back; the next writer starts clean.
        let mut next = pool.write().await.unwrap();
        next.execute("INSERT INTO t (id, v) VALUES ($1, $2)", &params![3i64, "z"])
            .await
            .unwrap();
        next.commit().await.unwrap();
        assert_eq!(values(&pool).await, ["z"]);
    }

    #[tokio::test]
    async fn a_dropped_write_is_rolled_back_before_the_next_writer_begins() {
        let (_dir, pool) = sqlite().await;
        let mut tx = pool.write().await.unwrap();
        tx.execute(
            "INSERT INTO t (id, v) VALUES ($1, $2)",
            &params![1i64, "lost"],
        )
        .await
        .unwrap();
        drop(tx);
        let mut next = pool.write().await.unwrap();
        let changed = next
            .execute(
                "INSERT INTO t (id, v) VALUES ($1, $2)",
                &params![2i64, "kept"],
            )
            .await
            .unwrap();
        assert_eq!(changed, 1);
        next.commit().await.unwrap();
        assert_eq!(values(&pool).await, ["kept"]);
    }

    #[tokio::test]
    async fn a_row_count_is_the_statement_s_own() {
        let (_dir, pool) = sqlite().await;
        let mut tx = pool.write().await.unwrap();
        let inserted = tx
            .execute(
                "INSERT INTO t (id, v) VALUES (1, 'a'), (2, 'b'), (3, 'c')",
                &[],
            )
            .await
            .unwrap();
        assert_eq!(inserted, 3);
        tx.commit().await.unwrap();
        // The next write's first statement: SQLite's count is still the insert's until a
        // statement changes rows, so the BEGIN must not be counted with it.
        let mut tx = pool.write().await.unwrap();
        tx.execute_later("UPDATE t SET v = 'x' WHERE id = 1", &[])
            .await
            .unwrap();
        let none = tx
            .execute("UPDATE t SET v = 'y' WHERE id = 99", &[])
            .await
            .unwrap();
        assert_eq!(none, 0);
        tx.commit().await.unwrap();
        assert_eq!(values(&pool).await, ["x", "b", "c"]);
    }

    #[tokio::test]
    async fn a_closed_store_refuses_writes() {
        let (_dir, pool) = sqlite().await;
        pool.close().await;
        let err = pool.write().await.err().expect("refused");
        // The same error as the pool's once closed (a store that is gone: 503 to an agent).
        assert!(
            matches!(
                err,
                StoreError::Database {
                    source: sqlx::Error::PoolClosed,
                    ..
                }
            ),
            "{err:?}"
        );
    }
}
