//! Statements reading schedules: the live `agent_queue` rows marked `at` or `cron` (one agent's,
//! every agent's, one by id) and the entries that retry a crashed wakeup. Schedules' writes are
//! the queue's ([`crate::queue`]).
//!
//! It must never decide what a schedule is or when it fires: it returns queue rows as stored and
//! the caller reads them as schedules.

use sqlx::SqliteConnection;

use crate::QueueRow;

/// `agent`'s live schedules, in the order they were added.
pub async fn of_agent(conn: &mut SqliteConnection, agent: &str) -> sqlx::Result<Vec<QueueRow>> {
    sqlx::query_as!(
        QueueRow,
        r#"SELECT id AS "id!", agent_id AS "agent_id!", batch_type AS "batch_type!", role AS "role!", content AS "content!", source AS "source!", deliver_at AS "deliver_at!", every_ms AS "every_ms?", delivered_at AS "delivered_at?", delivered_batch AS "delivered_batch?", deliveries AS "deliveries!", created_at AS "created_at!", schedule AS "schedule?", cron AS "cron?", time_zone AS "time_zone?", name AS "name?", retry_of AS "retry_of?", protocol_message_id AS "protocol_message_id?" FROM agent_queue WHERE agent_id = $1 AND schedule IS NOT NULL AND delivered_at IS NULL ORDER BY id"#,
        agent
    )
    .fetch_all(conn)
    .await
}

/// Every agent's live schedules, by next fire time.
pub async fn all(conn: &mut SqliteConnection) -> sqlx::Result<Vec<QueueRow>> {
    sqlx::query_as!(
        QueueRow,
        r#"SELECT id AS "id!", agent_id AS "agent_id!", batch_type AS "batch_type!", role AS "role!", content AS "content!", source AS "source!", deliver_at AS "deliver_at!", every_ms AS "every_ms?", delivered_at AS "delivered_at?", delivered_batch AS "delivered_batch?", deliveries AS "deliveries!", created_at AS "created_at!", schedule AS "schedule?", cron AS "cron?", time_zone AS "time_zone?", name AS "name?", retry_of AS "retry_of?", protocol_message_id AS "protocol_message_id?" FROM agent_queue WHERE schedule IS NOT NULL AND delivered_at IS NULL ORDER BY deliver_at, id"#
    )
    .fetch_all(conn)
    .await
}

/// The live schedule `id`, whichever agent it belongs to.
pub async fn one(conn: &mut SqliteConnection, id: i64) -> sqlx::Result<Option<QueueRow>> {
    sqlx::query_as!(
        QueueRow,
        r#"SELECT id AS "id!", agent_id AS "agent_id!", batch_type AS "batch_type!", role AS "role!", content AS "content!", source AS "source!", deliver_at AS "deliver_at!", every_ms AS "every_ms?", delivered_at AS "delivered_at?", delivered_batch AS "delivered_batch?", deliveries AS "deliveries!", created_at AS "created_at!", schedule AS "schedule?", cron AS "cron?", time_zone AS "time_zone?", name AS "name?", retry_of AS "retry_of?", protocol_message_id AS "protocol_message_id?" FROM agent_queue WHERE id = $1 AND schedule IS NOT NULL AND delivered_at IS NULL"#,
        id
    )
    .fetch_optional(conn)
    .await
}

/// `agent`'s queue entries that retry a crashed wakeup, in id order.
pub async fn retries(conn: &mut SqliteConnection, agent: &str) -> sqlx::Result<Vec<QueueRow>> {
    sqlx::query_as!(
        QueueRow,
        r#"SELECT id AS "id!", agent_id AS "agent_id!", batch_type AS "batch_type!", role AS "role!", content AS "content!", source AS "source!", deliver_at AS "deliver_at!", every_ms AS "every_ms?", delivered_at AS "delivered_at?", delivered_batch AS "delivered_batch?", deliveries AS "deliveries!", created_at AS "created_at!", schedule AS "schedule?", cron AS "cron?", time_zone AS "time_zone?", name AS "name?", retry_of AS "retry_of?", protocol_message_id AS "protocol_message_id?" FROM agent_queue WHERE agent_id = $1 AND retry_of IS NOT NULL ORDER BY id"#,
        agent
    )
    .fetch_all(conn)
    .await
}
