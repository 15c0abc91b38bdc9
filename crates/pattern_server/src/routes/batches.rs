//! `/v1/agents/{agent_id}/batches`: batch inspection (state, type, messages, tool pairs,
//! timings), the same shapes as `pattern batches --json`. Read-only: this module must never
//! change a batch.

use axum::extract::State;
use pattern::SnowflakeId;
use serde::Deserialize;
use utoipa::IntoParams;

use crate::auth::Caller;
use crate::error::ApiError;
use crate::routes::{ApiJson, ApiPath, ApiQuery};
use crate::state::AppState;
use crate::views::{BatchDetail, BatchView};

/// Paging of `GET /v1/agents/{agent_id}/batches`.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
pub(crate) struct Page {
    /// Only batches older than this batch id (the last id of the previous page).
    before: Option<String>,
    /// Most batches, 1 to 500 (default 50).
    #[param(minimum = 1, maximum = 500)]
    limit: Option<usize>,
}

pub(crate) fn batch_id(text: &str) -> Result<SnowflakeId, ApiError> {
    text.parse()
        .map_err(|_| ApiError::invalid(format!("`{text}` is not a batch id (a decimal number)")))
}

/// The agent's batches, newest first.
#[utoipa::path(get, path = "/v1/agents/{agent_id}/batches", tag = "batches",
    security(("api_key" = [])),
    params(("agent_id" = String, Path, description = "agent id (UUID)"), Page),
    responses((status = 200, body = Vec<BatchView>), (status = 404, body = crate::error::ErrorBody)))]
pub(crate) async fn list(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(agent_id): ApiPath<String>,
    ApiQuery(page): ApiQuery<Page>,
) -> Result<ApiJson<Vec<BatchView>>, ApiError> {
    let agent = caller.agent(&state, &agent_id).await?;
    let limit = crate::limits::BATCHES_PAGE.check(page.limit, 50)?;
    let before = page.before.as_deref().map(batch_id).transpose()?;
    let batches = state
        .pattern()
        .messages(agent.id)
        .list_batches(before, limit)
        .await?;
    Ok(ApiJson(batches.iter().map(BatchView::from).collect()))
}

/// One batch with its messages and tool pairs.
#[utoipa::path(get, path = "/v1/agents/{agent_id}/batches/{batch_id}", tag = "batches",
    security(("api_key" = [])),
    params(("agent_id" = String, Path, description = "agent id (UUID)"),
        ("batch_id" = String, Path, description = "batch id (decimal)")),
    responses((status = 200, body = BatchDetail), (status = 404, body = crate::error::ErrorBody)))]
pub(crate) async fn show(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath((agent_id, batch)): ApiPath<(String, String)>,
) -> Result<ApiJson<BatchDetail>, ApiError> {
    let agent = caller.agent(&state, &agent_id).await?;
    let batch = state
        .pattern()
        .messages(agent.id)
        .get_batch(batch_id(&batch)?)
        .await?;
    Ok(ApiJson(BatchDetail::from(&batch)))
}
