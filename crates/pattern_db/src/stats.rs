//! Counts an operator watches (exported as gauges by `pattern serve`'s `/metrics`): open
//! batches, queued triggers, runs holding agents, embedding jobs waiting. Each is one read over
//! a partial index, so reading them at every scrape costs little at any history length.
//!
//! This module must never write, and never count per organization or per agent (a scrape reads
//! the whole database; per-agent detail belongs to the agent's own routes).

use crate::db::Database;
use crate::error::Result;
use crate::ops::now_ms;

/// Database-wide counts at one moment (each read on its own; they need not agree exactly).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Gauges {
    /// Batches in state `open` (running, or left by a crash until recovery abandons them).
    pub open_batches: u64,
    /// Queued triggers not yet delivered (due or scheduled for later).
    pub queued: u64,
    /// Queued triggers due now and not yet delivered.
    pub queued_due: u64,
    /// Agents a run holds now (by any process).
    pub running: u64,
    /// Embedding jobs waiting (claimed or not).
    pub embedding_jobs: u64,
}

impl Database {
    /// Reads the [`Gauges`].
    pub async fn gauges(&self) -> Result<Gauges> {
        let pool = self.reader();
        let row = crate::sql::query(
            "SELECT \
               (SELECT COUNT(*) FROM batches WHERE state = 'open'), \
               (SELECT COUNT(*) FROM agent_queue WHERE delivered_at IS NULL), \
               (SELECT COUNT(*) FROM agent_queue WHERE delivered_at IS NULL AND deliver_at <= $1), \
               (SELECT COUNT(*) FROM agent_runs WHERE holder IS NOT NULL), \
               (SELECT COUNT(*) FROM embedding_jobs)",
        )
        .bind(now_ms())
        .fetch_one(pool)
        .await?;
        let count = |i: usize| -> Result<u64> {
            let n: i64 = row.try_get(i)?;
            Ok(u64::try_from(n).unwrap_or(0))
        };
        Ok(Gauges {
            open_batches: count(0)?,
            queued: count(1)?,
            queued_due: count(2)?,
            running: count(3)?,
            embedding_jobs: count(4)?,
        })
    }
}
