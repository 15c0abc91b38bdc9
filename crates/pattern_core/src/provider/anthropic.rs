//! [`AnthropicProvider`]: the Anthropic Messages API, streamed (`POST {base}/messages` with
//! `stream: true`, headers `x-api-key` and `anthropic-version`). The base URL is configurable, so
//! it also talks to llama.cpp's Anthropic-style `/v1/messages`.
//!
//! Reading the stream, by each event's `type`: `message_start` (input and cache usage),
//! `content_block_start` (a `text`, `thinking` or `tool_use` block; other block types, such as
//! `redacted_thinking` or server tools, are skipped with their deltas), `content_block_delta`
//! (`text_delta`, `thinking_delta`, `signature_delta`, `input_json_delta`; others skipped),
//! `content_block_stop`, `message_delta` (stop reason, output usage), `message_stop` (the end),
//! `ping`, and `error` (`overloaded_error` and `api_error` are server errors, retried while no
//! event went out; `rate_limit_error` a rate limit; the rest are refusals). Unknown event types
//! are ignored, as Anthropic's versioning policy asks. A body that ends before `message_stop` is
//! truncated.
//!
//! Usage: Anthropic's `input_tokens` leaves out cached tokens, so the reported input is
//! `input_tokens + cache_read_input_tokens + cache_creation_input_tokens`.
//!
//! This module must never shape the request body itself (that is `context_v2::format::anthropic`)
//! and never log the key.

use std::collections::HashMap;

use async_trait::async_trait;
use context_v2::format::RequestOptions;
use context_v2::{MemoryContext, ModelInfo, Provider};
use eventsource_stream::Event;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use serde_json::Value;

use super::answer::{Answer, Slot};
use super::http::{Decoder, Endpoint, ProviderConfig};
use super::openai::{body_bytes, effective_model, stream_error};
use super::{
    GenerateOptions, ModelProvider, ProviderError, ProviderEvent, ProviderStream, StopReason,
};

/// The default base URL.
pub const ANTHROPIC_BASE_URL: &str = "https://api.anthropic.com/v1";

/// The `anthropic-version` header sent.
pub const ANTHROPIC_VERSION: &str = "2023-06-01";

/// The Anthropic Messages API.
#[derive(Debug, Clone)]
pub struct AnthropicProvider {
    endpoint: Endpoint,
}

impl AnthropicProvider {
    /// Checks `config` (wire format `Anthropic`; a key unless the base URL is another server's).
    pub fn new(config: ProviderConfig) -> Result<Self, ProviderError> {
        Ok(Self {
            endpoint: Endpoint::new(config, Provider::Anthropic, "anthropic", ANTHROPIC_BASE_URL)?,
        })
    }
}

#[async_trait]
impl ModelProvider for AnthropicProvider {
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
            ..RequestOptions::default()
        };
        let body = context_v2::format::anthropic::request(ctx, &model, &request)
            .map_err(|e| ProviderError::Request(e.to_string()))?;
        let mut headers = HeaderMap::new();
        headers.insert(
            HeaderName::from_static("anthropic-version"),
            HeaderValue::from_static(ANTHROPIC_VERSION),
        );
        self.endpoint
            .key_header(&mut headers, HeaderName::from_static("x-api-key"), "")?;
        self.endpoint
            .stream(
                self.endpoint.url("messages"),
                headers,
                body_bytes(&body)?,
                opts.timeout,
                AnthropicDecoder::default,
            )
            .await
    }
}

/// Reads Messages API events (module doc).
#[derive(Debug, Default)]
pub(crate) struct AnthropicDecoder {
    answer: Answer,
    /// Anthropic's block index -> (our block, call index when a tool call).
    blocks: HashMap<u64, (Slot, Option<usize>)>,
    stop_reason: Option<String>,
    done: bool,
}

fn read(v: &Value) -> u64 {
    v.as_u64().unwrap_or(0)
}

impl AnthropicDecoder {
    fn stop_reason(&self) -> StopReason {
        match self.stop_reason.as_deref() {
            Some("end_turn") => StopReason::EndTurn,
            Some("tool_use") => StopReason::ToolUse,
            Some("max_tokens") => StopReason::MaxTokens,
            Some("stop_sequence") => StopReason::StopSequence,
            None if self.answer.has_calls() => StopReason::ToolUse,
            None => StopReason::EndTurn,
            Some(other) => StopReason::Other(other.to_owned()),
        }
    }

    /// Usage fields present in `usage` replace the ones seen so far.
    fn usage(&mut self, usage: &Value) {
        let u = &mut self.answer.usage;
        let mut plain = u
            .input_tokens
            .saturating_sub(u.cache_read_tokens + u.cache_write_tokens);
        if let Some(v) = usage.get("input_tokens").filter(|v| !v.is_null()) {
            plain = read(v);
        }
        if let Some(v) = usage
            .get("cache_read_input_tokens")
            .filter(|v| !v.is_null())
        {
            u.cache_read_tokens = read(v);
        }
        if let Some(v) = usage
            .get("cache_creation_input_tokens")
            .filter(|v| !v.is_null())
        {
            u.cache_write_tokens = read(v);
        }
        if let Some(v) = usage.get("output_tokens").filter(|v| !v.is_null()) {
            u.output_tokens = read(v);
        }
        u.input_tokens = plain + u.cache_read_tokens + u.cache_write_tokens;
    }

    fn block_start(&mut self, index: u64, block: &Value) -> Vec<ProviderEvent> {
        let mut out = Vec::new();
        let str_of = |k: &str| block[k].as_str().unwrap_or("");
        match str_of("type") {
            "text" => {
                let (slot, event) = self.answer.open_text(str_of("text"));
                self.blocks.insert(index, (slot, None));
                out.extend(event);
            }
            "thinking" => {
                let signature = block["signature"].as_str().map(str::to_owned);
                let (slot, event) = self.answer.open_thinking(str_of("thinking"), signature);
                self.blocks.insert(index, (slot, None));
                out.extend(event);
            }
            "tool_use" => {
                let preset = block
                    .get("input")
                    .filter(|i| !i.as_object().is_some_and(|o| o.is_empty()))
                    .cloned();
                let (slot, call, started) =
                    self.answer
                        .open_call(block["id"].as_str(), str_of("name"), preset);
                self.blocks.insert(index, (slot, Some(call)));
                out.push(started);
            }
            _ => {}
        }
        out
    }

    fn block_delta(&mut self, index: u64, delta: &Value) -> Option<ProviderEvent> {
        let (slot, call) = *self.blocks.get(&index)?;
        let str_of = |k: &str| delta[k].as_str().unwrap_or("");
        match str_of("type") {
            "text_delta" => self.answer.append(slot, str_of("text"), None),
            "thinking_delta" => self.answer.append(slot, str_of("thinking"), None),
            "input_json_delta" => self.answer.append(slot, str_of("partial_json"), call),
            "signature_delta" => {
                self.answer.sign(slot, str_of("signature"));
                None
            }
            _ => None,
        }
    }
}

impl Decoder for AnthropicDecoder {
    fn event(
        &mut self,
        provider: &str,
        event: &Event,
    ) -> Result<Vec<ProviderEvent>, ProviderError> {
        if self.done || event.data.trim().is_empty() {
            return Ok(vec![]);
        }
        let data: Value = serde_json::from_str(&event.data).map_err(|e| ProviderError::Decode {
            provider: provider.to_owned(),
            message: format!("an event is not JSON: {e}"),
        })?;
        let kind = data["type"].as_str().unwrap_or(event.event.as_str());
        let index = read(&data["index"]);
        Ok(match kind {
            "message_start" => {
                self.usage(&data["message"]["usage"]);
                vec![]
            }
            "content_block_start" => self.block_start(index, &data["content_block"]),
            "content_block_delta" => self
                .block_delta(index, &data["delta"])
                .into_iter()
                .collect(),
            "message_delta" => {
                if let Some(reason) = data["delta"]["stop_reason"].as_str() {
                    self.stop_reason = Some(reason.to_owned());
                }
                if data["usage"].is_object() {
                    self.usage(&data["usage"]);
                    vec![ProviderEvent::Usage {
                        usage: self.answer.usage,
                    }]
                } else {
                    vec![]
                }
            }
            "message_stop" => {
                self.done = true;
                let stop = self.stop_reason();
                vec![std::mem::take(&mut self.answer).finish(stop)]
            }
            "error" => return Err(anthropic_error(provider, &data["error"])),
            // content_block_stop, ping, and event types added after this was written.
            _ => vec![],
        })
    }

    fn finish(&mut self, provider: &str) -> Result<Vec<ProviderEvent>, ProviderError> {
        if self.done {
            Ok(vec![])
        } else {
            Err(ProviderError::Truncated {
                provider: provider.to_owned(),
            })
        }
    }
}

/// An Anthropic `error` object (`{type, message}`) as a typed error.
fn anthropic_error(provider: &str, error: &Value) -> ProviderError {
    let message = error["message"]
        .as_str()
        .unwrap_or("unknown error")
        .to_owned();
    match error["type"].as_str().unwrap_or("") {
        "overloaded_error" => ProviderError::Server {
            provider: provider.to_owned(),
            status: 529,
            attempts: 1,
            message,
        },
        "api_error" => ProviderError::Server {
            provider: provider.to_owned(),
            status: 500,
            attempts: 1,
            message,
        },
        _ => stream_error(provider, error),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;
    use crate::provider::Usage;

    fn ev(data: &str) -> Event {
        Event {
            event: "message".into(),
            data: data.into(),
            id: String::new(),
            retry: None,
        }
    }

    #[test]
    fn cached_tokens_count_as_input() {
        let mut d = AnthropicDecoder::default();
        assert_eq!(d.answer.usage, Usage::default());
        d.event(
            "a",
            &ev(r#"{"type":"message_start","message":{"usage":{"input_tokens":5,"cache_read_input_tokens":100,"cache_creation_input_tokens":20,"output_tokens":1}}}"#),
        )
        .unwrap();
        d.event(
            "a",
            &ev(r#"{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":9}}"#),
        )
        .unwrap();
        assert_eq!(
            d.answer.usage,
            Usage {
                input_tokens: 125,
                output_tokens: 9,
                cache_read_tokens: 100,
                cache_write_tokens: 20
            }
        );
    }
}
