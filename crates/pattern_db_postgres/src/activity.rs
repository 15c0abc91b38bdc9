//! Statements on `activity_events` rows: an agent's activity log (an event's insert, the newest
//! events; the `JSON` payload written as `$4::text::json` and read as `payload::text`).
//! Retention's deletes of old events are in `retention`.
//!
//! It must never judge an event (its kind and payload size are checked by the caller; the payload
//! is the caller's JSON text) and never decide what a missing agent means: the insert's foreign
//! key error comes back as the engine's, and the caller maps it.

use sqlx::PgConnection;

use crate::{Timestamp, Uuid};

/// An `activity_events` row (`pattern_db_sqlite::activity::ActivityRow`'s fields, with a `UUID`
/// agent and a `TIMESTAMPTZ` instant; the `JSON` payload read as its text).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ActivityRow {
    /// `id` (a snowflake).
    pub id: i64,
    /// `agent_id`.
    pub agent_id: Uuid,
    /// `kind`.
    pub kind: String,
    /// `payload` (JSON text).
    pub payload: String,
    /// `created_at`.
    pub created_at: Timestamp,
}

/// Inserts event `id` of `agent`; rows changed. The engine's errors (an unknown agent's foreign
/// key) come back as they are.
pub async fn insert(
    conn: &mut PgConnection,
    id: i64,
    agent: Uuid,
    kind: &str,
    payload: &str,
    created_at: Timestamp,
) -> sqlx::Result<u64> {
    let done = sqlx::query!(
        "INSERT INTO activity_events (id, agent_id, kind, payload, created_at) VALUES ($1, $2, $3, $4::text::json, $5)",
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
    conn: &mut PgConnection,
    agent: Uuid,
    limit: i64,
) -> sqlx::Result<Vec<ActivityRow>> {
    sqlx::query_as!(
        ActivityRow,
        r#"SELECT id AS "id!", agent_id AS "agent_id!", kind AS "kind!", payload::text AS "payload!", created_at AS "created_at!" FROM activity_events WHERE agent_id = $1 ORDER BY id DESC LIMIT $2"#,
        agent,
        limit
    )
    .fetch_all(conn)
    .await
}
