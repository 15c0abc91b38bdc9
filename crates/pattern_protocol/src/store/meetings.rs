//! The SQL of meetings' reads (a meeting, its participants, messages and event log, the
//! expired ones for a sweeper), the views (active conversations, active meetings, unread per
//! agent) and the [`Store`] methods that queue meeting and retention writes (their SQL is in
//! [`super::meeting_writes`]); and the meeting tables' row decoders.
//!
//! Every change appends to the meeting's event log with the next sequence number (1, 2, 3 ...),
//! under the meeting's row lock (PostgreSQL `SELECT ... FOR UPDATE`; SQLite's single writer), so
//! events become visible in sequence order and "everything after N" never skips or repeats one.
//! This module must never write outside the writer, and never wake anyone itself: on PostgreSQL
//! the writes send `NOTIFY` inside their transaction (delivered at commit only).

use std::time::Duration;

use chrono::{DateTime, Utc};
use pattern_db::protocol::{
    MESSAGE_COLUMNS, SESSION_COLUMNS, json, message_from_row, opt_uuid, session_from_row,
    validate_name,
};
use pattern_db::sql::Row;
use pattern_db::storage::{from_ms, now_ms, parse_uuid};
use pattern_db::{
    AgentId, Error, MeetingId, NewProtocolMessage, ProtocolError as DbProtocolError,
    ProtocolMessage, ProtocolMessageId, Result, StorageError,
};

use super::Store;
use super::meeting_writes::{ProtocolDone, ProtocolOp};
use crate::meeting::{
    ActiveConversation, ActiveMeeting, MAX_TURN_DURATION, Meeting, MeetingEvent, MeetingEventType,
    MeetingPolicy, MeetingStatus, MeetingUpdate, Participant, ParticipantStatus, RetentionPolicy,
    RetentionReport, UnreadSummary,
};

pub(super) const MEETING_COLUMNS: &str = "id, host_id, status, current_speaker_id, \
    turn_duration_ms, turn_started_at, turn_deadline, last_event_seq, created_at, started_at, \
    ended_at, policy, chosen_speaker_id";
pub(super) const PARTICIPANT_COLUMNS: &str =
    "meeting_id, agent_id, status, join_order, invited_at, joined_at, left_at";
pub(super) const EVENT_COLUMNS: &str = "meeting_id, seq, event_type, agent_id, data, created_at";

fn to_u64(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

pub(super) fn meeting_from_row(row: &Row) -> Result<Meeting> {
    let id: String = row.try_get(0)?;
    let host: String = row.try_get(1)?;
    let status: String = row.try_get(2)?;
    Ok(Meeting {
        id: MeetingId(parse_uuid(&id)?),
        host: AgentId(parse_uuid(&host)?),
        status: MeetingStatus::parse(&status)?,
        speaker: opt_uuid(row, 3)?.map(AgentId),
        turn_duration: row
            .try_get::<Option<i64>, _>(4)?
            .map(|ms| Duration::from_millis(to_u64(ms))),
        turn_started_at: row.try_get::<Option<i64>, _>(5)?.map(from_ms),
        turn_deadline: row.try_get::<Option<i64>, _>(6)?.map(from_ms),
        last_event_seq: to_u64(row.try_get(7)?),
        created_at: from_ms(row.try_get(8)?),
        started_at: row.try_get::<Option<i64>, _>(9)?.map(from_ms),
        ended_at: row.try_get::<Option<i64>, _>(10)?.map(from_ms),
        policy: MeetingPolicy::parse(&row.try_get::<String, _>(11)?)
            .map_err(|_| StorageError::Corrupt("unknown stored meeting policy".into()))?,
        chosen: opt_uuid(row, 12)?.map(AgentId),
    })
}

pub(super) fn participant_from_row(row: &Row) -> Result<Participant> {
    let meeting: String = row.try_get(0)?;
    let agent: String = row.try_get(1)?;
    let status: String = row.try_get(2)?;
    Ok(Participant {
        meeting: MeetingId(parse_uuid(&meeting)?),
        agent: AgentId(parse_uuid(&agent)?),
        status: ParticipantStatus::parse(&status)?,
        join_order: row.try_get::<Option<i64>, _>(3)?.map(to_u64),
        invited_at: row.try_get::<Option<i64>, _>(4)?.map(from_ms),
        joined_at: row.try_get::<Option<i64>, _>(5)?.map(from_ms),
        left_at: row.try_get::<Option<i64>, _>(6)?.map(from_ms),
    })
}

pub(super) fn event_from_row(row: &Row) -> Result<MeetingEvent> {
    let meeting: String = row.try_get(0)?;
    let event_type: String = row.try_get(2)?;
    Ok(MeetingEvent {
        meeting: MeetingId(parse_uuid(&meeting)?),
        seq: to_u64(row.try_get(1)?),
        event_type: MeetingEventType::parse(&event_type)?,
        agent: opt_uuid(row, 3)?.map(AgentId),
        data: row
            .try_get::<Option<String>, _>(4)?
            .map(|d| json(&d))
            .transpose()?,
        created_at: from_ms(row.try_get(5)?),
    })
}

/// A turn duration must be 1 ms to [`MAX_TURN_DURATION`]
/// ([`pattern_db::ProtocolError::InvalidMessage`]).
fn check_turn_duration(turn_duration: Option<Duration>) -> Result<()> {
    match turn_duration {
        Some(d) if d < Duration::from_millis(1) || d > MAX_TURN_DURATION => {
            Err(DbProtocolError::InvalidMessage(format!(
                "a turn duration must be 1 ms to {MAX_TURN_DURATION:?}, got {d:?}"
            ))
            .into())
        }
        _ => Ok(()),
    }
}

impl Store<'_> {
    async fn meeting_write(&self, op: ProtocolOp) -> Result<MeetingUpdate> {
        match self.db.write(op).await? {
            ProtocolDone::Meeting(update) => Ok(*update),
            ProtocolDone::Refused(refused) => Err(refused.1),
            ProtocolDone::Retention(_) => Err(StorageError::Corrupt(
                "a meeting write answered with a retention report".into(),
            )
            .into()),
        }
    }

    /// Creates a meeting hosted by `host`, who joins it at once (join order 1). `turn_duration`
    /// limits each turn (1 ms to [`MAX_TURN_DURATION`]; otherwise
    /// [`pattern_db::ProtocolError::InvalidMessage`]). Unknown host:
    /// [`pattern_db::ProtocolError::NotFound`].
    pub async fn create_meeting(
        &self,
        host: AgentId,
        turn_duration: Option<Duration>,
    ) -> Result<MeetingUpdate> {
        check_turn_duration(turn_duration)?;
        self.meeting_write(ProtocolOp::CreateMeeting {
            host,
            turn_duration,
            policy: MeetingPolicy::RoundRobin,
            plan: None,
        })
        .await
    }

    /// [`Self::create_meeting`] with a plan (how a driver runs the meeting: topic, rounds,
    /// policy...), stored as `plan` in the `meeting_created` event's data, so whichever process
    /// resumes the meeting reads it from the log. At most 64 KiB of JSON. `policy` is how the
    /// protocol hands the turn on ([`MeetingPolicy`]).
    pub async fn create_meeting_with_plan(
        &self,
        host: AgentId,
        turn_duration: Option<Duration>,
        policy: MeetingPolicy,
        plan: serde_json::Value,
    ) -> Result<MeetingUpdate> {
        let size = plan.to_string().len();
        if size > 64 * 1024 {
            return Err(DbProtocolError::InvalidMessage(format!(
                "a meeting plan may hold at most 64 KiB of JSON, got {size} bytes"
            ))
            .into());
        }
        check_turn_duration(turn_duration)?;
        self.meeting_write(ProtocolOp::CreateMeeting {
            host,
            turn_duration,
            policy,
            plan: Some(plan),
        })
        .await
    }

    /// The host of a selector meeting, holding the turn, names `next` (a present participant,
    /// not itself) to speak after its turn; the choice takes effect when the host's turn ends
    /// (it speaks, passes, times out or leaves). Not the host: [`ProtocolError::NotHost`](crate::ProtocolError::NotHost); not its
    /// turn: [`ProtocolError::NotSpeaker`](crate::ProtocolError::NotSpeaker); another policy: [`ProtocolError::MeetingState`](crate::ProtocolError::MeetingState); `next`
    /// absent: [`ProtocolError::NotMeetingParticipant`](crate::ProtocolError::NotMeetingParticipant); nothing stored on any refusal.
    pub async fn choose_speaker(
        &self,
        meeting: MeetingId,
        host: AgentId,
        next: AgentId,
    ) -> Result<MeetingUpdate> {
        self.meeting_write(ProtocolOp::Choose {
            meeting,
            host,
            next,
        })
        .await
    }

    /// Speaks (`Some`) or passes (`None`) only in the turn that began at `turn_started_at`
    /// (the meeting's [`Meeting::turn_started_at`] when the caller read it): a driver that
    /// acts on a turn it read earlier never speaks into a later turn of the same agent.
    /// Another turn, or not the speaker: [`ProtocolError::NotSpeaker`](crate::ProtocolError::NotSpeaker), nothing stored.
    pub async fn speak_in_turn(
        &self,
        meeting: MeetingId,
        agent: AgentId,
        turn_started_at: DateTime<Utc>,
        message: Option<NewProtocolMessage>,
    ) -> Result<MeetingUpdate> {
        if let Some(m) = &message {
            validate_name("message type", &m.message_type)?;
        }
        self.meeting_write(ProtocolOp::Speak {
            meeting,
            agent,
            message,
            turn: Some(turn_started_at.timestamp_millis()),
        })
        .await
    }

    /// The host invites `agent` (optional: anyone may join). Not the host:
    /// [`ProtocolError::NotHost`](crate::ProtocolError::NotHost); already invited or present:
    /// [`ProtocolError::AlreadyParticipant`](crate::ProtocolError::AlreadyParticipant); ended: [`ProtocolError::MeetingEnded`](crate::ProtocolError::MeetingEnded).
    pub async fn invite_to_meeting(
        &self,
        meeting: MeetingId,
        host: AgentId,
        agent: AgentId,
    ) -> Result<MeetingUpdate> {
        self.meeting_write(ProtocolOp::Invite {
            meeting,
            host,
            agent,
        })
        .await
    }

    /// `agent` joins (again, after leaving: at the end of the order). Present already:
    /// [`ProtocolError::AlreadyParticipant`](crate::ProtocolError::AlreadyParticipant); ended: [`ProtocolError::MeetingEnded`](crate::ProtocolError::MeetingEnded).
    pub async fn join_meeting(&self, meeting: MeetingId, agent: AgentId) -> Result<MeetingUpdate> {
        self.meeting_write(ProtocolOp::Join { meeting, agent })
            .await
    }

    /// The host starts a ready meeting; the first present participant in join order speaks.
    /// Not ready or started already: [`ProtocolError::MeetingState`](crate::ProtocolError::MeetingState).
    pub async fn start_meeting(&self, meeting: MeetingId, host: AgentId) -> Result<MeetingUpdate> {
        self.meeting_write(ProtocolOp::Start { meeting, host })
            .await
    }

    /// The current speaker says `message` and the turn passes on. Not the speaker:
    /// [`ProtocolError::NotSpeaker`](crate::ProtocolError::NotSpeaker) (nothing stored); not present:
    /// [`ProtocolError::NotMeetingParticipant`](crate::ProtocolError::NotMeetingParticipant); not active: [`ProtocolError::MeetingState`](crate::ProtocolError::MeetingState) or
    /// [`ProtocolError::MeetingEnded`](crate::ProtocolError::MeetingEnded).
    pub async fn speak(
        &self,
        meeting: MeetingId,
        agent: AgentId,
        message: NewProtocolMessage,
    ) -> Result<MeetingUpdate> {
        validate_name("message type", &message.message_type)?;
        self.meeting_write(ProtocolOp::Speak {
            meeting,
            agent,
            message: Some(message),
            turn: None,
        })
        .await
    }

    /// The current speaker passes its turn without speaking; same refusals as [`Self::speak`].
    pub async fn pass_turn(&self, meeting: MeetingId, agent: AgentId) -> Result<MeetingUpdate> {
        self.meeting_write(ProtocolOp::Speak {
            meeting,
            agent,
            message: None,
            turn: None,
        })
        .await
    }

    /// `agent` leaves; if it was speaking the turn passes on, and an active meeting that
    /// everyone left ends. Not present: [`ProtocolError::NotMeetingParticipant`](crate::ProtocolError::NotMeetingParticipant).
    pub async fn leave_meeting(&self, meeting: MeetingId, agent: AgentId) -> Result<MeetingUpdate> {
        self.meeting_write(ProtocolOp::Leave { meeting, agent })
            .await
    }

    /// The host ends the meeting. Not the host: [`ProtocolError::NotHost`](crate::ProtocolError::NotHost); ended:
    /// [`ProtocolError::MeetingEnded`](crate::ProtocolError::MeetingEnded).
    pub async fn end_meeting(&self, meeting: MeetingId, host: AgentId) -> Result<MeetingUpdate> {
        self.meeting_write(ProtocolOp::EndMeeting { meeting, host })
            .await
    }

    /// Applies an expired turn deadline, if any (times the speaker out, passes the turn). The
    /// update's `events` is empty when nothing had expired.
    pub async fn apply_meeting_timeouts(&self, meeting: MeetingId) -> Result<MeetingUpdate> {
        self.meeting_write(ProtocolOp::ApplyTimeouts { meeting })
            .await
    }

    /// Runs retention (see [`RetentionPolicy`]) as one transaction and reports what it did. On
    /// PostgreSQL rows another transaction holds are skipped (never waited for) and counted.
    /// A zero age is refused ([`RetentionPolicy::check`]) before anything runs.
    pub async fn protocol_retention(&self, policy: RetentionPolicy) -> Result<RetentionReport> {
        policy.check()?;
        match self.db.write(ProtocolOp::Retention(policy)).await? {
            ProtocolDone::Retention(report) => Ok(*report),
            ProtocolDone::Meeting(_) | ProtocolDone::Refused(_) => Err(Error::Storage(
                StorageError::Corrupt("protocol retention answered with a meeting update".into()),
            )),
        }
    }

    /// The meeting with this id ([`pattern_db::ProtocolError::NotFound`] otherwise).
    pub async fn meeting(&self, id: MeetingId) -> Result<Meeting> {
        let row = pattern_db::sql::query(sqlx::AssertSqlSafe(format!(
            "SELECT {MEETING_COLUMNS} FROM protocol_meetings WHERE id = $1"
        )))
        .bind(id.to_string())
        .fetch_optional(self.db.reader())
        .await?;
        match row {
            Some(row) => meeting_from_row(&row),
            None => Err(DbProtocolError::NotFound {
                kind: "meeting",
                id: id.0,
            }
            .into()),
        }
    }

    /// The participants of a meeting, in join order (invited-only ones last).
    pub async fn meeting_participants(&self, meeting: MeetingId) -> Result<Vec<Participant>> {
        pattern_db::sql::query(sqlx::AssertSqlSafe(format!(
            "SELECT {PARTICIPANT_COLUMNS} FROM protocol_meeting_participants \
             WHERE meeting_id = $1 ORDER BY join_order IS NULL, join_order, agent_id"
        )))
        .bind(meeting.to_string())
        .fetch_all(self.db.reader())
        .await?
        .iter()
        .map(participant_from_row)
        .collect()
    }

    /// The messages of a meeting (its history), in order.
    pub async fn meeting_messages(&self, meeting: MeetingId) -> Result<Vec<ProtocolMessage>> {
        pattern_db::sql::query(sqlx::AssertSqlSafe(format!(
            "SELECT {MESSAGE_COLUMNS} FROM protocol_messages WHERE meeting_id = $1 ORDER BY seq"
        )))
        .bind(meeting.to_string())
        .fetch_all(self.db.reader())
        .await?
        .iter()
        .map(message_from_row)
        .collect()
    }

    /// Up to `limit` events of a meeting with a sequence number above `after`, in order. An
    /// unknown meeting is [`pattern_db::ProtocolError::NotFound`].
    pub async fn meeting_events_after(
        &self,
        meeting: MeetingId,
        after: u64,
        limit: u32,
    ) -> Result<Vec<MeetingEvent>> {
        let rows = pattern_db::sql::query(sqlx::AssertSqlSafe(format!(
            "SELECT {EVENT_COLUMNS} FROM protocol_meeting_events \
             WHERE meeting_id = $1 AND seq > $2 ORDER BY seq LIMIT $3"
        )))
        .bind(meeting.to_string())
        .bind(i64::try_from(after).unwrap_or(i64::MAX))
        .bind(i64::from(limit))
        .fetch_all(self.db.reader())
        .await?;
        if rows.is_empty() {
            // Tell "no new events" from "no such meeting".
            self.meeting(meeting).await?;
        }
        rows.iter().map(event_from_row).collect()
    }

    /// Active meetings whose turn deadline has passed (for a sweeper), oldest deadline first.
    pub async fn expired_meetings(&self, limit: u32) -> Result<Vec<MeetingId>> {
        pattern_db::sql::query(
            "SELECT id FROM protocol_meetings WHERE turn_deadline IS NOT NULL \
             AND turn_deadline <= $1 ORDER BY turn_deadline LIMIT $2",
        )
        .bind(now_ms())
        .bind(i64::from(limit))
        .fetch_all(self.db.reader())
        .await?
        .iter()
        .map(|row| Ok(MeetingId(parse_uuid(&row.try_get::<String, _>(0)?)?)))
        .collect()
    }

    /// The "active conversations" view: every live session with its agents, newest change first.
    pub async fn active_conversations(&self) -> Result<Vec<ActiveConversation>> {
        let columns = SESSION_COLUMNS
            .split(", ")
            .map(|c| format!("s.{c}"))
            .collect::<Vec<_>>()
            .join(", ");
        let rows = pattern_db::sql::query(sqlx::AssertSqlSafe(format!(
            "SELECT {columns}, a.external_id, a.name, b.external_id, b.name \
             FROM protocol_sessions s \
             JOIN agents a ON a.id = s.agent_a_id \
             JOIN agents b ON b.id = s.agent_b_id \
             WHERE s.status <> 'ended' ORDER BY s.updated_at DESC, s.id"
        )))
        .fetch_all(self.db.reader())
        .await?;
        rows.iter()
            .map(|row| {
                // The extra columns follow the session's own.
                let at = SESSION_COLUMNS.split(", ").count();
                Ok(ActiveConversation {
                    session: session_from_row(row)?,
                    agent_a_external_id: row.try_get(at)?,
                    agent_a_name: row.try_get(at + 1)?,
                    agent_b_external_id: row.try_get(at + 2)?,
                    agent_b_name: row.try_get(at + 3)?,
                })
            })
            .collect()
    }

    /// The "active meetings" view: every meeting not ended, with host, speaker and the number of
    /// participants present, oldest first.
    pub async fn active_meetings(&self) -> Result<Vec<ActiveMeeting>> {
        let columns = MEETING_COLUMNS
            .split(", ")
            .map(|c| format!("m.{c}"))
            .collect::<Vec<_>>()
            .join(", ");
        let rows = pattern_db::sql::query(sqlx::AssertSqlSafe(format!(
            "SELECT {columns}, h.external_id, h.name, cs.external_id, cs.name, \
             (SELECT COUNT(*) FROM protocol_meeting_participants p WHERE p.meeting_id = m.id \
              AND p.status IN ('attending', 'waiting', 'speaking')) \
             FROM protocol_meetings m \
             JOIN agents h ON h.id = m.host_id \
             LEFT JOIN agents cs ON cs.id = m.current_speaker_id \
             WHERE m.status <> 'ended' ORDER BY m.created_at, m.id"
        )))
        .fetch_all(self.db.reader())
        .await?;
        rows.iter()
            .map(|row| {
                // The extra columns follow the meeting's own.
                let at = MEETING_COLUMNS.split(", ").count();
                Ok(ActiveMeeting {
                    meeting: meeting_from_row(row)?,
                    host_external_id: row.try_get(at)?,
                    host_name: row.try_get(at + 1)?,
                    speaker_external_id: row.try_get(at + 2)?,
                    speaker_name: row.try_get(at + 3)?,
                    participant_count: to_u64(row.try_get(at + 4)?),
                })
            })
            .collect()
    }

    /// The "unread per agent" view: every protocol agent (by external id) with its unread count
    /// and the arrival time of its newest unread message.
    pub async fn unread_per_agent(&self) -> Result<Vec<UnreadSummary>> {
        let rows = pattern_db::sql::query(
            "SELECT a.id, a.external_id, a.name, \
             (SELECT COUNT(*) FROM protocol_messages m \
              WHERE m.recipient_id = a.id AND m.read_at IS NULL), \
             (SELECT MAX(m.created_at) FROM protocol_messages m \
              WHERE m.recipient_id = a.id AND m.read_at IS NULL) \
             FROM agents a ORDER BY a.external_id",
        )
        .fetch_all(self.db.reader())
        .await?;
        rows.iter()
            .map(|row| {
                let id: String = row.try_get(0)?;
                Ok(UnreadSummary {
                    agent: AgentId(parse_uuid(&id)?),
                    external_id: row.try_get(1)?,
                    name: row.try_get(2)?,
                    unread: to_u64(row.try_get(3)?),
                    latest_at: row.try_get::<Option<i64>, _>(4)?.map(from_ms),
                })
            })
            .collect()
    }

    /// An archived message, if retention moved it.
    pub async fn archived_message(&self, id: ProtocolMessageId) -> Result<Option<ProtocolMessage>> {
        pattern_db::sql::query(sqlx::AssertSqlSafe(format!(
            "SELECT {MESSAGE_COLUMNS} FROM protocol_messages_archive WHERE id = $1"
        )))
        .bind(id.to_string())
        .fetch_optional(self.db.reader())
        .await?
        .as_ref()
        .map(message_from_row)
        .transpose()
    }
}
