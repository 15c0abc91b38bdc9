//! `pattern serve`: the HTTP API (`pattern_server`) over the data directory, with the model
//! `pattern chat` would use (an API key from the environment, `[model]` in config.toml, or a
//! local llama.cpp server started for the command and stopped after it).
//!
//! Runs until Ctrl-C or SIGTERM; then stops taking requests, cancels turns in flight (their
//! messages stay stored) and closes the database. This module must never print an API key.

use std::time::Duration;

use pattern::core::local_server::LocalModel;
use pattern_server::{AppState, ServerConfig};

use crate::cli::ServeArgs;
use crate::commands::chat::model;
use crate::env::Env;
use crate::error::{CliError, Result};

/// Completes on Ctrl-C or SIGTERM.
async fn stop_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

pub(crate) async fn run(env: &Env, args: ServeArgs) -> Result<()> {
    let listener = tokio::net::TcpListener::bind(&args.listen)
        .await
        .map_err(|e| CliError::usage(format!("cannot listen on {}: {e}", args.listen)))?;
    let address = listener
        .local_addr()
        .map_err(|e| CliError::other(format!("listener: {e}")))?;
    let (pattern, _config) = env.open_for_agents().await?;
    let model = model(env, LocalModel::Qwen).await?;
    let state = AppState::new(
        pattern.clone(),
        model.provider.clone(),
        ServerConfig {
            max_body_bytes: args.max_body_bytes,
            request_timeout: Duration::from_secs(args.request_timeout_secs),
            ..ServerConfig::default()
        },
    );
    eprintln!("serving the Pattern API on http://{address} (OpenAPI at /openapi.json)");
    let served = pattern_server::serve(listener, state, stop_signal()).await;
    drop(model);
    pattern.close().await;
    served.map_err(|e| CliError::other(e.to_string()))
}
