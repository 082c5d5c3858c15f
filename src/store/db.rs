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
    SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteRow, SqliteSynchronous,
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

/// A SQLite pool and the turn its writers take, in this process, before `BEGIN IMMEDIATE`.
///
/// SQLite has one writer at a time. Writers that find the lock taken wait in SQLite's busy
/// handler, which sleeps 1, 2, 5 … 100 ms between tries, so the lock can sit free while every
/// waiting writer sleeps. Queueing on a fair async mutex first hands the lock over the moment
/// the last writer commits. Another process (a CLI beside the daemon) still waits on the busy
/// timeout.
#[derive(Debug, Clone)]
pub(crate) struct SqlitePool {
    pool: sqlx::SqlitePool,
    writers: Arc<tokio::sync::Mutex<()>>,
}

/// The row of `table` whose `id` is `$1`.
fn by_id(table: &str) -> String {
    format!("SELECT * FROM {table} WHERE id = $1")
}

/// A transaction on either backend; a SQLite writer holds its turn until it ends.
pub(crate) enum Tx {
    Sqlite(
        Transaction<'static, Sqlite>,
        Option<tokio::sync::OwnedMutexGuard<()>>,
    ),
    Postgres(Transaction<'static, Postgres>),
}

fn db_err(context: &str) -> impl FnOnce(sqlx::Error) -> StoreError + '_ {
    move |source| StoreError::Database {
        context: context.to_owned(),
        source,
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

impl Tx {
    /// Run a statement; the number of rows it changed.
    pub async fn execute(
        &mut self,
        sql: impl Into<Sql>,
        params: &[Param],
    ) -> Result<u64, StoreError> {
        let sql = AssertSqlSafe(sql.into());
        match self {
            Tx::Sqlite(tx, _) => bind_all!(sqlx::query::<Sqlite>(sql), params)
                .execute(&mut **tx)
                .await
                .map(|r| r.rows_affected()),
            Tx::Postgres(tx) => bind_all!(sqlx::query::<Postgres>(sql), params)
                .execute(&mut **tx)
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
        let sql = AssertSqlSafe(sql.into());
        match self {
            Tx::Sqlite(tx, _) => bind_all!(sqlx::query::<Sqlite>(sql), params)
                .fetch_all(&mut **tx)
                .await
                .map(|rows| rows.into_iter().map(Row::Sqlite).collect()),
            Tx::Postgres(tx) => bind_all!(sqlx::query::<Postgres>(sql), params)
                .fetch_all(&mut **tx)
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
        let sql = AssertSqlSafe(sql.into());
        let mut out = Vec::new();
        match self {
            Tx::Sqlite(tx, _) => {
                let mut rows = bind_all!(sqlx::query::<Sqlite>(sql), params).fetch(&mut **tx);
                while let Some(row) = rows.try_next().await.map_err(db_err("running a query"))? {
                    out.push(each(&Row::Sqlite(row))?);
                }
            }
            Tx::Postgres(tx) => {
                let mut rows = bind_all!(sqlx::query::<Postgres>(sql), params).fetch(&mut **tx);
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

    /// Run a script of several statements (migrations), no parameters.
    pub async fn execute_script(&mut self, sql: String) -> Result<(), StoreError> {
        let sql = AssertSqlSafe(sql);
        match self {
            Tx::Sqlite(tx, _) => sqlx::raw_sql(sql).execute(&mut **tx).await.map(|_| ()),
            Tx::Postgres(tx) => sqlx::raw_sql(sql).execute(&mut **tx).await.map(|_| ()),
        }
        .map_err(db_err("running a migration"))
    }

    pub async fn commit(self) -> Result<(), StoreError> {
        match self {
            Tx::Sqlite(tx, turn) => {
                let committed = tx.commit().await;
                // The next writer's turn starts once this one's lock is released.
                drop(turn);
                committed
            }
            Tx::Postgres(tx) => tx.commit().await,
        }
        .map_err(db_err("committing"))
    }

    pub fn backend(&self) -> Backend {
        match self {
            Tx::Sqlite(..) => Backend::Sqlite,
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
                        writers: Arc::default(),
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

    /// A transaction that will write. On SQLite it takes the write lock at once (BEGIN
    /// IMMEDIATE), so two writers queue on the busy timeout instead of failing on upgrade.
    pub async fn write(&self) -> Result<Tx, StoreError> {
        match self {
            Pool::Sqlite(p) => {
                let turn = p.writers.clone().lock_owned().await;
                p.pool
                    .begin_with("BEGIN IMMEDIATE")
                    .await
                    .map(|tx| Tx::Sqlite(tx, Some(turn)))
            }
            Pool::Postgres(p) => p.begin().await.map(Tx::Postgres),
        }
        .map_err(db_err("starting a transaction"))
    }

    /// A transaction that only reads (a consistent snapshot).
    pub async fn read(&self) -> Result<Tx, StoreError> {
        match self {
            Pool::Sqlite(p) => p.pool.begin().await.map(|tx| Tx::Sqlite(tx, None)),
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
            Pool::Sqlite(p) => p.pool.close().await,
            Pool::Postgres(p) => p.close().await,
        }
    }
}
