//! [`GeminiProvider`]: Google Gemini, streamed (`POST {base}/models/{model}:streamGenerateContent?alt=sse`,
//! the key in the `x-goog-api-key` header, never in the URL).
//!
//! Reading the stream: every event is a whole `GenerateContentResponse`. In
//! `candidates[0].content.parts`, `{text}` is text, `{text, thought: true}` is thinking, and
//! `{functionCall: {name, args, id?}}` is a whole tool call: it is reported as a start and one
//! argument fragment (the serialised `args`), and gets a generated `call_<uuid>` id when Gemini
//! gives none (rule 2 of [`super`]). A `thoughtSignature` beside a call is kept with it
//! (`ContentBlock::ToolUse::signature`), so it is stored with the step and sent back with the call
//! (Gemini 3 refuses a function-call turn without its signature); a signature on a text part is
//! not kept (Gemini documents returning it as recommended, not required). `finishReason` says why it stopped (`STOP` with calls counts
//! as tool use, `MAX_TOKENS` as the limit, anything else verbatim); `usageMetadata` reports tokens
//! (`promptTokenCount` includes cached ones; thoughts count as output). A prompt refused by
//! `promptFeedback.blockReason` ends the answer with that reason. Gemini has no end marker: a
//! body that ends before any `finishReason` is truncated.
//!
//! This module must never shape the request body itself (that is `context_v2::format::gemini`),
//! never put the key in a URL, and never log it.

use async_trait::async_trait;
use context_v2::format::RequestOptions;
use context_v2::{MemoryContext, ModelInfo, Provider};
use eventsource_stream::Event;
use reqwest::header::{HeaderMap, HeaderName};
use serde_json::Value;

use super::answer::Answer;
use super::http::{Decoder, Endpoint, ProviderConfig};
use super::openai::{body_bytes, effective_model, stream_error};
use super::{
    GenerateOptions, ModelProvider, ProviderError, ProviderEvent, ProviderStream, StopReason, Usage,
};

/// The default base URL.
pub const GEMINI_BASE_URL: &str = "https://generativelanguage.googleapis.com/v1beta";

/// Google Gemini.
#[derive(Debug, Clone)]
pub struct GeminiProvider {
    endpoint: Endpoint,
}

impl GeminiProvider {
    /// Checks `config` (wire format `Gemini`; a key unless the base URL is another server's).
    pub fn new(config: ProviderConfig) -> Result<Self, ProviderError> {
        Ok(Self {
            endpoint: Endpoint::new(config, Provider::Gemini, "gemini", GEMINI_BASE_URL)?,
        })
    }
}

#[async_trait]
impl ModelProvider for GeminiProvider {
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
        let body = context_v2::format::gemini::request(ctx, &model, &request)
            .map_err(|e| ProviderError::Request(e.to_string()))?;
        let method = context_v2::format::gemini::method(&model, &request);
        let mut headers = HeaderMap::new();
        self.endpoint
            .key_header(&mut headers, HeaderName::from_static("x-goog-api-key"), "")?;
        self.endpoint
            .stream(
                self.endpoint.url(&method),
                headers,
                body_bytes(&body)?,
                opts.timeout,
                GeminiDecoder::default,
            )
            .await
    }
}

/// Reads `streamGenerateContent` events (module doc).
#[derive(Debug, Default)]
pub(crate) struct GeminiDecoder {
    answer: Answer,
    finish_reason: Option<String>,
}

impl GeminiDecoder {
    fn stop_reason(&self) -> StopReason {
        match self.finish_reason.as_deref() {
            Some("STOP") | None if self.answer.has_calls() => StopReason::ToolUse,
            Some("STOP") | None => StopReason::EndTurn,
            Some("MAX_TOKENS") => StopReason::MaxTokens,
            Some(other) => StopReason::Other(other.to_owned()),
        }
    }
}

impl Decoder for GeminiDecoder {
    fn event(
        &mut self,
        provider: &str,
        event: &Event,
    ) -> Result<Vec<ProviderEvent>, ProviderError> {
        if event.data.trim().is_empty() {
            return Ok(vec![]);
        }
        let chunk: Value =
            serde_json::from_str(&event.data).map_err(|e| ProviderError::Decode {
                provider: provider.to_owned(),
                message: format!("an event is not JSON: {e}"),
            })?;
        if let Some(error) = chunk.get("error").filter(|e| e.is_object()) {
            return Err(stream_error(provider, error));
        }
        let mut out = Vec::new();
        let candidate = &chunk["candidates"][0];
        for part in candidate["content"]["parts"]
            .as_array()
            .into_iter()
            .flatten()
        {
            if let Some(call) = part.get("functionCall") {
                let name = call["name"].as_str().unwrap_or("");
                let args = call.get("args").cloned().unwrap_or(Value::Null);
                let raw = match &args {
                    Value::Null => String::new(),
                    other => other.to_string(),
                };
                let (slot, index, started) = self.answer.open_call(call["id"].as_str(), name, None);
                if let Some(signature) = part["thoughtSignature"].as_str() {
                    self.answer.sign_call(slot, signature);
                }
                out.push(started);
                out.extend(self.answer.append(slot, &raw, Some(index)));
            } else if let Some(text) = part["text"].as_str() {
                if part["thought"].as_bool() == Some(true) {
                    out.extend(self.answer.thinking(text));
                } else {
                    out.extend(self.answer.text(text));
                }
            }
        }
        if let Some(reason) = candidate["finishReason"].as_str() {
            self.finish_reason = Some(reason.to_owned());
        }
        if let Some(reason) = chunk["promptFeedback"]["blockReason"].as_str() {
            self.finish_reason = Some(format!("BLOCKED: {reason}"));
        }
        if let Some(meta) = chunk.get("usageMetadata").filter(|m| m.is_object()) {
            let read = |k: &str| meta[k].as_u64().unwrap_or(0);
            self.answer.usage = Usage {
                input_tokens: read("promptTokenCount"),
                output_tokens: read("candidatesTokenCount") + read("thoughtsTokenCount"),
                cache_read_tokens: read("cachedContentTokenCount"),
                cache_write_tokens: 0,
            };
            out.push(ProviderEvent::Usage {
                usage: self.answer.usage,
            });
        }
        Ok(out)
    }

    fn finish(&mut self, provider: &str) -> Result<Vec<ProviderEvent>, ProviderError> {
        if self.finish_reason.is_none() {
            return Err(ProviderError::Truncated {
                provider: provider.to_owned(),
            });
        }
        let stop = self.stop_reason();
        Ok(vec![std::mem::take(&mut self.answer).finish(stop)])
    }
}
