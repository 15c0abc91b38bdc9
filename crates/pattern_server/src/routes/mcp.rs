//! `/v1/agents/{agent_id}/mcp-servers`: the MCP servers whose tools an agent uses (decision
//! 0015): read them all, or replace them all in one transaction. A configuration is checked by
//! `pattern_core::mcp` (400 `invalid_request` naming the server) before anything is stored; the
//! agent loaded here is unloaded so that its next turn connects the new set. This module must
//! never start a server itself and never reach an agent but through the caller's organization.

use std::collections::BTreeMap;

use axum::extract::State;
use pattern::core::mcp::McpServerConfig;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::{ApiJson, ApiPath};
use crate::auth::Caller;
use crate::error::{ApiError, ErrorBody};
use crate::state::AppState;

/// An agent's MCP servers by name: each `{"command", "args", "env"}` (a child process over
/// stdio) or `{"url"}` (streamable HTTP). Names are 1 to 32 characters of `[a-z0-9-]`; the
/// model sees server `s`'s tool `t` as `s__t`.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct McpServers {
    /// Server name -> configuration.
    #[schema(value_type = Object)]
    servers: BTreeMap<String, serde_json::Value>,
}

async fn current(state: &AppState, agent: pattern::AgentId) -> Result<McpServers, ApiError> {
    let rows = state.pattern().db().mcp_servers(agent).await?;
    Ok(McpServers {
        servers: rows.into_iter().map(|r| (r.name, r.config)).collect(),
    })
}

/// The agent's MCP servers.
#[utoipa::path(get, path = "/v1/agents/{agent_id}/mcp-servers", tag = "mcp",
    security(("api_key" = [])), params(("agent_id" = String, Path, description = "agent id")),
    responses((status = 200, body = McpServers), (status = 404, body = ErrorBody)))]
pub(crate) async fn get(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(agent_id): ApiPath<String>,
) -> Result<ApiJson<McpServers>, ApiError> {
    let agent = caller.agent(&state, &agent_id).await?;
    Ok(ApiJson(current(&state, agent.id).await?))
}

/// Replaces the agent's MCP servers (all of them; `{"servers": {}}` removes every one).
#[utoipa::path(put, path = "/v1/agents/{agent_id}/mcp-servers", tag = "mcp",
    security(("api_key" = [])), params(("agent_id" = String, Path, description = "agent id")),
    request_body = McpServers,
    responses((status = 200, body = McpServers),
        (status = 400, description = "`invalid_request`: a bad name or configuration; the message names the server", body = ErrorBody),
        (status = 404, body = ErrorBody)))]
pub(crate) async fn put(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(agent_id): ApiPath<String>,
    ApiJson(body): ApiJson<McpServers>,
) -> Result<ApiJson<McpServers>, ApiError> {
    let agent = caller.agent(&state, &agent_id).await?;
    let mut servers = Vec::with_capacity(body.servers.len());
    for (name, config) in body.servers {
        let checked = McpServerConfig::from_json(&name, &config)?;
        servers.push((name, checked.to_json()));
    }
    state
        .pattern()
        .db()
        .set_mcp_servers(agent.id, &servers)
        .await?;
    state.forget(agent.id).await;
    Ok(ApiJson(current(&state, agent.id).await?))
}
