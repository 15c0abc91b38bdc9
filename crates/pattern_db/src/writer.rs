//! The group-commit writer: every write of the store goes through here.
//!
//! Callers queue an [`Op`] and wait for its reply. A writer task takes the first waiting op plus
//! every op already queued behind it (up to `max_group`), runs them in one transaction, each inside
//! its own savepoint, and commits once: one fsync serves the whole group. An op that fails is
//! rolled back to its savepoint alone and its caller gets the error; the others commit. No reply is
//! sent before the commit that makes it durable has returned.
//!
//! **Lock order.** SQLite has exactly one writer task (SQLite allows one writer at a time
//! anyway). PostgreSQL has several, and every transaction takes its row locks in one global
//! order: the search change-log advisory lock first (when an op of the group logs changes), then
//! every agent the group writes (each op's agent, and the agent of each run whose claim fences
//! an op) in agent id order, in one statement, before any op runs; then the protocol rows of the
//! ops in the group's sorted order. Recovery across agents, which discovers the agents it locks
//! as it goes, runs alone in its own transaction and takes them in agent order too. A deadlock or
//! serialization failure that still happens (another process's transaction, a foreign-key check)
//! rolls the whole group back and it runs again, a few times, before any caller hears of it.
//!
//! **Fences.** An op written by a run carries the run's claim; before the op runs, the claim is
//! checked under its agent's lock, and a claim taken over refuses the op with
//! [`Error::ClaimLost`](crate::Error::ClaimLost). This module must never reply `Ok` to a write
//! that is not committed, and never run a fenced op whose claim is not current.

use std::sync::Arc;
use std::time::Duration;

use sqlx::{Any, AnyPool, Transaction};
use tokio::sync::{Mutex, mpsc, oneshot};
use tracing::{debug, warn};

use crate::config::Backend;
use crate::error::{Error, Result};
use crate::model::AgentId;
use crate::ops::{self, Ctx, Done, Op};
use crate::runs::RunClaim;

/// How often a group that hit a deadlock or serialization failure runs again before its
/// callers get the error.
const CONFLICT_ATTEMPTS: u32 = 6;

pub(crate) struct Job {
    pub(crate) op: Op,
    pub(crate) fence: Option<RunClaim>,
    pub(crate) reply: oneshot::Sender<Result<Done>>,
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
        pool: AnyPool,
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

    /// Queues an op (fenced by `fence` when a run writes it) and waits until it is committed
    /// (or failed).
    pub(crate) async fn submit(&self, op: Op, fence: Option<RunClaim>) -> Result<Done> {
        let (reply, rx) = oneshot::channel();
        self.tx
            .send(Job { op, fence, reply })
            .await
            .map_err(|_| Error::Closed)?;
        rx.await.map_err(|_| Error::Closed)?
    }
}

impl Job {
    /// The agents whose row locks this job needs before it runs.
    fn agents(&self, out: &mut Vec<AgentId>) {
        out.extend(self.op.agent_key());
        out.extend(self.fence.map(|f| f.agent));
    }
}

async fn run(
    n: usize,
    pool: AnyPool,
    ctx: Arc<Ctx>,
    rx: Arc<Mutex<mpsc::Receiver<Job>>>,
    max_group: usize,
) {
    // An exclusive op met while collecting a group waits for the next round, alone.
    let mut carried: Option<Job> = None;
    loop {
        let mut group = Vec::new();
        match carried.take() {
            Some(job) => group.push(job),
            None => {
                let mut rx = rx.lock().await;
                match rx.recv().await {
                    Some(job) => group.push(job),
                    None => break,
                }
                if !group[0].op.exclusive() {
                    while group.len() < max_group {
                        match rx.try_recv() {
                            Ok(job) if job.op.exclusive() => {
                                carried = Some(job);
                                break;
                            }
                            Ok(job) => group.push(job),
                            Err(_) => break,
                        }
                    }
                }
            }
        }
        if ctx.backend == Backend::Postgres {
            // Protocol rows in one global order (agents are locked up front).
            group.sort_by_key(|job| (job.op.agent_key(), job.op.protocol_key()));
        }
        debug!(writer = n, size = group.len(), "committing write group");
        commit_group(&pool, &ctx, group).await;
    }
    if let Some(job) = carried {
        let _ = job.reply.send(Err(Error::Closed));
    }
    debug!(writer = n, "writer stopped: every handle dropped");
}

async fn begin(pool: &AnyPool, backend: Backend) -> Result<Transaction<'static, Any>> {
    Ok(match backend {
        // IMMEDIATE takes the write lock up front: no lock upgrade can fail half-way.
        Backend::Sqlite => pool.begin_with("BEGIN IMMEDIATE").await?,
        Backend::Postgres => pool.begin().await?,
    })
}

/// Runs a group, again when it hit a lock conflict, and replies to every job.
async fn commit_group(pool: &AnyPool, ctx: &Ctx, group: Vec<Job>) {
    let mut attempt = 0;
    loop {
        attempt += 1;
        let outcomes = attempt_group(pool, ctx, &group).await;
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
            let _ = job.reply.send(outcome);
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
async fn attempt_group(pool: &AnyPool, ctx: &Ctx, group: &[Job]) -> Vec<Result<Done>> {
    let mut tx = match begin(pool, ctx.backend).await {
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
            Ok(done) => tx.commit().await.map(|()| done).map_err(Error::from),
            Err(e) => {
                if let Err(rb) = tx.rollback().await {
                    warn!(error = %rb, "rollback after a failed write failed");
                }
                Err(e)
            }
        }];
    }

    let mut outcomes: Vec<Option<Result<Done>>> = group.iter().map(|_| None).collect();
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
                        *outcome = Some(Err(Error::Commit(shared.clone())));
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
                    *outcome = Some(Err(Error::Commit(shared.clone())));
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
                        Error::Commit(first.clone())
                    } else {
                        Error::Commit(shared.clone())
                    }));
                }
            }
        }
    }
    outcomes
        .into_iter()
        .map(|o| o.unwrap_or(Err(Error::Closed)))
        .collect()
}

/// The same failure for every job of a group that could not start.
fn same_error(e: &Error) -> Error {
    Error::Commit(Arc::new(sqlx::Error::Protocol(format!(
        "cannot lock for the write: {e}"
    ))))
}

/// PostgreSQL: the change-log advisory lock (when needed), then the row locks of every agent
/// the group writes, in agent order, in one statement.
async fn lock_up_front(tx: &mut Transaction<'static, Any>, ctx: &Ctx, group: &[Job]) -> Result<()> {
    if group.iter().any(|job| job.op.logs_changes()) {
        // PostgreSQL: the search change-log lock before any agent row lock (see
        // `Op::logs_changes`).
        ops::search::change_lock(tx, ctx.backend).await?;
    }
    if ctx.backend != Backend::Postgres {
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
        let mut q = sqlx::query(sqlx::AssertSqlSafe(sql));
        for i in 0..width {
            q = q.bind(chunk[i.min(chunk.len() - 1)].to_string());
        }
        q.fetch_all(&mut **tx).await?;
    }
    Ok(())
}

/// One job: its fence (when a run writes it), then the op.
async fn run_job(tx: &mut Transaction<'static, Any>, ctx: &Ctx, job: &Job) -> Result<Done> {
    if let Some(fence) = &job.fence {
        ops::runs::check_fence(tx, ctx, fence).await?;
    }
    ops::apply(tx, ctx, &job.op, job.fence.as_ref()).await
}

/// Runs every op of a group inside `tx`, each isolated by a savepoint so that one failing op
/// leaves the others intact. `begin_batch` calls without a claim go first, together, through
/// the bulk path (three statements for the lot); if that fails they are retried one by one.
/// Stops at the first lock conflict (the caller runs the whole group again).
async fn run_group(
    tx: &mut Transaction<'static, Any>,
    ctx: &Ctx,
    group: &[Job],
    outcomes: &mut [Option<Result<Done>>],
) -> std::result::Result<(), sqlx::Error> {
    let mut begins = Vec::new();
    let mut calls = Vec::new();
    for (i, job) in group.iter().enumerate() {
        if let Op::BeginBatch {
            agent,
            trigger,
            opts,
        } = &job.op
            && opts.parent_batch.is_none()
            && opts.retry_of.is_none()
            && job.fence.is_none()
        {
            begins.push(i);
            calls.push((*agent, trigger, opts));
        }
    }
    if begins.len() >= 2 {
        sqlx::query("SAVEPOINT pattern_bulk")
            .execute(&mut **tx)
            .await?;
        match ops::begin_batches_bulk(tx, ctx, &calls).await {
            Ok(results) => {
                sqlx::query("RELEASE SAVEPOINT pattern_bulk")
                    .execute(&mut **tx)
                    .await?;
                for (i, result) in begins.into_iter().zip(results) {
                    outcomes[i] = Some(result.map(Done::Received));
                }
            }
            Err(e) => {
                debug!(error = %e, "bulk begin_batch failed; running the calls one by one");
                sqlx::query("ROLLBACK TO SAVEPOINT pattern_bulk")
                    .execute(&mut **tx)
                    .await?;
                sqlx::query("RELEASE SAVEPOINT pattern_bulk")
                    .execute(&mut **tx)
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
        sqlx::query("SAVEPOINT pattern_op")
            .execute(&mut **tx)
            .await?;
        let result = run_job(tx, ctx, job).await;
        if result.is_err() {
            sqlx::query("ROLLBACK TO SAVEPOINT pattern_op")
                .execute(&mut **tx)
                .await?;
        }
        sqlx::query("RELEASE SAVEPOINT pattern_op")
            .execute(&mut **tx)
            .await?;
        let conflict = matches!(&result, Err(e) if e.is_lock_conflict());
        *outcome = Some(result);
        if conflict {
            return Ok(());
        }
    }
    Ok(())
}

fn fail_all(group: &[Job], e: &Error) -> Vec<Result<Done>> {
    let shared = Arc::new(sqlx::Error::Protocol(format!(
        "cannot begin a transaction: {e}"
    )));
    group
        .iter()
        .map(|_| Err(Error::Commit(shared.clone())))
        .collect()
}
