//! [`Database`]: one handle over SQLite or PostgreSQL, chosen by URL.
//!
//! Opening connects, checks the engine version, applies pending migrations, leases a machine id
//! for snowflake ids and starts the group-commit writer. Reads go to a pool; every write goes to
//! the writer. This module must never issue a write outside the writer, so that every
//! acknowledged write is committed and grouped.

use crate::{AgentError, StorageError};
use std::collections::HashMap;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use crate::sql::{Conn, Pool};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::sqlite::{SqliteConnectOptions, SqlitePoolOptions};
use sqlx::{ConnectOptions, Executor};
use tokio::task::JoinHandle;
use tracing::{info, warn};

use crate::config::{Backend, DbConfig, Durability, MachineId};
use crate::error::{Error, Result, redact_url};
use crate::id::SnowflakeGenerator;
use crate::migrate::{self, MigrationStatus};
use crate::model::{Abandoned, Agent, AgentId, NewAgent, RecoveryScope, StoredBatch};
use crate::ops::{self, Ctx};
use crate::process::{Judge, Liveness};
use crate::store::MessageStore;
use crate::wake::Hub;
use crate::writer::{Write, Writer};

/// The oldest SQLite this crate runs on: 3.51.3 fixed a WAL-reset bug that could lose committed
/// transactions when two connections checkpoint and commit at the same moment.
pub const MIN_SQLITE_VERSION: (u32, u32, u32) = (3, 51, 3);

/// A handle to the database. Cheap to clone; all clones share pools and the writer.
#[derive(Clone, Debug)]
pub struct Database {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    backend: Backend,
    url: String,
    read: Pool,
    write_pool: Pool,
    writer: Writer,
    ctx: Arc<Ctx>,
    /// The heartbeat of this process's registration and machine-id lease.
    heartbeat: Option<JoinHandle<()>>,
    /// Whether the machine id is leased (released on close) rather than fixed.
    leased_machine_id: bool,
    /// What shows this process alive to others (released on close).
    liveness: std::sync::Mutex<Option<Arc<Liveness>>>,
    /// Wake-ups of runs and turns.
    hub: Arc<Hub>,
    /// The full-text index, opened by the first search.
    fts: tokio::sync::OnceCell<Arc<crate::fts::FtsIndex>>,
    /// Where that index lives (SQLite: `<file>.search`; PostgreSQL: this handle's memory).
    fts_dir: Option<std::path::PathBuf>,
    /// Wakes the task that keeps that index current after writes.
    index_nudge: Arc<tokio::sync::Notify>,
    /// That task, stopped on close.
    index_task: std::sync::Mutex<Option<JoinHandle<()>>>,
    /// The latest batches read per agent, valid while the agent's revision is unchanged.
    recent: std::sync::Mutex<HashMap<AgentId, CachedRecent>>,
}

/// A cached `get_recent` answer.
#[derive(Debug)]
struct CachedRecent {
    revision: i64,
    n_batches: usize,
    batches: Arc<Vec<StoredBatch>>,
}

/// Agents whose latest batches are cached at most; past it the cache starts over.
const RECENT_CACHE_AGENTS: usize = 1024;

impl Drop for Inner {
    fn drop(&mut self) {
        if let Some(task) = self.heartbeat.take() {
            task.abort();
        }
        if let Some(task) = self.index_task.get_mut().ok().and_then(Option::take) {
            task.abort();
        }
    }
}

/// Parsed connection options of either engine.
#[derive(Clone, Debug)]
enum Options {
    Sqlite(SqliteConnectOptions),
    Postgres(PgConnectOptions),
}

/// Options shared by every connection: SQLite pragmas that make commits durable and readers
/// concurrent.
fn connect_options(config: &DbConfig, backend: Backend) -> Result<Options> {
    let mut url = config.url.clone();
    if backend == Backend::Sqlite {
        // Create the file when missing.
        if !url.contains("mode=") {
            url.push(if url.contains('?') { '&' } else { '?' });
            url.push_str("mode=rwc");
        }
    }
    let invalid = |e: sqlx::Error| StorageError::InvalidUrl {
        url: redact_url(&config.url),
        reason: e.to_string(),
    };
    Ok(match backend {
        Backend::Sqlite => Options::Sqlite(
            SqliteConnectOptions::from_str(&url)
                .map_err(invalid)?
                .disable_statement_logging(),
        ),
        Backend::Postgres => Options::Postgres(
            PgConnectOptions::from_str(&url)
                .map_err(invalid)?
                // Statements are prepared once per connection and kept (the workspace has a
                // few hundred texts; sqlx keeps 100 by default and re-prepares evicted ones).
                .statement_cache_capacity(1024)
                .disable_statement_logging(),
        ),
    })
}

fn sqlite_pragmas(durability: Durability) -> &'static str {
    // `temp_store = MEMORY`: the statement and savepoint journals (the pages a multi-row
    // statement or a write group's savepoint may have to roll back) stay in memory. Left to the
    // default, SQLite spills a journal over 64 KiB to a temporary file that it creates, writes
    // and unlinks once per statement or savepoint: a write group of 100 acknowledgements did that
    // several times per commit (decision 0025, "Stop 32"). The journals are bounded by what one
    // transaction writes, which the writer's groups and the import's calls already bound.
    //
    // `wal_autocheckpoint = 4000` (16 MiB of 4 KiB pages, SQLite's default is 1000): the commit
    // that passes the mark copies the WAL's pages into the database file and syncs it, on the
    // writer's path. A group commit of many agents rewrites the same agent-keyed index leaves
    // group after group, so a checkpoint four times rarer copies far fewer pages per write:
    // a group of 100 acknowledgements committed in 1.4-1.5 ms instead of 1.6-1.8 (decision 0025,
    // "Stop 35"). The WAL file keeps that size once grown (it is reused, not truncated).
    match durability {
        Durability::Full => {
            "PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL; PRAGMA foreign_keys = ON; \
             PRAGMA temp_store = MEMORY; PRAGMA busy_timeout = 10000; \
             PRAGMA wal_autocheckpoint = 4000;"
        }
        Durability::Normal => {
            "PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL; PRAGMA foreign_keys = ON; \
             PRAGMA temp_store = MEMORY; PRAGMA busy_timeout = 10000; \
             PRAGMA wal_autocheckpoint = 4000;"
        }
    }
}

/// How long a PostgreSQL connection may have been idle in the pool and still be handed out
/// without a ping (see `pool`).
const PG_PING_IDLE_AFTER: std::time::Duration = std::time::Duration::from_secs(1);

async fn pool(config: &DbConfig, options: &Options, size: u32) -> Result<Pool> {
    let durability = config.durability;
    let failed = |backend: Backend| {
        move |source| {
            Error::Storage(StorageError::Connect {
                backend: backend.name(),
                url: redact_url(&config.url),
                source,
            })
        }
    };
    Ok(match options {
        Options::Sqlite(options) => Pool::Sqlite(
            SqlitePoolOptions::new()
                .max_connections(size)
                .min_connections(0)
                .acquire_timeout(config.connect_timeout)
                // A file connection cannot lose its server: the ping sqlx sends before handing
                // out an idle connection is a round trip to the connection's worker thread for
                // nothing (one per acquire: per write group, per read statement).
                .test_before_acquire(false)
                .after_connect(move |conn, _meta| {
                    Box::pin(async move {
                        conn.execute(sqlite_pragmas(durability)).await?;
                        Ok(())
                    })
                })
                .connect_with(options.clone())
                .await
                .map_err(failed(Backend::Sqlite))?,
        ),
        Options::Postgres(options) => Pool::Postgres(
            PgPoolOptions::new()
                .max_connections(size)
                .min_connections(0)
                .acquire_timeout(config.connect_timeout)
                // sqlx pings a connection when it comes back to the pool and, by default, again
                // before handing it out: a round trip to the server on every acquire (every
                // acknowledgement, every read). One that came back less than
                // `PG_PING_IDLE_AFTER` ago passed the first ping then and is handed out as it
                // is; one idle longer (the server may have closed it meanwhile) is pinged first,
                // and a broken one is replaced before anyone uses it.
                .test_before_acquire(false)
                .before_acquire(|conn, meta| {
                    Box::pin(async move {
                        if meta.idle_for >= PG_PING_IDLE_AFTER {
                            sqlx::Connection::ping(conn).await?;
                        }
                        Ok(true)
                    })
                })
                .connect_with(options.clone())
                .await
                .map_err(failed(Backend::Postgres))?,
        ),
    })
}

/// Parses `3.51.3` into a comparable triple.
pub(crate) fn parse_version(text: &str) -> Option<(u32, u32, u32)> {
    let mut parts = text.split('.').map(|p| p.parse::<u32>().ok());
    Some((
        parts.next()??,
        parts.next()??,
        parts.next().unwrap_or(Some(0))?,
    ))
}

impl Database {
    /// Opens (creating when needed) the database at `url` with default settings.
    pub async fn open_url(url: &str) -> Result<Self> {
        Self::open(DbConfig::new(url)).await
    }

    /// Opens the database described by `config`: connects, checks versions, migrates, leases a
    /// machine id and starts the writer.
    pub async fn open(config: DbConfig) -> Result<Self> {
        let backend = config.validate()?;
        let options = connect_options(&config, backend)?;
        // Writer tasks and write connections: SQLite has one writer task, which keeps its
        // connection from one group to the next (`writer::Held`), and a second connection for
        // what writes outside it (a machine id leased again, registration at close).
        let (read_size, write_size, writers) = match backend {
            Backend::Sqlite => (config.read_connections, 2, 1),
            Backend::Postgres => (
                config.read_connections,
                config.pg_write_connections,
                config.pg_write_connections,
            ),
        };
        let write_pool = pool(&config, &options, write_size).await?;
        if backend == Backend::Sqlite {
            let version = engine_version(&write_pool).await?;
            if parse_version(&version).is_none_or(|v| v < MIN_SQLITE_VERSION) {
                return Err(StorageError::SqliteTooOld {
                    found: version,
                    required: "3.51.3",
                }
                .into());
            }
        }
        if config.migrate_on_open {
            migrate::up(&write_pool, backend).await?;
        }
        let read = pool(&config, &options, read_size).await?;

        let judge = Judge {
            me: config.run_owner.clone(),
            lock_dir: crate::process::lock_dir_for(&config.url),
        };
        // Register this process before leasing a machine id: leasing judges other holders by
        // their registrations.
        let liveness = if config.migrate_on_open {
            Some(Arc::new(
                crate::process::register(
                    &write_pool,
                    backend,
                    &config.url,
                    &config.run_owner,
                    config.run_lease,
                )
                .await?,
            ))
        } else {
            None
        };
        let machine_id = match config.machine_id {
            MachineId::Fixed(id) => id,
            MachineId::Lease => {
                crate::process::lease_machine_id(
                    &write_pool,
                    &judge,
                    &config.run_owner,
                    config.machine_lease,
                )
                .await?
            }
        };
        info!(backend = backend.name(), machine_id, "database open");
        let ctx = Arc::new(Ctx {
            backend,
            ids: Arc::new(SnowflakeGenerator::new(machine_id)?),
            max_content_bytes: config.max_content_bytes,
            compress_from: config.compress_content_from,
            compress_archived_from: config.compress_archived_from,
            compress_imported_from: config.compress_imported_from,
            run_owner: config.run_owner.clone(),
            batch_lease: config.batch_lease,
            record_jobs: config.record_embedding_jobs,
            judge: judge.clone(),
            lock_key: liveness.as_ref().map_or(0, |l| l.lock_key),
            run_lease: config.run_lease,
            machine_lease: config.machine_lease,
        });
        let writer = Writer::start(
            write_pool.clone(),
            ctx.clone(),
            writers as usize,
            config.queue_capacity,
            config.max_group,
        );
        let leased_machine_id = matches!(config.machine_id, MachineId::Lease);
        let heartbeat = liveness.as_ref().map(|liveness| {
            tokio::spawn(heartbeat(Heartbeat {
                writer: writer.clone(),
                pool: write_pool.clone(),
                ctx: ctx.clone(),
                liveness: liveness.clone(),
                url: config.url.clone(),
                leased: leased_machine_id,
                judge,
            }))
        });
        let index_nudge = Arc::new(tokio::sync::Notify::new());
        let db = Self {
            inner: Arc::new(Inner {
                backend,
                url: redact_url(&config.url),
                read,
                write_pool,
                writer,
                ctx,
                heartbeat,
                leased_machine_id,
                liveness: std::sync::Mutex::new(liveness),
                hub: Arc::new(Hub::new(backend, config.url.clone())),
                recent: std::sync::Mutex::new(HashMap::new()),
                fts: tokio::sync::OnceCell::new(),
                fts_dir: crate::fts::dir_for(&config.url),
                index_nudge: index_nudge.clone(),
                index_task: std::sync::Mutex::new(None),
            }),
        };
        let weak = Arc::downgrade(&db.inner);
        let task = tokio::spawn(crate::fts::follow(index_nudge, move || {
            weak.upgrade().map(|inner| Database { inner })
        }));
        if let Ok(mut slot) = db.inner.index_task.lock() {
            *slot = Some(task);
        }
        Ok(db)
    }

    /// Which engine this is.
    pub fn backend(&self) -> Backend {
        self.inner.backend
    }

    /// The URL, with any password removed.
    pub fn url(&self) -> &str {
        &self.inner.url
    }

    /// The machine id stamped into this process's snowflake ids.
    pub fn machine_id(&self) -> u16 {
        self.inner.ctx.ids.machine_id()
    }

    /// The owner name this process writes on the batches it opens.
    pub fn run_owner(&self) -> &str {
        &self.inner.ctx.run_owner
    }

    /// The largest message content accepted, in bytes.
    pub fn max_content_bytes(&self) -> usize {
        self.inner.ctx.max_content_bytes
    }

    /// The engine's version string (e.g. `3.51.3` or `PostgreSQL 15.18 ...`).
    pub async fn engine_version(&self) -> Result<String> {
        engine_version(&self.inner.read).await
    }

    /// Every shipped migration and whether this database has it.
    pub async fn migration_status(&self) -> Result<Vec<MigrationStatus>> {
        migrate::status(&self.inner.read, self.inner.backend).await
    }

    /// Reverts migrations down to `target` (0: all). Destroys data; for operators and tests.
    pub async fn migrate_down(&self, target: i64) -> Result<()> {
        migrate::down_to(&self.inner.write_pool, self.inner.backend, target).await
    }

    /// Applies pending migrations (done by [`open`](Self::open) already; for after a down).
    pub async fn migrate_up(&self) -> Result<()> {
        migrate::up(&self.inner.write_pool, self.inner.backend).await
    }

    /// A fresh snowflake id from this process's generator (for summaries and other rows the
    /// caller names itself).
    pub fn next_id(&self) -> Result<crate::id::SnowflakeId> {
        self.inner.ctx.ids.next_id()
    }

    /// The last `n_batches` of a cached answer for `agent` at `revision`, if one covers them.
    pub(crate) fn cached_recent(
        &self,
        agent: AgentId,
        revision: i64,
        n_batches: usize,
    ) -> Option<Vec<StoredBatch>> {
        let cache = self.inner.recent.lock().ok()?;
        let hit = cache.get(&agent)?;
        if hit.revision != revision || hit.n_batches < n_batches {
            return None;
        }
        let skip = hit.batches.len().saturating_sub(n_batches);
        Some(hit.batches[skip..].to_vec())
    }

    /// The revision of the cached `get_recent` answer of at least `n_batches` batches of
    /// `agent`, if one is cached (then checking the revision first can save the read).
    pub(crate) fn cached_recent_revision(&self, agent: AgentId, n_batches: usize) -> Option<i64> {
        let cache = self.inner.recent.lock().ok()?;
        cache
            .get(&agent)
            .filter(|hit| hit.n_batches >= n_batches)
            .map(|hit| hit.revision)
    }

    /// Remembers a `get_recent` answer read at `revision` (read before the batches, so the answer
    /// is at least that new).
    pub(crate) fn cache_recent(
        &self,
        agent: AgentId,
        revision: i64,
        n_batches: usize,
        batches: &[StoredBatch],
    ) {
        if let Ok(mut cache) = self.inner.recent.lock() {
            if cache.len() >= RECENT_CACHE_AGENTS && !cache.contains_key(&agent) {
                cache.clear();
            }
            cache.insert(
                agent,
                CachedRecent {
                    revision,
                    n_batches,
                    batches: Arc::new(batches.to_vec()),
                },
            );
        }
    }

    /// Forgets every cached `get_recent` answer, so the next call reads the database (for
    /// benchmarks of the uncached read).
    #[cfg(feature = "testkit")]
    pub fn forget_read_cache(&self) {
        if let Ok(mut cache) = self.inner.recent.lock() {
            cache.clear();
        }
    }

    #[cfg(feature = "testkit")]
    pub(crate) fn write_pool(&self) -> &Pool {
        &self.inner.write_pool
    }

    /// The full-text index, opened on first use: SQLite's beside its file, PostgreSQL's in
    /// this handle's memory.
    pub(crate) async fn fts(&self) -> Result<Arc<crate::fts::FtsIndex>> {
        self.inner
            .fts
            .get_or_try_init(|| async {
                let per_process = self.backend() == Backend::Postgres;
                crate::fts::FtsIndex::open(self.inner.fts_dir.clone(), per_process)
                    .await
                    .map(Arc::new)
            })
            .await
            .cloned()
    }

    /// The full-text index the follower keeps current after writes: SQLite's (shared with every
    /// handle of the file, so opened here if need be), PostgreSQL's only once a search opened it
    /// (a process that never searches never builds one).
    pub(crate) async fn fts_to_follow(&self) -> Result<Option<Arc<crate::fts::FtsIndex>>> {
        match self.backend() {
            Backend::Sqlite => self.fts().await.map(Some),
            Backend::Postgres => Ok(self.inner.fts.get().cloned()),
        }
    }

    /// The read pool: statements outside the writer, each on a pooled connection. Never write
    /// through it (every write goes through [`Database::write`]).
    pub fn reader(&self) -> &Pool {
        &self.inner.read
    }

    /// The settings every write runs with (for work done before a write is queued).
    pub(crate) fn ctx(&self) -> &crate::ops::Ctx {
        &self.inner.ctx
    }

    /// Queues a write. Inside [`crate::runs::fenced`] it carries the run's claim (unless the op
    /// carries its own).
    pub async fn write<W: Write>(&self, write: W) -> Result<W::Output> {
        let fence = if write.locks().carries_claim {
            None
        } else {
            crate::runs::current_fence()
        };
        let out = self.inner.writer.submit(write, fence).await;
        self.nudge_index();
        out
    }

    /// Queues a write of the run holding `claim`.
    pub(crate) async fn write_fenced<W: Write>(
        &self,
        write: W,
        claim: crate::runs::RunClaim,
    ) -> Result<W::Output> {
        let out = self.inner.writer.submit(write, Some(claim)).await;
        self.nudge_index();
        out
    }

    /// Tells the full-text index follower that a write has returned (committed or not: a
    /// catch-up with nothing new is one indexed query). Never waits.
    fn nudge_index(&self) {
        self.inner.index_nudge.notify_one();
    }

    /// Wake-ups of runs and turns in this process (and, on PostgreSQL, from every process).
    pub fn hub(&self) -> &Arc<Hub> {
        &self.inner.hub
    }

    /// How long this process's registration lasts without a heartbeat.
    pub fn run_lease(&self) -> Duration {
        self.inner.ctx.run_lease
    }

    /// The message store of one agent.
    pub fn messages(&self, agent: AgentId) -> MessageStore {
        MessageStore::new(self.clone(), agent)
    }

    // -- agents --------------------------------------------------------------------------------

    /// Creates an agent. A taken name is [`AgentError::NameTaken`].
    pub async fn create_agent(&self, new: NewAgent) -> Result<Agent> {
        self.write(ops::agents::CreateAgent(new)).await
    }

    /// Replaces an agent's metadata (one transaction under the agent's row lock) and returns the
    /// agent as stored. An unknown agent is [`AgentError::NotFound`].
    pub async fn set_agent_metadata(
        &self,
        agent: AgentId,
        metadata: serde_json::Value,
    ) -> Result<Agent> {
        self.write(ops::agents::SetMetadata { agent, metadata })
            .await
    }

    /// Deletes an agent and everything stored for it.
    pub async fn delete_agent(&self, agent: AgentId) -> Result<()> {
        self.write(ops::agents::DeleteAgent(agent)).await
    }

    /// The agent with this id.
    pub async fn agent(&self, agent: AgentId) -> Result<Agent> {
        let mut pooled = self.inner.read.acquire().await?;
        let row = match &mut pooled.conn() {
            Conn::Sqlite(c) => pattern_db_sqlite::agents::by_id(c, &agent.to_string())
                .await?
                .map(ops::agent_from_plain),
            Conn::Postgres(c) => pattern_db_postgres::agents::by_id(c, agent.0)
                .await?
                .map(ops::agent_from_plain),
        };
        row.transpose()?
            .ok_or(Error::Agent(AgentError::NotFound(agent)))
    }

    /// The agent with this name in the local organization ([`crate::LOCAL_ORGANIZATION`]); see
    /// [`Database::agent_in_scope`] for any other.
    pub async fn agent_by_name(&self, name: &str) -> Result<Agent> {
        self.agent_in_scope(None, name).await
    }

    /// Every agent of every organization, by organization and name.
    pub async fn agents(&self) -> Result<Vec<Agent>> {
        let mut pooled = self.inner.read.acquire().await?;
        match &mut pooled.conn() {
            Conn::Sqlite(c) => pattern_db_sqlite::agents::all(c)
                .await?
                .into_iter()
                .map(ops::agent_from_plain)
                .collect(),
            Conn::Postgres(c) => pattern_db_postgres::agents::all(c)
                .await?
                .into_iter()
                .map(ops::agent_from_plain)
                .collect(),
        }
    }

    /// Recovery across every agent: open batches in `scope` become `abandoned`; returns them with
    /// their triggers, for retry.
    pub async fn recover_all(&self, scope: RecoveryScope) -> Result<Vec<Abandoned>> {
        self.write(crate::ops::batches::Recover { agent: None, scope })
            .await
    }

    /// Stops this handle as a killed process would: the heartbeat stops and the liveness lock
    /// is released (the server or the kernel does that when a process dies), but nothing is
    /// cleaned up: its registration, machine-id lease, claims and open batches stay for others
    /// to find dead. For tests of recovery.
    #[cfg(feature = "testkit")]
    pub async fn crash(self) {
        let inner = self.inner.clone();
        drop(self);
        if let Some(task) = &inner.heartbeat {
            task.abort();
        }
        let follower = inner.index_task.lock().ok().and_then(|mut t| t.take());
        if let Some(task) = follower {
            task.abort();
            // Its catch-up may hold a handle: let it end before the pools close.
            let _ = task.await;
        }
        if let Some(liveness) = take_liveness(&inner).await {
            crate::process::release(liveness).await;
        }
        inner.read.close().await;
        inner.write_pool.close().await;
    }

    /// Closes the database for every clone: removes this process's registration and releases
    /// its machine-id lease and liveness lock (so its claims and id are free at once), and closes
    /// the pools. Writes already acknowledged are committed; a write still queued fails with an
    /// error, so no caller is told a write succeeded that did not.
    pub async fn close(self) {
        let inner = self.inner.clone();
        drop(self);
        if let Some(task) = &inner.heartbeat {
            task.abort();
        }
        let follower = inner.index_task.lock().ok().and_then(|mut t| t.take());
        if let Some(task) = follower {
            task.abort();
            // Its catch-up may hold a handle: let it end before the pools close.
            let _ = task.await;
        }
        let liveness = take_liveness(&inner).await;
        if liveness.is_some() {
            let holder = inner.ctx.run_owner.as_str();
            // Hand the machine id and the registration back so short-lived processes do not use
            // up the 1024 ids and their claims are free at once.
            release_registration(&inner.write_pool, holder, inner.leased_machine_id).await;
        }
        if let Some(liveness) = liveness {
            crate::process::release(liveness).await;
        }
        inner.read.close().await;
        inner.write_pool.close().await;
    }
}

/// The engine's version string, read on a connection of `pool`.
async fn engine_version(pool: &Pool) -> Result<String> {
    let mut pooled = pool.acquire().await?;
    Ok(match &mut pooled.conn() {
        Conn::Sqlite(c) => pattern_db_sqlite::stats::engine_version(c).await?,
        Conn::Postgres(c) => pattern_db_postgres::stats::engine_version(c).await?,
    })
}

/// Deletes process `holder`'s row and, when it leased its machine id, its leases: each
/// statement on its own (autocommitted), a failure only logged.
async fn release_registration(pool: &Pool, holder: &str, leased_machine_id: bool) {
    let mut pooled = match pool.acquire().await {
        Ok(pooled) => pooled,
        Err(e) => {
            warn!(error = %e, "cannot release this process's registration");
            return;
        }
    };
    let mut conn = pooled.conn();
    let process = match &mut conn {
        Conn::Sqlite(c) => pattern_db_sqlite::processes::delete(c, holder).await,
        Conn::Postgres(c) => pattern_db_postgres::processes::delete(c, holder).await,
    };
    if let Err(e) = process {
        warn!(error = %e, "cannot release this process's registration");
    }
    if leased_machine_id {
        let leases = match &mut conn {
            Conn::Sqlite(c) => pattern_db_sqlite::processes::delete_leases(c, holder).await,
            Conn::Postgres(c) => pattern_db_postgres::processes::delete_leases(c, holder).await,
        };
        if let Err(e) = leases {
            warn!(error = %e, "cannot release this process's registration");
        }
    }
}

/// This handle's liveness, once the (aborted) heartbeat task has let go of its clone (at most
/// a second; after that the lock is released when the last clone drops).
async fn take_liveness(inner: &Inner) -> Option<Liveness> {
    let taken = inner.liveness.lock().ok().and_then(|mut l| l.take());
    let mut shared = taken?;
    for _ in 0..200 {
        match Arc::try_unwrap(shared) {
            Ok(liveness) => return Some(liveness),
            Err(still) => {
                shared = still;
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
    }
    None
}

/// What the heartbeat task needs.
struct Heartbeat {
    writer: Writer,
    pool: Pool,
    ctx: Arc<Ctx>,
    liveness: Arc<Liveness>,
    url: String,
    leased: bool,
    judge: Judge,
}

/// Renews this process's registration (and machine-id lease) every quarter of the run lease,
/// keeps its PostgreSQL liveness session alive, and leases a fresh machine id if another
/// process took this one's (it judged this process dead: a stall longer than the lease).
async fn heartbeat(h: Heartbeat) {
    let period = h.ctx.run_lease / 4;
    loop {
        tokio::time::sleep(period).await;
        crate::process::keep_alive(&h.liveness, &h.url).await;
        let machine_id = h.leased.then(|| h.ctx.ids.machine_id());
        match h
            .writer
            .submit(crate::ops::runs::writes::Heartbeat { machine_id }, None)
            .await
        {
            Ok(report) => {
                if !report.renewed {
                    warn!(
                        "this process was judged dead by another and registered again; its runs' claims may be gone"
                    );
                }
                if !report.machine_kept {
                    warn!("this process's machine id was taken over; leasing another");
                    match crate::process::lease_machine_id(
                        &h.pool,
                        &h.judge,
                        &h.ctx.run_owner,
                        h.ctx.machine_lease,
                    )
                    .await
                    {
                        Ok(id) => {
                            if let Err(e) = h.ctx.ids.set_machine_id(id) {
                                warn!(error = %e, "cannot use the new machine id");
                            }
                        }
                        Err(e) => warn!(error = %e, "cannot lease a new machine id"),
                    }
                }
            }
            Err(Error::Storage(StorageError::Closed)) => return,
            Err(e) => warn!(error = %e, "cannot renew this process's registration"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_compare() {
        assert_eq!(parse_version("3.51.3"), Some((3, 51, 3)));
        assert!(parse_version("3.50.9").unwrap() < MIN_SQLITE_VERSION);
        assert!(parse_version("3.52.0").unwrap() >= MIN_SQLITE_VERSION);
        assert_eq!(parse_version("x"), None);
    }
}
