//! Meetings of the agent-to-agent protocol (migration `0005_meetings`): their types, reads and
//! the [`Database`] methods that queue meeting writes; the views (active conversations, active
//! meetings, unread per agent) as queries; retention; and cross-process wake-ups.
//!
//! A meeting moves `created -> ready -> active -> ended`. Its host joins when creating it; it is
//! `ready` once two participants have joined; the host starts it, and the speaker is chosen
//! round-robin by join order (skipping those who left, wrapping around). Only the current speaker
//! speaks (or passes); each message or pass hands the turn to the next. With a turn duration, a
//! speaker silent past the turn's deadline is timed out (`agent_timed_out`) and the turn passes
//! on: every meeting write applies an expired deadline first, so it holds even when nobody
//! watched at that moment, and [`Database::expired_meetings`] lets a sweeper find the rest.
//!
//! Every change appends to the meeting's event log with the next sequence number (1, 2, 3 ...),
//! under the meeting's row lock (PostgreSQL `SELECT ... FOR UPDATE`; SQLite's single writer), so
//! events become visible in sequence order and "everything after N" never skips or repeats one.
//!
//! This module must never write outside the writer, and never wake anyone itself: on PostgreSQL
//! the writes send `NOTIFY` inside their transaction (delivered at commit only).

use crate::{ProtocolError, StorageError};
use std::fmt;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::sql::Row;

use super::{
    AgentId, MESSAGE_COLUMNS, MeetingId, NewProtocolMessage, ProtocolMessage, ProtocolMessageId,
    Session, SessionId, json, message_from_row, opt_uuid, session_from_row, validate_name,
};
use crate::config::Backend;
use crate::db::Database;
use crate::error::{Error, Result};
use crate::ops::protocol::{ProtocolDone, ProtocolOp};
use crate::ops::{from_ms, parse_uuid};

/// The PostgreSQL `NOTIFY` channel of protocol wake-ups.
pub const WAKEUP_CHANNEL: &str = "pattern_protocol";

/// Longest turn duration a meeting accepts (one week).
pub const MAX_TURN_DURATION: Duration = Duration::from_secs(7 * 24 * 3600);

/// How a meeting's turn moves (migration `0015_agents_converse`, `docs/multi-agent.md`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MeetingPolicy {
    /// The next present participant in join order, wrapping around.
    #[default]
    RoundRobin,
    /// The host moderates: after any other speaker the turn goes back to the host, and after
    /// the host's turn it goes to the participant the host chose (by
    /// [`crate::Database::choose_speaker`]), or in join order when it chose nobody present.
    Selector,
    /// Round-robin where every participant answers the same prompt and the host decides; the
    /// hand-over is round-robin's, the difference is what a driver tells each speaker.
    Broadcast,
}

impl MeetingPolicy {
    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            MeetingPolicy::RoundRobin => "round_robin",
            MeetingPolicy::Selector => "selector",
            MeetingPolicy::Broadcast => "broadcast",
        }
    }

    /// Parses a stored or user-given name (`round_robin` or `round-robin`, `selector`,
    /// `broadcast`).
    pub fn parse(text: &str) -> Result<Self> {
        match text {
            "round_robin" | "round-robin" => Ok(MeetingPolicy::RoundRobin),
            "selector" => Ok(MeetingPolicy::Selector),
            "broadcast" => Ok(MeetingPolicy::Broadcast),
            other => Err(ProtocolError::InvalidMessage(format!(
                "unknown meeting policy `{other}` (round-robin, selector, broadcast)"
            ))
            .into()),
        }
    }
}

/// Where a meeting stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MeetingStatus {
    /// Created; fewer than two participants have joined.
    Created,
    /// Two or more have joined; the host may start it.
    Ready,
    /// Started: one participant speaks at a time.
    Active,
    /// Over: nothing more happens in it.
    Ended,
}

impl MeetingStatus {
    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            MeetingStatus::Created => "created",
            MeetingStatus::Ready => "ready",
            MeetingStatus::Active => "active",
            MeetingStatus::Ended => "ended",
        }
    }

    pub(crate) fn parse(text: &str) -> Result<Self> {
        Ok(match text {
            "created" => MeetingStatus::Created,
            "ready" => MeetingStatus::Ready,
            "active" => MeetingStatus::Active,
            "ended" => MeetingStatus::Ended,
            other => {
                return Err(StorageError::Corrupt(format!(
                    "unknown stored meeting status `{other}`"
                ))
                .into());
            }
        })
    }
}

impl fmt::Display for MeetingStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where a participant stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ParticipantStatus {
    /// Invited by the host, not joined.
    Invited,
    /// Joined before the meeting started.
    Attending,
    /// Joined, meeting active, not speaking.
    Waiting,
    /// The current speaker.
    Speaking,
    /// Gone (may join again, at the end of the order).
    Left,
}

impl ParticipantStatus {
    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            ParticipantStatus::Invited => "invited",
            ParticipantStatus::Attending => "attending",
            ParticipantStatus::Waiting => "waiting",
            ParticipantStatus::Speaking => "speaking",
            ParticipantStatus::Left => "left",
        }
    }

    pub(crate) fn parse(text: &str) -> Result<Self> {
        Ok(match text {
            "invited" => ParticipantStatus::Invited,
            "attending" => ParticipantStatus::Attending,
            "waiting" => ParticipantStatus::Waiting,
            "speaking" => ParticipantStatus::Speaking,
            "left" => ParticipantStatus::Left,
            other => {
                return Err(StorageError::Corrupt(format!(
                    "unknown stored participant status `{other}`"
                ))
                .into());
            }
        })
    }

    /// Whether the participant has joined and not left.
    pub fn is_present(self) -> bool {
        matches!(
            self,
            ParticipantStatus::Attending | ParticipantStatus::Waiting | ParticipantStatus::Speaking
        )
    }
}

/// A meeting.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Meeting {
    /// Its id.
    pub id: MeetingId,
    /// The agent that created it: only it invites, starts and ends.
    pub host: AgentId,
    /// Where it stands.
    pub status: MeetingStatus,
    /// Who speaks now (active meetings only).
    pub speaker: Option<AgentId>,
    /// How long a turn may last, if limited.
    pub turn_duration: Option<Duration>,
    /// When the current turn began.
    pub turn_started_at: Option<DateTime<Utc>>,
    /// When the current turn times out (timed turns of active meetings only).
    pub turn_deadline: Option<DateTime<Utc>>,
    /// The sequence number of its newest event (0: none).
    pub last_event_seq: u64,
    /// When it was created.
    pub created_at: DateTime<Utc>,
    /// When it started.
    pub started_at: Option<DateTime<Utc>>,
    /// When it ended.
    pub ended_at: Option<DateTime<Utc>>,
    /// How its turn moves.
    #[serde(default)]
    pub policy: MeetingPolicy,
    /// Selector meetings: whom the host chose to speak after its current turn.
    #[serde(default)]
    pub chosen: Option<AgentId>,
}

impl Meeting {
    /// Whether it has not ended.
    pub fn is_live(&self) -> bool {
        self.status != MeetingStatus::Ended
    }
}

/// One agent's place in a meeting.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Participant {
    /// The meeting.
    pub meeting: MeetingId,
    /// The agent.
    pub agent: AgentId,
    /// Where it stands.
    pub status: ParticipantStatus,
    /// Its place in the round-robin order (set by its latest join).
    pub join_order: Option<u64>,
    /// When it was invited, if it was.
    pub invited_at: Option<DateTime<Utc>>,
    /// When it last joined.
    pub joined_at: Option<DateTime<Utc>>,
    /// When it left.
    pub left_at: Option<DateTime<Utc>>,
}

/// What happened in a meeting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MeetingEventType {
    /// The host created it (and joined).
    MeetingCreated,
    /// The host invited an agent.
    AgentInvited,
    /// An agent joined (`data.join_order`).
    AgentJoined,
    /// Two participants have joined: it can start.
    MeetingReady,
    /// The host started it.
    MeetingStarted,
    /// The speaker spoke (`data.message`).
    AgentSpoke,
    /// The turn went to `agent` (`data.from`, `data.reason`: start, spoke, passed, left, timeout).
    TurnPassed,
    /// An agent left.
    AgentLeft,
    /// The speaker stayed silent past the turn's deadline.
    AgentTimedOut,
    /// It ended (`data.reason`: host, everyone_left).
    MeetingEnded,
}

impl MeetingEventType {
    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            MeetingEventType::MeetingCreated => "meeting_created",
            MeetingEventType::AgentInvited => "agent_invited",
            MeetingEventType::AgentJoined => "agent_joined",
            MeetingEventType::MeetingReady => "meeting_ready",
            MeetingEventType::MeetingStarted => "meeting_started",
            MeetingEventType::AgentSpoke => "agent_spoke",
            MeetingEventType::TurnPassed => "turn_passed",
            MeetingEventType::AgentLeft => "agent_left",
            MeetingEventType::AgentTimedOut => "agent_timed_out",
            MeetingEventType::MeetingEnded => "meeting_ended",
        }
    }

    fn parse(text: &str) -> Result<Self> {
        Ok(match text {
            "meeting_created" => MeetingEventType::MeetingCreated,
            "agent_invited" => MeetingEventType::AgentInvited,
            "agent_joined" => MeetingEventType::AgentJoined,
            "meeting_ready" => MeetingEventType::MeetingReady,
            "meeting_started" => MeetingEventType::MeetingStarted,
            "agent_spoke" => MeetingEventType::AgentSpoke,
            "turn_passed" => MeetingEventType::TurnPassed,
            "agent_left" => MeetingEventType::AgentLeft,
            "agent_timed_out" => MeetingEventType::AgentTimedOut,
            "meeting_ended" => MeetingEventType::MeetingEnded,
            other => {
                return Err(StorageError::Corrupt(format!(
                    "unknown stored meeting event `{other}`"
                ))
                .into());
            }
        })
    }
}

impl fmt::Display for MeetingEventType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One entry of a meeting's event log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MeetingEvent {
    /// The meeting.
    pub meeting: MeetingId,
    /// Its place in the meeting's log: 1, 2, 3 ... with no gaps.
    pub seq: u64,
    /// What happened.
    pub event_type: MeetingEventType,
    /// The agent it concerns, if any.
    pub agent: Option<AgentId>,
    /// Details.
    pub data: Option<serde_json::Value>,
    /// When.
    pub created_at: DateTime<Utc>,
}

/// What one meeting write did: the meeting afterwards, the events it appended (including any
/// timeout it applied first), and the message it stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MeetingUpdate {
    /// The meeting after the write.
    pub meeting: Meeting,
    /// The events appended, in order.
    pub events: Vec<MeetingEvent>,
    /// The message stored, if the write spoke.
    pub message: Option<ProtocolMessage>,
}

/// A row of the "active conversations" view: a live session with its agents' names.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActiveConversation {
    /// The session.
    pub session: Session,
    /// External id of `session.agent_a`.
    pub agent_a_external_id: String,
    /// Name of `session.agent_a`.
    pub agent_a_name: String,
    /// External id of `session.agent_b`.
    pub agent_b_external_id: String,
    /// Name of `session.agent_b`.
    pub agent_b_name: String,
}

/// A row of the "active meetings" view: a live meeting with its host, speaker and head count.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActiveMeeting {
    /// The meeting.
    pub meeting: Meeting,
    /// The host's external id.
    pub host_external_id: String,
    /// The host's name.
    pub host_name: String,
    /// The speaker's external id.
    pub speaker_external_id: Option<String>,
    /// The speaker's name.
    pub speaker_name: Option<String>,
    /// Participants who have joined and not left.
    pub participant_count: u64,
}

/// A row of the "unread per agent" view.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnreadSummary {
    /// The agent.
    pub agent: AgentId,
    /// Its external id.
    pub external_id: String,
    /// Its name.
    pub name: String,
    /// How many messages wait unread.
    pub unread: u64,
    /// When the newest of them arrived.
    pub latest_at: Option<DateTime<Utc>>,
}

/// What retention removes. Durations are ages: `Duration::from_secs(90 * 86_400)` is 90 days.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetentionPolicy {
    /// Messages older than this move to the archive, if read (or, for meeting messages, once the
    /// meeting has ended). Unread messages stay in their inbox, messages of live meetings stay.
    pub archive_messages_after: Duration,
    /// Ended sessions and meetings that ended longer ago than this are deleted (their remaining
    /// messages are archived first, never dropped).
    pub delete_ended_after: Duration,
    /// Only report what would happen; change nothing.
    pub dry_run: bool,
}

impl RetentionPolicy {
    /// Refuses a zero age ([`ProtocolError::InvalidRetention`]): it would archive messages as they
    /// are read and delete sessions and meetings as they end, so a user's `--older-than-days 0` is
    /// a mistake, never a policy.
    pub fn check(&self) -> Result<()> {
        if self.archive_messages_after.is_zero() {
            return Err(ProtocolError::InvalidRetention(
                "a message retention age of zero would archive messages as they are read: use at \
                 least 1 day"
                    .to_owned(),
            )
            .into());
        }
        if self.delete_ended_after.is_zero() {
            return Err(ProtocolError::InvalidRetention(
                "an ended-conversation retention age of zero would delete sessions and meetings \
                 as they end: use at least 1 day"
                    .to_owned(),
            )
            .into());
        }
        Ok(())
    }
}

/// What retention did (or, in a dry run, would do).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetentionReport {
    /// Whether this was a dry run (nothing changed).
    pub dry_run: bool,
    /// Messages created before this were eligible for the archive.
    pub message_cutoff: DateTime<Utc>,
    /// Sessions and meetings ended before this were eligible for deletion.
    pub ended_cutoff: DateTime<Utc>,
    /// Messages moved to the archive (including those of deleted sessions and meetings).
    pub archived_messages: Vec<ProtocolMessageId>,
    /// Sessions deleted.
    pub deleted_sessions: Vec<SessionId>,
    /// Meetings deleted (with their participants and events).
    pub deleted_meetings: Vec<MeetingId>,
    /// Rows left alone because another transaction held them (PostgreSQL); the next run takes
    /// them.
    pub skipped_busy: u64,
}

/// A protocol wake-up received from PostgreSQL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wakeup {
    /// Something concerns this agent (a message for it, a session of it ended).
    Agent(AgentId),
    /// Something happened in this meeting.
    Meeting(MeetingId),
    /// The connection was lost and re-established: wake-ups may have been missed, so every
    /// waiter should look again.
    Lost,
}

impl Wakeup {
    pub(crate) fn payload(self) -> String {
        match self {
            Wakeup::Agent(a) => format!("a:{a}"),
            Wakeup::Meeting(m) => format!("m:{m}"),
            Wakeup::Lost => "lost".to_owned(),
        }
    }

    fn parse(payload: &str) -> Option<Self> {
        let (kind, id) = payload.split_once(':')?;
        let id = uuid::Uuid::parse_str(id).ok()?;
        match kind {
            "a" => Some(Wakeup::Agent(AgentId(id))),
            "m" => Some(Wakeup::Meeting(MeetingId(id))),
            _ => None,
        }
    }
}

/// A dedicated PostgreSQL connection listening for protocol wake-ups (`LISTEN`).
pub struct WakeupListener {
    inner: sqlx::postgres::PgListener,
}

impl fmt::Debug for WakeupListener {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WakeupListener").finish_non_exhaustive()
    }
}

impl WakeupListener {
    /// The next wake-up. After a lost connection it reconnects, re-listens and returns
    /// [`Wakeup::Lost`]; an error means it could not reconnect (call again to retry).
    pub async fn next(&mut self) -> Result<Wakeup> {
        loop {
            match self.inner.try_recv().await? {
                None => return Ok(Wakeup::Lost),
                Some(n) => {
                    if let Some(w) = Wakeup::parse(n.payload()) {
                        return Ok(w);
                    }
                }
            }
        }
    }
}

pub(crate) const MEETING_COLUMNS: &str = "id, host_id, status, current_speaker_id, \
    turn_duration_ms, turn_started_at, turn_deadline, last_event_seq, created_at, started_at, \
    ended_at, policy, chosen_speaker_id";
pub(crate) const PARTICIPANT_COLUMNS: &str =
    "meeting_id, agent_id, status, join_order, invited_at, joined_at, left_at";
pub(crate) const EVENT_COLUMNS: &str = "meeting_id, seq, event_type, agent_id, data, created_at";

fn to_u64(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

pub(crate) fn meeting_from_row(row: &Row) -> Result<Meeting> {
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

pub(crate) fn participant_from_row(row: &Row) -> Result<Participant> {
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

pub(crate) fn event_from_row(row: &Row) -> Result<MeetingEvent> {
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
/// ([`ProtocolError::InvalidMessage`]).
fn check_turn_duration(turn_duration: Option<Duration>) -> Result<()> {
    match turn_duration {
        Some(d) if d < Duration::from_millis(1) || d > MAX_TURN_DURATION => {
            Err(ProtocolError::InvalidMessage(format!(
                "a turn duration must be 1 ms to {MAX_TURN_DURATION:?}, got {d:?}"
            ))
            .into())
        }
        _ => Ok(()),
    }
}

impl Database {
    async fn meeting_write(&self, op: ProtocolOp) -> Result<MeetingUpdate> {
        match self.write(op).await? {
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
    /// [`ProtocolError::InvalidMessage`]). Unknown host:
    /// [`ProtocolError::NotFound`].
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
            return Err(ProtocolError::InvalidMessage(format!(
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
    /// (it speaks, passes, times out or leaves). Not the host: [`ProtocolError::NotHost`]; not its
    /// turn: [`ProtocolError::NotSpeaker`]; another policy: [`ProtocolError::MeetingState`]; `next`
    /// absent: [`ProtocolError::NotMeetingParticipant`]; nothing stored on any refusal.
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
    /// Another turn, or not the speaker: [`ProtocolError::NotSpeaker`], nothing stored.
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
    /// [`ProtocolError::NotHost`]; already invited or present:
    /// [`ProtocolError::AlreadyParticipant`]; ended: [`ProtocolError::MeetingEnded`].
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
    /// [`ProtocolError::AlreadyParticipant`]; ended: [`ProtocolError::MeetingEnded`].
    pub async fn join_meeting(&self, meeting: MeetingId, agent: AgentId) -> Result<MeetingUpdate> {
        self.meeting_write(ProtocolOp::Join { meeting, agent })
            .await
    }

    /// The host starts a ready meeting; the first present participant in join order speaks.
    /// Not ready or started already: [`ProtocolError::MeetingState`].
    pub async fn start_meeting(&self, meeting: MeetingId, host: AgentId) -> Result<MeetingUpdate> {
        self.meeting_write(ProtocolOp::Start { meeting, host })
            .await
    }

    /// The current speaker says `message` and the turn passes on. Not the speaker:
    /// [`ProtocolError::NotSpeaker`] (nothing stored); not present:
    /// [`ProtocolError::NotMeetingParticipant`]; not active: [`ProtocolError::MeetingState`] or
    /// [`ProtocolError::MeetingEnded`].
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
    /// everyone left ends. Not present: [`ProtocolError::NotMeetingParticipant`].
    pub async fn leave_meeting(&self, meeting: MeetingId, agent: AgentId) -> Result<MeetingUpdate> {
        self.meeting_write(ProtocolOp::Leave { meeting, agent })
            .await
    }

    /// The host ends the meeting. Not the host: [`ProtocolError::NotHost`]; ended:
    /// [`ProtocolError::MeetingEnded`].
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
        match self.write(ProtocolOp::Retention(policy)).await? {
            ProtocolDone::Retention(report) => Ok(*report),
            ProtocolDone::Meeting(_) | ProtocolDone::Refused(_) => Err(Error::Storage(
                StorageError::Corrupt("protocol retention answered with a meeting update".into()),
            )),
        }
    }

    /// The meeting with this id ([`ProtocolError::NotFound`] otherwise).
    pub async fn meeting(&self, id: MeetingId) -> Result<Meeting> {
        let row = crate::sql::query(sqlx::AssertSqlSafe(format!(
            "SELECT {MEETING_COLUMNS} FROM protocol_meetings WHERE id = $1"
        )))
        .bind(id.to_string())
        .fetch_optional(self.reader())
        .await?;
        match row {
            Some(row) => meeting_from_row(&row),
            None => Err(ProtocolError::NotFound {
                kind: "meeting",
                id: id.0,
            }
            .into()),
        }
    }

    /// The participants of a meeting, in join order (invited-only ones last).
    pub async fn meeting_participants(&self, meeting: MeetingId) -> Result<Vec<Participant>> {
        crate::sql::query(sqlx::AssertSqlSafe(format!(
            "SELECT {PARTICIPANT_COLUMNS} FROM protocol_meeting_participants \
             WHERE meeting_id = $1 ORDER BY join_order IS NULL, join_order, agent_id"
        )))
        .bind(meeting.to_string())
        .fetch_all(self.reader())
        .await?
        .iter()
        .map(participant_from_row)
        .collect()
    }

    /// The messages of a meeting (its history), in order.
    pub async fn meeting_messages(&self, meeting: MeetingId) -> Result<Vec<ProtocolMessage>> {
        crate::sql::query(sqlx::AssertSqlSafe(format!(
            "SELECT {MESSAGE_COLUMNS} FROM protocol_messages WHERE meeting_id = $1 ORDER BY seq"
        )))
        .bind(meeting.to_string())
        .fetch_all(self.reader())
        .await?
        .iter()
        .map(message_from_row)
        .collect()
    }

    /// Up to `limit` events of a meeting with a sequence number above `after`, in order. An
    /// unknown meeting is [`ProtocolError::NotFound`].
    pub async fn meeting_events_after(
        &self,
        meeting: MeetingId,
        after: u64,
        limit: u32,
    ) -> Result<Vec<MeetingEvent>> {
        let rows = crate::sql::query(sqlx::AssertSqlSafe(format!(
            "SELECT {EVENT_COLUMNS} FROM protocol_meeting_events \
             WHERE meeting_id = $1 AND seq > $2 ORDER BY seq LIMIT $3"
        )))
        .bind(meeting.to_string())
        .bind(i64::try_from(after).unwrap_or(i64::MAX))
        .bind(i64::from(limit))
        .fetch_all(self.reader())
        .await?;
        if rows.is_empty() {
            // Tell "no new events" from "no such meeting".
            self.meeting(meeting).await?;
        }
        rows.iter().map(event_from_row).collect()
    }

    /// Active meetings whose turn deadline has passed (for a sweeper), oldest deadline first.
    pub async fn expired_meetings(&self, limit: u32) -> Result<Vec<MeetingId>> {
        crate::sql::query(
            "SELECT id FROM protocol_meetings WHERE turn_deadline IS NOT NULL \
             AND turn_deadline <= $1 ORDER BY turn_deadline LIMIT $2",
        )
        .bind(crate::ops::now_ms())
        .bind(i64::from(limit))
        .fetch_all(self.reader())
        .await?
        .iter()
        .map(|row| Ok(MeetingId(parse_uuid(&row.try_get::<String, _>(0)?)?)))
        .collect()
    }

    /// The "active conversations" view: every live session with its agents, newest change first.
    pub async fn active_conversations(&self) -> Result<Vec<ActiveConversation>> {
        let columns = super::SESSION_COLUMNS
            .split(", ")
            .map(|c| format!("s.{c}"))
            .collect::<Vec<_>>()
            .join(", ");
        let rows = crate::sql::query(sqlx::AssertSqlSafe(format!(
            "SELECT {columns}, a.external_id, a.name, b.external_id, b.name \
             FROM protocol_sessions s \
             JOIN agents a ON a.id = s.agent_a_id \
             JOIN agents b ON b.id = s.agent_b_id \
             WHERE s.status <> 'ended' ORDER BY s.updated_at DESC, s.id"
        )))
        .fetch_all(self.reader())
        .await?;
        rows.iter()
            .map(|row| {
                // The extra columns follow the session's own.
                let at = super::SESSION_COLUMNS.split(", ").count();
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
        let rows = crate::sql::query(sqlx::AssertSqlSafe(format!(
            "SELECT {columns}, h.external_id, h.name, cs.external_id, cs.name, \
             (SELECT COUNT(*) FROM protocol_meeting_participants p WHERE p.meeting_id = m.id \
              AND p.status IN ('attending', 'waiting', 'speaking')) \
             FROM protocol_meetings m \
             JOIN agents h ON h.id = m.host_id \
             LEFT JOIN agents cs ON cs.id = m.current_speaker_id \
             WHERE m.status <> 'ended' ORDER BY m.created_at, m.id"
        )))
        .fetch_all(self.reader())
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
        let rows = crate::sql::query(
            "SELECT a.id, a.external_id, a.name, \
             (SELECT COUNT(*) FROM protocol_messages m \
              WHERE m.recipient_id = a.id AND m.read_at IS NULL), \
             (SELECT MAX(m.created_at) FROM protocol_messages m \
              WHERE m.recipient_id = a.id AND m.read_at IS NULL) \
             FROM agents a ORDER BY a.external_id",
        )
        .fetch_all(self.reader())
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
        crate::sql::query(sqlx::AssertSqlSafe(format!(
            "SELECT {MESSAGE_COLUMNS} FROM protocol_messages_archive WHERE id = $1"
        )))
        .bind(id.to_string())
        .fetch_optional(self.reader())
        .await?
        .as_ref()
        .map(message_from_row)
        .transpose()
    }

    /// A listener for protocol wake-ups on PostgreSQL (a dedicated connection that has run
    /// `LISTEN` before this returns, so no wake-up committed afterwards is missed); `None` on
    /// SQLite, which has no cross-process notifications.
    pub async fn protocol_wakeups(&self) -> Result<Option<WakeupListener>> {
        if self.backend() != Backend::Postgres {
            return Ok(None);
        }
        let mut inner = sqlx::postgres::PgListener::connect(self.url())
            .await
            .map_err(|source| StorageError::Connect {
                backend: "postgres",
                url: crate::error::redact_url(self.url()),
                source,
            })?;
        inner.listen(WAKEUP_CHANNEL).await?;
        Ok(Some(WakeupListener { inner }))
    }
}
