//! Builds a [`ModelResponse`] from streamed pieces, the same way for every wire format: text and
//! thinking appended to their blocks, tool calls opened with an id (generated when the provider
//! gave none or repeated one) and their argument text collected, then parsed once at the end.
//!
//! This module must never drop a tool call or its raw arguments: arguments that are not a JSON
//! object become `{"_unparsed_arguments": raw}` and the call is listed as malformed (rule 3 of
//! [`super`]).

use std::collections::HashSet;

use pattern_db::ContentBlock;
use serde_json::{Map, Value};

use super::{MalformedToolCall, ModelResponse, ProviderEvent, StopReason, Usage};

/// One block of the answer being built.
#[derive(Debug)]
enum Piece {
    Text(String),
    Thinking {
        text: String,
        signature: Option<String>,
    },
    Call {
        id: String,
        name: String,
        arguments: String,
        /// Arguments given whole at the start (Anthropic's `input`), used when no fragments
        /// follow.
        preset: Option<Value>,
        /// The provider's signature of the call (Gemini's `thoughtSignature`).
        signature: Option<String>,
    },
}

/// An answer under construction.
#[derive(Debug, Default)]
pub(crate) struct Answer {
    pieces: Vec<Piece>,
    ids: HashSet<String>,
    calls: usize,
    pub(crate) usage: Usage,
}

/// Where a block sits in [`Answer`], for formats that address blocks by their own index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Slot(usize);

impl Answer {
    /// Appends text to the last block when it is text, else opens a text block.
    pub(crate) fn text(&mut self, text: &str) -> Option<ProviderEvent> {
        if text.is_empty() {
            return None;
        }
        match self.pieces.last_mut() {
            Some(Piece::Text(t)) => t.push_str(text),
            _ => self.pieces.push(Piece::Text(text.to_owned())),
        }
        Some(ProviderEvent::TextDelta {
            text: text.to_owned(),
        })
    }

    /// Appends reasoning to the last block when it is thinking, else opens a thinking block.
    pub(crate) fn thinking(&mut self, text: &str) -> Option<ProviderEvent> {
        if text.is_empty() {
            return None;
        }
        match self.pieces.last_mut() {
            Some(Piece::Thinking { text: t, .. }) => t.push_str(text),
            _ => self.pieces.push(Piece::Thinking {
                text: text.to_owned(),
                signature: None,
            }),
        }
        Some(ProviderEvent::ThinkingDelta {
            text: text.to_owned(),
        })
    }

    /// Opens a text block (formats with explicit blocks).
    pub(crate) fn open_text(&mut self, initial: &str) -> (Slot, Option<ProviderEvent>) {
        self.pieces.push(Piece::Text(initial.to_owned()));
        let event = (!initial.is_empty()).then(|| ProviderEvent::TextDelta {
            text: initial.to_owned(),
        });
        (Slot(self.pieces.len() - 1), event)
    }

    /// Opens a thinking block (formats with explicit blocks).
    pub(crate) fn open_thinking(
        &mut self,
        initial: &str,
        signature: Option<String>,
    ) -> (Slot, Option<ProviderEvent>) {
        self.pieces.push(Piece::Thinking {
            text: initial.to_owned(),
            signature: signature.filter(|s| !s.is_empty()),
        });
        let event = (!initial.is_empty()).then(|| ProviderEvent::ThinkingDelta {
            text: initial.to_owned(),
        });
        (Slot(self.pieces.len() - 1), event)
    }

    /// Opens a tool call; an empty or repeated id is replaced by a generated `call_<uuid>`.
    /// Returns the block's slot, the call's index among the calls, and its start event.
    pub(crate) fn open_call(
        &mut self,
        id: Option<&str>,
        name: &str,
        preset: Option<Value>,
    ) -> (Slot, usize, ProviderEvent) {
        let id = match id {
            Some(id) if !id.is_empty() && !self.ids.contains(id) => id.to_owned(),
            _ => format!("call_{}", uuid::Uuid::new_v4().simple()),
        };
        self.ids.insert(id.clone());
        let index = self.calls;
        self.calls += 1;
        self.pieces.push(Piece::Call {
            id: id.clone(),
            name: name.to_owned(),
            arguments: String::new(),
            preset,
            signature: None,
        });
        let event = ProviderEvent::ToolCallStarted {
            index,
            id,
            name: name.to_owned(),
        };
        (Slot(self.pieces.len() - 1), index, event)
    }

    /// Appends to the block at `slot`: text, thinking or argument text according to its kind.
    pub(crate) fn append(
        &mut self,
        slot: Slot,
        fragment: &str,
        call_index: Option<usize>,
    ) -> Option<ProviderEvent> {
        if fragment.is_empty() {
            return None;
        }
        match self.pieces.get_mut(slot.0)? {
            Piece::Text(t) => {
                t.push_str(fragment);
                Some(ProviderEvent::TextDelta {
                    text: fragment.to_owned(),
                })
            }
            Piece::Thinking { text, .. } => {
                text.push_str(fragment);
                Some(ProviderEvent::ThinkingDelta {
                    text: fragment.to_owned(),
                })
            }
            Piece::Call { arguments, .. } => {
                arguments.push_str(fragment);
                Some(ProviderEvent::ToolCallDelta {
                    index: call_index.unwrap_or(0),
                    fragment: fragment.to_owned(),
                })
            }
        }
    }

    /// Sets a tool call's signature (Gemini sends it whole, beside the call).
    pub(crate) fn sign_call(&mut self, slot: Slot, signature: &str) {
        if let Some(Piece::Call { signature: s, .. }) = self.pieces.get_mut(slot.0) {
            *s = Some(signature.to_owned());
        }
    }

    /// Adds to a thinking block's signature (Anthropic sends it as a delta).
    pub(crate) fn sign(&mut self, slot: Slot, signature: &str) {
        if let Some(Piece::Thinking { signature: s, .. }) = self.pieces.get_mut(slot.0) {
            s.get_or_insert_with(String::new).push_str(signature);
        }
    }

    /// Whether any tool call was opened.
    pub(crate) fn has_calls(&self) -> bool {
        self.calls > 0
    }

    /// The whole answer (rule 3 of [`super`] for the arguments), as the `Done` event.
    pub(crate) fn finish(self, stop_reason: StopReason) -> ProviderEvent {
        let mut content = Vec::with_capacity(self.pieces.len());
        let mut malformed = Vec::new();
        for piece in self.pieces {
            match piece {
                Piece::Text(text) => {
                    if !text.is_empty() {
                        content.push(ContentBlock::Text { text });
                    }
                }
                Piece::Thinking { text, signature } => {
                    if !text.is_empty() || signature.is_some() {
                        content.push(ContentBlock::Thinking { text, signature });
                    }
                }
                Piece::Call {
                    id,
                    name,
                    arguments,
                    preset,
                    signature,
                } => {
                    let input = match parse_arguments(&arguments, preset) {
                        Ok(input) => input,
                        Err(error) => {
                            malformed.push(MalformedToolCall {
                                id: id.clone(),
                                name: name.clone(),
                                raw_arguments: arguments.clone(),
                                error,
                            });
                            let mut m = Map::new();
                            m.insert("_unparsed_arguments".into(), Value::String(arguments));
                            Value::Object(m)
                        }
                    };
                    content.push(ContentBlock::ToolUse {
                        id,
                        name,
                        input,
                        signature,
                    });
                }
            }
        }
        ProviderEvent::Done {
            response: ModelResponse {
                content,
                stop_reason,
                usage: self.usage,
                malformed_tool_calls: malformed,
            },
        }
    }
}

/// A call's arguments: the collected text as a JSON object; no text means the preset input or
/// `{}`.
fn parse_arguments(raw: &str, preset: Option<Value>) -> Result<Value, String> {
    if raw.trim().is_empty() {
        return match preset {
            None => Ok(Value::Object(Map::new())),
            Some(v @ Value::Object(_)) => Ok(v),
            Some(other) => Err(format!("the arguments are {other}, not a JSON object")),
        };
    }
    match serde_json::from_str::<Value>(raw) {
        Ok(v @ Value::Object(_)) => Ok(v),
        Ok(other) => Err(format!(
            "the arguments are a JSON {}, not an object",
            kind(&other)
        )),
        Err(e) => Err(format!("the arguments are not valid JSON: {e}")),
    }
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use serde_json::json;

    use super::*;

    fn done(a: Answer) -> ModelResponse {
        match a.finish(StopReason::ToolUse) {
            ProviderEvent::Done { response } => response,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn arguments_that_are_not_an_object_are_kept_raw_and_listed() {
        let mut a = Answer::default();
        let (s1, i1, _) = a.open_call(Some("a"), "t", None);
        a.append(s1, "{\"x\": 1", Some(i1));
        let (s2, i2, _) = a.open_call(Some("b"), "t", None);
        a.append(s2, "[1]", Some(i2));
        let (_, _, _) = a.open_call(Some("c"), "t", None);
        let r = done(a);
        assert_eq!(r.malformed_tool_calls.len(), 2);
        assert_eq!(r.malformed_tool_calls[0].raw_arguments, "{\"x\": 1");
        let inputs: Vec<_> = r.tool_calls().map(|(_, _, i)| i.clone()).collect();
        assert_eq!(
            inputs,
            vec![
                json!({"_unparsed_arguments": "{\"x\": 1"}),
                json!({"_unparsed_arguments": "[1]"}),
                json!({}),
            ]
        );
    }

    #[test]
    fn missing_and_repeated_ids_are_generated() {
        let mut a = Answer::default();
        a.open_call(Some("x"), "t", None);
        a.open_call(Some("x"), "t", None);
        a.open_call(None, "t", None);
        let r = done(a);
        let ids: Vec<_> = r.tool_calls().map(|(id, _, _)| id.to_owned()).collect();
        assert_eq!(ids[0], "x");
        assert!(ids[1].starts_with("call_") && ids[2].starts_with("call_"));
        assert_ne!(ids[1], ids[2]);
    }

    #[test]
    fn text_runs_join_and_empty_blocks_are_left_out() {
        let mut a = Answer::default();
        a.thinking("hm");
        a.text("he");
        a.text("llo");
        a.open_text("");
        let r = done(a);
        assert_eq!(
            r.content,
            vec![
                ContentBlock::Thinking {
                    text: "hm".into(),
                    signature: None
                },
                ContentBlock::text("hello")
            ]
        );
    }
}
