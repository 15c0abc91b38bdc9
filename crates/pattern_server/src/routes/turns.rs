//! Turns over HTTP: the incremental-save flow of `POST /v1/agents/{agent_id}/messages`.
//!
//! 1. The user message and its turn are committed (a new batch under the agent's claim, or the
//!    agent's durable queue when it is busy in this or any other process) before the agent runs
//!    and before any answer is sent: an error after that point carries `details.message_saved =
//!    true` and the batch id, and the message stays in the history.
//! 2. The agent runs detached from the request (whoever holds the agent's claim runs it: this
//!    instance, or another one for a queued message); each step is committed as it ends, with
//!    the turn's events.
//! 3. The answer follows the turn's log in the database: it either streams (SSE of
//!    `ResponseEvent`s with ids 1, 2, ...; asked for with `"stream": true` or `Accept:
//!    text/event-stream`) or is the final response as JSON once the turn is over. A failed turn
//!    answers the same error either way: the JSON error body, or a stream's last event
//!    (`error`, data `{"type": "error", "error": {code, message, details}}`).
//!
//! Because the log is in the database, any instance answers `GET .../turns/{turn_id}` and
//! resumes `GET .../turns/{turn_id}/events` after `Last-Event-ID` (or `?after=N`), also after a
//! restart; the turn id comes in the `x-pattern-turn-id` header of the first answer. A client
//! that cannot tell whether its request arrived sends it again with the same `Idempotency-Key`:
//! the key is stored with the turn (unique per agent), so the answer comes from the first turn
//! and the message is never stored twice, on any instance, for as long as the turn is kept.
//! Failure scenario A (the agent or the process dies mid-turn): the message is stored, the
//! batch is abandoned (by the agent, or by recovery once the process is seen dead; the turn's
//! last event then is an `error` of code `interrupted`) and `POST .../batches/{batch_id}/retry`
//! runs it again. Scenario B (storage fails while saving a step): the step rolls back whole,
//! the client gets 503 `storage_failed` with `message_saved = true`, and retrying later works.
//! This module must never answer before the user message is committed, and never cancel a turn
//! because a client went away.

use std::convert::Infallible;

use axum::extract::State;
use axum::http::header::{ACCEPT, LOCATION};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::{Stream, StreamExt};
use pattern::BatchState;
use pattern::core::{
    Begun, DoneReason, ErrorKind, IncomingMessage, ResponseEvent, TurnError, TurnOptions,
    collect_response, turn_log,
};
use pattern::db::{Abandoned, Idempotency, TurnId, TurnInfo, TurnState};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use utoipa::{IntoParams, ToSchema};

use crate::auth::Caller;
use crate::error::{ApiError, ErrorCode, ErrorDetail};
use crate::routes::batches::batch_id;
use crate::routes::{ApiJson, ApiPath, ApiQuery};
use crate::state::AppState;

type ErrorBody = crate::error::ErrorBody;

/// The header that carries a new turn's id.
pub const TURN_ID_HEADER: &str = "x-pattern-turn-id";
/// The request header naming an attempt: a repeated request with the same key answers from the
/// turn the first one started (on any instance, for as long as turns are kept) instead of
/// storing the message again.
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
    after: Option<u64>,
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
    pub events: u64,
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
        (status = 202, description = "this server shut down before the turn was over: the \
            message is stored and the turn goes on; follow it at `Location` on another \
            instance", body = TurnStatus),
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
    responses((status = 200, body = TurnResult),
        (status = 202, description = "this server shut down before the turn was over; follow \
            it at `Location` on another instance", body = TurnStatus),
        (status = 404, body = ErrorBody),
        (status = 409, description = "the batch is not abandoned, or was retried already",
            body = ErrorBody)))]
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
fn idempotency(headers: &HeaderMap, what: &str) -> Result<Option<Idempotency>, ApiError> {
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
    let digest = Sha256::digest(what.as_bytes());
    let fingerprint = digest.iter().map(|b| format!("{b:02x}")).collect();
    Ok(Some(Idempotency {
        key: key.to_owned(),
        fingerprint,
    }))
}

async fn start(
    state: &AppState,
    row: pattern::Agent,
    message: IncomingMessage,
    stream: bool,
    idempotency: Option<Idempotency>,
) -> Result<Response, ApiError> {
    if state.is_closing() {
        return Err(ApiError::new(
            ErrorCode::Unavailable,
            "the server is shutting down; send the request to another instance or retry shortly",
        ));
    }
    let agent = state.agent(row).await?;
    let options = TurnOptions {
        turn: None,
        idempotency,
        detached: true,
    };
    // `submit` returns once the message and its turn are committed (batch or queue): the
    // durable ack.
    let submission = match agent.clone().submit(message, options).await {
        Ok(s) => s,
        Err(pattern::core::Error::Db(pattern::db::Error::Run(
            pattern::db::RunError::IdempotencyKeyReused { .. },
        ))) => {
            return Err(ApiError::new(
                ErrorCode::Conflict,
                "this Idempotency-Key was used for a different request",
            ));
        }
        Err(e) => return Err(e.into()),
    };
    // The run is detached: the answer follows the turn's log, whoever runs it.
    drop(submission.events);
    let mut response = answer(state, &submission.turn, stream).await;
    if submission.begun == Begun::Replayed {
        response
            .headers_mut()
            .insert(REPLAYED_HEADER, HeaderValue::from_static("true"));
    }
    Ok(response)
}

/// How often a follower looks at the database besides its wake-ups (another process's commits
/// on SQLite are not announced).
fn follow_poll(state: &AppState) -> std::time::Duration {
    match state.pattern().db().backend() {
        pattern::db::Backend::Sqlite => std::time::Duration::from_millis(250),
        pattern::db::Backend::Postgres => std::time::Duration::from_secs(2),
    }
}

/// The answer for a turn: its stream from the start, or its final response once it is over.
async fn answer(state: &AppState, turn: &TurnInfo, stream: bool) -> Response {
    let location = format!("/v1/agents/{}/turns/{}", turn.agent_id, turn.id);
    let mut response = if stream {
        sse(state, turn, 0).into_response()
    } else {
        match collect(state, turn).await {
            Ok(Some(events)) => match outcome(state, turn, events).await {
                Ok(result) => ApiJson(result).into_response(),
                Err(e) => e.into_response(),
            },
            // This server is shutting down and the turn is not over: accepted, not failed; the
            // client follows it at `Location` on another instance.
            Ok(None) => match pending(state, turn).await {
                Ok(status) => (StatusCode::ACCEPTED, ApiJson(status)).into_response(),
                Err(e) => e.into_response(),
            },
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

/// Every event of the turn, once it is over; `None` when this server stopped first (after a
/// shutdown's drain; the turn goes on in another process).
async fn collect(
    state: &AppState,
    turn: &TurnInfo,
) -> Result<Option<Vec<ResponseEvent>>, ApiError> {
    let mut events = Vec::new();
    let mut stream = Box::pin(
        turn_log::follow(
            state.pattern().db().clone(),
            turn.agent_id,
            turn.id,
            0,
            follow_poll(state),
        )
        .take_until(state.stopped()),
    );
    while let Some(item) = stream.next().await {
        events.push(item?.1);
    }
    Ok(events
        .last()
        .is_some_and(ResponseEvent::is_final)
        .then_some(events))
}

/// The progress of a turn that is not over, as stored now.
async fn pending(state: &AppState, turn: &TurnInfo) -> Result<TurnStatus, ApiError> {
    let now = state.pattern().db().turn(turn.agent_id, turn.id).await?;
    Ok(TurnStatus {
        turn_id: now.id.to_string(),
        agent_id: now.agent_id.to_string(),
        finished: now.state == TurnState::Finished,
        events: now.last_seq,
        result: None,
        error: None,
    })
}

/// The final response of a finished turn, or its failure as an API error.
async fn outcome(
    state: &AppState,
    turn: &TurnInfo,
    events: Vec<ResponseEvent>,
) -> Result<TurnResult, ApiError> {
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
        Err(e) => Err(failure(turn.id, e, batch_of(state, turn).await)),
    }
}

/// The batch a turn's trigger began, as stored now.
async fn batch_of(state: &AppState, turn: &TurnInfo) -> Option<pattern::db::BatchId> {
    match state.pattern().db().turn(turn.agent_id, turn.id).await {
        Ok(t) => t.batch_id,
        Err(_) => turn.batch_id,
    }
}

/// A failed turn as the API error both answers carry (the JSON body, and the data of a
/// stream's final `error` event): a stable code, and `details` `{turn_id, batch_id,
/// message_saved}`.
fn failure(turn: TurnId, error: TurnError, stored_batch: Option<pattern::db::BatchId>) -> ApiError {
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
        ErrorKind::Interrupted => ErrorCode::Interrupted,
    };
    // Storage and context causes (database errors) stay in the server log, written by the
    // run's process. A provider's error is the model provider's own message (its name, HTTP
    // status and text: no secret, and what the client needs to judge a retry); the other
    // kinds' messages are the agent runtime's fixed sentences.
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
    // A turn exists only with its message stored (its row is written in the transaction that
    // stores the message), so the message is always saved.
    ApiError::new(code, message).with_details(serde_json::json!({
        "turn_id": turn.to_string(),
        "batch_id": batch_id.or(stored_batch).map(|b| b.to_string()),
        "message_saved": true,
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

/// One SSE event of `turn`. A failure (the turn's last event) is sent as the JSON error body of
/// the same failure ([`StreamError`]), not as the raw `ResponseEvent`.
fn sse_event(turn: &TurnInfo, id: u64, event: &ResponseEvent) -> Event {
    let data = match event {
        ResponseEvent::Error {
            kind,
            message,
            batch_id,
        } => {
            let error = TurnError {
                kind: *kind,
                message: message.clone(),
                batch_id: *batch_id,
            };
            serde_json::to_string(&StreamError::new(failure(turn.id, error, turn.batch_id)))
        }
        other => {
            serde_json::to_value(other).and_then(|v| serde_json::to_string(&ids_as_strings(v)))
        }
    };
    let data = data.unwrap_or_else(|e| {
        tracing::error!(error = %e, turn = %turn.id, "a turn event could not be serialised");
        internal_error_data()
    });
    Event::default()
        .id(id.to_string())
        .event(event.name())
        .data(data)
}

fn internal_error_data() -> String {
    serde_json::json!({
        "type": "error",
        "error": {"code": ErrorCode::Internal, "message": "internal error; see the server log"},
    })
    .to_string()
}

/// Snowflake ids (`batch_id`, `queue_id`, `approval_id`) as decimal strings, as everywhere else in the API:
/// they exceed JavaScript's safe integers, and a client that rounds a batch id would retry or
/// inspect another batch.
fn ids_as_strings(mut event: serde_json::Value) -> serde_json::Value {
    if let Some(fields) = event.as_object_mut() {
        for key in ["batch_id", "queue_id", "approval_id"] {
            if let Some(value) = fields.get_mut(key)
                && let Some(id) = value.as_i64()
            {
                *value = serde_json::Value::String(id.to_string());
            }
        }
    }
    event
}

/// The turn's events with ids above `after`, then each new one until the turn ends (read from
/// the database, so any instance serves any turn).
fn sse(
    state: &AppState,
    turn: &TurnInfo,
    after: u64,
) -> Sse<impl Stream<Item = Result<Event, Infallible>> + use<>> {
    let info = turn.clone();
    let follow = turn_log::follow(
        state.pattern().db().clone(),
        turn.agent_id,
        turn.id,
        after,
        follow_poll(state),
    );
    let events = follow.scan(false, move |broken, item| {
        let event = if *broken {
            None
        } else {
            Some(Ok(match item {
                Ok((id, event)) => sse_event(&info, id, &event),
                Err(e) => {
                    // The log could not be read: say so and end, rather than stop silently.
                    tracing::error!(turn = %info.id, error = %e, "cannot follow a turn's log");
                    *broken = true;
                    Event::default().event("error").data(internal_error_data())
                }
            }))
        };
        futures::future::ready(event)
    });
    // After a shutdown's drain the stream ends; the client resumes it on another instance.
    let events = events.take_until(state.stopped());
    Sse::new(events).keep_alive(KeepAlive::new().interval(state.config().keep_alive))
}

async fn turn_of(
    state: &AppState,
    agent: pattern::AgentId,
    turn_id: &str,
) -> Result<TurnInfo, ApiError> {
    let missing = || {
        ApiError::not_found(format!(
            "no turn `{turn_id}` (unknown, or finished longer ago than turns are kept: its \
             batch holds what it did)"
        ))
    };
    let id: TurnId = turn_id.parse().map_err(|_| missing())?;
    match state.pattern().db().turn(agent, id).await {
        Ok(turn) => Ok(turn),
        Err(pattern::db::Error::Run(pattern::db::RunError::TurnNotFound { .. })) => Err(missing()),
        Err(e) => Err(e.into()),
    }
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
    let turn = turn_of(&state, agent.id, &turn_id).await?;
    let after = match headers.get("last-event-id") {
        Some(value) => value
            .to_str()
            .ok()
            .and_then(|v| v.trim().parse::<u64>().ok())
            .ok_or_else(|| ApiError::invalid("`Last-Event-ID` must be an event id (a number)"))?,
        None => resume.after.unwrap_or(0),
    };
    Ok(sse(&state, &turn, after).into_response())
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
    let turn = turn_of(&state, agent.id, &turn_id).await?;
    let finished = turn.state == TurnState::Finished;
    let events = if finished {
        collect(&state, &turn).await?
    } else {
        None
    };
    let (result, error) = if let Some(events) = events {
        match outcome(&state, &turn, events).await {
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
        events: turn.last_seq,
        result,
        error,
    }))
}

/// Cancels a turn, in whichever instance runs it (a queued one when it is delivered): its batch
/// is abandoned; the message stays stored.
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
    let row = caller.agent(&state, &agent_id).await?;
    let turn = turn_of(&state, row.id, &turn_id).await?;
    let agent = state.agent(row).await?;
    agent.cancel_turn(turn.id).await?;
    Ok(StatusCode::ACCEPTED)
}
