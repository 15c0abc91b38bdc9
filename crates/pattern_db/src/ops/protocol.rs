//! The SQL of what stays of the protocol in this crate: organizations ([`CreateOrganization`]),
//! the session message store (`store_message`, `lock_session`, `close_session`, public through
//! [`crate::protocol`] for `pattern_protocol`'s session writes), the delivery receipt a batch
//! completion writes (`complete_delivery`), the checks of agents and organizations every
//! protocol write makes, and `NOTIFY` (the participants are `agents` rows; nothing crosses an
//! organization's wall).
//!
//! Each function runs inside the writer's transaction and checks everything before it changes
//! anything, so a refused write leaves no trace. A session write first locks the session row
//! (`SELECT ... FOR UPDATE` on PostgreSQL; on SQLite the single writer already serialises), so
//! the turn check and the turn change of a sync session are atomic. These functions must never
//! commit, roll back or open a transaction of their own, and never run a statement after one that
//! failed (a failed statement aborts a PostgreSQL transaction).

use crate::{AgentError, ProtocolError};

use crate::sql::{Conn, instant};

use super::{AGENT_COLUMNS, agent_from_row};
use super::{Ctx, StoredId, from_ms, is_unique_violation, now_ms};
use crate::error::{Error, Result};
use crate::model::{Agent, AgentId, BatchType, ContentBlock, Role};
use crate::protocol::{
    Delivery, NewProtocolMessage, Organization, OrganizationId, ProtocolMessage, ProtocolMessageId,
    Session, SessionId, SessionStatus, SessionType, StoredProtocolRow, WAKEUP_CHANNEL, Wakeup,
};
use crate::queue::NewQueued;
use crate::runs::RunClaim;
use crate::writer::{Locks, Write};

/// A new organization.
#[derive(Debug)]
pub(crate) struct CreateOrganization {
    pub(crate) external_id: String,
    pub(crate) name: String,
}

impl Write for CreateOrganization {
    type Output = Organization;

    fn locks(&self) -> Locks {
        Locks::none()
    }

    async fn apply(
        &self,
        conn: &mut Conn<'_>,
        _ctx: &Ctx,
        _fence: Option<&RunClaim>,
    ) -> Result<Organization> {
        create_organization(conn, &self.external_id, &self.name).await
    }
}

/// On PostgreSQL, queues `NOTIFY`s for the wake-ups inside the current transaction: they are
/// delivered when (and only if) it commits. Nothing on SQLite (the handle wakes in-process).
pub async fn notify(conn: &mut Conn<'_>, _ctx: &Ctx, wakeups: &[Wakeup]) -> Result<()> {
    let Conn::Postgres(c) = conn else {
        return Ok(());
    };
    for wakeup in wakeups {
        pattern_db_postgres::protocol::notify(c, WAKEUP_CHANNEL, &wakeup.payload()).await?;
    }
    Ok(())
}

pub(crate) async fn create_organization(
    conn: &mut Conn<'_>,
    external_id: &str,
    name: &str,
) -> Result<Organization> {
    let taken = || {
        Error::Protocol(ProtocolError::ExternalIdTaken {
            kind: "organization",
            external_id: external_id.to_owned(),
        })
    };
    let exists = match conn {
        Conn::Sqlite(c) => pattern_db_sqlite::protocol::organization_exists(c, external_id).await?,
        Conn::Postgres(c) => {
            pattern_db_postgres::protocol::organization_exists(c, external_id).await?
        }
    };
    if exists {
        return Err(taken());
    }
    let org = Organization {
        id: OrganizationId::new(),
        external_id: external_id.to_owned(),
        name: name.to_owned(),
        created_at: from_ms(now_ms()),
    };
    let inserted = match conn {
        Conn::Sqlite(c) => {
            let row = pattern_db_sqlite::protocol::OrganizationRow {
                id: org.id.to_string(),
                external_id: org.external_id.clone(),
                name: org.name.clone(),
                created_at: org.created_at.timestamp_millis(),
            };
            pattern_db_sqlite::protocol::insert_organization(c, &row).await
        }
        Conn::Postgres(c) => {
            let row = pattern_db_postgres::protocol::OrganizationRow {
                id: org.id.0,
                external_id: org.external_id.clone(),
                name: org.name.clone(),
                created_at: instant(org.created_at.timestamp_millis())?,
            };
            pattern_db_postgres::protocol::insert_organization(c, &row).await
        }
    };
    match inserted {
        Ok(_) => Ok(org),
        Err(e) if is_unique_violation(&e) => Err(taken()),
        Err(e) => Err(e.into()),
    }
}

/// The agent `id` ([`AgentError::NotFound`] otherwise).
pub async fn require_agent(conn: &mut Conn<'_>, id: AgentId) -> Result<Agent> {
    let row = crate::sql::query(sqlx::AssertSqlSafe(format!(
        "SELECT {AGENT_COLUMNS} FROM agents WHERE id = $1"
    )))
    .bind(id.to_string())
    .fetch_optional(&mut *conn)
    .await?;
    match row {
        Some(row) => agent_from_row(&row),
        None => Err(AgentError::NotFound(id).into()),
    }
}

/// `other`, when it is in the organization of `agent` (the acting one);
/// [`AgentError::OtherOrganization`] when it is not, [`AgentError::NotFound`] when either is
/// unknown.
pub async fn require_same_organization(
    conn: &mut Conn<'_>,
    agent: &Agent,
    other: AgentId,
) -> Result<Agent> {
    let found = require_agent(conn, other).await?;
    if found.organization != agent.organization {
        return Err(AgentError::OtherOrganization {
            agent: agent.id,
            other,
        }
        .into());
    }
    Ok(found)
}

/// Reads a session and, on PostgreSQL, locks its row until the transaction ends.
pub async fn lock_session(conn: &mut Conn<'_>, _ctx: &Ctx, id: SessionId) -> Result<Session> {
    let row = match conn {
        Conn::Sqlite(c) => pattern_db_sqlite::protocol::session(c, &id.to_string())
            .await?
            .map(StoredProtocolRow::into_protocol),
        Conn::Postgres(c) => pattern_db_postgres::protocol::lock_session(c, id.0)
            .await?
            .map(StoredProtocolRow::into_protocol),
    };
    match row {
        Some(session) => session,
        None => Err(ProtocolError::NotFound {
            kind: "session",
            id: id.0,
        }
        .into()),
    }
}

/// Ends a locked, live session and wakes both participants.
pub async fn close_session(conn: &mut Conn<'_>, ctx: &Ctx, session: &mut Session) -> Result<()> {
    let now = now_ms();
    match conn {
        Conn::Sqlite(c) => {
            pattern_db_sqlite::protocol::end_session(c, &session.id.to_string(), now).await?
        }
        Conn::Postgres(c) => {
            pattern_db_postgres::protocol::end_session(c, session.id.0, instant(now)?).await?
        }
    }
    notify(
        conn,
        ctx,
        &[
            Wakeup::Agent(session.agent_a),
            Wakeup::Agent(session.agent_b),
        ],
    )
    .await?;
    session.status = SessionStatus::Ended;
    session.turn = None;
    session.updated_at = from_ms(now);
    session.ended_at = Some(from_ms(now));
    Ok(())
}

/// Stores `message` from `sender` into the locked `session` (checks first: participant, live,
/// turn, limit), passes a sync session's turn, counts it (ending the session at its limit) and,
/// when the agents answer, queues the recipient's trigger: all in the caller's transaction.
pub async fn store_message(
    conn: &mut Conn<'_>,
    ctx: &Ctx,
    session: &mut Session,
    sender: AgentId,
    message: &NewProtocolMessage,
) -> Result<ProtocolMessage> {
    let id = session.id;
    let Some(recipient) = session.other(sender) else {
        return Err(ProtocolError::NotParticipant {
            session: id,
            agent: sender,
        }
        .into());
    };
    if !session.is_live()
        || session
            .message_limit
            .is_some_and(|l| session.messages_sent >= l)
    {
        return Err(ProtocolError::SessionEnded(id).into());
    }
    if session.session_type == SessionType::Sync && session.turn != Some(sender) {
        return Err(ProtocolError::OutOfTurn {
            session: id,
            agent: sender,
            turn: session.turn,
        }
        .into());
    }
    let content = serde_json::to_string(&message.content)
        .map_err(|e| ProtocolError::InvalidMessage(format!("content does not encode: {e}")))?;
    let metadata = message
        .metadata
        .as_ref()
        .map(serde_json::to_string)
        .transpose()
        .map_err(|e| ProtocolError::InvalidMessage(format!("metadata does not encode: {e}")))?;
    let sender_name = match session.delivery {
        Delivery::Agents => Some(require_agent(conn, sender).await?.name),
        Delivery::Inbox => None,
    };
    let now = now_ms();
    let stored = ProtocolMessage {
        id: ProtocolMessageId::new(),
        sender,
        recipient: Some(recipient),
        session: Some(id),
        meeting: None,
        message_type: message.message_type.clone(),
        content: message.content.clone(),
        metadata: message.metadata.clone(),
        read_at: None,
        seq: ctx.ids.next_id()?,
        created_at: from_ms(now),
    };
    match conn {
        Conn::Sqlite(c) => {
            let (message_id, sender_id, recipient_id, session_id) = (
                stored.id.to_string(),
                sender.to_string(),
                recipient.to_string(),
                id.to_string(),
            );
            let new = pattern_db_sqlite::protocol::NewSessionMessage {
                id: &message_id,
                sender: &sender_id,
                recipient: &recipient_id,
                session: &session_id,
                message_type: &stored.message_type,
                content: &content,
                metadata: metadata.as_deref(),
                seq: stored.seq.get(),
                now,
            };
            pattern_db_sqlite::protocol::insert_session_message(c, new).await?
        }
        Conn::Postgres(c) => {
            let new = pattern_db_postgres::protocol::NewSessionMessage {
                id: stored.id.0,
                sender: sender.0,
                recipient: recipient.0,
                session: id.0,
                message_type: &stored.message_type,
                content: &content,
                metadata: metadata.as_deref(),
                seq: stored.seq.get(),
                now: instant(now)?,
            };
            pattern_db_postgres::protocol::insert_session_message(c, new).await?
        }
    }
    session.messages_sent += 1;
    session.turn = match session.session_type {
        SessionType::Sync => Some(recipient),
        SessionType::Async => None,
    };
    session.updated_at = from_ms(now);
    match conn {
        Conn::Sqlite(c) => {
            let turn = session.turn.map(|t| t.to_string());
            pattern_db_sqlite::protocol::count_sent(c, &id.to_string(), turn.as_deref(), now)
                .await?
        }
        Conn::Postgres(c) => {
            let turn = session.turn.map(|t| t.0);
            pattern_db_postgres::protocol::count_sent(c, id.0, turn, instant(now)?).await?
        }
    }
    if let Some(name) = sender_name {
        let entry = trigger_for(session, &name, &stored);
        super::queue::enqueue_session_message(conn, ctx, recipient, &entry, stored.id).await?;
    }
    if session
        .message_limit
        .is_some_and(|l| session.messages_sent >= l)
    {
        close_session(conn, ctx, session).await?;
    } else {
        notify(conn, ctx, &[Wakeup::Agent(recipient)]).await?;
    }
    Ok(stored)
}

/// The trigger that delivers `message` (of `session`, from agent `sender`) to its recipient: an
/// `agent_to_agent` user message naming the sender, the session and what the recipient's answer
/// does.
fn trigger_for(session: &Session, sender: &str, message: &ProtocolMessage) -> NewQueued {
    let what = match session.session_type {
        SessionType::Sync => "sync session; your final answer is your reply",
        SessionType::Async => "async session; reply with session_send if you want to",
    };
    let limit = match session.message_limit {
        Some(limit) => format!(", message {} of {limit}", session.messages_sent),
        None => String::new(),
    };
    let text = format!(
        "[message from agent {sender} in {what}; session {}{limit}]\n{}",
        session.id,
        crate::protocol::content_text(&message.content)
    );
    let mut source = format!("session:{}", session.id);
    source.truncate(200);
    NewQueued {
        source,
        ..NewQueued::now(
            BatchType::AgentToAgent,
            Role::User,
            vec![ContentBlock::text(text)],
        )
    }
}

/// Runs in the transaction that completes `batch` of `agent`: the session message its queue
/// entry delivered is marked read now, never before, and in a sync session the agents answer
/// whose turn `agent` holds, its final answer (`reply`) goes back into the session as its
/// reply (an empty answer ends the session: nothing would ever move it on).
pub(crate) async fn complete_delivery(
    conn: &mut Conn<'_>,
    ctx: &Ctx,
    agent: AgentId,
    batch: crate::model::BatchId,
) -> Result<()> {
    let now = now_ms();
    let session = match conn {
        Conn::Sqlite(c) => {
            let agent = agent.to_string();
            let Some(row) = pattern_db_sqlite::protocol::delivered(c, batch.get(), &agent).await?
            else {
                return Ok(());
            };
            pattern_db_sqlite::protocol::mark_read(c, &row.message_id, &agent, now).await?;
            row.session_id.map(StoredId::uuid).transpose()?
        }
        Conn::Postgres(c) => {
            let Some(row) =
                pattern_db_postgres::protocol::delivered(c, batch.get(), agent.0).await?
            else {
                return Ok(());
            };
            pattern_db_postgres::protocol::mark_read(c, row.message_id, agent.0, instant(now)?)
                .await?;
            row.session_id
        }
    };
    let Some(session) = session else {
        return Ok(());
    };
    let mut session = lock_session(conn, ctx, SessionId(session)).await?;
    if session.session_type != SessionType::Sync
        || session.delivery != Delivery::Agents
        || !session.is_live()
        || session.turn != Some(agent)
    {
        return Ok(());
    }
    let reply = final_answer(conn, batch).await?;
    if reply.trim().is_empty() {
        return close_session(conn, ctx, &mut session).await;
    }
    let reply = NewProtocolMessage::new("text", serde_json::json!({ "text": reply }));
    store_message(conn, ctx, &mut session, agent, &reply)
        .await
        .map(|_| ())
}

/// The text of the last assistant message of `batch` (its final answer).
async fn final_answer(conn: &mut Conn<'_>, batch: crate::model::BatchId) -> Result<String> {
    let content = match conn {
        Conn::Sqlite(c) => pattern_db_sqlite::protocol::final_answer(c, batch.get()).await?,
        Conn::Postgres(c) => pattern_db_postgres::protocol::final_answer(c, batch.get()).await?,
    };
    let Some(content) = content else {
        return Ok(String::new());
    };
    Ok(super::decode_content(&content)?
        .iter()
        .filter_map(|block| match block {
            ContentBlock::Text { text } => Some(text.as_str()),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("\n"))
}

/// Inserts a message row directly, bypassing the API's checks (testkit: proves the schema's
/// CHECK on recipient and meeting holds by itself). Returns the driver's answer.
#[cfg(feature = "testkit")]
pub(crate) async fn insert_raw_message(
    conn: &mut Conn<'_>,
    sender: AgentId,
    recipient: Option<AgentId>,
    meeting: Option<&str>,
) -> std::result::Result<(), sqlx::Error> {
    crate::sql::query(
        "INSERT INTO protocol_messages (id, sender_id, recipient_id, session_id, meeting_id, \
         message_type, content, metadata, read_at, seq, created_at) \
         VALUES ($1, $2, $3, NULL, $4, 'raw', '{}', NULL, NULL, 1, $5)",
    )
    .bind(ProtocolMessageId::new().to_string())
    .bind(sender.to_string())
    .bind(recipient.map(|r| r.to_string()))
    .bind(meeting)
    .bind(0_i64)
    .execute(&mut *conn)
    .await
    .map(|_| ())
}
