//! `/v1/agents`: create, list, show and delete the caller's organization's agents. This module
//! must never list or touch an agent outside the caller's organization.

use axum::extract::State;
use axum::http::StatusCode;
use pattern::{Agent, NewAgent};
use serde::Deserialize;
use serde_json::Value;
use utoipa::ToSchema;

use crate::auth::Caller;
use crate::error::ApiError;
use crate::routes::{ApiJson, ApiPath};
use crate::state::AppState;
use crate::views::AgentView;

/// Body of `POST /v1/agents`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct CreateAgent {
    /// Unique in the organization; 1 to 200 characters, no `/`, no control or bidirectional
    /// override characters, no white space at either end (the rule of `pattern agent create`).
    name: String,
    /// The id the outside world knows it by, unique in the organization (the name when absent;
    /// the same rule as the name).
    #[serde(default)]
    external_id: Option<String>,
    /// What the agent is told (its system prompt); a default when absent.
    #[serde(default)]
    instructions: Option<String>,
    /// Free-form JSON object kept with the agent.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    metadata: Option<Value>,
}

/// The agent as its organization sees it.
pub(crate) fn view(_caller: &Caller, agent: &Agent) -> AgentView {
    AgentView::from(agent)
}

/// Creates an agent in the caller's organization.
#[utoipa::path(post, path = "/v1/agents", tag = "agents", request_body = CreateAgent,
    security(("api_key" = [])),
    responses((status = 201, body = AgentView), (status = 400, body = crate::error::ErrorBody),
        (status = 409, description = "name taken", body = crate::error::ErrorBody)))]
pub(crate) async fn create(
    State(state): State<AppState>,
    caller: Caller,
    ApiJson(body): ApiJson<CreateAgent>,
) -> Result<(StatusCode, ApiJson<AgentView>), ApiError> {
    let name = body.name.as_str();
    let mut metadata = match body.metadata {
        None | Some(Value::Null) => Value::Object(serde_json::Map::new()),
        Some(Value::Object(map)) => Value::Object(map),
        Some(_) => return Err(ApiError::invalid("`metadata` must be a JSON object")),
    };
    if let (Some(text), Value::Object(map)) = (body.instructions, &mut metadata) {
        map.insert("instructions".into(), Value::String(text));
    }
    let new = NewAgent {
        metadata,
        external_id: body.external_id,
        ..NewAgent::named(name).in_organization(caller.org)
    };
    let agent = state
        .pattern()
        .db()
        .create_org_agent(caller.org, new)
        .await?;
    Ok((StatusCode::CREATED, ApiJson(view(&caller, &agent))))
}

/// The organization's agents, by name.
#[utoipa::path(get, path = "/v1/agents", tag = "agents", security(("api_key" = [])),
    responses((status = 200, body = Vec<AgentView>)))]
pub(crate) async fn list(
    State(state): State<AppState>,
    caller: Caller,
) -> Result<ApiJson<Vec<AgentView>>, ApiError> {
    let agents = state.pattern().db().org_agents(caller.org).await?;
    Ok(ApiJson(agents.iter().map(|a| view(&caller, a)).collect()))
}

/// One agent.
#[utoipa::path(get, path = "/v1/agents/{agent_id}", tag = "agents", security(("api_key" = [])),
    params(("agent_id" = String, Path, description = "agent id (UUID)")),
    responses((status = 200, body = AgentView), (status = 404, body = crate::error::ErrorBody)))]
pub(crate) async fn show(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(agent_id): ApiPath<String>,
) -> Result<ApiJson<AgentView>, ApiError> {
    let agent = caller.agent(&state, &agent_id).await?;
    Ok(ApiJson(view(&caller, &agent)))
}

/// Deletes an agent and everything stored for it.
#[utoipa::path(delete, path = "/v1/agents/{agent_id}", tag = "agents", security(("api_key" = [])),
    params(("agent_id" = String, Path, description = "agent id (UUID)")),
    responses((status = 204), (status = 404, body = crate::error::ErrorBody)))]
pub(crate) async fn delete(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(agent_id): ApiPath<String>,
) -> Result<StatusCode, ApiError> {
    let agent = caller.agent(&state, &agent_id).await?;
    state
        .pattern()
        .db()
        .delete_org_agent(caller.org, agent.id)
        .await?;
    state.forget(agent.id).await;
    Ok(StatusCode::NO_CONTENT)
}
