//! The SQL of meeting writes and of protocol retention, run by the writer inside its
//! transaction: [`ProtocolOp`], one [`Write`] with a variant per meeting action (they share one
//! apply path over a meeting row and its log), and retention.
//!
//! Every meeting write first locks the meeting row (`SELECT ... FOR UPDATE` on PostgreSQL; on
//! SQLite the single writer serialises), applies an expired turn deadline, checks, and only then
//! changes rows and appends events with the next sequence numbers; the meeting row (status,
//! speaker, deadline, last event sequence) is written last. Retention never waits for a lock: on
//! PostgreSQL it skips rows others hold (`SKIP LOCKED`). The meeting writes' statements and
//! retention's picks are checked (`pattern_db_sqlite::protocol::{meetings, retention}` and their
//! PostgreSQL twins); retention's archive and deletes stay dynamic: `IN` lists as long as the
//! ids found. These functions must never commit, roll back or open a transaction, and never run a
//! statement after one that failed.

use std::time::Duration;

use pattern_db::protocol::{Wakeup, notify, require_agent, require_same_organization};
use pattern_db::storage::{Conn, Ctx, Locks, Write, fixed_chunks, from_ms, now_ms, parse_uuid};
use pattern_db::{
    AgentId, Error, MeetingId, NewProtocolMessage, ProtocolError as DbProtocolError,
    ProtocolMessage, ProtocolMessageId, Result, RunClaim, SessionId, StorageError,
};

use chrono::{DateTime, Utc};
use pattern_db::protocol::StoredProtocolRow;
use pattern_db_postgres::protocol::meetings as postgres;
use pattern_db_sqlite::protocol::meetings as sqlite;

use super::instant;
use super::meetings::participants;
use crate::error::ProtocolError;
use crate::meeting::{
    Meeting, MeetingEvent, MeetingEventType, MeetingPolicy, MeetingStatus, MeetingUpdate,
    Participant, ParticipantStatus, RetentionPolicy, RetentionReport,
};

impl Write for ProtocolOp {
    type Output = ProtocolDone;

    fn locks(&self) -> Locks {
        self.key().map_or_else(Locks::none, Locks::protocol)
    }

    async fn apply(
        &self,
        conn: &mut Conn<'_>,
        ctx: &Ctx,
        _fence: Option<&RunClaim>,
    ) -> Result<ProtocolDone> {
        apply(conn, ctx, self).await
    }
}

/// The meeting and retention writes: the protocol's rules on one meeting row and its log.
#[derive(Debug)]
pub(super) enum ProtocolOp {
    CreateMeeting {
        host: AgentId,
        turn_duration: Option<Duration>,
        policy: MeetingPolicy,
        /// Stored as `plan` in the `meeting_created` event's data.
        plan: Option<serde_json::Value>,
    },
    Invite {
        meeting: MeetingId,
        host: AgentId,
        agent: AgentId,
    },
    Join {
        meeting: MeetingId,
        agent: AgentId,
    },
    Start {
        meeting: MeetingId,
        host: AgentId,
    },
    /// Speak (`Some`) or pass (`None`); with `turn`, only in the turn that began then (Unix
    /// ms of `turn_started_at`).
    Speak {
        meeting: MeetingId,
        agent: AgentId,
        message: Option<NewProtocolMessage>,
        turn: Option<i64>,
    },
    Leave {
        meeting: MeetingId,
        agent: AgentId,
    },
    EndMeeting {
        meeting: MeetingId,
        host: AgentId,
    },
    /// The host of a selector meeting names who speaks after its current turn.
    Choose {
        meeting: MeetingId,
        host: AgentId,
        next: AgentId,
    },
    ApplyTimeouts {
        meeting: MeetingId,
    },
    Retention(RetentionPolicy),
}

/// Outcomes of [`ProtocolOp`]s.
#[derive(Debug)]
pub(super) enum ProtocolDone {
    Meeting(Box<MeetingUpdate>),
    /// The op was refused after an expired turn deadline was applied; the timeout commits, the
    /// caller gets the refusal.
    Refused(Box<(MeetingUpdate, Error)>),
    Retention(Box<RetentionReport>),
}

impl ProtocolOp {
    /// The row this op locks first (its meeting), for lock ordering within a write group.
    pub(super) fn key(&self) -> Option<uuid::Uuid> {
        match self {
            ProtocolOp::CreateMeeting { .. } | ProtocolOp::Retention(_) => None,
            ProtocolOp::Invite { meeting, .. }
            | ProtocolOp::Join { meeting, .. }
            | ProtocolOp::Start { meeting, .. }
            | ProtocolOp::Speak { meeting, .. }
            | ProtocolOp::Leave { meeting, .. }
            | ProtocolOp::EndMeeting { meeting, .. }
            | ProtocolOp::Choose { meeting, .. }
            | ProtocolOp::ApplyTimeouts { meeting } => Some(meeting.0),
        }
    }
}

/// Runs one [`ProtocolOp`] inside the writer's transaction.
async fn apply(conn: &mut Conn<'_>, ctx: &Ctx, op: &ProtocolOp) -> Result<ProtocolDone> {
    match op {
        ProtocolOp::CreateMeeting {
            host,
            turn_duration,
            policy,
            plan,
        } => Ok(ProtocolDone::Meeting(Box::new(
            create_meeting(conn, ctx, *host, *turn_duration, *policy, plan.clone()).await?,
        ))),
        ProtocolOp::Retention(policy) => Ok(ProtocolDone::Retention(Box::new(
            retention(conn, policy).await?,
        ))),
        _ => run(conn, ctx, op).await,
    }
}

fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX / 4)
}

/// A meeting write in progress: the locked meeting, the events appended so far, the clock.
struct Change {
    meeting: Meeting,
    events: Vec<MeetingEvent>,
    now: i64,
}

impl Change {
    async fn event(
        &mut self,
        conn: &mut Conn<'_>,
        event_type: MeetingEventType,
        agent: Option<AgentId>,
        data: Option<serde_json::Value>,
    ) -> Result<()> {
        let seq = self.meeting.last_event_seq + 1;
        let text = data.as_ref().map(serde_json::Value::to_string);
        let stored_seq = i64::try_from(seq).unwrap_or(i64::MAX);
        match conn {
            Conn::Sqlite(c) => {
                let (meeting, agent) = (self.meeting.id.to_string(), agent.map(|a| a.to_string()));
                let new = sqlite::NewEvent {
                    meeting: &meeting,
                    seq: stored_seq,
                    event_type: event_type.as_str(),
                    agent: agent.as_deref(),
                    data: text.as_deref(),
                    now: self.now,
                };
                sqlite::insert_event(c, new).await?
            }
            Conn::Postgres(c) => {
                let new = postgres::NewEvent {
                    meeting: self.meeting.id.0,
                    seq: stored_seq,
                    event_type: event_type.as_str(),
                    agent: agent.map(|a| a.0),
                    data: text.as_deref(),
                    now: instant(self.now)?,
                };
                postgres::insert_event(c, new).await?
            }
        }
        self.meeting.last_event_seq = seq;
        self.events.push(MeetingEvent {
            meeting: self.meeting.id,
            seq,
            event_type,
            agent,
            data,
            created_at: from_ms(self.now),
        });
        Ok(())
    }

    /// Writes the meeting row back (last statement of every write).
    async fn save(&self, conn: &mut Conn<'_>) -> Result<()> {
        let m = &self.meeting;
        let ms = |t: Option<DateTime<Utc>>| t.map(|t| t.timestamp_millis());
        let last_event_seq = i64::try_from(m.last_event_seq).unwrap_or(i64::MAX);
        match conn {
            Conn::Sqlite(c) => {
                let (id, speaker, chosen) = (
                    m.id.to_string(),
                    m.speaker.map(|s| s.to_string()),
                    m.chosen.map(|c| c.to_string()),
                );
                let state = sqlite::MeetingState {
                    id: &id,
                    status: m.status.as_str(),
                    speaker: speaker.as_deref(),
                    turn_started_at: ms(m.turn_started_at),
                    turn_deadline: ms(m.turn_deadline),
                    last_event_seq,
                    started_at: ms(m.started_at),
                    ended_at: ms(m.ended_at),
                    chosen: chosen.as_deref(),
                };
                sqlite::save_meeting(c, state).await?
            }
            Conn::Postgres(c) => {
                // The instants go through their milliseconds, as the SQLite arm stores them.
                let at = |t: Option<DateTime<Utc>>| ms(t).map(instant).transpose();
                let state = postgres::MeetingState {
                    id: m.id.0,
                    status: m.status.as_str(),
                    speaker: m.speaker.map(|s| s.0),
                    turn_started_at: at(m.turn_started_at)?,
                    turn_deadline: at(m.turn_deadline)?,
                    last_event_seq,
                    started_at: at(m.started_at)?,
                    ended_at: at(m.ended_at)?,
                    chosen: m.chosen.map(|c| c.0),
                };
                postgres::save_meeting(c, state).await?
            }
        }
        Ok(())
    }

    fn start_turn(&mut self, speaker: Option<AgentId>) {
        self.meeting.speaker = speaker;
        match speaker {
            Some(_) => {
                self.meeting.turn_started_at = Some(from_ms(self.now));
                self.meeting.turn_deadline = self
                    .meeting
                    .turn_duration
                    .map(|d| from_ms(self.now.saturating_add(ms(d))));
            }
            None => {
                self.meeting.turn_started_at = None;
                self.meeting.turn_deadline = None;
            }
        }
    }

    /// Ends the meeting (speaker cleared, the speaking participant back to waiting).
    async fn end(&mut self, conn: &mut Conn<'_>, reason: &str) -> Result<()> {
        set_status_where(
            conn,
            self.meeting.id,
            ParticipantStatus::Speaking,
            ParticipantStatus::Waiting,
        )
        .await?;
        self.meeting.status = MeetingStatus::Ended;
        self.meeting.ended_at = Some(from_ms(self.now));
        self.meeting.chosen = None;
        self.start_turn(None);
        self.event(
            conn,
            MeetingEventType::MeetingEnded,
            None,
            Some(serde_json::json!({ "reason": reason })),
        )
        .await
    }

    /// Hands the turn from the participant at `after` (a join order; 0: from the start) to the
    /// next present participant in join order, wrapping around; ends the meeting if nobody is
    /// present.
    async fn hand_over(
        &mut self,
        conn: &mut Conn<'_>,
        from: Option<AgentId>,
        after: u64,
        reason: &str,
    ) -> Result<()> {
        set_status_where(
            conn,
            self.meeting.id,
            ParticipantStatus::Speaking,
            ParticipantStatus::Waiting,
        )
        .await?;
        let present: Vec<Participant> = participants(conn, self.meeting.id)
            .await?
            .into_iter()
            .filter(|p| p.status.is_present())
            .collect();
        let chosen = self.meeting.chosen.take();
        let host = self.meeting.host;
        let host_present = present.iter().any(|p| p.agent == host);
        let (next, reason) = match self.meeting.policy {
            // Selector: after another speaker the turn goes back to the host; after the host, to
            // whom it chose if that one is still present, else on in join order.
            MeetingPolicy::Selector if from.is_some_and(|f| f != host) && host_present => {
                (Some(host), reason)
            }
            MeetingPolicy::Selector if from == Some(host) => {
                match chosen.filter(|c| present.iter().any(|p| p.agent == *c)) {
                    Some(c) => (Some(c), "chosen"),
                    None => (next_speaker(&present, after), reason),
                }
            }
            _ => (next_speaker(&present, after), reason),
        };
        let Some(next) = next else {
            return self.end(conn, "everyone_left").await;
        };
        set_participant_status(conn, self.meeting.id, next, ParticipantStatus::Speaking).await?;
        self.start_turn(Some(next));
        self.event(
            conn,
            MeetingEventType::TurnPassed,
            Some(next),
            Some(serde_json::json!({
                "from": from.map(|f| f.to_string()),
                "reason": reason,
            })),
        )
        .await
    }

    /// Times the speaker out if the turn's deadline has passed.
    async fn apply_timeout(&mut self, conn: &mut Conn<'_>) -> Result<()> {
        let expired = self.meeting.status == MeetingStatus::Active
            && self
                .meeting
                .turn_deadline
                .is_some_and(|d| d.timestamp_millis() <= self.now);
        if !expired {
            return Ok(());
        }
        let speaker = self.meeting.speaker;
        let deadline = self.meeting.turn_deadline.map(|d| d.timestamp_millis());
        self.event(
            conn,
            MeetingEventType::AgentTimedOut,
            speaker,
            Some(serde_json::json!({ "deadline_ms": deadline })),
        )
        .await?;
        let after = match speaker {
            Some(s) => participant(conn, self.meeting.id, s)
                .await?
                .and_then(|p| p.join_order)
                .unwrap_or(0),
            None => 0,
        };
        self.hand_over(conn, speaker, after, "timeout").await
    }

    fn done(self, message: Option<ProtocolMessage>) -> MeetingUpdate {
        MeetingUpdate {
            meeting: self.meeting,
            events: self.events,
            message,
        }
    }
}

/// The next speaker after join order `after` among `present` (sorted by join order), wrapping.
fn next_speaker(present: &[Participant], after: u64) -> Option<AgentId> {
    present
        .iter()
        .find(|p| p.join_order.is_some_and(|o| o > after))
        .or_else(|| present.first())
        .map(|p| p.agent)
}

/// The meeting, its row locked on PostgreSQL (`FOR UPDATE`; SQLite's single writer serialises),
/// with an expired turn deadline applied.
async fn lock_meeting(conn: &mut Conn<'_>, id: MeetingId) -> Result<Change> {
    let row = match conn {
        Conn::Sqlite(c) => sqlite::meeting(c, &id.to_string())
            .await?
            .map(StoredProtocolRow::into_protocol),
        Conn::Postgres(c) => postgres::lock_meeting(c, id.0)
            .await?
            .map(StoredProtocolRow::into_protocol),
    };
    let meeting = match row {
        Some(meeting) => meeting?,
        None => {
            return Err(DbProtocolError::NotFound {
                kind: "meeting",
                id: id.0,
            }
            .into());
        }
    };
    let mut change = Change {
        meeting,
        events: Vec::new(),
        now: now_ms(),
    };
    change.apply_timeout(conn).await?;
    Ok(change)
}

async fn participant(
    conn: &mut Conn<'_>,
    meeting: MeetingId,
    agent: AgentId,
) -> Result<Option<Participant>> {
    match conn {
        Conn::Sqlite(c) => sqlite::participant(c, &meeting.to_string(), &agent.to_string())
            .await?
            .map(StoredProtocolRow::into_protocol)
            .transpose(),
        Conn::Postgres(c) => postgres::participant(c, meeting.0, agent.0)
            .await?
            .map(StoredProtocolRow::into_protocol)
            .transpose(),
    }
}

async fn set_participant_status(
    conn: &mut Conn<'_>,
    meeting: MeetingId,
    agent: AgentId,
    status: ParticipantStatus,
) -> Result<()> {
    match conn {
        Conn::Sqlite(c) => {
            let (meeting, agent) = (meeting.to_string(), agent.to_string());
            sqlite::set_participant_status(c, &meeting, &agent, status.as_str()).await?
        }
        Conn::Postgres(c) => {
            postgres::set_participant_status(c, meeting.0, agent.0, status.as_str()).await?
        }
    }
    Ok(())
}

async fn set_status_where(
    conn: &mut Conn<'_>,
    meeting: MeetingId,
    from: ParticipantStatus,
    to: ParticipantStatus,
) -> Result<()> {
    match conn {
        Conn::Sqlite(c) => {
            sqlite::set_status_where(c, &meeting.to_string(), from.as_str(), to.as_str()).await?
        }
        Conn::Postgres(c) => {
            postgres::set_status_where(c, meeting.0, from.as_str(), to.as_str()).await?
        }
    }
    Ok(())
}

fn refuse_ended(change: &Change) -> Result<()> {
    if change.meeting.status == MeetingStatus::Ended {
        return Err(ProtocolError::MeetingEnded(change.meeting.id).into());
    }
    Ok(())
}

fn require_host(change: &Change, agent: AgentId) -> Result<()> {
    if change.meeting.host != agent {
        return Err(ProtocolError::NotHost {
            meeting: change.meeting.id,
            agent,
        }
        .into());
    }
    Ok(())
}

async fn finish(
    conn: &mut Conn<'_>,
    ctx: &Ctx,
    change: Change,
    message: Option<ProtocolMessage>,
) -> Result<MeetingUpdate> {
    change.save(conn).await?;
    if !change.events.is_empty() {
        notify(conn, ctx, &[Wakeup::Meeting(change.meeting.id)]).await?;
    }
    Ok(change.done(message))
}

async fn create_meeting(
    conn: &mut Conn<'_>,
    ctx: &Ctx,
    host: AgentId,
    turn_duration: Option<Duration>,
    policy: MeetingPolicy,
    plan: Option<serde_json::Value>,
) -> Result<MeetingUpdate> {
    require_agent(conn, host).await?;
    let now = now_ms();
    let meeting = Meeting {
        id: MeetingId::new(),
        host,
        status: MeetingStatus::Created,
        speaker: None,
        turn_duration,
        turn_started_at: None,
        turn_deadline: None,
        last_event_seq: 0,
        created_at: from_ms(now),
        started_at: None,
        ended_at: None,
        policy,
        chosen: None,
    };
    let duration = turn_duration.map(ms);
    match conn {
        Conn::Sqlite(c) => {
            let (id, host) = (meeting.id.to_string(), host.to_string());
            sqlite::insert_meeting(c, &id, &host, duration, now, policy.as_str()).await?;
            let new = sqlite::NewParticipant {
                meeting: &id,
                agent: &host,
                status: ParticipantStatus::Attending.as_str(),
                join_order: Some(1),
                invited_at: None,
                joined_at: Some(now),
            };
            sqlite::insert_participant(c, new).await?
        }
        Conn::Postgres(c) => {
            let at = instant(now)?;
            postgres::insert_meeting(c, meeting.id.0, host.0, duration, at, policy.as_str())
                .await?;
            let new = postgres::NewParticipant {
                meeting: meeting.id.0,
                agent: host.0,
                status: ParticipantStatus::Attending.as_str(),
                join_order: Some(1),
                invited_at: None,
                joined_at: Some(at),
            };
            postgres::insert_participant(c, new).await?
        }
    }
    let mut change = Change {
        meeting,
        events: Vec::new(),
        now,
    };
    change
        .event(
            conn,
            MeetingEventType::MeetingCreated,
            Some(host),
            Some(match plan {
                Some(plan) => serde_json::json!({
                    "turn_duration_ms": turn_duration.map(ms),
                    "policy": policy.as_str(),
                    "plan": plan,
                }),
                None => serde_json::json!({
                    "turn_duration_ms": turn_duration.map(ms),
                    "policy": policy.as_str(),
                }),
            }),
        )
        .await?;
    change
        .event(
            conn,
            MeetingEventType::AgentJoined,
            Some(host),
            Some(serde_json::json!({ "join_order": 1 })),
        )
        .await?;
    finish(conn, ctx, change, None).await
}

async fn invite(
    conn: &mut Conn<'_>,
    change: &mut Change,
    host: AgentId,
    agent: AgentId,
) -> Result<Option<ProtocolMessage>> {
    let meeting = change.meeting.id;
    refuse_ended(change)?;
    require_host(change, host)?;
    let host_agent = require_agent(conn, host).await?;
    require_same_organization(conn, &host_agent, agent).await?;
    match participant(conn, meeting, agent).await? {
        Some(p) if p.status != ParticipantStatus::Left => {
            return Err(ProtocolError::AlreadyParticipant { meeting, agent }.into());
        }
        Some(_) => match conn {
            Conn::Sqlite(c) => {
                let (meeting, agent) = (meeting.to_string(), agent.to_string());
                sqlite::reinvite(c, &meeting, &agent, change.now).await?
            }
            Conn::Postgres(c) => {
                postgres::reinvite(c, meeting.0, agent.0, instant(change.now)?).await?
            }
        },
        None => match conn {
            Conn::Sqlite(c) => {
                let (meeting, agent) = (meeting.to_string(), agent.to_string());
                let new = sqlite::NewParticipant {
                    meeting: &meeting,
                    agent: &agent,
                    status: ParticipantStatus::Invited.as_str(),
                    join_order: None,
                    invited_at: Some(change.now),
                    joined_at: None,
                };
                sqlite::insert_participant(c, new).await?
            }
            Conn::Postgres(c) => {
                let new = postgres::NewParticipant {
                    meeting: meeting.0,
                    agent: agent.0,
                    status: ParticipantStatus::Invited.as_str(),
                    join_order: None,
                    invited_at: Some(instant(change.now)?),
                    joined_at: None,
                };
                postgres::insert_participant(c, new).await?
            }
        },
    }
    change
        .event(conn, MeetingEventType::AgentInvited, Some(agent), None)
        .await?;
    Ok(None)
}

async fn join(
    conn: &mut Conn<'_>,
    change: &mut Change,
    agent: AgentId,
) -> Result<Option<ProtocolMessage>> {
    let meeting = change.meeting.id;
    refuse_ended(change)?;
    let host = require_agent(conn, change.meeting.host).await?;
    require_same_organization(conn, &host, agent).await?;
    let existing = participant(conn, meeting, agent).await?;
    if existing.as_ref().is_some_and(|p| p.status.is_present()) {
        return Err(ProtocolError::AlreadyParticipant { meeting, agent }.into());
    }
    let order = match conn {
        Conn::Sqlite(c) => sqlite::next_join_order(c, &meeting.to_string()).await?,
        Conn::Postgres(c) => postgres::next_join_order(c, meeting.0).await?,
    };
    let status = if change.meeting.status == MeetingStatus::Active {
        ParticipantStatus::Waiting
    } else {
        ParticipantStatus::Attending
    };
    match conn {
        Conn::Sqlite(c) => {
            let (id, agent) = (meeting.to_string(), agent.to_string());
            if existing.is_some() {
                sqlite::rejoin(c, &id, &agent, status.as_str(), order, change.now).await?
            } else {
                let new = sqlite::NewParticipant {
                    meeting: &id,
                    agent: &agent,
                    status: status.as_str(),
                    join_order: Some(order),
                    invited_at: None,
                    joined_at: Some(change.now),
                };
                sqlite::insert_participant(c, new).await?
            }
        }
        Conn::Postgres(c) => {
            let now = instant(change.now)?;
            if existing.is_some() {
                postgres::rejoin(c, meeting.0, agent.0, status.as_str(), order, now).await?
            } else {
                let new = postgres::NewParticipant {
                    meeting: meeting.0,
                    agent: agent.0,
                    status: status.as_str(),
                    join_order: Some(order),
                    invited_at: None,
                    joined_at: Some(now),
                };
                postgres::insert_participant(c, new).await?
            }
        }
    }
    change
        .event(
            conn,
            MeetingEventType::AgentJoined,
            Some(agent),
            Some(serde_json::json!({ "join_order": order })),
        )
        .await?;
    if change.meeting.status == MeetingStatus::Created {
        let present = participants(conn, meeting)
            .await?
            .iter()
            .filter(|p| p.status.is_present())
            .count();
        if present >= 2 {
            change.meeting.status = MeetingStatus::Ready;
            change
                .event(conn, MeetingEventType::MeetingReady, None, None)
                .await?;
        }
    }
    Ok(None)
}

async fn start(
    conn: &mut Conn<'_>,
    change: &mut Change,
    host: AgentId,
) -> Result<Option<ProtocolMessage>> {
    let meeting = change.meeting.id;
    refuse_ended(change)?;
    require_host(change, host)?;
    let present: Vec<Participant> = participants(conn, meeting)
        .await?
        .into_iter()
        .filter(|p| p.status.is_present())
        .collect();
    if change.meeting.status != MeetingStatus::Ready || present.is_empty() {
        return Err(ProtocolError::MeetingState {
            meeting,
            status: change.meeting.status.as_str(),
            needed: "ready, with a participant present",
        }
        .into());
    }
    set_status_where(
        conn,
        meeting,
        ParticipantStatus::Attending,
        ParticipantStatus::Waiting,
    )
    .await?;
    change.meeting.status = MeetingStatus::Active;
    change.meeting.started_at = Some(from_ms(change.now));
    change
        .event(conn, MeetingEventType::MeetingStarted, Some(host), None)
        .await?;
    change.hand_over(conn, None, 0, "start").await?;
    Ok(None)
}

async fn speak(
    conn: &mut Conn<'_>,
    ctx: &Ctx,
    change: &mut Change,
    agent: AgentId,
    message: Option<&NewProtocolMessage>,
    turn: Option<i64>,
) -> Result<Option<ProtocolMessage>> {
    let meeting = change.meeting.id;
    refuse_ended(change)?;
    let me = participant(conn, meeting, agent)
        .await?
        .filter(|p| p.status.is_present())
        .ok_or(ProtocolError::NotMeetingParticipant { meeting, agent })?;
    if change.meeting.status != MeetingStatus::Active {
        return Err(ProtocolError::MeetingState {
            meeting,
            status: change.meeting.status.as_str(),
            needed: "active",
        }
        .into());
    }
    let this_turn = turn
        .is_none_or(|t| change.meeting.turn_started_at.map(|s| s.timestamp_millis()) == Some(t));
    if change.meeting.speaker != Some(agent) || !this_turn {
        return Err(ProtocolError::NotSpeaker {
            meeting,
            agent,
            speaker: change.meeting.speaker,
        }
        .into());
    }
    let mut stored = None;
    if let Some(message) = message {
        let content = serde_json::to_string(&message.content).map_err(|e| {
            DbProtocolError::InvalidMessage(format!("content does not encode: {e}"))
        })?;
        let metadata = message
            .metadata
            .as_ref()
            .map(serde_json::to_string)
            .transpose()
            .map_err(|e| {
                DbProtocolError::InvalidMessage(format!("metadata does not encode: {e}"))
            })?;
        let row = ProtocolMessage {
            id: ProtocolMessageId::new(),
            sender: agent,
            recipient: None,
            session: None,
            meeting: Some(meeting),
            message_type: message.message_type.clone(),
            content: message.content.clone(),
            metadata: message.metadata.clone(),
            read_at: None,
            seq: ctx.next_id()?,
            created_at: from_ms(change.now),
        };
        match conn {
            Conn::Sqlite(c) => {
                let (id, sender, meeting) =
                    (row.id.to_string(), agent.to_string(), meeting.to_string());
                let new = sqlite::NewMeetingMessage {
                    id: &id,
                    sender: &sender,
                    meeting: &meeting,
                    message_type: &row.message_type,
                    content: &content,
                    metadata: metadata.as_deref(),
                    seq: row.seq.get(),
                    now: change.now,
                };
                sqlite::insert_meeting_message(c, new).await?
            }
            Conn::Postgres(c) => {
                let new = postgres::NewMeetingMessage {
                    id: row.id.0,
                    sender: agent.0,
                    meeting: meeting.0,
                    message_type: &row.message_type,
                    content: &content,
                    metadata: metadata.as_deref(),
                    seq: row.seq.get(),
                    now: instant(change.now)?,
                };
                postgres::insert_meeting_message(c, new).await?
            }
        }
        change
            .event(
                conn,
                MeetingEventType::AgentSpoke,
                Some(agent),
                Some(serde_json::json!({ "message": row.id.to_string() })),
            )
            .await?;
        stored = Some(row);
    }
    let reason = if stored.is_some() { "spoke" } else { "passed" };
    change
        .hand_over(conn, Some(agent), me.join_order.unwrap_or(0), reason)
        .await?;
    Ok(stored)
}

async fn leave(
    conn: &mut Conn<'_>,
    change: &mut Change,
    agent: AgentId,
) -> Result<Option<ProtocolMessage>> {
    let meeting = change.meeting.id;
    refuse_ended(change)?;
    let me = participant(conn, meeting, agent)
        .await?
        .filter(|p| p.status.is_present())
        .ok_or(ProtocolError::NotMeetingParticipant { meeting, agent })?;
    match conn {
        Conn::Sqlite(c) => {
            let (id, agent) = (meeting.to_string(), agent.to_string());
            sqlite::leave(c, &id, &agent, change.now).await?
        }
        Conn::Postgres(c) => postgres::leave(c, meeting.0, agent.0, instant(change.now)?).await?,
    }
    change
        .event(conn, MeetingEventType::AgentLeft, Some(agent), None)
        .await?;
    if change.meeting.status == MeetingStatus::Active && change.meeting.speaker == Some(agent) {
        change
            .hand_over(conn, Some(agent), me.join_order.unwrap_or(0), "left")
            .await?;
    } else if change.meeting.status == MeetingStatus::Active {
        let anyone = participants(conn, meeting)
            .await?
            .iter()
            .any(|p| p.status.is_present());
        if !anyone {
            change.end(conn, "everyone_left").await?;
        }
    }
    Ok(None)
}

/// The host of a selector meeting, holding the turn, names a present participant (not itself)
/// to speak after its turn. Stored on the meeting row; the hand-over that ends the host's turn
/// consumes it.
async fn choose(
    conn: &mut Conn<'_>,
    change: &mut Change,
    host: AgentId,
    next: AgentId,
) -> Result<Option<ProtocolMessage>> {
    let meeting = change.meeting.id;
    refuse_ended(change)?;
    require_host(change, host)?;
    if change.meeting.policy != MeetingPolicy::Selector {
        return Err(ProtocolError::MeetingState {
            meeting,
            status: change.meeting.policy.as_str(),
            needed: "a selector meeting",
        }
        .into());
    }
    if change.meeting.speaker != Some(host) {
        return Err(ProtocolError::NotSpeaker {
            meeting,
            agent: host,
            speaker: change.meeting.speaker,
        }
        .into());
    }
    if next == host {
        return Err(DbProtocolError::InvalidMessage(
            "the host chooses another participant, not itself".into(),
        )
        .into());
    }
    participant(conn, meeting, next)
        .await?
        .filter(|p| p.status.is_present())
        .ok_or(ProtocolError::NotMeetingParticipant {
            meeting,
            agent: next,
        })?;
    change.meeting.chosen = Some(next);
    Ok(None)
}

async fn end_meeting(
    conn: &mut Conn<'_>,
    change: &mut Change,
    host: AgentId,
) -> Result<Option<ProtocolMessage>> {
    refuse_ended(change)?;
    require_host(change, host)?;
    change.end(conn, "host").await?;
    Ok(None)
}

/// Whether `e` is a refusal raised by a check before any write of the op (so the rows written
/// before it, the applied timeout, are consistent and may commit).
fn is_refusal(e: &Error) -> bool {
    ProtocolError::of(e).is_some_and(|r| !matches!(r, ProtocolError::SelfSession(_)))
        || matches!(
            e,
            Error::Protocol(DbProtocolError::NotFound { .. })
                | Error::Protocol(DbProtocolError::InvalidMessage(_))
        )
}

/// Runs a write on an existing meeting: locks it, applies an expired turn deadline, runs the
/// op. When the op is refused after a timeout was applied, the timeout still commits (it happened
/// first, whatever the op): the outcome is [`ProtocolDone::Refused`] with the refusal.
async fn run(conn: &mut Conn<'_>, ctx: &Ctx, op: &ProtocolOp) -> Result<ProtocolDone> {
    let Some(id) = op.key().map(MeetingId) else {
        return Err(StorageError::Corrupt(format!("{op:?} names no meeting")).into());
    };
    let mut change = lock_meeting(conn, id).await?;
    let timed_out = (change.meeting.clone(), change.events.len());
    let outcome = match op {
        ProtocolOp::Invite { host, agent, .. } => invite(conn, &mut change, *host, *agent).await,
        ProtocolOp::Join { agent, .. } => join(conn, &mut change, *agent).await,
        ProtocolOp::Start { host, .. } => start(conn, &mut change, *host).await,
        ProtocolOp::Speak {
            agent,
            message,
            turn,
            ..
        } => speak(conn, ctx, &mut change, *agent, message.as_ref(), *turn).await,
        ProtocolOp::Leave { agent, .. } => leave(conn, &mut change, *agent).await,
        ProtocolOp::EndMeeting { host, .. } => end_meeting(conn, &mut change, *host).await,
        ProtocolOp::Choose { host, next, .. } => choose(conn, &mut change, *host, *next).await,
        ProtocolOp::ApplyTimeouts { .. } => Ok(None),
        ProtocolOp::CreateMeeting { .. } | ProtocolOp::Retention(_) => {
            return Err(StorageError::Corrupt(format!("{op:?} is not a meeting write")).into());
        }
    };
    match outcome {
        Ok(message) => Ok(ProtocolDone::Meeting(Box::new(
            finish(conn, ctx, change, message).await?,
        ))),
        Err(e) if timed_out.1 > 0 && is_refusal(&e) => {
            change.meeting = timed_out.0;
            change.events.truncate(timed_out.1);
            let update = finish(conn, ctx, change, None).await?;
            Ok(ProtocolDone::Refused(Box::new((update, e))))
        }
        Err(e) => Err(e),
    }
}

/// What a retention pick selects (one checked statement per engine, and on PostgreSQL its
/// `SKIP LOCKED` twin).
#[derive(Clone, Copy)]
enum Pick<'a> {
    /// Ended sessions that ended before the cutoff (Unix ms).
    EndedSessions(i64),
    /// Ended meetings that ended before the cutoff.
    EndedMeetings(i64),
    /// Messages older than the cutoff, read or of an ended meeting.
    OldMessages(i64),
    /// The messages of this session.
    OfSession(&'a str),
    /// The messages of this meeting.
    OfMeeting(&'a str),
}

/// Ids (TEXT) of the rows `pick` selects that nobody else holds: on PostgreSQL they are locked,
/// skipping those held by other transactions; the number is how many matched but were held.
async fn take(conn: &mut Conn<'_>, pick: Pick<'_>) -> Result<(Vec<String>, u64)> {
    use pattern_db_postgres::protocol::retention as pg;
    use pattern_db_sqlite::protocol::retention as lite;
    let (all, free) = match conn {
        Conn::Sqlite(c) => {
            let all = match pick {
                Pick::EndedSessions(cutoff) => lite::ended_sessions(c, cutoff).await?,
                Pick::EndedMeetings(cutoff) => lite::ended_meetings(c, cutoff).await?,
                Pick::OldMessages(cutoff) => lite::old_messages(c, cutoff).await?,
                Pick::OfSession(owner) => lite::messages_of_session(c, owner).await?,
                Pick::OfMeeting(owner) => lite::messages_of_meeting(c, owner).await?,
            };
            (all.len(), all)
        }
        Conn::Postgres(c) => {
            let (all, free) = match pick {
                Pick::EndedSessions(cutoff) => {
                    let cutoff = instant(cutoff)?;
                    let all = pg::ended_sessions(c, cutoff).await?.len();
                    (all, pg::ended_sessions_free(c, cutoff).await?)
                }
                Pick::EndedMeetings(cutoff) => {
                    let cutoff = instant(cutoff)?;
                    let all = pg::ended_meetings(c, cutoff).await?.len();
                    (all, pg::ended_meetings_free(c, cutoff).await?)
                }
                Pick::OldMessages(cutoff) => {
                    let cutoff = instant(cutoff)?;
                    let all = pg::old_messages(c, cutoff).await?.len();
                    (all, pg::old_messages_free(c, cutoff).await?)
                }
                Pick::OfSession(owner) => {
                    let owner = parse_uuid(owner)?;
                    let all = pg::messages_of_session(c, owner).await?.len();
                    (all, pg::messages_of_session_free(c, owner).await?)
                }
                Pick::OfMeeting(owner) => {
                    let owner = parse_uuid(owner)?;
                    let all = pg::messages_of_meeting(c, owner).await?.len();
                    (all, pg::messages_of_meeting_free(c, owner).await?)
                }
            };
            (all, free.iter().map(ToString::to_string).collect())
        }
    };
    let skipped = all.saturating_sub(free.len());
    Ok((free, u64::try_from(skipped).unwrap_or(0)))
}

/// Runs `sql` (with `$1` the archive time and `$2..` the ids) over `ids` in fixed-size chunks.
async fn for_chunks(
    conn: &mut Conn<'_>,
    ids: &[String],
    sql: impl Fn(&str) -> String,
    with_time: Option<i64>,
) -> Result<()> {
    for chunk in fixed_chunks(ids) {
        let first = if with_time.is_some() { 2 } else { 1 };
        let list = (first..first + chunk.len())
            .map(|n| format!("${n}"))
            .collect::<Vec<_>>()
            .join(", ");
        let text = sql(&list);
        let mut query = pattern_db::sql::query(sqlx::AssertSqlSafe(text));
        if let Some(t) = with_time {
            query = query.bind(t);
        }
        for id in chunk {
            query = query.bind(id.clone());
        }
        query.execute(&mut *conn).await?;
    }
    Ok(())
}

const ARCHIVE_COLUMNS: &str = "id, sender_id, recipient_id, session_id, meeting_id, \
    message_type, content, metadata, read_at, seq, created_at";

async fn archive(conn: &mut Conn<'_>, ids: &[String], now: i64) -> Result<()> {
    for_chunks(
        conn,
        ids,
        |list| {
            format!(
                "INSERT INTO protocol_messages_archive ({ARCHIVE_COLUMNS}, archived_at) \
                 SELECT {ARCHIVE_COLUMNS}, $1 FROM protocol_messages WHERE id IN ({list})"
            )
        },
        Some(now),
    )
    .await?;
    for_chunks(
        conn,
        ids,
        |list| format!("DELETE FROM protocol_messages WHERE id IN ({list})"),
        None,
    )
    .await
}

fn uuids<T>(ids: &[String], wrap: impl Fn(uuid::Uuid) -> T) -> Result<Vec<T>> {
    ids.iter().map(|s| Ok(wrap(parse_uuid(s)?))).collect()
}

async fn retention(conn: &mut Conn<'_>, policy: &RetentionPolicy) -> Result<RetentionReport> {
    let now = now_ms();
    let message_cutoff = now.saturating_sub(ms(policy.archive_messages_after));
    let ended_cutoff = now.saturating_sub(ms(policy.delete_ended_after));
    // Ended sessions and meetings old enough to go, and the messages that go with them.
    let (sessions, busy_s) = take(conn, Pick::EndedSessions(ended_cutoff)).await?;
    let (meetings, busy_m) = take(conn, Pick::EndedMeetings(ended_cutoff)).await?;
    // Old messages: read ones, and those of meetings that ended.
    let (mut messages, busy_old) = take(conn, Pick::OldMessages(message_cutoff)).await?;
    let mut busy = busy_s + busy_m + busy_old;
    // Every message of a session or meeting that goes is archived with it, read or not.
    let mut kept = Vec::new();
    for (sessions_of, owners) in [(true, &sessions), (false, &meetings)] {
        for owner in owners.iter() {
            let pick = if sessions_of {
                Pick::OfSession(owner)
            } else {
                Pick::OfMeeting(owner)
            };
            let (mine, held) = take(conn, pick).await?;
            if held > 0 {
                // Some of its messages are held by another transaction: keep the owner this time.
                busy += held;
                kept.push(owner.clone());
            }
            messages.extend(mine);
        }
    }
    messages.sort_unstable();
    messages.dedup();
    let sessions: Vec<String> = sessions.into_iter().filter(|s| !kept.contains(s)).collect();
    let meetings: Vec<String> = meetings.into_iter().filter(|m| !kept.contains(m)).collect();
    let report = RetentionReport {
        dry_run: policy.dry_run,
        message_cutoff: from_ms(message_cutoff),
        ended_cutoff: from_ms(ended_cutoff),
        archived_messages: uuids(&messages, ProtocolMessageId)?,
        deleted_sessions: uuids(&sessions, SessionId)?,
        deleted_meetings: uuids(&meetings, MeetingId)?,
        skipped_busy: busy,
    };
    if policy.dry_run {
        return Ok(report);
    }
    archive(conn, &messages, now).await?;
    for_chunks(
        conn,
        &sessions,
        |list| format!("DELETE FROM protocol_sessions WHERE id IN ({list})"),
        None,
    )
    .await?;
    for_chunks(
        conn,
        &meetings,
        |list| format!("DELETE FROM protocol_meetings WHERE id IN ({list})"),
        None,
    )
    .await?;
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(order: u64) -> Participant {
        Participant {
            meeting: MeetingId(uuid::Uuid::nil()),
            agent: AgentId(uuid::Uuid::from_u128(u128::from(order))),
            status: ParticipantStatus::Waiting,
            join_order: Some(order),
            invited_at: None,
            joined_at: None,
            left_at: None,
        }
    }

    #[test]
    fn next_speaker_follows_join_order_and_wraps() {
        let present = [at(2), at(5), at(9)];
        let id = |o: u128| Some(AgentId(uuid::Uuid::from_u128(o)));
        assert_eq!(next_speaker(&present, 0), id(2));
        assert_eq!(next_speaker(&present, 2), id(5));
        // The one after a participant who left (order 6) is the next present one.
        assert_eq!(next_speaker(&present, 6), id(9));
        assert_eq!(next_speaker(&present, 9), id(2));
        assert_eq!(next_speaker(&[], 3), None);
    }
}
