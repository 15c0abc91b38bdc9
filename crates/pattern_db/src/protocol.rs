//! What of the agent-to-agent protocol other domains of this crate write in their own
//! transactions (decision 0023, step 4): organizations (migration `0003_protocol`; agent
//! creation, auth and approvals use them), the protocol ids, the session and message types with
//! the conversion of their checked rows ([`StoredProtocolRow`], for either engine's
//! `protocol` module of checked statements; `pattern_protocol::store` uses it too), and the
//! session message store: [`store_message`] (checks participant,
//! live session, turn and limit, stores the message, passes a sync session's turn, ends the
//! session at its limit, queues the recipient's trigger when the agents answer), [`lock_session`]
//! and [`close_session`]. Batch completion's delivery receipt (`ops::protocol`) marks the session
//! message its batch consumed read and sends a sync session's reply through them, in the batch's
//! transaction; the PostgreSQL wake-up channel ([`notify`], [`Wakeup`], the listener) is here
//! because both sides send it.
//!
//! The protocol's rules and the rest of its SQL (opening, sending, ending, marking read, the
//! inbox reads, meetings, the views, retention, the lists) are `pattern_protocol::store`'s,
//! written through [`crate::storage`]. Since `0012_one_agent_identity` the participants are
//! `agents` rows, and a session or meeting never joins agents of two organizations. Messages are
//! ordered by `seq`, a snowflake taken when the message is stored. This module must never write
//! outside the writer, and its public helpers run only inside a writer's transaction.

use crate::StorageError;
use std::fmt;

use crate::sql::Conn;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::db::Database;
use crate::error::{Error, Result};
use crate::id::SnowflakeId;
use crate::model::{Agent, AgentId};
use crate::ops::protocol::CreateOrganization;
use crate::ops::{AGENT_COLUMNS, StoredId, StoredTime, agent_from_row};

macro_rules! protocol_id {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(pub Uuid);

        impl $name {
            /// A fresh id (UUID v7).
            pub fn new() -> Self {
                Self(Uuid::now_v7())
            }
        }

        impl Default for $name {
            fn default() -> Self {
                Self::new()
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                self.0.fmt(f)
            }
        }
    };
}

protocol_id!(
    /// Id of a protocol organization.
    OrganizationId
);
protocol_id!(
    /// Id of a one-to-one session.
    SessionId
);
protocol_id!(
    /// Id of a protocol message.
    ProtocolMessageId
);
protocol_id!(
    /// Id of a meeting.
    MeetingId
);

mod wakeups;

pub use wakeups::{WAKEUP_CHANNEL, Wakeup, WakeupListener};

pub use crate::ops::protocol::{
    close_session, lock_session, notify, require_agent, require_same_organization, store_message,
};

/// Most characters an external id, a name or a message type may hold.
pub const MAX_PROTOCOL_NAME_CHARS: usize = 255;

/// An organization: the owner of protocol agents.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Organization {
    /// Its id.
    pub id: OrganizationId,
    /// The id the outside world knows it by; unique.
    pub external_id: String,
    /// Its display name.
    pub name: String,
    /// When it was created.
    pub created_at: DateTime<Utc>,
}

/// How a session's two agents take turns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SessionType {
    /// Strict alternation: only the agent holding the turn may send.
    Sync,
    /// Either agent sends whenever it likes; messages wait in the recipient's inbox.
    Async,
}

impl SessionType {
    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            SessionType::Sync => "sync",
            SessionType::Async => "async",
        }
    }

    fn parse(text: &str) -> Result<Self> {
        match text {
            "sync" => Ok(SessionType::Sync),
            "async" => Ok(SessionType::Async),
            other => {
                Err(StorageError::Corrupt(format!("unknown stored session type `{other}`")).into())
            }
        }
    }
}

/// Who reads what a session's participants receive (migration `0015_agents_converse`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Delivery {
    /// An outside client reads the recipient's inbox and marks messages read.
    #[default]
    Inbox,
    /// Each message becomes the recipient's trigger (an `agent_to_agent` batch through its
    /// durable queue) and is marked read when that batch completes; in a sync session the
    /// recipient's final answer goes back into the session as its reply.
    Agents,
}

impl Delivery {
    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            Delivery::Inbox => "inbox",
            Delivery::Agents => "agents",
        }
    }

    fn parse(text: &str) -> Result<Self> {
        match text {
            "inbox" => Ok(Delivery::Inbox),
            "agents" => Ok(Delivery::Agents),
            other => Err(StorageError::Corrupt(format!(
                "unknown stored session delivery `{other}`"
            ))
            .into()),
        }
    }
}

/// How a session is opened: who reads its messages, and after how many it ends.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionOptions {
    /// Inbox (outside clients) or agents (each message is the recipient's trigger).
    #[serde(default)]
    pub delivery: Delivery,
    /// The session ends once this many messages were sent in it (1 to
    /// [`MAX_SESSION_MESSAGES`]); `None`: no limit.
    #[serde(default)]
    pub message_limit: Option<u64>,
}

impl SessionOptions {
    /// A session the agents answer themselves, ending after `limit` messages (if given).
    pub fn agents(limit: Option<u64>) -> Self {
        Self {
            delivery: Delivery::Agents,
            message_limit: limit,
        }
    }
}

/// The most messages a session may be limited to.
pub const MAX_SESSION_MESSAGES: u64 = 10_000;

impl fmt::Display for SessionType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where a session stands. `Waiting` is in the schema for later use; sessions are `Active` until
/// ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SessionStatus {
    /// Live.
    Active,
    /// Live, waiting (reserved).
    Waiting,
    /// Over: nothing more can be sent.
    Ended,
}

impl SessionStatus {
    fn parse(text: &str) -> Result<Self> {
        match text {
            "active" => Ok(SessionStatus::Active),
            "waiting" => Ok(SessionStatus::Waiting),
            "ended" => Ok(SessionStatus::Ended),
            other => Err(
                StorageError::Corrupt(format!("unknown stored session status `{other}`")).into(),
            ),
        }
    }
}

/// A one-to-one session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Session {
    /// Its id.
    pub id: SessionId,
    /// The participant with the smaller id.
    pub agent_a: AgentId,
    /// The participant with the larger id.
    pub agent_b: AgentId,
    /// Sync (turns) or async (inbox).
    pub session_type: SessionType,
    /// Live or ended.
    pub status: SessionStatus,
    /// Sync sessions: whose turn it is (`None` once ended). Async sessions: always `None`.
    pub turn: Option<AgentId>,
    /// When it was opened.
    pub created_at: DateTime<Utc>,
    /// When it last changed.
    pub updated_at: DateTime<Utc>,
    /// When it ended.
    pub ended_at: Option<DateTime<Utc>>,
    /// Who reads what its participants receive.
    #[serde(default)]
    pub delivery: Delivery,
    /// It ends once this many messages were sent (`None`: no limit).
    #[serde(default)]
    pub message_limit: Option<u64>,
    /// How many messages were sent in it.
    #[serde(default)]
    pub messages_sent: u64,
}

impl Session {
    /// Whether `agent` is one of the two participants.
    pub fn has_participant(&self, agent: AgentId) -> bool {
        self.agent_a == agent || self.agent_b == agent
    }

    /// The participant that is not `agent` (`None` when `agent` is not a participant).
    pub fn other(&self, agent: AgentId) -> Option<AgentId> {
        if agent == self.agent_a {
            Some(self.agent_b)
        } else if agent == self.agent_b {
            Some(self.agent_a)
        } else {
            None
        }
    }

    /// Whether the session is still live.
    pub fn is_live(&self) -> bool {
        self.status != SessionStatus::Ended
    }
}

/// A message to send.
#[derive(Debug, Clone, PartialEq)]
pub struct NewProtocolMessage {
    /// What kind of message this is (the application's vocabulary): 1 to 255 characters.
    pub message_type: String,
    /// The content, any JSON value.
    pub content: serde_json::Value,
    /// Optional JSON metadata.
    pub metadata: Option<serde_json::Value>,
}

impl NewProtocolMessage {
    /// A message with JSON content and no metadata.
    pub fn new(message_type: impl Into<String>, content: serde_json::Value) -> Self {
        Self {
            message_type: message_type.into(),
            content,
            metadata: None,
        }
    }

    /// A message whose content is given as JSON text; text that is not JSON is
    /// [`ProtocolError::InvalidMessage`].
    pub fn from_json_str(message_type: impl Into<String>, content: &str) -> Result<Self> {
        let content = serde_json::from_str(content).map_err(|e| {
            ProtocolError::InvalidMessage(format!("content is not valid JSON: {e}"))
        })?;
        Ok(Self::new(message_type, content))
    }
}

/// A stored protocol message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProtocolMessage {
    /// Its id.
    pub id: ProtocolMessageId,
    /// Who sent it.
    pub sender: AgentId,
    /// Who receives it (always set for session messages).
    pub recipient: Option<AgentId>,
    /// The session it belongs to, if any.
    pub session: Option<SessionId>,
    /// The meeting it was said in (then `recipient` is `None`).
    pub meeting: Option<MeetingId>,
    /// The application's message type.
    pub message_type: String,
    /// The content.
    pub content: serde_json::Value,
    /// The metadata, if any.
    pub metadata: Option<serde_json::Value>,
    /// When the recipient marked it read.
    pub read_at: Option<DateTime<Utc>>,
    /// Arrival order (a snowflake).
    pub seq: SnowflakeId,
    /// When it was stored.
    pub created_at: DateTime<Utc>,
}

/// The text of a protocol message's JSON content: its `text` field (`{"text": ...}`, what agents
/// send), a JSON string as it is, or any other JSON as JSON text.
pub fn content_text(content: &serde_json::Value) -> String {
    match content.get("text").and_then(|t| t.as_str()) {
        Some(text) => text.to_owned(),
        None => match content.as_str() {
            Some(text) => text.to_owned(),
            None => content.to_string(),
        },
    }
}

/// Checks an external id, a name or a message type: 1 to [`MAX_PROTOCOL_NAME_CHARS`]
/// characters, no control characters.
pub fn validate_name(what: &str, text: &str) -> Result<()> {
    let len = text.chars().count();
    if len == 0 || len > MAX_PROTOCOL_NAME_CHARS {
        return Err(ProtocolError::InvalidMessage(format!(
            "{what} must be 1 to {MAX_PROTOCOL_NAME_CHARS} characters, got {len}"
        ))
        .into());
    }
    if text.chars().any(char::is_control) {
        return Err(ProtocolError::InvalidMessage(format!(
            "{what} must not contain control characters"
        ))
        .into());
    }
    Ok(())
}

/// Stored JSON text as a value; text that does not decode is a corrupt row.
pub fn json(text: &str) -> Result<serde_json::Value> {
    serde_json::from_str(text).map_err(|e| {
        Error::Storage(StorageError::Corrupt(format!(
            "stored protocol JSON does not decode: {e}"
        )))
    })
}

/// A protocol row of either engine's crate of checked statements (`pattern_db_sqlite::protocol`
/// or `pattern_db_postgres::protocol`: the same fields, in each engine's id and time types) as
/// this crate's type `T`: one conversion, written once for both engines, that
/// `pattern_protocol::store` uses too.
pub trait StoredProtocolRow<T> {
    /// The value; an id that is not a UUID, an unknown kind or JSON that does not decode is a
    /// corrupt row.
    fn into_protocol(self) -> Result<T>;
}

/// [`StoredProtocolRow`] for the organization, session and message rows of one engine's crate.
macro_rules! protocol_from_stored {
    ($engine:ident) => {
        impl StoredProtocolRow<Organization> for $engine::protocol::OrganizationRow {
            fn into_protocol(self) -> Result<Organization> {
                Ok(Organization {
                    id: OrganizationId(self.id.uuid()?),
                    external_id: self.external_id,
                    name: self.name,
                    created_at: self.created_at.time(),
                })
            }
        }

        impl StoredProtocolRow<Session> for $engine::protocol::SessionRow {
            fn into_protocol(self) -> Result<Session> {
                Ok(Session {
                    id: SessionId(self.id.uuid()?),
                    agent_a: AgentId(self.agent_a_id.uuid()?),
                    agent_b: AgentId(self.agent_b_id.uuid()?),
                    session_type: SessionType::parse(&self.session_type)?,
                    status: SessionStatus::parse(&self.status)?,
                    turn: self
                        .locked_agent_id
                        .map(StoredId::uuid)
                        .transpose()?
                        .map(AgentId),
                    created_at: self.created_at.time(),
                    updated_at: self.updated_at.time(),
                    ended_at: self.ended_at.map(StoredTime::time),
                    delivery: Delivery::parse(&self.delivery)?,
                    message_limit: self.message_limit.map(|n| u64::try_from(n).unwrap_or(0)),
                    messages_sent: u64::try_from(self.messages_sent).unwrap_or(0),
                })
            }
        }

        impl StoredProtocolRow<ProtocolMessage> for $engine::protocol::ProtocolMessageRow {
            fn into_protocol(self) -> Result<ProtocolMessage> {
                Ok(ProtocolMessage {
                    id: ProtocolMessageId(self.id.uuid()?),
                    sender: AgentId(self.sender_id.uuid()?),
                    recipient: self
                        .recipient_id
                        .map(StoredId::uuid)
                        .transpose()?
                        .map(AgentId),
                    session: self
                        .session_id
                        .map(StoredId::uuid)
                        .transpose()?
                        .map(SessionId),
                    meeting: self
                        .meeting_id
                        .map(StoredId::uuid)
                        .transpose()?
                        .map(MeetingId),
                    message_type: self.message_type,
                    content: json(&self.content)?,
                    metadata: self.metadata.map(|m| json(&m)).transpose()?,
                    read_at: self.read_at.map(StoredTime::time),
                    seq: SnowflakeId(self.seq),
                    created_at: self.created_at.time(),
                })
            }
        }
    };
}

protocol_from_stored!(pattern_db_sqlite);
protocol_from_stored!(pattern_db_postgres);

impl Database {
    // -- organizations -------------------------------------------------------------------------

    /// Creates an organization. A taken external id is [`ProtocolError::ExternalIdTaken`]; an
    /// external id or name that breaks the naming rule is
    /// [`AgentError::InvalidName`](crate::AgentError::InvalidName).
    pub async fn create_organization(&self, external_id: &str, name: &str) -> Result<Organization> {
        crate::check_name("external_id", external_id)?;
        crate::check_name("name", name)?;
        self.write(CreateOrganization {
            external_id: external_id.to_owned(),
            name: name.to_owned(),
        })
        .await
    }

    /// The organization with this external id ([`ProtocolError::ExternalIdNotFound`] otherwise).
    pub async fn organization_by_external_id(&self, external_id: &str) -> Result<Organization> {
        let mut pooled = self.reader().acquire().await?;
        let row = match &mut pooled.conn() {
            Conn::Sqlite(c) => {
                pattern_db_sqlite::protocol::organization_by_external_id(c, external_id)
                    .await?
                    .map(StoredProtocolRow::into_protocol)
            }
            Conn::Postgres(c) => {
                pattern_db_postgres::protocol::organization_by_external_id(c, external_id)
                    .await?
                    .map(StoredProtocolRow::into_protocol)
            }
        };
        match row {
            Some(org) => org,
            None => Err(ProtocolError::ExternalIdNotFound {
                kind: "organization",
                external_id: external_id.to_owned(),
            }
            .into()),
        }
    }

    /// Every organization, by external id.
    pub async fn organizations(&self) -> Result<Vec<Organization>> {
        let mut pooled = self.reader().acquire().await?;
        match &mut pooled.conn() {
            Conn::Sqlite(c) => pattern_db_sqlite::protocol::organizations(c)
                .await?
                .into_iter()
                .map(StoredProtocolRow::into_protocol)
                .collect(),
            Conn::Postgres(c) => pattern_db_postgres::protocol::organizations(c)
                .await?
                .into_iter()
                .map(StoredProtocolRow::into_protocol)
                .collect(),
        }
    }

    // -- agents as the protocol knows them -------------------------------------------------------

    /// The agent of `organization` with this external id ([`ProtocolError::ExternalIdNotFound`]
    /// otherwise, also when another organization has one).
    pub async fn agent_by_external_id(
        &self,
        organization: OrganizationId,
        external_id: &str,
    ) -> Result<Agent> {
        let row = crate::sql::query(sqlx::AssertSqlSafe(format!(
            "SELECT {AGENT_COLUMNS} FROM agents WHERE organization_id = $1 AND external_id = $2"
        )))
        .bind(organization.to_string())
        .bind(external_id)
        .fetch_optional(self.reader())
        .await?;
        match row {
            Some(row) => agent_from_row(&row),
            None => Err(ProtocolError::ExternalIdNotFound {
                kind: "agent",
                external_id: external_id.to_owned(),
            }
            .into()),
        }
    }
}

/// Refusals of what of the agent-to-agent protocol stays here (module [`crate::protocol`]):
/// organizations and agents by external id, unknown protocol rows, the session message store
/// (participant, turn, ended), invalid protocol messages, invalid retention policies. The
/// protocol's other refusals (a session with oneself, the meetings') are `pattern_protocol`'s own
/// enum, carried through the writer as [`crate::storage::ExtensionError`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProtocolError {
    /// An organization or protocol agent with this external id exists already.
    #[error("a {kind} with external id `{external_id}` exists already")]
    ExternalIdTaken {
        /// `organization` or `protocol agent`.
        kind: &'static str,
        /// The external id.
        external_id: String,
    },
    /// No organization or protocol agent with this external id.
    #[error("unknown {kind} with external id `{external_id}`")]
    ExternalIdNotFound {
        /// `organization` or `protocol agent`.
        kind: &'static str,
        /// The external id.
        external_id: String,
    },
    /// No protocol row (organization, protocol agent, session) with this id.
    #[error("unknown {kind} {id}")]
    NotFound {
        /// `organization`, `protocol agent` or `session`.
        kind: &'static str,
        /// The id asked for.
        id: uuid::Uuid,
    },
    /// The agent is not one of the session's two participants.
    #[error("protocol agent {agent} is not a participant of session {session}")]
    NotParticipant {
        /// The session.
        session: crate::SessionId,
        /// The agent.
        agent: crate::AgentId,
    },
    /// A sync session's turn belongs to the other agent: nothing was stored.
    #[error("protocol agent {agent} cannot send in session {session}: it is not its turn")]
    OutOfTurn {
        /// The session.
        session: crate::SessionId,
        /// The agent that tried to send.
        agent: crate::AgentId,
        /// Whose turn it is.
        turn: Option<crate::AgentId>,
    },
    /// The session has ended: nothing more can be sent or ended.
    #[error("session {0} has ended")]
    SessionEnded(crate::SessionId),
    /// A protocol message, external id or name is not acceptable (e.g. content that is not JSON).
    #[error("invalid protocol message: {0}")]
    InvalidMessage(String),
    /// A retention policy that would delete what it must keep (a zero age, keeping zero
    /// versions).
    #[error("invalid retention policy: {0}")]
    InvalidRetention(String),
}

impl ProtocolError {
    /// What kind of failure this is (see [`crate::ErrorClass`]).
    pub fn class(&self) -> crate::ErrorClass {
        use crate::ErrorClass as C;
        match self {
            ProtocolError::ExternalIdTaken { .. }
            | ProtocolError::NotParticipant { .. }
            | ProtocolError::OutOfTurn { .. }
            | ProtocolError::SessionEnded(_) => C::Conflict,
            ProtocolError::ExternalIdNotFound { .. } | ProtocolError::NotFound { .. } => {
                C::NotFound
            }
            ProtocolError::InvalidMessage(_) | ProtocolError::InvalidRetention(_) => C::Invalid,
        }
    }
}
