//! The storage core's statements over sqlx's typed drivers: one pool, connection, transaction
//! and row type each over SQLite or PostgreSQL, and a query builder that binds once and runs on
//! whichever engine the connection is.
//!
//! Every statement of `pattern_db` goes through here (decision 0023, step 3), except those
//! `pattern_db_sqlite` and `pattern_db_postgres` check at compile time (step 3 (c)): sqlx's
//! SQLite and PostgreSQL drivers directly, without sqlx's `Any` driver, which converted every
//! argument and every column of every row into its own value type and back (15-20 µs a statement
//! on this machine, measured in stop 26). A [`Query`] keeps its arguments as plain values until it runs,
//! then moves them into the engine's own argument buffer; a [`Row`] is the engine's row, read
//! through [`Col`], which decodes each column with that engine's decoder.
//!
//! On PostgreSQL a statement is prepared without parameter types, so PostgreSQL infers each one
//! from where it stands, and the arguments are converted to those types (decision 0026): the
//! domains bind ids as text, instants as Unix milliseconds and JSON as text, once for both
//! engines, while PostgreSQL's columns are `UUID`, `TIMESTAMPTZ` and `JSON`/`JSONB`; rows read
//! back as the same text and milliseconds. SQL that computes with instants writes them through
//! [`millis_of`] and [`time_of_millis`].
//!
//! Statements use `$1`-style parameters, which both engines read (SQLite takes `$NNN` as a
//! numbered parameter); `ops::value_rows` writes `?` for SQLite's long multi-row inserts.
//!
//! This module must never hide an engine's error: sqlx's own `Error` comes back unchanged, so
//! lock conflicts and constraint violations keep their codes. It never commits on its own: a
//! [`Tx`] commits only when asked, and one dropped unfinished rolls back (sqlx's rule); a
//! [`Pooled::sqlite_transaction`] commits the statements it was given as one transaction, or
//! rolls them back (closing the connection when even that fails, or when it is dropped
//! unfinished), never leaving a pooled connection inside a transaction.

use std::future::Future;

use sqlx::error::BoxDynError;
use sqlx::pool::PoolConnection;
use sqlx::postgres::types::Oid;
use sqlx::postgres::{PgArguments, PgRow, PgTypeInfo};
use sqlx::sqlite::{SqliteArguments, SqliteRow};
use sqlx::{
    Arguments, Connection as _, Executor as _, PgConnection, PgPool, Postgres, Row as _,
    SqlSafeStr, SqlStr, Sqlite, SqliteConnection, SqlitePool, Statement as _, Transaction,
    TypeInfo, ValueRef,
};

use crate::config::Backend;

type SqlxResult<T> = std::result::Result<T, sqlx::Error>;

/// A pool of connections to one engine.
#[derive(Clone, Debug)]
pub enum Pool {
    /// SQLite.
    Sqlite(SqlitePool),
    /// PostgreSQL.
    Postgres(PgPool),
}

impl Pool {
    /// The engine.
    pub fn backend(&self) -> Backend {
        match self {
            Self::Sqlite(_) => Backend::Sqlite,
            Self::Postgres(_) => Backend::Postgres,
        }
    }

    /// A connection of the pool, returned to it when dropped.
    pub async fn acquire(&self) -> SqlxResult<Pooled> {
        Ok(match self {
            Self::Sqlite(p) => Pooled::Sqlite(p.acquire().await?),
            Self::Postgres(p) => Pooled::Postgres(p.acquire().await?),
        })
    }

    /// A transaction: `BEGIN IMMEDIATE` on SQLite (the write lock up front, so no lock upgrade
    /// fails half-way), `BEGIN` on PostgreSQL.
    pub async fn begin_write(&self) -> SqlxResult<Tx<'static>> {
        Ok(match self {
            Self::Sqlite(p) => Tx::Sqlite(p.begin_with("BEGIN IMMEDIATE").await?),
            Self::Postgres(p) => Tx::Postgres(p.begin().await?),
        })
    }

    /// Whether [`Pool::close`] was called.
    pub fn is_closed(&self) -> bool {
        match self {
            Self::Sqlite(p) => p.is_closed(),
            Self::Postgres(p) => p.is_closed(),
        }
    }

    /// Completes when the pool is closed ([`Pool::close`] was called): a holder of a
    /// connection of it must then give it back, or the close waits for it.
    pub fn close_event(&self) -> sqlx::pool::CloseEvent {
        match self {
            Self::Sqlite(p) => p.close_event(),
            Self::Postgres(p) => p.close_event(),
        }
    }

    /// Closes every connection (waits for the ones in use to come back).
    pub async fn close(&self) {
        match self {
            Self::Sqlite(p) => p.close().await,
            Self::Postgres(p) => p.close().await,
        }
    }
}

/// A connection taken from a [`Pool`].
#[derive(Debug)]
pub enum Pooled {
    /// SQLite.
    Sqlite(PoolConnection<Sqlite>),
    /// PostgreSQL.
    Postgres(PoolConnection<Postgres>),
}

impl Pooled {
    /// The connection, to run statements on.
    pub fn conn(&mut self) -> Conn<'_> {
        match self {
            Self::Sqlite(c) => Conn::Sqlite(c),
            Self::Postgres(c) => Conn::Postgres(c),
        }
    }

    /// A transaction on this connection, as [`Pool::begin_write`] opens one on any: the
    /// connection stays this caller's when it ends (no trip back to the pool).
    pub async fn begin_write(&mut self) -> SqlxResult<Tx<'_>> {
        Ok(match self {
            Self::Sqlite(c) => Tx::Sqlite((**c).begin_with("BEGIN IMMEDIATE").await?),
            Self::Postgres(c) => Tx::Postgres((**c).begin().await?),
        })
    }

    /// SQLite: `query` (one or more statements joined by [`Script::into_query`], anonymous
    /// parameters) as a transaction of its own in **one round trip** to the connection's worker
    /// thread: `BEGIN IMMEDIATE`, its statements and `COMMIT` run as one text, and every row its
    /// statements return comes back. (Each round trip to sqlx's SQLite worker costs about 0.1 ms
    /// of thread hand-over on this machine, more than a small statement itself: decision 0025,
    /// "Stop 41".) `Ok` means committed. On an error nothing is committed: the statements that
    /// ran are rolled back (one more round trip); when the rollback fails too, or when this is
    /// dropped unfinished, the connection is closed instead of going back to the pool (SQLite
    /// rolls back what a closing connection left open). PostgreSQL: refused (a
    /// [`sqlx::Error::Protocol`]), nothing run.
    pub async fn sqlite_transaction(&mut self, query: Query) -> SqlxResult<Vec<Row>> {
        let Self::Sqlite(conn) = self else {
            return Err(sqlx::Error::Protocol(
                "a one-round-trip transaction is SQLite's".into(),
            ));
        };
        let text = format!("BEGIN IMMEDIATE;\n{};\nCOMMIT", query.sql.as_str());
        let whole = Query {
            sql: sqlx::AssertSqlSafe(text).into_sql_str(),
            args: query.args,
        };
        let mut open = CloseUnlessSettled {
            conn,
            settled: false,
        };
        match whole.fetch_all(&mut **open.conn).await {
            Ok(rows) => {
                open.settled = true;
                Ok(rows)
            }
            Err(e) => {
                // `BEGIN IMMEDIATE` itself may have failed (busy): then no transaction is open
                // and SQLite says so, which is as good as a rollback.
                match sqlx::raw_sql("ROLLBACK").execute(&mut **open.conn).await {
                    Ok(_) => open.settled = true,
                    Err(rb) if rb.to_string().contains("no transaction is active") => {
                        open.settled = true;
                    }
                    Err(rb) => tracing::warn!(
                        error = %rb,
                        "rollback of a failed one-round-trip transaction failed; closing its connection"
                    ),
                }
                Err(e)
            }
        }
    }
}

/// A pooled SQLite connection inside a transaction this module opened: closed when dropped
/// before the transaction is settled (committed or rolled back), so the pool never hands out a
/// connection with a transaction open.
struct CloseUnlessSettled<'a> {
    conn: &'a mut PoolConnection<Sqlite>,
    settled: bool,
}

impl Drop for CloseUnlessSettled<'_> {
    fn drop(&mut self) {
        if !self.settled {
            self.conn.close_on_drop();
        }
    }
}

/// An open transaction, on a pool's connection (`'static`) or a borrowed one; rolled back when
/// dropped without [`Tx::commit`].
#[derive(Debug)]
pub enum Tx<'c> {
    /// SQLite.
    Sqlite(Transaction<'c, Sqlite>),
    /// PostgreSQL.
    Postgres(Transaction<'c, Postgres>),
}

impl Tx<'_> {
    /// The transaction's connection, to run statements on.
    pub fn conn(&mut self) -> Conn<'_> {
        match self {
            Self::Sqlite(t) => Conn::Sqlite(t),
            Self::Postgres(t) => Conn::Postgres(t),
        }
    }

    /// Commits.
    pub async fn commit(self) -> SqlxResult<()> {
        match self {
            Self::Sqlite(t) => t.commit().await,
            Self::Postgres(t) => t.commit().await,
        }
    }

    /// Rolls back.
    pub async fn rollback(self) -> SqlxResult<()> {
        match self {
            Self::Sqlite(t) => t.rollback().await,
            Self::Postgres(t) => t.rollback().await,
        }
    }
}

/// A borrowed connection of either engine: what a write's SQL runs on.
#[derive(Debug)]
pub enum Conn<'a> {
    /// SQLite.
    Sqlite(&'a mut SqliteConnection),
    /// PostgreSQL.
    Postgres(&'a mut PgConnection),
}

impl Conn<'_> {
    /// The engine.
    pub fn backend(&self) -> Backend {
        match self {
            Self::Sqlite(_) => Backend::Sqlite,
            Self::Postgres(_) => Backend::Postgres,
        }
    }

    /// Runs `sql` (one or more statements, no parameters) and discards what it returns.
    pub async fn execute_raw(&mut self, sql: impl SqlSafeStr) -> SqlxResult<()> {
        match self {
            Self::Sqlite(c) => sqlx::raw_sql(sql).execute(&mut **c).await.map(drop),
            Self::Postgres(c) => sqlx::raw_sql(sql).execute(&mut **c).await.map(drop),
        }
    }
}

/// Where a [`Query`] runs: a pool (any connection of it) or one connection.
#[derive(Debug)]
pub enum On<'c> {
    /// A SQLite pool.
    SqlitePool(&'c SqlitePool),
    /// A PostgreSQL pool.
    PgPool(&'c PgPool),
    /// A SQLite connection (maybe inside a transaction).
    Sqlite(&'c mut SqliteConnection),
    /// A PostgreSQL connection (maybe inside a transaction).
    Postgres(&'c mut PgConnection),
}

impl<'c> From<&'c Pool> for On<'c> {
    fn from(pool: &'c Pool) -> Self {
        match pool {
            Pool::Sqlite(p) => On::SqlitePool(p),
            Pool::Postgres(p) => On::PgPool(p),
        }
    }
}

impl<'c> From<&'c mut Conn<'_>> for On<'c> {
    fn from(conn: &'c mut Conn<'_>) -> Self {
        match conn {
            Conn::Sqlite(c) => On::Sqlite(c),
            Conn::Postgres(c) => On::Postgres(c),
        }
    }
}

impl<'c> From<&'c mut SqliteConnection> for On<'c> {
    fn from(conn: &'c mut SqliteConnection) -> Self {
        On::Sqlite(conn)
    }
}

impl<'c> From<&'c mut PgConnection> for On<'c> {
    fn from(conn: &'c mut PgConnection) -> Self {
        On::Postgres(conn)
    }
}

impl<'c> From<&'c mut Pooled> for On<'c> {
    fn from(conn: &'c mut Pooled) -> Self {
        match conn {
            Pooled::Sqlite(c) => On::Sqlite(c),
            Pooled::Postgres(c) => On::Postgres(c),
        }
    }
}

impl<'c> From<&'c mut Tx<'_>> for On<'c> {
    fn from(tx: &'c mut Tx<'_>) -> Self {
        match tx {
            Tx::Sqlite(t) => On::Sqlite(t),
            Tx::Postgres(t) => On::Postgres(t),
        }
    }
}

/// One argument of a [`Query`], kept as a plain value until the query runs on an engine.
#[derive(Clone, Debug)]
pub enum Arg {
    /// A 64-bit integer (or NULL).
    Int(Option<i64>),
    /// A 32-bit integer (or NULL).
    Int32(Option<i32>),
    /// A double (or NULL).
    Float(Option<f64>),
    /// A single-precision float (or NULL).
    Float32(Option<f32>),
    /// A boolean (or NULL): BOOLEAN on PostgreSQL, 0/1 on SQLite.
    Bool(Option<bool>),
    /// Text (or NULL).
    Text(Option<String>),
    /// Bytes (or NULL).
    Bytes(Option<Vec<u8>>),
}

macro_rules! arg_from {
    ($variant:ident, $ty:ty, |$v:ident| $conv:expr) => {
        impl From<$ty> for Arg {
            fn from($v: $ty) -> Self {
                Arg::$variant(Some($conv))
            }
        }
        impl From<Option<$ty>> for Arg {
            fn from(v: Option<$ty>) -> Self {
                Arg::$variant(v.map(|$v| $conv))
            }
        }
    };
}

arg_from!(Int, i64, |v| v);
arg_from!(Int32, i32, |v| v);
arg_from!(Float, f64, |v| v);
arg_from!(Float32, f32, |v| v);
arg_from!(Bool, bool, |v| v);
arg_from!(Text, String, |v| v);
arg_from!(Text, &str, |v| v.to_owned());
arg_from!(Text, &String, |v| v.clone());
arg_from!(Bytes, Vec<u8>, |v| v);
arg_from!(Bytes, &[u8], |v| v.to_vec());

/// Adds `arg` to an engine's argument buffer (the same arms for both engines' buffers).
macro_rules! add_arg {
    ($arg:expr, $args:expr) => {
        match $arg {
            Arg::Int(v) => $args.add(v),
            Arg::Int32(v) => $args.add(v),
            Arg::Float(v) => $args.add(v),
            Arg::Float32(v) => $args.add(v),
            Arg::Bool(v) => $args.add(v),
            Arg::Text(v) => $args.add(v),
            Arg::Bytes(v) => $args.add(v),
        }
    };
}

/// Adds `arg` to a PostgreSQL argument buffer as the type PostgreSQL inferred for its
/// parameter: the domains bind ids as text, times as Unix milliseconds and JSON as text (what
/// SQLite stores), and PostgreSQL's columns are `UUID`, `TIMESTAMPTZ` and `JSON`/`JSONB`
/// (migration 0023); integers narrow to `INTEGER`/`SMALLINT` parameters only when they fit.
/// Any other pairing is bound as given, and PostgreSQL refuses what does not fit.
fn pg_arg(arg: Arg, ty: &PgTypeInfo, args: &mut PgArguments) -> Result<(), BoxDynError> {
    match (ty.name(), arg) {
        ("UUID", Arg::Text(v)) => args.add(v.map(|s| uuid::Uuid::parse_str(&s)).transpose()?),
        ("JSON", Arg::Text(v)) => args.add(v.map(|text| JsonText {
            text,
            binary: false,
        })),
        ("JSONB", Arg::Text(v)) => args.add(v.map(|text| JsonText { text, binary: true })),
        ("TIMESTAMPTZ", Arg::Int(v)) => args.add(v.map(timestamp).transpose()?),
        ("INT4", Arg::Int(v)) => args.add(v.map(i32::try_from).transpose()?),
        ("INT2", Arg::Int(v)) => args.add(v.map(i16::try_from).transpose()?),
        ("INT2", Arg::Int32(v)) => args.add(v.map(i16::try_from).transpose()?),
        ("INT8", Arg::Int32(v)) => args.add(v.map(i64::from)),
        ("FLOAT8", Arg::Float32(v)) => args.add(v.map(f64::from)),
        (_, arg) => add_arg!(arg, args),
    }
}

/// Unix milliseconds as the `TIMESTAMPTZ` a checked PostgreSQL statement (`pattern_db_postgres`)
/// binds; out of range is sqlx's encoding error, as when the dynamic [`Query`] converts it.
pub fn instant(ms: i64) -> Result<chrono::DateTime<chrono::Utc>, sqlx::Error> {
    timestamp(ms).map_err(sqlx::Error::Encode)
}

/// Unix milliseconds as an instant; out of `TIMESTAMPTZ`'s range is an error, never clamped.
fn timestamp(ms: i64) -> Result<chrono::DateTime<chrono::Utc>, BoxDynError> {
    chrono::DateTime::from_timestamp_millis(ms)
        .ok_or_else(|| format!("{ms} ms since 1970 is out of range for TIMESTAMPTZ").into())
}

/// PostgreSQL's type ids of `JSON` and `JSONB` (fixed in its catalog).
const JSON_OID: Oid = Oid(114);
const JSONB_OID: Oid = Oid(3802);

/// JSON text bound to a `JSON` or `JSONB` parameter unchanged (PostgreSQL checks it).
struct JsonText {
    text: String,
    /// `JSONB`: its binary form is a version byte, then the text.
    binary: bool,
}

impl sqlx::Type<Postgres> for JsonText {
    fn type_info() -> PgTypeInfo {
        PgTypeInfo::with_oid(JSON_OID)
    }
}

impl sqlx::Encode<'_, Postgres> for JsonText {
    fn encode_by_ref(
        &self,
        buf: &mut sqlx::postgres::PgArgumentBuffer,
    ) -> Result<sqlx::encode::IsNull, BoxDynError> {
        if self.binary {
            buf.push(1);
        }
        buf.extend_from_slice(self.text.as_bytes());
        Ok(sqlx::encode::IsNull::No)
    }

    fn produces(&self) -> Option<PgTypeInfo> {
        Some(PgTypeInfo::with_oid(if self.binary {
            JSONB_OID
        } else {
            JSON_OID
        }))
    }
}

/// SQL for the time column (or time expression) `expr` as Unix milliseconds: itself on SQLite,
/// which stores milliseconds; an exact conversion of PostgreSQL's `TIMESTAMPTZ`.
pub fn millis_of(backend: Backend, expr: &str) -> String {
    match backend {
        Backend::Sqlite => expr.to_owned(),
        Backend::Postgres => format!("(EXTRACT(EPOCH FROM {expr}) * 1000)::BIGINT"),
    }
}

/// SQL for the time `ms` Unix milliseconds (an integer SQL expression) as a time column's value:
/// itself on SQLite; a `TIMESTAMPTZ` on PostgreSQL. With [`millis_of`], arithmetic on times
/// reads the same on both engines.
pub fn time_of_millis(backend: Backend, ms: &str) -> String {
    match backend {
        Backend::Sqlite => ms.to_owned(),
        Backend::Postgres => format!("('epoch'::timestamptz + ({ms}) * interval '1 millisecond')"),
    }
}

/// A statement and its arguments, run on whichever engine it is given.
#[must_use = "a query does nothing until it is executed or fetched"]
#[derive(Debug)]
pub struct Query {
    sql: SqlStr,
    args: Vec<Arg>,
}

/// A statement to bind and run (`$1`-style parameters).
pub fn query(sql: impl SqlSafeStr) -> Query {
    Query {
        sql: sql.into_sql_str(),
        args: Vec::new(),
    }
}

/// What a statement that returns no rows did.
#[derive(Clone, Copy, Debug)]
pub struct Done {
    rows_affected: u64,
}

impl Done {
    /// Rows the statement inserted, updated or deleted.
    pub fn rows_affected(&self) -> u64 {
        self.rows_affected
    }
}

impl Query {
    /// Binds the next parameter.
    pub fn bind(mut self, value: impl Into<Arg>) -> Self {
        self.args.push(value.into());
        self
    }

    fn sqlite(self) -> SqlxResult<sqlx::query::Query<'static, Sqlite, SqliteArguments>> {
        let mut args = SqliteArguments::default();
        for arg in self.args {
            add_arg!(arg, args).map_err(sqlx::Error::Encode)?;
        }
        Ok(sqlx::query_with(self.sql, args))
    }

    /// The statement prepared on `conn`, its arguments converted to the types PostgreSQL
    /// inferred for its parameters (see [`pg_arg`]). sqlx keeps the prepared statement in the
    /// connection's cache, so the preparation costs a round trip only the first time a
    /// connection sees the text, and running it binds against the same inferred types.
    async fn pg_on(
        self,
        conn: &mut PgConnection,
    ) -> SqlxResult<sqlx::query::Query<'static, Postgres, PgArguments>> {
        let statement = (&mut *conn).prepare_with(self.sql.clone(), &[]).await?;
        let types: &[PgTypeInfo] = match statement.parameters() {
            Some(sqlx::Either::Left(types)) => types,
            _ => &[],
        };
        let mut args = PgArguments::default();
        args.reserve(self.args.len(), 0);
        for (i, arg) in self.args.into_iter().enumerate() {
            match types.get(i) {
                Some(ty) => pg_arg(arg, ty, &mut args).map_err(|e| {
                    // Which parameter, and what PostgreSQL wanted there.
                    format!("parameter ${} ({}): {e}", i + 1, ty.name()).into()
                }),
                None => add_arg!(arg, args),
            }
            .map_err(sqlx::Error::Encode)?;
        }
        Ok(sqlx::query_with(self.sql, args))
    }

    /// Runs the statement; what it did.
    pub async fn execute<'c>(self, on: impl Into<On<'c>>) -> SqlxResult<Done> {
        let rows_affected = match on.into() {
            On::SqlitePool(p) => self.sqlite()?.execute(p).await?.rows_affected(),
            On::Sqlite(c) => self.sqlite()?.execute(c).await?.rows_affected(),
            On::PgPool(p) => {
                let mut c = p.acquire().await?;
                self.pg_on(&mut c)
                    .await?
                    .execute(&mut *c)
                    .await?
                    .rows_affected()
            }
            On::Postgres(c) => self.pg_on(c).await?.execute(&mut *c).await?.rows_affected(),
        };
        Ok(Done { rows_affected })
    }

    /// Every row.
    pub async fn fetch_all<'c>(self, on: impl Into<On<'c>>) -> SqlxResult<Vec<Row>> {
        Ok(match on.into() {
            On::SqlitePool(p) => wrap(self.sqlite()?.fetch_all(p).await?, Row::Sqlite),
            On::Sqlite(c) => wrap(self.sqlite()?.fetch_all(c).await?, Row::Sqlite),
            On::PgPool(p) => {
                let mut c = p.acquire().await?;
                wrap(
                    self.pg_on(&mut c).await?.fetch_all(&mut *c).await?,
                    Row::Postgres,
                )
            }
            On::Postgres(c) => wrap(
                self.pg_on(c).await?.fetch_all(&mut *c).await?,
                Row::Postgres,
            ),
        })
    }

    /// The first row, if any.
    pub async fn fetch_optional<'c>(self, on: impl Into<On<'c>>) -> SqlxResult<Option<Row>> {
        Ok(match on.into() {
            On::SqlitePool(p) => self.sqlite()?.fetch_optional(p).await?.map(Row::Sqlite),
            On::Sqlite(c) => self.sqlite()?.fetch_optional(c).await?.map(Row::Sqlite),
            On::PgPool(p) => {
                let mut c = p.acquire().await?;
                let q = self.pg_on(&mut c).await?;
                q.fetch_optional(&mut *c).await?.map(Row::Postgres)
            }
            On::Postgres(c) => {
                let q = self.pg_on(c).await?;
                q.fetch_optional(&mut *c).await?.map(Row::Postgres)
            }
        })
    }

    /// The first row; [`sqlx::Error::RowNotFound`] when there is none.
    pub fn fetch_one<'c>(
        self,
        on: impl Into<On<'c>>,
    ) -> impl Future<Output = SqlxResult<Row>> + Send + 'c {
        let on = on.into();
        async move {
            Ok(match on {
                On::SqlitePool(p) => Row::Sqlite(self.sqlite()?.fetch_one(p).await?),
                On::Sqlite(c) => Row::Sqlite(self.sqlite()?.fetch_one(c).await?),
                On::PgPool(p) => {
                    let mut c = p.acquire().await?;
                    Row::Postgres(self.pg_on(&mut c).await?.fetch_one(&mut *c).await?)
                }
                On::Postgres(c) => Row::Postgres(self.pg_on(c).await?.fetch_one(&mut *c).await?),
            })
        }
    }
}

/// Most statements [`Script::execute`] joins into one text (one round trip).
pub const MAX_JOINED: usize = 16;

/// Statements that return nothing, run in few round trips to SQLite's worker: statements whose
/// parameters are all anonymous (`?`) are joined into texts of at most [`MAX_JOINED`]
/// statements each, bound in order (sqlx binds anonymous parameters across the statements of
/// one text). A joined text is one prepared statement in sqlx's per-connection cache: the cap
/// keeps a bulk import's texts few and alike (runs of the same full-size chunk repeat one text)
/// instead of one text of hundreds of statements per call. On PostgreSQL, and when any
/// statement numbers its parameters, they run one after the other. The first failing
/// statement's error is returned; what ran before it stays in the caller's transaction (roll
/// back to a savepoint or the transaction, as for any failed write).
#[derive(Debug, Default)]
pub struct Script {
    queries: Vec<Query>,
}

impl Script {
    /// An empty script.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a statement.
    pub fn push(&mut self, query: Query) {
        self.queries.push(query);
    }

    /// SQLite: every statement as one text, arguments in order (statements with numbered
    /// parameters cannot be joined: [`sqlx::Error::Protocol`]).
    pub fn into_query(self) -> SqlxResult<Query> {
        if self.queries.iter().any(|q| q.sql.as_str().contains('$')) {
            return Err(sqlx::Error::Protocol(
                "statements with numbered parameters cannot be joined into one text".into(),
            ));
        }
        let mut text = String::new();
        let mut args = Vec::new();
        for query in self.queries {
            if !text.is_empty() {
                text.push_str(";\n");
            }
            text.push_str(query.sql.as_str());
            args.extend(query.args);
        }
        Ok(Query {
            sql: sqlx::AssertSqlSafe(text).into_sql_str(),
            args,
        })
    }

    /// Runs every statement on `conn`, in order.
    pub async fn execute(self, conn: &mut Conn<'_>) -> SqlxResult<()> {
        let joinable = matches!(conn, Conn::Sqlite(_))
            && self.queries.iter().all(|q| !q.sql.as_str().contains('$'));
        if !joinable {
            for query in self.queries {
                query.execute(&mut *conn).await?;
            }
            return Ok(());
        }
        let mut queries = self.queries.into_iter().peekable();
        while queries.peek().is_some() {
            let run = Script {
                queries: queries.by_ref().take(MAX_JOINED).collect(),
            };
            run.into_query()?.execute(&mut *conn).await?;
        }
        Ok(())
    }
}

fn wrap<R>(rows: Vec<R>, f: impl Fn(R) -> Row) -> Vec<Row> {
    rows.into_iter().map(f).collect()
}

/// A row of either engine.
#[derive(Debug)]
pub enum Row {
    /// SQLite.
    Sqlite(SqliteRow),
    /// PostgreSQL.
    Postgres(PgRow),
}

/// A column index: by position or by name.
pub trait Index: sqlx::ColumnIndex<SqliteRow> + sqlx::ColumnIndex<PgRow> + Copy {}
impl<T: sqlx::ColumnIndex<SqliteRow> + sqlx::ColumnIndex<PgRow> + Copy> Index for T {}

impl Row {
    /// Column `index` as `T`.
    pub fn try_get<T: Col, I: Index>(&self, index: I) -> SqlxResult<T> {
        match self {
            Row::Sqlite(r) => T::sqlite(r, index),
            Row::Postgres(r) => T::pg(r, index),
        }
    }

    /// Whether column `index` is NULL.
    pub fn is_null<I: Index>(&self, index: I) -> SqlxResult<bool> {
        Ok(match self {
            Row::Sqlite(r) => r.try_get_raw(index)?.is_null(),
            Row::Postgres(r) => r.try_get_raw(index)?.is_null(),
        })
    }
}

/// A Rust type a column decodes into, on either engine. Integers widen: a PostgreSQL `INTEGER`
/// or `SMALLINT` column reads as `i64`, and a flag reads as `bool` from PostgreSQL's `BOOLEAN`
/// and SQLite's 0/1.
pub trait Col: Sized {
    /// From a SQLite row.
    fn sqlite<I: Index>(row: &SqliteRow, index: I) -> SqlxResult<Self>;
    /// From a PostgreSQL row.
    fn pg<I: Index>(row: &PgRow, index: I) -> SqlxResult<Self>;
}

macro_rules! col_direct {
    ($($ty:ty),*) => {$(
        impl Col for $ty {
            fn sqlite<I: Index>(row: &SqliteRow, index: I) -> SqlxResult<Self> {
                row.try_get(index)
            }
            fn pg<I: Index>(row: &PgRow, index: I) -> SqlxResult<Self> {
                row.try_get(index)
            }
        }
    )*};
}

col_direct!(f64, f32, Vec<u8>, bool);

/// A message's content: SQLite may store it compressed (migration 0031), which
/// `pattern_db_sqlite::messages::StoredText` decodes; PostgreSQL stores its text.
impl Col for pattern_db_sqlite::messages::StoredText {
    fn sqlite<I: Index>(row: &SqliteRow, index: I) -> SqlxResult<Self> {
        row.try_get(index)
    }
    fn pg<I: Index>(row: &PgRow, index: I) -> SqlxResult<Self> {
        String::pg(row, index).map(Self)
    }
}

impl Col for String {
    fn sqlite<I: Index>(row: &SqliteRow, index: I) -> SqlxResult<Self> {
        row.try_get(index)
    }
    /// PostgreSQL's `UUID` columns read as their hyphenated lowercase text, `JSON` and `JSONB`
    /// as their text (what SQLite stores and the domains parse).
    fn pg<I: Index>(row: &PgRow, index: I) -> SqlxResult<Self> {
        let value = row.try_get_raw(index)?;
        let bytes = match value.type_info().name() {
            "UUID" => return Ok(row.try_get::<uuid::Uuid, _>(index)?.to_string()),
            "JSON" => value.as_bytes(),
            "JSONB" => value.as_bytes().and_then(|b| match b.split_first() {
                Some((1, text)) => Ok(text),
                _ => Err("JSONB value of an unknown binary version".into()),
            }),
            _ => return row.try_get(index),
        };
        let text = bytes.map_err(sqlx::Error::Decode)?;
        String::from_utf8(text.to_vec()).map_err(|e| sqlx::Error::Decode(Box::new(e)))
    }
}

impl Col for i64 {
    fn sqlite<I: Index>(row: &SqliteRow, index: I) -> SqlxResult<Self> {
        row.try_get(index)
    }
    fn pg<I: Index>(row: &PgRow, index: I) -> SqlxResult<Self> {
        let width = {
            let value = row.try_get_raw(index)?;
            let info = value.type_info();
            match info.name() {
                "TIMESTAMPTZ" => 0,
                "INT4" => 4,
                "INT2" => 2,
                "BOOL" => 1,
                _ => 8,
            }
        };
        match width {
            4 => Ok(i64::from(row.try_get::<i32, _>(index)?)),
            2 => Ok(i64::from(row.try_get::<i16, _>(index)?)),
            1 => Ok(i64::from(row.try_get::<bool, _>(index)?)),
            0 => Ok(row
                .try_get::<chrono::DateTime<chrono::Utc>, _>(index)?
                .timestamp_millis()),
            _ => row.try_get(index),
        }
    }
}

impl Col for i32 {
    fn sqlite<I: Index>(row: &SqliteRow, index: I) -> SqlxResult<Self> {
        row.try_get(index)
    }
    fn pg<I: Index>(row: &PgRow, index: I) -> SqlxResult<Self> {
        let wide = <i64 as Col>::pg(row, index)?;
        i32::try_from(wide).map_err(|e| sqlx::Error::Decode(Box::new(e)))
    }
}

impl<T: Col> Col for Option<T> {
    fn sqlite<I: Index>(row: &SqliteRow, index: I) -> SqlxResult<Self> {
        if row.try_get_raw(index)?.is_null() {
            return Ok(None);
        }
        T::sqlite(row, index).map(Some)
    }
    fn pg<I: Index>(row: &PgRow, index: I) -> SqlxResult<Self> {
        if row.try_get_raw(index)?.is_null() {
            return Ok(None);
        }
        T::pg(row, index).map(Some)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sqlx::Connection;

    async fn memory() -> SqliteConnection {
        let mut c = SqliteConnection::connect("sqlite::memory:").await.unwrap();
        query("CREATE TABLE t (a INTEGER NOT NULL UNIQUE, b TEXT)")
            .execute(&mut c)
            .await
            .unwrap();
        c
    }

    #[tokio::test]
    async fn a_script_binds_anonymous_parameters_across_its_statements() {
        let mut c = memory().await;
        let mut script = Script::new();
        script.push(
            query("INSERT INTO t (a, b) VALUES (?, ?)")
                .bind(1_i64)
                .bind("one"),
        );
        script.push(
            query("INSERT INTO t (a, b) VALUES (?, ?), (?, ?)")
                .bind(2_i64)
                .bind("two")
                .bind(3_i64)
                .bind(None::<String>),
        );
        script.execute(&mut Conn::Sqlite(&mut c)).await.unwrap();
        let rows = query("SELECT a, b FROM t ORDER BY a")
            .fetch_all(&mut c)
            .await
            .unwrap();
        let got: Vec<(i64, Option<String>)> = rows
            .iter()
            .map(|r| (r.try_get(0).unwrap(), r.try_get(1).unwrap()))
            .collect();
        assert_eq!(
            got,
            vec![(1, Some("one".into())), (2, Some("two".into())), (3, None)]
        );
    }

    #[tokio::test]
    async fn a_failing_statement_of_a_script_is_its_error() {
        let mut c = memory().await;
        let mut script = Script::new();
        script.push(query("INSERT INTO t (a) VALUES (?)").bind(1_i64));
        script.push(query("INSERT INTO t (a) VALUES (?)").bind(1_i64));
        let err = script.execute(&mut Conn::Sqlite(&mut c)).await.unwrap_err();
        let db = err.as_database_error().unwrap();
        assert_eq!(db.kind(), sqlx::error::ErrorKind::UniqueViolation);
    }

    #[tokio::test]
    async fn numbered_parameters_run_one_statement_at_a_time() {
        let mut c = memory().await;
        let mut script = Script::new();
        script.push(
            query("INSERT INTO t (a, b) VALUES ($1, $2)")
                .bind(7_i64)
                .bind("x"),
        );
        script.push(
            query("INSERT INTO t (a, b) VALUES ($1, $2)")
                .bind(8_i64)
                .bind("y"),
        );
        script.execute(&mut Conn::Sqlite(&mut c)).await.unwrap();
        let n: i64 = query("SELECT COUNT(*) FROM t WHERE (a, b) IN ((7, 'x'), (8, 'y'))")
            .fetch_one(&mut c)
            .await
            .unwrap()
            .try_get(0)
            .unwrap();
        assert_eq!(n, 2);
    }

    /// A script longer than [`MAX_JOINED`] runs as several joined texts, each bound with its
    /// own statements' arguments.
    #[tokio::test]
    async fn a_long_script_runs_in_joined_texts_with_their_own_arguments() {
        let mut c = memory().await;
        let mut script = Script::new();
        let n = MAX_JOINED * 2 + 3;
        for i in 0..n {
            script.push(
                query("INSERT INTO t (a, b) VALUES (?, ?)")
                    .bind(i as i64)
                    .bind(format!("v{i}")),
            );
        }
        script.execute(&mut Conn::Sqlite(&mut c)).await.unwrap();
        let rows = query("SELECT a, b FROM t ORDER BY a")
            .fetch_all(&mut c)
            .await
            .unwrap();
        assert_eq!(rows.len(), n);
        for (i, row) in rows.iter().enumerate() {
            assert_eq!(row.try_get::<i64, _>(0).unwrap(), i as i64);
            assert_eq!(row.try_get::<String, _>(1).unwrap(), format!("v{i}"));
        }
    }

    /// A pool of one connection to a file database with table `t`.
    async fn file_pool(dir: &std::path::Path) -> Pool {
        let opts = sqlx::sqlite::SqliteConnectOptions::new()
            .filename(dir.join("t.db"))
            .create_if_missing(true);
        let pool = sqlx::sqlite::SqlitePoolOptions::new()
            .max_connections(1)
            .connect_with(opts)
            .await
            .unwrap();
        let pool = Pool::Sqlite(pool);
        query("CREATE TABLE t (a INTEGER NOT NULL UNIQUE, b TEXT)")
            .execute(&pool)
            .await
            .unwrap();
        pool
    }

    async fn count(pool: &Pool) -> i64 {
        query("SELECT COUNT(*) FROM t")
            .fetch_one(pool)
            .await
            .unwrap()
            .try_get(0)
            .unwrap()
    }

    /// The one-round-trip transaction commits what it ran and returns its rows; when a statement
    /// fails, what ran before it is rolled back and the connection goes back to the pool outside
    /// any transaction (the next one-text transaction's `BEGIN` works).
    #[tokio::test]
    async fn a_one_text_transaction_commits_or_leaves_nothing_open() {
        let dir = tempfile::tempdir().unwrap();
        let pool = file_pool(dir.path()).await;
        let insert = |a: i64| query("INSERT INTO t (a, b) VALUES (?, 'x')").bind(a);

        let mut script = Script::new();
        script.push(insert(1));
        script.push(insert(2));
        script.push(query("SELECT COUNT(*) FROM t"));
        let mut pooled = pool.acquire().await.unwrap();
        let rows = pooled
            .sqlite_transaction(script.into_query().unwrap())
            .await
            .unwrap();
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].try_get::<i64, _>(0).unwrap(), 2);
        drop(pooled);
        assert_eq!(count(&pool).await, 2);

        // The third insert repeats a value: the first two of this text are rolled back.
        let mut script = Script::new();
        script.push(insert(3));
        script.push(insert(4));
        script.push(insert(1));
        let mut pooled = pool.acquire().await.unwrap();
        let err = pooled
            .sqlite_transaction(script.into_query().unwrap())
            .await
            .unwrap_err();
        assert_eq!(
            err.as_database_error().unwrap().kind(),
            sqlx::error::ErrorKind::UniqueViolation
        );
        drop(pooled);
        assert_eq!(
            count(&pool).await,
            2,
            "nothing of the failed text is stored"
        );

        // The same (only) connection begins the next transaction: none was left open.
        let mut pooled = pool.acquire().await.unwrap();
        pooled.sqlite_transaction(insert(5)).await.unwrap();
        drop(pooled);
        assert_eq!(count(&pool).await, 3);
        pool.close().await;
    }
}
