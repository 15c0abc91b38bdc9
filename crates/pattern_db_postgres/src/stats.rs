//! The gauges' one statement: open batches, waiting and due queue entries, held runs and waiting
//! embedding jobs, counted in one read; and the engine's version string.
//!
//! It must never judge a count (the caller reports them as they are) and never write.

use sqlx::PgConnection;

use crate::Timestamp;

/// The counts behind `pattern_db::stats::Gauges` (`pattern_db_sqlite::stats::GaugesRow`'s
/// fields).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GaugesRow {
    /// Open batches.
    pub open_batches: i64,
    /// Undelivered queue entries.
    pub queued: i64,
    /// Undelivered queue entries due at `now`.
    pub queued_due: i64,
    /// Agents a run holds.
    pub running: i64,
    /// Embedding jobs.
    pub embedding_jobs: i64,
}

/// The counts at `now`.
pub async fn gauges(conn: &mut PgConnection, now: Timestamp) -> sqlx::Result<GaugesRow> {
    sqlx::query_as!(
        GaugesRow,
        r#"SELECT (SELECT COUNT(*) FROM batches WHERE state = 'open') AS "open_batches!", (SELECT COUNT(*) FROM agent_queue WHERE delivered_at IS NULL) AS "queued!", (SELECT COUNT(*) FROM agent_queue WHERE delivered_at IS NULL AND deliver_at <= $1) AS "queued_due!", (SELECT COUNT(*) FROM agent_runs WHERE holder IS NOT NULL) AS "running!", (SELECT COUNT(*) FROM embedding_jobs) AS "embedding_jobs!""#,
        now
    )
    .fetch_one(conn)
    .await
}

/// The engine's version string (`version()`).
pub async fn engine_version(conn: &mut PgConnection) -> sqlx::Result<String> {
    sqlx::query_scalar!(r#"SELECT version() AS "version!: String""#)
        .fetch_one(conn)
        .await
}
