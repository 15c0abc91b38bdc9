//! A fake OpenAI-compatible streaming model (llama.cpp's wire format, as the cassettes in
//! `crates/pattern_core/tests/cassettes/llama_openai_*.sse` show) that checks every request it
//! receives for tool-call pairing.
//!
//! For a request whose last message is the user's, it answers with one tool call (`tool`, by
//! default `archival_search`, with `{"query": "<the marker>"}`), its arguments streamed in
//! pieces; for any other request (the last message is a tool result) it answers `done <marker>`
//! in a few chunks. The marker is the `mk` + 32 hex digits token of the last user message (the
//! whole text when there is none). Between chunks it waits per [`Pace`].
//!
//! Every request is validated before it is answered: each assistant message with `tool_calls`
//! must be followed, before the next non-tool message, by `tool` messages answering exactly those
//! ids, and no `tool` message may answer an id that was not called just before. Violations are
//! counted and the first offending bodies kept ([`ModelStats`]). Clients that go away mid-answer
//! are normal (killed servers): the answer stream is dropped. This server must never listen on
//! anything but loopback, and never answer a request it could not parse as anything but an error.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use futures::StreamExt;
use rand::Rng;
use serde_json::{Value, json};

/// How long the model waits before each chunk of an answer.
#[derive(Debug, Clone, Copy)]
pub enum Pace {
    /// No wait: an instant model (load tests).
    Instant,
    /// A random wait from zero to this, before each chunk (so kills land mid-answer).
    RandomUpTo(Duration),
}

/// What the model does.
#[derive(Debug, Clone)]
pub struct ModelOptions {
    /// Waits between chunks.
    pub pace: Pace,
    /// The tool it calls first (an unknown or failing tool gets an error result, still paired).
    pub tool: String,
}

impl Default for ModelOptions {
    fn default() -> Self {
        Self {
            pace: Pace::Instant,
            tool: "archival_search".to_owned(),
        }
    }
}

/// How many offending request bodies are kept for the failure message.
const KEEP_BODIES: usize = 5;

/// What the model saw.
#[derive(Debug, Default)]
pub struct ModelStats {
    requests: AtomicU64,
    tool_calls: AtomicU64,
    texts: AtomicU64,
    violations: AtomicU64,
    examples: Mutex<Vec<String>>,
}

impl ModelStats {
    /// Requests received (parsed or not).
    pub fn requests(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }

    /// Answers that were a tool call.
    pub fn tool_calls(&self) -> u64 {
        self.tool_calls.load(Ordering::Relaxed)
    }

    /// Answers that were text.
    pub fn texts(&self) -> u64 {
        self.texts.load(Ordering::Relaxed)
    }

    /// Requests that broke tool-call pairing (or were not a chat request at all).
    pub fn violations(&self) -> u64 {
        self.violations.load(Ordering::Relaxed)
    }

    /// The first offending requests: what was wrong, then the body.
    pub fn examples(&self) -> Vec<String> {
        self.examples.lock().map(|e| e.clone()).unwrap_or_default()
    }

    fn violation(&self, what: String, body: &str) {
        self.violations.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut kept) = self.examples.lock()
            && kept.len() < KEEP_BODIES
        {
            kept.push(format!("{what}\n    request body: {body}"));
        }
    }
}

/// The running model; stopped when dropped.
pub struct PairingModel {
    /// `http://127.0.0.1:PORT/v1`.
    pub base_url: String,
    stats: Arc<ModelStats>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

#[derive(Clone)]
struct Shared {
    options: ModelOptions,
    stats: Arc<ModelStats>,
}

impl PairingModel {
    /// Starts the model on a free loopback port, on a thread and runtime of its own (so it
    /// answers promptly whatever the caller's runtime does).
    pub fn start(options: ModelOptions) -> std::io::Result<Self> {
        let stats = Arc::new(ModelStats::default());
        let shared = Shared {
            options,
            stats: stats.clone(),
        };
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let thread = std::thread::Builder::new()
            .name("pairing-model".to_owned())
            .spawn(move || {
                runtime.block_on(async move {
                    let Ok(listener) = tokio::net::TcpListener::from_std(listener) else {
                        return;
                    };
                    let app = axum::Router::new()
                        .route("/v1/chat/completions", post(answer))
                        .with_state(shared);
                    tokio::select! {
                        _ = axum::serve(listener, app) => {}
                        _ = stopped => {}
                    }
                });
            })?;
        Ok(Self {
            base_url: format!("http://{addr}/v1"),
            stats,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// What it saw so far.
    pub fn stats(&self) -> &Arc<ModelStats> {
        &self.stats
    }
}

impl Drop for PairingModel {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Checks tool-call pairing in a chat completions request's `messages`.
pub fn check_pairing(body: &Value) -> Result<(), String> {
    let messages = body["messages"]
        .as_array()
        .ok_or_else(|| "the request has no `messages` array".to_owned())?;
    // The assistant message whose calls are being answered, and the ids still unanswered.
    let mut open: Option<(usize, Vec<String>)> = None;
    for (i, message) in messages.iter().enumerate() {
        let role = message["role"].as_str().unwrap_or("");
        if role == "tool" {
            let id = message["tool_call_id"].as_str().unwrap_or("");
            match open.as_mut() {
                Some((_, ids)) if ids.iter().any(|x| x == id) => ids.retain(|x| x != id),
                Some((at, _)) => {
                    return Err(format!(
                        "message {i}: a tool result for `{id}`, which the calls of message {at} \
                         do not name (or answered already)"
                    ));
                }
                None => {
                    return Err(format!(
                        "message {i}: a tool result for `{id}` with no tool call just before"
                    ));
                }
            }
            continue;
        }
        if let Some((at, ids)) = open.take()
            && !ids.is_empty()
        {
            return Err(format!(
                "message {at}: tool calls {ids:?} are not answered before message {i} ({role})"
            ));
        }
        if role == "assistant"
            && let Some(calls) = message["tool_calls"].as_array()
            && !calls.is_empty()
        {
            let mut ids: Vec<String> = Vec::new();
            for call in calls {
                let id = call["id"].as_str().unwrap_or("").to_owned();
                if id.is_empty() || ids.contains(&id) {
                    return Err(format!(
                        "message {i}: a tool call with a missing or repeated id `{id}`"
                    ));
                }
                ids.push(id);
            }
            open = Some((i, ids));
        }
    }
    if let Some((at, ids)) = open
        && !ids.is_empty()
    {
        return Err(format!(
            "message {at}: tool calls {ids:?} are not answered (the request ends)"
        ));
    }
    Ok(())
}

/// The `mk` + 32 hex digits tokens in `text`, in order.
pub fn markers_in(text: &str) -> Vec<&str> {
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i + 34 <= bytes.len() {
        if &bytes[i..i + 2] == b"mk" && bytes[i + 2..i + 34].iter().all(u8::is_ascii_hexdigit) {
            out.push(&text[i..i + 34]);
            i += 34;
        } else {
            i += 1;
        }
    }
    out
}

fn text_of(message: &Value) -> String {
    match &message["content"] {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p["text"].as_str())
            .collect::<Vec<_>>()
            .join(""),
        _ => String::new(),
    }
}

fn chunk(delta: Value, finish: Option<&str>) -> String {
    json!({
        "choices": [{"finish_reason": finish, "index": 0, "delta": delta}],
        "created": 1_795_315_907, "id": "chatcmpl-pairing", "model": "fake",
        "object": "chat.completion.chunk"
    })
    .to_string()
}

fn usage() -> String {
    json!({
        "choices": [], "created": 1_795_315_908, "id": "chatcmpl-pairing", "model": "fake",
        "object": "chat.completion.chunk",
        "usage": {"completion_tokens": 5, "prompt_tokens": 40, "total_tokens": 45}
    })
    .to_string()
}

/// Splits `s` into about `n` pieces on character boundaries.
fn pieces(s: &str, n: usize) -> Vec<String> {
    let chars: Vec<char> = s.chars().collect();
    let size = chars.len().div_ceil(n.max(1)).max(1);
    chars.chunks(size).map(|c| c.iter().collect()).collect()
}

async fn answer(State(shared): State<Shared>, body: Bytes) -> Response {
    let stats = &shared.stats;
    stats.requests.fetch_add(1, Ordering::Relaxed);
    let raw = String::from_utf8_lossy(&body).into_owned();
    let request: Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => {
            stats.violation(format!("not JSON: {e}"), &raw);
            return (StatusCode::BAD_REQUEST, "not JSON").into_response();
        }
    };
    if let Err(what) = check_pairing(&request) {
        stats.violation(what, &raw);
    }
    let messages = request["messages"].as_array().cloned().unwrap_or_default();
    let last_role = messages
        .last()
        .and_then(|m| m["role"].as_str())
        .unwrap_or("")
        .to_owned();
    let user_text = messages
        .iter()
        .rev()
        .find(|m| m["role"] == "user")
        .map(text_of)
        .unwrap_or_default();
    let marker = markers_in(&user_text)
        .last()
        .map_or_else(|| user_text.clone(), |m| (*m).to_owned());

    let mut events = vec![chunk(json!({"role": "assistant", "content": null}), None)];
    if last_role == "user" {
        stats.tool_calls.fetch_add(1, Ordering::Relaxed);
        let id = format!("call_{}", uuid::Uuid::new_v4().simple());
        let arguments = json!({"query": marker}).to_string();
        let mut parts = pieces(&arguments, 3).into_iter();
        let first = parts.next().unwrap_or_default();
        events.push(chunk(
            json!({"tool_calls": [{"index": 0, "id": id, "type": "function",
                "function": {"name": shared.options.tool, "arguments": first}}]}),
            None,
        ));
        for part in parts {
            events.push(chunk(
                json!({"tool_calls": [{"index": 0, "function": {"arguments": part}}]}),
                None,
            ));
        }
        events.push(chunk(json!({}), Some("tool_calls")));
    } else {
        stats.texts.fetch_add(1, Ordering::Relaxed);
        for part in pieces(&format!("done {marker}"), 3) {
            events.push(chunk(json!({"content": part}), None));
        }
        events.push(chunk(json!({}), Some("stop")));
    }
    events.push(usage());
    events.push("[DONE]".to_owned());

    let pace = shared.options.pace;
    let waits: Vec<Duration> = {
        let mut rng = rand::rng();
        events
            .iter()
            .map(|_| match pace {
                Pace::Instant => Duration::ZERO,
                Pace::RandomUpTo(max) => {
                    Duration::from_millis(rng.random_range(0..=max.as_millis() as u64))
                }
            })
            .collect()
    };
    let stream =
        futures::stream::iter(events.into_iter().zip(waits)).then(|(data, wait)| async move {
            if !wait.is_zero() {
                tokio::time::sleep(wait).await;
            }
            Ok::<_, std::convert::Infallible>(Bytes::from(format!("data: {data}\n\n")))
        });
    axum::http::Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "text/event-stream")
        .header(header::CACHE_CONTROL, "no-cache")
        .body(Body::from_stream(stream))
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

#[cfg(test)]
mod tests {
    //! The pairing check on hand-made requests.

    use super::*;

    fn call(id: &str) -> Value {
        json!({"id": id, "type": "function", "function": {"name": "t", "arguments": "{}"}})
    }

    #[test]
    fn pairing_is_checked() {
        let ok = json!({"messages": [
            {"role": "system", "content": "s"},
            {"role": "user", "content": "q"},
            {"role": "assistant", "content": null, "tool_calls": [call("a"), call("b")]},
            {"role": "tool", "tool_call_id": "b", "content": "r"},
            {"role": "tool", "tool_call_id": "a", "content": "r"},
            {"role": "assistant", "content": "x"},
        ]});
        assert_eq!(check_pairing(&ok), Ok(()));
        let unanswered = json!({"messages": [
            {"role": "user", "content": "q"},
            {"role": "assistant", "tool_calls": [call("a")]},
            {"role": "user", "content": "q2"},
        ]});
        assert!(check_pairing(&unanswered).is_err());
        let at_end = json!({"messages": [
            {"role": "user", "content": "q"},
            {"role": "assistant", "tool_calls": [call("a")]},
        ]});
        assert!(check_pairing(&at_end).is_err());
        let orphan = json!({"messages": [
            {"role": "user", "content": "q"},
            {"role": "tool", "tool_call_id": "a", "content": "r"},
        ]});
        assert!(check_pairing(&orphan).is_err());
        let twice = json!({"messages": [
            {"role": "assistant", "tool_calls": [call("a")]},
            {"role": "tool", "tool_call_id": "a", "content": "r"},
            {"role": "tool", "tool_call_id": "a", "content": "r"},
        ]});
        assert!(check_pairing(&twice).is_err());
    }

    #[test]
    fn markers_are_found() {
        let m = format!("mk{}", uuid::Uuid::new_v4().simple());
        let text = format!("note {m} and mkzz, then {m}.");
        assert_eq!(markers_in(&text), vec![m.as_str(), m.as_str()]);
        assert!(markers_in("mk123").is_empty());
    }
}
