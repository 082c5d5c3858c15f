//! One code path over two backends (DESIGN.md §6): SQL is written once with `$N` placeholders
//! (SQLite reads them as numbered parameters), values travel as a small [`Param`] enum bound
//! with the same Rust type on both sides, and rows are read by column name through [`Row`].
//!
//! Timestamps are fixed-width RFC 3339 UTC text (so text order is time order), ids are uuid
//! text, JSON is text. Only the migrations' id columns differ between the backends.

use std::borrow::Cow;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgPoolOptions, PgRow};
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteConnection, SqliteJournalMode, SqlitePoolOptions, SqliteRow,
    SqliteSynchronous,
};
use sqlx::{AssertSqlSafe, Postgres, Row as _, Sqlite, Transaction};

use rusqlite::types::Value;

use super::StoreError;
use super::sqlite_writer::{self, BulkRead, BulkReader, LocalRow, SqliteWriter};

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

    pub async fn fetch(self, tx: &mut Tx, order_by: &str) -> Result<Vec<Row>, StoreError> {
        self.fetch_map(tx, order_by, Ok).await
    }

    /// The rows in `order_by`'s order, each turned into a `T` as it is read (see
    /// [`Tx::fetch_map`]).
    pub async fn fetch_map<T>(
        mut self,
        tx: &mut Tx,
        order_by: &str,
        each: impl FnMut(Row) -> Result<T, StoreError>,
    ) -> Result<Vec<T>, StoreError> {
        self.sql.push_str(&format!(" ORDER BY {order_by}"));
        tx.fetch_map(self.sql, &self.params, each).await
    }
}

/// A row of either backend, read by column name.
pub(crate) enum Row {
    Sqlite(SqliteRow),
    Postgres(PgRow),
    /// Read by a SQLite write transaction.
    Local(LocalRow),
}

macro_rules! get {
    ($row:expr, $col:expr, $ty:ty) => {
        match $row {
            Row::Sqlite(r) => r.try_get::<$ty, _>($col),
            Row::Postgres(r) => r.try_get::<$ty, _>($col),
            Row::Local(r) => <$ty as FromLocal>::from_local(r, $col),
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

/// A column's value of a [`LocalRow`] as the type asked for; the types match as sqlx's
/// SQLite decoding has them (a bool is an integer).
trait FromLocal: Sized {
    fn from_local(row: &LocalRow, col: &str) -> Result<Self, sqlx::Error>;
}

fn local_value<'r>(row: &'r LocalRow, col: &str) -> Result<&'r Value, sqlx::Error> {
    row.get(col)
        .ok_or_else(|| sqlx::Error::ColumnNotFound(col.to_owned()))
}

fn mismatch<T>(col: &str, expected: &str, found: &Value) -> Result<T, sqlx::Error> {
    Err(sqlx::Error::ColumnDecode {
        index: format!("{col:?}"),
        source: format!("expected {expected}, found {}", found.data_type()).into(),
    })
}

impl<T: FromLocal> FromLocal for Option<T> {
    fn from_local(row: &LocalRow, col: &str) -> Result<Self, sqlx::Error> {
        match local_value(row, col)? {
            Value::Null => Ok(None),
            _ => T::from_local(row, col).map(Some),
        }
    }
}

impl FromLocal for String {
    fn from_local(row: &LocalRow, col: &str) -> Result<Self, sqlx::Error> {
        match local_value(row, col)? {
            Value::Text(text) => Ok(text.clone()),
            other => mismatch(col, "text", other),
        }
    }
}

impl FromLocal for i64 {
    fn from_local(row: &LocalRow, col: &str) -> Result<Self, sqlx::Error> {
        match local_value(row, col)? {
            Value::Integer(int) => Ok(*int),
            other => mismatch(col, "an integer", other),
        }
    }
}

impl FromLocal for bool {
    fn from_local(row: &LocalRow, col: &str) -> Result<Self, sqlx::Error> {
        i64::from_local(row, col).map(|int| int != 0)
    }
}

/// A SQLite store: a pool of connections that read, and the one connection that writes.
///
/// SQLite has one writer at a time, so the process keeps one connection for its writes,
/// behind a fair async mutex that is the writers' turn. A writer takes the lock the moment
/// the last one commits (writers that met on SQLite's lock would wait in its busy handler,
/// which sleeps 1, 2, 5 … 100 ms between tries). The connection is driven on the writer's own
/// thread, statement by statement ([`SqliteWriter`]), and its page cache stays warm, since no
/// other connection of the process writes. Another process (a CLI beside the daemon) is
/// waited for at BEGIN.
#[derive(Debug, Clone)]
pub(crate) struct SqlitePool {
    pool: sqlx::SqlitePool,
    writer: Arc<tokio::sync::Mutex<SqliteWriter>>,
    bulk_reader: Arc<BulkReader>,
    /// Writers waiting for the turn (see [`Tx::commit`]).
    waiting: Arc<AtomicUsize>,
}

/// One writer waiting for the turn, counted until it has it or gives up (a cancelled task).
struct Waiting(Arc<AtomicUsize>);

impl Waiting {
    fn count(waiting: &Arc<AtomicUsize>) -> Self {
        waiting.fetch_add(1, Ordering::Relaxed);
        Waiting(waiting.clone())
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A SQLite write under way: the writer's turn, held until it commits or is rolled back.
pub(crate) struct WriteTurn {
    writer: tokio::sync::OwnedMutexGuard<SqliteWriter>,
    waiting: Arc<AtomicUsize>,
}

impl Drop for WriteTurn {
    /// A write dropped before its commit (an error, a cancelled task) is rolled back before
    /// the turn passes on.
    fn drop(&mut self) {
        self.writer.roll_back();
    }
}

/// The row of `table` whose `id` is `$1`.
fn by_id(table: &str) -> String {
    format!("SELECT * FROM {table} WHERE id = $1")
}

/// A transaction on either backend; a SQLite write holds the writer's turn until it ends.
pub(crate) enum Tx {
    SqliteRead(Transaction<'static, Sqlite>),
    /// A large read on a connection of its own, driven by the thread that runs the read (a
    /// blocking-pool thread: [`Pool::read_bulk`]).
    SqliteBulkRead(BulkRead),
    SqliteWrite(WriteTurn),
    /// With the statements to run as it commits, if any were put off (see
    /// [`Tx::execute_at_commit`]).
    Postgres(Transaction<'static, Postgres>, Vec<String>),
}

/// The connection a transaction's statements run on.
enum Conn<'a> {
    Sqlite(&'a mut SqliteConnection),
    /// The writer's or a bulk read's: each statement runs on the calling thread.
    Local(&'a mut rusqlite::Connection),
    Postgres(&'a mut sqlx::PgConnection),
}

/// `value` as a PostgreSQL string constant, for a statement sent with its values written in
/// ([`Tx::execute_at_commit`]). The escape form (`E'…'`) reads a backslash the same way
/// whatever the server's `standard_conforming_strings`; each backslash and quote is doubled,
/// so nothing in `value` is read as anything but text. PostgreSQL text holds no NUL character:
/// one is refused, as the server refuses it in a bound value.
pub(crate) fn text_literal(value: &str) -> Result<String, StoreError> {
    if value.contains('\0') {
        return Err(StoreError::Invalid(
            "text for the store holds a NUL character".into(),
        ));
    }
    let mut literal = String::with_capacity(value.len() + 3);
    literal.push_str("E'");
    for c in value.chars() {
        if c == '\\' || c == '\'' {
            literal.push(c);
        }
        literal.push(c);
    }
    literal.push('\'');
    Ok(literal)
}

pub(super) fn db_err(context: &str) -> impl FnOnce(sqlx::Error) -> StoreError + '_ {
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

fn local_err(context: &str) -> impl FnOnce(rusqlite::Error) -> StoreError + '_ {
    move |source| StoreError::Local {
        context: context.to_owned(),
        source,
    }
}

impl Tx {
    fn conn(&mut self) -> Conn<'_> {
        match self {
            Tx::SqliteRead(tx) => Conn::Sqlite(tx),
            Tx::SqliteBulkRead(read) => Conn::Local(read.connection()),
            Tx::SqliteWrite(turn) => Conn::Local(turn.writer.connection()),
            Tx::Postgres(tx, _) => Conn::Postgres(tx),
        }
    }

    /// Run a statement; the number of rows it changed.
    pub async fn execute(
        &mut self,
        sql: impl Into<Sql>,
        params: &[Param],
    ) -> Result<u64, StoreError> {
        const DOING: &str = "executing a statement";
        let sql = sql.into();
        match self.conn() {
            Conn::Local(conn) => {
                return sqlite_writer::execute(conn, &sql, params).map_err(local_err(DOING));
            }
            Conn::Sqlite(conn) => bind_all!(sqlx::query::<Sqlite>(AssertSqlSafe(sql)), params)
                .execute(conn)
                .await
                .map(|r| r.rows_affected()),
            Conn::Postgres(conn) => bind_all!(sqlx::query::<Postgres>(AssertSqlSafe(sql)), params)
                .execute(conn)
                .await
                .map(|r| r.rows_affected()),
        }
        .map_err(db_err(DOING))
    }

    pub async fn fetch_all(
        &mut self,
        sql: impl Into<Sql>,
        params: &[Param],
    ) -> Result<Vec<Row>, StoreError> {
        self.fetch_map(sql, params, Ok).await
    }

    /// The rows of a query, each turned into a `T` as it arrives: a large read holds its
    /// results, never all of its rows at once as well.
    pub async fn fetch_map<T>(
        &mut self,
        sql: impl Into<Sql>,
        params: &[Param],
        each: impl FnMut(Row) -> Result<T, StoreError>,
    ) -> Result<Vec<T>, StoreError> {
        self.fetch_map_expecting(sql, params, 0, each).await
    }

    /// [`Tx::fetch_map`] with room for `expected` results made first: a large read's results
    /// are not copied from one buffer to the next as they grow (each copy touches new pages).
    pub async fn fetch_map_expecting<T>(
        &mut self,
        sql: impl Into<Sql>,
        params: &[Param],
        expected: usize,
        mut each: impl FnMut(Row) -> Result<T, StoreError>,
    ) -> Result<Vec<T>, StoreError> {
        use futures::TryStreamExt;
        const DOING: &str = "running a query";
        let sql = AssertSqlSafe(sql.into());
        let mut out = Vec::with_capacity(expected);
        match self.conn() {
            Conn::Local(conn) => {
                return sqlite_writer::query_map(
                    conn,
                    &sql.0,
                    params,
                    out,
                    |row| each(Row::Local(row)),
                    |e| local_err(DOING)(e),
                );
            }
            Conn::Sqlite(conn) => {
                let mut rows = bind_all!(sqlx::query::<Sqlite>(sql), params).fetch(conn);
                while let Some(row) = rows.try_next().await.map_err(db_err(DOING))? {
                    out.push(each(Row::Sqlite(row))?);
                }
            }
            Conn::Postgres(conn) => {
                let mut rows = bind_all!(sqlx::query::<Postgres>(sql), params).fetch(conn);
                while let Some(row) = rows.try_next().await.map_err(db_err(DOING))? {
                    out.push(each(Row::Postgres(row))?);
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
        const DOING: &str = "running a migration";
        match self.conn() {
            Conn::Local(conn) => return conn.execute_batch(&sql).map_err(local_err(DOING)),
            Conn::Sqlite(conn) => sqlx::raw_sql(AssertSqlSafe(sql))
                .execute(conn)
                .await
                .map(|_| ()),
            Conn::Postgres(conn) => sqlx::raw_sql(AssertSqlSafe(sql))
                .execute(conn)
                .await
                .map(|_| ()),
        }
        .map_err(db_err(DOING))
    }

    pub async fn commit(self) -> Result<(), StoreError> {
        const DOING: &str = "committing";
        match self {
            Tx::SqliteRead(tx) => tx.commit().await,
            // A read has nothing to commit: its end (the drop) ends it.
            Tx::SqliteBulkRead(_) => return Ok(()),
            // Failing, the transaction is still open: the turn's drop rolls it back.
            Tx::SqliteWrite(mut turn) => {
                let committed = turn.writer.commit().map_err(local_err(DOING));
                let others = turn.waiting.load(Ordering::Relaxed) > 0;
                drop(turn);
                // The next writer, woken by the turn passing on, waits in this worker's
                // next-task slot, which no other worker takes from, until this task yields.
                // Going on instead (to the stage's next MAAS request) left the turn idle while
                // others waited: 13-15 ms mean wait per write in a 1,000-node wave, 4.5-4.7 ms
                // with the yield (docs/performance.md).
                if others {
                    tokio::task::yield_now().await;
                }
                return committed;
            }
            Tx::Postgres(tx, at_commit) if at_commit.is_empty() => tx.commit().await,
            // The put-off statements go in one message with the COMMIT, so the locks they take
            // are let go as soon as the server has run them, not a round trip later (when this
            // process, woken by the answer, sends the COMMIT). The BEGIN after the COMMIT
            // opens an empty transaction for `Transaction`'s own COMMIT, which holds nothing.
            // Should a statement fail, the rest of the message does not run and the
            // transaction's drop rolls it back.
            Tx::Postgres(mut tx, at_commit) => {
                let sql = at_commit.join("; ");
                match sqlx::raw_sql(AssertSqlSafe(format!("{sql}; COMMIT; BEGIN")))
                    .execute(&mut *tx)
                    .await
                {
                    Ok(_) => tx.commit().await,
                    Err(e) => Err(e),
                }
            }
        }
        .map_err(db_err(DOING))
    }

    /// Run `sql` as the transaction commits, not now (PostgreSQL; elsewhere it runs now): for
    /// a statement that takes a lock every other writer waits for, so that it is held for as
    /// short a time as the transaction allows. The statements put off are sent with the COMMIT
    /// as one simple query, in the order they were put off, so they have no parameters: their
    /// values are written in ([`text_literal`]).
    pub async fn execute_at_commit(&mut self, sql: String) -> Result<(), StoreError> {
        self.put_off(sql, false).await
    }

    /// [`Tx::execute_at_commit`] for a statement that runs once however many times it is put
    /// off.
    pub async fn execute_once_at_commit(&mut self, sql: String) -> Result<(), StoreError> {
        self.put_off(sql, true).await
    }

    async fn put_off(&mut self, sql: String, once: bool) -> Result<(), StoreError> {
        match self {
            Tx::Postgres(_, at_commit) => {
                if !(once && at_commit.contains(&sql)) {
                    at_commit.push(sql);
                }
                Ok(())
            }
            _ => self.execute(sql, &[]).await.map(|_| ()),
        }
    }

    pub fn backend(&self) -> Backend {
        match self {
            Tx::SqliteRead(_) | Tx::SqliteBulkRead(_) | Tx::SqliteWrite(_) => Backend::Sqlite,
            Tx::Postgres(..) => Backend::Postgres,
        }
    }
}

/// A PostgreSQL transaction, its `begin` boxed. sqlx's `begin` is a ~14 KB future; held inline,
/// it made every store call's future that large, whichever the backend, and each caller up to
/// the executor's stage passes larger still, copied whenever such a future is made or moved
/// (`memmove` was 7–9% of an onboarding wave's CPU). Boxed, it costs one allocation per
/// PostgreSQL transaction.
async fn postgres_tx(pool: &sqlx::PgPool) -> Result<Tx, sqlx::Error> {
    Box::pin(pool.begin())
        .await
        .map(|tx| Tx::Postgres(tx, Vec::new()))
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
                        writer: Arc::new(tokio::sync::Mutex::new(SqliteWriter::new(path))),
                        bulk_reader: Arc::new(BulkReader::new(path)),
                        waiting: Arc::default(),
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

    /// `idle_limit`: how long a transaction may sit idle before the server ends its session
    /// (`idle_in_transaction_session_timeout`, set on each new session; `None` leaves the
    /// server's or the URL's own setting).
    pub async fn connect_postgres(
        options: PgConnectOptions,
        idle_limit: Option<Duration>,
    ) -> Result<Pool, sqlx::Error> {
        let mut pool = PgPoolOptions::new()
            .max_connections(8)
            .acquire_timeout(Duration::from_secs(5));
        if let Some(limit) = idle_limit {
            let ms = limit.as_millis().max(1).to_string();
            pool = pool.after_connect(move |conn, _| {
                let ms = ms.clone();
                Box::pin(async move {
                    sqlx::query(
                        "SELECT set_config('idle_in_transaction_session_timeout', $1, false)",
                    )
                    .bind(ms)
                    .execute(conn)
                    .await
                    .map(|_| ())
                })
            });
        }
        Ok(Pool::Postgres(pool.connect_with(options).await?))
    }

    /// A transaction that will write. On SQLite it begins IMMEDIATE (the write lock taken
    /// now), so two writers wait for each other at BEGIN instead of failing on upgrade.
    pub async fn write(&self) -> Result<Tx, StoreError> {
        match self {
            Pool::Sqlite(p) => {
                let waiting = Waiting::count(&p.waiting);
                let mut writer = p.writer.clone().lock_owned().await;
                drop(waiting);
                if writer.closed {
                    // As the pool answers once closed: a store that is gone, for the caller.
                    return Err(db_err("starting a transaction")(sqlx::Error::PoolClosed));
                }
                writer
                    .begin()
                    .await
                    .map_err(local_err("starting a transaction"))?;
                Ok(Tx::SqliteWrite(WriteTurn {
                    writer,
                    waiting: p.waiting.clone(),
                }))
            }
            Pool::Postgres(p) => postgres_tx(p)
                .await
                .map_err(db_err("starting a transaction")),
        }
    }

    /// A transaction that only reads (a consistent snapshot).
    pub async fn read(&self) -> Result<Tx, StoreError> {
        match self {
            Pool::Sqlite(p) => p.pool.begin().await.map(Tx::SqliteRead),
            Pool::Postgres(p) => postgres_tx(p).await,
        }
        .map_err(db_err("starting a transaction"))
    }

    /// A large read (a site's or the fleet's inventory and jobs): `read` is given a read
    /// transaction and runs to its end. On SQLite its rows are read straight into the caller's
    /// values on a connection driven by the reading thread, and that thread is one of tokio's
    /// blocking pool: the statements may take their time without holding up the tasks of the
    /// thread that asked (an observation reads MAAS in the same task as the store).
    pub async fn read_bulk<T, F>(
        &self,
        read: impl FnOnce(Tx) -> F + Send + 'static,
    ) -> Result<T, StoreError>
    where
        F: std::future::Future<Output = Result<T, StoreError>> + Send,
        T: Send + 'static,
    {
        const DOING: &str = "starting a transaction";
        let reader = match self {
            Pool::Sqlite(p) => p.bulk_reader.clone(),
            Pool::Postgres(_) => return read(self.read().await?).await,
        };
        // As the pool answers once closed: a store that is gone, for the caller.
        let closed = || db_err(DOING)(sqlx::Error::PoolClosed);
        let turn = reader.turn.clone().acquire_owned().await;
        let turn = turn.map_err(|_| closed())?;
        let blocking = tokio::task::spawn_blocking(move || {
            let _turn = turn;
            let tx = Tx::SqliteBulkRead(reader.begin().map_err(local_err(DOING))?);
            // Every statement of a bulk read runs to its end when called: nothing in `read`
            // is left waiting, so polling it on this thread finishes it.
            futures::executor::block_on(read(tx))
        });
        match blocking.await {
            Ok(read) => read,
            Err(err) if err.is_panic() => std::panic::resume_unwind(err.into_panic()),
            // The runtime is shutting down: as for a store closed under the read.
            Err(_) => Err(closed()),
        }
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

    /// A connection of its own listening on `channel` (PostgreSQL only: `None` on SQLite).
    pub async fn listen(
        &self,
        channel: &str,
    ) -> Result<Option<sqlx::postgres::PgListener>, StoreError> {
        const DOING: &str = "listening for notices";
        let Pool::Postgres(pool) = self else {
            return Ok(None);
        };
        let mut listener = sqlx::postgres::PgListener::connect_with(pool)
            .await
            .map_err(db_err(DOING))?;
        listener.listen(channel).await.map_err(db_err(DOING))?;
        Ok(Some(listener))
    }

    pub async fn close(&self) {
        match self {
            Pool::Sqlite(p) => {
                // After the writes under way (they hold the turn).
                p.writer.lock().await.close();
                p.bulk_reader.close();
                p.pool.close().await
            }
            Pool::Postgres(p) => p.close().await,
        }
    }
}

#[cfg(test)]
mod literal_tests {
    use super::*;

    #[test]
    fn a_text_constant_doubles_each_quote_and_backslash_and_refuses_nul() {
        assert_eq!(text_literal("plain").unwrap(), "E'plain'");
        assert_eq!(
            text_literal(r"it's a \ 'x'").unwrap(),
            r"E'it''s a \\ ''x'''"
        );
        assert_eq!(text_literal("").unwrap(), "E''");
        let error = text_literal("a\0b").unwrap_err();
        assert_eq!(
            error.to_string(),
            "text for the store holds a NUL character"
        );
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

    /// One row written by a write of its own; the rows it changed.
    async fn insert(pool: &Pool, id: i64, v: &str) -> u64 {
        let mut tx = pool.write().await.unwrap();
        let changed = tx
            .execute("INSERT INTO t (id, v) VALUES ($1, $2)", &params![id, v])
            .await
            .unwrap();
        tx.commit().await.unwrap();
        changed
    }

    async fn values(pool: &Pool) -> Vec<String> {
        let rows = pool
            .fetch_all_once("SELECT v FROM t ORDER BY id", &[])
            .await
            .unwrap();
        rows.iter().map(|r| r.text("v").unwrap()).collect()
    }

    #[tokio::test]
    async fn a_write_sees_its_own_statements_and_others_see_them_at_commit() {
        let (_dir, pool) = sqlite().await;
        let mut tx = pool.write().await.unwrap();
        tx.execute("INSERT INTO t (id, v) VALUES ($1, $2)", &params![1i64, "a"])
            .await
            .unwrap();
        // Numbered placeholders bind by number, whatever order they appear in.
        tx.execute("UPDATE t SET v = $2 WHERE id = $1", &params![1i64, "b"])
            .await
            .unwrap();
        let seen = tx.fetch_all("SELECT v FROM t", &[]).await.unwrap();
        assert_eq!(seen.len(), 1);
        assert_eq!(seen[0].text("v").unwrap(), "b");
        assert!(values(&pool).await.is_empty());
        tx.commit().await.unwrap();
        assert_eq!(values(&pool).await, ["b"]);
    }

    #[tokio::test]
    async fn a_write_that_fails_is_rolled_back_and_the_next_one_starts_clean() {
        let (_dir, pool) = sqlite().await;
        let mut tx = pool.write().await.unwrap();
        tx.execute("INSERT INTO t (id, v) VALUES ($1, $2)", &params![1i64, "a"])
            .await
            .unwrap();
        let err = tx
            .execute(
                "INSERT INTO t (id, v) VALUES ($1, $2)",
                &params![1i64, "again"],
            )
            .await
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "state store error while executing a statement: UNIQUE constraint failed: t.id"
        );
        assert!(
            matches!(&err, StoreError::Local { source, .. } if crate::store::sqlite_writer::is_unique_violation(source))
        );
        drop(tx);
        insert(&pool, 3, "z").await;
        assert_eq!(values(&pool).await, ["z"]);
    }

    /// A bulk read is one snapshot: a write committed while it is open is not in it, and the
    /// next read sees it. Its connection reads only, and goes back to be used again.
    #[tokio::test]
    async fn a_bulk_read_keeps_its_snapshot_and_never_writes() {
        let (dir, pool) = sqlite().await;
        insert(&pool, 1, "a").await;
        let path = dir.path().join("t.db");
        let read_v =
            |rows: Vec<Row>| -> Vec<String> { rows.iter().map(|r| r.text("v").unwrap()).collect() };
        let (before, after, refused) = pool
            .read_bulk(move |mut read| async move {
                assert!(matches!(read, Tx::SqliteBulkRead(_)));
                let before = read.fetch_all("SELECT v FROM t ORDER BY id", &[]).await?;
                rusqlite::Connection::open(&path)
                    .unwrap()
                    .execute("INSERT INTO t (id, v) VALUES (2, 'b')", [])
                    .unwrap();
                let after = read.fetch_all("SELECT v FROM t ORDER BY id", &[]).await?;
                let refused = read
                    .execute("INSERT INTO t (id, v) VALUES (3, 'c')", &[])
                    .await
                    .unwrap_err();
                Ok((read_v(before), read_v(after), refused.to_string()))
            })
            .await
            .unwrap();
        assert_eq!(before, ["a"]);
        assert_eq!(after, ["a"]);
        assert_eq!(
            refused,
            "state store error while executing a statement: attempt to write a readonly database"
        );
        let again = pool
            .read_bulk(|mut read| async move {
                read.fetch_all("SELECT v FROM t ORDER BY id", &[]).await
            })
            .await
            .unwrap();
        assert_eq!(read_v(again), ["a", "b"]);
        assert_eq!(values(&pool).await, ["a", "b"]);
    }

    /// A closed store refuses bulk reads as it refuses the pool's.
    #[tokio::test]
    async fn a_closed_store_refuses_a_bulk_read() {
        let (_dir, pool) = sqlite().await;
        pool.close().await;
        let err = pool
            .read_bulk(|_| async { Ok(()) })
            .await
            .expect_err("refused");
        assert_eq!(
            err.to_string(),
            pool.read().await.err().expect("refused").to_string()
        );
    }

    #[tokio::test]
    async fn rows_read_in_a_write_decode_as_the_pool_s_do() {
        let (_dir, pool) = sqlite().await;
        let mut tx = pool.write().await.unwrap();
        tx.execute("INSERT INTO t (id, v) VALUES (7, 'x')", &[])
            .await
            .unwrap();
        let sql = "SELECT id, v, NULL AS empty, 1 AS yes, 0 AS no FROM t";
        let row = tx.fetch_one(sql, &[]).await.unwrap();
        assert!(matches!(row, Row::Local(_)));
        assert_eq!(row.int("id").unwrap(), 7);
        assert_eq!(row.text("v").unwrap(), "x");
        assert_eq!(row.opt_text("empty").unwrap(), None);
        assert_eq!(row.opt_int("empty").unwrap(), None);
        assert_eq!(row.opt_int("id").unwrap(), Some(7));
        assert!(row.bool("yes").unwrap());
        assert!(!row.bool("no").unwrap());
        assert_eq!(
            row.text("id").unwrap_err().to_string(),
            "state store error while reading column `id`: \
             error occurred while decoding column \"id\": expected text, found Integer"
        );
        assert_eq!(
            row.text("missing").unwrap_err().to_string(),
            "state store error while reading column `missing`: no column found for name: missing"
        );
        tx.commit().await.unwrap();
        // The same row through the read pool.
        let read = pool.fetch_all_once(sql, &[]).await.unwrap();
        assert_eq!(read[0].int("id").unwrap(), 7);
        assert!(read[0].bool("yes").unwrap());
        assert_eq!(read[0].opt_text("empty").unwrap(), None);
    }

    #[tokio::test]
    async fn another_process_s_write_is_waited_for_without_blocking_the_thread() {
        let (dir, pool) = sqlite().await;
        // Another process's connection holds the write lock.
        let other = rusqlite::Connection::open(dir.path().join("t.db")).unwrap();
        other.execute_batch("BEGIN IMMEDIATE").unwrap();
        let waiting = tokio::spawn({
            let pool = pool.clone();
            async move {
                let mut tx = pool.write().await.unwrap();
                tx.execute("INSERT INTO t (id, v) VALUES (1, 'after')", &[])
                    .await
                    .unwrap();
                tx.commit().await.unwrap();
            }
        });
        // This test's runtime has one thread: the sleep ends only if the waiting write yields it.
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(!waiting.is_finished());
        other.execute_batch("COMMIT").unwrap();
        waiting.await.unwrap();
        assert_eq!(values(&pool).await, ["after"]);
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
        let changed = insert(&pool, 2, "kept").await;
        assert_eq!(changed, 1);
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
        // A statement that changes no row counts none, not the count of the one before it.
        let mut tx = pool.write().await.unwrap();
        tx.execute("UPDATE t SET v = 'x' WHERE id = 1", &[])
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

    /// Every store call awaits `write` or `read`, so their futures' sizes are carried by every
    /// caller up to the executor's stage passes (`postgres_tx`). With sqlx's PostgreSQL `begin`
    /// held inline, both were ~4 KB in this test's build (~15 KB in release) on either backend;
    /// boxed, 280 and 1,216 bytes.
    #[tokio::test]
    async fn beginning_a_transaction_is_a_small_future() {
        let (_dir, pool) = sqlite().await;
        let write = std::mem::size_of_val(&pool.write());
        let read = std::mem::size_of_val(&pool.read());
        assert!(write <= 2048, "Pool::write's future is {write} bytes");
        assert!(read <= 2048, "Pool::read's future is {read} bytes");
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

    /// The turn goes to a waiting writer before the committing task goes on (`Tx::commit`):
    /// on one thread, the waiting write lands before the committer's next step.
    #[tokio::test(flavor = "current_thread")]
    async fn a_waiting_writer_writes_before_the_committer_goes_on() {
        let (_dir, pool) = sqlite().await;
        let order = Arc::new(std::sync::Mutex::new(Vec::new()));
        let mut tx = pool.write().await.unwrap();
        let waiter = tokio::spawn({
            let (pool, order) = (pool.clone(), order.clone());
            async move {
                insert(&pool, 2, "waiter").await;
                order.lock().unwrap().push("waiter wrote");
            }
        });
        // The waiter runs until it waits for the turn.
        tokio::task::yield_now().await;
        tx.execute(
            "INSERT INTO t (id, v) VALUES ($1, $2)",
            &params![1i64, "first"],
        )
        .await
        .unwrap();
        tx.commit().await.unwrap();
        order.lock().unwrap().push("committer went on");
        waiter.await.unwrap();
        assert_eq!(
            *order.lock().unwrap(),
            ["waiter wrote", "committer went on"]
        );
        assert_eq!(values(&pool).await, ["first", "waiter"]);
    }

    /// A writer given up while it waits for the turn (its task cancelled) is no longer
    /// counted: commits would otherwise yield for nobody.
    #[tokio::test(flavor = "current_thread")]
    async fn a_cancelled_waiter_is_no_longer_counted() {
        let (_dir, pool) = sqlite().await;
        let tx = pool.write().await.unwrap();
        let waiter = tokio::spawn({
            let pool = pool.clone();
            async move { insert(&pool, 2, "never").await }
        });
        tokio::task::yield_now().await;
        assert_eq!(pool_waiting(&pool), 1);
        waiter.abort();
        assert!(waiter.await.unwrap_err().is_cancelled());
        assert_eq!(pool_waiting(&pool), 0);
        drop(tx);
        assert!(values(&pool).await.is_empty());
    }

    fn pool_waiting(pool: &Pool) -> usize {
        match pool {
            Pool::Sqlite(p) => p.waiting.load(Ordering::Relaxed),
            Pool::Postgres(_) => 0,
        }
    }
}
