//! Model providers: one trait, [`ModelProvider`], and the events a streamed answer is made of.
//!
//! A provider takes a built [`MemoryContext`] (already validated by `context_v2`), shapes it
//! with `context_v2::format`, sends it, and yields [`ProviderEvent`]s: text and thinking deltas
//! and tool-call fragments as they arrive, then exactly one [`ProviderEvent::Done`] holding the
//! whole [`ModelResponse`]. A stream that ends without `Done` is an error
//! ([`ProviderError::Truncated`]), never a short answer.
//!
//! Rules every implementation keeps:
//! 1. **Retries only before the first event.** 429, 5xx and "overloaded" answers are retried with
//!    backoff (honouring `retry-after`) while nothing has been yielded; once an event went out, a
//!    failure ends the stream with an error (the runtime decides what to do with the step).
//! 2. **Tool calls always have an id.** Providers that give none (Gemini) get one generated
//!    (`call_<uuid>`), unique within the response.
//! 3. **Malformed tool arguments are not dropped.** Arguments that are not a JSON object become
//!    the input `{"_unparsed_arguments": "<raw text>"}` and the call is listed in
//!    [`ModelResponse::malformed_tool_calls`]: the runtime stores the call and answers it with an
//!    error result the model can see.
//! 4. **Usage is reported** in `Done` (and as [`ProviderEvent::Usage`] when the provider sends
//!    it), so token counting can be calibrated.
//!
//! This module must never store anything, never execute a tool, and never log request bodies or
//! API keys.

mod answer;
pub mod anthropic;
pub mod gemini;
mod http;
pub mod openai;
pub mod unavailable;

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;
use context_v2::{MemoryContext, ModelInfo};
use futures::StreamExt;
use futures::stream::BoxStream;
use pattern_db::ContentBlock;
use serde::{Deserialize, Serialize};

pub use anthropic::AnthropicProvider;
pub use context_v2::format::{ForcedCall, ToolChoice};
pub use gemini::GeminiProvider;
pub use http::{ApiKey, DEFAULT_TIMEOUT, ProviderConfig, RetryPolicy};
pub use openai::OpenAiProvider;
pub use unavailable::UnavailableProvider;

/// Options of one model call that are not part of the context.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GenerateOptions {
    /// Sampling temperature; `None` leaves the provider's default.
    pub temperature: Option<f32>,
    /// Longest answer in tokens; `None` uses [`ModelInfo::max_output_tokens`].
    pub max_output_tokens: Option<usize>,
    /// Deadline for the whole call, including retries; `None` uses the provider's default.
    pub timeout: Option<Duration>,
    /// Whether the model must call a tool in this answer (default: it decides).
    pub tool_choice: ToolChoice,
}

/// Token usage of one call, as the provider reports it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Prompt tokens (including cached ones).
    pub input_tokens: u64,
    /// Answer tokens.
    pub output_tokens: u64,
    /// Prompt tokens read from the provider's cache, when reported.
    pub cache_read_tokens: u64,
    /// Prompt tokens written to the provider's cache, when reported.
    pub cache_write_tokens: u64,
}

/// Why the model stopped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// The answer is complete.
    EndTurn,
    /// The model wants tool results before it goes on.
    ToolUse,
    /// The answer hit the output-token limit.
    MaxTokens,
    /// A stop sequence matched.
    StopSequence,
    /// Anything else the provider said, verbatim.
    Other(String),
}

/// A tool call whose arguments were not a JSON object (rule 3 of the module doc).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MalformedToolCall {
    /// The call's id (as in the response's `tool_use` block).
    pub id: String,
    /// The tool name the model gave.
    pub name: String,
    /// The raw argument text.
    pub raw_arguments: String,
    /// Why it was refused.
    pub error: String,
}

/// A whole answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelResponse {
    /// The answer's blocks in order: thinking, text, tool calls.
    pub content: Vec<ContentBlock>,
    /// Why the model stopped.
    pub stop_reason: StopReason,
    /// Token usage.
    pub usage: Usage,
    /// Calls in `content` whose arguments could not be parsed.
    pub malformed_tool_calls: Vec<MalformedToolCall>,
}

impl ModelResponse {
    /// The tool calls in `content`, in order.
    pub fn tool_calls(&self) -> impl Iterator<Item = (&str, &str, &serde_json::Value)> {
        self.content.iter().filter_map(|b| match b {
            ContentBlock::ToolUse {
                id, name, input, ..
            } => Some((id.as_str(), name.as_str(), input)),
            _ => None,
        })
    }
}

/// One piece of a streamed answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ProviderEvent {
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
    /// A tool call began.
    ToolCallStarted {
        /// Index of the call within the answer.
        index: usize,
        /// The call's id.
        id: String,
        /// The tool's name.
        name: String,
    },
    /// More of a tool call's argument JSON.
    ToolCallDelta {
        /// Index of the call within the answer.
        index: usize,
        /// A fragment of the argument text.
        fragment: String,
    },
    /// Usage so far, when the provider reports it mid-stream.
    Usage {
        /// The usage.
        usage: Usage,
    },
    /// The whole answer; always the last event of a successful stream.
    Done {
        /// The answer.
        response: ModelResponse,
    },
}

/// A streamed answer.
pub type ProviderStream = BoxStream<'static, Result<ProviderEvent, ProviderError>>;

/// How a provider call failed.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum ProviderError {
    /// Rate limited (HTTP 429) and retries ran out.
    #[error("{provider}: rate limited (HTTP 429) after {attempts} attempts")]
    RateLimited {
        /// Provider name.
        provider: String,
        /// Attempts made.
        attempts: u32,
        /// The last `retry-after` the provider asked for.
        retry_after: Option<Duration>,
    },
    /// The provider is overloaded or failing (5xx, Anthropic `overloaded_error`) and retries ran
    /// out.
    #[error("{provider}: server error (HTTP {status}) after {attempts} attempts: {message}")]
    Server {
        /// Provider name.
        provider: String,
        /// HTTP status.
        status: u16,
        /// Attempts made.
        attempts: u32,
        /// The provider's error message.
        message: String,
    },
    /// The key was refused (HTTP 401/403). Not retried.
    #[error("{provider}: authentication failed (HTTP {status}): {message}")]
    Unauthorized {
        /// Provider name.
        provider: String,
        /// HTTP status.
        status: u16,
        /// The provider's error message.
        message: String,
    },
    /// The provider refused the request (HTTP 400, 404, 413, 422). Not retried.
    #[error("{provider}: request refused (HTTP {status}): {message}")]
    BadRequest {
        /// Provider name.
        provider: String,
        /// HTTP status.
        status: u16,
        /// The provider's error message.
        message: String,
    },
    /// Connecting or reading failed, and retries (if any were allowed) ran out.
    #[error("{provider}: transport error: {message}")]
    Transport {
        /// Provider name.
        provider: String,
        /// What failed.
        message: String,
    },
    /// The call's deadline passed.
    #[error("{provider}: no complete answer within {after:?}")]
    Timeout {
        /// Provider name.
        provider: String,
        /// The deadline.
        after: Duration,
    },
    /// The stream ended before the answer was complete.
    #[error("{provider}: the answer stream ended before the answer was complete")]
    Truncated {
        /// Provider name.
        provider: String,
    },
    /// The provider sent something that is not its documented wire format.
    #[error("{provider}: unreadable answer: {message}")]
    Decode {
        /// Provider name.
        provider: String,
        /// What could not be read.
        message: String,
    },
    /// The request could not be shaped (the context failed validation or formatting).
    #[error("building the request failed: {0}")]
    Request(String),
    /// The provider is misconfigured (missing key, bad base URL).
    #[error("provider configuration: {0}")]
    Config(String),
}

/// A language model behind some wire format.
#[async_trait]
pub trait ModelProvider: Send + Sync + fmt::Debug {
    /// Short name for logs and errors (`"anthropic"`, `"openai"`, `"gemini"`, or a configured
    /// name such as `"llama.cpp"`).
    fn name(&self) -> &str;

    /// The model this provider calls, with its window and output limit.
    fn model(&self) -> &ModelInfo;

    /// Sends `ctx` and streams the answer (module doc: rules 1-4).
    async fn stream(
        &self,
        ctx: &MemoryContext,
        opts: &GenerateOptions,
    ) -> Result<ProviderStream, ProviderError>;
}

/// Sends `ctx` and waits for the whole answer.
pub async fn complete(
    provider: &dyn ModelProvider,
    ctx: &MemoryContext,
    opts: &GenerateOptions,
) -> Result<ModelResponse, ProviderError> {
    let mut stream = provider.stream(ctx, opts).await?;
    while let Some(event) = stream.next().await {
        if let ProviderEvent::Done { response } = event? {
            return Ok(response);
        }
    }
    Err(ProviderError::Truncated {
        provider: provider.name().to_owned(),
    })
}
