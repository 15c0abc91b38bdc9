//! Telemetry of runs: the metrics a run records and the spans it opens, in one place so their
//! names and labels stay consistent.
//!
//! Metrics go through the [`metrics`] facade: they cost one atomic check when no recorder is
//! installed and are exported by whichever recorder the binary installs (`pattern serve`
//! installs a Prometheus one and serves it at `/metrics`). Spans follow OpenTelemetry's
//! semantic conventions for generative AI (`invoke_agent`, `chat`, `execute_tool` with
//! `gen_ai.*` attributes); a `tracing-opentelemetry` layer exports them when the binary
//! configures one. Labels are bounded: the agent's id, the model, the tool's name and a fixed
//! outcome word, never message text.
//!
//! This module must never block, fail a run, or put user content (messages, tool input or
//! output) into a metric label or a span attribute.

use std::time::Duration;

use crate::error::Error;
use crate::provider::{ProviderError, StopReason, Usage};

/// Turns that ended, by agent and outcome (`completed`, `failed`, `cancelled`, `interrupted`).
pub const TURNS: &str = "pattern_turns_total";
/// Seconds from a turn's start to its end being stored, by agent and outcome.
pub const TURN_SECONDS: &str = "pattern_turn_duration_seconds";
/// Seconds of one step: the model's answer and the tools it called, by agent.
pub const STEP_SECONDS: &str = "pattern_step_duration_seconds";
/// Model requests, by agent, model and outcome (`ok`, `error`).
pub const MODEL_REQUESTS: &str = "pattern_model_requests_total";
/// Seconds of one model request (until the whole answer streamed), by agent and model.
pub const MODEL_SECONDS: &str = "pattern_model_request_duration_seconds";
/// Tokens, by agent, model and type (`input`, `output`, `cache_read`, `cache_write`).
pub const TOKENS: &str = "pattern_model_tokens_total";
/// Tool calls, by agent, tool and outcome (`ok`, `error`).
pub const TOOL_CALLS: &str = "pattern_tool_calls_total";
/// Seconds of one tool call (rules, approval and the tool), by tool.
pub const TOOL_SECONDS: &str = "pattern_tool_call_duration_seconds";

/// Describes every metric above to the installed recorder (help text and unit). Call once
/// after installing a recorder; calling it again is harmless.
pub fn describe() {
    use metrics::{Unit, describe_counter, describe_histogram};
    describe_counter!(TURNS, Unit::Count, "Turns that ended, by agent and outcome");
    describe_histogram!(
        TURN_SECONDS,
        Unit::Seconds,
        "Turn latency: start to the stored end, by agent and outcome"
    );
    describe_histogram!(
        STEP_SECONDS,
        Unit::Seconds,
        "Step latency: one model answer and its tool calls, by agent"
    );
    describe_counter!(
        MODEL_REQUESTS,
        Unit::Count,
        "Model requests, by agent, model and outcome"
    );
    describe_histogram!(
        MODEL_SECONDS,
        Unit::Seconds,
        "Model request latency until the whole answer streamed, by agent and model"
    );
    describe_counter!(
        TOKENS,
        Unit::Count,
        "Model tokens, by agent, model and type (input, output, cache_read, cache_write)"
    );
    describe_counter!(
        TOOL_CALLS,
        Unit::Count,
        "Tool calls, by agent, tool and outcome"
    );
    describe_histogram!(TOOL_SECONDS, Unit::Seconds, "Tool call latency, by tool");
}

/// How a turn ended, as its metric label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TurnOutcome {
    /// The batch completed.
    Completed,
    /// The run failed (model, context, storage or tool loop).
    Failed,
    /// Cancelled by its caller, an operator or a shutdown.
    Cancelled,
    /// Another process took the agent over.
    Interrupted,
}

impl TurnOutcome {
    /// The label word.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::Cancelled => "cancelled",
            Self::Interrupted => "interrupted",
        }
    }
}

/// A turn ended.
pub(crate) fn turn_ended(agent: &str, outcome: TurnOutcome, elapsed: Duration) {
    let outcome = outcome.label();
    metrics::counter!(TURNS, "agent" => agent.to_owned(), "outcome" => outcome).increment(1);
    metrics::histogram!(TURN_SECONDS, "agent" => agent.to_owned(), "outcome" => outcome)
        .record(elapsed.as_secs_f64());
}

/// A step (a model answer and its tool calls) was stored.
pub(crate) fn step_done(agent: &str, elapsed: Duration) {
    metrics::histogram!(STEP_SECONDS, "agent" => agent.to_owned()).record(elapsed.as_secs_f64());
}

/// A model request ended: its usage when it answered, `None` when it failed.
pub(crate) fn model_request(agent: &str, model: &str, usage: Option<&Usage>, elapsed: Duration) {
    let outcome = if usage.is_some() { "ok" } else { "error" };
    metrics::counter!(MODEL_REQUESTS, "agent" => agent.to_owned(), "model" => model.to_owned(),
        "outcome" => outcome)
    .increment(1);
    metrics::histogram!(MODEL_SECONDS, "agent" => agent.to_owned(), "model" => model.to_owned())
        .record(elapsed.as_secs_f64());
    if let Some(usage) = usage {
        for (kind, n) in [
            ("input", usage.input_tokens),
            ("output", usage.output_tokens),
            ("cache_read", usage.cache_read_tokens),
            ("cache_write", usage.cache_write_tokens),
        ] {
            if n > 0 {
                metrics::counter!(TOKENS, "agent" => agent.to_owned(),
                    "model" => model.to_owned(), "type" => kind)
                .increment(n);
            }
        }
    }
}

/// A tool call ended (`ok` false: its result is an error the model sees).
pub(crate) fn tool_call(agent: &str, tool: &str, ok: bool, elapsed: Duration) {
    let outcome = if ok { "ok" } else { "error" };
    metrics::counter!(TOOL_CALLS, "agent" => agent.to_owned(), "tool" => tool.to_owned(),
        "outcome" => outcome)
    .increment(1);
    metrics::histogram!(TOOL_SECONDS, "tool" => tool.to_owned()).record(elapsed.as_secs_f64());
}

/// The span of one run of an agent (GenAI `invoke_agent`).
pub(crate) fn agent_span(agent_id: &str, agent_name: &str, batch: &str) -> tracing::Span {
    tracing::info_span!(
        "invoke_agent",
        otel.name = %format_args!("invoke_agent {agent_name}"),
        otel.kind = "internal",
        otel.status_code = tracing::field::Empty,
        gen_ai.operation.name = "invoke_agent",
        gen_ai.agent.id = %agent_id,
        gen_ai.agent.name = %agent_name,
        pattern.batch_id = %batch,
        pattern.turn.outcome = tracing::field::Empty,
    )
}

/// The span of one model request (GenAI `chat`); [`record_usage`] fills its response side.
pub(crate) fn chat_span(provider: &str, model: &str) -> tracing::Span {
    tracing::info_span!(
        "chat",
        otel.name = %format_args!("chat {model}"),
        otel.kind = "client",
        otel.status_code = tracing::field::Empty,
        gen_ai.operation.name = "chat",
        gen_ai.provider.name = %provider,
        gen_ai.request.model = %model,
        gen_ai.response.model = tracing::field::Empty,
        gen_ai.response.finish_reasons = tracing::field::Empty,
        gen_ai.usage.input_tokens = tracing::field::Empty,
        gen_ai.usage.output_tokens = tracing::field::Empty,
        error.type = tracing::field::Empty,
    )
}

/// Records a model answer's usage and stop reason on its [`chat_span`].
pub(crate) fn record_usage(span: &tracing::Span, model: &str, usage: &Usage, finish: &str) {
    span.record("gen_ai.response.model", model);
    span.record("gen_ai.response.finish_reasons", finish);
    span.record("gen_ai.usage.input_tokens", usage.input_tokens);
    span.record("gen_ai.usage.output_tokens", usage.output_tokens);
}

/// Marks `span` failed with the error's class (never the message text).
pub(crate) fn record_error(span: &tracing::Span, error: &Error) {
    span.record("otel.status_code", "ERROR");
    span.record("error.type", error_type(error));
}

/// A low-cardinality name for what failed (`error.type`).
pub(crate) fn error_type(error: &Error) -> &'static str {
    match error {
        Error::Provider(p) => match p {
            ProviderError::RateLimited { .. } => "rate_limited",
            ProviderError::Server { .. } => "server_error",
            ProviderError::Unauthorized { .. } => "unauthorized",
            ProviderError::BadRequest { .. } => "bad_request",
            ProviderError::Transport { .. } => "transport",
            ProviderError::Timeout { .. } => "timeout",
            ProviderError::Truncated { .. } => "truncated",
            ProviderError::Decode { .. } => "decode",
            _ => "provider",
        },
        Error::Db(_) => "storage",
        Error::Memory(_) => "memory",
        Error::Context(_) => "context",
        _ => "internal",
    }
}

/// The stop reason as `gen_ai.response.finish_reasons` names it.
pub(crate) fn finish_reason(reason: &StopReason) -> &str {
    match reason {
        StopReason::EndTurn => "stop",
        StopReason::ToolUse => "tool_calls",
        StopReason::MaxTokens => "length",
        StopReason::StopSequence => "stop_sequence",
        StopReason::Other(other) => other,
    }
}

/// The span of one tool call (GenAI `execute_tool`).
pub(crate) fn tool_span(tool: &str, call_id: &str) -> tracing::Span {
    tracing::info_span!(
        "execute_tool",
        otel.name = %format_args!("execute_tool {tool}"),
        otel.kind = "internal",
        otel.status_code = tracing::field::Empty,
        gen_ai.operation.name = "execute_tool",
        gen_ai.tool.name = %tool,
        gen_ai.tool.call.id = %call_id,
        gen_ai.tool.type = "function",
        error.type = tracing::field::Empty,
    )
}
