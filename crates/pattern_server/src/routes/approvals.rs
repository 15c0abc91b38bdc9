//! `/v1/approvals`: the approval requests of the caller's organization's agents (a tool call
//! waiting for a human), listed, shown and answered. An answer is one conditional write in the
//! database (`pattern_db::approvals`), so the waiting run learns it in whichever instance it
//! runs; a second answer is 409 `conflict`, another organization's request 404 `not_found`.
//! This module must never decide a request of another organization, and never decide one that
//! is not pending.

use axum::extract::State;
use pattern::SnowflakeId;
use pattern::db::{ApprovalDecision, ApprovalFilter, ApprovalState};
use serde::Deserialize;
use utoipa::{IntoParams, ToSchema};

use crate::auth::Caller;
use crate::error::ApiError;
use crate::routes::{ApiJson, ApiPath, ApiQuery};
use crate::state::AppState;
use crate::views::ApprovalView;

/// Filters of `GET /v1/approvals`.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
pub(crate) struct Listing {
    /// `pending` (default), `approved`, `denied`, `timed_out`, `abandoned`, or `all`.
    state: Option<String>,
    /// Most requests, 1 to 100 (default 50), newest first.
    #[param(minimum = 1, maximum = 100)]
    limit: Option<usize>,
}

/// An answer.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct DecideBody {
    /// `approve` or `deny`.
    decision: String,
    /// Why (for `deny`; the model sees it).
    reason: Option<String>,
}

fn approval_id(text: &str) -> Result<SnowflakeId, ApiError> {
    text.parse().map_err(|_| {
        ApiError::invalid(format!("`{text}` is not an approval id (a decimal number)"))
    })
}

/// The organization's approval requests, newest first.
#[utoipa::path(get, path = "/v1/approvals", tag = "approvals",
    security(("api_key" = [])),
    params(Listing),
    responses((status = 200, body = Vec<ApprovalView>)))]
pub(crate) async fn list(
    State(state): State<AppState>,
    caller: Caller,
    ApiQuery(listing): ApiQuery<Listing>,
) -> Result<ApiJson<Vec<ApprovalView>>, ApiError> {
    let limit = crate::limits::APPROVALS_PAGE.check(listing.limit, 50)?;
    let state_filter = match listing.state.as_deref().unwrap_or("pending") {
        "all" => None,
        other => Some(
            other
                .parse::<ApprovalState>()
                .map_err(|e| ApiError::invalid(e.to_string()))?,
        ),
    };
    let found = state
        .pattern()
        .db()
        .approvals(
            Some(caller.org),
            ApprovalFilter {
                state: state_filter,
                limit,
            },
        )
        .await?;
    Ok(ApiJson(found.iter().map(ApprovalView::from).collect()))
}

/// One approval request.
#[utoipa::path(get, path = "/v1/approvals/{approval_id}", tag = "approvals",
    security(("api_key" = [])),
    params(("approval_id" = String, Path, description = "approval id (decimal)")),
    responses((status = 200, body = ApprovalView), (status = 404, body = crate::error::ErrorBody)))]
pub(crate) async fn show(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
) -> Result<ApiJson<ApprovalView>, ApiError> {
    let approval = state
        .pattern()
        .db()
        .approval(Some(caller.org), approval_id(&id)?)
        .await?;
    Ok(ApiJson(ApprovalView::from(&approval)))
}

/// Answers a pending request: `{"decision": "approve"}` or `{"decision": "deny", "reason":
/// "..."}`. The waiting run goes on (in whichever instance runs it).
#[utoipa::path(post, path = "/v1/approvals/{approval_id}", tag = "approvals",
    security(("api_key" = [])),
    params(("approval_id" = String, Path, description = "approval id (decimal)")),
    request_body = DecideBody,
    responses((status = 200, body = ApprovalView), (status = 404, body = crate::error::ErrorBody),
        (status = 409, description = "`conflict`: already decided (answered, timed out, or its \
            run ended)", body = crate::error::ErrorBody)))]
pub(crate) async fn decide(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
    ApiJson(body): ApiJson<DecideBody>,
) -> Result<ApiJson<ApprovalView>, ApiError> {
    let id = approval_id(&id)?;
    let decision = match body.decision.as_str() {
        "approve" => {
            if body.reason.is_some() {
                return Err(ApiError::invalid("`reason` goes with `deny` only"));
            }
            ApprovalDecision::Approve
        }
        "deny" => ApprovalDecision::Deny {
            reason: body.reason.unwrap_or_default(),
        },
        other => {
            return Err(ApiError::invalid(format!(
                "`decision` is `approve` or `deny`, not `{other}`"
            )));
        }
    };
    let decided = state
        .pattern()
        .db()
        .decide_approval(Some(caller.org), id, decision, "http")
        .await?;
    Ok(ApiJson(ApprovalView::from(&decided)))
}
