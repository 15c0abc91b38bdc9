//! [`Protocol`]: the protocol's handle over a [`Database`], with waiting on the notifier.
//!
//! Every operation is one read or one write of [`crate::store`] (one transaction, through
//! `pattern_db`'s writer); after a write commits, the agents or the meeting concerned are woken
//! in this process, and on PostgreSQL in every process (the write's `NOTIFY`, delivered at
//! commit, reaches each handle's listener). Waiting never polls:
//! it sleeps on the notifier until woken, until the deadline, or until the current meeting turn's
//! deadline (to apply the timeout), re-reading the database only then. This module must never
//! wake anyone before the write that concerns them is committed.

use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use pattern_db::{
    Agent, AgentId, Database, MeetingId, NewAgent, NewProtocolMessage, Organization,
    OrganizationId, ProtocolMessage, ProtocolMessageId, Session, SessionId, SessionOptions,
    SessionType,
};
use tokio::time::Instant;

use crate::error::{Error, ProtocolError, Result};
use crate::follow::Follower;
use crate::meeting::{
    ActiveConversation, ActiveMeeting, Meeting, MeetingEvent, MeetingPolicy, MeetingUpdate,
    Participant, RetentionPolicy, RetentionReport, UnreadSummary,
};
use crate::notify::{Key, ListenerTask, Notifier, spawn_listener};
use crate::store::{ListPage, Store};

/// Most expired meetings one [`Protocol::sweep_timeouts`] call handles.
const SWEEP_BATCH: u32 = 1000;

/// The protocol over one database. Cloning shares the database, the notifier and the listener,
/// so a waiter on one clone is woken by a write through another (and, on PostgreSQL, by a write
/// from any process).
#[derive(Debug, Clone)]
pub struct Protocol {
    db: Database,
    notifier: Arc<Notifier>,
    _listener: Option<Arc<ListenerTask>>,
}

impl Protocol {
    /// A protocol handle over `db` (migrated: `Database::open` applies the protocol's
    /// migrations). On PostgreSQL it opens a listening connection first (`LISTEN` has run when
    /// this returns), so waiters are woken by writes of other processes too.
    pub async fn new(db: Database) -> Result<Self> {
        let notifier = Arc::new(Notifier::default());
        let listener = db
            .protocol_wakeups()
            .await?
            .map(|l| Arc::new(spawn_listener(l, &notifier)));
        Ok(Self {
            db,
            notifier,
            _listener: listener,
        })
    }

    /// The database underneath.
    pub fn db(&self) -> &Database {
        &self.db
    }

    /// The protocol's storage underneath (its SQL; no waking).
    pub fn store(&self) -> Store<'_> {
        Store::new(&self.db)
    }

    /// Wake-up channels this handle keeps now (each held by a waiter, or dropped since the last
    /// sweep): stays flat however many meetings and agents were ever waited on.
    pub fn wake_channels(&self) -> usize {
        self.notifier.kept()
    }

    // -- organizations and agents --------------------------------------------------------------

    /// Creates an organization; a taken external id is `ExternalIdTaken`.
    pub async fn create_organization(&self, external_id: &str, name: &str) -> Result<Organization> {
        Ok(self.db.create_organization(external_id, name).await?)
    }

    /// The organization with this external id; unknown is `ExternalIdNotFound`.
    pub async fn organization(&self, external_id: &str) -> Result<Organization> {
        Ok(self.db.organization_by_external_id(external_id).await?)
    }

    /// Every organization, by external id.
    pub async fn organizations(&self) -> Result<Vec<Organization>> {
        Ok(self.db.organizations().await?)
    }

    /// Creates an agent (the one identity of `pattern_db`: the same agent the CLI and the HTTP
    /// API see); a taken name or external id in its organization is refused.
    pub async fn create_agent(&self, new: NewAgent) -> Result<Agent> {
        Ok(self.db.create_agent(new).await?)
    }

    /// The agent of `organization` with this external id; unknown is `ExternalIdNotFound`.
    pub async fn agent(&self, organization: OrganizationId, external_id: &str) -> Result<Agent> {
        Ok(self
            .db
            .agent_by_external_id(organization, external_id)
            .await?)
    }

    /// The agents of an organization, by name.
    pub async fn agents(&self, organization: OrganizationId) -> Result<Vec<Agent>> {
        Ok(self.db.org_agents(organization).await?)
    }

    // -- sessions ------------------------------------------------------------------------------

    /// The live session of the pair (in either order) and type, or a new one in which `opener`
    /// speaks first (sync). See [`Store::open_session`](crate::store::Store::open_session).
    pub async fn open_session(
        &self,
        opener: AgentId,
        other: AgentId,
        session_type: SessionType,
    ) -> Result<Session> {
        Ok(self
            .store()
            .open_session(opener, other, session_type)
            .await?)
    }

    /// [`Self::open_session`] with `options` (who reads the messages, a limit) and `opener`'s
    /// first message, in one write. See [`Store::open_session_with`](crate::store::Store::open_session_with).
    pub async fn open_session_with(
        &self,
        opener: AgentId,
        other: AgentId,
        session_type: SessionType,
        options: SessionOptions,
        first: Option<NewProtocolMessage>,
    ) -> Result<(Session, Option<ProtocolMessage>)> {
        let opened = self
            .store()
            .open_session_with(opener, other, session_type, options, first)
            .await?;
        if let Some(recipient) = opened.1.as_ref().and_then(|m| m.recipient) {
            self.notifier.wake(Key::Agent(recipient));
        }
        Ok(opened)
    }

    /// The session with this id.
    pub async fn session(&self, session: SessionId) -> Result<Session> {
        Ok(self.store().session(session).await?)
    }

    /// Ends a session (a participant only) and wakes both participants.
    pub async fn end_session(&self, session: SessionId, agent: AgentId) -> Result<Session> {
        let ended = self.store().end_session(session, agent).await?;
        self.notifier.wake(Key::Agent(ended.agent_a));
        self.notifier.wake(Key::Agent(ended.agent_b));
        Ok(ended)
    }

    /// Sends `message` from `sender` to the other participant of `session` and wakes the
    /// recipient. Sync sessions: only the turn holder may send (`OutOfTurn`), and the turn passes.
    pub async fn send(
        &self,
        session: SessionId,
        sender: AgentId,
        message: NewProtocolMessage,
    ) -> Result<ProtocolMessage> {
        let stored = self
            .store()
            .send_session_message(session, sender, message)
            .await?;
        if let Some(recipient) = stored.recipient {
            self.notifier.wake(Key::Agent(recipient));
        }
        Ok(stored)
    }

    /// Every message of a session, in arrival order.
    pub async fn session_messages(&self, session: SessionId) -> Result<Vec<ProtocolMessage>> {
        Ok(self.store().session_messages(session).await?)
    }

    // -- inbox ---------------------------------------------------------------------------------

    /// The unread messages of `agent`, oldest first.
    pub async fn unread(&self, agent: AgentId) -> Result<Vec<ProtocolMessage>> {
        Ok(self.store().unread(agent).await?)
    }

    /// How many unread messages `agent` has.
    pub async fn unread_count(&self, agent: AgentId) -> Result<u64> {
        Ok(self.store().unread_count(agent).await?)
    }

    /// Marks `agent`'s messages read; only its own unread ones change. Returns how many changed.
    pub async fn mark_read(&self, agent: AgentId, messages: &[ProtocolMessageId]) -> Result<u64> {
        Ok(self.store().mark_read(agent, messages).await?)
    }

    // -- waiting -------------------------------------------------------------------------------

    /// The oldest unread message of `agent`, waiting up to `timeout` for one to arrive. It is not
    /// marked read: call [`Self::mark_read`] once it is handled (until then it is returned again).
    /// Sends through this handle (and, on PostgreSQL, from any process) wake the wait at once;
    /// on SQLite a send from another process is seen at the latest when `timeout` expires.
    /// `None`: nothing arrived in time.
    pub async fn next_message(
        &self,
        agent: AgentId,
        timeout: Duration,
    ) -> Result<Option<ProtocolMessage>> {
        let deadline = Instant::now() + timeout;
        let channel = self.notifier.channel(Key::Agent(agent));
        loop {
            let mut woken = pin!(channel.notified());
            woken.as_mut().enable();
            if let Some(message) = self.store().oldest_unread(agent).await? {
                return Ok(Some(message));
            }
            if tokio::time::timeout_at(deadline, woken).await.is_err() {
                return Ok(self.store().oldest_unread(agent).await?);
            }
        }
    }

    /// Waits up to `timeout` until it is `agent`'s turn in the sync `session`: `true` when it is
    /// (at once if it already is), `false` on timeout. An ended session is `SessionEnded`, a
    /// stranger `NotParticipant`, an async session [`Error::NoTurns`]. Same wake-ups as
    /// [`Self::next_message`].
    pub async fn wait_for_turn(
        &self,
        session: SessionId,
        agent: AgentId,
        timeout: Duration,
    ) -> Result<bool> {
        let deadline = Instant::now() + timeout;
        let channel = self.notifier.channel(Key::Agent(agent));
        loop {
            let mut woken = pin!(channel.notified());
            woken.as_mut().enable();
            if self.has_turn(session, agent).await? {
                return Ok(true);
            }
            if tokio::time::timeout_at(deadline, woken).await.is_err() {
                return self.has_turn(session, agent).await;
            }
        }
    }

    // -- meetings ------------------------------------------------------------------------------

    fn woke(&self, update: MeetingUpdate) -> MeetingUpdate {
        if !update.events.is_empty() {
            self.notifier.wake(Key::Meeting(update.meeting.id));
        }
        update
    }

    /// Creates a meeting hosted (and joined) by `host`, with an optional turn duration. See
    /// [`Store::create_meeting`](crate::store::Store::create_meeting).
    pub async fn create_meeting(
        &self,
        host: AgentId,
        turn_duration: Option<Duration>,
    ) -> Result<MeetingUpdate> {
        Ok(self.woke(self.store().create_meeting(host, turn_duration).await?))
    }

    /// [`Self::create_meeting`] with a plan stored in the log (see
    /// [`Store::create_meeting_with_plan`](crate::store::Store::create_meeting_with_plan)).
    pub async fn create_meeting_with_plan(
        &self,
        host: AgentId,
        turn_duration: Option<Duration>,
        policy: MeetingPolicy,
        plan: serde_json::Value,
    ) -> Result<MeetingUpdate> {
        Ok(self.woke(
            self.store()
                .create_meeting_with_plan(host, turn_duration, policy, plan)
                .await?,
        ))
    }

    /// The host of a selector meeting names who speaks after its turn. See
    /// [`Store::choose_speaker`](crate::store::Store::choose_speaker).
    pub async fn choose_speaker(
        &self,
        meeting: MeetingId,
        host: AgentId,
        next: AgentId,
    ) -> Result<MeetingUpdate> {
        Ok(self.woke(self.store().choose_speaker(meeting, host, next).await?))
    }

    /// Speaks (`Some`) or passes (`None`) only in the turn that began at `turn_started_at`. See
    /// [`Store::speak_in_turn`](crate::store::Store::speak_in_turn).
    pub async fn speak_in_turn(
        &self,
        meeting: MeetingId,
        agent: AgentId,
        turn_started_at: chrono::DateTime<chrono::Utc>,
        message: Option<NewProtocolMessage>,
    ) -> Result<MeetingUpdate> {
        Ok(self.woke(
            self.store()
                .speak_in_turn(meeting, agent, turn_started_at, message)
                .await?,
        ))
    }

    /// The host invites `agent`. See [`Store::invite_to_meeting`](crate::store::Store::invite_to_meeting).
    pub async fn invite(
        &self,
        meeting: MeetingId,
        host: AgentId,
        agent: AgentId,
    ) -> Result<MeetingUpdate> {
        Ok(self.woke(self.store().invite_to_meeting(meeting, host, agent).await?))
    }

    /// `agent` joins. See [`Store::join_meeting`](crate::store::Store::join_meeting).
    pub async fn join_meeting(&self, meeting: MeetingId, agent: AgentId) -> Result<MeetingUpdate> {
        Ok(self.woke(self.store().join_meeting(meeting, agent).await?))
    }

    /// The host starts a ready meeting. See [`Store::start_meeting`](crate::store::Store::start_meeting).
    pub async fn start_meeting(&self, meeting: MeetingId, host: AgentId) -> Result<MeetingUpdate> {
        Ok(self.woke(self.store().start_meeting(meeting, host).await?))
    }

    /// The current speaker speaks; the turn passes on. See [`Store::speak`](crate::store::Store::speak).
    pub async fn speak(
        &self,
        meeting: MeetingId,
        agent: AgentId,
        message: NewProtocolMessage,
    ) -> Result<MeetingUpdate> {
        Ok(self.woke(self.store().speak(meeting, agent, message).await?))
    }

    /// The current speaker passes. See [`Store::pass_turn`](crate::store::Store::pass_turn).
    pub async fn pass_turn(&self, meeting: MeetingId, agent: AgentId) -> Result<MeetingUpdate> {
        Ok(self.woke(self.store().pass_turn(meeting, agent).await?))
    }

    /// `agent` leaves. See [`Store::leave_meeting`](crate::store::Store::leave_meeting).
    pub async fn leave_meeting(&self, meeting: MeetingId, agent: AgentId) -> Result<MeetingUpdate> {
        Ok(self.woke(self.store().leave_meeting(meeting, agent).await?))
    }

    /// The host ends the meeting. See [`Store::end_meeting`](crate::store::Store::end_meeting).
    pub async fn end_meeting(&self, meeting: MeetingId, host: AgentId) -> Result<MeetingUpdate> {
        Ok(self.woke(self.store().end_meeting(meeting, host).await?))
    }

    /// The meeting with this id.
    pub async fn meeting(&self, meeting: MeetingId) -> Result<Meeting> {
        Ok(self.store().meeting(meeting).await?)
    }

    /// Its participants, in join order.
    pub async fn participants(&self, meeting: MeetingId) -> Result<Vec<Participant>> {
        Ok(self.store().meeting_participants(meeting).await?)
    }

    /// Its messages (the meeting's history), in order.
    pub async fn meeting_messages(&self, meeting: MeetingId) -> Result<Vec<ProtocolMessage>> {
        Ok(self.store().meeting_messages(meeting).await?)
    }

    /// Up to `limit` events after sequence number `cursor` (0: from the start), in order.
    pub async fn events_after(
        &self,
        meeting: MeetingId,
        cursor: u64,
        limit: u32,
    ) -> Result<Vec<MeetingEvent>> {
        Ok(self
            .store()
            .meeting_events_after(meeting, cursor, limit)
            .await?)
    }

    /// Follows a meeting's event log from `cursor` (the last sequence number already seen; 0:
    /// from the start): see [`Follower`].
    pub fn follow(&self, meeting: MeetingId, cursor: u64) -> Follower {
        Follower::new(self.clone(), meeting, cursor)
    }

    pub(crate) fn meeting_channel(&self, meeting: MeetingId) -> Arc<tokio::sync::Notify> {
        self.notifier.channel(Key::Meeting(meeting))
    }

    /// Applies every expired turn deadline (times the silent speakers out, passes their turns)
    /// and returns the updates that changed something. Waiters and every meeting write apply
    /// deadlines too; a sweeper calling this now and then covers meetings nobody touches.
    pub async fn sweep_timeouts(&self) -> Result<Vec<MeetingUpdate>> {
        let mut changed = Vec::new();
        for meeting in self.store().expired_meetings(SWEEP_BATCH).await? {
            let update = self.woke(self.store().apply_meeting_timeouts(meeting).await?);
            if !update.events.is_empty() {
                changed.push(update);
            }
        }
        Ok(changed)
    }

    /// Waits up to `timeout` until `agent` is the speaker of `meeting`: `true` when it is (at
    /// once if it already is), `false` on timeout. A turn deadline that passes while waiting is
    /// applied by the waiter (the silent speaker is timed out). An ended meeting is
    /// `MeetingEnded`; an agent that is not present is `NotMeetingParticipant`.
    pub async fn wait_for_meeting_turn(
        &self,
        meeting: MeetingId,
        agent: AgentId,
        timeout: Duration,
    ) -> Result<bool> {
        let deadline = Instant::now() + timeout;
        let channel = self.meeting_channel(meeting);
        loop {
            let mut woken = pin!(channel.notified());
            woken.as_mut().enable();
            let m = self.store().meeting(meeting).await?;
            if !m.is_live() {
                return Err(ProtocolError::MeetingEnded(meeting).into());
            }
            let now = chrono::Utc::now();
            if let Some(turn_end) = m.turn_deadline
                && turn_end <= now
            {
                self.woke(self.store().apply_meeting_timeouts(meeting).await?);
                continue;
            }
            if m.speaker == Some(agent) {
                return Ok(true);
            }
            let present = self
                .store()
                .meeting_participants(meeting)
                .await?
                .iter()
                .any(|p| p.agent == agent && p.status.is_present());
            if !present {
                return Err(ProtocolError::NotMeetingParticipant { meeting, agent }.into());
            }
            if Instant::now() >= deadline {
                return Ok(false);
            }
            // Sleep until woken, the caller's deadline, or the end of the current turn.
            let mut until = deadline;
            if let Some(turn_end) = m.turn_deadline {
                let left = (turn_end - now).to_std().unwrap_or_default();
                until = until.min(Instant::now() + left);
            }
            let _ = tokio::time::timeout_at(until, woken).await;
        }
    }

    // -- views and retention -------------------------------------------------------------------

    /// The organization's sessions (both agents its own), newest first.
    pub async fn org_sessions(
        &self,
        organization: OrganizationId,
        page: ListPage<SessionId>,
    ) -> Result<Vec<Session>> {
        Ok(self.store().org_sessions(organization, page).await?)
    }

    /// The organization's meetings (hosted by its agents), newest first.
    pub async fn org_meetings(
        &self,
        organization: OrganizationId,
        page: ListPage<MeetingId>,
    ) -> Result<Vec<Meeting>> {
        Ok(self.store().org_meetings(organization, page).await?)
    }

    /// Live sessions with their agents (the "active conversations" view).
    pub async fn active_conversations(&self) -> Result<Vec<ActiveConversation>> {
        Ok(self.store().active_conversations().await?)
    }

    /// Meetings not ended, with host, speaker and head count (the "active meetings" view).
    pub async fn active_meetings(&self) -> Result<Vec<ActiveMeeting>> {
        Ok(self.store().active_meetings().await?)
    }

    /// Unread counts of every agent (the "unread per agent" view).
    pub async fn unread_per_agent(&self) -> Result<Vec<UnreadSummary>> {
        Ok(self.store().unread_per_agent().await?)
    }

    /// Archives old messages and deletes old ended sessions and meetings, or with
    /// `policy.dry_run` only reports what it would do. Safe while meetings run: messages of live
    /// meetings and unread messages stay, nothing live is deleted, and nothing is dropped (the
    /// messages of what is deleted are archived in the same transaction).
    pub async fn retention(&self, policy: RetentionPolicy) -> Result<RetentionReport> {
        Ok(self.store().protocol_retention(policy).await?)
    }

    async fn has_turn(&self, id: SessionId, agent: AgentId) -> Result<bool> {
        let session = self.store().session(id).await?;
        if !session.has_participant(agent) {
            return Err(
                pattern_db::Error::Protocol(pattern_db::ProtocolError::NotParticipant {
                    session: id,
                    agent,
                })
                .into(),
            );
        }
        if session.session_type == SessionType::Async {
            return Err(Error::NoTurns(id));
        }
        if !session.is_live() {
            return Err(
                pattern_db::Error::Protocol(pattern_db::ProtocolError::SessionEnded(id)).into(),
            );
        }
        Ok(session.turn == Some(agent))
    }
}
