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
//! This module must never shape the request body itself (that is `context_v2::format::openai`)
//! and never log the key.

use std::collections::HashMap;

use async_trait::async_trait;
use context_v2::format::RequestOptions;
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
}

impl OpenAiProvider {
    /// Checks `config` (wire format `OpenAi`; a key unless the base URL is another server's).
    pub fn new(config: ProviderConfig) -> Result<Self, ProviderError> {
        Ok(Self {
            endpoint: Endpoint::new(config, Provider::OpenAi, "openai", OPENAI_BASE_URL)?,
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
        };
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
                OpenAiDecoder::default,
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

    fn done(&mut self) -> ProviderEvent {
        self.done = true;
        let stop = self.stop_reason();
        std::mem::take(&mut self.answer).finish(stop)
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
            return Ok(vec![self.done()]);
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
                out.extend(self.answer.text(t));
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
            return Ok(vec![self.done()]);
        }
        Err(ProviderError::Truncated {
            provider: provider.to_owned(),
        })
    }
}
