//! A read-only look at what the servers stored: open batches with their run owners, every
//! batch's state, the trigger message of every batch, and pending queue entries, read straight
//! from the tables with `pattern_db::testkit::fetch_texts`.
//!
//! The handle is opened without migrating and with a fixed machine id, so opening it writes
//! nothing (no machine-id lease); every query is a `SELECT`. This module must never write to the
//! database, and never be used to decide what the product does (it only observes).

use std::collections::HashMap;
use std::time::Duration;

use pattern_db::testkit::{fetch_text_pairs, fetch_texts};
use pattern_db::{Database, DbConfig, MachineId};

/// An open batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenBatch {
    /// Its id.
    pub id: i64,
    /// Its agent.
    pub agent: String,
    /// `run_owner` (`-` when none).
    pub owner: String,
}

/// A batch's state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchRow {
    /// Its agent.
    pub agent: String,
    /// `open`, `complete` or `abandoned`.
    pub state: String,
    /// Whether `retried_at` is set.
    pub retried: bool,
}

/// Observes one database.
pub struct Probe {
    db: Database,
}

fn field<'a>(parts: &mut impl Iterator<Item = &'a str>, row: &str) -> Result<&'a str, String> {
    parts.next().ok_or_else(|| format!("malformed row `{row}`"))
}

fn num(s: &str, row: &str) -> Result<i64, String> {
    s.parse()
        .map_err(|_| format!("not a number in row `{row}`"))
}

impl Probe {
    /// Opens `url` (SQLite or PostgreSQL) for reading.
    pub async fn open(url: &str) -> Result<Self, String> {
        let mut config = DbConfig::new(url);
        config.migrate_on_open = false;
        config.machine_id = MachineId::Fixed(pattern_db::id::MAX_MACHINE_ID);
        config.read_connections = 1;
        config.pg_write_connections = 1;
        config.connect_timeout = Duration::from_secs(10);
        let db = Database::open(config)
            .await
            .map_err(|e| format!("probe: cannot open {url}: {e}"))?;
        Ok(Self { db })
    }

    async fn rows(&self, sql: &str) -> Result<Vec<String>, String> {
        fetch_texts(&self.db, sql)
            .await
            .map_err(|e| format!("probe query failed ({e}): {sql}"))
    }

    /// Every open batch.
    pub async fn open_batches(&self) -> Result<Vec<OpenBatch>, String> {
        let rows = self
            .rows(
                "SELECT CAST(id AS TEXT) || ' ' || agent_id || ' ' || COALESCE(run_owner, '-') \
                 FROM batches WHERE state = 'open'",
            )
            .await?;
        rows.iter()
            .map(|row| {
                let mut parts = row.splitn(3, ' ');
                Ok(OpenBatch {
                    id: num(field(&mut parts, row)?, row)?,
                    agent: field(&mut parts, row)?.to_owned(),
                    owner: field(&mut parts, row)?.to_owned(),
                })
            })
            .collect()
    }

    /// Every batch by id.
    pub async fn batches(&self) -> Result<HashMap<i64, BatchRow>, String> {
        let rows = self
            .rows(
                "SELECT CAST(id AS TEXT) || ' ' || agent_id || ' ' || state || ' ' || \
                 CASE WHEN retried_at IS NULL THEN '0' ELSE '1' END FROM batches",
            )
            .await?;
        rows.iter()
            .map(|row| {
                let mut parts = row.splitn(4, ' ');
                let id = num(field(&mut parts, row)?, row)?;
                Ok((
                    id,
                    BatchRow {
                        agent: field(&mut parts, row)?.to_owned(),
                        state: field(&mut parts, row)?.to_owned(),
                        retried: field(&mut parts, row)? == "1",
                    },
                ))
            })
            .collect()
    }

    /// The first message (sequence 0) of every batch: `(batch id, stored content)` (its JSON,
    /// or on SQLite the text of a message of one text block, compressed or not: markers are
    /// found in either).
    pub async fn triggers(&self) -> Result<Vec<(i64, String)>, String> {
        let rows = fetch_text_pairs(
            &self.db,
            "SELECT CAST(batch_id AS TEXT), content FROM messages WHERE sequence_num = 0",
        )
        .await
        .map_err(|e| e.to_string())?;
        rows.into_iter()
            .map(|(id, content)| Ok((num(&id, &id)?, content)))
            .collect()
    }

    /// Pending (undelivered) queue entries: `(entry id, content JSON)`.
    pub async fn pending_queue(&self) -> Result<Vec<(i64, String)>, String> {
        let rows = self
            .rows(
                "SELECT CAST(id AS TEXT) || ' ' || content FROM agent_queue \
                 WHERE delivered_at IS NULL",
            )
            .await?;
        rows.iter()
            .map(|row| {
                let (id, content) = row
                    .split_once(' ')
                    .ok_or_else(|| format!("malformed row `{row}`"))?;
                Ok((num(id, row)?, content.to_owned()))
            })
            .collect()
    }

    /// Polls (every 200 ms) until no batch is open and no queue entry is pending. Gives up when
    /// nothing moved (the count of open batches and pending entries did not fall) for `stall`,
    /// or after `cap` in all; says how long it took, or what was still there.
    pub async fn wait_quiet(&self, stall: Duration, cap: Duration) -> Result<Duration, String> {
        let started = std::time::Instant::now();
        let mut best = usize::MAX;
        let mut moved = started;
        loop {
            let open = self.open_batches().await?;
            let pending = self.pending_queue().await?;
            let left = open.len() + pending.len();
            if left == 0 {
                return Ok(started.elapsed());
            }
            if left < best {
                best = left;
                moved = std::time::Instant::now();
            }
            if moved.elapsed() >= stall || started.elapsed() >= cap {
                let shown: Vec<String> = open
                    .iter()
                    .take(20)
                    .map(|b| format!("{} (agent {}, owner {})", b.id, b.agent, b.owner))
                    .collect();
                return Err(format!(
                    "after {:.0} s ({:.0} s without progress), {} batch(es) still open and {} \
                     queue entr(ies) pending; open: {shown:?}; pending entries: {:?}",
                    started.elapsed().as_secs_f64(),
                    moved.elapsed().as_secs_f64(),
                    open.len(),
                    pending.len(),
                    pending.iter().take(20).map(|p| p.0).collect::<Vec<_>>()
                ));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Closes the handle.
    pub async fn close(self) {
        self.db.close().await;
    }
}
