//! What commands print: the stable JSON shapes (documented in `docs/cli.md`) built from the
//! layers' types, and the helpers that print them as JSON or as text.
//!
//! The shapes here are a public contract: a field may be added, never renamed or removed
//! without a documented change. This module must never read or write the database.

use std::io::Write;

use chrono::{DateTime, Utc};
use pattern::memory::{BlockVersion, MemoryBlock};
use pattern::{Agent, BatchInfo, ContentBlock, Message, StoredBatch};
use serde::Serialize;
use serde_json::Value;

use crate::error::{CliError, Result};

/// Prints `value` as one pretty JSON document on stdout.
pub(crate) fn json<T: Serialize>(value: &T) -> Result<()> {
    let text = serde_json::to_string_pretty(value)?;
    line(&text)
}

/// Prints one line on stdout; a closed pipe is not an error worth more than exit 1.
pub(crate) fn line(text: &str) -> Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{text}").map_err(|e| CliError::other(format!("stdout: {e}")))
}

/// `agent` shape.
#[derive(Debug, Serialize)]
pub(crate) struct AgentView {
    pub(crate) id: String,
    pub(crate) name: String,
    pub(crate) instructions: Option<String>,
    pub(crate) metadata: Value,
    pub(crate) created_at: DateTime<Utc>,
}

impl From<&Agent> for AgentView {
    fn from(a: &Agent) -> Self {
        Self {
            id: a.id.to_string(),
            name: a.name.clone(),
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
#[derive(Debug, Serialize)]
pub(crate) struct BlockView {
    pub(crate) label: String,
    pub(crate) description: String,
    pub(crate) value: String,
    pub(crate) chars: usize,
    pub(crate) char_limit: usize,
    pub(crate) block_type: String,
    pub(crate) permission: String,
    pub(crate) version: i64,
    pub(crate) updated_at: DateTime<Utc>,
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
#[derive(Debug, Serialize)]
pub(crate) struct VersionView {
    pub(crate) version: i64,
    pub(crate) change: String,
    pub(crate) value: String,
    pub(crate) changed_by: String,
    pub(crate) created_at: DateTime<Utc>,
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
#[derive(Debug, Serialize)]
pub(crate) struct BatchView {
    pub(crate) id: String,
    pub(crate) batch_type: String,
    pub(crate) state: String,
    pub(crate) message_count: i64,
    pub(crate) archived: bool,
    pub(crate) parent_batch: Option<String>,
    pub(crate) continuations: i64,
    pub(crate) run_owner: Option<String>,
    pub(crate) lease_expires_at: Option<DateTime<Utc>>,
    pub(crate) started_at: DateTime<Utc>,
    pub(crate) completed_at: Option<DateTime<Utc>>,
    pub(crate) duration_ms: Option<i64>,
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
        }
    }
}

/// `message` shape.
#[derive(Debug, Serialize)]
pub(crate) struct MessageView {
    pub(crate) id: String,
    pub(crate) position: String,
    pub(crate) sequence_num: i64,
    pub(crate) role: String,
    pub(crate) text: String,
    pub(crate) content: Vec<ContentBlock>,
    pub(crate) token_estimate: i64,
    pub(crate) created_at: DateTime<Utc>,
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
#[derive(Debug, Serialize)]
pub(crate) struct ToolPair {
    pub(crate) tool_use_id: String,
    pub(crate) name: String,
    pub(crate) call_sequence: i64,
    pub(crate) result_sequence: Option<i64>,
    pub(crate) is_error: Option<bool>,
}

/// `batch_detail` shape (`batches show`).
#[derive(Debug, Serialize)]
pub(crate) struct BatchDetail {
    #[serde(flatten)]
    pub(crate) batch: BatchView,
    pub(crate) messages: Vec<MessageView>,
    pub(crate) tool_pairs: Vec<ToolPair>,
    pub(crate) pending_tool_calls: Vec<String>,
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

/// Shortens `text` to one line of at most `max` characters for tables (display only).
pub(crate) fn preview(text: &str, max: usize) -> String {
    let one_line: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if one_line.chars().count() <= max {
        one_line
    } else {
        let cut: String = one_line.chars().take(max.saturating_sub(1)).collect();
        format!("{cut}…")
    }
}
