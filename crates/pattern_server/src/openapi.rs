//! The OpenAPI 3.1 document of the HTTP API, generated from the route annotations and the body
//! types (utoipa), served at `/openapi.json`. This module must never describe a route the router
//! does not serve (a test compares the two).

use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

use crate::routes::{agents, batches, health, memory, protocol, turns};

#[derive(OpenApi)]
#[openapi(
    info(title = "Pattern API", description = "Stateful agents with durable memory: \
        organization-scoped agents, turns streamed over resumable server-sent events, memory \
        blocks, archival memory, search and batch inspection."),
    paths(
        health::health, health::ready,
        agents::create, agents::list, agents::show, agents::delete,
        turns::send, turns::retry, turns::events, turns::status, turns::cancel,
        batches::list, batches::show,
        memory::list_blocks, memory::create_block, memory::show_block, memory::set_block,
        memory::append_block, memory::undo_block, memory::block_history,
        memory::insert_archival, memory::list_archival, memory::show_archival,
        memory::delete_archival, memory::search,
        protocol::open_session, protocol::show_session, protocol::send_session_message,
        protocol::session_messages, protocol::end_session, protocol::inbox, protocol::mark_read,
        protocol::create_meeting, protocol::show_meeting, protocol::meeting_messages,
        protocol::meeting_action, protocol::meeting_events,
    ),
    modifiers(&ApiKeyAuth),
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

/// The document.
pub fn openapi() -> utoipa::openapi::OpenApi {
    ApiDoc::openapi()
}
