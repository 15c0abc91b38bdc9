//! The Anthropic Messages API request body.
//!
//! Layout, stable prefix first (Anthropic caches `tools`, then `system`, then `messages`):
//!
//! - `tools`: `[{name, description, input_schema}]`, left out when there are none.
//! - `system`: one text block per [`crate::SystemPart`] with text, in order (instructions, memory
//!   blocks, tool rules, summaries); left out when there are none.
//! - `messages`: the history, roles `user` and `assistant` only.
//! - `model`, `max_tokens` from [`ModelInfo`]; `stream` and `temperature` only when set;
//!   `tool_choice` only when a call is forced: `{type: "any"}`, or `{type: "tool", name}`.
//!
//! Cache breakpoints (`cache_control: {"type": "ephemeral"}`), only for the
//! [`CachePoint`]s listed in the context, so at most three of Anthropic's four:
//! [`CachePoint::AfterTools`] on the last tool; [`CachePoint::AfterSystem`] on the last system
//! block before the first summary (the last block when there is no summary);
//! [`CachePoint::AfterSummaries`] on the last summary. A point whose section is empty marks
//! nothing.
//!
//! History rules:
//!
//! 1. `assistant` messages stay `assistant`; `user`, `tool` and `system` messages become `user`
//!    (system text prefixed `"[system] "`).
//! 2. Consecutive messages that end up with the same role are merged into one message, blocks in
//!    order: Anthropic requires alternation. In a merged `user` message the `tool_result` blocks
//!    come first, as Anthropic requires (for validated input they already do: results follow
//!    their call directly; the stable partition only guards the rule).
//! 3. A history opening with the assistant is sent as it is: the Messages API accepts a first
//!    `assistant` message, and no user text is invented before it.
//! 4. Blocks: text as `text`; tool calls as `tool_use {id, name, input}`; results as
//!    `tool_result {tool_use_id, content, is_error}`, `is_error` only when true; images per the
//!    [`super`] rules, a URL as `image` with a `url` source.
//! 5. Thinking with a signature goes back as `thinking {thinking, signature}` in assistant
//!    messages. Thinking without a signature is dropped: Anthropic rejects unsigned thinking
//!    blocks (such blocks come from other providers or were stored without one). Thinking in a
//!    message that is not the assistant's is dropped too.
//!
//! This module must never send a tool call without its result (see rule 1 of [`super`]), never
//! put a `tool_result` after other blocks of its message, and never emit two consecutive messages
//! of one role.

use pattern_db::{ContentBlock, Role};
use serde_json::{Map, Value, json};

use super::{RequestOptions, ToolChoice, Turns};
use crate::assemble::ContextMessage;
use crate::error::Result;
use crate::types::{CachePoint, MemoryContext, ModelInfo, SystemPartKind};

/// The Anthropic Messages request body for `ctx`, following the module doc.
pub fn request(ctx: &MemoryContext, model: &ModelInfo, opts: &RequestOptions) -> Result<Value> {
    super::preflight(&ctx.messages)?;
    opts.tool_choice.check(ctx)?;
    let mut body = Map::new();
    body.insert("model".into(), Value::from(model.model.as_str()));
    body.insert("max_tokens".into(), Value::from(model.max_output_tokens));
    let tools = tools(ctx);
    if !tools.is_empty() {
        body.insert("tools".into(), Value::Array(tools));
    }
    let system = system(ctx);
    if !system.is_empty() {
        body.insert("system".into(), Value::Array(system));
    }
    body.insert("messages".into(), Value::Array(messages(&ctx.messages)));
    if opts.stream {
        body.insert("stream".into(), Value::Bool(true));
    }
    if let Some(t) = super::temperature(opts) {
        body.insert("temperature".into(), t);
    }
    match &opts.tool_choice {
        ToolChoice::Auto => {}
        ToolChoice::None if ctx.tools.is_empty() => {}
        ToolChoice::None => {
            body.insert("tool_choice".into(), json!({ "type": "none" }));
        }
        ToolChoice::Required => {
            body.insert("tool_choice".into(), json!({ "type": "any" }));
        }
        ToolChoice::Tool(name) => {
            body.insert(
                "tool_choice".into(),
                json!({ "type": "tool", "name": name }),
            );
        }
    }
    Ok(Value::Object(body))
}

fn ephemeral() -> Value {
    json!({ "type": "ephemeral" })
}

fn mark(block: Option<&mut Value>) {
    if let Some(Value::Object(block)) = block {
        block.insert("cache_control".into(), ephemeral());
    }
}

fn tools(ctx: &MemoryContext) -> Vec<Value> {
    let mut tools: Vec<Value> = ctx
        .tools
        .iter()
        .map(|t| {
            json!({
                "name": t.name,
                "description": t.description,
                "input_schema": t.input_schema,
            })
        })
        .collect();
    if ctx.cache_points.contains(&CachePoint::AfterTools) {
        mark(tools.last_mut());
    }
    tools
}

fn system(ctx: &MemoryContext) -> Vec<Value> {
    let parts = super::system_parts(ctx);
    let mut blocks: Vec<Value> = parts
        .iter()
        .map(|p| json!({ "type": "text", "text": p.text }))
        .collect();
    let is_summary = |kind: &SystemPartKind| *kind == SystemPartKind::Summary;
    // Recalled passages change every turn: the stable prefix ends before them too.
    let is_volatile = |kind: &SystemPartKind| is_summary(kind) || *kind == SystemPartKind::Recalled;
    if ctx.cache_points.contains(&CachePoint::AfterSystem) {
        let first_summary = parts
            .iter()
            .position(|p| is_volatile(&p.kind))
            .unwrap_or(parts.len());
        if let Some(last) = first_summary.checked_sub(1) {
            mark(blocks.get_mut(last));
        }
    }
    if ctx.cache_points.contains(&CachePoint::AfterSummaries)
        && let Some(last) = parts.iter().rposition(|p| is_summary(&p.kind))
    {
        mark(blocks.get_mut(last));
    }
    blocks
}

/// The two roles of the Messages API.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Speaker {
    User,
    Assistant,
}

fn text(text: impl Into<String>) -> Value {
    json!({ "type": "text", "text": text.into() })
}

fn messages(history: &[ContextMessage]) -> Vec<Value> {
    let mut turns = Turns::new();
    for message in history {
        let speaker = match message.role {
            Role::Assistant => Speaker::Assistant,
            Role::User | Role::Tool | Role::System => Speaker::User,
        };
        let blocks = message
            .content
            .iter()
            .filter_map(|b| block(message.role, b))
            .collect();
        turns.push(speaker, blocks);
    }
    turns
        .into_inner()
        .into_iter()
        .map(|(speaker, mut content)| {
            let role = match speaker {
                Speaker::User => {
                    // Stable: results keep their order, other blocks theirs.
                    content.sort_by_key(|b| b["type"] != "tool_result");
                    "user"
                }
                Speaker::Assistant => "assistant",
            };
            json!({ "role": role, "content": content })
        })
        .collect()
}

fn block(role: Role, block: &ContentBlock) -> Option<Value> {
    match block {
        ContentBlock::Text { text: t } => super::message_text(role, t).map(text),
        ContentBlock::ToolUse {
            id, name, input, ..
        } => Some(json!({
            "type": "tool_use",
            "id": id,
            "name": name,
            "input": input,
        })),
        ContentBlock::ToolResult {
            tool_use_id,
            content,
            is_error,
        } => {
            let mut result = json!({
                "type": "tool_result",
                "tool_use_id": tool_use_id,
                "content": content,
            });
            if *is_error && let Value::Object(r) = &mut result {
                r.insert("is_error".into(), Value::Bool(true));
            }
            Some(result)
        }
        ContentBlock::Thinking {
            text,
            signature: Some(signature),
        } if role == Role::Assistant => Some(json!({
            "type": "thinking",
            "thinking": text,
            "signature": signature,
        })),
        ContentBlock::Thinking { .. } => None,
        ContentBlock::Image { reference, .. } => Some(match super::image_url(role, reference) {
            Some(url) => json!({ "type": "image", "source": { "type": "url", "url": url } }),
            None => text(super::image_placeholder(reference)),
        }),
    }
}
