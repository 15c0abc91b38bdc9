//! The slim [`Agent`] trait, the events a turn streams, and [`collect_response`].
//!
//! An agent is identity, state and one loop: [`Agent::process`] takes an [`IncomingMessage`] and
//! returns a stream of [`ResponseEvent`]s. Everything it *does* goes through its
//! [`AgentRuntime`]; everything it *reads* comes from context building. The stream always ends
//! with exactly one [`ResponseEvent::Done`] or [`ResponseEvent::Error`]. This module must never
//! hold storage or provider handles of its own.

use std::fmt;
use std::pin::Pin;
use std::sync::Arc;

use async_trait::async_trait;
use futures::{Stream, StreamExt};
use pattern_db::{AgentId, BatchId, BatchType, ContentBlock, MessageId, Role, SnowflakeId};
use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::provider::Usage;
use crate::runtime::AgentRuntime;

/// What starts a turn.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IncomingMessage {
    /// Who speaks: a user (or endpoint), another agent, or the system.
    pub batch_type: BatchType,
    /// `user` or `system`.
    pub role: Role,
    /// The content.
    pub content: Vec<ContentBlock>,
    /// Who sent it, for the queue, the turn and logs (an endpoint name, an agent name,
    /// `scheduler`).
    #[serde(default)]
    pub source: String,
    /// Set when this retries an abandoned batch: the batch is marked retried in the same
    /// transaction that stores this trigger (a new batch or a queue entry), so a second retry of
    /// it is refused with nothing stored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_of: Option<BatchId>,
}

impl IncomingMessage {
    /// A user's text.
    pub fn user(text: impl Into<String>) -> Self {
        Self {
            batch_type: BatchType::UserRequest,
            role: Role::User,
            content: vec![ContentBlock::text(text)],
            source: String::new(),
            retry_of: None,
        }
    }

    /// A system trigger (a wakeup, a heartbeat timer).
    pub fn system(text: impl Into<String>) -> Self {
        Self {
            batch_type: BatchType::SystemTrigger,
            role: Role::System,
            content: vec![ContentBlock::text(text)],
            source: "system".into(),
            retry_of: None,
        }
    }

    /// Another agent's text.
    pub fn from_agent(agent: &str, text: impl Into<String>) -> Self {
        Self {
            batch_type: BatchType::AgentToAgent,
            role: Role::User,
            content: vec![ContentBlock::text(text)],
            source: agent.to_owned(),
            retry_of: None,
        }
    }

    /// The trigger of an abandoned batch, to run again in a new batch.
    pub fn retry(abandoned: &pattern_db::Abandoned) -> Self {
        let batch_type = match abandoned.batch.batch_type {
            BatchType::Continuation => BatchType::UserRequest,
            other => other,
        };
        Self {
            batch_type,
            role: abandoned.trigger.role,
            content: abandoned.trigger.content.clone(),
            source: "retry".into(),
            retry_of: Some(abandoned.batch.id),
        }
    }
}

/// What an agent is doing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum AgentState {
    /// Waiting for input.
    Ready,
    /// Running a batch.
    Processing {
        /// The batch.
        batch: BatchId,
    },
    /// Refusing new turns until set ready again (queued triggers wait).
    Suspended,
}

/// How a turn ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DoneReason {
    /// The model answered without pending tool calls.
    Completed,
    /// An exit tool ended the loop.
    ExitTool,
    /// The iteration limit ended a runaway loop (every call answered; batch complete).
    MaxIterations,
    /// The time limit ended the loop (every call answered; batch complete).
    MaxDuration,
}

/// What kind of failure ended a turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// The model provider failed (after its retries).
    Provider,
    /// Storing a step failed; the step was rolled back.
    Storage,
    /// Context could not be built.
    Context,
    /// The caller cancelled the turn.
    Cancelled,
    /// The agent is suspended; the trigger waits in the queue.
    Suspended,
    /// The process running the turn stopped, or its run lost its claim on the agent to
    /// recovery: the batch was abandoned and the trigger stays stored for a retry.
    Interrupted,
}

/// One event of a turn.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ResponseEvent {
    /// The trigger could not start at once (another batch is in flight) and is committed to the
    /// agent's queue: durable, and delivered when the agent is free.
    Queued {
        /// The queue entry.
        queue_id: SnowflakeId,
    },
    /// The trigger is committed as the first message of its batch: the durable "received".
    Received {
        /// The batch.
        batch_id: BatchId,
        /// The trigger message.
        message_id: MessageId,
    },
    /// More answer text.
    TextDelta {
        /// The new text.
        text: String,
    },
    /// More reasoning text.
    ThinkingDelta {
        /// The new text.
        text: String,
    },
    /// The model began a tool call.
    ToolCallStarted {
        /// The call's id.
        call_id: String,
        /// The tool.
        name: String,
    },
    /// The model finished a tool call; it is about to run.
    ToolCallFinished {
        /// The call's id.
        call_id: String,
        /// The tool.
        name: String,
        /// Its arguments.
        input: serde_json::Value,
    },
    /// A tool ran (or was refused); this is what the model will see.
    ToolResult {
        /// The call's id.
        call_id: String,
        /// The result text.
        content: String,
        /// Whether it is an error result.
        is_error: bool,
    },
    /// A tool call waits for a human's approval (stored as approval request `approval_id`;
    /// answer it with `POST /v1/approvals/{id}` or `pattern approvals decide`). No answer by
    /// `deadline` is a denial.
    ApprovalRequested {
        /// The stored request.
        approval_id: SnowflakeId,
        /// The tool.
        tool: String,
        /// The call's id.
        call_id: Option<String>,
        /// Why approval is needed.
        reason: String,
        /// When an unanswered request is denied.
        deadline: chrono::DateTime<chrono::Utc>,
    },
    /// Token usage of one model call.
    Usage {
        /// The usage.
        usage: Usage,
    },
    /// A step (an answer and its tool results) is committed.
    StepCommitted {
        /// The batch.
        batch_id: BatchId,
        /// How many messages the step stored.
        messages: usize,
    },
    /// The batch is complete.
    BatchCompleted {
        /// The batch.
        batch_id: BatchId,
    },
    /// The turn failed. The trigger stays stored; the batch was abandoned (it is never sent to
    /// a provider again) and its trigger can be retried.
    Error {
        /// What failed.
        kind: ErrorKind,
        /// One-line cause.
        message: String,
        /// The batch, when one was begun.
        batch_id: Option<BatchId>,
    },
    /// The turn ended well.
    Done {
        /// The batch.
        batch_id: BatchId,
        /// Why it ended.
        reason: DoneReason,
    },
}

impl ResponseEvent {
    /// The event's `type`, as it is serialised (and as SSE names it).
    pub fn name(&self) -> &'static str {
        match self {
            ResponseEvent::Queued { .. } => "queued",
            ResponseEvent::Received { .. } => "received",
            ResponseEvent::TextDelta { .. } => "text_delta",
            ResponseEvent::ThinkingDelta { .. } => "thinking_delta",
            ResponseEvent::ToolCallStarted { .. } => "tool_call_started",
            ResponseEvent::ToolCallFinished { .. } => "tool_call_finished",
            ResponseEvent::ToolResult { .. } => "tool_result",
            ResponseEvent::ApprovalRequested { .. } => "approval_requested",
            ResponseEvent::Usage { .. } => "usage",
            ResponseEvent::StepCommitted { .. } => "step_committed",
            ResponseEvent::BatchCompleted { .. } => "batch_completed",
            ResponseEvent::Error { .. } => "error",
            ResponseEvent::Done { .. } => "done",
        }
    }

    /// Whether this event ends a turn (`done` or `error`).
    pub fn is_final(&self) -> bool {
        matches!(
            self,
            ResponseEvent::Done { .. } | ResponseEvent::Error { .. }
        )
    }
}

/// The stream [`Agent::process`] returns.
pub type ResponseStream = Pin<Box<dyn Stream<Item = ResponseEvent> + Send>>;

/// A stateful agent: identity, state, and the processing loop.
#[async_trait]
pub trait Agent: Send + Sync + fmt::Debug {
    /// Stable identity.
    fn id(&self) -> AgentId;

    /// Human-readable name.
    fn name(&self) -> &str;

    /// The runtime that does everything this agent does.
    fn runtime(&self) -> &AgentRuntime;

    /// Processes `message`: commits it (or queues it durably when a batch is in flight), then
    /// runs the model and tools, streaming events. The stream ends with one `Done` or `Error`.
    async fn process(self: Arc<Self>, message: IncomingMessage) -> Result<ResponseStream>;

    /// What the agent is doing.
    async fn state(&self) -> AgentState;

    /// Suspends or resumes the agent (`Processing` cannot be set from outside).
    async fn set_state(&self, state: AgentState) -> Result<()>;
}

/// A whole turn, collected.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Response {
    /// The batch, when one was begun.
    pub batch_id: Option<BatchId>,
    /// The answer text (all text deltas joined).
    pub text: String,
    /// Tool calls made, in order: `(id, name, input)`.
    pub tool_calls: Vec<(String, String, serde_json::Value)>,
    /// Tool results, in order: `(call id, content, is_error)`.
    pub tool_results: Vec<(String, String, bool)>,
    /// Summed usage of the turn's model calls.
    pub usage: Usage,
    /// How it ended.
    pub reason: DoneReason,
}

/// The error a collected turn ended with.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("turn failed ({kind:?}): {message}")]
pub struct TurnError {
    /// What failed.
    pub kind: ErrorKind,
    /// One-line cause.
    pub message: String,
    /// The batch, when one was begun.
    pub batch_id: Option<BatchId>,
}

/// Collects a turn's events into a [`Response`], or the error it ended with. A stream that ends
/// without `Done` or `Error` is reported as a cancelled turn.
pub async fn collect_response(
    mut stream: impl Stream<Item = ResponseEvent> + Unpin,
) -> std::result::Result<Response, TurnError> {
    let mut out = Response {
        batch_id: None,
        text: String::new(),
        tool_calls: Vec::new(),
        tool_results: Vec::new(),
        usage: Usage::default(),
        reason: DoneReason::Completed,
    };
    while let Some(event) = stream.next().await {
        match event {
            ResponseEvent::Received { batch_id, .. } => out.batch_id = Some(batch_id),
            ResponseEvent::TextDelta { text } => out.text.push_str(&text),
            ResponseEvent::ToolCallFinished {
                call_id,
                name,
                input,
            } => out.tool_calls.push((call_id, name, input)),
            ResponseEvent::ToolResult {
                call_id,
                content,
                is_error,
            } => out.tool_results.push((call_id, content, is_error)),
            ResponseEvent::Usage { usage } => {
                out.usage.input_tokens += usage.input_tokens;
                out.usage.output_tokens += usage.output_tokens;
                out.usage.cache_read_tokens += usage.cache_read_tokens;
                out.usage.cache_write_tokens += usage.cache_write_tokens;
            }
            ResponseEvent::Done { batch_id, reason } => {
                out.batch_id = Some(batch_id);
                out.reason = reason;
                return Ok(out);
            }
            ResponseEvent::Error {
                kind,
                message,
                batch_id,
            } => {
                return Err(TurnError {
                    kind,
                    message,
                    batch_id: batch_id.or(out.batch_id),
                });
            }
            ResponseEvent::Queued { .. }
            | ResponseEvent::ApprovalRequested { .. }
            | ResponseEvent::ThinkingDelta { .. }
            | ResponseEvent::ToolCallStarted { .. }
            | ResponseEvent::StepCommitted { .. }
            | ResponseEvent::BatchCompleted { .. } => {}
        }
    }
    Err(TurnError {
        kind: ErrorKind::Cancelled,
        message: "the turn's stream ended before the turn did".into(),
        batch_id: out.batch_id,
    })
}
