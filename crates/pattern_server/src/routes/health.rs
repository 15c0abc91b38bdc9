//! Unauthenticated routes: liveness (`/health`), readiness (`/ready`: the database answers) and
//! the OpenAPI document (`/openapi.json`). This module must never reveal stored data.

use axum::Json;
use axum::extract::State;
use serde::Serialize;
use utoipa::ToSchema;

use crate::error::{ApiError, ErrorCode};
use crate::state::AppState;

/// Body of `/health` and `/ready`.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Health {
    /// `ok`.
    status: &'static str,
}

/// Liveness: the process answers.
#[utoipa::path(get, path = "/health", tag = "health", responses((status = 200, body = Health)))]
pub(crate) async fn health() -> Json<Health> {
    Json(Health { status: "ok" })
}

/// Readiness: the database answers a query.
#[utoipa::path(get, path = "/ready", tag = "health",
    responses((status = 200, body = Health), (status = 503, body = crate::error::ErrorBody)))]
pub(crate) async fn ready(State(state): State<AppState>) -> Result<Json<Health>, ApiError> {
    match state.pattern().db().engine_version().await {
        Ok(_) => Ok(Json(Health { status: "ok" })),
        Err(e) => {
            // The cause (addresses, engine messages) goes to the log: this route has no key.
            tracing::warn!(error = %crate::error::one_line(&e), "readiness check failed");
            Err(ApiError::new(
                ErrorCode::Unavailable,
                "the database does not answer",
            ))
        }
    }
}

/// The OpenAPI document of this API.
#[utoipa::path(get, path = "/openapi.json", tag = "health",
    responses((status = 200, description = "this document (OpenAPI 3.1)",
        content_type = "application/json")))]
pub(crate) async fn openapi_json() -> Json<utoipa::openapi::OpenApi> {
    Json(crate::openapi::openapi())
}
