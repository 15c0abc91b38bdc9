//! The HTTP side every provider shares: configuration ([`ProviderConfig`], [`RetryPolicy`],
//! [`ApiKey`]), sending a request with retries before the first event, reading the answer as
//! server-sent events, turning error answers into typed [`ProviderError`]s, and the whole-call
//! deadline.
//!
//! Each wire format supplies a [`Decoder`] that turns SSE events into [`ProviderEvent`]s; this
//! module drives it. Retrying stops for good once the decoder has produced one event (module
//! doc of [`super`], rule 1): until then, a 429, a 5xx, an `overloaded_error` event, or a
//! connection that fails is answered by waiting (exponential backoff with jitter, or the
//! provider's `retry-after` when longer) and sending the request again.
//!
//! This module must never log or format a key (an [`ApiKey`] prints as `***` and its header is
//! marked sensitive), never log a request body, and never retry after an event went out.

use context_v2::format::ForcedCall;
use std::collections::VecDeque;
use std::fmt;
use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBuilder};
use eventsource_stream::{Event, EventStreamError, Eventsource};
use futures::stream::{self, BoxStream};
use futures::{Stream, StreamExt};
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use reqwest::{StatusCode, Url};
use tokio::time::{Instant, sleep_until, timeout_at};

use super::{ProviderError, ProviderEvent, ProviderStream};
use context_v2::{ModelInfo, Provider};

/// An API key. Never printed: its `Debug` shows `***`.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKey(String);

impl ApiKey {
    /// Wraps a key.
    pub fn new(key: impl Into<String>) -> Self {
        Self(key.into())
    }

    /// The key, for building the header.
    pub(crate) fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ApiKey(***)")
    }
}

/// How often and how long to retry before the first event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts in all, the first one included (1 = never retry).
    pub max_attempts: u32,
    /// Delay before the first retry; doubled (with jitter) after each.
    pub min_delay: Duration,
    /// Longest backoff delay (a longer `retry-after` is still honoured, within the deadline).
    pub max_delay: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_attempts: 4,
            min_delay: Duration::from_secs(1),
            max_delay: Duration::from_secs(30),
        }
    }
}

/// Default whole-call deadline.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(600);

/// Everything needed to build a provider. `model.provider` chooses the wire format (see
/// [`ProviderConfig::build`]).
#[derive(Debug, Clone)]
pub struct ProviderConfig {
    /// Name for logs and errors; `None` uses the wire format's (`"openai"`, `"anthropic"`,
    /// `"gemini"`).
    pub name: Option<String>,
    /// The model, its window and its wire format.
    pub model: ModelInfo,
    /// API base URL including the version path (`https://api.openai.com/v1`,
    /// `https://api.anthropic.com/v1`, `https://generativelanguage.googleapis.com/v1beta`, or a
    /// compatible server such as `http://127.0.0.1:8080/v1`); `None` uses the provider's own.
    pub base_url: Option<String>,
    /// The key; required for the providers' own base URLs, optional for other servers.
    pub api_key: Option<ApiKey>,
    /// Whole-call deadline when [`super::GenerateOptions::timeout`] is `None`.
    pub timeout: Duration,
    /// Retries before the first event.
    pub retry: RetryPolicy,
    /// How a forced tool call is asked of an OpenAI-compatible server (default: `tool_choice`;
    /// the local llama.cpp server takes [`ForcedCall::ResponseSchema`]).
    pub forced_call: ForcedCall,
}

impl ProviderConfig {
    /// A configuration for `model` with the provider's own base URL, no key, the default
    /// deadline and retry policy.
    pub fn new(model: ModelInfo) -> Self {
        Self {
            name: None,
            model,
            base_url: None,
            api_key: None,
            timeout: DEFAULT_TIMEOUT,
            retry: RetryPolicy::default(),
            forced_call: ForcedCall::default(),
        }
    }

    /// Sets the base URL.
    pub fn with_base_url(mut self, url: impl Into<String>) -> Self {
        self.base_url = Some(url.into());
        self
    }

    /// Sets the key.
    pub fn with_api_key(mut self, key: impl Into<String>) -> Self {
        self.api_key = Some(ApiKey::new(key));
        self
    }

    /// Sets the name.
    pub fn with_name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// Builds the provider of `model.provider`'s wire format.
    pub fn build(self) -> Result<Box<dyn super::ModelProvider>, ProviderError> {
        Ok(match self.model.provider {
            Provider::OpenAi => Box::new(super::openai::OpenAiProvider::new(self)?),
            Provider::Anthropic => Box::new(super::anthropic::AnthropicProvider::new(self)?),
            Provider::Gemini => Box::new(super::gemini::GeminiProvider::new(self)?),
        })
    }
}

/// The parts of a provider every wire format has: checked config and an HTTP client.
#[derive(Debug, Clone)]
pub(crate) struct Endpoint {
    pub(crate) name: String,
    pub(crate) model: ModelInfo,
    /// Base URL without a trailing slash.
    pub(crate) base: String,
    pub(crate) key: Option<ApiKey>,
    pub(crate) timeout: Duration,
    pub(crate) retry: RetryPolicy,
    pub(crate) client: reqwest::Client,
}

impl Endpoint {
    /// Checks `config` for `format` (whose default base URL is `default_base`) and builds the
    /// client.
    pub(crate) fn new(
        config: ProviderConfig,
        format: Provider,
        default_name: &str,
        default_base: &str,
    ) -> Result<Self, ProviderError> {
        if config.model.provider != format {
            return Err(ProviderError::Config(format!(
                "the model's wire format is {:?}, not {format:?}",
                config.model.provider
            )));
        }
        let base = config
            .base_url
            .unwrap_or_else(|| default_base.to_owned())
            .trim_end_matches('/')
            .to_owned();
        let url = Url::parse(&base)
            .map_err(|e| ProviderError::Config(format!("base URL `{base}`: {e}")))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(ProviderError::Config(format!(
                "base URL `{base}`: only http and https are supported"
            )));
        }
        let key = config.api_key.filter(|k| !k.expose().is_empty());
        if key.is_none() && base == default_base {
            return Err(ProviderError::Config(format!(
                "{default_name}: an API key is required for {default_base}"
            )));
        }
        if config.retry.max_attempts == 0 {
            return Err(ProviderError::Config(
                "retry.max_attempts must be at least 1".into(),
            ));
        }
        let client = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(30))
            .build()
            .map_err(|e| ProviderError::Config(format!("HTTP client: {e}")))?;
        Ok(Self {
            name: config.name.unwrap_or_else(|| default_name.to_owned()),
            model: config.model,
            base,
            key,
            timeout: config.timeout,
            retry: config.retry,
            client,
        })
    }

    /// `base/path`.
    pub(crate) fn url(&self, path: &str) -> String {
        format!("{}/{}", self.base, path.trim_start_matches('/'))
    }

    /// A header holding the key, marked sensitive (never shown by `Debug`).
    pub(crate) fn key_header(
        &self,
        headers: &mut HeaderMap,
        name: HeaderName,
        prefix: &str,
    ) -> Result<(), ProviderError> {
        if let Some(key) = &self.key {
            let mut value =
                HeaderValue::from_str(&format!("{prefix}{}", key.expose())).map_err(|_| {
                    ProviderError::Config("the API key holds characters a header cannot".into())
                })?;
            value.set_sensitive(true);
            headers.insert(name, value);
        }
        Ok(())
    }

    /// Sends `body` to `url` and returns the stream of events `decoder` makes of the answer,
    /// retrying per [`RetryPolicy`] until the first event (module doc).
    pub(crate) async fn stream<D: Decoder>(
        &self,
        url: String,
        headers: HeaderMap,
        body: Vec<u8>,
        timeout: Option<Duration>,
        make_decoder: impl Fn() -> D,
    ) -> Result<ProviderStream, ProviderError> {
        let after = timeout.unwrap_or(self.timeout);
        let deadline = Instant::now() + after;
        let timed_out = || ProviderError::Timeout {
            provider: self.name.clone(),
            after,
        };
        let mut backoff = ExponentialBuilder::default()
            .with_min_delay(self.retry.min_delay)
            .with_max_delay(self.retry.max_delay)
            .with_jitter()
            .without_max_times()
            .build();
        let mut attempt: u32 = 0;
        loop {
            attempt += 1;
            let send = self
                .client
                .post(&url)
                .headers(headers.clone())
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .body(body.clone())
                .send();
            let failure = match timeout_at(deadline, send).await {
                Err(_) => return Err(timed_out()),
                Ok(Err(e)) => Failure::Transport(describe(&e)),
                Ok(Ok(response)) if response.status().is_success() => {
                    match self
                        .first_events(response, make_decoder(), deadline, after)
                        .await
                    {
                        Ok(Opened::Stream(stream)) => return Ok(stream),
                        Ok(Opened::Retry(failure)) => failure,
                        Err(OpenError::Deadline) => return Err(timed_out()),
                        Err(OpenError::Fatal(e)) => return Err(e),
                    }
                }
                Ok(Ok(response)) => classify(response, &self.name).await,
            };
            let failure = match failure {
                Failure::Fatal(e) => return Err(e),
                retryable => retryable,
            };
            let backoff_delay = backoff.next().unwrap_or(self.retry.max_delay);
            let delay = match failure.retry_after() {
                Some(asked) => asked.max(backoff_delay),
                None => backoff_delay,
            };
            if attempt >= self.retry.max_attempts || Instant::now() + delay >= deadline {
                return Err(failure.into_error(&self.name, attempt));
            }
            tracing::debug!(
                provider = %self.name,
                attempt,
                delay_ms = delay.as_millis() as u64,
                "retrying a failed model call"
            );
            sleep_until(Instant::now() + delay).await;
        }
    }

    /// Reads SSE events until `decoder` has produced one event (then the stream is handed out)
    /// or failed in a way worth retrying.
    async fn first_events<D: Decoder>(
        &self,
        response: reqwest::Response,
        mut decoder: D,
        deadline: Instant,
        after: Duration,
    ) -> Result<Opened, OpenError> {
        let mut events: SseStream = Box::pin(response.bytes_stream().eventsource());
        let mut ready = VecDeque::new();
        let finished;
        loop {
            match timeout_at(deadline, events.next()).await {
                Err(_) => return Err(OpenError::Deadline),
                Ok(None) => {
                    // Ended before any event: whatever the decoder makes of it (usually
                    // `Truncated`) is the answer; an empty 200 is not worth a retry.
                    let out = decoder.finish(&self.name).map_err(OpenError::Fatal)?;
                    ready.extend(out);
                    finished = true;
                    break;
                }
                Ok(Some(Err(e))) => {
                    return Ok(Opened::Retry(Failure::Transport(sse_error(&e))));
                }
                Ok(Some(Ok(event))) => match decoder.event(&self.name, &event) {
                    Ok(out) if out.is_empty() => continue,
                    Ok(out) => {
                        finished = out.iter().any(|e| matches!(e, ProviderEvent::Done { .. }));
                        ready.extend(out);
                        break;
                    }
                    Err(e) => {
                        return match Failure::from_error(e) {
                            Failure::Fatal(e) => Err(OpenError::Fatal(e)),
                            retryable => Ok(Opened::Retry(retryable)),
                        };
                    }
                },
            }
        }
        let state = Driver {
            name: self.name.clone(),
            events,
            decoder,
            ready,
            finished,
            deadline,
            after,
        };
        Ok(Opened::Stream(Box::pin(drive(state))))
    }
}

type SseStream = BoxStream<'static, Result<Event, EventStreamError<reqwest::Error>>>;

/// Turns one wire format's server-sent events into [`ProviderEvent`]s.
pub(crate) trait Decoder: Send + 'static {
    /// One event. A returned [`ProviderEvent::Done`] ends the stream (nothing after it is read).
    fn event(&mut self, provider: &str, event: &Event)
    -> Result<Vec<ProviderEvent>, ProviderError>;

    /// The body ended without a `Done`: the final events, or [`ProviderError::Truncated`].
    fn finish(&mut self, provider: &str) -> Result<Vec<ProviderEvent>, ProviderError>;
}

enum Opened {
    Stream(ProviderStream),
    Retry(Failure),
}

enum OpenError {
    Deadline,
    Fatal(ProviderError),
}

/// A failed attempt, before it is known whether it will be retried.
#[derive(Debug)]
enum Failure {
    RateLimited {
        retry_after: Option<Duration>,
    },
    Server {
        status: u16,
        message: String,
        retry_after: Option<Duration>,
    },
    Transport(String),
    Fatal(ProviderError),
}

impl Failure {
    fn retry_after(&self) -> Option<Duration> {
        match self {
            Failure::RateLimited { retry_after } | Failure::Server { retry_after, .. } => {
                *retry_after
            }
            Failure::Transport(_) | Failure::Fatal(_) => None,
        }
    }

    /// A decoder's error as a failure: rate limits and server errors are retryable.
    fn from_error(e: ProviderError) -> Self {
        match e {
            ProviderError::RateLimited { retry_after, .. } => Failure::RateLimited { retry_after },
            ProviderError::Server {
                status, message, ..
            } => Failure::Server {
                status,
                message,
                retry_after: None,
            },
            other => Failure::Fatal(other),
        }
    }

    fn into_error(self, provider: &str, attempts: u32) -> ProviderError {
        let provider = provider.to_owned();
        match self {
            Failure::RateLimited { retry_after } => ProviderError::RateLimited {
                provider,
                attempts,
                retry_after,
            },
            Failure::Server {
                status, message, ..
            } => ProviderError::Server {
                provider,
                status,
                attempts,
                message,
            },
            Failure::Transport(message) => ProviderError::Transport {
                provider,
                message: format!("{message} (after {attempts} attempts)"),
            },
            Failure::Fatal(e) => e,
        }
    }
}

/// A non-2xx answer as a failure.
async fn classify(response: reqwest::Response, provider: &str) -> Failure {
    let status = response.status();
    let retry_after = retry_after(response.headers());
    let text = response.text().await.unwrap_or_default();
    let message = error_message(&text);
    let code = status.as_u16();
    match status {
        StatusCode::TOO_MANY_REQUESTS => Failure::RateLimited { retry_after },
        s if s.is_server_error() => Failure::Server {
            status: code,
            message,
            retry_after,
        },
        StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => {
            Failure::Fatal(ProviderError::Unauthorized {
                provider: provider.to_owned(),
                status: code,
                message,
            })
        }
        _ => Failure::Fatal(ProviderError::BadRequest {
            provider: provider.to_owned(),
            status: code,
            message,
        }),
    }
}

/// The provider's error message from an error body: `error.message` (OpenAI, Anthropic,
/// Gemini, llama.cpp), `error` as a string, `message`, or the text itself (cut at 1000 chars).
pub(crate) fn error_message(text: &str) -> String {
    if let Ok(v) = serde_json::from_str::<serde_json::Value>(text) {
        let found = v["error"]["message"]
            .as_str()
            .or_else(|| v["error"].as_str())
            .or_else(|| v["message"].as_str());
        if let Some(m) = found {
            return m.to_owned();
        }
    }
    let text = text.trim();
    match text.char_indices().nth(1000) {
        Some((cut, _)) => format!("{}...", &text[..cut]),
        None => text.to_owned(),
    }
}

/// `retry-after-ms`, or `retry-after` as seconds or an HTTP date.
pub(crate) fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let get = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    if let Some(ms) = get("retry-after-ms").and_then(|v| v.trim().parse::<f64>().ok())
        && ms.is_finite()
        && ms >= 0.0
    {
        return Some(Duration::from_secs_f64(ms / 1000.0));
    }
    let value = get("retry-after")?.trim();
    if let Ok(secs) = value.parse::<f64>() {
        return (secs.is_finite() && secs >= 0.0).then(|| Duration::from_secs_f64(secs));
    }
    let date = chrono::DateTime::parse_from_rfc2822(value).ok()?;
    let wait = date.with_timezone(&chrono::Utc) - chrono::Utc::now();
    Some(wait.to_std().unwrap_or(Duration::ZERO))
}

/// A reqwest error without its URL (which can hold a key, as Gemini's query used to).
fn describe(e: &reqwest::Error) -> String {
    let kind = if e.is_connect() {
        "connecting failed"
    } else if e.is_timeout() {
        "timed out"
    } else if e.is_body() || e.is_decode() {
        "reading the answer failed"
    } else {
        "request failed"
    };
    let mut text = kind.to_owned();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

fn sse_error(e: &EventStreamError<reqwest::Error>) -> String {
    match e {
        EventStreamError::Transport(e) => describe(e),
        EventStreamError::Utf8(e) => format!("the event stream is not UTF-8: {e}"),
        EventStreamError::Parser(e) => format!("the event stream is malformed: {e}"),
    }
}

/// State of a stream after its first event.
struct Driver<D> {
    name: String,
    events: SseStream,
    decoder: D,
    ready: VecDeque<ProviderEvent>,
    finished: bool,
    deadline: Instant,
    /// The whole-call timeout, for the error.
    after: Duration,
}

fn drive<D: Decoder>(
    state: Driver<D>,
) -> impl Stream<Item = Result<ProviderEvent, ProviderError>> + Send + 'static {
    stream::unfold(Some(state), |state| async move {
        let mut s = state?;
        loop {
            if let Some(event) = s.ready.pop_front() {
                return Some((Ok(event), Some(s)));
            }
            if s.finished {
                return None;
            }
            match timeout_at(s.deadline, s.events.next()).await {
                Err(_) => {
                    let e = ProviderError::Timeout {
                        provider: s.name.clone(),
                        after: s.after,
                    };
                    return Some((Err(e), None));
                }
                Ok(None) => {
                    s.finished = true;
                    match s.decoder.finish(&s.name) {
                        Ok(out) => s.ready.extend(out),
                        Err(e) => return Some((Err(e), None)),
                    }
                }
                Ok(Some(Err(e))) => {
                    let e = ProviderError::Transport {
                        provider: s.name.clone(),
                        message: sse_error(&e),
                    };
                    return Some((Err(e), None));
                }
                Ok(Some(Ok(event))) => match s.decoder.event(&s.name, &event) {
                    Ok(out) => {
                        if out.iter().any(|e| matches!(e, ProviderEvent::Done { .. })) {
                            s.finished = true;
                        }
                        s.ready.extend(out);
                    }
                    Err(e) => return Some((Err(e), None)),
                },
            }
        }
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;

    #[test]
    fn a_key_never_prints() {
        let key = ApiKey::new("sk-secret");
        assert_eq!(format!("{key:?}"), "ApiKey(***)");
        let config = ProviderConfig::new(ModelInfo {
            provider: Provider::OpenAi,
            model: "m".into(),
            context_window: 10,
            max_output_tokens: 5,
        })
        .with_api_key("sk-secret");
        assert!(!format!("{config:?}").contains("sk-secret"));
    }

    #[test]
    fn retry_after_reads_seconds_milliseconds_and_dates() {
        let mut h = HeaderMap::new();
        assert_eq!(retry_after(&h), None);
        h.insert("retry-after", HeaderValue::from_static("7"));
        assert_eq!(retry_after(&h), Some(Duration::from_secs(7)));
        h.insert("retry-after-ms", HeaderValue::from_static("250"));
        assert_eq!(retry_after(&h), Some(Duration::from_millis(250)));
        let mut h = HeaderMap::new();
        h.insert(
            "retry-after",
            HeaderValue::from_static("Wed, 21 Oct 2015 07:28:00 GMT"),
        );
        assert_eq!(retry_after(&h), Some(Duration::ZERO));
        h.insert("retry-after", HeaderValue::from_static("soon"));
        assert_eq!(retry_after(&h), None);
    }

    #[test]
    fn error_messages_come_from_each_providers_body() {
        assert_eq!(
            error_message(r#"{"error":{"message":"bad key","type":"invalid"}}"#),
            "bad key"
        );
        assert_eq!(
            error_message(
                r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#
            ),
            "Overloaded"
        );
        assert_eq!(error_message("  plain text "), "plain text");
        assert_eq!(error_message(&"x".repeat(2000)).len(), 1003);
    }
}
