//! `pattern mcp serve --http ADDR`: one agent's memory server (`pattern_core::mcp::memory`)
//! over MCP's streamable HTTP at `/mcp`, behind an organization API key.
//!
//! Every request needs `Authorization: Bearer <key>` with a live key (stored hashed by
//! `pattern_db`) of the agent's own organization (`pattern key create --org ORG`).
//! Anything else is 401 with the API's JSON error before the MCP layer sees the request. This
//! module must never log or echo a presented key, and never serve another agent's memory.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::header::AUTHORIZATION;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use pattern::core::mcp::memory::MemoryServer;
use pattern::db::protocol::OrganizationId;
use pattern::{AgentId, Database};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};

use crate::error::{ApiError, ErrorCode};

#[derive(Clone)]
struct Gate {
    db: Database,
    org: OrganizationId,
}

async fn authenticate(State(gate): State<Gate>, request: Request, next: Next) -> Response {
    let secret = request
        .headers()
        .get(AUTHORIZATION)
        .and_then(|h| h.to_str().ok())
        .and_then(crate::auth::bearer_token);
    let Some(secret) = secret else {
        return ApiError::new(
            ErrorCode::MissingApiKey,
            "send an organization API key as `Authorization: Bearer <key>`",
        )
        .into_response();
    };
    match gate.db.authenticate_api_key(secret).await {
        Ok(Some(key)) if key.organization == gate.org => next.run(request).await,
        Ok(_) => ApiError::new(
            ErrorCode::InvalidApiKey,
            "the API key is unknown, revoked, or not of this agent's organization",
        )
        .into_response(),
        Err(e) => ApiError::from(e).into_response(),
    }
}

/// The router: `/mcp` serving `server` (the memory of `agent`), authenticated.
pub async fn memory_router(
    db: Database,
    agent: AgentId,
    server: MemoryServer,
    local: SocketAddr,
) -> crate::Result<Router> {
    let org = db
        .agent_organization(agent)
        .await
        .map_err(|e| crate::Error::Pattern(e.into()))?;
    let mut config = StreamableHttpServerConfig::default();
    if !local.ip().is_loopback() {
        // Bound beyond loopback on purpose: the API key, not the Host header, is the guard.
        config = config.disable_allowed_hosts();
    }
    let service = StreamableHttpService::new(
        move || Ok(server.clone()),
        Arc::new(LocalSessionManager::default()),
        config,
    );
    Ok(Router::new()
        .nest_service("/mcp", service)
        .layer(axum::middleware::from_fn_with_state(
            Gate { db, org },
            authenticate,
        )))
}

/// Serves `router` on `listener` until `shutdown` completes.
pub async fn serve_memory(
    listener: tokio::net::TcpListener,
    router: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, router)
        .with_graceful_shutdown(shutdown)
        .await
}
