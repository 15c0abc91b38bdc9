//! `pattern mcp add|list|remove|serve` (decision 0015): the MCP servers whose tools an agent
//! uses (stored in the database, or in config.toml), and serving an agent's memory over MCP.
//! Also [`tools`], the agent's tool registry with its servers' tools, for the commands that run
//! agents.
//!
//! Configurations are checked by `pattern_core::mcp`; a server that cannot start is a warning
//! on stderr and the agent runs without it. In `serve` without `--http`, stdout is the MCP
//! channel: this module must never print anything else there, and never print an API key.

use std::sync::Arc;

use pattern::Pattern;
use pattern::core::mcp::memory::{MemoryServer, serve_stdio};
use pattern::core::mcp::{self, McpServerConfig, shown_name};
use pattern::core::tool::ToolRegistry;
use serde::Serialize;

use crate::cli::McpCommand;
use crate::env::{Config, Env, agent};
use crate::error::{CliError, Result};
use crate::output;

/// The agent's tools when it uses MCP servers (stored or in config.toml): the built-ins plus
/// theirs, each server or tool left out named on stderr. `None`: the built-ins only.
pub(crate) async fn tools(
    env: &Env,
    pattern: &Pattern,
    config: &Config,
    row: &pattern::Agent,
) -> Result<Option<Arc<ToolRegistry>>> {
    let extra = configured(env, pattern, config, row).await?;
    if extra.is_empty() && pattern.db().mcp_servers(row.id).await?.is_empty() {
        return Ok(None);
    }
    let (registry, problems) = mcp::agent_tools(pattern.db(), row.id, &extra).await?;
    for problem in problems {
        eprintln!("warning: {problem}");
    }
    Ok(Some(Arc::new(registry)))
}

/// The servers config.toml gives `row`: only an agent of the local organization has them.
async fn configured(
    env: &Env,
    pattern: &Pattern,
    config: &Config,
    row: &pattern::Agent,
) -> Result<Vec<McpServerConfig>> {
    let local = matches!(pattern.db().agent_by_name(&row.name).await, Ok(a) if a.id == row.id);
    if !local {
        return Ok(Vec::new());
    }
    config.mcp_servers(&row.name, &env.config_path())
}

#[derive(Serialize)]
struct ServerView {
    name: String,
    /// `stored` or `config` (config.toml).
    source: &'static str,
    config: serde_json::Value,
}

#[derive(Serialize)]
struct ListView {
    agent: String,
    servers: Vec<ServerView>,
    /// With `--tools`: the tools as people see them (`server.tool`) and as the model calls them.
    #[serde(skip_serializing_if = "Option::is_none")]
    tools: Option<Vec<serde_json::Value>>,
    /// With `--tools`: servers and tools left out, and why.
    #[serde(skip_serializing_if = "Option::is_none")]
    problems: Option<Vec<String>>,
}

fn parse_env(pairs: &[String]) -> Result<serde_json::Map<String, serde_json::Value>> {
    let mut env = serde_json::Map::new();
    for pair in pairs {
        let Some((key, value)) = pair.split_once('=') else {
            return Err(CliError::usage(format!(
                "--env takes KEY=VALUE, not `{pair}`"
            )));
        };
        env.insert(key.to_owned(), value.into());
    }
    Ok(env)
}

pub(crate) async fn run(env: &Env, command: McpCommand) -> Result<()> {
    if let McpCommand::Serve { agent, http } = command {
        return serve(env, &agent, http.as_deref()).await;
    }
    let (pattern, config) = env.open().await?;
    let result = run_open(env, &pattern, &config, command).await;
    pattern.close().await;
    result
}

async fn run_open(
    env: &Env,
    pattern: &Pattern,
    config: &Config,
    command: McpCommand,
) -> Result<()> {
    match command {
        McpCommand::Add {
            name,
            agent: arg,
            url,
            env: vars,
            command,
        } => {
            let a = agent(pattern, config, &arg).await?;
            let json = match (url, command.split_first()) {
                (Some(url), None) => serde_json::json!({ "url": url }),
                (None, Some((program, args))) => serde_json::json!({
                    "command": program,
                    "args": args,
                    "env": parse_env(&vars)?,
                }),
                (Some(_), Some(_)) => {
                    return Err(CliError::usage(
                        "give --url or a command after `--`, not both",
                    ));
                }
                (None, None) => {
                    return Err(CliError::usage(
                        "give the server's command after `--` (pattern mcp add NAME -- COMMAND \
                         ARGS...) or --url URL",
                    ));
                }
            };
            let checked = McpServerConfig::from_json(&name, &json)?;
            let row = pattern
                .db()
                .put_mcp_server(a.id, &name, &checked.to_json())
                .await?;
            if env.json {
                return output::json(&ServerView {
                    name: row.name,
                    source: "stored",
                    config: row.config,
                });
            }
            output::line(&format!(
                "MCP server `{name}` stored for {}; the model calls its tools `{name}__TOOL`",
                a.name
            ))
        }
        McpCommand::List { agent: arg, tools } => {
            let a = agent(pattern, config, &arg).await?;
            let extra = configured(env, pattern, config, &a).await?;
            let mut servers: Vec<ServerView> = extra
                .iter()
                .map(|s| ServerView {
                    name: s.name.clone(),
                    source: "config",
                    config: s.to_json(),
                })
                .collect();
            for row in pattern.db().mcp_servers(a.id).await? {
                if !servers.iter().any(|s| s.name == row.name) {
                    servers.push(ServerView {
                        name: row.name,
                        source: "stored",
                        config: row.config,
                    });
                }
            }
            let mut view = ListView {
                agent: a.name.clone(),
                servers,
                tools: None,
                problems: None,
            };
            if tools {
                let (registry, problems) = mcp::agent_tools(pattern.db(), a.id, &extra).await?;
                view.tools = Some(
                    registry
                        .definitions()
                        .into_iter()
                        .filter_map(|d| {
                            shown_name(&d.name).map(|shown| {
                                serde_json::json!({
                                    "tool": shown,
                                    "wire_name": d.name,
                                    "description": d.description,
                                })
                            })
                        })
                        .collect(),
                );
                view.problems = Some(problems.iter().map(ToString::to_string).collect());
            }
            if env.json {
                return output::json(&view);
            }
            for s in &view.servers {
                output::line(&format!("{:<20} {:<7} {}", s.name, s.source, s.config))?;
            }
            for tool in view.tools.iter().flatten() {
                output::line(&format!(
                    "  {} ({})",
                    tool["tool"].as_str().unwrap_or_default(),
                    tool["wire_name"].as_str().unwrap_or_default()
                ))?;
            }
            for problem in view.problems.iter().flatten() {
                eprintln!("warning: {problem}");
            }
            Ok(())
        }
        McpCommand::Remove { name, agent: arg } => {
            let a = agent(pattern, config, &arg).await?;
            pattern.db().remove_mcp_server(a.id, &name).await?;
            if env.json {
                return output::json(&serde_json::json!({"removed": name, "agent": a.name}));
            }
            output::line(&format!("MCP server `{name}` removed from {}", a.name))
        }
        McpCommand::Serve { .. } => Err(CliError::other("serve is run without an open database")),
    }
}

/// `pattern mcp serve`: the agent's memory over stdio, or over HTTP with `--http`.
async fn serve(env: &Env, arg: &crate::cli::AgentArg, http: Option<&str>) -> Result<()> {
    let (pattern, config) = env.open_for_agents().await?;
    let served = async {
        let a = agent(&pattern, &config, arg).await?;
        let memory = Arc::new(pattern.memory().clone());
        let server = MemoryServer::new(a.id, a.name.clone(), memory.clone(), memory);
        match http {
            None => Ok(serve_stdio(server).await?),
            Some(address) => {
                let listener = tokio::net::TcpListener::bind(address)
                    .await
                    .map_err(|e| CliError::usage(format!("cannot listen on {address}: {e}")))?;
                let local = listener
                    .local_addr()
                    .map_err(|e| CliError::other(e.to_string()))?;
                let router =
                    pattern_server::mcp::memory_router(pattern.db().clone(), a.id, server, local)
                        .await
                        .map_err(|e| CliError::other(e.to_string()))?;
                eprintln!(
                    "serving the memory of {} over MCP on http://{local}/mcp (send an \
                     organization API key as `Authorization: Bearer <key>`)",
                    a.name
                );
                pattern_server::mcp::serve_memory(listener, router, super::serve::stop_signal())
                    .await
                    .map_err(|e| CliError::other(e.to_string()))
            }
        }
    }
    .await;
    pattern.close().await;
    served
}
