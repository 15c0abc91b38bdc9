//! MCP (Model Context Protocol, decision 0015): other programs' tools for an agent, and an
//! agent's memory offered to other programs.
//!
//! - [`McpServerConfig`]: one server an agent uses, a child process over stdio (command, args,
//!   env) or a streamable HTTP URL; stored per agent by `pattern_db::mcp` or given in
//!   `config.toml`, checked here before use.
//! - [`client`]: connections to servers (restarted on the next use after one died, hung or
//!   answered garbage) and [`client::McpTool`], a server's tool as a [`crate::tool::Tool`], so
//!   its calls go through the runtime's schema check, rules, timeout, permissions and audit
//!   like a built-in's.
//! - [`memory`]: `pattern mcp serve`'s handler, an agent's memory blocks, archival memory and
//!   history search as MCP tools.
//!
//! Names: the model sees a server's tool `t` of server `s` as `s__t` (providers allow only
//! `[a-zA-Z0-9_-]{1,64}` in tool names; server names have no `_`, so the first `__` splits);
//! people see `s.t`. This module must never let a server's tool shadow or replace a built-in
//! one, never panic on what a server sends, and never keep a run waiting on a dead server.

pub mod client;
pub mod memory;

use std::collections::BTreeMap;

use pattern_db::{AgentId, Database};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::{Error, Result};

/// What separates a server's name from its tool's on the wire.
pub const WIRE_SEPARATOR: &str = "__";

/// How Pattern reaches a server.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum McpTransport {
    /// A child process speaking MCP on its stdin and stdout.
    Stdio {
        /// The program (a path, or a name looked up in `PATH`).
        command: String,
        /// Its arguments.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        args: Vec<String>,
        /// Variables added to its environment.
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        env: BTreeMap<String, String>,
    },
    /// A server speaking MCP's streamable HTTP at this URL.
    Http {
        /// `http://` or `https://` URL of its MCP endpoint.
        url: String,
    },
}

/// One server an agent uses.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct McpServerConfig {
    /// 1 to 32 characters of `[a-z0-9-]`, starting with a letter; unique per agent.
    pub name: String,
    /// How it is reached.
    #[serde(flatten)]
    pub transport: McpTransport,
}

/// The JSON fields a configuration may have (unknown ones are refused, not ignored).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTransport {
    command: Option<String>,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    url: Option<String>,
}

impl McpServerConfig {
    /// A checked configuration: a valid name and exactly one of a command or a URL.
    pub fn new(name: &str, transport: McpTransport) -> Result<Self> {
        if !pattern_db::mcp::valid_server_name(name) {
            return Err(Error::InvalidMcpConfig(format!(
                "`{}` cannot name an MCP server: 1 to 32 characters of [a-z0-9-], starting with a \
                 letter",
                name.chars().take(64).collect::<String>()
            )));
        }
        match &transport {
            McpTransport::Stdio { command, env, .. } => {
                if command.trim().is_empty() {
                    return Err(Error::InvalidMcpConfig(format!(
                        "server `{name}`: the command is empty"
                    )));
                }
                if let Some(key) = env.keys().find(|k| k.is_empty() || k.contains('=')) {
                    return Err(Error::InvalidMcpConfig(format!(
                        "server `{name}`: `{key}` cannot name an environment variable"
                    )));
                }
            }
            McpTransport::Http { url } => {
                if !(url.starts_with("http://") || url.starts_with("https://")) {
                    return Err(Error::InvalidMcpConfig(format!(
                        "server `{name}`: the URL must start with http:// or https://"
                    )));
                }
            }
        }
        Ok(Self {
            name: name.to_owned(),
            transport,
        })
    }

    /// Reads server `name`'s stored JSON (`{"command", "args", "env"}` or `{"url"}`).
    pub fn from_json(name: &str, config: &Value) -> Result<Self> {
        let raw: RawTransport = serde_json::from_value(config.clone())
            .map_err(|e| Error::InvalidMcpConfig(format!("server `{name}`: {e}")))?;
        let transport = match (raw.command, raw.url) {
            (Some(command), None) => McpTransport::Stdio {
                command,
                args: raw.args,
                env: raw.env,
            },
            (None, Some(url)) if raw.args.is_empty() && raw.env.is_empty() => {
                McpTransport::Http { url }
            }
            (None, Some(_)) => {
                return Err(Error::InvalidMcpConfig(format!(
                    "server `{name}`: `args` and `env` go with `command`, not `url`"
                )));
            }
            (Some(_), Some(_)) => {
                return Err(Error::InvalidMcpConfig(format!(
                    "server `{name}`: give either `command` or `url`, not both"
                )));
            }
            (None, None) => {
                return Err(Error::InvalidMcpConfig(format!(
                    "server `{name}`: give `command` (a program speaking MCP on stdio) or `url` \
                     (a streamable HTTP endpoint)"
                )));
            }
        };
        Self::new(name, transport)
    }

    /// The JSON stored for it (without the name).
    pub fn to_json(&self) -> Value {
        serde_json::to_value(&self.transport).unwrap_or(Value::Null)
    }
}

/// The name the model calls tool `tool` of server `server` by.
pub fn wire_name(server: &str, tool: &str) -> String {
    format!("{server}{WIRE_SEPARATOR}{tool}")
}

/// The name people see for a wire name (`server.tool`), or `None` for a name that is not an
/// MCP tool's.
pub fn shown_name(wire: &str) -> Option<String> {
    let (server, tool) = wire.split_once(WIRE_SEPARATOR)?;
    pattern_db::mcp::valid_server_name(server).then(|| format!("{server}.{tool}"))
}

/// The servers `agent` has stored (`pattern mcp add`, `PUT /v1/agents/{id}/mcp-servers`).
pub async fn stored_servers(db: &Database, agent: AgentId) -> Result<Vec<McpServerConfig>> {
    db.mcp_servers(agent)
        .await?
        .iter()
        .map(|row| McpServerConfig::from_json(&row.name, &row.config))
        .collect()
}

/// The built-in tools plus the tools of `agent`'s servers: those stored for it and `extra`
/// (from `config.toml`; one of these replaces a stored server of the same name). Servers or
/// tools left out are returned with the registry; the agent runs without them.
pub async fn agent_tools(
    db: &Database,
    agent: AgentId,
    extra: &[McpServerConfig],
) -> Result<(crate::tool::ToolRegistry, Vec<client::McpProblem>)> {
    let mut servers: Vec<McpServerConfig> = extra.to_vec();
    for stored in stored_servers(db, agent).await? {
        if !servers.iter().any(|s| s.name == stored.name) {
            servers.push(stored);
        }
    }
    let mut registry = crate::tool::builtin::registry()?;
    let problems =
        client::add_servers(&mut registry, &servers, client::DEFAULT_START_TIMEOUT).await;
    Ok((registry, problems))
}

#[cfg(test)]
mod tests {
    //! Configurations and names.

    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use serde_json::json;

    use super::*;

    #[test]
    fn a_stdio_configuration_round_trips_through_its_json() {
        let config = McpServerConfig::from_json(
            "time",
            &json!({"command": "python", "args": ["-m", "mcp_server_time"], "env": {"TZ": "UTC"}}),
        )
        .unwrap();
        assert!(matches!(config.transport, McpTransport::Stdio { .. }));
        assert_eq!(
            McpServerConfig::from_json("time", &config.to_json()).unwrap(),
            config
        );
    }

    #[test]
    fn a_configuration_needs_exactly_one_of_command_and_url() {
        for bad in [
            json!({}),
            json!({"command": "x", "url": "http://127.0.0.1/mcp"}),
            json!({"url": "ftp://example"}),
            json!({"url": "http://h/mcp", "args": ["x"]}),
            json!({"command": " "}),
            json!({"command": "x", "colour": "red"}),
            json!("python"),
        ] {
            let err = McpServerConfig::from_json("s", &bad).unwrap_err();
            assert!(matches!(err, Error::InvalidMcpConfig(_)), "{bad}: {err}");
        }
        let err = McpServerConfig::from_json("Bad_Name", &json!({"command": "x"})).unwrap_err();
        assert!(
            err.to_string().contains("cannot name an MCP server"),
            "{err}"
        );
    }

    #[test]
    fn wire_names_split_at_the_first_double_underscore() {
        assert_eq!(
            wire_name("time", "get_current_time"),
            "time__get_current_time"
        );
        assert_eq!(
            shown_name("time__get__odd").as_deref(),
            Some("time.get__odd")
        );
        assert_eq!(shown_name("memory_append"), None);
    }
}
