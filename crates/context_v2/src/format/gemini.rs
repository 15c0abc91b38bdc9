//! The Google Gemini `generateContent` request body.
//!
//! Layout, stable prefix first:
//!
//! - `systemInstruction: {parts: [{text}, ...]}`, one part per [`crate::SystemPart`] with text, in
//!   order; left out when there are none.
//! - `tools: [{functionDeclarations: [{name, description, parameters}]}]`, left out when there
//!   are none.
//! - `contents`: the history, roles `user` and `model` only.
//! - `generationConfig: {maxOutputTokens, temperature}` (`temperature` only when set).
//! - `toolConfig: {functionCallingConfig: {mode: "ANY", allowedFunctionNames?}}` only when a
//!   call is forced (`allowedFunctionNames: [name]` for one tool).
//!
//! The model name and streaming are not part of the body: they choose the method called, see
//! [`method`] (`models/{model}:generateContent`, or `:streamGenerateContent?alt=sse`).
//!
//! History rules:
//!
//! 1. `assistant` messages become `model` turns; `user`, `tool` and `system` messages become
//!    `user` turns (system text prefixed `"[system] "`).
//! 2. Strict alternation: consecutive turns of one role are merged into one turn, parts
//!    concatenated in order.
//! 3. The first turn must be `user`: a history opening with the model gets a user turn
//!    `"(conversation continues)"` first.
//! 4. Parts: text as `{text}`; calls as `{functionCall: {name, args}}`; results as
//!    `{functionResponse: {name, response: {content, is_error}}}` (`is_error` only when true) in
//!    the `user` turn after the call; images per the [`super`] rules, a URL as
//!    `{fileData: {mimeType, fileUri}}`. Thinking is dropped (Gemini's thought signatures are not
//!    stored).
//! 5. Gemini names a result by its function's name, not by a call id, so a result is paired with
//!    its call by order: results come in call order right after the calls (which `assemble`
//!    guarantees and [`crate::validate()`] checks). The name is that of the call with the
//!    result's id earlier in the history; a result whose call cannot be found is refused with
//!    [`Error::OrphanToolResult`].
//!
//! This module must never emit two consecutive turns of one role, a first turn that is not the
//! user's, or a function response that does not follow its call.

use std::collections::HashMap;

use pattern_db::{ContentBlock, Role};
use serde_json::{Map, Value, json};

use super::{RequestOptions, ToolChoice, Turns};
use crate::assemble::ContextMessage;
use crate::error::{Error, Result};
use crate::types::{MemoryContext, ModelInfo};

/// The `generateContent` request body for `ctx`, following the module doc.
pub fn request(ctx: &MemoryContext, model: &ModelInfo, opts: &RequestOptions) -> Result<Value> {
    super::preflight(&ctx.messages)?;
    opts.tool_choice.check(ctx)?;
    let mut body = Map::new();
    let system: Vec<Value> = super::system_parts(ctx)
        .iter()
        .map(|p| json!({ "text": p.text }))
        .collect();
    if !system.is_empty() {
        body.insert("systemInstruction".into(), json!({ "parts": system }));
    }
    if !ctx.tools.is_empty() {
        let declarations: Vec<Value> = ctx
            .tools
            .iter()
            .map(|t| {
                json!({
                    "name": t.name,
                    "description": t.description,
                    "parameters": t.input_schema,
                })
            })
            .collect();
        body.insert(
            "tools".into(),
            json!([{ "functionDeclarations": declarations }]),
        );
    }
    match &opts.tool_choice {
        ToolChoice::Auto => {}
        ToolChoice::None if ctx.tools.is_empty() => {}
        ToolChoice::None => {
            body.insert(
                "toolConfig".into(),
                json!({ "functionCallingConfig": { "mode": "NONE" } }),
            );
        }
        ToolChoice::Required => {
            body.insert(
                "toolConfig".into(),
                json!({ "functionCallingConfig": { "mode": "ANY" } }),
            );
        }
        ToolChoice::Tool(name) => {
            body.insert(
                "toolConfig".into(),
                json!({ "functionCallingConfig": {
                    "mode": "ANY",
                    "allowedFunctionNames": [name],
                } }),
            );
        }
    }
    body.insert("contents".into(), Value::Array(contents(&ctx.messages)?));
    let mut config = Map::new();
    config.insert(
        "maxOutputTokens".into(),
        Value::from(model.max_output_tokens),
    );
    if let Some(t) = super::temperature(opts) {
        config.insert("temperature".into(), t);
    }
    body.insert("generationConfig".into(), Value::Object(config));
    Ok(Value::Object(body))
}

/// The method a request body is posted to, relative to the API version's base URL:
/// `models/{model}:generateContent`, or `models/{model}:streamGenerateContent?alt=sse` when
/// streaming. A model name already starting with `models/` is not prefixed again.
pub fn method(model: &ModelInfo, opts: &RequestOptions) -> String {
    let name = model.model.strip_prefix("models/").unwrap_or(&model.model);
    if opts.stream {
        format!("models/{name}:streamGenerateContent?alt=sse")
    } else {
        format!("models/{name}:generateContent")
    }
}

/// The two roles of `contents`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Speaker {
    User,
    Model,
}

/// Rules 1 to 5.
fn contents(history: &[ContextMessage]) -> Result<Vec<Value>> {
    let mut names: HashMap<&str, &str> = HashMap::new();
    let mut turns = Turns::new();
    for message in history {
        let role = message.role;
        let mut parts = Vec::new();
        for block in &message.content {
            let part = match block {
                ContentBlock::Text { text } => {
                    super::message_text(role, text).map(|text| json!({ "text": text }))
                }
                ContentBlock::ToolUse { id, name, input } => {
                    names.insert(id, name);
                    Some(json!({ "functionCall": { "name": name, "args": input } }))
                }
                ContentBlock::ToolResult {
                    tool_use_id,
                    content,
                    is_error,
                } => {
                    let name =
                        names
                            .get(tool_use_id.as_str())
                            .ok_or_else(|| Error::OrphanToolResult {
                                tool_use_id: tool_use_id.clone(),
                            })?;
                    let mut response = Map::new();
                    response.insert("content".into(), Value::from(content.as_str()));
                    if *is_error {
                        response.insert("is_error".into(), Value::Bool(true));
                    }
                    Some(json!({ "functionResponse": { "name": name, "response": response } }))
                }
                ContentBlock::Thinking { .. } => None,
                ContentBlock::Image {
                    media_type,
                    reference,
                } => Some(match super::image_url(role, reference) {
                    Some(url) => json!({ "fileData": { "mimeType": media_type, "fileUri": url } }),
                    None => json!({ "text": super::image_placeholder(reference) }),
                }),
            };
            parts.extend(part);
        }
        let speaker = match role {
            Role::Assistant => Speaker::Model,
            Role::User | Role::Tool | Role::System => Speaker::User,
        };
        turns.push(speaker, parts);
    }
    turns.start_with(
        Speaker::User,
        json!({ "text": super::CONVERSATION_CONTINUES }),
    );
    Ok(turns
        .into_inner()
        .into_iter()
        .map(|(speaker, parts)| {
            let role = match speaker {
                Speaker::User => "user",
                Speaker::Model => "model",
            };
            json!({ "role": role, "parts": parts })
        })
        .collect())
}

#[cfg(test)]
mod tests {
    //! What the public entry point cannot reach: a result whose call is not in the history,
    //! which `validate` refuses before `contents` runs.

    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use pattern_db::SnowflakeId;

    use super::*;

    #[test]
    fn a_result_without_its_call_is_refused() {
        let orphan = ContextMessage {
            batch_id: SnowflakeId(1),
            position: SnowflakeId(1),
            role: Role::Tool,
            content: vec![ContentBlock::tool_result("gone", "42", false)],
        };
        let err = contents(&[orphan]).unwrap_err();
        assert!(
            matches!(err, Error::OrphanToolResult { ref tool_use_id } if tool_use_id == "gone")
        );
    }

    #[test]
    fn the_method_names_the_model_once() {
        let model = ModelInfo {
            provider: crate::Provider::Gemini,
            model: "models/gemini-2.5-flash".into(),
            context_window: 1_000_000,
            max_output_tokens: 8192,
        };
        let plain = RequestOptions::default();
        let stream = RequestOptions {
            stream: true,
            ..plain.clone()
        };
        assert_eq!(
            method(&model, &plain),
            "models/gemini-2.5-flash:generateContent"
        );
        let model = ModelInfo {
            model: "gemini-2.5-flash".into(),
            ..model
        };
        assert_eq!(
            method(&model, &stream),
            "models/gemini-2.5-flash:streamGenerateContent?alt=sse"
        );
    }
}
