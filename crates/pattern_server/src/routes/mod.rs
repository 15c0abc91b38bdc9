//! The HTTP routes (one table, which the OpenAPI document is checked against) and JSON errors
//! for unknown routes and methods; the layers around them are in [`crate::layers`].
//!
//! Every route under `/v1` takes a [`Caller`](crate::auth::Caller) and reaches data only through
//! it. Turn routes (sending a message, retrying a batch, following a turn's or a meeting's
//! events) are exempt from the request timeout: they stream or wait for the agent, whose run is
//! bounded by its own limits. Handlers take their body, query and path through [`ApiJson`],
//! [`ApiQuery`] and [`ApiPath`], whose rejections are JSON errors. This module must never answer
//! with a non-JSON error.

pub(crate) mod agents;
pub(crate) mod approvals;
pub(crate) mod batches;
pub(crate) mod context;
pub(crate) mod health;
pub(crate) mod mcp;
pub(crate) mod memory;
pub(crate) mod protocol;
pub(crate) mod retention;
pub(crate) mod schedules;
pub(crate) mod turns;

use axum::Router;
use axum::extract::{FromRequest, FromRequestParts};
use axum::handler::Handler;
use axum::http::Method;
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodFilter, MethodRouter};

use crate::error::{ApiError, ErrorCode};
use crate::state::AppState;

/// A JSON body whose rejections are this API's JSON errors (400 `invalid_json`, 413
/// `payload_too_large`, 415 `unsupported_media_type`).
#[derive(Debug, FromRequest)]
#[from_request(via(axum::Json), rejection(ApiError))]
pub(crate) struct ApiJson<T>(pub(crate) T);

impl<T: serde::Serialize> IntoResponse for ApiJson<T> {
    fn into_response(self) -> Response {
        axum::Json(self.0).into_response()
    }
}

/// Query strings whose rejections are 400 `invalid_request`.
#[derive(Debug, FromRequestParts)]
#[from_request(via(axum::extract::Query), rejection(ApiError))]
pub(crate) struct ApiQuery<T>(pub(crate) T);

impl From<axum::extract::rejection::QueryRejection> for ApiError {
    fn from(rejection: axum::extract::rejection::QueryRejection) -> Self {
        ApiError::invalid(rejection.body_text())
    }
}

/// Path parameters whose rejections are 400 `invalid_request` (a segment that is not valid
/// percent-encoded UTF-8), like every other error of this API: JSON, never axum's plain text.
#[derive(Debug, FromRequestParts)]
#[from_request(via(axum::extract::Path), rejection(ApiError))]
pub(crate) struct ApiPath<T>(pub(crate) T);

impl From<axum::extract::rejection::PathRejection> for ApiError {
    fn from(rejection: axum::extract::rejection::PathRejection) -> Self {
        if rejection.status().is_server_error() {
            // A route whose extractor does not match its path: a fault of this server.
            tracing::error!(error = %rejection.body_text(), "path parameters do not fit the route");
            return ApiError::new(ErrorCode::Internal, "internal error; see the server log");
        }
        ApiError::invalid(rejection.body_text())
    }
}

/// Which layers a route gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Class {
    /// Under `/v1`, cut at the request timeout.
    Timed,
    /// Under `/v1`, exempt from the timeout: turns and event streams.
    Streaming,
    /// Without a key or a timeout: health, readiness, the OpenAPI document.
    Open,
}

/// One path of the table: its class, the methods it serves and their handlers.
struct Route {
    path: &'static str,
    class: Class,
    methods: Vec<Method>,
    router: MethodRouter<AppState>,
}

fn route(path: &'static str, class: Class) -> Route {
    Route {
        path,
        class,
        methods: Vec::new(),
        router: MethodRouter::new(),
    }
}

impl Route {
    fn on<H, T>(mut self, method: Method, filter: MethodFilter, handler: H) -> Self
    where
        H: Handler<T, AppState>,
        T: 'static,
    {
        self.methods.push(method);
        self.router = self.router.on(filter, handler);
        self
    }

    fn get<H: Handler<T, AppState>, T: 'static>(self, handler: H) -> Self {
        self.on(Method::GET, MethodFilter::GET, handler)
    }

    fn post<H: Handler<T, AppState>, T: 'static>(self, handler: H) -> Self {
        self.on(Method::POST, MethodFilter::POST, handler)
    }

    fn put<H: Handler<T, AppState>, T: 'static>(self, handler: H) -> Self {
        self.on(Method::PUT, MethodFilter::PUT, handler)
    }

    fn delete<H: Handler<T, AppState>, T: 'static>(self, handler: H) -> Self {
        self.on(Method::DELETE, MethodFilter::DELETE, handler)
    }
}

/// Every route: the one table the router is built from and the OpenAPI document is checked
/// against.
fn table() -> Vec<Route> {
    use Class::{Open, Streaming, Timed};
    vec![
        route("/health", Open).get(health::health),
        route("/ready", Open).get(health::ready),
        route("/openapi.json", Open).get(health::openapi_json),
        route("/metrics", Open).get(crate::metrics::metrics),
        route("/v1/agents", Timed)
            .get(agents::list)
            .post(agents::create),
        route("/v1/agents/{agent_id}", Timed)
            .get(agents::show)
            .delete(agents::delete),
        route("/v1/agents/{agent_id}/model", Timed).put(agents::set_model),
        route("/v1/agents/{agent_id}/context", Timed).get(context::show),
        route("/v1/agents/{agent_id}/messages", Streaming).post(turns::send),
        route("/v1/agents/{agent_id}/turns/{turn_id}", Timed)
            .get(turns::status)
            .delete(turns::cancel),
        route("/v1/agents/{agent_id}/turns/{turn_id}/events", Streaming).get(turns::events),
        route("/v1/agents/{agent_id}/batches", Timed).get(batches::list),
        route("/v1/agents/{agent_id}/batches/{batch_id}", Timed).get(batches::show),
        route("/v1/agents/{agent_id}/batches/{batch_id}/retry", Streaming).post(turns::retry),
        route("/v1/agents/{agent_id}/blocks", Timed)
            .get(memory::list_blocks)
            .post(memory::create_block),
        route("/v1/agents/{agent_id}/blocks/{label}", Timed)
            .get(memory::show_block)
            .put(memory::set_block),
        route("/v1/agents/{agent_id}/blocks/{label}/append", Timed).post(memory::append_block),
        route("/v1/agents/{agent_id}/blocks/{label}/undo", Timed).post(memory::undo_block),
        route("/v1/agents/{agent_id}/blocks/{label}/history", Timed).get(memory::block_history),
        route("/v1/agents/{agent_id}/archival", Timed)
            .get(memory::list_archival)
            .post(memory::insert_archival),
        route("/v1/agents/{agent_id}/archival/{passage_id}", Timed)
            .get(memory::show_archival)
            .delete(memory::delete_archival),
        route("/v1/agents/{agent_id}/search", Timed).post(memory::search),
        route("/v1/agents/{agent_id}/schedules", Timed)
            .get(schedules::list)
            .post(schedules::create),
        route("/v1/agents/{agent_id}/schedules/{schedule_id}", Timed).delete(schedules::delete),
        route("/v1/agents/{agent_id}/mcp-servers", Timed)
            .get(mcp::get)
            .put(mcp::put),
        route("/v1/agents/{agent_id}/retention", Timed)
            .get(retention::get)
            .put(retention::put)
            .delete(retention::delete),
        route("/v1/agents/{agent_id}/inbox", Timed).get(protocol::inbox),
        route("/v1/agents/{agent_id}/inbox/read", Timed).post(protocol::mark_read),
        route("/v1/sessions", Timed)
            .get(protocol::list_sessions)
            .post(protocol::open_session),
        route("/v1/sessions/{session_id}", Timed).get(protocol::show_session),
        route("/v1/sessions/{session_id}/messages", Timed)
            .get(protocol::session_messages)
            .post(protocol::send_session_message),
        route("/v1/sessions/{session_id}/end", Timed).post(protocol::end_session),
        route("/v1/meetings", Timed)
            .get(protocol::list_meetings)
            .post(protocol::create_meeting),
        route("/v1/meetings/run", Timed).post(protocol::run_meeting),
        route("/v1/meetings/{meeting_id}", Timed).get(protocol::show_meeting),
        route("/v1/meetings/{meeting_id}/messages", Timed).get(protocol::meeting_messages),
        route("/v1/meetings/{meeting_id}/events", Streaming).get(protocol::meeting_events),
        route("/v1/meetings/{meeting_id}/{action}", Timed).post(protocol::meeting_action),
        route("/v1/approvals", Timed).get(approvals::list),
        route("/v1/approvals/{approval_id}", Timed)
            .get(approvals::show)
            .post(approvals::decide),
    ]
}

/// Every `(method, path, class)` the router serves.
pub(crate) fn served() -> Vec<(Method, &'static str, Class)> {
    table()
        .into_iter()
        .flat_map(|r| {
            let (path, class) = (r.path, r.class);
            r.methods.into_iter().map(move |m| (m, path, class))
        })
        .collect()
}

/// Every route, with its layers, over `state`.
pub(crate) fn router(state: AppState) -> Router {
    let (mut timed, mut streaming, mut open) = (Router::new(), Router::new(), Router::new());
    for r in table() {
        match r.class {
            Class::Timed => timed = timed.route(r.path, r.router),
            Class::Streaming => streaming = streaming.route(r.path, r.router),
            Class::Open => open = open.route(r.path, r.router),
        }
    }
    // The console's pages without JavaScript read like `/v1` routes: under the same timeout.
    let timed = timed.merge(crate::pages::router());
    let routes = crate::layers::timed(timed, state.config().request_timeout)
        .merge(streaming)
        .merge(open)
        .merge(crate::console::router())
        .fallback(unknown_route)
        .method_not_allowed_fallback(method_not_allowed);
    crate::layers::around(routes, &state).with_state(state)
}

async fn unknown_route() -> ApiError {
    ApiError::new(ErrorCode::UnknownRoute, "no such route")
}

async fn method_not_allowed() -> ApiError {
    ApiError::new(
        ErrorCode::MethodNotAllowed,
        "this method is not allowed on this route",
    )
}
