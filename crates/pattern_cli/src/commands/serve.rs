//! `pattern serve`: the HTTP API (`pattern_server`) over the data directory. Each agent runs on
//! its own model when it has one (`pattern::model::Models`: one provider per model, shared);
//! the others on the default: an API key from the environment, else `[model]` in config.toml,
//! else the local llama.cpp server `--local-model` starts (and stops with the command). With
//! none of these, agents without a model of their own are served, and each of their turns fails
//! with an error naming what to configure; everything else (memory, search, batches) works.
//!
//! Runs until Ctrl-C or SIGTERM; then stops taking requests, lets turns in flight finish for up
//! to the drain (`--drain-secs`), cancels the rest (their messages stay stored, their batches
//! retryable at once) and closes the database, which frees this process's claims and machine id. This module must never print an API key.

use std::time::Duration;

use pattern::model::{Models, local_model_named};
use pattern_server::{AppState, CorsOrigins, MetricsToken, ServerConfig};

use crate::cli::ServeArgs;
use crate::commands::chat::model_choice;
use crate::env::Env;
use crate::error::{CliError, Result};

/// Completes on Ctrl-C or SIGTERM. The handlers are installed when this is called, not when
/// the future is first polled, so a signal sent right after the address is announced drains
/// the server instead of killing it.
pub(crate) fn stop_signal() -> impl std::future::Future<Output = ()> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let term = signal(SignalKind::terminate()).ok();
        let int = signal(SignalKind::interrupt()).ok();
        async move {
            match (term, int) {
                (Some(mut term), Some(mut int)) => {
                    tokio::select! {
                        _ = int.recv() => {}
                        _ = term.recv() => {}
                    }
                }
                _ => {
                    let _ = tokio::signal::ctrl_c().await;
                }
            }
        }
    }
    #[cfg(not(unix))]
    {
        async {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

pub(crate) async fn run(env: &Env, args: ServeArgs) -> Result<()> {
    let listener = tokio::net::TcpListener::bind(&args.listen)
        .await
        .map_err(|e| CliError::usage(format!("cannot listen on {}: {e}", args.listen)))?;
    let address = listener
        .local_addr()
        .map_err(|e| CliError::other(format!("listener: {e}")))?;
    let flag = |what: &str, secs: f64, min: f64| {
        if !secs.is_finite() || secs < min || secs > 86_400.0 {
            Err(CliError::usage(format!(
                "--{what} must be between {min} and 86400 seconds, not {secs}"
            )))
        } else {
            Ok(Duration::from_secs_f64(secs))
        }
    };
    let run_lease = args
        .run_lease_secs
        .map(|s| flag("run-lease-secs", s, 0.5))
        .transpose()?;
    let (pattern, config) = env.open_for_agents_with(run_lease).await?;
    let drain = match (args.drain_secs, config.server.drain_secs) {
        (Some(secs), _) => flag("drain-secs", secs, 0.0)?,
        (None, Some(secs)) => {
            crate::env::seconds("server.drain_secs", secs, 0.0, &env.config_path())?
        }
        (None, None) => ServerConfig::default().drain,
    };
    let cors = if args.cors_origins.is_empty() {
        config.server.cors_origins.clone().unwrap_or_default()
    } else {
        args.cors_origins.clone()
    };
    let cors = CorsOrigins::parse(&cors).map_err(|e| CliError::usage(e.to_string()))?;
    let metrics_token = args.metrics_token.clone().and_then(MetricsToken::new);
    let mut mcp_servers = std::collections::HashMap::new();
    for entry in &config.mcp.servers {
        if !mcp_servers.contains_key(&entry.agent) {
            let servers = config.mcp_servers(&entry.agent, &env.config_path())?;
            mcp_servers.insert(entry.agent.clone(), servers);
        }
    }
    let choice = model_choice(env)?;
    let configured = choice.configured()?;
    let local = match &args.local_model {
        Some(name) => {
            let local = choice.start_local(local_model_named(name)?).await?;
            if let Some(server) = local.local_server() {
                eprintln!(
                    "started a local llama.cpp server ({name}) in {:.1} s at {}",
                    server.started_in().as_secs_f64(),
                    server.base_url()
                );
            }
            Some(local)
        }
        None => None,
    };
    let default = configured
        .as_ref()
        .or(local.as_ref())
        .map(|m| m.provider.clone());
    if default.is_none() {
        eprintln!(
            "no default model (no API key, no [model] in config.toml, no --local-model):              agents without a model of their own fail their turns until one is configured"
        );
    }
    let mut models = Models::new(default);
    if let Some(local) = &local {
        models = models.with_local(local.provider.clone());
    }
    let lease = pattern.db().run_lease();
    let state = AppState::with_models(
        pattern.clone(),
        models,
        ServerConfig {
            max_body_bytes: args.max_body_bytes,
            request_timeout: Duration::from_secs(args.request_timeout_secs),
            drain,
            cors,
            metrics_token,
            mcp_servers,
            console_session: Duration::from_secs(args.console_session_hours * 3600),
            // A dead run's batches are abandoned within the lease plus one sweep.
            recovery_interval: (lease / 4)
                .clamp(Duration::from_millis(200), Duration::from_secs(5)),
            ..ServerConfig::default()
        },
    );
    let stop = stop_signal();
    eprintln!(
        "serving the Pattern API on http://{address} (web console at /, OpenAPI at /openapi.json, metrics at /metrics)"
    );
    let retention = tokio::spawn(apply_stored_retention(
        pattern.clone(),
        crate::archive::root(&env.data_dir),
        Duration::from_secs(args.retention_interval_mins * 60),
    ));
    let served = pattern_server::serve(listener, state, stop).await;
    retention.abort();
    drop(configured);
    // Stopping the local model server and closing the database (the embedding worker's last
    // jobs, the writer's queue, the claims and machine id): each timed, at warn when it is
    // slower than expected, so a slow stop says which wait it was.
    let phase = std::time::Instant::now();
    drop(local);
    log_phase("the local model server stopped", phase.elapsed());
    let phase = std::time::Instant::now();
    pattern.close().await;
    log_phase("the database closed", phase.elapsed());
    served.map_err(|e| CliError::other(e.to_string()))
}

/// Logs a shutdown phase's time: at warn past five seconds, else at info.
fn log_phase(what: &str, took: Duration) {
    if took > Duration::from_secs(5) {
        tracing::warn!(seconds = took.as_secs_f64(), "shutdown: {what}, slowly");
    } else {
        tracing::info!(seconds = took.as_secs_f64(), "shutdown: {what}");
    }
}

/// Applies every agent's stored retention policy (any organization) every `interval`, the first
/// time ten seconds after start (once the server is up). A failed pass is logged and tried again next time; an agent's pass
/// is one write, so another server doing the same at once deletes nothing twice.
async fn apply_stored_retention(
    pattern: pattern::Pattern,
    archive_root: std::path::PathBuf,
    interval: Duration,
) {
    tokio::time::sleep(Duration::from_secs(10)).await;
    loop {
        match pattern.db().retention_policies().await {
            Ok(policies) => {
                for stored in policies {
                    let pass = stored.settings.to_pass(false);
                    match crate::archive::retain(&pattern, &archive_root, stored.agent, pass).await
                    {
                        Ok((r, _)) => {
                            if !r.deleted_batches.is_empty()
                                || r.deleted_block_versions > 0
                                || r.deleted_activity_events > 0
                            {
                                tracing::info!(
                                    agent = %stored.agent,
                                    batches = r.deleted_batches.len(),
                                    block_versions = r.deleted_block_versions,
                                    activity_events = r.deleted_activity_events,
                                    "applied the agent's retention policy"
                                );
                            }
                        }
                        Err(e) => tracing::warn!(
                            agent = %stored.agent,
                            error = %e,
                            "applying the agent's retention policy failed"
                        ),
                    }
                }
            }
            Err(e) => tracing::warn!(error = %e, "reading retention policies failed"),
        }
        if let Err(e) = pattern.db().prune_applied_search_changes().await {
            tracing::warn!(error = %e, "pruning the search log failed");
        }
        tokio::time::sleep(interval).await;
    }
}
