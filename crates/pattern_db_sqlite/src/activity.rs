//! Statements on `activity_events` rows: an agent's activity log (an event's insert, the newest
//! events). Retention's deletes of old events are in `retention`.
//!
//! It must never judge an event (its kind and payload size are checked by the caller; the payload
//! is the caller's JSON text) and never decide what a missing agent means: the insert's foreign
//! key error comes back as the engine's, and the caller maps it.

use sqlx::SqliteConnection;

/// An `activity_events` row.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ActivityRow {
    /// `id` (a snowflake).
    pub id: i64,
    /// `agent_id` (a UUID's text).
    pub agent_id: String,
    /// `kind`.
    pub kind: String,
    /// `payload` (JSON text).
    pub payload: String,
    /// `created_at` (milliseconds since the epoch).
    pub created_at: i64,
}

/// Inserts event `id` of `agent`; rows changed. The engine's errors (an unknown agent's foreign
/// key) come back as they are.
pub async fn insert(
    conn: &mut SqliteConnection,
    id: i64,
    agent: &str,
    kind: &str,
    payload: &str,
    created_at: i64,
) -> sqlx::Result<u64> {
    let done = sqlx::query!(
        "INSERT INTO activity_events (id, agent_id, kind, payload, created_at) VALUES ($1, $2, $3, $4, $5)",
        id,
        agent,
        kind,
        payload,
        created_at
    )
    .execute(conn)
    .await?;
    Ok(done.rows_affected())
}

/// The newest `limit` events of `agent`, newest first.
pub async fn recent(
    conn: &mut SqliteConnection,
    agent: &str,
    limit: i64,
) -> sqlx::Result<Vec<ActivityRow>> {
    sqlx::query_as!(
        ActivityRow,
        r#"SELECT id AS "id!: i64", agent_id AS "agent_id!", kind AS "kind!", payload AS "payload!", created_at AS "created_at!: i64" FROM activity_events WHERE agent_id = $1 ORDER BY id DESC LIMIT $2 + 0"#,
        agent,
        limit
    )
    .fetch_all(conn)
    .await
}
