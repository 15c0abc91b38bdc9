//! Pattern's HTTP API: agents, turns, memory, archival, search and batches of one organization
//! per API key, over axum.
//!
//! [`router`] builds the routes over an [`AppState`] (the wired [`pattern::Pattern`] layers, one
//! model, the [`ServerConfig`] limits); [`serve`] runs them on a listener until a shutdown
//! signal. `POST /v1/agents/{id}/messages` is the incremental-save flow: the user message is
//! committed before the agent runs, and the turn streams as server-sent events resumable by
//! event id, or returns the final response. Every request is authenticated by an
//! organization's API key and sees only that organization's data. Errors are JSON with stable
//! [`ErrorCode`]s; the OpenAPI document is at `/openapi.json` ([`openapi()`]).
//!
//! ```no_run
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! use pattern::model::ModelChoice;
//! use pattern::{Pattern, PatternConfig};
//! use pattern_server::{AppState, ServerConfig};
//!
//! let pattern = Pattern::open(PatternConfig::data_dir("/var/lib/pattern")).await?;
//! // An API key from the environment, else a local llama.cpp server (kept while `model` lives).
//! let model = ModelChoice::default().resolve().await?;
//! let state = AppState::new(pattern, model.provider.clone(), ServerConfig::default());
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:7878").await?;
//! pattern_server::serve(listener, state, async {
//!     let _ = tokio::signal::ctrl_c().await;
//! })
//! .await?;
//! # Ok(()) }
//! ```
//!
//! This crate must never hold logic of the layers below it (it maps HTTP onto their APIs), and
//! never answer a request of one organization with another's data.

mod auth;
mod console;
mod error;
mod layers;
pub mod limits;
pub mod mcp;
mod metrics;
mod openapi;
mod pages;
mod routes;
mod state;
/// The JSON shapes the API answers (defined in `pattern_api`, shared with the CLI).
pub use pattern_api::views;

use std::future::Future;

pub use auth::Caller;
pub use console::CONTENT_SECURITY_POLICY;
pub use error::{ApiError, Error, ErrorBody, ErrorCode, ErrorDetail, Result, one_line};
pub use layers::{BadOrigin, CorsOrigins};
pub use openapi::openapi;
pub use routes::context::{ContextExclusion, ContextPart, ContextSection, ContextView};
pub use routes::protocol::{
    MeetingEventView, MeetingOutputView, MeetingView, ParticipantView, ProtocolMessageView,
    SessionView,
};
pub use routes::turns::{
    IDEMPOTENCY_KEY_HEADER, REPLAYED_HEADER, TURN_ID_HEADER, ToolCallView, ToolResultView,
    TurnResult, TurnStatus,
};
pub use state::{AppState, MetricsToken, ServerConfig};

/// Every route of the API over `state`, with its limits.
pub fn router(state: AppState) -> axum::Router {
    routes::router(state)
}

/// Every `(method, path)` of the API the router serves, paths in the OpenAPI document's syntax
/// (`/v1/agents/{agent_id}`); the document describes exactly these. The console's static files
/// (`/`, `/console/*`) are not part of the API and not listed.
pub fn routes() -> Vec<(axum::http::Method, &'static str)> {
    routes::served()
        .into_iter()
        .map(|(method, path, _)| (method, path))
        .collect()
}

/// Serves the API on `listener` until `shutdown` completes; then stops taking requests and
/// starting turns, lets the turns in flight finish for up to [`ServerConfig::drain`], cancels
/// the rest (their batches are abandoned, their messages stay stored and can be retried at once)
/// and returns once open connections are done. While serving, a sweep every
/// `recovery_interval` abandons the batches of dead runs (of any process sharing the database),
/// loads agents with due queue entries, unloads idle agents and prunes old turns; agents'
/// durable queues are delivered as their claims come free.
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: AppState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<()> {
    let app = router(state.clone());
    let sweeper = tokio::spawn(sweep(state.clone()));
    let delivery = state.queue().clone().spawn();
    // When the shutdown began: each phase after it is logged with the time since, at warn when
    // it outlasts what it is given, so a slow stop says which wait it was.
    let signalled = std::sync::Arc::new(std::sync::OnceLock::<std::time::Instant>::new());
    let served = axum::serve(listener, app)
        .with_graceful_shutdown({
            let state = state.clone();
            let signalled = signalled.clone();
            async move {
                shutdown.await;
                let _ = signalled.set(std::time::Instant::now());
                tracing::info!("shutting down: no new requests or turns");
                state.shut_down();
                let drain = state.config().drain;
                tokio::spawn(async move {
                    if !state.wait_runs(drain).await {
                        let n = state.cancel_running(SHUTDOWN_REASON).await;
                        tracing::info!(
                            runs = n,
                            "cancelled the turns still running after the drain"
                        );
                        // Their last events are stored before the streams that carry them end.
                        state.wait_runs(std::time::Duration::from_secs(10)).await;
                    }
                    state.stop_streams();
                });
            }
        })
        .await;
    let since = || signalled.get().map(std::time::Instant::elapsed);
    if let Some(took) = since() {
        // Allowed: the drain, then 10 s for the cancelled turns' last events.
        let allowed = state.config().drain + std::time::Duration::from_secs(11);
        if took > allowed {
            tracing::warn!(
                seconds = took.as_secs_f64(),
                allowed = allowed.as_secs_f64(),
                "shutdown: open connections took longer than allowed to close"
            );
        } else {
            tracing::info!(seconds = took.as_secs_f64(), "shutdown: connections closed");
        }
    }
    sweeper.abort();
    delivery.abort();
    state.shut_down();
    state.stop_streams();
    // Runs with no request left open (queued work) end here too, stored as cancelled.
    let cancelled = std::time::Instant::now();
    state.cancel_running(SHUTDOWN_REASON).await;
    if !state.wait_runs(std::time::Duration::from_secs(10)).await {
        tracing::warn!(
            seconds = cancelled.elapsed().as_secs_f64(),
            "runs still going at shutdown; recovery abandons their batches"
        );
    } else if let Some(took) = since() {
        tracing::info!(seconds = took.as_secs_f64(), "shutdown: every run ended");
    }
    Ok(served?)
}

/// What a turn cancelled by a shutdown tells its client.
const SHUTDOWN_REASON: &str = "the server is shutting down; the message stays stored: retry the batch (now, on another \
     instance, or after the restart)";

async fn sweep(state: AppState) {
    // Recovery first, then queue delivery: an entry's batch never races a dead run's.
    let db = state.pattern().db().clone();
    loop {
        match db.recover_all(pattern::RecoveryScope::ExpiredLeases).await {
            Ok(abandoned) if !abandoned.is_empty() => {
                tracing::info!(
                    batches = abandoned.len(),
                    "abandoned the batches of dead runs"
                )
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "recovery sweep failed"),
        }
        if let Err(e) = state.load_agents_with_due_entries().await {
            tracing::warn!(error = %e.message, "loading agents with queued work failed");
        }
        match state.resume_meetings().await {
            Ok(n) if n > 0 => tracing::info!(meetings = n, "resumed driving meetings"),
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e.message, "resuming meetings failed"),
        }
        let unloaded = state.unload_idle().await;
        if unloaded > 0 {
            tracing::debug!(agents = unloaded, "unloaded idle agents");
        }
        let retention = chrono::Duration::from_std(state.config().turn_retention)
            .unwrap_or(chrono::Duration::days(1));
        if let Err(e) = db.prune_turns(chrono::Utc::now() - retention).await {
            tracing::warn!(error = %e, "pruning old turns failed");
        }
        tokio::time::sleep(state.config().recovery_interval).await;
    }
}
