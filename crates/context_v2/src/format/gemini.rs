//! The Google Gemini `generateContent` request body.
//!
//! Layout, stable prefix first:
//!
//! - `systemInstruction: {parts: [{text}, ...]}`, one part per [`crate::SystemPart`] with text, in
//!   order, then the transcript of rule 3 when there is one; left out when there are none.
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
//! 3. The first turn must be `user` (Gemini refuses a `model` turn first). No user text is
//!    invented for it: the messages before the first user-side message that carries no tool
//!    result (the model's opening turns and the results of their calls) are sent as one more
//!    system instruction part, a transcript of what was stored, one line per block, labelled with
//!    its stored role as system messages are: `[assistant] TEXT`, `[assistant calls NAME] ARGS`,
//!    `[tool result NAME] CONTENT` (`[tool error NAME]` when it failed), images as their
//!    placeholder; thinking is left out. `contents` starts with the user turn after them. A
//!    history with no such user turn has empty `contents` (as an empty history: nothing to
//!    answer).
//! 4. Parts: text as `{text}`; calls as `{functionCall: {name, args}}`; results as
//!    `{functionResponse: {name, response: {content, is_error}}}` (`is_error` only when true) in
//!    the `user` turn after the call; images per the [`super`] rules, a URL as
//!    `{fileData: {mimeType, fileUri}}`. Thinking text is dropped. A call's stored signature
//!    (Gemini's `thoughtSignature`, [`ContentBlock::ToolUse`]'s `signature`) goes back beside its
//!    call, `{functionCall, thoughtSignature}`, as Gemini 3 requires on function-call turns.
//! 5. Gemini names a result by its function's name, not by a call id, so a result is paired with
//!    its call by order: results come in call order right after the calls (which `assemble`
//!    guarantees and [`crate::validate()`] checks). The name is that of the call with the
//!    result's id earlier in the history; a result whose call cannot be found is refused with
//!    [`Error::OrphanToolResult`].
//!
//! This module must never emit two consecutive turns of one role, a first turn that is not the
//! user's, a function response that does not follow its call, or text the history does not hold
//! (beyond the role labels of rule 3 and the `[system] ` prefix).

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
    let (opening, history) = split_opening(&ctx.messages);
    let mut system: Vec<Value> = super::system_parts(ctx)
        .iter()
        .map(|p| json!({ "text": p.text }))
        .collect();
    if let Some(transcript) = transcript(opening) {
        system.push(json!({ "text": transcript }));
    }
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
    body.insert("contents".into(), Value::Array(contents(history)?));
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

/// Rule 3: the model's opening messages (before the first user-side message that answers no
/// call) and the rest of the history.
fn split_opening(history: &[ContextMessage]) -> (&[ContextMessage], &[ContextMessage]) {
    let first_user = history.iter().position(|m| {
        m.role != Role::Assistant
            && !m
                .content
                .iter()
                .any(|b| matches!(b, ContentBlock::ToolResult { .. }))
    });
    history.split_at(first_user.unwrap_or(history.len()))
}

/// Rule 3: the opening messages as labelled lines; `None` when there are none with content.
fn transcript(opening: &[ContextMessage]) -> Option<String> {
    let mut names: HashMap<&str, &str> = HashMap::new();
    let mut lines = Vec::new();
    for message in opening {
        let speaker = match message.role {
            Role::Assistant => "assistant",
            Role::User => "user",
            Role::Tool => "tool",
            Role::System => "system",
        };
        for block in &message.content {
            match block {
                ContentBlock::Text { text } if !text.is_empty() => {
                    lines.push(format!("[{speaker}] {text}"));
                }
                ContentBlock::Text { .. } | ContentBlock::Thinking { .. } => {}
                ContentBlock::ToolUse {
                    id, name, input, ..
                } => {
                    names.insert(id, name);
                    lines.push(format!("[{speaker} calls {name}] {input}"));
                }
                ContentBlock::ToolResult {
                    tool_use_id,
                    content,
                    is_error,
                } => {
                    let name = names.get(tool_use_id.as_str()).copied().unwrap_or("?");
                    let kind = if *is_error { "error" } else { "result" };
                    lines.push(format!("[tool {kind} {name}] {content}"));
                }
                ContentBlock::Image { reference, .. } => {
                    lines.push(format!(
                        "[{speaker}] {}",
                        super::image_placeholder(reference)
                    ));
                }
            }
        }
    }
    (!lines.is_empty()).then(|| lines.join("\n"))
}

/// Rules 1, 2, 4 and 5, for the history after the opening (rule 3).
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
                ContentBlock::ToolUse {
                    id,
                    name,
                    input,
                    signature,
                } => {
                    names.insert(id, name);
                    let mut part = json!({ "functionCall": { "name": name, "args": input } });
                    if let (Some(signature), Value::Object(map)) = (signature, &mut part) {
                        map.insert("thoughtSignature".into(), Value::from(signature.as_str()));
                    }
                    Some(part)
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
