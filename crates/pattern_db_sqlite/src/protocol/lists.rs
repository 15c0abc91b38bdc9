//! Statements of the organization-scoped lists of sessions and meetings, newest first, paged
//! by id: one statement per choice of rows (all, live, ended) and cursor (first page or after
//! one), so each keeps its own plan (a range on the id when there is a cursor).
//!
//! It must never choose which rows a caller may see: the caller names the organization (a
//! session is its when both agents are, a meeting when its host is) and the page.

use sqlx::SqliteConnection;

use super::SessionRow;
use super::meetings::MeetingRow;

/// Up to `limit` of the sessions of `org` (both agents its own), newest first.
pub async fn org_sessions(
    conn: &mut SqliteConnection,
    org: &str,
    limit: i64,
) -> sqlx::Result<Vec<SessionRow>> {
    sqlx::query_as!(
        SessionRow,
        r#"SELECT s.id AS "id!", s.agent_a_id AS "agent_a_id!", s.agent_b_id AS "agent_b_id!", s.session_type AS "session_type!", s.status AS "status!", s.locked_agent_id AS "locked_agent_id?", s.created_at AS "created_at!: i64", s.updated_at AS "updated_at!: i64", s.ended_at AS "ended_at?: i64", s.delivery AS "delivery!", s.message_limit AS "message_limit?: i64", s.messages_sent AS "messages_sent!: i64" FROM protocol_sessions s JOIN agents a ON a.id = s.agent_a_id JOIN agents b ON b.id = s.agent_b_id WHERE a.organization_id = $1 AND b.organization_id = $1 ORDER BY s.id DESC LIMIT $2 + 0"#,
        org,
        limit
    )
    .fetch_all(conn)
    .await
}

/// Up to `limit` of the sessions of `org` created before `before`, newest first.
pub async fn org_sessions_before(
    conn: &mut SqliteConnection,
    org: &str,
    before: &str,
    limit: i64,
) -> sqlx::Result<Vec<SessionRow>> {
    sqlx::query_as!(
        SessionRow,
        r#"SELECT s.id AS "id!", s.agent_a_id AS "agent_a_id!", s.agent_b_id AS "agent_b_id!", s.session_type AS "session_type!", s.status AS "status!", s.locked_agent_id AS "locked_agent_id?", s.created_at AS "created_at!: i64", s.updated_at AS "updated_at!: i64", s.ended_at AS "ended_at?: i64", s.delivery AS "delivery!", s.message_limit AS "message_limit?: i64", s.messages_sent AS "messages_sent!: i64" FROM protocol_sessions s JOIN agents a ON a.id = s.agent_a_id JOIN agents b ON b.id = s.agent_b_id WHERE a.organization_id = $1 AND b.organization_id = $1 AND s.id < $2 ORDER BY s.id DESC LIMIT $3 + 0"#,
        org,
        before,
        limit
    )
    .fetch_all(conn)
    .await
}

/// Up to `limit` of the live sessions of `org` (both agents its own), newest first.
pub async fn org_live_sessions(
    conn: &mut SqliteConnection,
    org: &str,
    limit: i64,
) -> sqlx::Result<Vec<SessionRow>> {
    sqlx::query_as!(
        SessionRow,
        r#"SELECT s.id AS "id!", s.agent_a_id AS "agent_a_id!", s.agent_b_id AS "agent_b_id!", s.session_type AS "session_type!", s.status AS "status!", s.locked_agent_id AS "locked_agent_id?", s.created_at AS "created_at!: i64", s.updated_at AS "updated_at!: i64", s.ended_at AS "ended_at?: i64", s.delivery AS "delivery!", s.message_limit AS "message_limit?: i64", s.messages_sent AS "messages_sent!: i64" FROM protocol_sessions s JOIN agents a ON a.id = s.agent_a_id JOIN agents b ON b.id = s.agent_b_id WHERE a.organization_id = $1 AND b.organization_id = $1 AND s.status <> 'ended' ORDER BY s.id DESC LIMIT $2 + 0"#,
        org,
        limit
    )
    .fetch_all(conn)
    .await
}

/// Up to `limit` of the live sessions of `org` created before `before`, newest first.
pub async fn org_live_sessions_before(
    conn: &mut SqliteConnection,
    org: &str,
    before: &str,
    limit: i64,
) -> sqlx::Result<Vec<SessionRow>> {
    sqlx::query_as!(
        SessionRow,
        r#"SELECT s.id AS "id!", s.agent_a_id AS "agent_a_id!", s.agent_b_id AS "agent_b_id!", s.session_type AS "session_type!", s.status AS "status!", s.locked_agent_id AS "locked_agent_id?", s.created_at AS "created_at!: i64", s.updated_at AS "updated_at!: i64", s.ended_at AS "ended_at?: i64", s.delivery AS "delivery!", s.message_limit AS "message_limit?: i64", s.messages_sent AS "messages_sent!: i64" FROM protocol_sessions s JOIN agents a ON a.id = s.agent_a_id JOIN agents b ON b.id = s.agent_b_id WHERE a.organization_id = $1 AND b.organization_id = $1 AND s.status <> 'ended' AND s.id < $2 ORDER BY s.id DESC LIMIT $3 + 0"#,
        org,
        before,
        limit
    )
    .fetch_all(conn)
    .await
}

/// Up to `limit` of the ended sessions of `org` (both agents its own), newest first.
pub async fn org_ended_sessions(
    conn: &mut SqliteConnection,
    org: &str,
    limit: i64,
) -> sqlx::Result<Vec<SessionRow>> {
    sqlx::query_as!(
        SessionRow,
        r#"SELECT s.id AS "id!", s.agent_a_id AS "agent_a_id!", s.agent_b_id AS "agent_b_id!", s.session_type AS "session_type!", s.status AS "status!", s.locked_agent_id AS "locked_agent_id?", s.created_at AS "created_at!: i64", s.updated_at AS "updated_at!: i64", s.ended_at AS "ended_at?: i64", s.delivery AS "delivery!", s.message_limit AS "message_limit?: i64", s.messages_sent AS "messages_sent!: i64" FROM protocol_sessions s JOIN agents a ON a.id = s.agent_a_id JOIN agents b ON b.id = s.agent_b_id WHERE a.organization_id = $1 AND b.organization_id = $1 AND s.status = 'ended' ORDER BY s.id DESC LIMIT $2 + 0"#,
        org,
        limit
    )
    .fetch_all(conn)
    .await
}

/// Up to `limit` of the ended sessions of `org` created before `before`, newest first.
pub async fn org_ended_sessions_before(
    conn: &mut SqliteConnection,
    org: &str,
    before: &str,
    limit: i64,
) -> sqlx::Result<Vec<SessionRow>> {
    sqlx::query_as!(
        SessionRow,
        r#"SELECT s.id AS "id!", s.agent_a_id AS "agent_a_id!", s.agent_b_id AS "agent_b_id!", s.session_type AS "session_type!", s.status AS "status!", s.locked_agent_id AS "locked_agent_id?", s.created_at AS "created_at!: i64", s.updated_at AS "updated_at!: i64", s.ended_at AS "ended_at?: i64", s.delivery AS "delivery!", s.message_limit AS "message_limit?: i64", s.messages_sent AS "messages_sent!: i64" FROM protocol_sessions s JOIN agents a ON a.id = s.agent_a_id JOIN agents b ON b.id = s.agent_b_id WHERE a.organization_id = $1 AND b.organization_id = $1 AND s.status = 'ended' AND s.id < $2 ORDER BY s.id DESC LIMIT $3 + 0"#,
        org,
        before,
        limit
    )
    .fetch_all(conn)
    .await
}

/// Up to `limit` of the meetings of `org` (hosted by its agents), newest first.
pub async fn org_meetings(
    conn: &mut SqliteConnection,
    org: &str,
    limit: i64,
) -> sqlx::Result<Vec<MeetingRow>> {
    sqlx::query_as!(
        MeetingRow,
        r#"SELECT m.id AS "id!", m.host_id AS "host_id!", m.status AS "status!", m.current_speaker_id AS "current_speaker_id?", m.turn_duration_ms AS "turn_duration_ms?: i64", m.turn_started_at AS "turn_started_at?: i64", m.turn_deadline AS "turn_deadline?: i64", m.last_event_seq AS "last_event_seq!: i64", m.created_at AS "created_at!: i64", m.started_at AS "started_at?: i64", m.ended_at AS "ended_at?: i64", m.policy AS "policy!", m.chosen_speaker_id AS "chosen_speaker_id?" FROM protocol_meetings m JOIN agents h ON h.id = m.host_id WHERE h.organization_id = $1 ORDER BY m.id DESC LIMIT $2 + 0"#,
        org,
        limit
    )
    .fetch_all(conn)
    .await
}

/// Up to `limit` of the meetings of `org` created before `before`, newest first.
pub async fn org_meetings_before(
    conn: &mut SqliteConnection,
    org: &str,
    before: &str,
    limit: i64,
) -> sqlx::Result<Vec<MeetingRow>> {
    sqlx::query_as!(
        MeetingRow,
        r#"SELECT m.id AS "id!", m.host_id AS "host_id!", m.status AS "status!", m.current_speaker_id AS "current_speaker_id?", m.turn_duration_ms AS "turn_duration_ms?: i64", m.turn_started_at AS "turn_started_at?: i64", m.turn_deadline AS "turn_deadline?: i64", m.last_event_seq AS "last_event_seq!: i64", m.created_at AS "created_at!: i64", m.started_at AS "started_at?: i64", m.ended_at AS "ended_at?: i64", m.policy AS "policy!", m.chosen_speaker_id AS "chosen_speaker_id?" FROM protocol_meetings m JOIN agents h ON h.id = m.host_id WHERE h.organization_id = $1 AND m.id < $2 ORDER BY m.id DESC LIMIT $3 + 0"#,
        org,
        before,
        limit
    )
    .fetch_all(conn)
    .await
}

/// Up to `limit` of the live meetings of `org` (hosted by its agents), newest first.
pub async fn org_live_meetings(
    conn: &mut SqliteConnection,
    org: &str,
    limit: i64,
) -> sqlx::Result<Vec<MeetingRow>> {
    sqlx::query_as!(
        MeetingRow,
        r#"SELECT m.id AS "id!", m.host_id AS "host_id!", m.status AS "status!", m.current_speaker_id AS "current_speaker_id?", m.turn_duration_ms AS "turn_duration_ms?: i64", m.turn_started_at AS "turn_started_at?: i64", m.turn_deadline AS "turn_deadline?: i64", m.last_event_seq AS "last_event_seq!: i64", m.created_at AS "created_at!: i64", m.started_at AS "started_at?: i64", m.ended_at AS "ended_at?: i64", m.policy AS "policy!", m.chosen_speaker_id AS "chosen_speaker_id?" FROM protocol_meetings m JOIN agents h ON h.id = m.host_id WHERE h.organization_id = $1 AND m.status <> 'ended' ORDER BY m.id DESC LIMIT $2 + 0"#,
        org,
        limit
    )
    .fetch_all(conn)
    .await
}

/// Up to `limit` of the live meetings of `org` created before `before`, newest first.
pub async fn org_live_meetings_before(
    conn: &mut SqliteConnection,
    org: &str,
    before: &str,
    limit: i64,
) -> sqlx::Result<Vec<MeetingRow>> {
    sqlx::query_as!(
        MeetingRow,
        r#"SELECT m.id AS "id!", m.host_id AS "host_id!", m.status AS "status!", m.current_speaker_id AS "current_speaker_id?", m.turn_duration_ms AS "turn_duration_ms?: i64", m.turn_started_at AS "turn_started_at?: i64", m.turn_deadline AS "turn_deadline?: i64", m.last_event_seq AS "last_event_seq!: i64", m.created_at AS "created_at!: i64", m.started_at AS "started_at?: i64", m.ended_at AS "ended_at?: i64", m.policy AS "policy!", m.chosen_speaker_id AS "chosen_speaker_id?" FROM protocol_meetings m JOIN agents h ON h.id = m.host_id WHERE h.organization_id = $1 AND m.status <> 'ended' AND m.id < $2 ORDER BY m.id DESC LIMIT $3 + 0"#,
        org,
        before,
        limit
    )
    .fetch_all(conn)
    .await
}

/// Up to `limit` of the ended meetings of `org` (hosted by its agents), newest first.
pub async fn org_ended_meetings(
    conn: &mut SqliteConnection,
    org: &str,
    limit: i64,
) -> sqlx::Result<Vec<MeetingRow>> {
    sqlx::query_as!(
        MeetingRow,
        r#"SELECT m.id AS "id!", m.host_id AS "host_id!", m.status AS "status!", m.current_speaker_id AS "current_speaker_id?", m.turn_duration_ms AS "turn_duration_ms?: i64", m.turn_started_at AS "turn_started_at?: i64", m.turn_deadline AS "turn_deadline?: i64", m.last_event_seq AS "last_event_seq!: i64", m.created_at AS "created_at!: i64", m.started_at AS "started_at?: i64", m.ended_at AS "ended_at?: i64", m.policy AS "policy!", m.chosen_speaker_id AS "chosen_speaker_id?" FROM protocol_meetings m JOIN agents h ON h.id = m.host_id WHERE h.organization_id = $1 AND m.status = 'ended' ORDER BY m.id DESC LIMIT $2 + 0"#,
        org,
        limit
    )
    .fetch_all(conn)
    .await
}

/// Up to `limit` of the ended meetings of `org` created before `before`, newest first.
pub async fn org_ended_meetings_before(
    conn: &mut SqliteConnection,
    org: &str,
    before: &str,
    limit: i64,
) -> sqlx::Result<Vec<MeetingRow>> {
    sqlx::query_as!(
        MeetingRow,
        r#"SELECT m.id AS "id!", m.host_id AS "host_id!", m.status AS "status!", m.current_speaker_id AS "current_speaker_id?", m.turn_duration_ms AS "turn_duration_ms?: i64", m.turn_started_at AS "turn_started_at?: i64", m.turn_deadline AS "turn_deadline?: i64", m.last_event_seq AS "last_event_seq!: i64", m.created_at AS "created_at!: i64", m.started_at AS "started_at?: i64", m.ended_at AS "ended_at?: i64", m.policy AS "policy!", m.chosen_speaker_id AS "chosen_speaker_id?" FROM protocol_meetings m JOIN agents h ON h.id = m.host_id WHERE h.organization_id = $1 AND m.status = 'ended' AND m.id < $2 ORDER BY m.id DESC LIMIT $3 + 0"#,
        org,
        before,
        limit
    )
    .fetch_all(conn)
    .await
}
