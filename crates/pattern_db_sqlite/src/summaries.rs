//! Statements on `summaries` rows: an agent's summaries in coverage order, and a summary's
//! upsert.
//!
//! It must never judge which summary covers which batches: rows come back as stored.

use sqlx::SqliteConnection;

/// A `summaries` row as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SummaryRow {
    /// `id`.
    pub id: i64,
    /// `agent_id` (a UUID's text).
    pub agent_id: String,
    /// `content`.
    pub content: String,
    /// `from_batch`.
    pub from_batch: i64,
    /// `through_batch`.
    pub through_batch: i64,
    /// `message_count`.
    pub message_count: i64,
    /// `depth`.
    pub depth: i32,
    /// `created_at` (milliseconds since the epoch).
    pub created_at: i64,
}

/// Every summary of `agent`, oldest coverage first.
pub async fn of_agent(conn: &mut SqliteConnection, agent: &str) -> sqlx::Result<Vec<SummaryRow>> {
    sqlx::query_as!(
        SummaryRow,
        r#"SELECT id, agent_id, content, from_batch, through_batch, message_count, depth AS "depth: i32", created_at FROM summaries WHERE agent_id = $1 ORDER BY through_batch, id"#,
        agent
    )
    .fetch_all(conn)
    .await
}

/// A summary to store.
#[derive(Clone, Debug)]
pub struct NewSummary<'a> {
    /// `id`.
    pub id: i64,
    /// `agent_id`.
    pub agent_id: &'a str,
    /// `content`.
    pub content: &'a str,
    /// `from_batch`.
    pub from_batch: i64,
    /// `through_batch`.
    pub through_batch: i64,
    /// `message_count`.
    pub message_count: i64,
    /// `depth`.
    pub depth: i32,
    /// `created_at`.
    pub created_at: i64,
}

/// Stores `summary`, replacing the content, range, count and depth of one with the same id (its
/// agent and creation time stay); rows changed.
pub async fn upsert(conn: &mut SqliteConnection, summary: &NewSummary<'_>) -> sqlx::Result<u64> {
    let done = sqlx::query!(
        "INSERT INTO summaries (id, agent_id, content, from_batch, through_batch, message_count, depth, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT (id) DO UPDATE SET content = excluded.content, from_batch = excluded.from_batch, through_batch = excluded.through_batch, message_count = excluded.message_count, depth = excluded.depth",
        summary.id,
        summary.agent_id,
        summary.content,
        summary.from_batch,
        summary.through_batch,
        summary.message_count,
        summary.depth,
        summary.created_at
    )
    .execute(conn)
    .await?;
    Ok(done.rows_affected())
}
