//! [`Protocol`]: the protocol's handle over a [`Database`], with waiting on the in-process
//! notifier.
//!
//! Every operation is one `pattern_db` call (one transaction); after a send or an end commits, the
//! agents concerned are woken. Waiting never polls: it sleeps on the notifier until woken or until
//! the deadline, re-reading the database only after a wake-up and once at the deadline. This
//! module must never wake anyone before the write that concerns them is committed.

use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use pattern_db::{
    Database, NewProtocolAgent, NewProtocolMessage, Organization, OrganizationId, ProtocolAgent,
    ProtocolAgentId, ProtocolMessage, ProtocolMessageId, Session, SessionId, SessionType,
};
use tokio::time::Instant;

use crate::error::{Error, Result};
use crate::notify::Notifier;

/// The protocol over one database. Cloning shares the database and the notifier, so a waiter
/// on one clone is woken by a send through another.
#[derive(Debug, Clone)]
pub struct Protocol {
    db: Database,
    notifier: Arc<Notifier>,
}

impl Protocol {
    /// A protocol handle over `db` (migrated: `Database::open` applies `0003_protocol`).
    pub fn new(db: Database) -> Self {
        Self {
            db,
            notifier: Arc::new(Notifier::default()),
        }
    }

    /// The database underneath.
    pub fn db(&self) -> &Database {
        &self.db
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

    /// Creates a protocol agent; a taken external id is `ExternalIdTaken`.
    pub async fn create_agent(&self, new: NewProtocolAgent) -> Result<ProtocolAgent> {
        Ok(self.db.create_protocol_agent(new).await?)
    }

    /// The protocol agent with this external id; unknown is `ExternalIdNotFound`.
    pub async fn agent(&self, external_id: &str) -> Result<ProtocolAgent> {
        Ok(self.db.protocol_agent_by_external_id(external_id).await?)
    }

    /// The protocol agents of an organization, by external id.
    pub async fn agents(&self, organization: OrganizationId) -> Result<Vec<ProtocolAgent>> {
        Ok(self.db.protocol_agents(organization).await?)
    }

    // -- sessions ------------------------------------------------------------------------------

    /// The live session of the pair (in either order) and type, or a new one in which `opener`
    /// speaks first (sync). See [`Database::open_session`].
    pub async fn open_session(
        &self,
        opener: ProtocolAgentId,
        other: ProtocolAgentId,
        session_type: SessionType,
    ) -> Result<Session> {
        Ok(self.db.open_session(opener, other, session_type).await?)
    }

    /// The session with this id.
    pub async fn session(&self, session: SessionId) -> Result<Session> {
        Ok(self.db.session(session).await?)
    }

    /// Ends a session (a participant only) and wakes both participants.
    pub async fn end_session(&self, session: SessionId, agent: ProtocolAgentId) -> Result<Session> {
        let ended = self.db.end_session(session, agent).await?;
        self.notifier.wake(ended.agent_a);
        self.notifier.wake(ended.agent_b);
        Ok(ended)
    }

    /// Sends `message` from `sender` to the other participant of `session` and wakes the
    /// recipient. Sync sessions: only the turn holder may send (`OutOfTurn`), and the turn passes.
    pub async fn send(
        &self,
        session: SessionId,
        sender: ProtocolAgentId,
        message: NewProtocolMessage,
    ) -> Result<ProtocolMessage> {
        let stored = self
            .db
            .send_session_message(session, sender, message)
            .await?;
        if let Some(recipient) = stored.recipient {
            self.notifier.wake(recipient);
        }
        Ok(stored)
    }

    /// Every message of a session, in arrival order.
    pub async fn session_messages(&self, session: SessionId) -> Result<Vec<ProtocolMessage>> {
        Ok(self.db.session_messages(session).await?)
    }

    // -- inbox ---------------------------------------------------------------------------------

    /// The unread messages of `agent`, oldest first.
    pub async fn unread(&self, agent: ProtocolAgentId) -> Result<Vec<ProtocolMessage>> {
        Ok(self.db.unread(agent).await?)
    }

    /// How many unread messages `agent` has.
    pub async fn unread_count(&self, agent: ProtocolAgentId) -> Result<u64> {
        Ok(self.db.unread_count(agent).await?)
    }

    /// Marks `agent`'s messages read; only its own unread ones change. Returns how many changed.
    pub async fn mark_read(
        &self,
        agent: ProtocolAgentId,
        messages: &[ProtocolMessageId],
    ) -> Result<u64> {
        Ok(self.db.mark_read(agent, messages).await?)
    }

    // -- waiting -------------------------------------------------------------------------------

    /// The oldest unread message of `agent`, waiting up to `timeout` for one to arrive. It is not
    /// marked read: call [`Self::mark_read`] once it is handled (until then it is returned again).
    /// Sends through this handle wake the wait at once; a send from another process is seen at
    /// the latest when `timeout` expires. `None`: nothing arrived in time.
    pub async fn next_message(
        &self,
        agent: ProtocolAgentId,
        timeout: Duration,
    ) -> Result<Option<ProtocolMessage>> {
        let deadline = Instant::now() + timeout;
        let channel = self.notifier.channel(agent);
        loop {
            let mut woken = pin!(channel.notified());
            woken.as_mut().enable();
            if let Some(message) = self.db.oldest_unread(agent).await? {
                return Ok(Some(message));
            }
            if tokio::time::timeout_at(deadline, woken).await.is_err() {
                return Ok(self.db.oldest_unread(agent).await?);
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
        agent: ProtocolAgentId,
        timeout: Duration,
    ) -> Result<bool> {
        let deadline = Instant::now() + timeout;
        let channel = self.notifier.channel(agent);
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

    async fn has_turn(&self, id: SessionId, agent: ProtocolAgentId) -> Result<bool> {
        let session = self.db.session(id).await?;
        if !session.has_participant(agent) {
            return Err(pattern_db::Error::NotParticipant { session: id, agent }.into());
        }
        if session.session_type == SessionType::Async {
            return Err(Error::NoTurns(id));
        }
        if !session.is_live() {
            return Err(pattern_db::Error::SessionEnded(id).into());
        }
        Ok(session.turn == Some(agent))
    }
}
