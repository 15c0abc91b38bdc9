//! Provider request formatting: a built [`MemoryContext`] in, the JSON body of one provider's
//! request out.
//!
//! [`request`] picks the format from [`ModelInfo::provider`]; [`anthropic::request`],
//! [`openai::request`] and [`gemini::request`] can be called directly. Every body puts the stable
//! prefix first (tools, instructions, memory blocks, tool rules, summaries) and the history last,
//! so that prompt caches hit.
//!
//! Rules shared by the three formats:
//!
//! 1. **Checked first.** The messages go through [`crate::validate()`] again (defence in depth:
//!    a hand-built or edited context must not reach a provider either; its error is returned
//!    unchanged). Then every tool call must sit in an `assistant` message and every result in a
//!    `user` or `tool` one, which `validate` leaves to assembly; otherwise
//!    [`Error::DamagedBatch`] naming the message's batch, with [`Damage::CallInWrongRole`] or
//!    [`Damage::ResultInWrongRole`].
//! 2. **System-role messages in the history** become user text prefixed `"[system] "`: not every
//!    provider (nor every OpenAI-compatible server) accepts a system turn in mid-conversation.
//! 3. **Images** are references, never bytes. A reference starting with `http://` or `https://`
//!    in a message that is not the assistant's is sent as an image URL; any other reference (a
//!    file path, a content hash) cannot be fetched by the provider, and providers take no images
//!    in the model's own turns, so those are sent as the text `"[image: <reference>]"`: the model
//!    knows an image was there.
//! 4. **Empty text blocks are left out** (some providers reject them), and a message left with
//!    nothing to send is left out whole.
//! 5. **Thinking blocks** are the model's own reasoning: only Anthropic takes them back, and only
//!    signed and in assistant messages; see each format's module doc.
//! 6. **Temperature** is written as the decimal the `f32` prints as (`0.7`, not
//!    `0.699999988079071`); a temperature that is not finite is not a temperature and is left
//!    out, so the provider's default applies.
//!
//! 7. **Tool choice** ([`ToolChoice`]) is written only when a call is forced, and checked first:
//!    forcing a call with no tools offered, or naming a tool not offered, is
//!    [`Error::UnknownToolChoice`] (providers refuse such a request). For OpenAI-compatible
//!    servers that constrain output by schema instead, [`ForcedCall::ResponseSchema`] asks for
//!    the call as schema-constrained JSON text ([`forced_call_schema`]).
//!
//! **Nothing is invented.** No format adds a turn or text the history does not hold. Anthropic
//! and OpenAI accept a history that opens with the assistant, and get it as it is. Gemini
//! requires the first turn to be the user's: there, the model's turns before the first user turn
//! (with the results of their calls) go into the system instruction as a transcript of what
//! was stored, each line labelled with its stored role the way system messages are (see
//! [`gemini`], rule 3). An empty history stays empty (nothing to answer; providers refuse such a
//! request, so callers send one only when there is something to answer).
//!
//! This module must never change the history it formats beyond what the wire format demands
//! (no reordering across tool pairs, no synthesised tool results), never send a context that
//! failed [`crate::validate()`], and never perform I/O: it returns JSON, the caller sends it.

pub mod anthropic;
pub mod gemini;
pub mod openai;

use pattern_db::Role;
use serde_json::{Number, Value};

use crate::assemble::ContextMessage;
use crate::error::{Damage, Error, Result};
use crate::types::{MemoryContext, ModelInfo, Provider, SystemPart};

/// Options of one request that are not part of the context.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RequestOptions {
    /// Ask for a streamed response (Anthropic, OpenAI: a body field; Gemini: a different method,
    /// see [`gemini::method`]).
    pub stream: bool,
    /// Sampling temperature; `None` leaves the provider's default. Not finite: left out.
    pub temperature: Option<f32>,
    /// Whether the model must call a tool (rule 7).
    pub tool_choice: ToolChoice,
    /// How a forced call is asked for (OpenAI format only; rule 7).
    pub forced_call: ForcedCall,
}

/// How an OpenAI-compatible server is asked for a forced tool call.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ForcedCall {
    /// `tool_choice` (OpenAI, vLLM, most servers).
    #[default]
    ToolChoice,
    /// For servers that ignore `tool_choice` but constrain output to a JSON schema (the
    /// llama.cpp build the local model server uses): `response_format` with a schema that
    /// admits exactly one call `{"name": <tool>, "arguments": <that tool's input schema>}`; the
    /// answer's text is that call (the provider reads it back as a tool call).
    ResponseSchema,
}

/// Whether, and which, tool the model must call in its answer (rule 7).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case", tag = "type", content = "name")]
pub enum ToolChoice {
    /// The model decides: nothing is written, every provider's default.
    #[default]
    Auto,
    /// The model must call one of the offered tools (OpenAI `"required"`, Anthropic `any`,
    /// Gemini mode `ANY`). Servers that constrain output with a grammar (llama.cpp) then only
    /// let a well-formed call through.
    Required,
    /// The model must call this tool.
    Tool(String),
    /// The model must answer in text, calling no tool (OpenAI `"none"`, Anthropic
    /// `{type: "none"}`, Gemini mode `NONE`; with [`ForcedCall::ResponseSchema`] the tools are
    /// left out of the request). The tools stay described where the format allows, so a
    /// history with calls still reads right.
    None,
}

/// The JSON schema of one forced call as text: `{"name", "arguments"}` where `name` is one of
/// the tools `choice` allows and `arguments` follows that tool's input schema (one `anyOf`
/// branch per tool). `None` when nothing is forced.
pub fn forced_call_schema(ctx: &MemoryContext, choice: &ToolChoice) -> Option<Value> {
    let allowed = |name: &str| match choice {
        ToolChoice::Auto | ToolChoice::None => false,
        ToolChoice::Required => true,
        ToolChoice::Tool(tool) => tool == name,
    };
    let branches: Vec<Value> = ctx
        .tools
        .iter()
        .filter(|t| allowed(&t.name))
        .map(|t| {
            serde_json::json!({
                "type": "object",
                "properties": {
                    "name": { "type": "string", "enum": [t.name] },
                    "arguments": t.input_schema,
                },
                "required": ["name", "arguments"],
                "additionalProperties": false,
            })
        })
        .collect();
    match branches.len() {
        0 => None,
        1 => branches.into_iter().next(),
        _ => Some(serde_json::json!({ "anyOf": branches })),
    }
}

impl ToolChoice {
    /// Checks the choice against the offered tools: a forced call needs a tool to call.
    pub(crate) fn check(&self, ctx: &MemoryContext) -> Result<()> {
        match self {
            ToolChoice::Auto | ToolChoice::None => Ok(()),
            ToolChoice::Required if ctx.tools.is_empty() => Err(Error::UnknownToolChoice {
                tool: "*".to_owned(),
            }),
            ToolChoice::Required => Ok(()),
            ToolChoice::Tool(name) if ctx.tools.iter().any(|t| &t.name == name) => Ok(()),
            ToolChoice::Tool(name) => Err(Error::UnknownToolChoice { tool: name.clone() }),
        }
    }
}

/// The JSON request body for `model`'s provider, following the module doc.
pub fn request(ctx: &MemoryContext, model: &ModelInfo, opts: &RequestOptions) -> Result<Value> {
    match model.provider {
        Provider::Anthropic => anthropic::request(ctx, model, opts),
        Provider::OpenAi => openai::request(ctx, model, opts),
        Provider::Gemini => gemini::request(ctx, model, opts),
    }
}

/// Prefix of the text of a system-role history message (rule 2).
pub(crate) const SYSTEM_PREFIX: &str = "[system] ";

/// Rule 1: the checks every format runs before it writes anything.
pub(crate) fn preflight(messages: &[ContextMessage]) -> Result<()> {
    crate::validate(messages)?;
    for message in messages {
        let misplaced = match message.role {
            Role::Assistant => message
                .tool_result_ids()
                .next()
                .map(|id| (id, Damage::ResultInWrongRole(message.role))),
            Role::User | Role::Tool => message
                .tool_use_ids()
                .next()
                .map(|id| (id, Damage::CallInWrongRole(message.role))),
            Role::System => message
                .tool_use_ids()
                .next()
                .map(|id| (id, Damage::CallInWrongRole(message.role)))
                .or_else(|| {
                    message
                        .tool_result_ids()
                        .next()
                        .map(|id| (id, Damage::ResultInWrongRole(message.role)))
                }),
        };
        if let Some((id, damage)) = misplaced {
            return Err(Error::DamagedBatch {
                batch: message.batch_id,
                tool_use_id: id.to_owned(),
                damage,
            });
        }
    }
    Ok(())
}

/// The text of a text block of a `role` message as sent: prefixed for system messages (rule 2).
/// `None` for an empty text (rule 4).
pub(crate) fn message_text(role: Role, text: &str) -> Option<String> {
    if text.is_empty() {
        None
    } else if role == Role::System {
        Some(format!("{SYSTEM_PREFIX}{text}"))
    } else {
        Some(text.to_owned())
    }
}

/// The URL to send for an image of a `role` message, or `None` when it goes as
/// [`image_placeholder`] text (rule 3).
pub(crate) fn image_url(role: Role, reference: &str) -> Option<&str> {
    (role != Role::Assistant && is_fetchable(reference)).then_some(reference)
}

/// Whether an image reference is a URL the provider can fetch (rule 3).
pub(crate) fn is_fetchable(reference: &str) -> bool {
    ["http://", "https://"].iter().any(|scheme| {
        reference
            .get(..scheme.len())
            .is_some_and(|start| start.eq_ignore_ascii_case(scheme))
    })
}

/// The text standing for an image the provider cannot fetch (rule 3).
pub(crate) fn image_placeholder(reference: &str) -> String {
    format!("[image: {reference}]")
}

/// Rule 6: the temperature as a JSON number, if there is one to send.
pub(crate) fn temperature(opts: &RequestOptions) -> Option<Value> {
    let t = opts.temperature.filter(|t| t.is_finite())?;
    // The shortest decimal that reads back as this f32, read as an f64.
    let decimal: f64 = t.to_string().parse().ok()?;
    Number::from_f64(decimal).map(Value::Number)
}

/// Turns of a conversation where consecutive turns of one role are merged, as Anthropic and
/// Gemini require. `R` is the provider's role; parts are already in the provider's format.
#[derive(Debug)]
pub(crate) struct Turns<R> {
    turns: Vec<(R, Vec<Value>)>,
}

impl<R: PartialEq + Copy> Turns<R> {
    pub(crate) fn new() -> Self {
        Self { turns: Vec::new() }
    }

    /// Appends `parts` as a turn of `role`, or to the last turn if it has the same role. Nothing
    /// is added for no parts (rule 4).
    pub(crate) fn push(&mut self, role: R, parts: Vec<Value>) {
        if parts.is_empty() {
            return;
        }
        match self.turns.last_mut() {
            Some((last, existing)) if *last == role => existing.extend(parts),
            _ => self.turns.push((role, parts)),
        }
    }

    /// The turns, in order.
    pub(crate) fn into_inner(self) -> Vec<(R, Vec<Value>)> {
        self.turns
    }
}

/// The system parts to send, in order: those with text (rule 4).
pub(crate) fn system_parts(ctx: &MemoryContext) -> Vec<&SystemPart> {
    ctx.system.iter().filter(|p| !p.text.is_empty()).collect()
}

#[cfg(test)]
mod tests {
    //! The shared helpers.

    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;

    #[test]
    fn temperatures_are_written_as_printed() {
        let t = |v| {
            temperature(&RequestOptions {
                stream: false,
                temperature: v,
                ..RequestOptions::default()
            })
        };
        assert_eq!(t(Some(0.7)), Some(serde_json::json!(0.7)));
        assert_eq!(t(Some(1.0)), Some(serde_json::json!(1.0)));
        assert_eq!(t(Some(f32::NAN)), None);
        assert_eq!(t(Some(f32::INFINITY)), None);
        assert_eq!(t(None), None);
    }

    #[test]
    fn only_http_references_are_fetchable() {
        assert!(is_fetchable("https://example.com/a.png"));
        assert!(is_fetchable("HTTP://example.com/a.png"));
        assert!(!is_fetchable("/tmp/a.png"));
        assert!(!is_fetchable("sha256:abc"));
        assert!(!is_fetchable("http"));
        assert!(!is_fetchable("ftp://x"));
    }

    #[test]
    fn turns_merge_and_never_hold_an_empty_turn() {
        let mut turns = Turns::new();
        turns.push('a', vec![Value::from(1)]);
        turns.push('a', vec![Value::from(2)]);
        turns.push('u', vec![]);
        turns.push('u', vec![Value::from(3)]);
        assert_eq!(
            turns.into_inner(),
            vec![
                ('a', vec![Value::from(1), Value::from(2)]),
                ('u', vec![Value::from(3)]),
            ]
        );
        let mut empty: Turns<char> = Turns::new();
        empty.push('u', vec![]);
        assert!(empty.into_inner().is_empty());
    }
}
