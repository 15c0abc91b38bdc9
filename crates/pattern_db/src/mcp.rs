//! MCP servers configured per agent (migration `0013_mcp_servers`, decision 0015): one row per
//! agent and server name holding the server's configuration as JSON.
//!
//! This crate stores the JSON and never interprets it: `pattern_core::mcp` checks a
//! configuration before it is stored and reads it back. Names are checked here (they become
//! part of tool names). This module must never start a server or hold one's secrets anywhere
//! but in the row.

use crate::{BatchError, StorageError};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::db::Database;
use crate::error::{Error, Result};
use crate::model::AgentId;
use crate::ops::mcp::{PutServers, RemoveServer};

/// The most MCP servers one agent may have.
pub const MAX_SERVERS_PER_AGENT: usize = 32;
/// Longest stored configuration, in bytes.
pub const MAX_CONFIG_BYTES: usize = 64 * 1024;

/// One stored server.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct McpServerRow {
    /// The agent that uses it.
    pub agent_id: AgentId,
    /// Its name, unique per agent: 1 to 32 characters of `[a-z0-9-]`, starting with a letter.
    pub name: String,
    /// Its configuration (checked by `pattern_core::mcp`).
    pub config: serde_json::Value,
    /// When it was last written.
    pub updated_at: DateTime<Utc>,
}

/// Whether `name` can name an MCP server: 1 to 32 characters of `[a-z0-9-]`, starting with a
/// letter. (No `_`: the model sees a server's tools as `NAME__TOOL`, so the first `__` splits.)
pub fn valid_server_name(name: &str) -> bool {
    (1..=32).contains(&name.len())
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

fn check(name: &str, config: &serde_json::Value) -> Result<String> {
    if !valid_server_name(name) {
        return Err(BatchError::InvalidContent(format!(
            "`{}` cannot name an MCP server: 1 to 32 characters of [a-z0-9-], starting with a letter",
            name.chars().take(64).collect::<String>()
        )).into());
    }
    if !config.is_object() {
        return Err(BatchError::InvalidContent(
            "an MCP server's configuration is a JSON object".into(),
        )
        .into());
    }
    let text =
        serde_json::to_string(config).map_err(|e| BatchError::InvalidContent(e.to_string()))?;
    if text.len() > MAX_CONFIG_BYTES {
        return Err(BatchError::ContentTooLarge {
            size: text.len(),
            limit: MAX_CONFIG_BYTES,
        }
        .into());
    }
    Ok(text)
}

impl Database {
    /// Stores server `name` of `agent` (replacing one of that name).
    pub async fn put_mcp_server(
        &self,
        agent: AgentId,
        name: &str,
        config: &serde_json::Value,
    ) -> Result<McpServerRow> {
        let text = check(name, config)?;
        let write = PutServers {
            agent,
            servers: vec![(name.to_owned(), text)],
            replace_all: false,
        };
        self.write(write).await?.pop().ok_or_else(|| {
            Error::Storage(StorageError::Corrupt(
                "storing an MCP server returned no row".into(),
            ))
        })
    }

    /// Replaces all of `agent`'s servers with `servers` in one transaction.
    pub async fn set_mcp_servers(
        &self,
        agent: AgentId,
        servers: &[(String, serde_json::Value)],
    ) -> Result<Vec<McpServerRow>> {
        if servers.len() > MAX_SERVERS_PER_AGENT {
            return Err(BatchError::InvalidContent(format!(
                "an agent has at most {MAX_SERVERS_PER_AGENT} MCP servers"
            ))
            .into());
        }
        let mut checked = Vec::with_capacity(servers.len());
        for (name, config) in servers {
            if checked.iter().any(|(n, _): &(String, String)| n == name) {
                return Err(BatchError::InvalidContent(format!(
                    "MCP server `{name}` is given twice"
                ))
                .into());
            }
            checked.push((name.clone(), check(name, config)?));
        }
        self.write(PutServers {
            agent,
            servers: checked,
            replace_all: true,
        })
        .await
    }

    /// Removes server `name` of `agent`; an unknown one is [`McpError::ServerNotFound`].
    pub async fn remove_mcp_server(&self, agent: AgentId, name: &str) -> Result<()> {
        self.write(RemoveServer {
            agent,
            name: name.to_owned(),
        })
        .await
    }

    /// `agent`'s servers, by name.
    pub async fn mcp_servers(&self, agent: AgentId) -> Result<Vec<McpServerRow>> {
        crate::ops::mcp::list(self.reader(), agent).await
    }
}

/// Refusals of MCP server configuration (module [`crate::mcp`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum McpError {
    /// The agent has no MCP server of this name.
    #[error("agent {agent} has no MCP server `{name}`")]
    ServerNotFound {
        /// The agent.
        agent: crate::AgentId,
        /// The name asked for.
        name: String,
    },
}

impl McpError {
    /// What kind of failure this is (see [`crate::ErrorClass`]).
    pub fn class(&self) -> crate::ErrorClass {
        use crate::ErrorClass as C;
        match self {
            McpError::ServerNotFound { .. } => C::NotFound,
        }
    }
}

#[cfg(test)]
mod tests {
    //! Server names.

    use super::valid_server_name;

    #[test]
    fn server_names_are_lowercase_words_without_underscores() {
        assert!(valid_server_name("time"));
        assert!(valid_server_name("server-everything2"));
        assert!(!valid_server_name(""));
        assert!(!valid_server_name("my_server"));
        assert!(!valid_server_name("Time"));
        assert!(!valid_server_name("1time"));
        assert!(!valid_server_name(&"a".repeat(33)));
    }
}
