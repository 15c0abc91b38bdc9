//! Counts an operator watches (exported as gauges by `pattern serve`'s `/metrics`): open
//! batches, queued triggers, runs holding agents, embedding jobs waiting. Each is one read over
//! a partial index, so reading them at every scrape costs little at any history length.
//!
//! This module must never write, and never count per organization or per agent (a scrape reads
//! the whole database; per-agent detail belongs to the agent's own routes).

use crate::db::Database;
use crate::error::Result;
use crate::ops::now_ms;
use crate::sql::Conn;

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
        let now = now_ms();
        let mut pooled = self.reader().acquire().await?;
        let row = match &mut pooled.conn() {
            Conn::Sqlite(c) => {
                let r = pattern_db_sqlite::stats::gauges(c, now).await?;
                [
                    r.open_batches,
                    r.queued,
                    r.queued_due,
                    r.running,
                    r.embedding_jobs,
                ]
            }
            Conn::Postgres(c) => {
                let r = pattern_db_postgres::stats::gauges(c, crate::sql::instant(now)?).await?;
                [
                    r.open_batches,
                    r.queued,
                    r.queued_due,
                    r.running,
                    r.embedding_jobs,
                ]
            }
        };
        let count = |i: usize| -> Result<u64> { Ok(u64::try_from(row[i]).unwrap_or(0)) };
        Ok(Gauges {
            open_batches: count(0)?,
            queued: count(1)?,
            queued_due: count(2)?,
            running: count(3)?,
            embedding_jobs: count(4)?,
        })
    }
}
