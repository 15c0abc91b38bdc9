//! The OpenAI Chat Completions request body (also spoken by Ollama, vLLM and llama.cpp's server).
//!
//! Layout, stable prefix first (OpenAI-style prompt caches match the longest rendered prefix):
//!
//! - `tools`: `[{type: "function", function: {name, description, parameters}}]`, left out when
//!   there are none.
//! - `messages`: one `system` message, the [`crate::SystemPart`]s with text joined by blank
//!   lines (left out when there are none), then the history.
//! - `tool_choice` when a call is forced: `"required"`, or `{type: "function", function:
//!   {name}}` for one tool; with [`ForcedCall::ResponseSchema`] instead `response_format:
//!   {type: "json_schema", json_schema: {name: "tool_call", schema}}` (see
//!   [`super::forced_call_schema`]).
//! - `model`, `max_tokens` from [`ModelInfo`]; `temperature` when set; when streaming, `stream`
//!   and `stream_options: {include_usage: true}` (so the last chunk reports token usage).
//!
//! History rules (consecutive messages of one role are allowed here and kept apart):
//!
//! 1. An `assistant` message carries its text blocks joined by blank lines in `content` (`null`
//!    when it has none) and its calls in `tool_calls: [{id, type: "function", function: {name,
//!    arguments}}]`, `arguments` being the input serialised as a JSON string. Images in it are
//!    sent as their `"[image: ...]"` text. One with neither text nor calls is left out.
//! 2. Every tool result becomes its own `{role: "tool", tool_call_id, content}` message, in order;
//!    a failed tool's content is prefixed `"Error: "` (the format has no error flag).
//! 3. The other blocks of `user`, `tool` and `system` messages become `user` messages (system text
//!    prefixed `"[system] "`), one per run of blocks between results, so that results keep their
//!    place right after their call. Content is a string (texts joined by blank lines), or an
//!    array of `text` and `image_url` parts when there is an image URL.
//! 4. Thinking blocks are dropped: Chat Completions has no way to send reasoning back.
//!
//! This module must never separate tool messages from the assistant message whose calls they
//! answer, nor change the order of calls or results.

use pattern_db::{ContentBlock, Role};
use serde_json::{Map, Value, json};

use super::{ForcedCall, RequestOptions, ToolChoice};
use crate::assemble::ContextMessage;
use crate::error::Result;
use crate::types::{MemoryContext, ModelInfo};

/// Separator of joined texts (system parts, text blocks of one message).
const JOIN: &str = "\n\n";

/// The Chat Completions request body for `ctx`, following the module doc.
pub fn request(ctx: &MemoryContext, model: &ModelInfo, opts: &RequestOptions) -> Result<Value> {
    super::preflight(&ctx.messages)?;
    opts.tool_choice.check(ctx)?;
    let mut body = Map::new();
    body.insert("model".into(), Value::from(model.model.as_str()));
    body.insert("max_tokens".into(), Value::from(model.max_output_tokens));
    // A server that ignores `tool_choice` is kept from calling by offering it nothing.
    let withheld =
        opts.tool_choice == ToolChoice::None && opts.forced_call == ForcedCall::ResponseSchema;
    if !ctx.tools.is_empty() && !withheld {
        let tools = ctx
            .tools
            .iter()
            .map(|t| {
                json!({
                    "type": "function",
                    "function": {
                        "name": t.name,
                        "description": t.description,
                        "parameters": t.input_schema,
                    },
                })
            })
            .collect();
        body.insert("tools".into(), Value::Array(tools));
    }
    body.insert("messages".into(), Value::Array(messages(ctx)));
    if opts.stream {
        body.insert("stream".into(), Value::Bool(true));
        body.insert("stream_options".into(), json!({ "include_usage": true }));
    }
    if let Some(t) = super::temperature(opts) {
        body.insert("temperature".into(), t);
    }
    match &opts.tool_choice {
        ToolChoice::Auto => {}
        ToolChoice::None if withheld || ctx.tools.is_empty() => {}
        ToolChoice::None => {
            body.insert("tool_choice".into(), Value::from("none"));
        }
        choice if opts.forced_call == ForcedCall::ResponseSchema => {
            if let Some(schema) = super::forced_call_schema(ctx, choice) {
                body.insert(
                    "response_format".into(),
                    json!({
                        "type": "json_schema",
                        "json_schema": { "name": "tool_call", "schema": schema },
                    }),
                );
            }
        }
        ToolChoice::Required => {
            body.insert("tool_choice".into(), Value::from("required"));
        }
        ToolChoice::Tool(name) => {
            body.insert(
                "tool_choice".into(),
                json!({ "type": "function", "function": { "name": name } }),
            );
        }
    }
    Ok(Value::Object(body))
}

fn messages(ctx: &MemoryContext) -> Vec<Value> {
    let mut out = Vec::new();
    let system: Vec<&str> = super::system_parts(ctx)
        .iter()
        .map(|p| p.text.as_str())
        .collect();
    if !system.is_empty() {
        out.push(json!({ "role": "system", "content": system.join(JOIN) }));
    }
    for message in &ctx.messages {
        match message.role {
            Role::Assistant => out.extend(assistant(message)),
            Role::User | Role::Tool | Role::System => user_side(message, &mut out),
        }
    }
    out
}

/// Rule 1.
fn assistant(message: &ContextMessage) -> Option<Value> {
    let mut texts: Vec<String> = Vec::new();
    let mut calls: Vec<Value> = Vec::new();
    for block in &message.content {
        match block {
            ContentBlock::Text { text } => {
                if !text.is_empty() {
                    texts.push(text.clone());
                }
            }
            ContentBlock::ToolUse {
                id, name, input, ..
            } => calls.push(json!({
                "id": id,
                "type": "function",
                "function": { "name": name, "arguments": input.to_string() },
            })),
            ContentBlock::Image { reference, .. } => {
                texts.push(super::image_placeholder(reference))
            }
            // Thinking: rule 4. Results: never in an assistant message (preflight).
            ContentBlock::Thinking { .. } | ContentBlock::ToolResult { .. } => {}
        }
    }
    if texts.is_empty() && calls.is_empty() {
        return None;
    }
    let mut out = Map::new();
    out.insert("role".into(), Value::from("assistant"));
    let content = if texts.is_empty() {
        Value::Null
    } else {
        Value::from(texts.join(JOIN))
    };
    out.insert("content".into(), content);
    if !calls.is_empty() {
        out.insert("tool_calls".into(), Value::Array(calls));
    }
    Some(Value::Object(out))
}

/// One piece of a user message's content.
enum Part {
    Text(String),
    Image(String),
}

/// Rules 2 and 3.
fn user_side(message: &ContextMessage, out: &mut Vec<Value>) {
    let role = message.role;
    let mut parts: Vec<Part> = Vec::new();
    for block in &message.content {
        match block {
            ContentBlock::ToolResult {
                tool_use_id,
                content,
                is_error,
            } => {
                flush(&mut parts, out);
                let content = if *is_error {
                    format!("Error: {content}")
                } else {
                    content.clone()
                };
                out.push(json!({
                    "role": "tool",
                    "tool_call_id": tool_use_id,
                    "content": content,
                }));
            }
            ContentBlock::Text { text } => {
                parts.extend(super::message_text(role, text).map(Part::Text))
            }
            ContentBlock::Image { reference, .. } => {
                parts.push(match super::image_url(role, reference) {
                    Some(url) => Part::Image(url.to_owned()),
                    None => Part::Text(super::image_placeholder(reference)),
                })
            }
            // Thinking: rule 4. Calls: only in assistant messages (preflight).
            ContentBlock::Thinking { .. } | ContentBlock::ToolUse { .. } => {}
        }
    }
    flush(&mut parts, out);
}

/// Emits the pending `parts` as one user message, if there are any.
fn flush(parts: &mut Vec<Part>, out: &mut Vec<Value>) {
    if parts.is_empty() {
        return;
    }
    let content = if parts.iter().any(|p| matches!(p, Part::Image(_))) {
        let array = parts
            .drain(..)
            .map(|p| match p {
                Part::Text(text) => json!({ "type": "text", "text": text }),
                Part::Image(url) => json!({ "type": "image_url", "image_url": { "url": url } }),
            })
            .collect();
        Value::Array(array)
    } else {
        let texts: Vec<String> = parts
            .drain(..)
            .map(|p| match p {
                Part::Text(text) | Part::Image(text) => text,
            })
            .collect();
        Value::from(texts.join(JOIN))
    };
    out.push(json!({ "role": "user", "content": content }));
}
