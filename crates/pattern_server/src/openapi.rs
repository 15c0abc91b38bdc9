//! The OpenAPI 3.1 document of the HTTP API, generated from the route annotations and the body
//! types (utoipa), served at `/openapi.json`. What every route shares is added here rather than
//! repeated per route: 401 on keyed routes, 400/413/415 on routes that take a body, 504 on routes
//! under the request timeout, and the request and response headers of turns. This module must
//! never describe a route the router does not serve, nor leave one out (a test compares the
//! document with [`crate::routes()`], methods included).

use axum::http::Method;
use utoipa::openapi::content::Content;
use utoipa::openapi::header::HeaderBuilder;
use utoipa::openapi::path::{Operation, ParameterBuilder, ParameterIn, PathItem};
use utoipa::openapi::response::{Response, ResponseBuilder};
use utoipa::openapi::schema::{ObjectBuilder, Type};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{Ref, RefOr, Required};
use utoipa::{Modify, OpenApi};

use crate::routes::{
    Class, agents, approvals, batches, context, health, mcp, memory, protocol, retention,
    schedules, turns,
};

#[derive(OpenApi)]
#[openapi(
    info(title = "Pattern API", description = "Stateful agents with durable memory: \
        organization-scoped agents, turns streamed over resumable server-sent events, memory \
        blocks, archival memory, search, batch inspection and approval requests."),
    paths(
        health::health, health::ready, health::openapi_json, crate::metrics::metrics,
        agents::create, agents::list, agents::show, agents::delete, agents::set_model,
        context::show,
        turns::send, turns::retry, turns::events, turns::status, turns::cancel,
        batches::list, batches::show,
        memory::list_blocks, memory::create_block, memory::show_block, memory::set_block,
        memory::append_block, memory::undo_block, memory::block_history,
        memory::insert_archival, memory::list_archival, memory::show_archival,
        memory::delete_archival, memory::search,
        schedules::create, schedules::list, schedules::delete,
        mcp::get, mcp::put,
        retention::get, retention::put, retention::delete,
        protocol::list_sessions, protocol::list_meetings,
        protocol::open_session, protocol::show_session, protocol::send_session_message,
        protocol::session_messages, protocol::end_session, protocol::inbox, protocol::mark_read,
        protocol::create_meeting, protocol::run_meeting, protocol::show_meeting,
        protocol::meeting_messages,
        protocol::meeting_action, protocol::meeting_events,
        approvals::list, approvals::show, approvals::decide,
    ),
    modifiers(&ApiKeyAuth, &Shared),
)]
struct ApiDoc;

struct ApiKeyAuth;

impl Modify for ApiKeyAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "api_key",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .bearer_format("pat_<64 hex>")
                    .description(Some(
                        "An organization's API key (`pattern key create --org ORG`)",
                    ))
                    .build(),
            ),
        );
    }
}

/// The error answers every route of a kind shares: `(status, component name, description)`.
const SHARED: [(&str, &str, &str); 5] = [
    (
        "400",
        "BadRequest",
        "`invalid_request` (a bad id, label, parameter or path segment) or `invalid_json`",
    ),
    (
        "401",
        "Unauthorized",
        "`missing_api_key` or `invalid_api_key`: no key, or an unknown or revoked one",
    ),
    (
        "413",
        "PayloadTooLarge",
        "`payload_too_large`: the body is over the server's limit",
    ),
    (
        "415",
        "UnsupportedMediaType",
        "`unsupported_media_type`: the body is not `application/json`",
    ),
    (
        "504",
        "Timeout",
        "`timeout`: the request took longer than the server's limit",
    ),
];

/// Adds what routes share (module doc).
struct Shared;

impl Modify for Shared {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        for (_, name, description) in SHARED {
            components
                .responses
                .insert(name.to_owned(), RefOr::T(error_response(description)));
        }
        let served = crate::routes::served();
        for (path, item) in openapi.paths.paths.iter_mut() {
            for (method, operation) in operations(item) {
                let timed = served
                    .iter()
                    .any(|(m, p, class)| *m == method && p == path && *class == Class::Timed);
                let secured = operation.security.as_ref().is_some_and(|s| !s.is_empty());
                let has_body = operation.request_body.is_some();
                let has_params = operation.parameters.as_ref().is_some_and(|p| !p.is_empty());
                for (status, name, _) in SHARED {
                    let applies = match status {
                        "400" => has_body || has_params,
                        "401" => secured,
                        "413" | "415" => has_body,
                        _ => timed,
                    };
                    if applies {
                        operation
                            .responses
                            .responses
                            .entry(status.to_owned())
                            .or_insert_with(|| RefOr::Ref(Ref::from_response_name(name)));
                    }
                }
                if method == Method::POST
                    && (path.ends_with("/messages") && path.starts_with("/v1/agents/")
                        || path.ends_with("/retry"))
                {
                    turn_headers(operation);
                }
            }
        }
    }
}

/// The operations of a path with their methods.
fn operations(item: &mut PathItem) -> impl Iterator<Item = (Method, &mut Operation)> {
    [
        (Method::GET, item.get.as_mut()),
        (Method::POST, item.post.as_mut()),
        (Method::PUT, item.put.as_mut()),
        (Method::DELETE, item.delete.as_mut()),
        (Method::PATCH, item.patch.as_mut()),
        (Method::HEAD, item.head.as_mut()),
        (Method::OPTIONS, item.options.as_mut()),
        (Method::TRACE, item.trace.as_mut()),
    ]
    .into_iter()
    .filter_map(|(method, op)| op.map(|op| (method, op)))
}

fn error_response(description: &str) -> Response {
    ResponseBuilder::new()
        .description(description)
        .content(
            "application/json",
            Content::new(Some(Ref::from_schema_name("ErrorBody"))),
        )
        .build()
}

fn string() -> ObjectBuilder {
    ObjectBuilder::new().schema_type(Type::String)
}

/// The headers of a request that starts a turn, and of the answers that come from a turn.
fn turn_headers(operation: &mut Operation) {
    let parameters = operation.parameters.get_or_insert_with(Vec::new);
    parameters.push(
        ParameterBuilder::new()
            .name("Idempotency-Key")
            .parameter_in(ParameterIn::Header)
            .required(Required::False)
            .description(Some(
                "1 to 200 characters naming this attempt: a repeat with the same key (while the \
                 first turn is replayable) answers from that turn and stores nothing again",
            ))
            .schema(Some(string().max_length(Some(200))))
            .build(),
    );
    parameters.push(
        ParameterBuilder::new()
            .name("Accept")
            .parameter_in(ParameterIn::Header)
            .required(Required::False)
            .description(Some(
                "`text/event-stream` streams the turn (like `stream: true`); otherwise the \
                 answer is the final response as JSON",
            ))
            .schema(Some(string()))
            .build(),
    );
    for (status, response) in operation.responses.responses.iter_mut() {
        let RefOr::T(response) = response else {
            continue;
        };
        // Answers that come from the turn (its result or its failure); not 400, 401 or 404,
        // which are refused before a turn starts.
        if !matches!(status.as_str(), "200" | "409" | "422" | "502" | "503") {
            continue;
        }
        if status == "200" {
            response.content.insert(
                "text/event-stream".to_owned(),
                Content::new(Some(string().description(Some(
                    "server-sent events: each event's name is the ResponseEvent type, its data \
                     the event as JSON, its id 1, 2, ...; a failure ends the stream with an \
                     `error` event whose data is the error body plus `type: error`",
                )))),
            );
        }
        for (name, description) in [
            (crate::TURN_ID_HEADER, "the turn's id"),
            (
                "Location",
                "the turn: `/v1/agents/{agent_id}/turns/{turn_id}`",
            ),
            (
                crate::REPLAYED_HEADER,
                "`true` when the answer replays an earlier request's turn (same \
                 Idempotency-Key); absent otherwise",
            ),
        ] {
            response.headers.insert(
                name.to_owned(),
                HeaderBuilder::new()
                    .schema(string())
                    .description(Some(description))
                    .build(),
            );
        }
    }
}

/// The document.
pub fn openapi() -> utoipa::openapi::OpenApi {
    ApiDoc::openapi()
}
