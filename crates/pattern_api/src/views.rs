//! The JSON shapes of agents, memory, batches, archival, search hits, approvals and schedules,
//! shared by the HTTP API and the CLI's `--json` output (documented in `docs/cli.md` and in the
//! OpenAPI document), built from the layers' types.
//!
//! The shapes are a public contract: a field may be added, never renamed or removed without a
//! documented change. This module must never read or write the database.

use chrono::{DateTime, Utc};
use pattern::db::ArchivalEntry;
use pattern::memory::{BlockVersion, MemoryBlock, SearchHit};
use pattern::{Agent, BatchInfo, ContentBlock, Message, StoredBatch};
use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;

/// `agent` shape.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct AgentView {
    /// Its id.
    pub id: String,
    /// Its name, unique in its organization.
    pub name: String,
    /// The id the outside world knows it by, unique in its organization.
    pub external_id: String,
    /// What the agent is told (from its metadata), if set.
    pub instructions: Option<String>,
    /// Free-form JSON metadata.
    #[schema(value_type = Object)]
    pub metadata: Value,
    /// When it was created.
    pub created_at: DateTime<Utc>,
}

impl From<&Agent> for AgentView {
    fn from(a: &Agent) -> Self {
        Self {
            id: a.id.to_string(),
            name: a.name.clone(),
            external_id: a.external_id.clone(),
            instructions: a
                .metadata
                .get("instructions")
                .and_then(Value::as_str)
                .map(str::to_owned),
            metadata: a.metadata.clone(),
            created_at: a.created_at,
        }
    }
}

/// `block` shape.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct BlockView {
    /// The block's label.
    pub label: String,
    /// What the block is for.
    pub description: String,
    /// The content.
    pub value: String,
    /// Characters in the value.
    pub chars: usize,
    /// Most characters the value may hold.
    pub char_limit: usize,
    /// `core`, `working`, `archival` or `log`.
    pub block_type: String,
    /// The agent's permission on it.
    pub permission: String,
    /// Its version (optimistic concurrency).
    pub version: i64,
    /// When the value last changed.
    pub updated_at: DateTime<Utc>,
}

impl From<&MemoryBlock> for BlockView {
    fn from(b: &MemoryBlock) -> Self {
        Self {
            label: b.label.clone(),
            description: b.description.clone(),
            value: b.value.clone(),
            chars: b.char_count(),
            char_limit: b.char_limit,
            block_type: b.block_type.as_str().to_owned(),
            permission: b.permission.as_str().to_owned(),
            version: b.version,
            updated_at: b.updated_at,
        }
    }
}

/// `block_version` shape.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct VersionView {
    /// Its version (optimistic concurrency).
    pub version: i64,
    /// What kind of change made it.
    pub change: String,
    /// The content.
    pub value: String,
    /// The agent that made the change.
    pub changed_by: String,
    /// When it was created.
    pub created_at: DateTime<Utc>,
}

impl From<&BlockVersion> for VersionView {
    fn from(v: &BlockVersion) -> Self {
        Self {
            version: v.version,
            change: v.change.clone(),
            value: v.value.clone(),
            changed_by: v.changed_by.to_string(),
            created_at: v.created_at,
        }
    }
}

/// `batch` shape (a row of `batches list`).
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct BatchView {
    /// Its id.
    pub id: String,
    /// What started it.
    pub batch_type: String,
    /// `open`, `complete` or `abandoned`.
    pub state: String,
    /// Messages in it.
    pub message_count: i64,
    /// Whether it was archived (summarised out of context).
    pub archived: bool,
    /// The enclosing batch, if any.
    pub parent_batch: Option<String>,
    /// How many times it was continued.
    pub continuations: i64,
    /// The run holding it while open.
    pub run_owner: Option<String>,
    /// When the run's lease ends (open batches).
    pub lease_expires_at: Option<DateTime<Utc>>,
    /// When it started.
    pub started_at: DateTime<Utc>,
    /// When it ended.
    pub completed_at: Option<DateTime<Utc>>,
    /// How long it ran.
    pub duration_ms: Option<i64>,
    /// When an abandoned batch's message was stored again to retry it (at most once).
    pub retried_at: Option<DateTime<Utc>>,
}

impl From<&BatchInfo> for BatchView {
    fn from(b: &BatchInfo) -> Self {
        Self {
            id: b.id.to_string(),
            batch_type: b.batch_type.as_str().to_owned(),
            state: b.state.as_str().to_owned(),
            message_count: b.message_count,
            archived: b.archived,
            parent_batch: b.parent_batch.map(|p| p.to_string()),
            continuations: b.continuations,
            run_owner: b.run_owner.clone(),
            lease_expires_at: b.lease_expires_at,
            started_at: b.started_at,
            completed_at: b.completed_at,
            duration_ms: b
                .completed_at
                .map(|done| (done - b.started_at).num_milliseconds()),
            retried_at: b.retried_at,
        }
    }
}

/// `message` shape.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct MessageView {
    /// Its id.
    pub id: String,
    /// Its place in the agent's history.
    pub position: String,
    /// Order within the batch.
    pub sequence_num: i64,
    /// Who speaks.
    pub role: String,
    /// Its text.
    pub text: String,
    /// The content.
    #[schema(value_type = Vec<Object>)]
    pub content: Vec<ContentBlock>,
    /// Estimated tokens.
    pub token_estimate: i64,
    /// When it was created.
    pub created_at: DateTime<Utc>,
}

impl From<&Message> for MessageView {
    fn from(m: &Message) -> Self {
        Self {
            id: m.id.to_string(),
            position: m.position.to_string(),
            sequence_num: m.sequence_num,
            role: m.role.as_str().to_owned(),
            text: m.text(),
            content: m.content.clone(),
            token_estimate: m.token_estimate,
            created_at: m.created_at,
        }
    }
}

/// `tool_pair` shape: one tool call and its result, if any.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ToolPair {
    /// The call id.
    pub tool_use_id: String,
    /// Its name.
    pub name: String,
    /// The call message's sequence number.
    pub call_sequence: i64,
    /// The result message's sequence number, if any.
    pub result_sequence: Option<i64>,
    /// Whether the result is an error.
    pub is_error: Option<bool>,
}

/// `batch_detail` shape (`batches show`).
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct BatchDetail {
    /// The batch row.
    #[serde(flatten)]
    pub batch: BatchView,
    /// Its messages in order.
    pub messages: Vec<MessageView>,
    /// Tool calls and their results.
    pub tool_pairs: Vec<ToolPair>,
    /// Calls without a result.
    pub pending_tool_calls: Vec<String>,
}

impl From<&StoredBatch> for BatchDetail {
    fn from(b: &StoredBatch) -> Self {
        let mut pairs: Vec<ToolPair> = Vec::new();
        for m in &b.messages {
            for block in &m.content {
                match block {
                    ContentBlock::ToolUse { id, name, .. } => pairs.push(ToolPair {
                        tool_use_id: id.clone(),
                        name: name.clone(),
                        call_sequence: m.sequence_num,
                        result_sequence: None,
                        is_error: None,
                    }),
                    ContentBlock::ToolResult {
                        tool_use_id,
                        is_error,
                        ..
                    } => {
                        if let Some(pair) = pairs
                            .iter_mut()
                            .find(|p| &p.tool_use_id == tool_use_id && p.result_sequence.is_none())
                        {
                            pair.result_sequence = Some(m.sequence_num);
                            pair.is_error = Some(*is_error);
                        }
                    }
                    _ => {}
                }
            }
        }
        Self {
            batch: BatchView::from(&b.info),
            messages: b.messages.iter().map(MessageView::from).collect(),
            tool_pairs: pairs,
            pending_tool_calls: b.pending_tool_calls(),
        }
    }
}

/// `archival` shape: one archival passage.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ArchivalView {
    /// Its id.
    pub id: String,
    /// The content.
    pub content: String,
    /// Free-form JSON metadata.
    #[schema(value_type = Object)]
    pub metadata: Value,
    /// Its tags.
    pub tags: Vec<String>,
    /// Its dedupe key.
    pub key: Option<String>,
    /// When it was created.
    pub created_at: DateTime<Utc>,
}

impl From<&ArchivalEntry> for ArchivalView {
    fn from(e: &ArchivalEntry) -> Self {
        Self {
            id: e.id.to_string(),
            content: e.content.clone(),
            metadata: e.metadata.clone(),
            tags: e.tags.clone(),
            key: e.dedupe_key.clone(),
            created_at: e.created_at,
        }
    }
}

/// `search_hit` shape: one search result.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct SearchHitView {
    /// `message`, `archival` or `block`.
    pub content_type: String,
    /// Its id.
    pub id: String,
    /// Its agent.
    pub agent_id: String,
    /// Relevance; comparable only within one answer.
    pub score: f32,
    /// Its text.
    pub text: String,
    /// When it was created.
    pub created_at: DateTime<Utc>,
}

impl From<&SearchHit> for SearchHitView {
    fn from(h: &SearchHit) -> Self {
        Self {
            content_type: h.content.content_type.as_str().to_owned(),
            id: h.content.id.clone(),
            agent_id: h.agent_id.to_string(),
            score: h.score,
            text: h.text.clone(),
            created_at: h.created_at,
        }
    }
}

/// `approval` shape: a stored approval request (`GET /v1/approvals`, `pattern approvals list
/// --json`).
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ApprovalView {
    /// Its id (decimal).
    pub id: String,
    /// The agent asking (its id).
    pub agent_id: String,
    /// The run's batch (decimal), when a run asked.
    pub batch_id: Option<String>,
    /// The run's turn, when the batch had one.
    pub turn_id: Option<String>,
    /// The tool.
    pub tool: String,
    /// The tool call's id.
    pub call_id: Option<String>,
    /// The call's arguments.
    #[schema(value_type = Object)]
    pub input: Value,
    /// Why approval is needed.
    pub reason: String,
    /// When it was asked.
    pub requested_at: DateTime<Utc>,
    /// When an unanswered request is denied.
    pub deadline: DateTime<Utc>,
    /// `pending`, `approved`, `denied`, `timed_out` or `abandoned` (its run ended first).
    pub state: String,
    /// When it was decided.
    pub decided_at: Option<DateTime<Utc>>,
    /// Who decided (`http`, `cli`, `timeout`, ...).
    pub decided_by: Option<String>,
    /// Why it was denied.
    pub denial_reason: Option<String>,
}

impl From<&pattern::db::Approval> for ApprovalView {
    fn from(a: &pattern::db::Approval) -> Self {
        Self {
            id: a.id.to_string(),
            agent_id: a.agent_id.to_string(),
            batch_id: a.batch_id.map(|b| b.to_string()),
            turn_id: a.turn_id.map(|t| t.to_string()),
            tool: a.tool.clone(),
            call_id: a.call_id.clone(),
            input: a.input.clone(),
            reason: a.reason.clone(),
            requested_at: a.requested_at,
            deadline: a.deadline,
            state: a.state.as_str().to_owned(),
            decided_at: a.decided_at,
            decided_by: a.decided_by.clone(),
            denial_reason: a.denial_reason.clone(),
        }
    }
}

/// `schedule` shape: a live schedule of an agent (decision 0012).
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ScheduleView {
    /// Its id (a snowflake, as a decimal string).
    pub id: String,
    /// The agent's id.
    pub agent_id: String,
    /// The agent's name (shown as the organization sees it).
    pub agent: String,
    /// Its label.
    pub name: Option<String>,
    /// What the agent receives (a system message) when it fires.
    pub message: String,
    /// `at` (one-off) or `cron` (recurring).
    pub kind: String,
    /// The cron expression of a recurring schedule.
    pub cron: Option<String>,
    /// The time zone a cron expression is read in (IANA name; `UTC` for one-offs).
    pub tz: String,
    /// When it fires next.
    pub next_at: DateTime<Utc>,
    /// How often it fired.
    pub deliveries: i64,
    /// The batch its latest firing began.
    pub last_batch: Option<String>,
    /// When it was added.
    pub created_at: DateTime<Utc>,
}

impl ScheduleView {
    /// The view of `s`, whose agent is shown as `agent`.
    pub fn new(s: &pattern::db::schedule::Schedule, agent: &str) -> Self {
        Self {
            id: s.id.to_string(),
            agent_id: s.agent_id.to_string(),
            agent: agent.to_owned(),
            name: s.name.clone(),
            message: s.message.clone(),
            kind: s.kind.as_str().to_owned(),
            cron: s.cron.clone(),
            tz: s.time_zone.clone(),
            next_at: s.next_at,
            deliveries: s.deliveries,
            last_batch: s.last_batch.map(|b| b.to_string()),
            created_at: s.created_at,
        }
    }
}
