//! Sessions of the agent-to-agent protocol: opening (or finding live) the session of two
//! agents, sending into it, ending it, marking messages read, and their reads (a session, its
//! messages, an agent's inbox) — the [`Store`] methods, their [`Write`] types and their SQL.
//!
//! Rules (decision 0003, decision 0020):
//!
//! - a session joins two different agents of one organization, stored in id order, so A-B and
//!   B-A are one session; [`Store::open_session`] returns the live session of a pair and type
//!   when there is one (at most one is live: a partial unique index), and opens one otherwise;
//! - in a sync session the opener speaks first; only the agent holding the turn
//!   (`locked_agent_id`) may send ([`pattern_db::ProtocolError::OutOfTurn`] otherwise, changing nothing),
//!   and the turn passes to the other agent in the transaction that stores the message;
//! - every session message has the other participant as recipient, so it is in that agent's
//!   inbox (unread until the recipient marks it read) whatever the session type.
//!
//! Storing a message into a locked session (the turn, the message limit, the recipient's
//! trigger when the agents answer) is `pattern_db::protocol::store_message`: a batch completion
//! sends a sync session's reply through it in its own transaction, so it stays below. A session
//! write first locks the session row (`SELECT ... FOR UPDATE` on PostgreSQL; on SQLite the single
//! writer serialises). Every statement here is checked (`pattern_db_sqlite::protocol`,
//! `pattern_db_postgres::protocol`). These functions must never commit, roll back or open a
//! transaction of their own, and never run a statement after one that failed.

use pattern_db::protocol::{
    MAX_SESSION_MESSAGES, StoredProtocolRow, close_session, lock_session, require_agent,
    require_same_organization, store_message, validate_name,
};
use pattern_db::storage::{Conn, Ctx, Locks, Write, from_ms, now_ms};
use pattern_db::{
    AgentId, Delivery, Error, NewProtocolMessage, ProtocolError as DbProtocolError,
    ProtocolMessage, ProtocolMessageId, Result, RunClaim, Session, SessionId, SessionOptions,
    SessionStatus, SessionType, StorageError, WakeKey,
};

use super::{Store, instant};
use crate::error::ProtocolError;

/// Messages from either engine's checked rows, in their order.
pub(super) fn messages<R: StoredProtocolRow<ProtocolMessage>>(
    rows: Vec<R>,
) -> Result<Vec<ProtocolMessage>> {
    rows.into_iter()
        .map(StoredProtocolRow::into_protocol)
        .collect()
}

impl Store<'_> {
    // -- sessions ------------------------------------------------------------------------------

    /// The live session of `opener` and `other` of this type, or a new one. The pair is unordered
    /// (A-B is B-A). A new sync session gives the first turn to `opener`; an existing session is
    /// returned as it is (whoever holds its turn). A session with oneself is
    /// [`ProtocolError::SelfSession`]; unknown agents are [`pattern_db::ProtocolError::NotFound`].
    /// Messages wait in the inbox ([`Delivery::Inbox`]); see [`Self::open_session_with`] for
    /// sessions the agents answer themselves.
    pub async fn open_session(
        &self,
        opener: AgentId,
        other: AgentId,
        session_type: SessionType,
    ) -> Result<Session> {
        self.open_session_with(opener, other, session_type, SessionOptions::default(), None)
            .await
            .map(|(session, _)| session)
    }

    /// [`Self::open_session`] with `options` (who reads the messages, a message limit) and,
    /// with `first`, `opener`'s first message sent in the same transaction (refused whole, the
    /// session unopened, if the message is: out of turn in a live sync session the other agent
    /// holds, say). A live inbox session opened for agents becomes one (decision 0020). A limit
    /// outside 1..=[`MAX_SESSION_MESSAGES`] is [`pattern_db::ProtocolError::InvalidMessage`].
    pub async fn open_session_with(
        &self,
        opener: AgentId,
        other: AgentId,
        session_type: SessionType,
        options: SessionOptions,
        first: Option<NewProtocolMessage>,
    ) -> Result<(Session, Option<ProtocolMessage>)> {
        if opener == other {
            return Err(ProtocolError::SelfSession(opener).into());
        }
        if let Some(limit) = options.message_limit
            && !(1..=MAX_SESSION_MESSAGES).contains(&limit)
        {
            return Err(DbProtocolError::InvalidMessage(format!(
                "a session's message limit is 1 to {MAX_SESSION_MESSAGES}, got {limit}"
            ))
            .into());
        }
        if let Some(m) = &first {
            validate_name("message type", &m.message_type)?;
        }
        let (session, sent) = self
            .db
            .write(OpenSession {
                opener,
                other,
                session_type,
                options,
                first,
            })
            .await?;
        if let Some(recipient) = sent.as_ref().and_then(|m| m.recipient) {
            self.wake_delivery(recipient);
        }
        Ok((session, sent))
    }

    /// The session with this id ([`pattern_db::ProtocolError::NotFound`] otherwise).
    pub async fn session(&self, id: SessionId) -> Result<Session> {
        let mut pooled = self.db.reader().acquire().await?;
        let row = match &mut pooled.conn() {
            Conn::Sqlite(c) => pattern_db_sqlite::protocol::session(c, &id.to_string())
                .await?
                .map(StoredProtocolRow::into_protocol),
            Conn::Postgres(c) => pattern_db_postgres::protocol::session(c, id.0)
                .await?
                .map(StoredProtocolRow::into_protocol),
        };
        match row {
            Some(session) => session,
            None => Err(DbProtocolError::NotFound {
                kind: "session",
                id: id.0,
            }
            .into()),
        }
    }

    /// Ends a session; only a participant may ([`pattern_db::ProtocolError::NotParticipant`]), and an ended
    /// session is [`pattern_db::ProtocolError::SessionEnded`]. Returns the ended session.
    pub async fn end_session(&self, session: SessionId, agent: AgentId) -> Result<Session> {
        self.db.write(EndSession { session, agent }).await
    }

    /// Stores a message from `sender` to the other participant of `session`. In a sync session
    /// only the agent holding the turn may send ([`pattern_db::ProtocolError::OutOfTurn`], nothing stored) and
    /// the turn passes to the other agent in the same transaction. Also
    /// [`pattern_db::ProtocolError::NotParticipant`], [`pattern_db::ProtocolError::SessionEnded`],
    /// [`pattern_db::ProtocolError::NotFound`] and [`pattern_db::ProtocolError::InvalidMessage`] (bad
    /// message type).
    pub async fn send_session_message(
        &self,
        session: SessionId,
        sender: AgentId,
        message: NewProtocolMessage,
    ) -> Result<ProtocolMessage> {
        validate_name("message type", &message.message_type)?;
        let message = self
            .db
            .write(SendSessionMessage {
                session,
                sender,
                message,
            })
            .await?;
        if let Some(recipient) = message.recipient {
            self.wake_delivery(recipient);
        }
        Ok(message)
    }

    /// Wakes this process's queue deliverers for `recipient` (a session message may have queued
    /// its trigger; other processes hear of it from the transaction's own notification).
    fn wake_delivery(&self, recipient: AgentId) {
        self.db.hub().wake(WakeKey::Agent(recipient));
        self.db.hub().wake(WakeKey::Queue);
    }

    /// Every message of a session, in arrival order.
    pub async fn session_messages(&self, session: SessionId) -> Result<Vec<ProtocolMessage>> {
        let mut pooled = self.db.reader().acquire().await?;
        match &mut pooled.conn() {
            Conn::Sqlite(c) => messages(
                pattern_db_sqlite::protocol::session_messages(c, &session.to_string()).await?,
            ),
            Conn::Postgres(c) => {
                messages(pattern_db_postgres::protocol::session_messages(c, session.0).await?)
            }
        }
    }

    // -- inbox ---------------------------------------------------------------------------------

    /// The unread messages of `agent`, oldest first (arrival order).
    pub async fn unread(&self, agent: AgentId) -> Result<Vec<ProtocolMessage>> {
        let mut pooled = self.db.reader().acquire().await?;
        match &mut pooled.conn() {
            Conn::Sqlite(c) => {
                messages(pattern_db_sqlite::protocol::unread(c, &agent.to_string()).await?)
            }
            Conn::Postgres(c) => messages(pattern_db_postgres::protocol::unread(c, agent.0).await?),
        }
    }

    /// The oldest unread message of `agent`, if any.
    pub async fn oldest_unread(&self, agent: AgentId) -> Result<Option<ProtocolMessage>> {
        let mut pooled = self.db.reader().acquire().await?;
        match &mut pooled.conn() {
            Conn::Sqlite(c) => pattern_db_sqlite::protocol::oldest_unread(c, &agent.to_string())
                .await?
                .map(StoredProtocolRow::into_protocol)
                .transpose(),
            Conn::Postgres(c) => pattern_db_postgres::protocol::oldest_unread(c, agent.0)
                .await?
                .map(StoredProtocolRow::into_protocol)
                .transpose(),
        }
    }

    /// How many unread messages `agent` has.
    pub async fn unread_count(&self, agent: AgentId) -> Result<u64> {
        let mut pooled = self.db.reader().acquire().await?;
        let n = match &mut pooled.conn() {
            Conn::Sqlite(c) => {
                pattern_db_sqlite::protocol::unread_count(c, &agent.to_string()).await?
            }
            Conn::Postgres(c) => pattern_db_postgres::protocol::unread_count(c, agent.0).await?,
        };
        Ok(u64::try_from(n).unwrap_or(0))
    }

    /// Marks messages read for `agent`. Only messages whose recipient is `agent` and that are
    /// still unread change: ids of other agents' messages, unknown ids and messages read already
    /// are left alone, so marking twice is harmless. Returns how many changed. An unknown agent
    /// is [`pattern_db::ProtocolError::NotFound`].
    pub async fn mark_read(&self, agent: AgentId, messages: &[ProtocolMessageId]) -> Result<u64> {
        self.db
            .write(MarkRead {
                agent,
                messages: messages.to_vec(),
            })
            .await
    }
}

/// Opens (or finds live) the session of two agents, with an optional first message.
#[derive(Debug)]
pub(super) struct OpenSession {
    pub(super) opener: AgentId,
    pub(super) other: AgentId,
    pub(super) session_type: SessionType,
    pub(super) options: SessionOptions,
    pub(super) first: Option<NewProtocolMessage>,
}

impl Write for OpenSession {
    type Output = (Session, Option<ProtocolMessage>);

    fn locks(&self) -> Locks {
        // Protocol writes lock no Pattern agent row; the session row is their lock.
        Locks::none()
    }

    async fn apply(
        &self,
        conn: &mut Conn<'_>,
        ctx: &Ctx,
        _fence: Option<&RunClaim>,
    ) -> Result<Self::Output> {
        open_session(
            conn,
            ctx,
            self.opener,
            self.other,
            self.session_type,
            self.options,
            self.first.as_ref(),
        )
        .await
    }
}

/// Ends a session (a participant only).
#[derive(Debug)]
pub(super) struct EndSession {
    pub(super) session: SessionId,
    pub(super) agent: AgentId,
}

impl Write for EndSession {
    type Output = Session;

    fn locks(&self) -> Locks {
        Locks::protocol(self.session.0)
    }

    async fn apply(
        &self,
        conn: &mut Conn<'_>,
        ctx: &Ctx,
        _fence: Option<&RunClaim>,
    ) -> Result<Session> {
        end_session(conn, ctx, self.session, self.agent).await
    }
}

/// Stores a message of `sender` into a session (and, for agents, the recipient's trigger).
#[derive(Debug)]
pub(super) struct SendSessionMessage {
    pub(super) session: SessionId,
    pub(super) sender: AgentId,
    pub(super) message: NewProtocolMessage,
}

impl Write for SendSessionMessage {
    type Output = ProtocolMessage;

    fn locks(&self) -> Locks {
        Locks::protocol(self.session.0)
    }

    async fn apply(
        &self,
        conn: &mut Conn<'_>,
        ctx: &Ctx,
        _fence: Option<&RunClaim>,
    ) -> Result<ProtocolMessage> {
        send_session_message(conn, ctx, self.session, self.sender, &self.message).await
    }
}

/// Marks a recipient's messages read; outputs how many changed.
#[derive(Debug)]
pub(super) struct MarkRead {
    pub(super) agent: AgentId,
    pub(super) messages: Vec<ProtocolMessageId>,
}

impl Write for MarkRead {
    type Output = u64;

    fn locks(&self) -> Locks {
        Locks::protocol(self.agent.0)
    }

    async fn apply(
        &self,
        conn: &mut Conn<'_>,
        _ctx: &Ctx,
        _fence: Option<&RunClaim>,
    ) -> Result<u64> {
        mark_read(conn, self.agent, &self.messages).await
    }
}

async fn live_session(
    conn: &mut Conn<'_>,
    a: AgentId,
    b: AgentId,
    session_type: SessionType,
) -> Result<Option<Session>> {
    let session_type = session_type.as_str();
    match conn {
        Conn::Sqlite(c) => pattern_db_sqlite::protocol::live_session(
            c,
            &a.to_string(),
            &b.to_string(),
            session_type,
        )
        .await?
        .map(StoredProtocolRow::into_protocol)
        .transpose(),
        Conn::Postgres(c) => pattern_db_postgres::protocol::live_session(c, a.0, b.0, session_type)
            .await?
            .map(StoredProtocolRow::into_protocol)
            .transpose(),
    }
}

/// Returns the live session of the pair and type, or opens one (`opener` holds the first turn of
/// a sync session) with `options`; a live inbox session opened again for agents becomes one
/// (decision 0020). With `first`, `opener` sends it into the session in the same transaction.
async fn open_session(
    conn: &mut Conn<'_>,
    ctx: &Ctx,
    opener: AgentId,
    other: AgentId,
    session_type: SessionType,
    options: SessionOptions,
    first: Option<&NewProtocolMessage>,
) -> Result<(Session, Option<ProtocolMessage>)> {
    if opener == other {
        return Err(ProtocolError::SelfSession(opener).into());
    }
    let opener_agent = require_agent(conn, opener).await?;
    require_same_organization(conn, &opener_agent, other).await?;
    let (a, b) = if opener < other {
        (opener, other)
    } else {
        (other, opener)
    };
    let mut session = match live_session(conn, a, b, session_type).await? {
        Some(live) => live,
        None => insert_session(conn, opener, a, b, session_type, options).await?,
    };
    if options.delivery == Delivery::Agents && session.delivery == Delivery::Inbox {
        session = lock_session(conn, ctx, session.id).await?;
        let limit = options
            .message_limit
            .map(|l| l.saturating_add(session.messages_sent));
        let stored_limit = limit.map(|l| i64::try_from(l).unwrap_or(i64::MAX));
        match conn {
            Conn::Sqlite(c) => {
                let id = session.id.to_string();
                pattern_db_sqlite::protocol::set_agents_delivery(c, &id, stored_limit).await?
            }
            Conn::Postgres(c) => {
                pattern_db_postgres::protocol::set_agents_delivery(c, session.id.0, stored_limit)
                    .await?
            }
        }
        session.delivery = Delivery::Agents;
        session.message_limit = session.message_limit.or(limit);
    }
    let sent = match first {
        Some(message) => {
            let mut locked = lock_session(conn, ctx, session.id).await?;
            let sent = store_message(conn, ctx, &mut locked, opener, message).await?;
            session = locked;
            Some(sent)
        }
        None => None,
    };
    Ok((session, sent))
}

async fn insert_session(
    conn: &mut Conn<'_>,
    opener: AgentId,
    a: AgentId,
    b: AgentId,
    session_type: SessionType,
    options: SessionOptions,
) -> Result<Session> {
    let now = now_ms();
    let session = Session {
        id: SessionId::new(),
        agent_a: a,
        agent_b: b,
        session_type,
        status: SessionStatus::Active,
        turn: (session_type == SessionType::Sync).then_some(opener),
        created_at: from_ms(now),
        updated_at: from_ms(now),
        ended_at: None,
        delivery: options.delivery,
        message_limit: options.message_limit,
        messages_sent: 0,
    };
    // A concurrent open in another process may win the race for the partial unique index: the
    // insert then does nothing (no failed statement), and the winner's session is read back.
    let message_limit = options
        .message_limit
        .map(|l| i64::try_from(l).unwrap_or(i64::MAX));
    let inserted = match conn {
        Conn::Sqlite(c) => {
            let (id, agent_a, agent_b) = (session.id.to_string(), a.to_string(), b.to_string());
            let turn = session.turn.map(|t| t.to_string());
            let new = pattern_db_sqlite::protocol::NewSession {
                id: &id,
                agent_a: &agent_a,
                agent_b: &agent_b,
                session_type: session_type.as_str(),
                turn: turn.as_deref(),
                now,
                delivery: options.delivery.as_str(),
                message_limit,
            };
            pattern_db_sqlite::protocol::insert_session(c, new).await?
        }
        Conn::Postgres(c) => {
            let new = pattern_db_postgres::protocol::NewSession {
                id: session.id.0,
                agent_a: a.0,
                agent_b: b.0,
                session_type: session_type.as_str(),
                turn: session.turn.map(|t| t.0),
                now: instant(now)?,
                delivery: options.delivery.as_str(),
                message_limit,
            };
            pattern_db_postgres::protocol::insert_session(c, new).await?
        }
    };
    if inserted == 1 {
        return Ok(session);
    }
    live_session(conn, a, b, session_type)
        .await?
        .ok_or_else(|| {
            Error::Storage(StorageError::Corrupt(
                "a live session conflicts but cannot be read".into(),
            ))
        })
}

async fn end_session(
    conn: &mut Conn<'_>,
    ctx: &Ctx,
    id: SessionId,
    agent: AgentId,
) -> Result<Session> {
    let mut session = lock_session(conn, ctx, id).await?;
    if !session.has_participant(agent) {
        return Err(DbProtocolError::NotParticipant { session: id, agent }.into());
    }
    if !session.is_live() {
        return Err(DbProtocolError::SessionEnded(id).into());
    }
    close_session(conn, ctx, &mut session).await?;
    Ok(session)
}

async fn send_session_message(
    conn: &mut Conn<'_>,
    ctx: &Ctx,
    id: SessionId,
    sender: AgentId,
    message: &NewProtocolMessage,
) -> Result<ProtocolMessage> {
    let mut session = lock_session(conn, ctx, id).await?;
    store_message(conn, ctx, &mut session, sender, message).await
}

async fn mark_read(
    conn: &mut Conn<'_>,
    agent: AgentId,
    messages: &[ProtocolMessageId],
) -> Result<u64> {
    require_agent(conn, agent).await?;
    let now = now_ms();
    let mut changed = 0;
    match conn {
        Conn::Sqlite(c) => {
            let agent = agent.to_string();
            for message in messages {
                changed +=
                    pattern_db_sqlite::protocol::mark_read(c, &message.to_string(), &agent, now)
                        .await?;
            }
        }
        Conn::Postgres(c) => {
            let now = instant(now)?;
            for message in messages {
                changed +=
                    pattern_db_postgres::protocol::mark_read(c, message.0, agent.0, now).await?;
            }
        }
    }
    Ok(changed)
}
