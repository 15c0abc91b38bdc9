//! `/v1/agents/{agent_id}/schedules`: an agent's schedules (decision 0012): add (201), list,
//! remove. The rules (cron expression, zone, a time not in the past, the cap of 100 per agent)
//! are the database's; its typed errors become 400 `invalid_request` naming the field, 422
//! `refused` for the cap, 404 `not_found`. This module must never reach an agent but through
//! the caller's organization.

use axum::extract::State;
use axum::http::StatusCode;
use pattern::SnowflakeId;
use pattern::db::schedule::{NewSchedule, When};
use serde::Deserialize;
use utoipa::ToSchema;

use super::{ApiJson, ApiPath};
use crate::auth::Caller;
use crate::error::{ApiError, ErrorBody};
use crate::state::AppState;
use crate::views::ScheduleView;

/// Body of `POST /v1/agents/{agent_id}/schedules`: `message` and exactly one of `at` and `cron`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct CreateSchedule {
    /// What the agent receives (a system message) when it fires.
    message: String,
    /// Fire once at this time (RFC 3339; up to 60 s in the past fires at once).
    #[serde(default)]
    at: Option<String>,
    /// Fire at every match of this cron expression (5 fields, or 6 with seconds first).
    #[serde(default)]
    cron: Option<String>,
    /// The time zone of `cron` (IANA name, default `UTC`).
    #[serde(default)]
    tz: Option<String>,
    /// A label.
    #[serde(default)]
    name: Option<String>,
}

fn schedule_id(text: &str) -> Result<SnowflakeId, ApiError> {
    text.parse()
        .map_err(|_| ApiError::not_found(format!("no schedule `{text}`")))
}

/// Adds a schedule to the agent.
#[utoipa::path(post, path = "/v1/agents/{agent_id}/schedules", tag = "schedules",
    security(("api_key" = [])), params(("agent_id" = String, Path, description = "agent id")),
    request_body = CreateSchedule,
    responses((status = 201, body = ScheduleView),
        (status = 400, description = "`invalid_request`: a bad `cron`, `tz`, `at` (or one in the past), `message` or `name`; the message names the field", body = ErrorBody),
        (status = 404, body = ErrorBody),
        (status = 422, description = "`refused`: the agent has 100 live schedules", body = ErrorBody)))]
pub(crate) async fn create(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(agent_id): ApiPath<String>,
    ApiJson(body): ApiJson<CreateSchedule>,
) -> Result<(StatusCode, ApiJson<ScheduleView>), ApiError> {
    let agent = caller.agent(&state, &agent_id).await?;
    let when = When::from_fields(body.at.as_deref(), body.cron.as_deref(), body.tz.as_deref())?;
    let schedule = state
        .pattern()
        .db()
        .add_schedule(
            agent.id,
            NewSchedule {
                message: body.message,
                when,
                name: body.name,
            },
        )
        .await?;
    Ok((
        StatusCode::CREATED,
        ApiJson(ScheduleView::new(&schedule, agent.name.as_str())),
    ))
}

/// The agent's live schedules, in the order they were added.
#[utoipa::path(get, path = "/v1/agents/{agent_id}/schedules", tag = "schedules",
    security(("api_key" = [])), params(("agent_id" = String, Path, description = "agent id")),
    responses((status = 200, body = Vec<ScheduleView>), (status = 404, body = ErrorBody)))]
pub(crate) async fn list(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(agent_id): ApiPath<String>,
) -> Result<ApiJson<Vec<ScheduleView>>, ApiError> {
    let agent = caller.agent(&state, &agent_id).await?;
    let schedules = state.pattern().db().schedules(agent.id).await?;
    let name = agent.name.as_str();
    Ok(ApiJson(
        schedules
            .iter()
            .map(|s| ScheduleView::new(s, name))
            .collect(),
    ))
}

/// Removes one of the agent's schedules.
#[utoipa::path(delete, path = "/v1/agents/{agent_id}/schedules/{schedule_id}", tag = "schedules",
    security(("api_key" = [])),
    params(("agent_id" = String, Path, description = "agent id"), ("schedule_id" = String, Path)),
    responses((status = 204), (status = 404, body = ErrorBody)))]
pub(crate) async fn delete(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath((agent_id, schedule)): ApiPath<(String, String)>,
) -> Result<StatusCode, ApiError> {
    let agent = caller.agent(&state, &agent_id).await?;
    let id = schedule_id(&schedule)?;
    state.pattern().db().remove_schedule(agent.id, id).await?;
    Ok(StatusCode::NO_CONTENT)
}
