//! Statements of protocol retention that pick what goes: ended sessions and meetings, old
//! messages, and the messages of an owner that goes (each a list of ids, by id), each with a
//! `FOR UPDATE SKIP LOCKED` twin (`*_free`: the rows no other transaction holds, locked). The
//! archive and deletes are `IN` lists as long as the ids found and stay on `pattern_db::sql` in
//! `pattern_protocol::store`.
//!
//! It must never decide what is old (the caller computes the cutoffs from its policy) or
//! archive and delete anything itself.

use sqlx::PgConnection;

use crate::{Timestamp, Uuid};

/// The ended sessions that ended before `cutoff`, by id.
pub async fn ended_sessions(conn: &mut PgConnection, cutoff: Timestamp) -> sqlx::Result<Vec<Uuid>> {
    sqlx::query_scalar!(
        r#"SELECT id AS "id!" FROM protocol_sessions WHERE status = 'ended' AND ended_at < $1 ORDER BY id"#,
        cutoff
    )
    .fetch_all(conn)
    .await
}

/// [`ended_sessions`]'s rows that no other transaction holds, locked (`SKIP LOCKED`).
pub async fn ended_sessions_free(
    conn: &mut PgConnection,
    cutoff: Timestamp,
) -> sqlx::Result<Vec<Uuid>> {
    sqlx::query_scalar!(
        r#"SELECT id AS "id!" FROM protocol_sessions WHERE status = 'ended' AND ended_at < $1 ORDER BY id FOR UPDATE SKIP LOCKED"#,
        cutoff
    )
    .fetch_all(conn)
    .await
}

/// The ended meetings that ended before `cutoff`, by id.
pub async fn ended_meetings(conn: &mut PgConnection, cutoff: Timestamp) -> sqlx::Result<Vec<Uuid>> {
    sqlx::query_scalar!(
        r#"SELECT id AS "id!" FROM protocol_meetings WHERE status = 'ended' AND ended_at < $1 ORDER BY id"#,
        cutoff
    )
    .fetch_all(conn)
    .await
}

/// [`ended_meetings`]'s rows that no other transaction holds, locked (`SKIP LOCKED`).
pub async fn ended_meetings_free(
    conn: &mut PgConnection,
    cutoff: Timestamp,
) -> sqlx::Result<Vec<Uuid>> {
    sqlx::query_scalar!(
        r#"SELECT id AS "id!" FROM protocol_meetings WHERE status = 'ended' AND ended_at < $1 ORDER BY id FOR UPDATE SKIP LOCKED"#,
        cutoff
    )
    .fetch_all(conn)
    .await
}

/// The messages stored before `cutoff` that were read or belong to an ended meeting, by id.
pub async fn old_messages(conn: &mut PgConnection, cutoff: Timestamp) -> sqlx::Result<Vec<Uuid>> {
    sqlx::query_scalar!(
        r#"SELECT id AS "id!" FROM protocol_messages WHERE created_at < $1 AND (read_at IS NOT NULL OR (meeting_id IS NOT NULL AND EXISTS (SELECT 1 FROM protocol_meetings pm WHERE pm.id = meeting_id AND pm.status = 'ended'))) ORDER BY id"#,
        cutoff
    )
    .fetch_all(conn)
    .await
}

/// [`old_messages`]'s rows that no other transaction holds, locked (`SKIP LOCKED`).
pub async fn old_messages_free(
    conn: &mut PgConnection,
    cutoff: Timestamp,
) -> sqlx::Result<Vec<Uuid>> {
    sqlx::query_scalar!(
        r#"SELECT id AS "id!" FROM protocol_messages WHERE created_at < $1 AND (read_at IS NOT NULL OR (meeting_id IS NOT NULL AND EXISTS (SELECT 1 FROM protocol_meetings pm WHERE pm.id = meeting_id AND pm.status = 'ended'))) ORDER BY id FOR UPDATE SKIP LOCKED"#,
        cutoff
    )
    .fetch_all(conn)
    .await
}

/// The messages of session `owner`, by id.
pub async fn messages_of_session(conn: &mut PgConnection, owner: Uuid) -> sqlx::Result<Vec<Uuid>> {
    sqlx::query_scalar!(
        r#"SELECT id AS "id!" FROM protocol_messages WHERE session_id = $1 ORDER BY id"#,
        owner
    )
    .fetch_all(conn)
    .await
}

/// [`messages_of_session`]'s rows that no other transaction holds, locked (`SKIP LOCKED`).
pub async fn messages_of_session_free(
    conn: &mut PgConnection,
    owner: Uuid,
) -> sqlx::Result<Vec<Uuid>> {
    sqlx::query_scalar!(
        r#"SELECT id AS "id!" FROM protocol_messages WHERE session_id = $1 ORDER BY id FOR UPDATE SKIP LOCKED"#,
        owner
    )
    .fetch_all(conn)
    .await
}

/// The messages of meeting `owner`, by id.
pub async fn messages_of_meeting(conn: &mut PgConnection, owner: Uuid) -> sqlx::Result<Vec<Uuid>> {
    sqlx::query_scalar!(
        r#"SELECT id AS "id!" FROM protocol_messages WHERE meeting_id = $1 ORDER BY id"#,
        owner
    )
    .fetch_all(conn)
    .await
}

/// [`messages_of_meeting`]'s rows that no other transaction holds, locked (`SKIP LOCKED`).
pub async fn messages_of_meeting_free(
    conn: &mut PgConnection,
    owner: Uuid,
) -> sqlx::Result<Vec<Uuid>> {
    sqlx::query_scalar!(
        r#"SELECT id AS "id!" FROM protocol_messages WHERE meeting_id = $1 ORDER BY id FOR UPDATE SKIP LOCKED"#,
        owner
    )
    .fetch_all(conn)
    .await
}
