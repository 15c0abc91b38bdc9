//! An agent's memory over HTTP: memory blocks (list, create, show, set, append, undo, history),
//! archival passages (insert, list, show, delete) and search over what the agent can see.
//!
//! Block writes name the version they were based on (`expected_version`); a stale one is 409
//! `conflict` and changes nothing. Writes made through the API count as approved by a human
//! (the API key holder), like the CLI's. This module must never reach memory of an agent outside
//! the caller's organization.

use axum::extract::State;
use axum::http::StatusCode;
use pattern::memory::{
    ArchivalId, ArchivalMemory, BlockType, ListArchival, MemoryEditor, MemoryStore, NewArchival,
    NewMemoryBlock, SearchMode, SearchOptions, WriteAuth,
};
use serde::Deserialize;
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};

use crate::auth::Caller;
use crate::error::ApiError;
use crate::routes::{ApiJson, ApiPath, ApiQuery};
use crate::state::AppState;
use crate::views::{ArchivalView, BlockView, SearchHitView, VersionView};

type ErrorBody = crate::error::ErrorBody;

/// Body of `POST /v1/agents/{agent_id}/blocks`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct CreateBlock {
    /// 1 to 100 characters of `[a-z0-9_-]`.
    label: String,
    /// What the block is for, shown to the model.
    #[serde(default)]
    description: String,
    /// The first value.
    #[serde(default)]
    value: String,
    /// Most characters the value may hold (1 to 1000000; default 5000).
    #[serde(default)]
    #[schema(minimum = 1, maximum = 1000000)]
    char_limit: Option<usize>,
    /// `core` (default), `working`, `archival` or `log`.
    #[serde(default)]
    block_type: Option<String>,
}

/// Body of `PUT /v1/agents/{agent_id}/blocks/{label}`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct SetBlock {
    /// The new value (never cut: over the limit is 422 `refused`).
    value: String,
    /// The version this change is based on.
    expected_version: i64,
}

/// Body of `POST /v1/agents/{agent_id}/blocks/{label}/append`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct AppendBlock {
    /// Text added on a new line at the end.
    text: String,
    /// The version this change is based on.
    expected_version: i64,
}

/// Body of `POST /v1/agents/{agent_id}/blocks/{label}/undo`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct UndoBlock {
    /// The version this change is based on.
    expected_version: i64,
}

/// Body of `POST /v1/agents/{agent_id}/archival`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct InsertArchival {
    /// The passage.
    text: String,
    /// Free-form JSON kept with it.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    metadata: Option<Value>,
    /// Up to 32 tags.
    #[serde(default)]
    tags: Vec<String>,
    /// At most one passage per agent has a key: inserting it again returns that passage.
    #[serde(default)]
    key: Option<String>,
}

/// Paging of `GET /v1/agents/{agent_id}/archival`.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
pub(crate) struct ArchivalPage {
    /// Most passages, 1 to 1000 (default 50).
    #[param(minimum = 1, maximum = 1000)]
    limit: Option<usize>,
    /// Only passages older than this one (the last id of the previous page).
    before: Option<String>,
    /// Only passages with this tag.
    tag: Option<String>,
}

/// Body of `POST /v1/agents/{agent_id}/search`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct SearchRequest {
    /// What to look for.
    query: String,
    /// `fts`, `vector`, `hybrid` or `auto` (default: hybrid when embeddings are on).
    #[serde(default)]
    mode: Option<String>,
    /// Most hits, 1 to 100 (default 10).
    #[serde(default)]
    #[schema(minimum = 1, maximum = 100)]
    limit: Option<usize>,
}

async fn block_view(
    state: &AppState,
    agent: pattern::AgentId,
    label: &str,
) -> Result<BlockView, ApiError> {
    let block = state.pattern().memory().block(agent, label).await?;
    Ok(BlockView::from(&block))
}

/// The agent's memory blocks.
#[utoipa::path(get, path = "/v1/agents/{agent_id}/blocks", tag = "memory",
    security(("api_key" = [])), params(("agent_id" = String, Path, description = "agent id")),
    responses((status = 200, body = Vec<BlockView>), (status = 404, body = ErrorBody)))]
pub(crate) async fn list_blocks(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(agent_id): ApiPath<String>,
) -> Result<ApiJson<Vec<BlockView>>, ApiError> {
    let agent = caller.agent(&state, &agent_id).await?;
    let blocks = state.pattern().memory().context_blocks(agent.id).await?;
    Ok(ApiJson(blocks.iter().map(BlockView::from).collect()))
}

/// Creates a block owned by the agent.
#[utoipa::path(post, path = "/v1/agents/{agent_id}/blocks", tag = "memory",
    security(("api_key" = [])), params(("agent_id" = String, Path, description = "agent id")),
    request_body = CreateBlock,
    responses((status = 201, body = BlockView), (status = 409, body = ErrorBody),
        (status = 422, body = ErrorBody)))]
pub(crate) async fn create_block(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(agent_id): ApiPath<String>,
    ApiJson(body): ApiJson<CreateBlock>,
) -> Result<(StatusCode, ApiJson<BlockView>), ApiError> {
    let agent = caller.agent(&state, &agent_id).await?;
    let block_type: BlockType = body
        .block_type
        .as_deref()
        .unwrap_or("core")
        .parse()
        .map_err(|e: pattern::memory::Error| ApiError::invalid(e.to_string()))?;
    let block = state
        .pattern()
        .memory()
        .create_block(
            agent.id,
            NewMemoryBlock {
                label: body.label,
                description: body.description,
                value: body.value,
                char_limit: crate::limits::BLOCK_CHARS.check(body.char_limit, 5000)?,
                block_type,
            },
        )
        .await?;
    Ok((StatusCode::CREATED, ApiJson(BlockView::from(&block))))
}

/// One block.
#[utoipa::path(get, path = "/v1/agents/{agent_id}/blocks/{label}", tag = "memory",
    security(("api_key" = [])),
    params(("agent_id" = String, Path, description = "agent id"), ("label" = String, Path)),
    responses((status = 200, body = BlockView), (status = 404, body = ErrorBody)))]
pub(crate) async fn show_block(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath((agent_id, label)): ApiPath<(String, String)>,
) -> Result<ApiJson<BlockView>, ApiError> {
    let agent = caller.agent(&state, &agent_id).await?;
    Ok(ApiJson(block_view(&state, agent.id, &label).await?))
}

/// Replaces a block's value.
#[utoipa::path(put, path = "/v1/agents/{agent_id}/blocks/{label}", tag = "memory",
    security(("api_key" = [])),
    params(("agent_id" = String, Path, description = "agent id"), ("label" = String, Path)),
    request_body = SetBlock,
    responses((status = 200, body = BlockView), (status = 409, description = "stale version",
        body = ErrorBody), (status = 422, description = "over the limit", body = ErrorBody)))]
pub(crate) async fn set_block(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath((agent_id, label)): ApiPath<(String, String)>,
    ApiJson(body): ApiJson<SetBlock>,
) -> Result<ApiJson<BlockView>, ApiError> {
    let agent = caller.agent(&state, &agent_id).await?;
    state
        .pattern()
        .memory()
        .set(
            agent.id,
            &label,
            &body.value,
            body.expected_version,
            WriteAuth::Approved,
        )
        .await?;
    Ok(ApiJson(block_view(&state, agent.id, &label).await?))
}

/// Appends a line to a block.
#[utoipa::path(post, path = "/v1/agents/{agent_id}/blocks/{label}/append", tag = "memory",
    security(("api_key" = [])),
    params(("agent_id" = String, Path, description = "agent id"), ("label" = String, Path)),
    request_body = AppendBlock,
    responses((status = 200, body = BlockView), (status = 409, body = ErrorBody),
        (status = 422, body = ErrorBody)))]
pub(crate) async fn append_block(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath((agent_id, label)): ApiPath<(String, String)>,
    ApiJson(body): ApiJson<AppendBlock>,
) -> Result<ApiJson<BlockView>, ApiError> {
    let agent = caller.agent(&state, &agent_id).await?;
    state
        .pattern()
        .memory()
        .append(
            agent.id,
            &label,
            &body.text,
            body.expected_version,
            WriteAuth::Approved,
        )
        .await?;
    Ok(ApiJson(block_view(&state, agent.id, &label).await?))
}

/// Restores the value from before the latest change, as a new version.
#[utoipa::path(post, path = "/v1/agents/{agent_id}/blocks/{label}/undo", tag = "memory",
    security(("api_key" = [])),
    params(("agent_id" = String, Path, description = "agent id"), ("label" = String, Path)),
    request_body = UndoBlock,
    responses((status = 200, body = BlockView), (status = 409, body = ErrorBody)))]
pub(crate) async fn undo_block(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath((agent_id, label)): ApiPath<(String, String)>,
    ApiJson(body): ApiJson<UndoBlock>,
) -> Result<ApiJson<BlockView>, ApiError> {
    let agent = caller.agent(&state, &agent_id).await?;
    state
        .pattern()
        .memory()
        .undo(agent.id, &label, body.expected_version, WriteAuth::Approved)
        .await?;
    Ok(ApiJson(block_view(&state, agent.id, &label).await?))
}

/// Every version of a block, newest first.
#[utoipa::path(get, path = "/v1/agents/{agent_id}/blocks/{label}/history", tag = "memory",
    security(("api_key" = [])),
    params(("agent_id" = String, Path, description = "agent id"), ("label" = String, Path)),
    responses((status = 200, body = Vec<VersionView>), (status = 404, body = ErrorBody)))]
pub(crate) async fn block_history(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath((agent_id, label)): ApiPath<(String, String)>,
) -> Result<ApiJson<Vec<VersionView>>, ApiError> {
    let agent = caller.agent(&state, &agent_id).await?;
    let history = state.pattern().memory().history(agent.id, &label).await?;
    Ok(ApiJson(history.iter().map(VersionView::from).collect()))
}

fn passage_id(text: &str) -> Result<ArchivalId, ApiError> {
    text.parse()
        .map_err(|_| ApiError::not_found(format!("no archival passage `{text}`")))
}

/// Stores an archival passage (embedded in the background when embeddings are on).
#[utoipa::path(post, path = "/v1/agents/{agent_id}/archival", tag = "archival",
    security(("api_key" = [])), params(("agent_id" = String, Path, description = "agent id")),
    request_body = InsertArchival,
    responses((status = 201, body = ArchivalView), (status = 400, body = ErrorBody),
        (status = 422, body = ErrorBody)))]
pub(crate) async fn insert_archival(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(agent_id): ApiPath<String>,
    ApiJson(body): ApiJson<InsertArchival>,
) -> Result<(StatusCode, ApiJson<ArchivalView>), ApiError> {
    let agent = caller.agent(&state, &agent_id).await?;
    let entry = state
        .pattern()
        .memory()
        .insert_archival(
            agent.id,
            NewArchival {
                content: body.text,
                metadata: body.metadata.unwrap_or(Value::Null),
                tags: body.tags,
                dedupe_key: body.key,
            },
        )
        .await?;
    Ok((StatusCode::CREATED, ApiJson(ArchivalView::from(&entry))))
}

/// The agent's archival passages, newest first.
#[utoipa::path(get, path = "/v1/agents/{agent_id}/archival", tag = "archival",
    security(("api_key" = [])),
    params(("agent_id" = String, Path, description = "agent id"), ArchivalPage),
    responses((status = 200, body = Vec<ArchivalView>), (status = 404, body = ErrorBody)))]
pub(crate) async fn list_archival(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(agent_id): ApiPath<String>,
    ApiQuery(page): ApiQuery<ArchivalPage>,
) -> Result<ApiJson<Vec<ArchivalView>>, ApiError> {
    let agent = caller.agent(&state, &agent_id).await?;
    let before = match page.before.as_deref() {
        Some(text) => Some(
            text.parse()
                .map_err(|_| ApiError::invalid(format!("`{text}` is not a passage id")))?,
        ),
        None => None,
    };
    let entries = state
        .pattern()
        .memory()
        .list_archival(
            agent.id,
            ListArchival {
                limit: crate::limits::ARCHIVAL_PAGE.check(page.limit, 50)?,
                before,
                tag: page.tag,
            },
        )
        .await?;
    Ok(ApiJson(entries.iter().map(ArchivalView::from).collect()))
}

/// One archival passage.
#[utoipa::path(get, path = "/v1/agents/{agent_id}/archival/{passage_id}", tag = "archival",
    security(("api_key" = [])),
    params(("agent_id" = String, Path, description = "agent id"), ("passage_id" = String, Path)),
    responses((status = 200, body = ArchivalView), (status = 404, body = ErrorBody)))]
pub(crate) async fn show_archival(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath((agent_id, passage)): ApiPath<(String, String)>,
) -> Result<ApiJson<ArchivalView>, ApiError> {
    let agent = caller.agent(&state, &agent_id).await?;
    let entry = state
        .pattern()
        .memory()
        .archival(agent.id, passage_id(&passage)?)
        .await?;
    Ok(ApiJson(ArchivalView::from(&entry)))
}

/// Deletes an archival passage.
#[utoipa::path(delete, path = "/v1/agents/{agent_id}/archival/{passage_id}", tag = "archival",
    security(("api_key" = [])),
    params(("agent_id" = String, Path, description = "agent id"), ("passage_id" = String, Path)),
    responses((status = 204), (status = 404, body = ErrorBody)))]
pub(crate) async fn delete_archival(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath((agent_id, passage)): ApiPath<(String, String)>,
) -> Result<StatusCode, ApiError> {
    let agent = caller.agent(&state, &agent_id).await?;
    let id = passage_id(&passage)?;
    if state
        .pattern()
        .memory()
        .delete_archival(agent.id, id)
        .await?
    {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::not_found(format!(
            "no archival passage `{passage}`"
        )))
    }
}

/// Searches what the agent can see: its messages, archival passages and blocks.
#[utoipa::path(post, path = "/v1/agents/{agent_id}/search", tag = "search",
    security(("api_key" = [])), params(("agent_id" = String, Path, description = "agent id")),
    request_body = SearchRequest,
    responses((status = 200, body = Vec<SearchHitView>), (status = 400, body = ErrorBody),
        (status = 422, description = "vector search without embeddings", body = ErrorBody)))]
pub(crate) async fn search(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(agent_id): ApiPath<String>,
    ApiJson(body): ApiJson<SearchRequest>,
) -> Result<ApiJson<Vec<SearchHitView>>, ApiError> {
    let agent = caller.agent(&state, &agent_id).await?;
    let mode = match body.mode.as_deref().unwrap_or("auto") {
        "auto" => SearchMode::Auto,
        "fts" => SearchMode::Fts,
        "vector" => SearchMode::Vector,
        "hybrid" => SearchMode::Hybrid,
        other => {
            return Err(ApiError::invalid(format!(
                "`mode` must be fts, vector, hybrid or auto, not `{other}`"
            )));
        }
    };
    let options = SearchOptions {
        mode,
        limit: crate::limits::SEARCH_HITS.check(body.limit, 10)?,
        agent: Some(agent.id),
        ..SearchOptions::default()
    };
    let hits = state.pattern().search(&body.query, &options).await?;
    Ok(ApiJson(hits.iter().map(SearchHitView::from).collect()))
}
