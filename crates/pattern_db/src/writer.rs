//! The group-commit writer: every write of the store goes through here.
//!
//! Callers queue a [`Write`] and wait for its reply: each domain defines its own writes (a type
//! per write, with its arguments, its output and the locks it needs) beside its SQL; the writer
//! knows none of them (decision 0023). A writer task takes the first waiting op plus every op
//! already queued behind it (up to `max_group`; it yields to the runtime a few times while the
//! queue still grows, so callers whose last write just committed join the group), runs them in
//! one transaction, each inside its own savepoint, and commits once: one fsync serves the whole
//! group. An op that fails is rolled back to its savepoint alone and its caller gets the error;
//! the others commit. No reply is sent before the commit that makes it durable has returned.
//!
//! **Lock order.** SQLite has exactly one writer task (SQLite allows one writer at a time
//! anyway). PostgreSQL has several, and every transaction takes its row locks in one global
//! order: the search change-log advisory lock first (when an op of the group logs changes), then
//! every agent the group writes (each op's agent, and the agent of each run whose claim fences
//! an op) in agent id order, in one statement, before any op runs; then the protocol rows of the
//! ops in the group's sorted order. A group of one `begin_batch` without a fence skips the
//! up-front statement: its call of `pattern_open_batch` (migration 0024) locks its one agent's
//! row first, which is that same lock in the same place of the order, and reads the newest
//! position and run holder in later statements of its own (under `READ COMMITTED` a statement
//! that waited for a row lock still reads from the snapshot it started with). Without a parent or
//! retry that call runs autocommitted, outside any transaction: one round trip for a lone
//! acknowledgement; when it finds a holder or a newer position it stores nothing and the write
//! runs on the transactional path. SQLite does the same for a lone acknowledgement with one text
//! of statements that is its own `BEGIN IMMEDIATE` ... `COMMIT` (one round trip to the
//! connection's worker thread instead of four), on a connection SQLite's one writer task keeps
//! from one group to the next (`Held`: no trip back through sqlx's pool, which pings each
//! connection it gets back). Recovery across agents, which discovers the agents it locks
//! as it goes, runs alone in its own transaction and takes them in agent order too. A deadlock or
//! serialization failure that still happens (another process's transaction, a foreign-key check)
//! rolls the whole group back and it runs again, a few times, before any caller hears of it.
//!
//! **Fences.** An op written by a run carries the run's claim; before the op runs, the claim is
//! checked under its agent's lock, and a claim taken over refuses the op with
//! [`RunError::ClaimLost`](RunError::ClaimLost). This module must never reply `Ok` to a write
//! that is not committed, and never run a fenced op whose claim is not current.

use crate::StorageError;
use std::sync::Arc;
use std::time::Duration;

use crate::sql::Conn;
use crate::sql::Pool;
use futures::future::BoxFuture;
use tokio::sync::{Mutex, mpsc, oneshot};
use tracing::{debug, warn};

use crate::config::Backend;
use crate::error::{Error, Result};
use crate::model::{AgentId, BeginBatch, NewMessage, Received};
use crate::ops::{self, Ctx};
use crate::runs::RunClaim;

/// Yields of the writer while gathering a group (see `run`).
const GATHER_ROUNDS: usize = 4;

/// What a write locks, for the writer's global lock order (see the module doc).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Locks {
    /// The agent whose row it locks (taken up front, in agent order, on PostgreSQL).
    pub(crate) agent: Option<AgentId>,
    /// The protocol row it locks or updates first (a session, or a recipient), for ordering
    /// within a group after the agent.
    pub(crate) protocol: Option<uuid::Uuid>,
    /// It locks agents it discovers as it runs: it runs alone in its transaction.
    pub(crate) exclusive: bool,
    /// It carries its run's claim itself (or is no write of a run): no fence is added to it.
    pub(crate) carries_claim: bool,
    /// It may append `vector` or `delete` changes to `search_changes` (the change-log lock is
    /// taken first for its group).
    pub(crate) logs_changes: bool,
}

impl Locks {
    /// Locks nothing up front.
    pub fn none() -> Self {
        Self::default()
    }

    /// Locks `agent`'s row.
    pub fn agent(agent: AgentId) -> Self {
        Self {
            agent: Some(agent),
            ..Self::default()
        }
    }

    /// Locks the protocol row `key` (a session, or a recipient).
    pub fn protocol(key: uuid::Uuid) -> Self {
        Self {
            protocol: Some(key),
            ..Self::default()
        }
    }

    /// And may log search changes (the change-log lock comes first).
    pub fn logging_changes(self) -> Self {
        Self {
            logs_changes: true,
            ..self
        }
    }

    /// And carries its own claim (no fence is added).
    pub fn carrying_claim(self) -> Self {
        Self {
            carries_claim: true,
            ..self
        }
    }
}

/// A write: its arguments, and the SQL that runs it inside the writer's transaction. The
/// implementation must never commit, roll back or open a transaction of its own.
pub trait Write: Send + Sync + 'static {
    /// What the caller gets once the write is committed.
    type Output: Send + 'static;

    /// What it locks.
    fn locks(&self) -> Locks;

    /// Runs it inside the open transaction `conn`; `fence` is the claim of the run that writes
    /// (already checked), for writes that belong to runs.
    fn apply(
        &self,
        conn: &mut Conn<'_>,
        ctx: &Ctx,
        fence: Option<&RunClaim>,
    ) -> impl Future<Output = Result<Self::Output>> + Send;

    /// A `begin_batch` the writer may run with others of its group in one bulk statement.
    fn bulk_begin(&self) -> Option<(AgentId, &NewMessage, &BeginBatch)> {
        None
    }

    /// The output of a bulk `begin_batch` (see [`Write::bulk_begin`]).
    fn from_received(_received: Received) -> Option<Self::Output> {
        None
    }

    /// Whether the write has a form that runs in one round trip ([`Write::apply_alone`]), for
    /// when it is the only write of its group and no run's claim fences it. Asked before a
    /// connection is taken for it.
    fn has_alone_form(&self, _ctx: &Ctx) -> bool {
        false
    }

    /// That form: the write run on `pooled`, outside the writer's transaction, as a transaction
    /// of its own (SQLite: [`crate::sql::Pooled::sqlite_transaction`]). `Ok(None)` when it stored
    /// nothing (what it found needs the full rules): the writer then runs [`Write::apply`] on its
    /// transactional path. It must never store part of the write.
    fn apply_alone(
        &self,
        _pooled: &mut crate::sql::Pooled,
        _ctx: &Ctx,
    ) -> impl Future<Output = Result<Option<Self::Output>>> + Send {
        async { Ok(None) }
    }
}

/// A queued write with its reply, its type erased for the queue.
trait Pending: Send + Sync {
    fn locks(&self) -> Locks;
    fn bulk_begin(&self) -> Option<(AgentId, &NewMessage, &BeginBatch)>;
    /// Runs the write and keeps its output until the reply (a later attempt replaces it).
    fn run<'a, 'c: 'a>(
        &'a self,
        conn: &'a mut Conn<'c>,
        ctx: &'a Ctx,
        fence: Option<&'a RunClaim>,
    ) -> BoxFuture<'a, Result<()>>;
    /// Keeps the output of a bulk `begin_batch`.
    fn set_received(&self, received: Received) -> Result<()>;
    /// See [`Write::has_alone_form`].
    fn has_alone_form(&self, ctx: &Ctx) -> bool;
    /// Runs [`Write::apply_alone`] and keeps its output; `Ok(false)` when it stored nothing.
    fn run_alone<'a>(
        &'a self,
        pooled: &'a mut crate::sql::Pooled,
        ctx: &'a Ctx,
    ) -> BoxFuture<'a, Result<bool>>;
    /// Answers the caller: the kept output when `outcome` is `Ok` (committed), else the error.
    fn reply(self: Box<Self>, outcome: Result<()>);
}

struct Typed<W: Write> {
    write: W,
    output: std::sync::Mutex<Option<W::Output>>,
    reply: oneshot::Sender<Result<W::Output>>,
}

impl<W: Write> Typed<W> {
    fn keep(&self, output: W::Output) -> Result<()> {
        let mut slot = self
            .output
            .lock()
            .map_err(|_| StorageError::Poisoned("write output"))?;
        *slot = Some(output);
        Ok(())
    }
}

impl<W: Write> Pending for Typed<W> {
    fn locks(&self) -> Locks {
        self.write.locks()
    }

    fn bulk_begin(&self) -> Option<(AgentId, &NewMessage, &BeginBatch)> {
        self.write.bulk_begin()
    }

    fn run<'a, 'c: 'a>(
        &'a self,
        conn: &'a mut Conn<'c>,
        ctx: &'a Ctx,
        fence: Option<&'a RunClaim>,
    ) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            let output = self.write.apply(conn, ctx, fence).await?;
            self.keep(output)
        })
    }

    fn set_received(&self, received: Received) -> Result<()> {
        match W::from_received(received) {
            Some(output) => self.keep(output),
            None => Err(StorageError::Poisoned("a bulk begin_batch of another write").into()),
        }
    }

    fn has_alone_form(&self, ctx: &Ctx) -> bool {
        self.write.has_alone_form(ctx)
    }

    fn run_alone<'a>(
        &'a self,
        pooled: &'a mut crate::sql::Pooled,
        ctx: &'a Ctx,
    ) -> BoxFuture<'a, Result<bool>> {
        Box::pin(async move {
            match self.write.apply_alone(pooled, ctx).await? {
                Some(output) => self.keep(output).map(|()| true),
                None => Ok(false),
            }
        })
    }

    fn reply(self: Box<Self>, outcome: Result<()>) {
        let Typed { output, reply, .. } = *self;
        let result = outcome.and_then(|()| {
            output
                .into_inner()
                .ok()
                .flatten()
                .ok_or(Error::Storage(StorageError::Poisoned("write output")))
        });
        let _ = reply.send(result);
    }
}

/// How often a group that hit a deadlock or serialization failure runs again before its
/// callers get the error.
const CONFLICT_ATTEMPTS: u32 = 6;

struct Job {
    write: Box<dyn Pending>,
    fence: Option<RunClaim>,
}

/// Handle to the writer tasks; cloning shares them.
#[derive(Clone)]
pub(crate) struct Writer {
    tx: mpsc::Sender<Job>,
}

impl std::fmt::Debug for Writer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Writer")
            .field("queued", &(self.tx.max_capacity() - self.tx.capacity()))
            .finish()
    }
}

impl Writer {
    /// Starts `tasks` writer tasks over `pool`.
    pub(crate) fn start(
        pool: Pool,
        ctx: Arc<Ctx>,
        tasks: usize,
        capacity: usize,
        max_group: usize,
    ) -> Self {
        let (tx, rx) = mpsc::channel::<Job>(capacity);
        let rx = Arc::new(Mutex::new(rx));
        for n in 0..tasks.max(1) {
            let (pool, ctx, rx) = (pool.clone(), ctx.clone(), rx.clone());
            tokio::spawn(async move {
                run(n, pool, ctx, rx, max_group).await;
            });
        }
        Self { tx }
    }

    /// Queues a write (fenced by `fence` when a run writes it) and waits until it is committed
    /// (or failed).
    pub(crate) async fn submit<W: Write>(
        &self,
        write: W,
        fence: Option<RunClaim>,
    ) -> Result<W::Output> {
        let (reply, rx) = oneshot::channel();
        let write = Box::new(Typed {
            write,
            output: std::sync::Mutex::new(None),
            reply,
        });
        self.tx
            .send(Job { write, fence })
            .await
            .map_err(|_| StorageError::Closed)?;
        rx.await.map_err(|_| StorageError::Closed)?
    }
}

impl Job {
    /// The agents whose row locks this job needs before it runs.
    fn agents(&self, out: &mut Vec<AgentId>) {
        out.extend(self.write.locks().agent);
        out.extend(self.fence.map(|f| f.agent));
    }

    fn exclusive(&self) -> bool {
        self.write.locks().exclusive
    }

    fn reply(self, outcome: Result<()>) {
        self.write.reply(outcome);
    }
}

async fn run(
    n: usize,
    pool: Pool,
    ctx: Arc<Ctx>,
    rx: Arc<Mutex<mpsc::Receiver<Job>>>,
    max_group: usize,
) {
    // An exclusive op met while collecting a group waits for the next round, alone.
    let mut carried: Option<Job> = None;
    // SQLite: the writer's own connection, kept from one group to the next (see `Held`).
    let mut held = Held::new(ctx.backend);
    loop {
        let mut group = Vec::new();
        match carried.take() {
            Some(job) => group.push(job),
            None => {
                let mut rx = rx.lock().await;
                match held.wait(&pool, &mut rx).await {
                    Some(job) => group.push(job),
                    None => break,
                }
                if !group[0].exclusive() {
                    // Callers whose last write just committed are runnable but may not have
                    // queued their next one yet: yielding lets them, so the group takes them
                    // instead of committing without them. Yield again only while the queue
                    // still grew (at most `GATHER_ROUNDS` times): a lone caller pays one yield.
                    for _ in 0..GATHER_ROUNDS {
                        tokio::task::yield_now().await;
                        let before = group.len();
                        while group.len() < max_group && carried.is_none() {
                            match rx.try_recv() {
                                Ok(job) if job.exclusive() => carried = Some(job),
                                Ok(job) => group.push(job),
                                Err(_) => break,
                            }
                        }
                        if group.len() == before || group.len() >= max_group || carried.is_some() {
                            break;
                        }
                    }
                }
            }
        }
        if ctx.backend == Backend::Postgres {
            // Protocol rows in one global order (agents are locked up front).
            group.sort_by_key(|job| {
                let locks = job.write.locks();
                (locks.agent, locks.protocol)
            });
        }
        debug!(writer = n, size = group.len(), "committing write group");
        commit_group(&pool, &ctx, &mut held, group).await;
    }
    if let Some(job) = carried {
        job.reply(Err(Error::Storage(StorageError::Closed)));
    }
    debug!(writer = n, "writer stopped: every handle dropped");
}

/// The connection a writer runs its groups on. On SQLite (one writer task) it is kept from one
/// group to the next while every write of a group succeeds: a connection going back to sqlx's
/// pool is pinged first (a round trip to its worker thread, about 0.1 ms here) and is not
/// available until then, so with the one write connection every lone acknowledgement waited
/// for the previous one's ping. A group with a failed write gives it back (a rollback that
/// failed has marked it to be closed; the pool's ping checks any other), and the writer takes
/// one again for its next group. PostgreSQL's writers take one per group: several writers share
/// the pool, and one idle for a second is pinged before it is handed out, so a connection the
/// server dropped meanwhile is replaced before it is used (`db::pool`). A
/// kept connection goes back when the pool closes ([`Held::wait`]), so `Database::close` never
/// waits for it.
struct Held {
    keep: bool,
    conn: Option<crate::sql::Pooled>,
}

impl Held {
    fn new(backend: Backend) -> Self {
        Self {
            keep: backend == Backend::Sqlite,
            conn: None,
        }
    }

    /// The next job of the queue; a kept connection is given back as soon as the pool closes.
    async fn wait(&mut self, pool: &Pool, rx: &mut mpsc::Receiver<Job>) -> Option<Job> {
        if self.conn.is_none() {
            return rx.recv().await;
        }
        tokio::select! {
            job = rx.recv() => job,
            () = pool.close_event() => {
                self.conn = None;
                rx.recv().await
            }
        }
    }

    /// The connection, taken from the pool when none is held.
    async fn get(&mut self, pool: &Pool) -> Result<&mut crate::sql::Pooled> {
        let conn = match self.conn.take() {
            Some(conn) => conn,
            None => pool.acquire().await?,
        };
        Ok(self.conn.insert(conn))
    }

    /// After a group: keeps the connection only on SQLite, after writes that all succeeded, while
    /// the pool is open.
    fn settle(&mut self, pool: &Pool, outcomes: &[Result<()>]) {
        if !self.keep || outcomes.iter().any(Result::is_err) || pool.is_closed() {
            self.conn = None;
        }
    }
}

/// Runs a group, again when it hit a lock conflict, and replies to every job.
async fn commit_group(pool: &Pool, ctx: &Ctx, held: &mut Held, group: Vec<Job>) {
    let mut attempt = 0;
    loop {
        attempt += 1;
        let outcomes = attempt_group(pool, ctx, held, &group).await;
        held.settle(pool, &outcomes);
        let conflict = outcomes
            .iter()
            .any(|o| matches!(o, Err(e) if e.is_lock_conflict()));
        if conflict && attempt < CONFLICT_ATTEMPTS {
            // Everything of this attempt was rolled back: run it again after a short pause.
            let pause = 2u64.pow(attempt) + u64::from(jitter()) % 8;
            debug!(attempt, "write group hit a lock conflict; running it again");
            tokio::time::sleep(Duration::from_millis(pause)).await;
            continue;
        }
        if conflict {
            warn!(
                attempts = attempt,
                "write group kept hitting lock conflicts; its writes fail"
            );
        }
        for (job, outcome) in group.into_iter().zip(outcomes) {
            job.reply(outcome);
        }
        return;
    }
}

fn jitter() -> u8 {
    let mut b = [0u8; 1];
    let _ = getrandom::fill(&mut b);
    b[0]
}

/// One attempt: the outcome of every job. When a lock conflict aborted the attempt, nothing of
/// it is committed and every outcome is an error (the conflict for at least one).
async fn attempt_group(pool: &Pool, ctx: &Ctx, held: &mut Held, group: &[Job]) -> Vec<Result<()>> {
    let conn = match held.get(pool).await {
        Ok(conn) => conn,
        Err(e) => return fail_all(group, &e),
    };
    if let Some(outcome) = run_alone(conn, ctx, group).await {
        return vec![outcome];
    }
    // `BEGIN IMMEDIATE` on SQLite: the write lock up front, so no lock upgrade fails half-way.
    let mut tx = match conn.begin_write().await.map_err(Error::from) {
        Ok(tx) => tx,
        Err(e) => return fail_all(group, &e),
    };
    if let Err(e) = lock_up_front(&mut tx, ctx, group).await {
        let _ = tx.rollback().await;
        // The first job keeps the error itself (a lock conflict makes the group run again).
        let rest = group
            .iter()
            .skip(1)
            .map(|_| Err(same_error(&e)))
            .collect::<Vec<_>>();
        return std::iter::once(Err(e)).chain(rest).collect();
    }
    if group.len() == 1 {
        let job = &group[0];
        let result = run_job(&mut tx, ctx, job).await;
        return vec![match result {
            Ok(()) => tx.commit().await.map_err(Error::from),
            Err(e) => {
                if let Err(rb) = tx.rollback().await {
                    warn!(error = %rb, "rollback after a failed write failed");
                }
                Err(e)
            }
        }];
    }

    let mut outcomes: Vec<Option<Result<()>>> = group.iter().map(|_| None).collect();
    match run_group(&mut tx, ctx, group, &mut outcomes).await {
        Ok(())
            if !outcomes
                .iter()
                .any(|o| matches!(o, Some(Err(e)) if e.is_lock_conflict())) =>
        {
            if let Err(e) = tx.commit().await {
                let shared = Arc::new(e);
                for outcome in outcomes.iter_mut() {
                    if matches!(outcome, Some(Ok(_))) {
                        *outcome = Some(Err(Error::Storage(StorageError::Commit(shared.clone()))));
                    }
                }
            }
        }
        Ok(()) => {
            // A lock conflict inside one op aborted the transaction's locks: run it all again.
            let _ = tx.rollback().await;
            let shared = Arc::new(sqlx::Error::Protocol(
                "the write group was rolled back after a lock conflict".into(),
            ));
            for outcome in outcomes.iter_mut() {
                if matches!(outcome, Some(Ok(_)) | None) {
                    *outcome = Some(Err(Error::Storage(StorageError::Commit(shared.clone()))));
                }
            }
        }
        Err(e) => {
            // The transaction itself broke (connection lost, savepoint refused): nothing of the
            // group is committed, so no write of it may be acknowledged.
            let _ = tx.rollback().await;
            let conflict = crate::error::sqlx_lock_conflict(&e);
            let shared = Arc::new(sqlx::Error::Protocol(format!("write group aborted: {e}")));
            let first = Arc::new(e);
            for outcome in outcomes.iter_mut() {
                if !matches!(outcome, Some(Err(_))) {
                    *outcome = Some(Err(if conflict {
                        Error::Storage(StorageError::Commit(first.clone()))
                    } else {
                        Error::Storage(StorageError::Commit(shared.clone()))
                    }));
                }
            }
        }
    }
    outcomes
        .into_iter()
        .map(|o| o.unwrap_or(Err(Error::Storage(StorageError::Closed))))
        .collect()
}

/// A group of one write without a fence runs in one round trip when the write has a form for
/// it ([`Write::apply_alone`]), instead of `BEGIN`, the write's statements and `COMMIT`: a
/// `begin_batch` without a parent or retry (`ops::begin_batch_alone`: on PostgreSQL one
/// autocommitted call that locks, reads and writes; on SQLite one text of statements that is its
/// own transaction), a completion on SQLite (`ops::complete_batch_alone`). `None` when that does
/// not apply, or when it stored nothing (a run holds the agent, a newer position exists, the
/// agent is unknown, the write found what needs its full rules): the transactional path then
/// runs it.
async fn run_alone(
    pooled: &mut crate::sql::Pooled,
    ctx: &Ctx,
    group: &[Job],
) -> Option<Result<()>> {
    let [job] = group else {
        return None;
    };
    if job.fence.is_some() || !job.write.has_alone_form(ctx) {
        return None;
    }
    match job.write.run_alone(pooled, ctx).await {
        Ok(true) => Some(Ok(())),
        Ok(false) => {
            debug!(
                "a lone write stored nothing in one round trip; it runs on the transactional path"
            );
            None
        }
        Err(e) => Some(Err(e)),
    }
}

/// The same failure for every job of a group that could not start.
fn same_error(e: &Error) -> Error {
    Error::Storage(StorageError::Commit(Arc::new(sqlx::Error::Protocol(
        format!("cannot lock for the write: {e}"),
    ))))
}

/// PostgreSQL: the change-log advisory lock (when needed), then the row locks of every agent
/// the group writes, in agent order, in one statement.
async fn lock_up_front(tx: &mut crate::sql::Tx<'_>, ctx: &Ctx, group: &[Job]) -> Result<()> {
    if group.iter().any(|job| job.write.locks().logs_changes) {
        // PostgreSQL: the search change-log lock before any agent row lock (see
        // `Locks::logs_changes`).
        ops::search::change_lock(&mut tx.conn(), ctx.backend).await?;
    }
    if ctx.backend != Backend::Postgres {
        return Ok(());
    }
    if let [job] = group
        && job.fence.is_none()
        && job.write.bulk_begin().is_some()
    {
        // Its one call locks its agent's row first (see the module doc): one round trip less.
        return Ok(());
    }
    let mut agents = Vec::with_capacity(group.len() + 1);
    for job in group {
        job.agents(&mut agents);
    }
    agents.sort_unstable();
    agents.dedup();
    for chunk in agents.chunks(256) {
        // The list is padded (repeating the last id) to one of a few lengths, so the statement
        // text repeats and stays prepared. Rows are locked in the order the sort gives them.
        let width = [1, 4, 16, 64, 256]
            .into_iter()
            .find(|w| *w >= chunk.len())
            .unwrap_or(256);
        let sql = format!(
            "SELECT id FROM agents WHERE id IN {} ORDER BY id FOR NO KEY UPDATE",
            ops::placeholders(1, width, 1)
        );
        let mut q = crate::sql::query(sqlx::AssertSqlSafe(sql));
        for i in 0..width {
            q = q.bind(chunk[i.min(chunk.len() - 1)].to_string());
        }
        q.fetch_all(&mut *tx).await?;
    }
    Ok(())
}

/// One job: its fence (when a run writes it), then the write.
async fn run_job(tx: &mut crate::sql::Tx<'_>, ctx: &Ctx, job: &Job) -> Result<()> {
    if let Some(fence) = &job.fence {
        ops::runs::check_fence(&mut tx.conn(), ctx, fence).await?;
    }
    job.write.run(&mut tx.conn(), ctx, job.fence.as_ref()).await
}

/// Runs every op of a group inside `tx`, each isolated by a savepoint so that one failing op
/// leaves the others intact. `begin_batch` calls without a claim go first, together, through
/// the bulk path (three statements for the lot); if that fails they are retried one by one.
/// Stops at the first lock conflict (the caller runs the whole group again).
///
/// On SQLite the `RELEASE` that ends a savepoint is sent in one text with the `SAVEPOINT` that
/// begins the next op, and the last one is left to the `COMMIT` (which releases every savepoint)
/// or the rollback: one round trip to the connection's worker thread less per op. A savepoint is
/// still released before the next one begins, so SQLite's statement journal is emptied after
/// each op (it stays small, in memory) and a failing op rolls back to its own savepoint only.
async fn run_group(
    tx: &mut crate::sql::Tx<'_>,
    ctx: &Ctx,
    group: &[Job],
    outcomes: &mut [Option<Result<()>>],
) -> std::result::Result<(), sqlx::Error> {
    let mut begins = Vec::new();
    let mut calls = Vec::new();
    for (i, job) in group.iter().enumerate() {
        if let Some((agent, trigger, opts)) = job.write.bulk_begin()
            && opts.parent_batch.is_none()
            && opts.retry_of.is_none()
            && job.fence.is_none()
        {
            begins.push(i);
            calls.push((agent, trigger, opts));
        }
    }
    // SQLite: the savepoint whose `RELEASE` waits for the next `SAVEPOINT` (see above).
    let mut unreleased: Option<Savepoint> = None;
    if begins.len() >= 2 {
        crate::sql::query("SAVEPOINT pattern_bulk")
            .execute(&mut *tx)
            .await?;
        match ops::begin_batches_bulk(&mut tx.conn(), ctx, &calls).await {
            Ok(results) => {
                unreleased = Savepoint::Bulk.end(tx, ctx).await?;
                for (i, result) in begins.into_iter().zip(results) {
                    outcomes[i] = Some(result.and_then(|r| group[i].write.set_received(r)));
                }
            }
            Err(e) => {
                debug!(error = %e, "bulk begin_batch failed; running the calls one by one");
                crate::sql::query("ROLLBACK TO SAVEPOINT pattern_bulk")
                    .execute(&mut *tx)
                    .await?;
                crate::sql::query("RELEASE SAVEPOINT pattern_bulk")
                    .execute(&mut *tx)
                    .await?;
                if e.is_lock_conflict() {
                    outcomes[begins[0]] = Some(Err(e));
                    return Ok(());
                }
            }
        }
    }
    for (job, outcome) in group.iter().zip(outcomes.iter_mut()) {
        if outcome.is_some() {
            continue;
        }
        crate::sql::query(Savepoint::begin_op_after(unreleased.take()))
            .execute(&mut *tx)
            .await?;
        let result = run_job(tx, ctx, job).await;
        if result.is_err() {
            crate::sql::query("ROLLBACK TO SAVEPOINT pattern_op")
                .execute(&mut *tx)
                .await?;
        }
        unreleased = Savepoint::Op.end(tx, ctx).await?;
        let conflict = matches!(&result, Err(e) if e.is_lock_conflict());
        *outcome = Some(result);
        if conflict {
            return Ok(());
        }
    }
    Ok(())
}

/// A savepoint of [`run_group`] still to release.
#[derive(Clone, Copy)]
enum Savepoint {
    /// `pattern_bulk`, around the bulk `begin_batch` calls.
    Bulk,
    /// `pattern_op`, around one op.
    Op,
}

impl Savepoint {
    /// Ends this savepoint after its work: on PostgreSQL its `RELEASE` now (`None`), on SQLite
    /// nothing yet: it is returned, to be released with the next savepoint or by `COMMIT`.
    async fn end(
        self,
        tx: &mut crate::sql::Tx<'_>,
        ctx: &Ctx,
    ) -> std::result::Result<Option<Self>, sqlx::Error> {
        if ctx.backend == Backend::Sqlite {
            return Ok(Some(self));
        }
        let release = match self {
            Self::Bulk => "RELEASE SAVEPOINT pattern_bulk",
            Self::Op => "RELEASE SAVEPOINT pattern_op",
        };
        crate::sql::query(release).execute(&mut *tx).await?;
        Ok(None)
    }

    /// The text that begins an op's savepoint, releasing `unreleased` first in the same text.
    fn begin_op_after(unreleased: Option<Self>) -> &'static str {
        match unreleased {
            None => "SAVEPOINT pattern_op",
            Some(Self::Bulk) => "RELEASE SAVEPOINT pattern_bulk; SAVEPOINT pattern_op",
            Some(Self::Op) => "RELEASE SAVEPOINT pattern_op; SAVEPOINT pattern_op",
        }
    }
}

fn fail_all(group: &[Job], e: &Error) -> Vec<Result<()>> {
    let shared = Arc::new(sqlx::Error::Protocol(format!(
        "cannot begin a transaction: {e}"
    )));
    group
        .iter()
        .map(|_| Err(Error::Storage(StorageError::Commit(shared.clone()))))
        .collect()
}
