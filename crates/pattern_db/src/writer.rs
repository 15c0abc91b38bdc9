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
        f.debug_struct("Writer").field("queued", &(self.tx.max_capacity() - self.tx.capacity())).finish()
    }
}

impl Writer {
    /// Starts `tasks` writer tasks over `pool`.
    pub(crate) fn start(pool: AnyPool, ctx: Arc<Ctx>, tasks: usize, capacity: usize, max_group: usize) -> Self {
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
        self.tx.send(Job { op, reply }).await.map_err(|_| Error::Closed)?;
        rx.await.map_err(|_| Error::Closed)?
    }
}

async fn run(n: usize, pool: AnyPool, ctx: Arc<Ctx>, rx: Arc<Mutex<mpsc::Receiver<Job>>>, max_group: usize) {
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
            // Lock agents in one global order: groups of different writers never deadlock.
            group.sort_by_key(|job| job.op.agent_key());
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

    let mut results: Vec<(oneshot::Sender<Result<Done>>, Result<Done>)> = Vec::with_capacity(group.len());
    let mut broken: Option<Error> = None;
    for job in group {
        if let Some(e) = &broken {
            results.push((job.reply, Err(Error::Commit(Arc::new(sqlx::Error::Protocol(e.to_string()))))));
            continue;
        }
        if let Err(e) = sqlx::query("SAVEPOINT pattern_op").execute(&mut *tx).await {
            broken = Some(e.into());
            results.push((job.reply, Err(Error::Closed)));
            continue;
        }
        match ops::apply(&mut tx, ctx, &job.op).await {
            Ok(done) => match sqlx::query("RELEASE SAVEPOINT pattern_op").execute(&mut *tx).await {
                Ok(_) => results.push((job.reply, Ok(done))),
                Err(e) => {
                    broken = Some(e.into());
                    results.push((job.reply, Err(Error::Closed)));
                }
            },
            Err(err) => {
                let undo = async {
                    sqlx::query("ROLLBACK TO SAVEPOINT pattern_op").execute(&mut *tx).await?;
                    sqlx::query("RELEASE SAVEPOINT pattern_op").execute(&mut *tx).await
                };
                if let Err(e) = undo.await {
                    broken = Some(e.into());
                }
                results.push((job.reply, Err(err)));
            }
        }
    }
    if let Some(e) = broken {
        // The transaction is unusable: nothing of this group is committed.
        let _ = tx.rollback().await;
        let shared = Arc::new(sqlx::Error::Protocol(format!("write group aborted: {e}")));
        for (reply, result) in results {
            let _ = reply.send(match result {
                Ok(_) => Err(Error::Commit(shared.clone())),
                Err(err) => Err(err),
            });
        }
        return;
    }
    match tx.commit().await {
        Ok(()) => {
            for (reply, result) in results {
                let _ = reply.send(result);
            }
        }
        Err(e) => {
            let shared = Arc::new(e);
            for (reply, result) in results {
                let _ = reply.send(match result {
                    Ok(_) => Err(Error::Commit(shared.clone())),
                    Err(err) => Err(err),
                });
            }
        }
    }
}

fn fail_all(group: Vec<Job>, e: &Error) {
    let shared = Arc::new(sqlx::Error::Protocol(format!("cannot begin a transaction: {e}")));
    for job in group {
        let _ = job.reply.send(Err(Error::Commit(shared.clone())));
    }
}
