//! The HTTP side of a turn, as a client sees it: `POST /v1/agents/{id}/messages` answered as
//! JSON or as SSE, resuming `GET .../turns/{turn}/events` after an event id, and retrying an
//! abandoned batch. Every call reports what arrived ([`Answer`]): the status, the turn id, whether
//! the answer was a replay, every event with its id, the final outcome, and what broke.
//!
//! "Acknowledged" follows `docs/server.md`: a client knows its message is stored once any answer
//! byte arrived: an SSE event, a successful JSON body, or an error body with
//! `details.message_saved = true`. This module must never judge what it reports (the callers
//! check), never retry on its own, and never talk to anything but the given base URLs.

use std::time::{Duration, Instant};

use eventsource_stream::Eventsource;
use futures::StreamExt;
use serde_json::{Value, json};

/// Header naming a turn.
pub const TURN_ID_HEADER: &str = "x-pattern-turn-id";
/// Header set on replayed answers.
pub const REPLAYED_HEADER: &str = "x-pattern-replayed";
/// Request header of an attempt.
pub const IDEMPOTENCY_KEY_HEADER: &str = "idempotency-key";

/// How a turn ended, as the client was told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Final {
    /// A `TurnResult` body, or a stream's `done` event.
    Done {
        /// The batch it names.
        batch: Option<i64>,
    },
    /// An error body, or a stream's `error` event.
    Failed {
        /// `error.code`.
        code: String,
        /// The HTTP status (200 for a stream's error event).
        status: u16,
        /// `details.batch_id`.
        batch: Option<i64>,
        /// `details.message_saved`.
        saved: Option<bool>,
        /// `error.message`.
        message: String,
    },
}

/// One SSE event.
#[derive(Debug, Clone)]
pub struct SseEvent {
    /// Its id (`None` when missing or not a number).
    pub id: Option<u64>,
    /// Its name.
    pub name: String,
    /// Its data, parsed (`Value::String` when not JSON).
    pub data: Value,
}

/// What one request got.
#[derive(Debug, Clone, Default)]
pub struct Answer {
    /// The HTTP status, once headers arrived.
    pub status: Option<u16>,
    /// The turn (header, else the body).
    pub turn_id: Option<String>,
    /// `x-pattern-replayed: true`.
    pub replayed: bool,
    /// Whether the client may consider its message stored (module doc).
    pub acked: bool,
    /// From the request's start to the first answer byte (JSON: the response; SSE: the first
    /// event).
    pub ack_latency: Option<Duration>,
    /// Events of this connection, in arrival order.
    pub events: Vec<SseEvent>,
    /// How the turn ended, when this connection saw it end.
    pub outcome: Option<Final>,
    /// What broke: connection refused or reset, a stream cut before its end, a timeout.
    pub broke: Option<String>,
    /// The body of a non-2xx or unparsable answer, for messages.
    pub body: Option<String>,
}

impl Answer {
    /// The id of the last event received.
    pub fn last_event_id(&self) -> Option<u64> {
        self.events.iter().rev().find_map(|e| e.id)
    }

    /// The first batch an event names (`received`, `step_committed`, `done`...).
    pub fn first_batch(&self) -> Option<i64> {
        self.events
            .iter()
            .find_map(|e| id_field(&e.data, "batch_id"))
    }
}

/// Parses a snowflake id field (a decimal string, or a number).
pub fn id_field(v: &Value, key: &str) -> Option<i64> {
    match &v[key] {
        Value::String(s) => s.parse().ok(),
        Value::Number(n) => n.as_i64(),
        _ => None,
    }
}

/// The outcome carried by an error body (`{"error": {code, message, details}}`).
fn failure(body: &Value, status: u16) -> Final {
    let error = &body["error"];
    let details = &error["details"];
    Final::Failed {
        code: error["code"].as_str().unwrap_or("?").to_owned(),
        status,
        batch: id_field(details, "batch_id"),
        saved: details["message_saved"].as_bool(),
        message: error["message"].as_str().unwrap_or("").to_owned(),
    }
}

/// A message to send as a turn.
#[derive(Debug, Clone, Copy)]
pub struct Message<'a> {
    /// The agent id.
    pub agent: &'a str,
    /// The text.
    pub content: &'a str,
    /// Answer as SSE.
    pub stream: bool,
    /// `Idempotency-Key`.
    pub key: Option<&'a str>,
    /// Close a stream after this many events.
    pub drop_after: Option<usize>,
}

impl<'a> Message<'a> {
    /// A JSON turn without a key.
    pub fn new(agent: &'a str, content: &'a str) -> Self {
        Self {
            agent,
            content,
            stream: false,
            key: None,
            drop_after: None,
        }
    }
}

/// A client of one organization's key.
#[derive(Debug, Clone)]
pub struct Api {
    http: reqwest::Client,
    secret: String,
}

impl Api {
    /// With `pooled`, connections are kept for reuse (load tests); without, every request opens
    /// its own (crash tests: a pooled connection to a killed process would fail the next
    /// request before it is sent).
    pub fn new(secret: &str, pooled: bool) -> Self {
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(3))
            .pool_max_idle_per_host(if pooled { 64 } else { 0 })
            .tcp_nodelay(true)
            .build()
            .unwrap_or_default();
        Self {
            http,
            secret: secret.to_owned(),
        }
    }

    /// Creates an agent; its id.
    pub async fn create_agent(&self, base: &str, name: &str) -> Result<String, String> {
        let response = self
            .http
            .post(format!("{base}/v1/agents"))
            .bearer_auth(&self.secret)
            .json(&json!({"name": name, "instructions": "Use tools when they help."}))
            .send()
            .await
            .map_err(|e| format!("create {name}: {e}"))?;
        let status = response.status();
        let body: Value = response
            .json()
            .await
            .map_err(|e| format!("create {name}: {e}"))?;
        match body["id"].as_str() {
            Some(id) if status.is_success() => Ok(id.to_owned()),
            _ => Err(format!("create {name}: {status} {body}")),
        }
    }

    /// One JSON request answered within `limit`: its status and body, or why there was none
    /// (the server was down, or the answer did not come).
    async fn json(
        &self,
        request: reqwest::RequestBuilder,
        limit: Duration,
    ) -> Result<(u16, Value), String> {
        let exchange = async {
            let response = request
                .bearer_auth(&self.secret)
                .send()
                .await
                .map_err(|e| format!("request failed: {}", chain(&e.without_url())))?;
            let status = response.status().as_u16();
            let text = response
                .text()
                .await
                .map_err(|e| format!("body cut: {}", chain(&e.without_url())))?;
            Ok((status, serde_json::from_str(&text).unwrap_or(Value::Null)))
        };
        tokio::time::timeout(limit, exchange)
            .await
            .unwrap_or_else(|_| Err(format!("no answer within {limit:?}")))
    }

    /// Stores an archival passage: the answer's status and body.
    pub async fn insert_archival(
        &self,
        base: &str,
        agent: &str,
        text: &str,
        limit: Duration,
    ) -> Result<(u16, Value), String> {
        let request = self
            .http
            .post(format!("{base}/v1/agents/{agent}/archival"))
            .json(&json!({ "text": text }));
        self.json(request, limit).await
    }

    /// Deletes an archival passage: the answer's status.
    pub async fn delete_archival(
        &self,
        base: &str,
        agent: &str,
        id: &str,
        limit: Duration,
    ) -> Result<u16, String> {
        let request = self
            .http
            .delete(format!("{base}/v1/agents/{agent}/archival/{id}"));
        self.json(request, limit).await.map(|(status, _)| status)
    }

    /// Full-text search of what `agent` sees: the ids of the hits, or the failed answer.
    pub async fn search_ids(
        &self,
        base: &str,
        agent: &str,
        query: &str,
        limit: Duration,
    ) -> Result<Vec<String>, String> {
        let request = self
            .http
            .post(format!("{base}/v1/agents/{agent}/search"))
            .json(&json!({ "query": query, "mode": "fts", "limit": 10 }));
        match self.json(request, limit).await? {
            (200, Value::Array(hits)) => Ok(hits
                .iter()
                .filter_map(|h| h["id"].as_str().map(str::to_owned))
                .collect()),
            (status, body) => Err(format!("search answered {status}: {body}")),
        }
    }

    /// Sends a message as a turn. A streamed one is read until the turn ends, the connection
    /// breaks, or `drop_after` events arrived (then the connection is closed). Gives up after
    /// `limit` (`broke` says so).
    pub async fn send(&self, base: &str, message: &Message<'_>, limit: Duration) -> Answer {
        let mut request = self
            .http
            .post(format!("{base}/v1/agents/{}/messages", message.agent))
            .bearer_auth(&self.secret)
            .json(&json!({"content": message.content, "stream": message.stream}));
        if let Some(key) = message.key {
            request = request.header(IDEMPOTENCY_KEY_HEADER, key);
        }
        self.exchange(request, message.drop_after, limit).await
    }

    /// Resumes a turn's events after `after` (`Last-Event-ID`).
    pub async fn resume(
        &self,
        base: &str,
        agent: &str,
        turn: &str,
        after: u64,
        limit: Duration,
    ) -> Answer {
        let request = self
            .http
            .get(format!("{base}/v1/agents/{agent}/turns/{turn}/events"))
            .bearer_auth(&self.secret)
            .header("last-event-id", after.to_string());
        self.exchange(request, None, limit).await
    }

    /// Retries an abandoned batch, answered as JSON.
    pub async fn retry(&self, base: &str, agent: &str, batch: i64, limit: Duration) -> Answer {
        let request = self
            .http
            .post(format!("{base}/v1/agents/{agent}/batches/{batch}/retry"))
            .bearer_auth(&self.secret);
        self.exchange(request, None, limit).await
    }

    async fn exchange(
        &self,
        request: reqwest::RequestBuilder,
        drop_after: Option<usize>,
        limit: Duration,
    ) -> Answer {
        let started = Instant::now();
        let deadline = tokio::time::Instant::now() + limit;
        let mut answer = Answer::default();
        let response = match tokio::time::timeout_at(deadline, request.send()).await {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => {
                answer.broke = Some(format!("request failed: {}", chain(&e.without_url())));
                return answer;
            }
            Err(_) => {
                answer.broke = Some(format!("no answer within {limit:?}"));
                return answer;
            }
        };
        let status = response.status().as_u16();
        answer.status = Some(status);
        let headers = response.headers();
        answer.turn_id = headers
            .get(TURN_ID_HEADER)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        answer.replayed = headers
            .get(REPLAYED_HEADER)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v == "true");
        let is_sse = headers
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/event-stream"));
        if !is_sse {
            let text = match tokio::time::timeout_at(deadline, response.text()).await {
                Ok(Ok(t)) => t,
                Ok(Err(e)) => {
                    answer.broke = Some(format!("body cut: {}", chain(&e.without_url())));
                    return answer;
                }
                Err(_) => {
                    answer.broke = Some(format!("no body within {limit:?}"));
                    return answer;
                }
            };
            answer.ack_latency = Some(started.elapsed());
            match serde_json::from_str::<Value>(&text) {
                // Accepted, not over: the server stopped before the turn did (its status body).
                Ok(body) if status == 202 => {
                    answer.acked = true;
                    if answer.turn_id.is_none() {
                        answer.turn_id = body["turn_id"].as_str().map(str::to_owned);
                    }
                    answer.broke = Some("202: the turn goes on elsewhere".to_owned());
                }
                Ok(body) if (200..300).contains(&status) => {
                    answer.acked = true;
                    answer.outcome = Some(Final::Done {
                        batch: id_field(&body, "batch_id"),
                    });
                    if answer.turn_id.is_none() {
                        answer.turn_id = body["turn_id"].as_str().map(str::to_owned);
                    }
                }
                Ok(body) if body["error"].is_object() => {
                    let outcome = failure(&body, status);
                    answer.acked = matches!(
                        outcome,
                        Final::Failed {
                            saved: Some(true),
                            ..
                        }
                    );
                    if answer.turn_id.is_none() {
                        answer.turn_id = body["error"]["details"]["turn_id"]
                            .as_str()
                            .map(str::to_owned);
                    }
                    answer.outcome = Some(outcome);
                    answer.body = Some(text);
                }
                _ => answer.body = Some(text),
            }
            return answer;
        }
        let mut events = Box::pin(response.bytes_stream().eventsource());
        loop {
            let next = match tokio::time::timeout_at(deadline, events.next()).await {
                Ok(next) => next,
                Err(_) => {
                    answer.broke = Some(format!("stream not over within {limit:?}"));
                    return answer;
                }
            };
            let event = match next {
                Some(Ok(event)) => event,
                Some(Err(e)) => {
                    answer.broke = Some(format!("stream broke: {e}"));
                    return answer;
                }
                None => {
                    answer.broke = Some("stream ended without `done` or `error`".to_owned());
                    return answer;
                }
            };
            if answer.events.is_empty() {
                answer.acked = true;
                answer.ack_latency = Some(started.elapsed());
            }
            let data = serde_json::from_str(&event.data).unwrap_or(Value::String(event.data));
            let parsed = SseEvent {
                id: event.id.trim().parse().ok(),
                name: event.event,
                data,
            };
            let end = match parsed.name.as_str() {
                "done" => Some(Final::Done {
                    batch: id_field(&parsed.data, "batch_id"),
                }),
                "error" => Some(failure(&parsed.data, 200)),
                _ => None,
            };
            answer.events.push(parsed);
            if let Some(end) = end {
                answer.outcome = Some(end);
                return answer;
            }
            if drop_after.is_some_and(|k| answer.events.len() >= k) {
                return answer;
            }
        }
    }
}

/// An error with its sources, on one line.
fn chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}
