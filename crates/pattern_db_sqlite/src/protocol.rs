//! Statements of the agent-to-agent protocol: organizations, sessions and their messages (the
//! session message store, the inbox reads, a batch's delivery receipt), called from
//! `pattern_db::protocol` and from `pattern_protocol::store`'s sessions; the meetings' are in
//! [`meetings`].
//!
//! It must never judge a session or a message (participants, turns, limits, organizations are
//! the callers' rules), parse stored JSON (content and metadata are the caller's text), or choose
//! a lock: SQLite's single writer serialises, so it has no `FOR UPDATE` variant.

use sqlx::SqliteConnection;

pub mod lists;
pub mod meetings;
pub mod retention;

/// A `protocol_organizations` row as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OrganizationRow {
    /// `id` (a UUID's text).
    pub id: String,
    /// `external_id`.
    pub external_id: String,
    /// `name`.
    pub name: String,
    /// `created_at` (milliseconds since the epoch).
    pub created_at: i64,
}

/// A `protocol_sessions` row as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SessionRow {
    /// `id` (a UUID's text).
    pub id: String,
    /// `agent_a_id`: the participant with the smaller id.
    pub agent_a_id: String,
    /// `agent_b_id`: the participant with the larger id.
    pub agent_b_id: String,
    /// `session_type` (`sync`, `async`).
    pub session_type: String,
    /// `status` (`active`, `waiting`, `ended`).
    pub status: String,
    /// `locked_agent_id`: whose turn it is in a live sync session.
    pub locked_agent_id: Option<String>,
    /// `created_at` (milliseconds since the epoch).
    pub created_at: i64,
    /// `updated_at` (milliseconds since the epoch).
    pub updated_at: i64,
    /// `ended_at` (milliseconds since the epoch).
    pub ended_at: Option<i64>,
    /// `delivery` (`inbox`, `agents`).
    pub delivery: String,
    /// `message_limit`.
    pub message_limit: Option<i64>,
    /// `messages_sent`.
    pub messages_sent: i64,
}

/// A `protocol_messages` (or `protocol_messages_archive`) row as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProtocolMessageRow {
    /// `id` (a UUID's text).
    pub id: String,
    /// `sender_id`.
    pub sender_id: String,
    /// `recipient_id` (a session message's).
    pub recipient_id: Option<String>,
    /// `session_id`.
    pub session_id: Option<String>,
    /// `meeting_id` (a meeting message's).
    pub meeting_id: Option<String>,
    /// `message_type`.
    pub message_type: String,
    /// `content` (JSON text).
    pub content: String,
    /// `metadata` (JSON text).
    pub metadata: Option<String>,
    /// `read_at` (milliseconds since the epoch).
    pub read_at: Option<i64>,
    /// `seq` (a snowflake: arrival order).
    pub seq: i64,
    /// `created_at` (milliseconds since the epoch).
    pub created_at: i64,
}

/// What a batch's queue entry delivered: the session message and its session.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeliveredRow {
    /// The protocol message's id.
    pub message_id: String,
    /// Its session, if it is a session message.
    pub session_id: Option<String>,
}

/// A new `protocol_sessions` row (live, nothing sent yet).
#[derive(Clone, Copy, Debug)]
pub struct NewSession<'a> {
    /// `id`.
    pub id: &'a str,
    /// `agent_a_id`.
    pub agent_a: &'a str,
    /// `agent_b_id`.
    pub agent_b: &'a str,
    /// `session_type`.
    pub session_type: &'a str,
    /// `locked_agent_id`: who speaks first in a sync session.
    pub turn: Option<&'a str>,
    /// `created_at` and `updated_at`.
    pub now: i64,
    /// `delivery`.
    pub delivery: &'a str,
    /// `message_limit`.
    pub message_limit: Option<i64>,
}

/// A new session message (`protocol_messages` with a recipient and a session, unread).
#[derive(Clone, Copy, Debug)]
pub struct NewSessionMessage<'a> {
    /// `id`.
    pub id: &'a str,
    /// `sender_id`.
    pub sender: &'a str,
    /// `recipient_id`.
    pub recipient: &'a str,
    /// `session_id`.
    pub session: &'a str,
    /// `message_type`.
    pub message_type: &'a str,
    /// `content` (JSON text).
    pub content: &'a str,
    /// `metadata` (JSON text).
    pub metadata: Option<&'a str>,
    /// `seq`.
    pub seq: i64,
    /// `created_at`.
    pub now: i64,
}

// -- organizations -------------------------------------------------------------------------------

/// Whether an organization has `external_id`.
pub async fn organization_exists(
    conn: &mut SqliteConnection,
    external_id: &str,
) -> sqlx::Result<bool> {
    let found = sqlx::query_scalar!(
        r#"SELECT 1 AS "found!: i64" FROM protocol_organizations WHERE external_id = $1"#,
        external_id
    )
    .fetch_optional(conn)
    .await?;
    Ok(found.is_some())
}

/// Inserts an organization; a taken id or external id is the driver's unique violation.
pub async fn insert_organization(
    conn: &mut SqliteConnection,
    row: &OrganizationRow,
) -> sqlx::Result<()> {
    sqlx::query!(
        "INSERT INTO protocol_organizations (id, external_id, name, created_at) VALUES ($1, $2, $3, $4)",
        row.id,
        row.external_id,
        row.name,
        row.created_at
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// The organization with `external_id`.
pub async fn organization_by_external_id(
    conn: &mut SqliteConnection,
    external_id: &str,
) -> sqlx::Result<Option<OrganizationRow>> {
    sqlx::query_as!(
        OrganizationRow,
        r#"SELECT id AS "id!", external_id AS "external_id!", name AS "name!", created_at AS "created_at!: i64" FROM protocol_organizations WHERE external_id = $1"#,
        external_id
    )
    .fetch_optional(conn)
    .await
}

/// Every organization, by external id.
pub async fn organizations(conn: &mut SqliteConnection) -> sqlx::Result<Vec<OrganizationRow>> {
    sqlx::query_as!(
        OrganizationRow,
        r#"SELECT id AS "id!", external_id AS "external_id!", name AS "name!", created_at AS "created_at!: i64" FROM protocol_organizations ORDER BY external_id"#
    )
    .fetch_all(conn)
    .await
}

// -- sessions ------------------------------------------------------------------------------------

/// The session `id` (on SQLite also what a session write locks: the writer serialises).
pub async fn session(conn: &mut SqliteConnection, id: &str) -> sqlx::Result<Option<SessionRow>> {
    sqlx::query_as!(
        SessionRow,
        r#"SELECT id AS "id!", agent_a_id AS "agent_a_id!", agent_b_id AS "agent_b_id!", session_type AS "session_type!", status AS "status!", locked_agent_id AS "locked_agent_id?", created_at AS "created_at!: i64", updated_at AS "updated_at!: i64", ended_at AS "ended_at?: i64", delivery AS "delivery!", message_limit AS "message_limit?: i64", messages_sent AS "messages_sent!: i64" FROM protocol_sessions WHERE id = $1"#,
        id
    )
    .fetch_optional(conn)
    .await
}

/// The live session of the ordered pair `a`, `b` of `session_type`.
pub async fn live_session(
    conn: &mut SqliteConnection,
    a: &str,
    b: &str,
    session_type: &str,
) -> sqlx::Result<Option<SessionRow>> {
    sqlx::query_as!(
        SessionRow,
        r#"SELECT id AS "id!", agent_a_id AS "agent_a_id!", agent_b_id AS "agent_b_id!", session_type AS "session_type!", status AS "status!", locked_agent_id AS "locked_agent_id?", created_at AS "created_at!: i64", updated_at AS "updated_at!: i64", ended_at AS "ended_at?: i64", delivery AS "delivery!", message_limit AS "message_limit?: i64", messages_sent AS "messages_sent!: i64" FROM protocol_sessions WHERE agent_a_id = $1 AND agent_b_id = $2 AND session_type = $3 AND status <> 'ended'"#,
        a,
        b,
        session_type
    )
    .fetch_optional(conn)
    .await
}

/// Inserts a live session unless a live one of the pair and type exists (the partial unique
/// index: nothing happens, no error); rows inserted.
pub async fn insert_session(conn: &mut SqliteConnection, new: NewSession<'_>) -> sqlx::Result<u64> {
    let done = sqlx::query!(
        "INSERT INTO protocol_sessions (id, agent_a_id, agent_b_id, session_type, status, locked_agent_id, created_at, updated_at, ended_at, delivery, message_limit, messages_sent) VALUES ($1, $2, $3, $4, 'active', $5, $6, $6, NULL, $7, $8, 0) ON CONFLICT DO NOTHING",
        new.id,
        new.agent_a,
        new.agent_b,
        new.session_type,
        new.turn,
        new.now,
        new.delivery,
        new.message_limit
    )
    .execute(conn)
    .await?;
    Ok(done.rows_affected())
}

/// Makes session `id` one the agents answer, with `limit` unless it has a limit already.
pub async fn set_agents_delivery(
    conn: &mut SqliteConnection,
    id: &str,
    limit: Option<i64>,
) -> sqlx::Result<()> {
    sqlx::query!(
        "UPDATE protocol_sessions SET delivery = 'agents', message_limit = COALESCE(message_limit, $1) WHERE id = $2",
        limit,
        id
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// Ends session `id` at `now` (no turn).
pub async fn end_session(conn: &mut SqliteConnection, id: &str, now: i64) -> sqlx::Result<()> {
    sqlx::query!(
        "UPDATE protocol_sessions SET status = 'ended', locked_agent_id = NULL, updated_at = $1, ended_at = $1 WHERE id = $2",
        now,
        id
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// Counts a message sent in session `id` at `now` and gives the turn to `turn`.
pub async fn count_sent(
    conn: &mut SqliteConnection,
    id: &str,
    turn: Option<&str>,
    now: i64,
) -> sqlx::Result<()> {
    sqlx::query!(
        "UPDATE protocol_sessions SET locked_agent_id = $1, updated_at = $2, messages_sent = messages_sent + 1 WHERE id = $3",
        turn,
        now,
        id
    )
    .execute(conn)
    .await?;
    Ok(())
}

// -- session messages ----------------------------------------------------------------------------

/// Inserts a session message (unread).
pub async fn insert_session_message(
    conn: &mut SqliteConnection,
    new: NewSessionMessage<'_>,
) -> sqlx::Result<()> {
    sqlx::query!(
        "INSERT INTO protocol_messages (id, sender_id, recipient_id, session_id, meeting_id, message_type, content, metadata, read_at, seq, created_at) VALUES ($1, $2, $3, $4, NULL, $5, $6, $7, NULL, $8, $9)",
        new.id,
        new.sender,
        new.recipient,
        new.session,
        new.message_type,
        new.content,
        new.metadata,
        new.seq,
        new.now
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// Every message of session `id`, in arrival order.
pub async fn session_messages(
    conn: &mut SqliteConnection,
    id: &str,
) -> sqlx::Result<Vec<ProtocolMessageRow>> {
    sqlx::query_as!(
        ProtocolMessageRow,
        r#"SELECT id AS "id!", sender_id AS "sender_id!", recipient_id AS "recipient_id?", session_id AS "session_id?", meeting_id AS "meeting_id?", message_type AS "message_type!", content AS "content!", metadata AS "metadata?", read_at AS "read_at?: i64", seq AS "seq!: i64", created_at AS "created_at!: i64" FROM protocol_messages WHERE session_id = $1 ORDER BY seq"#,
        id
    )
    .fetch_all(conn)
    .await
}

/// The unread messages of `recipient`, oldest first.
pub async fn unread(
    conn: &mut SqliteConnection,
    recipient: &str,
) -> sqlx::Result<Vec<ProtocolMessageRow>> {
    sqlx::query_as!(
        ProtocolMessageRow,
        r#"SELECT id AS "id!", sender_id AS "sender_id!", recipient_id AS "recipient_id?", session_id AS "session_id?", meeting_id AS "meeting_id?", message_type AS "message_type!", content AS "content!", metadata AS "metadata?", read_at AS "read_at?: i64", seq AS "seq!: i64", created_at AS "created_at!: i64" FROM protocol_messages WHERE recipient_id = $1 AND read_at IS NULL ORDER BY seq"#,
        recipient
    )
    .fetch_all(conn)
    .await
}

/// The oldest unread message of `recipient`.
pub async fn oldest_unread(
    conn: &mut SqliteConnection,
    recipient: &str,
) -> sqlx::Result<Option<ProtocolMessageRow>> {
    sqlx::query_as!(
        ProtocolMessageRow,
        r#"SELECT id AS "id!", sender_id AS "sender_id!", recipient_id AS "recipient_id?", session_id AS "session_id?", meeting_id AS "meeting_id?", message_type AS "message_type!", content AS "content!", metadata AS "metadata?", read_at AS "read_at?: i64", seq AS "seq!: i64", created_at AS "created_at!: i64" FROM protocol_messages WHERE recipient_id = $1 AND read_at IS NULL ORDER BY seq LIMIT 1"#,
        recipient
    )
    .fetch_optional(conn)
    .await
}

/// How many unread messages `recipient` has.
pub async fn unread_count(conn: &mut SqliteConnection, recipient: &str) -> sqlx::Result<i64> {
    sqlx::query_scalar!(
        r#"SELECT COUNT(*) AS "count!: i64" FROM protocol_messages WHERE recipient_id = $1 AND read_at IS NULL"#,
        recipient
    )
    .fetch_one(conn)
    .await
}

/// Marks message `id` read at `now` if `recipient` is its recipient and it is unread; rows
/// changed.
pub async fn mark_read(
    conn: &mut SqliteConnection,
    id: &str,
    recipient: &str,
    now: i64,
) -> sqlx::Result<u64> {
    let done = sqlx::query!(
        "UPDATE protocol_messages SET read_at = $1 WHERE id = $2 AND recipient_id = $3 AND read_at IS NULL",
        now,
        id,
        recipient
    )
    .execute(conn)
    .await?;
    Ok(done.rows_affected())
}

/// The archived message `id`.
pub async fn archived_message(
    conn: &mut SqliteConnection,
    id: &str,
) -> sqlx::Result<Option<ProtocolMessageRow>> {
    sqlx::query_as!(
        ProtocolMessageRow,
        r#"SELECT id AS "id!", sender_id AS "sender_id!", recipient_id AS "recipient_id?", session_id AS "session_id?", meeting_id AS "meeting_id?", message_type AS "message_type!", content AS "content!", metadata AS "metadata?", read_at AS "read_at?: i64", seq AS "seq!: i64", created_at AS "created_at!: i64" FROM protocol_messages_archive WHERE id = $1"#,
        id
    )
    .fetch_optional(conn)
    .await
}

// -- delivery receipts ---------------------------------------------------------------------------

/// The protocol message (and its session) that `agent`'s queue entry delivered as `batch`.
pub async fn delivered(
    conn: &mut SqliteConnection,
    batch: i64,
    agent: &str,
) -> sqlx::Result<Option<DeliveredRow>> {
    sqlx::query_as!(
        DeliveredRow,
        r#"SELECT q.protocol_message_id AS "message_id!", m.session_id AS "session_id?" FROM agent_queue q JOIN protocol_messages m ON m.id = q.protocol_message_id WHERE q.delivered_batch = $1 AND q.agent_id = $2"#,
        batch,
        agent
    )
    .fetch_optional(conn)
    .await
}

/// The content (as its writer stored it: [`crate::messages::StoredText`]) of the last assistant
/// message of `batch` (role code 2, [`crate::messages::ROLES`]).
pub async fn final_answer(conn: &mut SqliteConnection, batch: i64) -> sqlx::Result<Option<String>> {
    let content = sqlx::query_scalar!(
        r#"SELECT content AS "content!: crate::messages::StoredText" FROM messages WHERE batch_id = $1 AND role = 2 ORDER BY sequence_num DESC LIMIT 1"#,
        batch
    )
    .fetch_optional(conn)
    .await?;
    Ok(content.map(crate::messages::StoredText::into_string))
}
