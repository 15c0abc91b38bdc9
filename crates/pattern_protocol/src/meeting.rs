//! Meetings of the agent-to-agent protocol as data (migration `0005_meetings`): a meeting, its
//! participants, its hand-over policy, its event log, what one write did, the views' rows, and
//! the retention policy with its report. Their SQL is in [`crate::store`].
//!
//! A meeting moves `created -> ready -> active -> ended`. Its host joins when creating it; it is
//! `ready` once two participants have joined; the host starts it, and the speaker is chosen by
//! the meeting's policy (round-robin by join order, skipping those who left, wrapping around).
//! Only the current speaker speaks (or passes); each message or pass hands the turn on. With a
//! turn duration, a speaker silent past the turn's deadline is timed out (`agent_timed_out`).
//! This module must never read or write the database.

use std::fmt;
use std::time::Duration;

use chrono::{DateTime, Utc};
use pattern_db::{
    AgentId, MeetingId, ProtocolError as DbProtocolError, ProtocolMessage, ProtocolMessageId,
    Result, Session, SessionId, StorageError,
};
use serde::{Deserialize, Serialize};

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
    /// [`Store::choose_speaker`](crate::store::Store::choose_speaker)), or in join order when it chose nobody present.
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
            other => Err(DbProtocolError::InvalidMessage(format!(
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

    pub(crate) fn parse(text: &str) -> Result<Self> {
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
    /// Refuses a zero age ([`pattern_db::ProtocolError::InvalidRetention`]): it would archive
    /// messages as they are read and delete sessions and meetings as they end, so a user's
    /// `--older-than-days 0` is a mistake, never a policy.
    pub fn check(&self) -> Result<()> {
        if self.archive_messages_after.is_zero() {
            return Err(DbProtocolError::InvalidRetention(
                "a message retention age of zero would archive messages as they are read: use at \
                 least 1 day"
                    .to_owned(),
            )
            .into());
        }
        if self.delete_ended_after.is_zero() {
            return Err(DbProtocolError::InvalidRetention(
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
