//! `pattern_core`: the agent runtime of Pattern.
//!
//! - [`Agent`] is slim (identity, state, `process`); [`DatabaseAgent`] implements it with the
//!   crash-safe request flow (trigger committed first, one batch per agent, each step atomic,
//!   failures abandon the batch and keep the trigger for retry; see [`db_agent`]).
//! - [`AgentRuntime`] does all acting: tools (registry, rules, permissions, timeouts), steps,
//!   messages to endpoints and other agents, context building, wakeups.
//! - [`tool`]: the `Tool` trait, the registry, rules, and the built-in tools.
//! - [`permission`]: the per-runtime permission broker.
//! - [`approvals`]: [`DbApprover`](approvals::DbApprover), approval requests stored in the
//!   database and answered from any process.
//! - [`QueueProcessor`]: delivers queued triggers and scheduled wakeups by claiming free agents.
//! - [`turn_log`]: a turn's events as stored, and following them from any process.
//! - [`ModelSummarizer`]: recursive summarization with the agent's model.
//! - [`provider`]: the [`ModelProvider`](provider::ModelProvider) trait and its implementations
//!   (Anthropic Messages, OpenAI Chat Completions and compatible servers, Gemini), streaming,
//!   tool calls, retries.
//! - [`local_server`]: a real model (llama.cpp's server) on loopback for tests and local use.
//!
//! This crate must never name a database driver (storage goes through `pattern_db`'s API),
//! never hold process-wide mutable state (each runtime owns its rule counters and permission
//! broker), and never send a request whose history failed `context_v2::validate`.

mod agent;
pub mod approvals;
pub mod db_agent;
pub mod endpoint;
mod error;
pub mod local_server;
pub mod mcp;
pub mod meeting;
pub mod meeting_stream;
pub mod permission;
pub mod provider;
mod queue;
mod runtime;
mod summarizer;
pub mod telemetry;
#[cfg(feature = "testkit")]
pub mod testkit;
pub mod tool;
pub mod turn_log;

pub use agent::{
    Agent, AgentState, DoneReason, ErrorKind, IncomingMessage, Response, ResponseEvent,
    ResponseStream, TurnError, collect_response,
};
pub use db_agent::{Begun, DatabaseAgent, Submission, TurnOptions};
pub use error::{Error, Result};
pub use queue::{AgentLoader, QueueProcessor};
pub use runtime::{
    AgentRuntime, CallOutcome, DEFAULT_INSTRUCTIONS, RuntimeBuilder, RuntimeConfig, ToolCall,
};
pub use summarizer::{ModelSummarizer, transcript};
