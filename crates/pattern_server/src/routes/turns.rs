//! Turns over HTTP: the incremental-save flow of `POST /v1/agents/{agent_id}/messages`.
//!
//! 1. The user message is committed (a new batch, or the agent's durable queue when it is busy)
//!    before the agent runs and before any answer is sent: an error after that point carries
//!    `details.message_saved = true` and the batch id, and the message stays in the history.
//! 2. The agent runs in a task detached from the request; each step is committed as it ends.
//! 3. The answer either streams (SSE of `ResponseEvent`s with ids 1, 2, ...; asked for with
//!    `"stream": true` or `Accept: text/event-stream`) or is the final response as JSON. A failed
//!    turn answers the same error either way: the JSON error body, or a stream's last event
//!    (`error`, data `{"type": "error", "error": {code, message, details}}`).
//!
//! A stream that breaks is resumed with `GET .../turns/{turn_id}/events` and `Last-Event-ID`
//! (or `?after=N`); the turn id comes in the `x-pattern-turn-id` header of the first answer. A
//! client that cannot tell whether its request arrived sends it again with the same
//! `Idempotency-Key`: while the first turn is replayable, the answer comes from it and the
//! message is not stored twice.
//! Failure scenario A (the agent or the process dies mid-turn): the message is stored, the
//! batch is abandoned (by the agent, or by recovery after a crash) and
//! `POST .../batches/{batch_id}/retry` runs it again. Scenario B (storage fails while saving a
//! step): the step rolls back whole, the client gets 503 `storage_failed` with
//! `message_saved = true`, and retrying later works. This module must never answer before the
//! user message is committed, and never cancel a turn because a client went away.

use std::convert::Infallible;
use std::sync::Arc;

use axum::extract::State;
use axum::http::header::{ACCEPT, LOCATION};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::{Stream, StreamExt};
use pattern::BatchState;
use pattern::core::{
    Agent, DoneReason, ErrorKind, IncomingMessage, ResponseEvent, TurnError, collect_response,
};
use pattern::db::Abandoned;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use uuid::Uuid;

use crate::auth::Caller;
use crate::error::{ApiError, ErrorCode, ErrorDetail};
use crate::routes::batches::batch_id;
use crate::routes::{ApiJson, ApiPath, ApiQuery};
use crate::state::AppState;
use crate::turns::Turn;

type ErrorBody = crate::error::ErrorBody;

/// The header that carries a new turn's id.
pub const TURN_ID_HEADER: &str = "x-pattern-turn-id";
/// The request header naming an attempt: a repeated request with the same key (while the turn
/// is replayable) answers from the turn the first one started instead of storing the message
/// again.
pub const IDEMPOTENCY_KEY_HEADER: &str = "idempotency-key";
/// Set (`true`) on answers that replay an earlier request's turn.
pub const REPLAYED_HEADER: &str = "x-pattern-replayed";
/// Longest idempotency key accepted.
const MAX_IDEMPOTENCY_KEY: usize = 200;

/// Body of `POST /v1/agents/{agent_id}/messages`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct SendMessage {
    /// The user's message (not empty).
    content: String,
    /// Stream the turn as server-sent events instead of waiting for the final response.
    #[serde(default)]
    stream: bool,
}

/// Options of `POST .../batches/{batch_id}/retry`.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
pub(crate) struct RetryOptions {
    /// Stream the turn as server-sent events.
    #[serde(default)]
    stream: bool,
}

/// Where to resume a turn's event stream.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
pub(crate) struct Resume {
    /// Send events with ids above this one (`Last-Event-ID` takes precedence).
    after: Option<usize>,
}

/// A tool call the agent made.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ToolCallView {
    /// The call id.
    pub id: String,
    /// The tool.
    pub name: String,
    /// Its input.
    #[schema(value_type = Object)]
    pub input: serde_json::Value,
}

/// A tool call's result.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ToolResultView {
    /// The call it answers.
    pub call_id: String,
    /// What the tool returned.
    pub content: String,
    /// Whether it failed.
    pub is_error: bool,
}

/// The final response of a turn.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct TurnResult {
    /// The turn.
    pub turn_id: String,
    /// The batch holding the turn's messages.
    pub batch_id: Option<String>,
    /// The answer's text.
    pub text: String,
    /// Tool calls made, in order.
    pub tool_calls: Vec<ToolCallView>,
    /// Their results, in order.
    pub tool_results: Vec<ToolResultView>,
    /// Token usage summed over the turn's model calls.
    #[schema(value_type = Object)]
    pub usage: pattern::core::provider::Usage,
    /// Why the turn ended: `completed`, `exit_tool`, `max_iterations` or `max_duration`.
    #[schema(value_type = String)]
    pub reason: DoneReason,
}

/// A turn's progress (`GET .../turns/{turn_id}`).
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct TurnStatus {
    /// The turn.
    pub turn_id: String,
    /// The agent.
    pub agent_id: String,
    /// Whether the turn is over.
    pub finished: bool,
    /// Events so far (the last event id).
    pub events: usize,
    /// The final response, once finished successfully.
    pub result: Option<TurnResult>,
    /// The failure, once finished with an error.
    pub error: Option<ErrorDetail>,
}

fn wants_stream(flag: bool, headers: &HeaderMap) -> bool {
    flag || headers
        .get(ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("text/event-stream"))
}

/// Sends a message to an agent: the incremental-save flow (module doc).
#[utoipa::path(post, path = "/v1/agents/{agent_id}/messages", tag = "turns",
    security(("api_key" = [])), params(("agent_id" = String, Path, description = "agent id")),
    request_body = SendMessage,
    responses(
        (status = 200, description = "the final response (or, when streaming, \
            `text/event-stream` of ResponseEvents)", body = TurnResult),
        (status = 404, body = ErrorBody),
        (status = 409, description = "`cancelled` or `suspended` (the message is stored), or \
            `conflict`: the Idempotency-Key was used for another request", body = ErrorBody),
        (status = 422, description = "`context_over_budget`; the message is stored",
            body = ErrorBody),
        (status = 502, description = "the model failed; the message is stored", body = ErrorBody),
        (status = 503, description = "storage failed; see details.message_saved", body = ErrorBody)))]
pub(crate) async fn send(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(agent_id): ApiPath<String>,
    headers: HeaderMap,
    ApiJson(body): ApiJson<SendMessage>,
) -> Result<Response, ApiError> {
    let row = caller.agent(&state, &agent_id).await?;
    if body.content.trim().is_empty() {
        return Err(ApiError::invalid("`content` is empty"));
    }
    let key = idempotency(&headers, &body.content)?;
    let mut message = IncomingMessage::user(body.content);
    message.source = "http".into();
    let stream = wants_stream(body.stream, &headers);
    start(&state, row, message, stream, key).await
}

/// Runs an abandoned batch's trigger again as a new turn.
#[utoipa::path(post, path = "/v1/agents/{agent_id}/batches/{batch_id}/retry", tag = "turns",
    security(("api_key" = [])),
    params(("agent_id" = String, Path, description = "agent id"),
        ("batch_id" = String, Path, description = "an abandoned batch"), RetryOptions),
    responses((status = 200, body = TurnResult), (status = 404, body = ErrorBody),
        (status = 409, description = "the batch is not abandoned", body = ErrorBody)))]
pub(crate) async fn retry(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath((agent_id, batch)): ApiPath<(String, String)>,
    headers: HeaderMap,
    ApiQuery(options): ApiQuery<RetryOptions>,
) -> Result<Response, ApiError> {
    let row = caller.agent(&state, &agent_id).await?;
    let stored = state
        .pattern()
        .messages(row.id)
        .get_batch(batch_id(&batch)?)
        .await?;
    if stored.info.state != BatchState::Abandoned {
        return Err(ApiError::new(
            ErrorCode::Conflict,
            format!(
                "batch {batch} is {}: only an abandoned batch can be retried",
                stored.info.state.as_str()
            ),
        ));
    }
    let Some(trigger) = stored.messages.first().cloned() else {
        return Err(ApiError::new(
            ErrorCode::Conflict,
            format!("batch {batch} has no trigger message to retry"),
        ));
    };
    let message = IncomingMessage::retry(&Abandoned {
        batch: stored.info,
        trigger,
    });
    let key = idempotency(&headers, &batch)?;
    start(
        &state,
        row,
        message,
        wants_stream(options.stream, &headers),
        key,
    )
    .await
}

/// The request's idempotency key and a fingerprint of what it asks (`what`), if it has a key.
fn idempotency(headers: &HeaderMap, what: &str) -> Result<Option<(String, u64)>, ApiError> {
    let Some(value) = headers.get(IDEMPOTENCY_KEY_HEADER) else {
        return Ok(None);
    };
    let key = value
        .to_str()
        .ok()
        .map(str::trim)
        .filter(|k| !k.is_empty() && k.len() <= MAX_IDEMPOTENCY_KEY)
        .ok_or_else(|| {
            ApiError::invalid(format!(
                "`Idempotency-Key` must be 1 to {MAX_IDEMPOTENCY_KEY} visible ASCII characters"
            ))
        })?;
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    std::hash::Hash::hash(what, &mut hasher);
    Ok(Some((key.to_owned(), std::hash::Hasher::finish(&hasher))))
}

async fn start(
    state: &AppState,
    row: pattern::Agent,
    message: IncomingMessage,
    stream: bool,
    key: Option<(String, u64)>,
) -> Result<Response, ApiError> {
    let agent = state.agent(row).await?;
    let guard = match &key {
        Some(_) => Some(state.turns().keyed_start().await),
        None => None,
    };
    if let Some((key, fingerprint)) = &key
        && let Some((first, turn)) = state.turns().by_key(agent.id(), key)
    {
        if first != *fingerprint {
            return Err(ApiError::new(
                ErrorCode::Conflict,
                "this Idempotency-Key was used for a different request",
            ));
        }
        drop(guard);
        let mut response = answer(state, &turn, stream).await;
        response
            .headers_mut()
            .insert(REPLAYED_HEADER, HeaderValue::from_static("true"));
        return Ok(response);
    }
    // `process` returns once the message is committed (batch or queue): the durable ack.
    let events = agent.clone().process(message).await?;
    let turn = state.turns().start(agent.id(), events);
    if let Some((key, fingerprint)) = key {
        state.turns().remember(&turn, key, fingerprint);
    }
    drop(guard);
    Ok(answer(state, &turn, stream).await)
}

/// The answer for a turn: its stream from the start, or its final response once it is over.
async fn answer(state: &AppState, turn: &Arc<Turn>, stream: bool) -> Response {
    let location = format!("/v1/agents/{}/turns/{}", turn.agent, turn.id);
    let mut response = if stream {
        sse(state, turn.clone(), 0).into_response()
    } else {
        let events = turn.finished().await;
        match outcome(turn, events).await {
            Ok(result) => ApiJson(result).into_response(),
            Err(e) => e.into_response(),
        }
    };
    let headers = response.headers_mut();
    if let Ok(value) = HeaderValue::from_str(&turn.id.to_string()) {
        headers.insert(TURN_ID_HEADER, value);
    }
    if let Ok(value) = HeaderValue::from_str(&location) {
        headers.insert(LOCATION, value);
    }
    response
}

/// The final response of a finished turn, or its failure as an API error.
async fn outcome(turn: &Turn, events: Vec<ResponseEvent>) -> Result<TurnResult, ApiError> {
    let saved = message_saved(&events);
    let collected = collect_response(futures::stream::iter(events)).await;
    match collected {
        Ok(r) => Ok(TurnResult {
            turn_id: turn.id.to_string(),
            batch_id: r.batch_id.map(|b| b.to_string()),
            text: r.text,
            tool_calls: r
                .tool_calls
                .into_iter()
                .map(|(id, name, input)| ToolCallView { id, name, input })
                .collect(),
            tool_results: r
                .tool_results
                .into_iter()
                .map(|(call_id, content, is_error)| ToolResultView {
                    call_id,
                    content,
                    is_error,
                })
                .collect(),
            usage: r.usage,
            reason: r.reason,
        }),
        Err(e) => Err(failure(turn, e, saved)),
    }
}

/// Whether a turn's events show its trigger committed (to a batch or the agent's queue).
fn message_saved(events: &[ResponseEvent]) -> bool {
    events.iter().any(|e| {
        matches!(
            e,
            ResponseEvent::Received { .. } | ResponseEvent::Queued { .. }
        )
    })
}

/// A failed turn as the API error both answers carry (the JSON body, and the data of a
/// stream's final `error` event): a stable code, and `details` `{turn_id, batch_id,
/// message_saved}`.
fn failure(turn: &Turn, error: TurnError, saved: bool) -> ApiError {
    let TurnError {
        kind,
        message,
        batch_id,
    } = error;
    let code = match kind {
        ErrorKind::Provider => ErrorCode::ProviderFailed,
        ErrorKind::Storage => ErrorCode::StorageFailed,
        ErrorKind::Context => ErrorCode::ContextOverBudget,
        ErrorKind::Cancelled => ErrorCode::Cancelled,
        ErrorKind::Suspended => ErrorCode::Suspended,
        _ => ErrorCode::Conflict,
    };
    // Storage and context causes (database errors) stay in the server log, written when the
    // turn failed (`crate::turns`). A provider's error is the model provider's own message (its
    // name, HTTP status and text: no secret, and what the client needs to judge a retry); the
    // other kinds' messages are the agent runtime's fixed sentences.
    let message = match kind {
        ErrorKind::Storage => {
            "a step of the turn could not be stored and was rolled back; retry the batch once \
             storage is back (the cause is in the server log)"
                .to_owned()
        }
        ErrorKind::Context => "the turn's context could not be built for the model's window \
             (the cause is in the server log)"
            .to_owned(),
        _ => message,
    };
    ApiError::new(code, message).with_details(serde_json::json!({
        "turn_id": turn.id.to_string(),
        "batch_id": batch_id.map(|b| b.to_string()),
        "message_saved": saved,
    }))
}

/// The data of a stream's final `error` event: the JSON error body of the same failure, with
/// `type: "error"` like every event's data.
#[derive(Debug, Serialize)]
struct StreamError {
    /// Always `error`.
    r#type: &'static str,
    /// What a JSON answer's body would hold.
    error: ErrorDetail,
}

impl StreamError {
    fn new(error: ApiError) -> Self {
        Self {
            r#type: "error",
            error: ErrorDetail {
                code: error.code,
                message: error.message,
                details: error.details,
            },
        }
    }
}

/// The SSE name of an event: its `type`.
fn event_name(event: &ResponseEvent) -> &'static str {
    match event {
        ResponseEvent::Queued { .. } => "queued",
        ResponseEvent::Received { .. } => "received",
        ResponseEvent::TextDelta { .. } => "text_delta",
        ResponseEvent::ThinkingDelta { .. } => "thinking_delta",
        ResponseEvent::ToolCallStarted { .. } => "tool_call_started",
        ResponseEvent::ToolCallFinished { .. } => "tool_call_finished",
        ResponseEvent::ToolResult { .. } => "tool_result",
        ResponseEvent::Usage { .. } => "usage",
        ResponseEvent::StepCommitted { .. } => "step_committed",
        ResponseEvent::BatchCompleted { .. } => "batch_completed",
        ResponseEvent::Error { .. } => "error",
        ResponseEvent::Done { .. } => "done",
    }
}

/// One SSE event of `turn`. A failure (the turn's last event) is sent as the JSON error body of
/// the same failure ([`StreamError`]), not as the raw `ResponseEvent`.
fn sse_event(turn: &Turn, id: usize, event: &ResponseEvent) -> Event {
    let data = match event {
        ResponseEvent::Error {
            kind,
            message,
            batch_id,
        } => {
            let (before, _) = turn.snapshot();
            let received = before.iter().find_map(|e| match e {
                ResponseEvent::Received { batch_id, .. } => Some(*batch_id),
                _ => None,
            });
            let error = TurnError {
                kind: *kind,
                message: message.clone(),
                batch_id: batch_id.or(received),
            };
            serde_json::to_string(&StreamError::new(failure(
                turn,
                error,
                message_saved(&before),
            )))
        }
        other => {
            serde_json::to_value(other).and_then(|v| serde_json::to_string(&ids_as_strings(v)))
        }
    };
    let data = data.unwrap_or_else(|e| {
        tracing::error!(error = %e, turn = %turn.id, "a turn event could not be serialised");
        serde_json::json!({
            "type": "error",
            "error": {"code": ErrorCode::Internal, "message": "internal error; see the server log"},
        })
        .to_string()
    });
    Event::default()
        .id(id.to_string())
        .event(event_name(event))
        .data(data)
}

/// Snowflake ids (`batch_id`, `queue_id`) as decimal strings, as everywhere else in the API:
/// they exceed JavaScript's safe integers, and a client that rounds a batch id would retry or
/// inspect another batch.
fn ids_as_strings(mut event: serde_json::Value) -> serde_json::Value {
    if let Some(fields) = event.as_object_mut() {
        for key in ["batch_id", "queue_id"] {
            if let Some(value) = fields.get_mut(key)
                && let Some(id) = value.as_i64()
            {
                *value = serde_json::Value::String(id.to_string());
            }
        }
    }
    event
}

/// The turn's events with ids above `after`, then live ones until the turn ends.
fn sse(
    state: &AppState,
    turn: Arc<Turn>,
    after: usize,
) -> Sse<impl Stream<Item = Result<Event, Infallible>> + use<>> {
    let pages = futures::stream::unfold(Some((turn, after)), |cursor| async move {
        let (turn, seen) = cursor?;
        loop {
            let slice = turn.after(seen);
            if let Some(&(last, _)) = slice.events.last() {
                let next = (!slice.finished).then(|| (turn.clone(), last));
                // A finished turn ends the stream after this page.
                let events: Vec<_> = slice
                    .events
                    .iter()
                    .map(|(id, e)| Ok(sse_event(&turn, *id, e)))
                    .collect();
                return Some((futures::stream::iter(events), next));
            }
            if slice.finished {
                return None;
            }
            turn.changed(seen).await;
        }
    });
    Sse::new(pages.flatten()).keep_alive(KeepAlive::new().interval(state.config().keep_alive))
}

fn turn_of(
    state: &AppState,
    agent: pattern::AgentId,
    turn_id: &str,
) -> Result<Arc<Turn>, ApiError> {
    let missing = || {
        ApiError::not_found(format!(
            "no turn `{turn_id}` (unknown, or finished longer ago than the replay window: its \
             batch holds what it did)"
        ))
    };
    let id = Uuid::parse_str(turn_id).map_err(|_| missing())?;
    state.turns().get(agent, id).ok_or_else(missing)
}

/// Follows a turn's events; resumes after `Last-Event-ID` (or `?after=`).
#[utoipa::path(get, path = "/v1/agents/{agent_id}/turns/{turn_id}/events", tag = "turns",
    security(("api_key" = [])),
    params(("agent_id" = String, Path, description = "agent id"), ("turn_id" = String, Path),
        ("Last-Event-ID" = Option<String>, Header, description = "the last event id seen"),
        Resume),
    responses((status = 200, description = "`text/event-stream` of ResponseEvents"),
        (status = 404, body = ErrorBody)))]
pub(crate) async fn events(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath((agent_id, turn_id)): ApiPath<(String, String)>,
    headers: HeaderMap,
    ApiQuery(resume): ApiQuery<Resume>,
) -> Result<Response, ApiError> {
    let agent = caller.agent(&state, &agent_id).await?;
    let turn = turn_of(&state, agent.id, &turn_id)?;
    let after = match headers.get("last-event-id") {
        Some(value) => value
            .to_str()
            .ok()
            .and_then(|v| v.trim().parse::<usize>().ok())
            .ok_or_else(|| ApiError::invalid("`Last-Event-ID` must be an event id (a number)"))?,
        None => resume.after.unwrap_or(0),
    };
    Ok(sse(&state, turn, after).into_response())
}

/// A turn's progress, and its final response once it is over.
#[utoipa::path(get, path = "/v1/agents/{agent_id}/turns/{turn_id}", tag = "turns",
    security(("api_key" = [])),
    params(("agent_id" = String, Path, description = "agent id"), ("turn_id" = String, Path)),
    responses((status = 200, body = TurnStatus), (status = 404, body = ErrorBody)))]
pub(crate) async fn status(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath((agent_id, turn_id)): ApiPath<(String, String)>,
) -> Result<ApiJson<TurnStatus>, ApiError> {
    let agent = caller.agent(&state, &agent_id).await?;
    let turn = turn_of(&state, agent.id, &turn_id)?;
    let (events, finished) = turn.snapshot();
    let count = events.len();
    let (result, error) = if finished {
        match outcome(&turn, events).await {
            Ok(r) => (Some(r), None),
            Err(e) => (
                None,
                Some(ErrorDetail {
                    code: e.code,
                    message: e.message,
                    details: e.details,
                }),
            ),
        }
    } else {
        (None, None)
    };
    Ok(ApiJson(TurnStatus {
        turn_id: turn.id.to_string(),
        agent_id: agent.id.to_string(),
        finished,
        events: count,
        result,
        error,
    }))
}

/// Cancels a running turn: its batch is abandoned; the message stays stored.
#[utoipa::path(delete, path = "/v1/agents/{agent_id}/turns/{turn_id}", tag = "turns",
    security(("api_key" = [])),
    params(("agent_id" = String, Path, description = "agent id"), ("turn_id" = String, Path)),
    responses((status = 202, description = "cancellation requested"),
        (status = 404, body = ErrorBody)))]
pub(crate) async fn cancel(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath((agent_id, turn_id)): ApiPath<(String, String)>,
) -> Result<StatusCode, ApiError> {
    let agent = caller.agent(&state, &agent_id).await?;
    turn_of(&state, agent.id, &turn_id)?.cancel();
    Ok(StatusCode::ACCEPTED)
}
