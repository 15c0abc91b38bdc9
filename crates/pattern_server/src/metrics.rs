//! `GET /metrics`: the process's metrics in Prometheus text format.
//!
//! The first [`AppState`] of a process installs a Prometheus recorder behind the [`metrics`]
//! facade (once; the handle is shared by every state of the process), so the run metrics
//! `pattern_core` records (turns, model requests and tokens, tool calls, latencies; see
//! [`pattern::core::telemetry`]) are exported here. At each scrape the database-wide gauges
//! (open batches, queue depth, runs, embedding backlog) are read fresh. The route has no
//! organization key: it shows counts and agent ids of every organization, so it takes a bearer
//! token of its own when [`ServerConfig::metrics_token`](crate::ServerConfig) is set.
//!
//! This module must never put stored content (messages, names, block text) into a metric.

use std::sync::OnceLock;

use axum::extract::State;
use axum::http::header::{AUTHORIZATION, CONTENT_TYPE};
use axum::http::{HeaderMap, HeaderValue};
use axum::response::{IntoResponse, Response};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use sha2::{Digest, Sha256};

use crate::error::{ApiError, ErrorCode};
use crate::state::AppState;

/// Histogram buckets in seconds: from a cached read to a slow local model's turn.
const BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
    120.0, 300.0,
];

/// Database-wide open batches.
const OPEN_BATCHES: &str = "pattern_open_batches";
/// Queued triggers not delivered yet.
const QUEUE_DEPTH: &str = "pattern_queue_depth";
/// Queued triggers due now.
const QUEUE_DUE: &str = "pattern_queue_due";
/// Agents held by a run (any process).
const RUNS_ACTIVE: &str = "pattern_runs_active";
/// Embedding jobs waiting.
const EMBEDDING_BACKLOG: &str = "pattern_embedding_backlog";
/// Agents loaded in this process.
const AGENTS_LOADED: &str = "pattern_agents_loaded";
/// 1 when the gauges above could be read at this scrape, else 0.
const DATABASE_UP: &str = "pattern_database_up";

static RECORDER: OnceLock<Option<PrometheusHandle>> = OnceLock::new();

/// The process's Prometheus handle, installing the recorder on first call. `None` when another
/// recorder was installed first (by a program embedding this server): its metrics go there.
pub(crate) fn handle() -> Option<PrometheusHandle> {
    RECORDER.get_or_init(install).clone()
}

fn install() -> Option<PrometheusHandle> {
    let builder = match PrometheusBuilder::new().set_buckets(BUCKETS) {
        Ok(builder) => builder,
        Err(e) => {
            tracing::warn!(error = %e, "metrics buckets refused; /metrics is off");
            return None;
        }
    };
    match builder.install_recorder() {
        Ok(handle) => {
            pattern::core::telemetry::describe();
            describe_gauges();
            Some(handle)
        }
        Err(e) => {
            tracing::info!(error = %e, "another metrics recorder is installed; /metrics is off");
            None
        }
    }
}

fn describe_gauges() {
    use metrics::{Unit, describe_gauge};
    describe_gauge!(OPEN_BATCHES, Unit::Count, "Open batches (all agents)");
    describe_gauge!(
        QUEUE_DEPTH,
        Unit::Count,
        "Queued triggers not yet delivered (all agents)"
    );
    describe_gauge!(
        QUEUE_DUE,
        Unit::Count,
        "Queued triggers due now (all agents)"
    );
    describe_gauge!(
        RUNS_ACTIVE,
        Unit::Count,
        "Agents a run holds now, by any process"
    );
    describe_gauge!(EMBEDDING_BACKLOG, Unit::Count, "Embedding jobs waiting");
    describe_gauge!(AGENTS_LOADED, Unit::Count, "Agents loaded in this process");
    describe_gauge!(
        DATABASE_UP,
        Unit::Count,
        "1 when the database answered this scrape's counts"
    );
}

/// `GET /metrics`.
#[utoipa::path(get, path = "/metrics", tag = "health",
    responses(
        (status = 200, description = "Prometheus text exposition format", content_type = "text/plain"),
        (status = 401, body = crate::error::ErrorBody),
        (status = 503, body = crate::error::ErrorBody)))]
pub(crate) async fn metrics(State(state): State<AppState>, headers: HeaderMap) -> Response {
    if let Some(token) = &state.config().metrics_token
        && !authorized(&headers, token.expose())
    {
        return ApiError::new(
            ErrorCode::InvalidApiKey,
            "/metrics needs `Authorization: Bearer <metrics token>`",
        )
        .into_response();
    }
    let Some(handle) = handle() else {
        return ApiError::new(
            ErrorCode::Unavailable,
            "metrics are not recorded here: another metrics recorder is installed in this process",
        )
        .into_response();
    };
    match state.pattern().db().gauges().await {
        Ok(g) => {
            metrics::gauge!(OPEN_BATCHES).set(g.open_batches as f64);
            metrics::gauge!(QUEUE_DEPTH).set(g.queued as f64);
            metrics::gauge!(QUEUE_DUE).set(g.queued_due as f64);
            metrics::gauge!(RUNS_ACTIVE).set(g.running as f64);
            metrics::gauge!(EMBEDDING_BACKLOG).set(g.embedding_jobs as f64);
            metrics::gauge!(DATABASE_UP).set(1.0);
        }
        Err(e) => {
            tracing::warn!(error = %crate::error::one_line(&e), "reading metrics gauges failed");
            metrics::gauge!(DATABASE_UP).set(0.0);
        }
    }
    metrics::gauge!(AGENTS_LOADED).set(state.loaded_agents().await as f64);
    handle.run_upkeep();
    (
        [(
            CONTENT_TYPE,
            HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
        )],
        handle.render(),
    )
        .into_response()
}

/// Whether `headers` carry `Authorization: Bearer <token>` (compared by digest, so the time
/// taken says nothing of how much of the token matched).
fn authorized(headers: &HeaderMap, token: &str) -> bool {
    let Some(given) = headers
        .get(AUTHORIZATION)
        .and_then(|h| h.to_str().ok())
        .and_then(|h| h.strip_prefix("Bearer "))
    else {
        return false;
    };
    Sha256::digest(given.trim().as_bytes()) == Sha256::digest(token.as_bytes())
}
