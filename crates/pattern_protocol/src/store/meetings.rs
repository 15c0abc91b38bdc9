//! The SQL of meetings' reads (a meeting, its participants, messages and event log, the
//! expired ones for a sweeper), the views (active conversations, active meetings, unread per
//! agent) and the [`Store`] methods that queue meeting and retention writes (their SQL is in
//! [`super::meeting_writes`]); and the conversions of the meeting tables' checked rows (either
//! engine's, [`StoredProtocolRow`]). The reads are checked statements
//! (`pattern_db_sqlite::protocol::meetings`, `pattern_db_postgres::protocol::meetings`).
//!
//! Every change appends to the meeting's event log with the next sequence number (1, 2, 3 ...),
//! under the meeting's row lock (PostgreSQL `SELECT ... FOR UPDATE`; SQLite's single writer), so
//! events become visible in sequence order and "everything after N" never skips or repeats one.
//! This module must never write outside the writer, and never wake anyone itself: on PostgreSQL
//! the writes send `NOTIFY` inside their transaction (delivered at commit only).

use std::time::Duration;

use chrono::{DateTime, Utc};
use pattern_db::protocol::{StoredProtocolRow, json, validate_name};
use pattern_db::storage::{Conn, now_ms};
use pattern_db::{
    AgentId, Error, MeetingId, NewProtocolMessage, ProtocolError as DbProtocolError,
    ProtocolMessage, ProtocolMessageId, Result, StorageError,
};

use super::meeting_writes::{ProtocolDone, ProtocolOp};
use super::{Store, StoredId, StoredTime, instant};
use crate::meeting::{
    ActiveConversation, ActiveMeeting, MAX_TURN_DURATION, Meeting, MeetingEvent, MeetingEventType,
    MeetingPolicy, MeetingStatus, MeetingUpdate, Participant, ParticipantStatus, RetentionPolicy,
    RetentionReport, UnreadSummary,
};

fn to_u64(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

/// [`StoredProtocolRow`] for the meeting, participant and event rows of one engine's crate of
/// checked statements: one conversion, written once, for both engines.
macro_rules! meeting_from_stored {
    ($engine:ident) => {
        impl StoredProtocolRow<Meeting> for $engine::protocol::meetings::MeetingRow {
            fn into_protocol(self) -> Result<Meeting> {
                Ok(Meeting {
                    id: MeetingId(self.id.uuid()?),
                    host: AgentId(self.host_id.uuid()?),
                    status: MeetingStatus::parse(&self.status)?,
                    speaker: self
                        .current_speaker_id
                        .map(StoredId::uuid)
                        .transpose()?
                        .map(AgentId),
                    turn_duration: self
                        .turn_duration_ms
                        .map(|ms| Duration::from_millis(to_u64(ms))),
                    turn_started_at: self.turn_started_at.map(StoredTime::time),
                    turn_deadline: self.turn_deadline.map(StoredTime::time),
                    last_event_seq: to_u64(self.last_event_seq),
                    created_at: self.created_at.time(),
                    started_at: self.started_at.map(StoredTime::time),
                    ended_at: self.ended_at.map(StoredTime::time),
                    policy: MeetingPolicy::parse(&self.policy).map_err(|_| {
                        StorageError::Corrupt("unknown stored meeting policy".into())
                    })?,
                    chosen: self
                        .chosen_speaker_id
                        .map(StoredId::uuid)
                        .transpose()?
                        .map(AgentId),
                })
            }
        }

        impl StoredProtocolRow<Participant> for $engine::protocol::meetings::ParticipantRow {
            fn into_protocol(self) -> Result<Participant> {
                Ok(Participant {
                    meeting: MeetingId(self.meeting_id.uuid()?),
                    agent: AgentId(self.agent_id.uuid()?),
                    status: ParticipantStatus::parse(&self.status)?,
                    join_order: self.join_order.map(to_u64),
                    invited_at: self.invited_at.map(StoredTime::time),
                    joined_at: self.joined_at.map(StoredTime::time),
                    left_at: self.left_at.map(StoredTime::time),
                })
            }
        }

        impl StoredProtocolRow<MeetingEvent> for $engine::protocol::meetings::EventRow {
            fn into_protocol(self) -> Result<MeetingEvent> {
                Ok(MeetingEvent {
                    meeting: MeetingId(self.meeting_id.uuid()?),
                    seq: to_u64(self.seq),
                    event_type: MeetingEventType::parse(&self.event_type)?,
                    agent: self.agent_id.map(StoredId::uuid).transpose()?.map(AgentId),
                    data: self.data.map(|d| json(&d)).transpose()?,
                    created_at: self.created_at.time(),
                })
            }
        }

        impl StoredProtocolRow<ActiveConversation>
            for $engine::protocol::meetings::ActiveConversationRow
        {
            fn into_protocol(self) -> Result<ActiveConversation> {
                Ok(ActiveConversation {
                    session: self.session.into_protocol()?,
                    agent_a_external_id: self.agent_a_external_id,
                    agent_a_name: self.agent_a_name,
                    agent_b_external_id: self.agent_b_external_id,
                    agent_b_name: self.agent_b_name,
                })
            }
        }

        impl StoredProtocolRow<ActiveMeeting> for $engine::protocol::meetings::ActiveMeetingRow {
            fn into_protocol(self) -> Result<ActiveMeeting> {
                Ok(ActiveMeeting {
                    meeting: self.meeting.into_protocol()?,
                    host_external_id: self.host_external_id,
                    host_name: self.host_name,
                    speaker_external_id: self.speaker_external_id,
                    speaker_name: self.speaker_name,
                    participant_count: to_u64(self.participant_count),
                })
            }
        }

        impl StoredProtocolRow<UnreadSummary> for $engine::protocol::meetings::UnreadRow {
            fn into_protocol(self) -> Result<UnreadSummary> {
                Ok(UnreadSummary {
                    agent: AgentId(self.agent_id.uuid()?),
                    external_id: self.external_id,
                    name: self.name,
                    unread: to_u64(self.unread),
                    latest_at: self.latest_at.map(StoredTime::time),
                })
            }
        }
    };
}

meeting_from_stored!(pattern_db_sqlite);
meeting_from_stored!(pattern_db_postgres);

/// Either engine's checked rows as the protocol's values, in their order.
pub(super) fn converted<T, R: StoredProtocolRow<T>>(rows: Vec<R>) -> Result<Vec<T>> {
    rows.into_iter()
        .map(StoredProtocolRow::into_protocol)
        .collect()
}

/// The participants of a meeting, in join order (invited-only ones last), on `conn` (the reader
/// or the writer's transaction).
pub(super) async fn participants(
    conn: &mut Conn<'_>,
    meeting: MeetingId,
) -> Result<Vec<Participant>> {
    match conn {
        Conn::Sqlite(c) => converted(
            pattern_db_sqlite::protocol::meetings::participants(c, &meeting.to_string()).await?,
        ),
        Conn::Postgres(c) => {
            converted(pattern_db_postgres::protocol::meetings::participants(c, meeting.0).await?)
        }
    }
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
        let mut pooled = self.db.reader().acquire().await?;
        let row = match &mut pooled.conn() {
            Conn::Sqlite(c) => pattern_db_sqlite::protocol::meetings::meeting(c, &id.to_string())
                .await?
                .map(StoredProtocolRow::into_protocol),
            Conn::Postgres(c) => pattern_db_postgres::protocol::meetings::meeting(c, id.0)
                .await?
                .map(StoredProtocolRow::into_protocol),
        };
        match row {
            Some(meeting) => meeting,
            None => Err(DbProtocolError::NotFound {
                kind: "meeting",
                id: id.0,
            }
            .into()),
        }
    }

    /// The participants of a meeting, in join order (invited-only ones last).
    pub async fn meeting_participants(&self, meeting: MeetingId) -> Result<Vec<Participant>> {
        let mut pooled = self.db.reader().acquire().await?;
        participants(&mut pooled.conn(), meeting).await
    }

    /// The messages of a meeting (its history), in order.
    pub async fn meeting_messages(&self, meeting: MeetingId) -> Result<Vec<ProtocolMessage>> {
        let mut pooled = self.db.reader().acquire().await?;
        match &mut pooled.conn() {
            Conn::Sqlite(c) => converted(
                pattern_db_sqlite::protocol::meetings::meeting_messages(c, &meeting.to_string())
                    .await?,
            ),
            Conn::Postgres(c) => converted(
                pattern_db_postgres::protocol::meetings::meeting_messages(c, meeting.0).await?,
            ),
        }
    }

    /// Up to `limit` events of a meeting with a sequence number above `after`, in order. An
    /// unknown meeting is [`pattern_db::ProtocolError::NotFound`].
    pub async fn meeting_events_after(
        &self,
        meeting: MeetingId,
        after: u64,
        limit: u32,
    ) -> Result<Vec<MeetingEvent>> {
        let after = i64::try_from(after).unwrap_or(i64::MAX);
        let limit = i64::from(limit);
        let mut pooled = self.db.reader().acquire().await?;
        let events: Vec<MeetingEvent> = match &mut pooled.conn() {
            Conn::Sqlite(c) => converted(
                pattern_db_sqlite::protocol::meetings::events_after(
                    c,
                    &meeting.to_string(),
                    after,
                    limit,
                )
                .await?,
            )?,
            Conn::Postgres(c) => converted(
                pattern_db_postgres::protocol::meetings::events_after(c, meeting.0, after, limit)
                    .await?,
            )?,
        };
        drop(pooled);
        if events.is_empty() {
            // Tell "no new events" from "no such meeting".
            self.meeting(meeting).await?;
        }
        Ok(events)
    }

    /// Active meetings whose turn deadline has passed (for a sweeper), oldest deadline first.
    pub async fn expired_meetings(&self, limit: u32) -> Result<Vec<MeetingId>> {
        let now = now_ms();
        let limit = i64::from(limit);
        let mut pooled = self.db.reader().acquire().await?;
        match &mut pooled.conn() {
            Conn::Sqlite(c) => pattern_db_sqlite::protocol::meetings::expired(c, now, limit)
                .await?
                .into_iter()
                .map(|id| Ok(MeetingId(id.uuid()?)))
                .collect(),
            Conn::Postgres(c) => {
                pattern_db_postgres::protocol::meetings::expired(c, instant(now)?, limit)
                    .await?
                    .into_iter()
                    .map(|id| Ok(MeetingId(id)))
                    .collect()
            }
        }
    }

    /// The "active conversations" view: every live session with its agents, newest change first.
    pub async fn active_conversations(&self) -> Result<Vec<ActiveConversation>> {
        let mut pooled = self.db.reader().acquire().await?;
        match &mut pooled.conn() {
            Conn::Sqlite(c) => {
                converted(pattern_db_sqlite::protocol::meetings::active_conversations(c).await?)
            }
            Conn::Postgres(c) => {
                converted(pattern_db_postgres::protocol::meetings::active_conversations(c).await?)
            }
        }
    }

    /// The "active meetings" view: every meeting not ended, with host, speaker and the number of
    /// participants present, oldest first.
    pub async fn active_meetings(&self) -> Result<Vec<ActiveMeeting>> {
        let mut pooled = self.db.reader().acquire().await?;
        match &mut pooled.conn() {
            Conn::Sqlite(c) => {
                converted(pattern_db_sqlite::protocol::meetings::active_meetings(c).await?)
            }
            Conn::Postgres(c) => {
                converted(pattern_db_postgres::protocol::meetings::active_meetings(c).await?)
            }
        }
    }

    /// The "unread per agent" view: every protocol agent (by external id) with its unread count
    /// and the arrival time of its newest unread message.
    pub async fn unread_per_agent(&self) -> Result<Vec<UnreadSummary>> {
        let mut pooled = self.db.reader().acquire().await?;
        match &mut pooled.conn() {
            Conn::Sqlite(c) => {
                converted(pattern_db_sqlite::protocol::meetings::unread_per_agent(c).await?)
            }
            Conn::Postgres(c) => {
                converted(pattern_db_postgres::protocol::meetings::unread_per_agent(c).await?)
            }
        }
    }

    /// An archived message, if retention moved it.
    pub async fn archived_message(&self, id: ProtocolMessageId) -> Result<Option<ProtocolMessage>> {
        let mut pooled = self.db.reader().acquire().await?;
        match &mut pooled.conn() {
            Conn::Sqlite(c) => pattern_db_sqlite::protocol::archived_message(c, &id.to_string())
                .await?
                .map(StoredProtocolRow::into_protocol)
                .transpose(),
            Conn::Postgres(c) => pattern_db_postgres::protocol::archived_message(c, id.0)
                .await?
                .map(StoredProtocolRow::into_protocol)
                .transpose(),
        }
    }
}
