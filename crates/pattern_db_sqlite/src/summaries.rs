//! Statements on `summaries` rows: an agent's summaries in coverage order.
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
