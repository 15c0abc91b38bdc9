//! Statements on meetings: the meeting row, its participants, its event log and its messages
//! (the writes of `pattern_protocol::store`'s meeting ops and their reads), the expired turns a
//! sweeper looks for, and the protocol's views (active conversations, active meetings, unread per
//! agent).
//!
//! It must never judge a meeting (host, speaker, states, turn order are the caller's rules),
//! parse stored JSON, or number events: the caller hands in every value.

use sqlx::SqliteConnection;

use super::SessionRow;

/// A `protocol_meetings` row as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MeetingRow {
    /// `id` (a UUID's text).
    pub id: String,
    /// `host_id`.
    pub host_id: String,
    /// `status` (`created`, `ready`, `active`, `ended`).
    pub status: String,
    /// `current_speaker_id`.
    pub current_speaker_id: Option<String>,
    /// `turn_duration_ms`.
    pub turn_duration_ms: Option<i64>,
    /// `turn_started_at` (milliseconds since the epoch).
    pub turn_started_at: Option<i64>,
    /// `turn_deadline` (milliseconds since the epoch).
    pub turn_deadline: Option<i64>,
    /// `last_event_seq`.
    pub last_event_seq: i64,
    /// `created_at` (milliseconds since the epoch).
    pub created_at: i64,
    /// `started_at` (milliseconds since the epoch).
    pub started_at: Option<i64>,
    /// `ended_at` (milliseconds since the epoch).
    pub ended_at: Option<i64>,
    /// `policy`.
    pub policy: String,
    /// `chosen_speaker_id`.
    pub chosen_speaker_id: Option<String>,
}

/// A `protocol_meeting_participants` row as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParticipantRow {
    /// `meeting_id` (a UUID's text).
    pub meeting_id: String,
    /// `agent_id` (a UUID's text).
    pub agent_id: String,
    /// `status`.
    pub status: String,
    /// `join_order`.
    pub join_order: Option<i64>,
    /// `invited_at` (milliseconds since the epoch).
    pub invited_at: Option<i64>,
    /// `joined_at` (milliseconds since the epoch).
    pub joined_at: Option<i64>,
    /// `left_at` (milliseconds since the epoch).
    pub left_at: Option<i64>,
}

/// A `protocol_meeting_events` row as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventRow {
    /// `meeting_id` (a UUID's text).
    pub meeting_id: String,
    /// `seq`.
    pub seq: i64,
    /// `event_type`.
    pub event_type: String,
    /// `agent_id`.
    pub agent_id: Option<String>,
    /// `data` (JSON text).
    pub data: Option<String>,
    /// `created_at` (milliseconds since the epoch).
    pub created_at: i64,
}

/// A row of the "active conversations" view: a live session and its agents.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ActiveConversationRow {
    /// The session.
    pub session: SessionRow,
    /// Agent A's external id.
    pub agent_a_external_id: String,
    /// Agent A's name.
    pub agent_a_name: String,
    /// Agent B's external id.
    pub agent_b_external_id: String,
    /// Agent B's name.
    pub agent_b_name: String,
}

/// A row of the "active meetings" view: a meeting not ended, its host, speaker and head count.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ActiveMeetingRow {
    /// The meeting.
    pub meeting: MeetingRow,
    /// The host's external id.
    pub host_external_id: String,
    /// The host's name.
    pub host_name: String,
    /// The speaker's external id.
    pub speaker_external_id: Option<String>,
    /// The speaker's name.
    pub speaker_name: Option<String>,
    /// Participants present (attending, waiting, speaking).
    pub participant_count: i64,
}

/// A row of the "unread per agent" view.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnreadRow {
    /// `agents.id`.
    pub agent_id: String,
    /// `agents.external_id`.
    pub external_id: String,
    /// `agents.name`.
    pub name: String,
    /// Unread messages.
    pub unread: i64,
    /// When the newest unread one arrived (milliseconds since the epoch).
    pub latest_at: Option<i64>,
}

/// What a meeting write stores back on its row (its last statement).
#[derive(Clone, Copy, Debug)]
pub struct MeetingState<'a> {
    /// `id`.
    pub id: &'a str,
    /// `status`.
    pub status: &'a str,
    /// `current_speaker_id`.
    pub speaker: Option<&'a str>,
    /// `turn_started_at`.
    pub turn_started_at: Option<i64>,
    /// `turn_deadline`.
    pub turn_deadline: Option<i64>,
    /// `last_event_seq`.
    pub last_event_seq: i64,
    /// `started_at`.
    pub started_at: Option<i64>,
    /// `ended_at`.
    pub ended_at: Option<i64>,
    /// `chosen_speaker_id`.
    pub chosen: Option<&'a str>,
}

/// A new meeting event.
#[derive(Clone, Copy, Debug)]
pub struct NewEvent<'a> {
    /// `meeting_id`.
    pub meeting: &'a str,
    /// `seq`.
    pub seq: i64,
    /// `event_type`.
    pub event_type: &'a str,
    /// `agent_id`.
    pub agent: Option<&'a str>,
    /// `data` (JSON text).
    pub data: Option<&'a str>,
    /// `created_at`.
    pub now: i64,
}

/// A new participant row.
#[derive(Clone, Copy, Debug)]
pub struct NewParticipant<'a> {
    /// `meeting_id`.
    pub meeting: &'a str,
    /// `agent_id`.
    pub agent: &'a str,
    /// `status`.
    pub status: &'a str,
    /// `join_order`.
    pub join_order: Option<i64>,
    /// `invited_at`.
    pub invited_at: Option<i64>,
    /// `joined_at`.
    pub joined_at: Option<i64>,
}

/// A new meeting message (`protocol_messages` with a meeting and no recipient).
#[derive(Clone, Copy, Debug)]
pub struct NewMeetingMessage<'a> {
    /// `id`.
    pub id: &'a str,
    /// `sender_id`.
    pub sender: &'a str,
    /// `meeting_id`.
    pub meeting: &'a str,
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

// -- the meeting row -----------------------------------------------------------------------------

/// The meeting `id` (on SQLite also what a meeting write locks: the writer serialises).
pub async fn meeting(conn: &mut SqliteConnection, id: &str) -> sqlx::Result<Option<MeetingRow>> {
    sqlx::query_as!(
        MeetingRow,
        r#"SELECT id AS "id!", host_id AS "host_id!", status AS "status!", current_speaker_id AS "current_speaker_id?", turn_duration_ms AS "turn_duration_ms?: i64", turn_started_at AS "turn_started_at?: i64", turn_deadline AS "turn_deadline?: i64", last_event_seq AS "last_event_seq!: i64", created_at AS "created_at!: i64", started_at AS "started_at?: i64", ended_at AS "ended_at?: i64", policy AS "policy!", chosen_speaker_id AS "chosen_speaker_id?" FROM protocol_meetings WHERE id = $1"#,
        id
    )
    .fetch_optional(conn)
    .await
}

/// Inserts a new meeting (created, no speaker, the host's join order 1 taken).
pub async fn insert_meeting(
    conn: &mut SqliteConnection,
    id: &str,
    host: &str,
    turn_duration_ms: Option<i64>,
    now: i64,
    policy: &str,
) -> sqlx::Result<()> {
    sqlx::query!(
        "INSERT INTO protocol_meetings (id, host_id, status, current_speaker_id, turn_duration_ms, turn_started_at, turn_deadline, last_event_seq, last_join_order, created_at, started_at, ended_at, policy) VALUES ($1, $2, 'created', NULL, $3, NULL, NULL, 0, 1, $4, NULL, NULL, $5)",
        id,
        host,
        turn_duration_ms,
        now,
        policy
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// Stores a meeting write's outcome on the meeting row.
pub async fn save_meeting(conn: &mut SqliteConnection, m: MeetingState<'_>) -> sqlx::Result<()> {
    sqlx::query!(
        "UPDATE protocol_meetings SET status = $1, current_speaker_id = $2, turn_started_at = $3, turn_deadline = $4, last_event_seq = $5, started_at = $6, ended_at = $7, chosen_speaker_id = $8 WHERE id = $9",
        m.status,
        m.speaker,
        m.turn_started_at,
        m.turn_deadline,
        m.last_event_seq,
        m.started_at,
        m.ended_at,
        m.chosen,
        m.id
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// Takes the meeting's next join order.
pub async fn next_join_order(conn: &mut SqliteConnection, id: &str) -> sqlx::Result<i64> {
    sqlx::query_scalar!(
        r#"UPDATE protocol_meetings SET last_join_order = last_join_order + 1 WHERE id = $1 RETURNING last_join_order AS "order!: i64""#,
        id
    )
    .fetch_one(conn)
    .await
}

/// Appends an event to a meeting's log.
pub async fn insert_event(conn: &mut SqliteConnection, new: NewEvent<'_>) -> sqlx::Result<()> {
    sqlx::query!(
        "INSERT INTO protocol_meeting_events (meeting_id, seq, event_type, agent_id, data, created_at) VALUES ($1, $2, $3, $4, $5, $6)",
        new.meeting,
        new.seq,
        new.event_type,
        new.agent,
        new.data,
        new.now
    )
    .execute(conn)
    .await?;
    Ok(())
}

// -- participants --------------------------------------------------------------------------------

/// The participants of `meeting`, in join order (invited-only ones last).
pub async fn participants(
    conn: &mut SqliteConnection,
    meeting: &str,
) -> sqlx::Result<Vec<ParticipantRow>> {
    sqlx::query_as!(
        ParticipantRow,
        r#"SELECT meeting_id AS "meeting_id!", agent_id AS "agent_id!", status AS "status!", join_order AS "join_order?: i64", invited_at AS "invited_at?: i64", joined_at AS "joined_at?: i64", left_at AS "left_at?: i64" FROM protocol_meeting_participants WHERE meeting_id = $1 ORDER BY join_order IS NULL, join_order, agent_id"#,
        meeting
    )
    .fetch_all(conn)
    .await
}

/// Participant `agent` of `meeting`.
pub async fn participant(
    conn: &mut SqliteConnection,
    meeting: &str,
    agent: &str,
) -> sqlx::Result<Option<ParticipantRow>> {
    sqlx::query_as!(
        ParticipantRow,
        r#"SELECT meeting_id AS "meeting_id!", agent_id AS "agent_id!", status AS "status!", join_order AS "join_order?: i64", invited_at AS "invited_at?: i64", joined_at AS "joined_at?: i64", left_at AS "left_at?: i64" FROM protocol_meeting_participants WHERE meeting_id = $1 AND agent_id = $2"#,
        meeting,
        agent
    )
    .fetch_optional(conn)
    .await
}

/// Inserts a participant (left: no).
pub async fn insert_participant(
    conn: &mut SqliteConnection,
    new: NewParticipant<'_>,
) -> sqlx::Result<()> {
    sqlx::query!(
        "INSERT INTO protocol_meeting_participants (meeting_id, agent_id, status, join_order, invited_at, joined_at, left_at) VALUES ($1, $2, $3, $4, $5, $6, NULL)",
        new.meeting,
        new.agent,
        new.status,
        new.join_order,
        new.invited_at,
        new.joined_at
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// Sets participant `agent`'s status.
pub async fn set_participant_status(
    conn: &mut SqliteConnection,
    meeting: &str,
    agent: &str,
    status: &str,
) -> sqlx::Result<()> {
    sqlx::query!(
        "UPDATE protocol_meeting_participants SET status = $1 WHERE meeting_id = $2 AND agent_id = $3",
        status,
        meeting,
        agent
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// Sets every participant of `meeting` in status `from` to `to`.
pub async fn set_status_where(
    conn: &mut SqliteConnection,
    meeting: &str,
    from: &str,
    to: &str,
) -> sqlx::Result<()> {
    sqlx::query!(
        "UPDATE protocol_meeting_participants SET status = $1 WHERE meeting_id = $2 AND status = $3",
        to,
        meeting,
        from
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// Invites a participant who left again, at `now`.
pub async fn reinvite(
    conn: &mut SqliteConnection,
    meeting: &str,
    agent: &str,
    now: i64,
) -> sqlx::Result<()> {
    sqlx::query!(
        "UPDATE protocol_meeting_participants SET status = 'invited', invited_at = $1, left_at = NULL WHERE meeting_id = $2 AND agent_id = $3",
        now,
        meeting,
        agent
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// A known participant joins (again) with `status` and join order `order` at `now`.
pub async fn rejoin(
    conn: &mut SqliteConnection,
    meeting: &str,
    agent: &str,
    status: &str,
    order: i64,
    now: i64,
) -> sqlx::Result<()> {
    sqlx::query!(
        "UPDATE protocol_meeting_participants SET status = $1, join_order = $2, joined_at = $3, left_at = NULL WHERE meeting_id = $4 AND agent_id = $5",
        status,
        order,
        now,
        meeting,
        agent
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// Participant `agent` leaves at `now`.
pub async fn leave(
    conn: &mut SqliteConnection,
    meeting: &str,
    agent: &str,
    now: i64,
) -> sqlx::Result<()> {
    sqlx::query!(
        "UPDATE protocol_meeting_participants SET status = 'left', left_at = $1 WHERE meeting_id = $2 AND agent_id = $3",
        now,
        meeting,
        agent
    )
    .execute(conn)
    .await?;
    Ok(())
}

// -- messages and events -------------------------------------------------------------------------

/// Inserts a message said in a meeting.
pub async fn insert_meeting_message(
    conn: &mut SqliteConnection,
    new: NewMeetingMessage<'_>,
) -> sqlx::Result<()> {
    sqlx::query!(
        "INSERT INTO protocol_messages (id, sender_id, recipient_id, session_id, meeting_id, message_type, content, metadata, read_at, seq, created_at) VALUES ($1, $2, NULL, NULL, $3, $4, $5, $6, NULL, $7, $8)",
        new.id,
        new.sender,
        new.meeting,
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

/// The messages of `meeting`, in order.
pub async fn meeting_messages(
    conn: &mut SqliteConnection,
    meeting: &str,
) -> sqlx::Result<Vec<super::ProtocolMessageRow>> {
    sqlx::query_as!(
        super::ProtocolMessageRow,
        r#"SELECT id AS "id!", sender_id AS "sender_id!", recipient_id AS "recipient_id?", session_id AS "session_id?", meeting_id AS "meeting_id?", message_type AS "message_type!", content AS "content!", metadata AS "metadata?", read_at AS "read_at?: i64", seq AS "seq!: i64", created_at AS "created_at!: i64" FROM protocol_messages WHERE meeting_id = $1 ORDER BY seq"#,
        meeting
    )
    .fetch_all(conn)
    .await
}

/// Up to `limit` events of `meeting` after sequence number `after`, in order.
pub async fn events_after(
    conn: &mut SqliteConnection,
    meeting: &str,
    after: i64,
    limit: i64,
) -> sqlx::Result<Vec<EventRow>> {
    sqlx::query_as!(
        EventRow,
        r#"SELECT meeting_id AS "meeting_id!", seq AS "seq!: i64", event_type AS "event_type!", agent_id AS "agent_id?", data AS "data?", created_at AS "created_at!: i64" FROM protocol_meeting_events WHERE meeting_id = $1 AND seq > $2 ORDER BY seq LIMIT $3 + 0"#,
        meeting,
        after,
        limit
    )
    .fetch_all(conn)
    .await
}

/// Up to `limit` meetings whose turn deadline is at or before `now`, oldest deadline first.
pub async fn expired(
    conn: &mut SqliteConnection,
    now: i64,
    limit: i64,
) -> sqlx::Result<Vec<String>> {
    sqlx::query_scalar!(
        r#"SELECT id AS "id!" FROM protocol_meetings WHERE turn_deadline IS NOT NULL AND turn_deadline <= $1 ORDER BY turn_deadline LIMIT $2 + 0"#,
        now,
        limit
    )
    .fetch_all(conn)
    .await
}

// -- views ---------------------------------------------------------------------------------------

/// Every live session with its agents, newest change first.
pub async fn active_conversations(
    conn: &mut SqliteConnection,
) -> sqlx::Result<Vec<ActiveConversationRow>> {
    let rows = sqlx::query!(
        r#"SELECT s.id AS "id!", s.agent_a_id AS "agent_a_id!", s.agent_b_id AS "agent_b_id!", s.session_type AS "session_type!", s.status AS "status!", s.locked_agent_id AS "locked_agent_id?", s.created_at AS "created_at!: i64", s.updated_at AS "updated_at!: i64", s.ended_at AS "ended_at?: i64", s.delivery AS "delivery!", s.message_limit AS "message_limit?: i64", s.messages_sent AS "messages_sent!: i64", a.external_id AS "a_external_id!", a.name AS "a_name!", b.external_id AS "b_external_id!", b.name AS "b_name!" FROM protocol_sessions s JOIN agents a ON a.id = s.agent_a_id JOIN agents b ON b.id = s.agent_b_id WHERE s.status <> 'ended' ORDER BY s.updated_at DESC, s.id"#
    )
    .fetch_all(conn)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| ActiveConversationRow {
            session: SessionRow {
                id: r.id,
                agent_a_id: r.agent_a_id,
                agent_b_id: r.agent_b_id,
                session_type: r.session_type,
                status: r.status,
                locked_agent_id: r.locked_agent_id,
                created_at: r.created_at,
                updated_at: r.updated_at,
                ended_at: r.ended_at,
                delivery: r.delivery,
                message_limit: r.message_limit,
                messages_sent: r.messages_sent,
            },
            agent_a_external_id: r.a_external_id,
            agent_a_name: r.a_name,
            agent_b_external_id: r.b_external_id,
            agent_b_name: r.b_name,
        })
        .collect())
}

/// Every meeting not ended, with host, speaker and the participants present, oldest first.
pub async fn active_meetings(conn: &mut SqliteConnection) -> sqlx::Result<Vec<ActiveMeetingRow>> {
    let rows = sqlx::query!(
        r#"SELECT m.id AS "id!", m.host_id AS "host_id!", m.status AS "status!", m.current_speaker_id AS "current_speaker_id?", m.turn_duration_ms AS "turn_duration_ms?: i64", m.turn_started_at AS "turn_started_at?: i64", m.turn_deadline AS "turn_deadline?: i64", m.last_event_seq AS "last_event_seq!: i64", m.created_at AS "created_at!: i64", m.started_at AS "started_at?: i64", m.ended_at AS "ended_at?: i64", m.policy AS "policy!", m.chosen_speaker_id AS "chosen_speaker_id?", h.external_id AS "h_external_id!", h.name AS "h_name!", cs.external_id AS "cs_external_id?", cs.name AS "cs_name?", (SELECT COUNT(*) FROM protocol_meeting_participants p WHERE p.meeting_id = m.id AND p.status IN ('attending', 'waiting', 'speaking')) AS "present!: i64" FROM protocol_meetings m JOIN agents h ON h.id = m.host_id LEFT JOIN agents cs ON cs.id = m.current_speaker_id WHERE m.status <> 'ended' ORDER BY m.created_at, m.id"#
    )
    .fetch_all(conn)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| ActiveMeetingRow {
            meeting: MeetingRow {
                id: r.id,
                host_id: r.host_id,
                status: r.status,
                current_speaker_id: r.current_speaker_id,
                turn_duration_ms: r.turn_duration_ms,
                turn_started_at: r.turn_started_at,
                turn_deadline: r.turn_deadline,
                last_event_seq: r.last_event_seq,
                created_at: r.created_at,
                started_at: r.started_at,
                ended_at: r.ended_at,
                policy: r.policy,
                chosen_speaker_id: r.chosen_speaker_id,
            },
            host_external_id: r.h_external_id,
            host_name: r.h_name,
            speaker_external_id: r.cs_external_id,
            speaker_name: r.cs_name,
            participant_count: r.present,
        })
        .collect())
}

/// Every agent (by external id) with its unread count and newest unread arrival.
pub async fn unread_per_agent(conn: &mut SqliteConnection) -> sqlx::Result<Vec<UnreadRow>> {
    sqlx::query_as!(
        UnreadRow,
        r#"SELECT a.id AS "agent_id!", a.external_id AS "external_id!", a.name AS "name!", (SELECT COUNT(*) FROM protocol_messages m WHERE m.recipient_id = a.id AND m.read_at IS NULL) AS "unread!: i64", (SELECT MAX(m.created_at) FROM protocol_messages m WHERE m.recipient_id = a.id AND m.read_at IS NULL) AS "latest_at?: i64" FROM agents a ORDER BY a.external_id"#
    )
    .fetch_all(conn)
    .await
}
