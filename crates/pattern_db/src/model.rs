//! The data model of the message store: agents, messages, content blocks, batches, summaries and
//! activity events.
//!
//! These are plain values with serde support. They carry no database handle and perform no I/O;
//! they must never grow behaviour that needs one (that belongs in [`crate::store`]).

use crate::{BatchError, StorageError};
use std::collections::HashSet;
use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::error::{Error, Result};
use crate::id::SnowflakeId;
use crate::protocol::OrganizationId;

mod content_de;

/// Identity of an agent. A UUID, rendered in its hyphenated form.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct AgentId(pub Uuid);

impl AgentId {
    /// A fresh, time-ordered id (UUID v7).
    pub fn new() -> Self {
        Self(Uuid::now_v7())
    }
}

impl Default for AgentId {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Display for AgentId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.hyphenated().fmt(f)
    }
}

impl FromStr for AgentId {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        Uuid::parse_str(s).map(Self).map_err(|e| {
            Error::Storage(StorageError::InvalidId {
                what: "agent id",
                value: s.to_owned(),
                reason: e.to_string(),
            })
        })
    }
}

/// Identity of one stored message (UUID v7). Ordering in history is by [`Message::position`], not
/// by this id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct MessageId(pub Uuid);

impl MessageId {
    /// A fresh, time-ordered id (UUID v7).
    pub fn new() -> Self {
        Self(Uuid::now_v7())
    }
}

impl Default for MessageId {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Display for MessageId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.hyphenated().fmt(f)
    }
}

impl FromStr for MessageId {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        Uuid::parse_str(s).map(Self).map_err(|e| {
            Error::Storage(StorageError::InvalidId {
                what: "message id",
                value: s.to_owned(),
                reason: e.to_string(),
            })
        })
    }
}

/// A batch is identified by the position of its first message.
pub type BatchId = SnowflakeId;

/// A stored agent: the one identity of an agent, for the CLI, the HTTP API and the protocol's
/// sessions and meetings alike.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Agent {
    /// Stable identity.
    pub id: AgentId,
    /// The organization it belongs to (exactly one; the CLI's agents default to the one with
    /// external id [`LOCAL_ORGANIZATION`]).
    pub organization: OrganizationId,
    /// Human-readable name, unique within its organization ([`crate::check_name`]).
    pub name: String,
    /// The id the outside world knows it by, unique within its organization (its name unless
    /// given).
    pub external_id: String,
    /// Free-form JSON metadata (model, persona, ...). Never interpreted by this crate.
    pub metadata: serde_json::Value,
    /// When the agent was created.
    pub created_at: DateTime<Utc>,
}

/// The external id of the organization that agents made without one belong to (the CLI's
/// default; created by migration `0012_one_agent_identity`, and again on demand if deleted).
pub const LOCAL_ORGANIZATION: &str = "local";

/// What the caller gives to create an agent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NewAgent {
    /// Name unique within the organization, by [`crate::check_name`]'s rule.
    pub name: String,
    /// Free-form JSON metadata.
    #[serde(default)]
    pub metadata: serde_json::Value,
    /// Its organization; `None`: the [`LOCAL_ORGANIZATION`].
    #[serde(default)]
    pub organization: Option<OrganizationId>,
    /// Its external id; `None`: its name.
    #[serde(default)]
    pub external_id: Option<String>,
}

impl NewAgent {
    /// An agent of the local organization with this name and no metadata.
    pub fn named(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            metadata: serde_json::Value::Null,
            organization: None,
            external_id: None,
        }
    }

    /// The same agent in `organization`.
    pub fn in_organization(mut self, organization: OrganizationId) -> Self {
        self.organization = Some(organization);
        self
    }
}

/// Who speaks in a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// System instructions or system-originated triggers.
    System,
    /// A human (or an endpoint speaking for one), or another agent addressing this one.
    User,
    /// The agent's model.
    Assistant,
    /// Results of tool calls.
    Tool,
}

impl Role {
    /// The stable text stored in the database.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool",
        }
    }
}

impl FromStr for Role {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "system" => Ok(Role::System),
            "user" => Ok(Role::User),
            "assistant" => Ok(Role::Assistant),
            "tool" => Ok(Role::Tool),
            other => Err(BatchError::InvalidContent(format!("unknown role `{other}`")).into()),
        }
    }
}

/// One block of message content. Stored as JSON tagged by `type`.
///
/// Its `Deserialize` is written by hand (`model/content_de.rs`) with the rules of
/// `#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]` (and the fields'
/// `#[serde(default)]`s), decoding without buffering when `type` comes first.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ContentBlock {
    /// Plain text.
    Text {
        /// The text.
        text: String,
    },
    /// A tool call made by the assistant.
    ToolUse {
        /// Provider-assigned call id; unique within its batch.
        id: String,
        /// Tool name.
        name: String,
        /// Arguments as JSON.
        input: serde_json::Value,
        /// The provider's opaque signature of this call (Gemini's `thoughtSignature`, which
        /// Gemini 3 requires back with the call on later requests). Never interpreted; only the
        /// Gemini format sends it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        signature: Option<String>,
    },
    /// The result of a tool call, answering the `tool_use` with the same id in the same batch.
    ToolResult {
        /// Id of the `tool_use` this answers.
        tool_use_id: String,
        /// Result text.
        content: String,
        /// Whether the tool failed.
        #[serde(default)]
        is_error: bool,
    },
    /// Model reasoning, kept for providers that require it to be sent back.
    Thinking {
        /// The reasoning text.
        text: String,
        /// Provider signature, when the provider gives one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        signature: Option<String>,
    },
    /// A reference to an image stored elsewhere (never the bytes themselves).
    Image {
        /// MIME type, e.g. `image/png`.
        media_type: String,
        /// Where the image lives (URL, file path or content hash).
        reference: String,
    },
}

impl ContentBlock {
    /// A text block.
    pub fn text(text: impl Into<String>) -> Self {
        ContentBlock::Text { text: text.into() }
    }

    /// A tool call block.
    pub fn tool_use(
        id: impl Into<String>,
        name: impl Into<String>,
        input: serde_json::Value,
    ) -> Self {
        ContentBlock::ToolUse {
            id: id.into(),
            name: name.into(),
            input,
            signature: None,
        }
    }

    /// A tool result block.
    pub fn tool_result(
        tool_use_id: impl Into<String>,
        content: impl Into<String>,
        is_error: bool,
    ) -> Self {
        ContentBlock::ToolResult {
            tool_use_id: tool_use_id.into(),
            content: content.into(),
            is_error,
        }
    }
}

/// A message as given to the store, before it has a position.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NewMessage {
    /// Who speaks.
    pub role: Role,
    /// The content blocks, in order.
    pub content: Vec<ContentBlock>,
}

impl NewMessage {
    /// A message with the given role and blocks.
    pub fn new(role: Role, content: Vec<ContentBlock>) -> Self {
        Self { role, content }
    }

    /// A user message holding one text block.
    pub fn user(text: impl Into<String>) -> Self {
        Self::new(Role::User, vec![ContentBlock::text(text)])
    }

    /// A system message holding one text block.
    pub fn system(text: impl Into<String>) -> Self {
        Self::new(Role::System, vec![ContentBlock::text(text)])
    }

    /// An assistant message holding one text block.
    pub fn assistant(text: impl Into<String>) -> Self {
        Self::new(Role::Assistant, vec![ContentBlock::text(text)])
    }

    /// Parses content given as raw JSON (an array of blocks), as it arrives from the wire.
    ///
    /// Malformed JSON or an unknown block shape is [`BatchError::InvalidContent`].
    pub fn from_json(role: Role, content_json: &str) -> Result<Self> {
        let content: Vec<ContentBlock> = serde_json::from_str(content_json).map_err(|e| {
            BatchError::InvalidContent(format!("content is not a valid block array: {e}"))
        })?;
        Ok(Self { role, content })
    }

    /// Ids of the tool calls this message makes, in order.
    pub fn tool_use_ids(&self) -> impl Iterator<Item = &str> {
        tool_use_ids(&self.content)
    }

    /// Ids of the tool calls this message answers, in order.
    pub fn tool_result_ids(&self) -> impl Iterator<Item = &str> {
        tool_result_ids(&self.content)
    }

    /// Checks the shape rules that hold for any single message: content is not empty, tool calls
    /// come only from the assistant, tool results only in user or tool messages, ids are not empty.
    pub fn validate_shape(&self) -> Result<()> {
        if self.content.is_empty() {
            return Err(BatchError::InvalidContent(
                "a message needs at least one content block".into(),
            )
            .into());
        }
        for block in &self.content {
            match block {
                ContentBlock::ToolUse { id, name, .. } => {
                    if self.role != Role::Assistant {
                        return Err(BatchError::InvalidContent(format!(
                            "tool_use `{id}` in a {} message: only assistant messages call tools",
                            self.role.as_str()
                        ))
                        .into());
                    }
                    if id.is_empty() || name.is_empty() {
                        return Err(BatchError::InvalidContent(
                            "tool_use needs a non-empty id and name".into(),
                        )
                        .into());
                    }
                }
                ContentBlock::ToolResult { tool_use_id, .. } => {
                    if !matches!(self.role, Role::User | Role::Tool) {
                        return Err(BatchError::InvalidContent(format!(
                            "tool_result `{tool_use_id}` in a {} message: results belong to user or tool messages",
                            self.role.as_str()
                        )).into());
                    }
                    if tool_use_id.is_empty() {
                        return Err(BatchError::InvalidContent(
                            "tool_result needs a non-empty tool_use_id".into(),
                        )
                        .into());
                    }
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// A cheap token estimate (about four bytes per token of the stored JSON). context_v2 counts
    /// with real tokenizers; this figure is for budgeting queries without decoding content.
    pub fn estimate_tokens(content_json_len: usize) -> i64 {
        i64::try_from(content_json_len.div_ceil(4)).unwrap_or(i64::MAX)
    }
}

/// What started a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BatchType {
    /// A user spoke.
    UserRequest,
    /// Another agent spoke.
    AgentToAgent,
    /// The system (scheduler, wakeup, heartbeat timer) triggered the agent.
    SystemTrigger,
    /// A heartbeat continuation of an earlier batch. Messages appended after
    /// [`crate::MessageStore::continue_batch`] carry this type.
    Continuation,
}

impl BatchType {
    /// The stable text stored in the database.
    pub fn as_str(self) -> &'static str {
        match self {
            BatchType::UserRequest => "user_request",
            BatchType::AgentToAgent => "agent_to_agent",
            BatchType::SystemTrigger => "system_trigger",
            BatchType::Continuation => "continuation",
        }
    }
}

impl FromStr for BatchType {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "user_request" => Ok(BatchType::UserRequest),
            "agent_to_agent" => Ok(BatchType::AgentToAgent),
            "system_trigger" => Ok(BatchType::SystemTrigger),
            "continuation" => Ok(BatchType::Continuation),
            other => Err(StorageError::Corrupt(format!("unknown batch type `{other}`")).into()),
        }
    }
}

/// Life cycle of a batch: `open` -> `complete`, or `open` -> `abandoned` (by recovery).
/// A continuation moves `complete` back to `open`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BatchState {
    /// A run is (or was, until its lease expired) producing messages for it.
    Open,
    /// Finished: the final assistant message has no pending tool call.
    Complete,
    /// Its run died; never sent to a provider again, kept for inspection.
    Abandoned,
}

impl BatchState {
    /// The stable text stored in the database.
    pub fn as_str(self) -> &'static str {
        match self {
            BatchState::Open => "open",
            BatchState::Complete => "complete",
            BatchState::Abandoned => "abandoned",
        }
    }
}

impl fmt::Display for BatchState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for BatchState {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "open" => Ok(BatchState::Open),
            "complete" => Ok(BatchState::Complete),
            "abandoned" => Ok(BatchState::Abandoned),
            other => Err(StorageError::Corrupt(format!("unknown batch state `{other}`")).into()),
        }
    }
}

/// A stored message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    /// Database identity.
    pub id: MessageId,
    /// Owning agent.
    pub agent_id: AgentId,
    /// Total order of the agent's history; strictly increasing in insertion order.
    pub position: SnowflakeId,
    /// The batch: the position of the batch's first message.
    pub batch_id: BatchId,
    /// Order within the batch, dense from 0.
    pub sequence_num: i64,
    /// The type of processing cycle this message was produced in.
    pub batch_type: BatchType,
    /// Who speaks.
    pub role: Role,
    /// Content blocks.
    pub content: Vec<ContentBlock>,
    /// Cheap token estimate, see [`NewMessage::estimate_tokens`].
    pub token_estimate: i64,
    /// Moved out of the live history (summarised or truncated).
    pub archived: bool,
    /// Soft-deleted.
    pub deleted: bool,
    /// When it was stored.
    pub created_at: DateTime<Utc>,
}

impl Message {
    /// Ids of the tool calls this message makes, in order.
    pub fn tool_use_ids(&self) -> impl Iterator<Item = &str> {
        tool_use_ids(&self.content)
    }

    /// Ids of the tool calls this message answers, in order.
    pub fn tool_result_ids(&self) -> impl Iterator<Item = &str> {
        tool_result_ids(&self.content)
    }

    /// The concatenated text blocks, for display and search.
    pub fn text(&self) -> String {
        let mut out = String::new();
        for block in &self.content {
            if let ContentBlock::Text { text } = block {
                if !out.is_empty() {
                    out.push('\n');
                }
                out.push_str(text);
            }
        }
        out
    }
}

/// A batch's row: its state and bookkeeping, without messages.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BatchInfo {
    /// Position of the first message.
    pub id: BatchId,
    /// Owning agent.
    pub agent_id: AgentId,
    /// What started it.
    pub batch_type: BatchType,
    /// Life-cycle state.
    pub state: BatchState,
    /// Enclosing batch for nested or group batches.
    pub parent_batch: Option<BatchId>,
    /// Which run holds it (set while open).
    pub run_owner: Option<String>,
    /// When the run's lease ends; an open batch past it may be abandoned by recovery.
    pub lease_expires_at: Option<DateTime<Utc>>,
    /// Number of messages stored in it.
    pub message_count: i64,
    /// Whether it was archived (compressed out of the live history).
    pub archived: bool,
    /// When it began.
    pub started_at: DateTime<Utc>,
    /// When it completed (or was abandoned).
    pub completed_at: Option<DateTime<Utc>>,
    /// How many times a heartbeat continued it.
    pub continuations: i64,
    /// When an abandoned batch's trigger was stored again to retry it (at most once).
    #[serde(default)]
    pub retried_at: Option<DateTime<Utc>>,
    /// The claim token of the run that began it (`None`: begun without a claim). Only that run
    /// writes it, and at most one open batch of an agent has one.
    #[serde(default)]
    pub claim_token: Option<i64>,
}

/// A batch with its messages in sequence order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredBatch {
    /// The batch row.
    pub info: BatchInfo,
    /// Its messages ordered by `sequence_num`.
    pub messages: Vec<Message>,
}

impl StoredBatch {
    /// Tool call ids made in this batch that have no result in it yet, in call order.
    pub fn pending_tool_calls(&self) -> Vec<String> {
        pending_calls(self.messages.iter().map(|m| &m.content[..]))
    }
}

/// Ids of the tool calls among `blocks`, in order.
pub fn tool_use_ids(blocks: &[ContentBlock]) -> impl Iterator<Item = &str> {
    blocks.iter().filter_map(|b| match b {
        ContentBlock::ToolUse { id, .. } => Some(id.as_str()),
        _ => None,
    })
}

/// Ids of the tool calls that `blocks` answer, in order.
pub fn tool_result_ids(blocks: &[ContentBlock]) -> impl Iterator<Item = &str> {
    blocks.iter().filter_map(|b| match b {
        ContentBlock::ToolResult { tool_use_id, .. } => Some(tool_use_id.as_str()),
        _ => None,
    })
}

/// Tool call ids without a result, in call order, over a sequence of messages' blocks.
pub fn pending_calls<'a>(messages: impl Iterator<Item = &'a [ContentBlock]>) -> Vec<String> {
    let mut calls: Vec<String> = Vec::new();
    let mut answered: HashSet<String> = HashSet::new();
    for blocks in messages {
        for block in blocks {
            match block {
                ContentBlock::ToolUse { id, .. } => calls.push(id.clone()),
                ContentBlock::ToolResult { tool_use_id, .. } => {
                    answered.insert(tool_use_id.clone());
                }
                _ => {}
            }
        }
    }
    calls.retain(|id| !answered.contains(id));
    calls
}

/// Options for opening a batch.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct BeginBatch {
    /// What started it.
    pub batch_type: Option<BatchType>,
    /// Enclosing batch, for nested or group batches.
    pub parent_batch: Option<BatchId>,
    /// The abandoned batch this one retries: it is marked retried in the same transaction, and a
    /// batch already retried (or not abandoned) refuses the begin with nothing stored.
    pub retry_of: Option<BatchId>,
}

/// The durable acknowledgement of a trigger: it is committed, and this is where it lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Received {
    /// The new batch.
    pub batch_id: BatchId,
    /// The trigger message.
    pub message_id: MessageId,
}

/// Where the messages of one committed step were stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepReceipt {
    /// The batch.
    pub batch_id: BatchId,
    /// `(message id, position, sequence_num)` for each message, in the order given.
    pub stored: Vec<(MessageId, SnowflakeId, i64)>,
}

/// An open batch that recovery abandoned, with its trigger for retry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Abandoned {
    /// The batch, now `abandoned`.
    pub batch: BatchInfo,
    /// Its first message, to offer for retry.
    pub trigger: Message,
}

/// Which open batches recovery may abandon.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecoveryScope {
    /// Only batches whose run lease has expired (safe while other processes are running).
    ExpiredLeases,
    /// Every open batch (only when the caller knows no run is alive, e.g. the single process that
    /// owns an embedded database, at start-up).
    AllOpen,
}

/// A summary of compressed history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// Identity (a snowflake).
    pub id: SnowflakeId,
    /// Owning agent.
    pub agent_id: AgentId,
    /// The summary text.
    pub content: String,
    /// First batch covered.
    pub from_batch: BatchId,
    /// Last batch covered (inclusive).
    pub through_batch: BatchId,
    /// Number of messages it replaces.
    pub message_count: i64,
    /// 0 for a summary of messages, n+1 for a summary of depth-n summaries.
    pub depth: i32,
    /// When it was written.
    pub created_at: DateTime<Utc>,
}

/// Something that happened to an agent, for the activity log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ActivityEvent {
    /// Identity and time order (a snowflake). Assigned by the store.
    pub id: SnowflakeId,
    /// Owning agent.
    pub agent_id: AgentId,
    /// Short machine-readable kind, e.g. `batch_abandoned`.
    pub kind: String,
    /// Details.
    pub payload: serde_json::Value,
    /// When it happened.
    pub created_at: DateTime<Utc>,
}

/// Refusals of the agents' domain: unknown agents, names, organizations, agent imports.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AgentError {
    /// No agent with this id.
    #[error("unknown agent {0}")]
    NotFound(crate::AgentId),
    /// No agent with this name.
    #[error("unknown agent `{0}`")]
    NameNotFound(String),
    /// An agent with this name exists already.
    #[error("an agent named `{0}` exists already")]
    NameTaken(String),
    /// A name or external id that breaks the naming rule ([`crate::check_name`]).
    #[error("`{field}` {reason}")]
    InvalidName {
        /// The refused field (`name`, `external_id`, ...).
        field: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// The agents are in different organizations, and nothing crosses an organization's wall.
    #[error("agent {other} is not in the organization of agent {agent}")]
    OtherOrganization {
        /// The acting agent.
        agent: crate::AgentId,
        /// The agent of another organization.
        other: crate::AgentId,
    },
    /// An agent import that cannot be written as given (see `Database::import_agent`).
    #[error("import refused: {0}")]
    InvalidImport(String),
}

impl AgentError {
    /// What kind of failure this is (see [`crate::ErrorClass`]).
    pub fn class(&self) -> crate::ErrorClass {
        use crate::ErrorClass as C;
        match self {
            AgentError::NotFound(_)
            | AgentError::NameNotFound(_)
            | AgentError::OtherOrganization { .. } => C::NotFound,
            AgentError::NameTaken(_) => C::Conflict,
            AgentError::InvalidName { .. } => C::Invalid,
            AgentError::InvalidImport(_) => C::Refused,
        }
    }
}
