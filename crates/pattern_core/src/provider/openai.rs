//! [`OpenAiProvider`]: OpenAI Chat Completions, streamed (`POST {base}/chat/completions` with
//! `stream: true` and `stream_options.include_usage`), also spoken by llama.cpp's server, Ollama
//! and vLLM (set the base URL; the key is then optional and sent as `Authorization: Bearer`).
//!
//! Reading the stream: `choices[0].delta.content` is text, `delta.reasoning_content` (llama.cpp,
//! DeepSeek, vLLM) or `delta.reasoning` is thinking, `delta.tool_calls[]` open calls (by their
//! `index`) and carry argument fragments; `finish_reason` says why it stopped (`stop` with calls,
//! as some compatible servers send, counts as tool use); a chunk with `usage` reports tokens
//! (prompt tokens include cached ones, `prompt_tokens_details.cached_tokens`); `data: [DONE]`
//! ends the answer. A chunk holding `error` is the provider's error. A body that ends with
//! neither `[DONE]` nor a `finish_reason` is truncated.
//!
//! A call forced by response schema ([`ForcedCall::ResponseSchema`], for servers that ignore
//! `tool_choice`) arrives as the answer's text, `{"name", "arguments"}`: it is held back and
//! becomes the answer's one tool call at the end (or stays text if it is not such an object).
//!
//! This module must never shape the request body itself (that is `context_v2::format::openai`)
//! and never log the key.

use std::collections::HashMap;

use async_trait::async_trait;
use context_v2::format::{ForcedCall, RequestOptions};
use context_v2::{MemoryContext, ModelInfo, Provider};
use eventsource_stream::Event;
use reqwest::header::{AUTHORIZATION, HeaderMap};
use serde_json::Value;

use super::answer::{Answer, Slot};
use super::http::{Decoder, Endpoint, ProviderConfig};
use super::{
    GenerateOptions, ModelProvider, ProviderError, ProviderEvent, ProviderStream, StopReason, Usage,
};

/// The default base URL.
pub const OPENAI_BASE_URL: &str = "https://api.openai.com/v1";

/// OpenAI Chat Completions and compatible servers.
#[derive(Debug, Clone)]
pub struct OpenAiProvider {
    endpoint: Endpoint,
    forced_call: ForcedCall,
}

impl OpenAiProvider {
    /// Checks `config` (wire format `OpenAi`; a key unless the base URL is another server's).
    pub fn new(config: ProviderConfig) -> Result<Self, ProviderError> {
        let forced_call = config.forced_call;
        Ok(Self {
            endpoint: Endpoint::new(config, Provider::OpenAi, "openai", OPENAI_BASE_URL)?,
            forced_call,
        })
    }
}

/// The model with `opts`' output limit applied.
pub(crate) fn effective_model(model: &ModelInfo, opts: &GenerateOptions) -> ModelInfo {
    let mut model = model.clone();
    if let Some(max) = opts.max_output_tokens {
        model.max_output_tokens = max;
    }
    model
}

/// Serialises a request body.
pub(crate) fn body_bytes(body: &Value) -> Result<Vec<u8>, ProviderError> {
    serde_json::to_vec(body).map_err(|e| ProviderError::Request(e.to_string()))
}

#[async_trait]
impl ModelProvider for OpenAiProvider {
    fn name(&self) -> &str {
        &self.endpoint.name
    }

    fn model(&self) -> &ModelInfo {
        &self.endpoint.model
    }

    async fn stream(
        &self,
        ctx: &MemoryContext,
        opts: &GenerateOptions,
    ) -> Result<ProviderStream, ProviderError> {
        let model = effective_model(&self.endpoint.model, opts);
        let request = RequestOptions {
            stream: true,
            temperature: opts.temperature,
            tool_choice: opts.tool_choice.clone(),
            forced_call: self.forced_call,
        };
        // Asked as schema-constrained text, the call comes back as the answer's text.
        let call_as_text = self.forced_call == ForcedCall::ResponseSchema
            && context_v2::format::forced_call_schema(ctx, &opts.tool_choice).is_some();
        let body = context_v2::format::openai::request(ctx, &model, &request)
            .map_err(|e| ProviderError::Request(e.to_string()))?;
        let mut headers = HeaderMap::new();
        self.endpoint
            .key_header(&mut headers, AUTHORIZATION, "Bearer ")?;
        self.endpoint
            .stream(
                self.endpoint.url("chat/completions"),
                headers,
                body_bytes(&body)?,
                opts.timeout,
                move || OpenAiDecoder {
                    call_as_text: call_as_text.then(String::new),
                    ..OpenAiDecoder::default()
                },
            )
            .await
    }
}

/// Reads Chat Completions chunks (module doc).
#[derive(Debug, Default)]
pub(crate) struct OpenAiDecoder {
    answer: Answer,
    /// The provider's call index -> (block, our call index).
    calls: HashMap<u64, (Slot, usize)>,
    finish_reason: Option<String>,
    done: bool,
    /// `Some` when the request forced a call by response schema: the answer's text so far,
    /// which is that call (read back in [`Self::done`]), never shown as text.
    call_as_text: Option<String>,
}

impl OpenAiDecoder {
    fn stop_reason(&self) -> StopReason {
        match self.finish_reason.as_deref() {
            Some("length") => StopReason::MaxTokens,
            Some("tool_calls" | "function_call") => StopReason::ToolUse,
            Some("stop") | None if self.answer.has_calls() => StopReason::ToolUse,
            Some("stop") | None => StopReason::EndTurn,
            Some(other) => StopReason::Other(other.to_owned()),
        }
    }

    fn done(&mut self) -> Vec<ProviderEvent> {
        self.done = true;
        let mut out = self.call_from_text();
        let stop = self.stop_reason();
        out.push(std::mem::take(&mut self.answer).finish(stop));
        out
    }

    /// The call a response schema asked for, read from the answer's text: `{"name",
    /// "arguments"}`. Text that is not such an object (cut off at the token limit) stays the
    /// answer's text, as the model wrote it.
    fn call_from_text(&mut self) -> Vec<ProviderEvent> {
        let Some(text) = self.call_as_text.take() else {
            return Vec::new();
        };
        let call = serde_json::from_str::<Value>(&text).ok().and_then(|v| {
            let name = v["name"].as_str()?.to_owned();
            let arguments = v.get("arguments").filter(|a| a.is_object())?.to_string();
            Some((name, arguments))
        });
        match call {
            Some((name, arguments)) => {
                let (slot, index, started) = self.answer.open_call(None, &name, None);
                let mut out = vec![started];
                out.extend(self.answer.append(slot, &arguments, Some(index)));
                out
            }
            None => self.answer.text(&text).into_iter().collect(),
        }
    }
}

/// The provider's in-stream error object as a typed error.
pub(crate) fn stream_error(provider: &str, error: &Value) -> ProviderError {
    let message = error["message"]
        .as_str()
        .or_else(|| error.as_str())
        .unwrap_or("unknown error")
        .to_owned();
    let code = error["code"].as_u64().and_then(|c| u16::try_from(c).ok());
    let kind = error["type"].as_str().unwrap_or("");
    let provider = provider.to_owned();
    match (code, kind) {
        (Some(429), _) | (_, "rate_limit_error" | "rate_limit_exceeded") => {
            ProviderError::RateLimited {
                provider,
                attempts: 1,
                retry_after: None,
            }
        }
        (Some(401 | 403), _) | (_, "authentication_error" | "permission_error") => {
            ProviderError::Unauthorized {
                provider,
                status: code.unwrap_or(401),
                message,
            }
        }
        (Some(c), _) if (400..500).contains(&c) => ProviderError::BadRequest {
            provider,
            status: c,
            message,
        },
        (_, "invalid_request_error" | "not_found_error" | "request_too_large") => {
            ProviderError::BadRequest {
                provider,
                status: code.unwrap_or(400),
                message,
            }
        }
        _ => ProviderError::Server {
            provider,
            status: code.unwrap_or(500),
            attempts: 1,
            message,
        },
    }
}

fn decode_error(provider: &str, what: impl std::fmt::Display) -> ProviderError {
    ProviderError::Decode {
        provider: provider.to_owned(),
        message: what.to_string(),
    }
}

impl Decoder for OpenAiDecoder {
    fn event(
        &mut self,
        provider: &str,
        event: &Event,
    ) -> Result<Vec<ProviderEvent>, ProviderError> {
        let data = event.data.trim();
        if self.done || data.is_empty() {
            return Ok(vec![]);
        }
        if data == "[DONE]" {
            return Ok(self.done());
        }
        let chunk: Value = serde_json::from_str(data)
            .map_err(|e| decode_error(provider, format!("a chunk is not JSON: {e}")))?;
        if event.event == "error" || chunk.get("error").is_some_and(|e| !e.is_null()) {
            let error = chunk.get("error").unwrap_or(&chunk);
            return Err(stream_error(provider, error));
        }
        let mut out = Vec::new();
        if let Some(choice) = chunk["choices"].as_array().and_then(|c| c.first()) {
            let delta = &choice["delta"];
            let thinking = delta["reasoning_content"]
                .as_str()
                .or_else(|| delta["reasoning"].as_str());
            if let Some(t) = thinking {
                out.extend(self.answer.thinking(t));
            }
            if let Some(t) = delta["content"].as_str() {
                match &mut self.call_as_text {
                    Some(call) => call.push_str(t),
                    None => out.extend(self.answer.text(t)),
                }
            }
            for call in delta["tool_calls"].as_array().into_iter().flatten() {
                let key = call["index"].as_u64().unwrap_or(self.calls.len() as u64);
                let (slot, index) = match self.calls.get(&key) {
                    Some(found) => *found,
                    None => {
                        let name = call["function"]["name"].as_str().unwrap_or("");
                        let (slot, index, started) =
                            self.answer.open_call(call["id"].as_str(), name, None);
                        out.push(started);
                        self.calls.insert(key, (slot, index));
                        (slot, index)
                    }
                };
                if let Some(fragment) = call["function"]["arguments"].as_str() {
                    out.extend(self.answer.append(slot, fragment, Some(index)));
                }
            }
            if let Some(reason) = choice["finish_reason"].as_str() {
                self.finish_reason = Some(reason.to_owned());
            }
        }
        if let Some(usage) = chunk.get("usage").filter(|u| u.is_object()) {
            let read = |v: &Value| v.as_u64().unwrap_or(0);
            self.answer.usage = Usage {
                input_tokens: read(&usage["prompt_tokens"]),
                output_tokens: read(&usage["completion_tokens"]),
                cache_read_tokens: read(&usage["prompt_tokens_details"]["cached_tokens"]),
                cache_write_tokens: 0,
            };
            out.push(ProviderEvent::Usage {
                usage: self.answer.usage,
            });
        }
        Ok(out)
    }

    fn finish(&mut self, provider: &str) -> Result<Vec<ProviderEvent>, ProviderError> {
        if self.done {
            return Ok(vec![]);
        }
        if self.finish_reason.is_some() {
            return Ok(self.done());
        }
        Err(ProviderError::Truncated {
            provider: provider.to_owned(),
        })
    }
}

#[cfg(test)]
mod tests {
    //! A call forced by response schema, read back from the answer's text.

    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;
    use crate::provider::ModelResponse;
    use pattern_db::ContentBlock;

    fn chunk(data: &str) -> Event {
        Event {
            event: "message".into(),
            data: data.into(),
            id: String::new(),
            retry: None,
        }
    }

    fn content(text: &str) -> Event {
        chunk(&serde_json::json!({"choices": [{"delta": {"content": text}}]}).to_string())
    }

    fn decode(call_as_text: bool, pieces: &[&str]) -> (Vec<ProviderEvent>, ModelResponse) {
        let mut d = OpenAiDecoder {
            call_as_text: call_as_text.then(String::new),
            ..OpenAiDecoder::default()
        };
        let mut events = Vec::new();
        for p in pieces {
            events.extend(d.event("llama.cpp", &content(p)).unwrap());
        }
        events.extend(
            d.event(
                "llama.cpp",
                &chunk(r#"{"choices": [{"delta": {}, "finish_reason": "stop"}]}"#),
            )
            .unwrap(),
        );
        events.extend(d.event("llama.cpp", &chunk("[DONE]")).unwrap());
        let Some(ProviderEvent::Done { response }) = events.last().cloned() else {
            panic!("no Done: {events:?}");
        };
        (events, response)
    }

    #[test]
    fn a_schema_forced_call_becomes_a_tool_call() {
        let (events, response) = decode(
            true,
            &[
                r#"{"name": "archival_search", "#,
                r#""arguments": {"query": "bees"}}"#,
            ],
        );
        assert!(
            !events
                .iter()
                .any(|e| matches!(e, ProviderEvent::TextDelta { .. })),
            "the call is never shown as text: {events:?}"
        );
        assert_eq!(response.stop_reason, StopReason::ToolUse);
        match response.content.as_slice() {
            [ContentBlock::ToolUse { name, input, .. }] => {
                assert_eq!(name, "archival_search");
                assert_eq!(input, &serde_json::json!({"query": "bees"}));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn text_that_is_no_call_stays_text() {
        // Cut off at the token limit: not an object, so the model's words are kept as written.
        let (_, response) = decode(true, &[r#"{"name": "archival_search", "argu"#]);
        assert_eq!(
            response.content,
            vec![ContentBlock::text(r#"{"name": "archival_search", "argu"#)]
        );
        // Without a forced call, JSON text is just text.
        let (_, response) = decode(false, &[r#"{"name": "x", "arguments": {}}"#]);
        assert_eq!(response.stop_reason, StopReason::EndTurn);
        assert!(matches!(response.content[0], ContentBlock::Text { .. }));
    }
}
