//! Statements on `agent_queue` rows: an entry's insert, its claim for delivery (the state a claim
//! reads, and the three conditional updates that move a one-off, recurring or cron entry on),
//! the batch a delivery began, cancelling an entry or a schedule, an agent's live schedules'
//! count, and the queue's reads (an agent's pending entries, the due entries of every agent, the
//! next due time, the entry a batch delivered).
//!
//! It must never decide when an entry is due, what its next time is or whether it earns a retry:
//! the caller computes every time and judges every row; a conditional update that matches no row
//! comes back as `None` or zero rows.

use sqlx::SqliteConnection;

/// An `agent_queue` row as stored (the columns every queue read returns).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueRow {
    /// `id`.
    pub id: i64,
    /// `agent_id` (a UUID's text).
    pub agent_id: String,
    /// `batch_type`.
    pub batch_type: String,
    /// `role`.
    pub role: String,
    /// `content` (the trigger's content blocks as JSON text).
    pub content: String,
    /// `source`.
    pub source: String,
    /// `deliver_at` (milliseconds since the epoch).
    pub deliver_at: i64,
    /// `every_ms`.
    pub every_ms: Option<i64>,
    /// `delivered_at` (milliseconds since the epoch).
    pub delivered_at: Option<i64>,
    /// `delivered_batch`.
    pub delivered_batch: Option<i64>,
    /// `deliveries`.
    pub deliveries: i64,
    /// `created_at` (milliseconds since the epoch).
    pub created_at: i64,
    /// `schedule`.
    pub schedule: Option<String>,
    /// `cron`.
    pub cron: Option<String>,
    /// `time_zone`.
    pub time_zone: Option<String>,
    /// `name`.
    pub name: Option<String>,
    /// `retry_of`.
    pub retry_of: Option<i64>,
    /// `protocol_message_id` (a UUID's text).
    pub protocol_message_id: Option<String>,
}

/// A new `agent_queue` row (an entry or a schedule; what does not apply is `None`).
#[derive(Clone, Debug)]
pub struct NewEntry<'a> {
    /// `id`.
    pub id: i64,
    /// `agent_id`.
    pub agent_id: &'a str,
    /// `batch_type`.
    pub batch_type: &'a str,
    /// `role`.
    pub role: &'a str,
    /// `content`.
    pub content: &'a str,
    /// `source`.
    pub source: &'a str,
    /// `deliver_at`.
    pub deliver_at: i64,
    /// `every_ms`.
    pub every_ms: Option<i64>,
    /// `created_at`.
    pub created_at: i64,
    /// `retry_of`.
    pub retry_of: Option<i64>,
    /// `protocol_message_id`.
    pub protocol_message_id: Option<&'a str>,
    /// `schedule`.
    pub schedule: Option<&'a str>,
    /// `cron`.
    pub cron: Option<&'a str>,
    /// `time_zone`.
    pub time_zone: Option<&'a str>,
    /// `name`.
    pub name: Option<&'a str>,
}

/// Inserts `entry` (no deliveries yet); the row as stored.
pub async fn insert(conn: &mut SqliteConnection, entry: &NewEntry<'_>) -> sqlx::Result<QueueRow> {
    sqlx::query_as!(
        QueueRow,
        r#"INSERT INTO agent_queue (id, agent_id, batch_type, role, content, source, deliver_at, every_ms, deliveries, created_at, retry_of, protocol_message_id, schedule, cron, time_zone, name) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 0, $9, $10, $11, $12, $13, $14, $15) RETURNING id AS "id!", agent_id AS "agent_id!", batch_type AS "batch_type!", role AS "role!", content AS "content!", source AS "source!", deliver_at AS "deliver_at!", every_ms AS "every_ms?", delivered_at AS "delivered_at?", delivered_batch AS "delivered_batch?", deliveries AS "deliveries!", created_at AS "created_at!", schedule AS "schedule?", cron AS "cron?", time_zone AS "time_zone?", name AS "name?", retry_of AS "retry_of?", protocol_message_id AS "protocol_message_id?""#,
        entry.id,
        entry.agent_id,
        entry.batch_type,
        entry.role,
        entry.content,
        entry.source,
        entry.deliver_at,
        entry.every_ms,
        entry.created_at,
        entry.retry_of,
        entry.protocol_message_id,
        entry.schedule,
        entry.cron,
        entry.time_zone,
        entry.name
    )
    .fetch_one(conn)
    .await
}

/// The session message delivered by the entry of `agent` whose delivery began batch `batch`:
/// `None` without such an entry, `Some(None)` when it delivered none.
pub async fn protocol_message_of_batch(
    conn: &mut SqliteConnection,
    batch: i64,
    agent: &str,
) -> sqlx::Result<Option<Option<String>>> {
    sqlx::query_scalar!(
        r#"SELECT protocol_message_id AS "protocol_message_id?" FROM agent_queue WHERE delivered_batch = $1 AND agent_id = $2"#,
        batch,
        agent
    )
    .fetch_optional(conn)
    .await
}

/// The entry of `agent` whose delivery began batch `batch`, if any.
pub async fn by_delivered_batch(
    conn: &mut SqliteConnection,
    batch: i64,
    agent: &str,
) -> sqlx::Result<Option<QueueRow>> {
    sqlx::query_as!(
        QueueRow,
        r#"SELECT id AS "id!", agent_id AS "agent_id!", batch_type AS "batch_type!", role AS "role!", content AS "content!", source AS "source!", deliver_at AS "deliver_at!", every_ms AS "every_ms?", delivered_at AS "delivered_at?", delivered_batch AS "delivered_batch?", deliveries AS "deliveries!", created_at AS "created_at!", schedule AS "schedule?", cron AS "cron?", time_zone AS "time_zone?", name AS "name?", retry_of AS "retry_of?", protocol_message_id AS "protocol_message_id?" FROM agent_queue WHERE delivered_batch = $1 AND agent_id = $2"#,
        batch,
        agent
    )
    .fetch_optional(conn)
    .await
}

/// Records that entry `id`'s latest delivery began batch `batch`; rows changed.
pub async fn set_delivered_batch(
    conn: &mut SqliteConnection,
    id: i64,
    batch: i64,
) -> sqlx::Result<u64> {
    let done = sqlx::query!(
        "UPDATE agent_queue SET delivered_batch = $1 WHERE id = $2",
        batch,
        id
    )
    .execute(conn)
    .await?;
    Ok(done.rows_affected())
}

/// Deletes pending entry `id` of `agent`; rows changed.
pub async fn delete_pending(
    conn: &mut SqliteConnection,
    id: i64,
    agent: &str,
) -> sqlx::Result<u64> {
    let done = sqlx::query!(
        "DELETE FROM agent_queue WHERE id = $1 AND agent_id = $2 AND delivered_at IS NULL",
        id,
        agent
    )
    .execute(conn)
    .await?;
    Ok(done.rows_affected())
}

/// What a claim reads of a pending entry before it moves it on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClaimState {
    /// `deliver_at` (milliseconds since the epoch).
    pub deliver_at: i64,
    /// `cron`.
    pub cron: Option<String>,
    /// `time_zone`.
    pub time_zone: Option<String>,
    /// `every_ms`.
    pub every_ms: Option<i64>,
}

/// Pending entry `id` of `agent`'s delivery time and recurrence; `None` when it is not pending.
pub async fn claim_state(
    conn: &mut SqliteConnection,
    id: i64,
    agent: &str,
) -> sqlx::Result<Option<ClaimState>> {
    sqlx::query_as!(
        ClaimState,
        r#"SELECT deliver_at AS "deliver_at!", cron AS "cron?", time_zone AS "time_zone?", every_ms AS "every_ms?" FROM agent_queue WHERE id = $1 AND agent_id = $2 AND delivered_at IS NULL"#,
        id,
        agent
    )
    .fetch_optional(conn)
    .await
}

/// Moves pending entry `id` of `agent` still due at `was` to `next` (one more delivery); the
/// row as updated, `None` when it changed since it was read.
pub async fn claim_to(
    conn: &mut SqliteConnection,
    id: i64,
    agent: &str,
    was: i64,
    next: i64,
) -> sqlx::Result<Option<QueueRow>> {
    sqlx::query_as!(
        QueueRow,
        r#"UPDATE agent_queue SET deliver_at = $1, deliveries = deliveries + 1 WHERE id = $2 AND agent_id = $3 AND delivered_at IS NULL AND deliver_at = $4 RETURNING id AS "id!", agent_id AS "agent_id!", batch_type AS "batch_type!", role AS "role!", content AS "content!", source AS "source!", deliver_at AS "deliver_at!", every_ms AS "every_ms?", delivered_at AS "delivered_at?", delivered_batch AS "delivered_batch?", deliveries AS "deliveries!", created_at AS "created_at!", schedule AS "schedule?", cron AS "cron?", time_zone AS "time_zone?", name AS "name?", retry_of AS "retry_of?", protocol_message_id AS "protocol_message_id?""#,
        next,
        id,
        agent,
        was
    )
    .fetch_optional(conn)
    .await
}

/// Marks pending entry `id` of `agent` still due at `was` delivered at `now` (one more
/// delivery); the row as updated, `None` when it changed since it was read.
pub async fn claim_last(
    conn: &mut SqliteConnection,
    id: i64,
    agent: &str,
    was: i64,
    now: i64,
) -> sqlx::Result<Option<QueueRow>> {
    sqlx::query_as!(
        QueueRow,
        r#"UPDATE agent_queue SET delivered_at = $1, deliveries = deliveries + 1 WHERE id = $2 AND agent_id = $3 AND delivered_at IS NULL AND deliver_at = $4 RETURNING id AS "id!", agent_id AS "agent_id!", batch_type AS "batch_type!", role AS "role!", content AS "content!", source AS "source!", deliver_at AS "deliver_at!", every_ms AS "every_ms?", delivered_at AS "delivered_at?", delivered_batch AS "delivered_batch?", deliveries AS "deliveries!", created_at AS "created_at!", schedule AS "schedule?", cron AS "cron?", time_zone AS "time_zone?", name AS "name?", retry_of AS "retry_of?", protocol_message_id AS "protocol_message_id?""#,
        now,
        id,
        agent,
        was
    )
    .fetch_optional(conn)
    .await
}

/// Sets pending entry `id` of `agent` still due at `was` to delivered at `delivered_at` (`None`:
/// still pending) and due at `next` (one more delivery); the row as updated, `None` when it
/// changed since it was read.
pub async fn claim_set(
    conn: &mut SqliteConnection,
    id: i64,
    agent: &str,
    was: i64,
    delivered_at: Option<i64>,
    next: i64,
) -> sqlx::Result<Option<QueueRow>> {
    sqlx::query_as!(
        QueueRow,
        r#"UPDATE agent_queue SET delivered_at = $1, deliver_at = $5, deliveries = deliveries + 1 WHERE id = $2 AND agent_id = $3 AND delivered_at IS NULL AND deliver_at = $4 RETURNING id AS "id!", agent_id AS "agent_id!", batch_type AS "batch_type!", role AS "role!", content AS "content!", source AS "source!", deliver_at AS "deliver_at!", every_ms AS "every_ms?", delivered_at AS "delivered_at?", delivered_batch AS "delivered_batch?", deliveries AS "deliveries!", created_at AS "created_at!", schedule AS "schedule?", cron AS "cron?", time_zone AS "time_zone?", name AS "name?", retry_of AS "retry_of?", protocol_message_id AS "protocol_message_id?""#,
        delivered_at,
        id,
        agent,
        was,
        next
    )
    .fetch_optional(conn)
    .await
}

/// How many live (pending) schedules `agent` has.
pub async fn count_live_schedules(conn: &mut SqliteConnection, agent: &str) -> sqlx::Result<i64> {
    sqlx::query_scalar!(
        r#"SELECT COUNT(*) AS "count!: i64" FROM agent_queue WHERE agent_id = $1 AND schedule IS NOT NULL AND delivered_at IS NULL"#,
        agent
    )
    .fetch_one(conn)
    .await
}

/// Deletes live schedule `id` of `agent`; the row as it was, `None` when there is none.
pub async fn delete_schedule(
    conn: &mut SqliteConnection,
    id: i64,
    agent: &str,
) -> sqlx::Result<Option<QueueRow>> {
    sqlx::query_as!(
        QueueRow,
        r#"DELETE FROM agent_queue WHERE id = $1 AND agent_id = $2 AND schedule IS NOT NULL AND delivered_at IS NULL RETURNING id AS "id!", agent_id AS "agent_id!", batch_type AS "batch_type!", role AS "role!", content AS "content!", source AS "source!", deliver_at AS "deliver_at!", every_ms AS "every_ms?", delivered_at AS "delivered_at?", delivered_batch AS "delivered_batch?", deliveries AS "deliveries!", created_at AS "created_at!", schedule AS "schedule?", cron AS "cron?", time_zone AS "time_zone?", name AS "name?", retry_of AS "retry_of?", protocol_message_id AS "protocol_message_id?""#,
        id,
        agent
    )
    .fetch_optional(conn)
    .await
}

/// `agent`'s pending entries (due or not) in arrival order.
pub async fn pending(conn: &mut SqliteConnection, agent: &str) -> sqlx::Result<Vec<QueueRow>> {
    sqlx::query_as!(
        QueueRow,
        r#"SELECT id AS "id!", agent_id AS "agent_id!", batch_type AS "batch_type!", role AS "role!", content AS "content!", source AS "source!", deliver_at AS "deliver_at!", every_ms AS "every_ms?", delivered_at AS "delivered_at?", delivered_batch AS "delivered_batch?", deliveries AS "deliveries!", created_at AS "created_at!", schedule AS "schedule?", cron AS "cron?", time_zone AS "time_zone?", name AS "name?", retry_of AS "retry_of?", protocol_message_id AS "protocol_message_id?" FROM agent_queue WHERE agent_id = $1 AND delivered_at IS NULL ORDER BY id"#,
        agent
    )
    .fetch_all(conn)
    .await
}

/// Pending entries of every agent due at `now`, by due time then arrival, at most `limit`.
pub async fn due(conn: &mut SqliteConnection, now: i64, limit: i64) -> sqlx::Result<Vec<QueueRow>> {
    sqlx::query_as!(
        QueueRow,
        r#"SELECT id AS "id!", agent_id AS "agent_id!", batch_type AS "batch_type!", role AS "role!", content AS "content!", source AS "source!", deliver_at AS "deliver_at!", every_ms AS "every_ms?", delivered_at AS "delivered_at?", delivered_batch AS "delivered_batch?", deliveries AS "deliveries!", created_at AS "created_at!", schedule AS "schedule?", cron AS "cron?", time_zone AS "time_zone?", name AS "name?", retry_of AS "retry_of?", protocol_message_id AS "protocol_message_id?" FROM agent_queue WHERE delivered_at IS NULL AND deliver_at <= $1 ORDER BY deliver_at, id LIMIT $2 + 0"#,
        now,
        limit
    )
    .fetch_all(conn)
    .await
}

/// The earliest due time after `after` of any pending entry, if any.
pub async fn next_due(conn: &mut SqliteConnection, after: i64) -> sqlx::Result<Option<i64>> {
    sqlx::query_scalar!(
        r#"SELECT MIN(deliver_at) AS "next?: i64" FROM agent_queue WHERE delivered_at IS NULL AND deliver_at > $1"#,
        after
    )
    .fetch_one(conn)
    .await
}
