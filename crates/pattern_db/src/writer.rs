//! The group-commit writer: every write of the store goes through here.
//!
//! Callers queue an [`Op`] and wait for its reply. A writer task takes the first waiting op plus
//! every op already queued behind it (up to `max_group`), runs them in one transaction, each inside
//! its own savepoint, and commits once: one fsync serves the whole group. An op that fails is
//! rolled back to its savepoint alone and its caller gets the error; the others commit. No reply is
//! sent before the commit that makes it durable has returned.
//!
//! SQLite has exactly one writer task (SQLite allows one writer at a time anyway); PostgreSQL has
//! several, and each group takes its agent row locks in agent order so groups never deadlock.
//! This module must never reply `Ok` to a write that is not committed.

use std::sync::Arc;

use sqlx::{Any, AnyPool, Transaction};
use tokio::sync::{Mutex, mpsc, oneshot};
use tracing::{debug, warn};

use crate::config::Backend;
use crate::error::{Error, Result};
use crate::ops::{self, Ctx, Done, Op};

struct Job {
    op: Op,
    reply: oneshot::Sender<Result<Done>>,
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

    /// Queues an op and waits until it is committed (or failed).
    pub(crate) async fn submit(&self, op: Op) -> Result<Done> {
        let (reply, rx) = oneshot::channel();
        self.tx
            .send(Job { op, reply })
            .await
            .map_err(|_| Error::Closed)?;
        rx.await.map_err(|_| Error::Closed)?
    }
}

async fn run(
    n: usize,
    pool: AnyPool,
    ctx: Arc<Ctx>,
    rx: Arc<Mutex<mpsc::Receiver<Job>>>,
    max_group: usize,
) {
    loop {
        let mut group = Vec::new();
        {
            let mut rx = rx.lock().await;
            match rx.recv().await {
                Some(job) => group.push(job),
                None => break,
            }
            while group.len() < max_group {
                match rx.try_recv() {
                    Ok(job) => group.push(job),
                    Err(_) => break,
                }
            }
        }
        if ctx.backend == Backend::Postgres {
            // Lock agents, then protocol sessions, in one global order: groups of different
            // writers never deadlock.
            group.sort_by_key(|job| (job.op.agent_key(), job.op.protocol_key()));
        }
        debug!(writer = n, size = group.len(), "committing write group");
        commit_group(&pool, &ctx, group).await;
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

async fn commit_group(pool: &AnyPool, ctx: &Ctx, group: Vec<Job>) {
    let mut tx = match begin(pool, ctx.backend).await {
        Ok(tx) => tx,
        Err(e) => return fail_all(group, &e),
    };
    if group.iter().any(|job| job.op.logs_changes()) {
        // PostgreSQL: the search change-log lock before any agent row lock (see
        // `Op::logs_changes`).
        if let Err(e) = ops::search::change_lock(&mut tx, ctx.backend).await {
            let _ = tx.rollback().await;
            return fail_all(group, &e);
        }
    }
    if group.len() == 1 {
        let mut group = group;
        let Some(job) = group.pop() else { return };
        match ops::apply(&mut tx, ctx, &job.op).await {
            Ok(done) => {
                let result = tx.commit().await.map(|()| done).map_err(Error::from);
                let _ = job.reply.send(result);
            }
            Err(e) => {
                if let Err(rb) = tx.rollback().await {
                    warn!(error = %rb, "rollback after a failed write failed");
                }
                let _ = job.reply.send(Err(e));
            }
        }
        return;
    }

    let mut outcomes: Vec<Option<Result<Done>>> = group.iter().map(|_| None).collect();
    match run_group(&mut tx, ctx, &group, &mut outcomes).await {
        Ok(()) => {
            if let Err(e) = tx.commit().await {
                let shared = Arc::new(e);
                for outcome in outcomes.iter_mut() {
                    if matches!(outcome, Some(Ok(_))) {
                        *outcome = Some(Err(Error::Commit(shared.clone())));
                    }
                }
            }
        }
        Err(e) => {
            // The transaction itself broke (connection lost, savepoint refused): nothing of the
            // group is committed, so no write of it may be acknowledged.
            let _ = tx.rollback().await;
            let shared = Arc::new(sqlx::Error::Protocol(format!("write group aborted: {e}")));
            for outcome in outcomes.iter_mut() {
                if !matches!(outcome, Some(Err(_))) {
                    *outcome = Some(Err(Error::Commit(shared.clone())));
                }
            }
        }
    }
    for (job, outcome) in group.into_iter().zip(outcomes) {
        let _ = job.reply.send(outcome.unwrap_or(Err(Error::Closed)));
    }
}

/// Runs every op of a group inside `tx`, each isolated by a savepoint so that one failing op
/// leaves the others intact. `begin_batch` calls go first, together, through the bulk path
/// (three statements for the lot); if that fails they are retried one by one.
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
        let result = ops::apply(tx, ctx, &job.op).await;
        if result.is_err() {
            sqlx::query("ROLLBACK TO SAVEPOINT pattern_op")
                .execute(&mut **tx)
                .await?;
        }
        sqlx::query("RELEASE SAVEPOINT pattern_op")
            .execute(&mut **tx)
            .await?;
        *outcome = Some(result);
    }
    Ok(())
}

fn fail_all(group: Vec<Job>, e: &Error) {
    let shared = Arc::new(sqlx::Error::Protocol(format!(
        "cannot begin a transaction: {e}"
    )));
    for job in group {
        let _ = job.reply.send(Err(Error::Commit(shared.clone())));
    }
}
