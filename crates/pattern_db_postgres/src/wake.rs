//! The run wake-up's one statement on PostgreSQL: a `NOTIFY` on a channel, queued in the caller's
//! transaction (delivered when, and only if, it commits). SQLite has no twin: its wake-ups stay
//! in the process.
//!
//! It must never choose a channel or a payload (the caller's wake keys) and never commit.

use sqlx::PgConnection;

/// Queues a notification of `payload` on `channel`.
pub async fn notify(conn: &mut PgConnection, channel: &str, payload: &str) -> sqlx::Result<()> {
    // `IS NOT NULL`: the function returns `void`, which no Rust type decodes.
    sqlx::query_scalar!(
        r#"SELECT pg_notify($1, $2) IS NOT NULL AS "sent!""#,
        channel,
        payload
    )
    .fetch_one(conn)
    .await?;
    Ok(())
}
