//! `/v1/agents/{agent_id}/retention`: an agent's stored retention policy (decision 0024): read
//! it, replace it, or clear it. Numbers are checked against `crate::limits` (400 naming the
//! field) and the policy by `pattern_db::retention` (400 `invalid_request`: a zero, a policy
//! that keeps everything) before anything is stored. This module must never run a retention
//! pass (`pattern serve` and `pattern retention --apply` do) and never reach an agent but
//! through the caller's organization.

use axum::extract::State;
use axum::http::StatusCode;
use pattern::db::retention::{BatchDisposal, RetentionSettings, StoredRetention};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::{ApiJson, ApiPath};
use crate::auth::Caller;
use crate::error::{ApiError, ErrorBody};
use crate::limits::{KEEP_BLOCK_VERSIONS, RETENTION_DAYS_ACTIVITY, RETENTION_DAYS_BATCHES};
use crate::state::AppState;

/// An agent's retention policy: what of its own data goes, and when. An absent kind is kept.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct RetentionBody {
    /// Old batches (abandoned, or complete and covered by a summary; never an open one) go
    /// after this many days (1 to 36500).
    #[serde(default)]
    #[schema(minimum = 1, maximum = 36500)]
    batches_older_than_days: Option<u32>,
    /// `delete` (default) or `archive`: written to the agent's archive file first.
    #[serde(default)]
    #[schema(value_type = Option<String>)]
    batch_disposal: Option<BatchDisposal>,
    /// Each block keeps its last N versions and, beyond them, the last of each day (1 to
    /// 100000).
    #[serde(default)]
    #[schema(minimum = 1, maximum = 100000)]
    keep_block_versions: Option<u32>,
    /// Activity events go after this many days (1 to 36500).
    #[serde(default)]
    #[schema(minimum = 1, maximum = 36500)]
    activity_older_than_days: Option<u32>,
}

/// A stored policy.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct RetentionView {
    /// The agent.
    agent_id: String,
    /// See the request body.
    batches_older_than_days: Option<u32>,
    /// `delete` or `archive`.
    batch_disposal: String,
    /// See the request body.
    keep_block_versions: Option<u32>,
    /// See the request body.
    activity_older_than_days: Option<u32>,
    /// When it was last set (RFC 3339).
    updated_at: String,
}

impl From<StoredRetention> for RetentionView {
    fn from(s: StoredRetention) -> Self {
        Self {
            agent_id: s.agent.to_string(),
            batches_older_than_days: s.settings.batches_older_than_days,
            batch_disposal: s.settings.batch_disposal.as_str().to_owned(),
            keep_block_versions: s.settings.keep_block_versions,
            activity_older_than_days: s.settings.activity_older_than_days,
            updated_at: s.updated_at.to_rfc3339(),
        }
    }
}

/// The agent's retention policy (404 when it has none).
#[utoipa::path(get, path = "/v1/agents/{agent_id}/retention", tag = "retention",
    security(("api_key" = [])), params(("agent_id" = String, Path, description = "agent id")),
    responses((status = 200, body = RetentionView),
        (status = 404, description = "no such agent, or no policy", body = ErrorBody)))]
pub(crate) async fn get(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(agent_id): ApiPath<String>,
) -> Result<ApiJson<RetentionView>, ApiError> {
    let agent = caller.agent(&state, &agent_id).await?;
    match state.pattern().db().retention_policy(agent.id).await? {
        Some(stored) => Ok(ApiJson(stored.into())),
        None => Err(ApiError::not_found(format!(
            "agent {} has no retention policy",
            agent.id
        ))),
    }
}

/// Stores the agent's retention policy, replacing any.
#[utoipa::path(put, path = "/v1/agents/{agent_id}/retention", tag = "retention",
    security(("api_key" = [])), params(("agent_id" = String, Path, description = "agent id")),
    request_body = RetentionBody,
    responses((status = 200, body = RetentionView),
        (status = 400, description = "`invalid_request`: a number out of range, or a policy that keeps everything", body = ErrorBody),
        (status = 404, body = ErrorBody)))]
pub(crate) async fn put(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(agent_id): ApiPath<String>,
    ApiJson(body): ApiJson<RetentionBody>,
) -> Result<ApiJson<RetentionView>, ApiError> {
    let agent = caller.agent(&state, &agent_id).await?;
    let check = |bound: crate::limits::Bound, v: Option<u32>| match v {
        Some(v) => bound.check(Some(v), v).map(Some),
        None => Ok(None),
    };
    let settings = RetentionSettings {
        batches_older_than_days: check(RETENTION_DAYS_BATCHES, body.batches_older_than_days)?,
        batch_disposal: body.batch_disposal.unwrap_or_default(),
        keep_block_versions: check(KEEP_BLOCK_VERSIONS, body.keep_block_versions)?,
        activity_older_than_days: check(RETENTION_DAYS_ACTIVITY, body.activity_older_than_days)?,
    };
    let stored = state
        .pattern()
        .db()
        .set_retention_policy(agent.id, settings)
        .await?;
    Ok(ApiJson(stored.into()))
}

/// Clears the agent's retention policy (204; 404 when it had none).
#[utoipa::path(delete, path = "/v1/agents/{agent_id}/retention", tag = "retention",
    security(("api_key" = [])), params(("agent_id" = String, Path, description = "agent id")),
    responses((status = 204, description = "cleared"),
        (status = 404, description = "no such agent, or no policy", body = ErrorBody)))]
pub(crate) async fn delete(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(agent_id): ApiPath<String>,
) -> Result<StatusCode, ApiError> {
    let agent = caller.agent(&state, &agent_id).await?;
    if state
        .pattern()
        .db()
        .clear_retention_policy(agent.id)
        .await?
    {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::not_found(format!(
            "agent {} has no retention policy",
            agent.id
        )))
    }
}
