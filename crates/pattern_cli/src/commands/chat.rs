//! `pattern chat [AGENT]` and `pattern send AGENT MESSAGE`: turns with an agent, streamed.
//!
//! The model comes from the environment first (`ANTHROPIC_API_KEY`, `OPENAI_API_KEY`,
//! `GEMINI_API_KEY`, in that order), then from `[model]` in config.toml (`provider = "llamacpp"`
//! with a `base_url`), and otherwise a local llama.cpp server (installed by `cargo xtask setup`)
//! is started for the command and stopped after it. Ctrl-C during a turn cancels the turn (its
//! batch is abandoned, the message stays stored); Ctrl-C at the prompt, or end of input, leaves.
//! This module must never print an API key and never leave a started server running.

use std::io::{BufRead, Write};
use std::sync::Arc;

use futures::StreamExt;
use pattern::Pattern;
use pattern::core::local_server::LocalModel;
use pattern::core::provider::ModelProvider;
use pattern::core::{Agent, DatabaseAgent, IncomingMessage, ResponseEvent, RuntimeConfig};
use pattern::model::ModelChoice;
use serde::Serialize;

use crate::cli::{ChatArgs, SendArgs};
use crate::env::{Config, Env, agent_named};
use crate::error::{CliError, Result};
use crate::output;

/// The model for this command (`pattern::model`): dropping it stops a local server it started.
pub(crate) type Model = pattern::model::Model;

/// Picks the model (module doc), starting a local server when nothing else is configured.
pub(crate) async fn model(env: &Env, local: LocalModel) -> Result<Model> {
    let choice = ModelChoice {
        openai_compatible: configured_llamacpp(env)?,
        local,
        ..ModelChoice::default()
    };
    let model = choice.resolve().await?;
    if let Some(server) = model.local_server() {
        eprintln!(
            "started a local llama.cpp server in {:.1} s at {} (no API key or [model] configured)",
            server.started_in().as_secs_f64(),
            server.base_url()
        );
    }
    Ok(model)
}

/// `[model] provider = "llamacpp"` with `[model.llamacpp] base_url, model`.
fn configured_llamacpp(env: &Env) -> Result<Option<(String, String)>> {
    let path = env.config_path();
    let Ok(text) = std::fs::read_to_string(&path) else {
        return Ok(None);
    };
    let value: toml::Value =
        toml::from_str(&text).map_err(|e| CliError::usage(format!("{}: {e}", path.display())))?;
    let model = value.get("model");
    let provider = model
        .and_then(|m| m.get("provider"))
        .and_then(|p| p.as_str());
    match provider {
        None => Ok(None),
        Some("llamacpp") => {
            let section = model.and_then(|m| m.get("llamacpp"));
            let get = |k: &str| section.and_then(|s| s.get(k)).and_then(|v| v.as_str());
            let base = get("base_url")
                .unwrap_or("http://127.0.0.1:8080/v1")
                .to_owned();
            let name = get("model").unwrap_or("local").to_owned();
            Ok(Some((base, name)))
        }
        Some(other) => Err(CliError::usage(format!(
            "{}: model.provider `{other}` needs its API key in the environment \
             (ANTHROPIC_API_KEY, OPENAI_API_KEY or GEMINI_API_KEY); only `llamacpp` is read \
             from the file",
            path.display()
        ))),
    }
}

/// The agent's runtime settings: its instructions (agent metadata), the model's window, and
/// few iterations (small local models loop).
pub(crate) fn runtime_config(agent: &pattern::Agent, model: &dyn ModelProvider) -> RuntimeConfig {
    let mut config = RuntimeConfig::for_agent(agent, model.model().context_window);
    config.max_iterations = 4;
    config
}

/// Renders one event for a terminal: text as it streams, tool calls and results on their own
/// lines (to stderr, so stdout holds the answer).
pub(crate) fn render(event: &ResponseEvent, out: &mut impl Write) -> std::io::Result<()> {
    match event {
        ResponseEvent::TextDelta { text } => {
            out.write_all(text.as_bytes())?;
            out.flush()
        }
        ResponseEvent::ToolCallFinished { name, input, .. } => {
            eprintln!(
                "\n  [tool call] {name} {}",
                output::preview(&input.to_string(), 200)
            );
            Ok(())
        }
        ResponseEvent::ToolResult {
            content, is_error, ..
        } => {
            let tag = if *is_error {
                "tool error"
            } else {
                "tool result"
            };
            eprintln!("  [{tag}] {}", output::preview(content, 200));
            Ok(())
        }
        ResponseEvent::Queued { .. } => {
            eprintln!("  [queued: the agent is busy; your message is stored]");
            Ok(())
        }
        ResponseEvent::Error { kind, message, .. } => {
            eprintln!("\n  [turn failed ({kind:?})] {message}");
            Ok(())
        }
        ResponseEvent::Done { .. } => writeln!(out),
        _ => Ok(()),
    }
}

/// One turn, streamed to the terminal; Ctrl-C cancels it. Returns every event.
pub(crate) async fn turn(agent: &Arc<DatabaseAgent>, text: &str) -> Result<Vec<ResponseEvent>> {
    let mut stream = agent.clone().process(IncomingMessage::user(text)).await?;
    let mut events = Vec::new();
    let mut stdout = std::io::stdout();
    loop {
        tokio::select! {
            event = stream.next() => {
                let Some(event) = event else { break };
                render(&event, &mut stdout).map_err(|e| CliError::other(format!("stdout: {e}")))?;
                events.push(event);
            }
            _ = tokio::signal::ctrl_c() => {
                drop(stream);
                eprintln!("\n  [cancelled: the turn was abandoned; your message stays stored]");
                break;
            }
        }
    }
    Ok(events)
}

async fn open_agent(
    env: &Env,
    name: Option<&str>,
) -> Result<(Pattern, Config, Model, Arc<DatabaseAgent>)> {
    let (pattern, config) = env.open_for_agents().await?;
    let name = name
        .map(str::to_owned)
        .or_else(|| config.agent.default.clone())
        .ok_or_else(|| CliError::usage("no agent given: name one or set [agent] default"))?;
    let row = agent_named(&pattern, &name).await?;
    let model = model(env, LocalModel::Qwen).await?;
    let agent = pattern.agent(
        row.clone(),
        model.provider.clone(),
        runtime_config(&row, &*model.provider),
    )?;
    Ok((pattern, config, model, agent))
}

#[derive(Serialize)]
struct SendReport {
    batch_id: Option<String>,
    text: String,
    tool_calls: Vec<serde_json::Value>,
    ok: bool,
    error: Option<String>,
}

/// `pattern send AGENT MESSAGE`.
pub(crate) async fn send(env: &Env, args: SendArgs) -> Result<()> {
    let (pattern, _config, model, agent) = open_agent(env, Some(&args.agent)).await?;
    let events = if env.json {
        agent
            .clone()
            .process(IncomingMessage::user(&args.message))
            .await?
            .collect::<Vec<_>>()
            .await
    } else {
        turn(&agent, &args.message).await?
    };
    let result = pattern::core::collect_response(futures::stream::iter(events)).await;
    drop(agent);
    drop(model);
    pattern.close().await;
    match result {
        Ok(r) => {
            if env.json {
                output::json(&SendReport {
                    batch_id: r.batch_id.map(|b| b.get().to_string()),
                    text: r.text,
                    tool_calls: r
                        .tool_calls
                        .iter()
                        .map(|(id, name, input)| serde_json::json!({"id": id, "name": name, "input": input}))
                        .collect(),
                    ok: true,
                    error: None,
                })?;
            }
            Ok(())
        }
        Err(e) => Err(CliError::other(format!("the turn failed: {}", e.message))),
    }
}

/// `pattern chat [AGENT]`.
pub(crate) async fn chat(env: &Env, args: ChatArgs) -> Result<()> {
    let (pattern, _config, model, agent) = open_agent(env, args.agent.as_deref()).await?;
    eprintln!("chatting with {} (end with Ctrl-D)", agent.name());
    let stdin = std::io::stdin();
    loop {
        eprint!("> ");
        let _ = std::io::stderr().flush();
        let mut line = String::new();
        let read = tokio::task::block_in_place(|| stdin.lock().read_line(&mut line))
            .map_err(|e| CliError::other(format!("stdin: {e}")))?;
        if read == 0 {
            break;
        }
        let text = line.trim();
        if text.is_empty() {
            continue;
        }
        turn(&agent, text).await?;
    }
    drop(agent);
    drop(model);
    pattern.close().await;
    Ok(())
}
