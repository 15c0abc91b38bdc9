//! Statements on `messages` rows: a batch's live messages in order, its trigger (the message at
//! sequence 0), a page of an agent's history, and the count of its live messages.
//!
//! It must never decode a message's content or judge its role: both come back as stored text.
//! The `JSON` content is read as `content::text`, never through `JSONB` or a parsed value, so it
//! comes back exactly as written.

use sqlx::PgConnection;

use crate::{Timestamp, Uuid};

/// A `messages` row as PostgreSQL stores it (`pattern_db_sqlite::MessageRow`'s fields, with
/// `UUID` ids and a `TIMESTAMPTZ` instant).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MessageRow {
    /// `id`.
    pub id: Uuid,
    /// `agent_id`.
    pub agent_id: Uuid,
    /// `position`.
    pub position: i64,
    /// `batch_id`.
    pub batch_id: i64,
    /// `sequence_num`.
    pub sequence_num: i64,
    /// `batch_type`.
    pub batch_type: String,
    /// `role`.
    pub role: String,
    /// `content` (the `JSON` column's text, as written).
    pub content: String,
    /// `token_estimate`.
    pub token_estimate: i64,
    /// `archived`.
    pub archived: bool,
    /// `deleted`.
    pub deleted: bool,
    /// `created_at`.
    pub created_at: Timestamp,
}

/// The live (not deleted) messages of batch `batch`, in sequence order.
pub async fn live_of_batch(conn: &mut PgConnection, batch: i64) -> sqlx::Result<Vec<MessageRow>> {
    sqlx::query_as!(
        MessageRow,
        r#"SELECT m.id, m.agent_id, m.position, m.batch_id, m.sequence_num, m.batch_type, m.role, m.content::text AS "content!", m.token_estimate, m.archived, m.deleted, m.created_at FROM messages m WHERE m.batch_id = $1 AND NOT m.deleted ORDER BY m.sequence_num"#,
        batch
    )
    .fetch_all(conn)
    .await
}

/// The message that opened batch `batch` (sequence 0); [`sqlx::Error::RowNotFound`] when there
/// is none.
pub async fn trigger_of_batch(conn: &mut PgConnection, batch: i64) -> sqlx::Result<MessageRow> {
    sqlx::query_as!(
        MessageRow,
        r#"SELECT m.id, m.agent_id, m.position, m.batch_id, m.sequence_num, m.batch_type, m.role, m.content::text AS "content!", m.token_estimate, m.archived, m.deleted, m.created_at FROM messages m WHERE m.batch_id = $1 AND m.sequence_num = 0"#,
        batch
    )
    .fetch_one(conn)
    .await
}

/// `agent`'s live messages after position `after`, in position order, at most `limit`; archived
/// ones only when `include_archived`.
pub async fn page_after(
    conn: &mut PgConnection,
    agent: Uuid,
    after: i64,
    limit: i64,
    include_archived: bool,
) -> sqlx::Result<Vec<MessageRow>> {
    if include_archived {
        sqlx::query_as!(
            MessageRow,
            r#"SELECT m.id, m.agent_id, m.position, m.batch_id, m.sequence_num, m.batch_type, m.role, m.content::text AS "content!", m.token_estimate, m.archived, m.deleted, m.created_at FROM messages m WHERE m.agent_id = $1 AND m.position > $2 AND NOT m.deleted ORDER BY m.position LIMIT $3"#,
            agent,
            after,
            limit
        )
        .fetch_all(conn)
        .await
    } else {
        sqlx::query_as!(
            MessageRow,
            r#"SELECT m.id, m.agent_id, m.position, m.batch_id, m.sequence_num, m.batch_type, m.role, m.content::text AS "content!", m.token_estimate, m.archived, m.deleted, m.created_at FROM messages m WHERE m.agent_id = $1 AND m.position > $2 AND NOT m.deleted AND NOT m.archived ORDER BY m.position LIMIT $3"#,
            agent,
            after,
            limit
        )
        .fetch_all(conn)
        .await
    }
}

/// How many of `agent`'s messages are live (neither archived nor deleted), counted from the
/// agent's `live_from` (every message below it is in an archived batch, migration 0027).
pub async fn count_live(conn: &mut PgConnection, agent: Uuid) -> sqlx::Result<i64> {
    sqlx::query_scalar!(
        r#"SELECT COUNT(*) AS "count!" FROM messages WHERE agent_id = $1 AND position >= (SELECT a.live_from FROM agents a WHERE a.id = $1) AND NOT archived AND NOT deleted"#,
        agent
    )
    .fetch_one(conn)
    .await
}
