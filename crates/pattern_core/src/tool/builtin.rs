//! The built-in tools: memory block edits (`memory_append`, `memory_replace`, `memory_insert`,
//! `memory_undo`), `send_message`, (from [`super::recall`]) `archival_insert`,
//! `archival_search` and `search`, (from [`super::schedule`]) `schedule_wakeup`,
//! `list_schedules` and `cancel_schedule`, and (from [`super::session`]) `session_send`.
//!
//! Memory tools read the block's current version and write against it (optimistic
//! concurrency): a concurrent change makes them re-read and retry a few times, never overwrite.
//! A block whose permission needs a human (`partner`, `human`) is changed only after the
//! runtime's permission broker approved. Limits and permissions are the memory store's: an
//! over-limit write is an error result with the numbers, so the model can shorten and retry.
//! These tools must never cut a value to fit and never bypass the memory store.

use std::sync::Arc;

use async_trait::async_trait;
use memory_v2::WriteAuth;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{Tool, ToolContext, ToolError, ToolOutput, ToolRegistry, parse_input as parse};
use crate::endpoint::MessageTarget;
use crate::error::Result;
use crate::runtime::ToolCall;

/// The registry of an assistant that only remembers: `memory_append`, `memory_replace`,
/// `archival_insert`, `archival_search` and `search`; no messaging, schedules or sessions (its
/// answer is its reply) and no line-numbered insert, so a small local model chooses among what
/// remembering needs.
pub fn memory_registry() -> Result<ToolRegistry> {
    let mut r = ToolRegistry::new();
    r.register(Arc::new(MemoryAppend))?;
    r.register(Arc::new(MemoryReplace))?;
    r.register(Arc::new(super::recall::ArchivalInsert))?;
    r.register(Arc::new(super::recall::ArchivalSearch))?;
    r.register(Arc::new(super::recall::Search))?;
    Ok(r)
}

/// A registry holding every built-in tool.
pub fn registry() -> Result<ToolRegistry> {
    let mut r = ToolRegistry::new();
    r.register(Arc::new(MemoryAppend))?;
    r.register(Arc::new(MemoryReplace))?;
    r.register(Arc::new(MemoryInsert))?;
    r.register(Arc::new(MemoryUndo))?;
    r.register(Arc::new(SendMessage))?;
    r.register(Arc::new(super::recall::ArchivalInsert))?;
    r.register(Arc::new(super::recall::ArchivalSearch))?;
    r.register(Arc::new(super::recall::Search))?;
    r.register(Arc::new(super::schedule::ScheduleWakeup))?;
    r.register(Arc::new(super::schedule::ListSchedules))?;
    r.register(Arc::new(super::schedule::CancelSchedule))?;
    r.register(Arc::new(super::session::SessionSend))?;
    Ok(r)
}

/// How often a memory edit re-reads and retries after losing a race.
const CONFLICT_RETRIES: usize = 3;

/// Reads the block's version, runs `write` against it, retries on conflicts, and asks for
/// approval when the permission needs it.
async fn edit_block<F, Fut>(
    ctx: &ToolContext,
    tool: &str,
    input: &Value,
    label: &str,
    write: F,
) -> Result<i64, ToolError>
where
    F: Fn(i64, WriteAuth) -> Fut,
    Fut: std::future::Future<Output = memory_v2::Result<i64>>,
{
    let agent = ctx.runtime.agent_id();
    let mut auth = WriteAuth::Agent;
    let mut attempts = 0;
    loop {
        attempts += 1;
        let block = ctx
            .runtime
            .memory()
            .block(agent, label)
            .await
            .map_err(|e| ToolError::Failed(e.to_string()))?;
        match write(block.version, auth).await {
            Ok(version) => return Ok(version),
            Err(memory_v2::Error::Conflict { .. }) if attempts <= CONFLICT_RETRIES => continue,
            Err(memory_v2::Error::NeedsApproval { .. }) if auth == WriteAuth::Agent => {
                let call = ToolCall {
                    id: ctx.call_id.clone(),
                    name: tool.to_owned(),
                    input: input.clone(),
                    malformed: None,
                };
                ctx.runtime
                    .approve_in(
                        Some(ctx.batch),
                        &call,
                        &format!("changing memory block `{label}`"),
                    )
                    .await?;
                auth = WriteAuth::Approved;
            }
            Err(e) => return Err(ToolError::Failed(e.to_string())),
        }
    }
}

/// `memory_append`: adds text on a new line at the end of a block.
#[derive(Debug)]
pub struct MemoryAppend;

#[derive(Deserialize)]
struct AppendInput {
    label: String,
    content: String,
}

#[async_trait]
impl Tool for MemoryAppend {
    fn name(&self) -> &str {
        "memory_append"
    }
    fn description(&self) -> &str {
        "Append text on a new line at the end of one of your memory blocks."
    }
    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "label": {"type": "string", "description": "The block's label."},
                "content": {"type": "string", "description": "Text to append."}
            },
            "required": ["label", "content"],
            "additionalProperties": false
        })
    }
    async fn execute(&self, ctx: ToolContext, input: Value) -> Result<ToolOutput, ToolError> {
        let args: AppendInput = parse(self.name(), input.clone())?;
        let agent = ctx.runtime.agent_id();
        let memory = ctx.runtime.memory().clone();
        let version = edit_block(&ctx, self.name(), &input, &args.label, |v, auth| {
            let memory = memory.clone();
            let (label, content) = (args.label.clone(), args.content.clone());
            async move { memory.append(agent, &label, &content, v, auth).await }
        })
        .await?;
        Ok(ToolOutput::text(format!(
            "appended to `{}` (now version {version})",
            args.label
        )))
    }
}

/// `memory_replace`: replaces the first occurrence of a text in a block.
#[derive(Debug)]
pub struct MemoryReplace;

#[derive(Deserialize)]
struct ReplaceInput {
    label: String,
    old: String,
    new: String,
}

#[async_trait]
impl Tool for MemoryReplace {
    fn name(&self) -> &str {
        "memory_replace"
    }
    fn description(&self) -> &str {
        "Replace the first occurrence of `old` with `new` in one of your memory blocks. \
         Use an empty `new` to delete the text."
    }
    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "label": {"type": "string"},
                "old": {"type": "string", "minLength": 1, "description": "Exact text to find."},
                "new": {"type": "string", "description": "Replacement text."}
            },
            "required": ["label", "old", "new"],
            "additionalProperties": false
        })
    }
    async fn execute(&self, ctx: ToolContext, input: Value) -> Result<ToolOutput, ToolError> {
        let args: ReplaceInput = parse(self.name(), input.clone())?;
        let agent = ctx.runtime.agent_id();
        let memory = ctx.runtime.memory().clone();
        let version = edit_block(&ctx, self.name(), &input, &args.label, |v, auth| {
            let memory = memory.clone();
            let (label, old, new) = (args.label.clone(), args.old.clone(), args.new.clone());
            async move { memory.replace(agent, &label, &old, &new, v, auth).await }
        })
        .await?;
        Ok(ToolOutput::text(format!(
            "replaced in `{}` (now version {version})",
            args.label
        )))
    }
}

/// `memory_insert`: inserts a line into a block.
#[derive(Debug)]
pub struct MemoryInsert;

#[derive(Deserialize)]
struct InsertInput {
    label: String,
    line: usize,
    content: String,
}

#[async_trait]
impl Tool for MemoryInsert {
    fn name(&self) -> &str {
        "memory_insert"
    }
    fn description(&self) -> &str {
        "Insert text so that it becomes line `line` (0-based) of one of your memory blocks."
    }
    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "label": {"type": "string"},
                "line": {"type": "integer", "minimum": 0},
                "content": {"type": "string"}
            },
            "required": ["label", "line", "content"],
            "additionalProperties": false
        })
    }
    async fn execute(&self, ctx: ToolContext, input: Value) -> Result<ToolOutput, ToolError> {
        let args: InsertInput = parse(self.name(), input.clone())?;
        let agent = ctx.runtime.agent_id();
        let memory = ctx.runtime.memory().clone();
        let version = edit_block(&ctx, self.name(), &input, &args.label, |v, auth| {
            let memory = memory.clone();
            let (label, content) = (args.label.clone(), args.content.clone());
            let line = args.line;
            async move { memory.insert(agent, &label, line, &content, v, auth).await }
        })
        .await?;
        Ok(ToolOutput::text(format!(
            "inserted into `{}` (now version {version})",
            args.label
        )))
    }
}

/// `memory_undo`: restores a block's previous value.
#[derive(Debug)]
pub struct MemoryUndo;

#[derive(Deserialize)]
struct UndoInput {
    label: String,
}

#[async_trait]
impl Tool for MemoryUndo {
    fn name(&self) -> &str {
        "memory_undo"
    }
    fn description(&self) -> &str {
        "Undo the latest change of one of your memory blocks."
    }
    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {"label": {"type": "string"}},
            "required": ["label"],
            "additionalProperties": false
        })
    }
    async fn execute(&self, ctx: ToolContext, input: Value) -> Result<ToolOutput, ToolError> {
        let args: UndoInput = parse(self.name(), input.clone())?;
        let agent = ctx.runtime.agent_id();
        let memory = ctx.runtime.memory().clone();
        let version = edit_block(&ctx, self.name(), &input, &args.label, |v, auth| {
            let memory = memory.clone();
            let label = args.label.clone();
            async move { memory.undo(agent, &label, v, auth).await }
        })
        .await?;
        Ok(ToolOutput::text(format!(
            "undid the latest change of `{}` (now version {version})",
            args.label
        )))
    }
}

/// `send_message`: sends text to the user, a named endpoint, or another agent.
#[derive(Debug)]
pub struct SendMessage;

#[derive(Deserialize)]
struct SendInput {
    #[serde(default)]
    target: Option<String>,
    content: String,
    #[serde(default)]
    request_heartbeat: bool,
}

#[async_trait]
impl Tool for SendMessage {
    fn name(&self) -> &str {
        "send_message"
    }
    fn description(&self) -> &str {
        "Send a message to the user (default), a named endpoint, or another agent \
         (`agent:NAME`). Set request_heartbeat to get another turn afterwards."
    }
    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "target": {"type": "string", "description": "`user`, `agent:NAME`, or an endpoint name."},
                "content": {"type": "string", "minLength": 1},
                "request_heartbeat": {"type": "boolean"}
            },
            "required": ["content"],
            "additionalProperties": false
        })
    }
    async fn execute(&self, ctx: ToolContext, input: Value) -> Result<ToolOutput, ToolError> {
        let args: SendInput = parse(self.name(), input)?;
        let target = MessageTarget::parse(args.target.as_deref().unwrap_or("user"));
        ctx.runtime
            .send_message(&target, &args.content)
            .await
            .map_err(|e| ToolError::Failed(e.to_string()))?;
        Ok(ToolOutput {
            content: "sent".into(),
            request_heartbeat: args.request_heartbeat,
        })
    }
}
