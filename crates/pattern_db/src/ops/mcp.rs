//! The SQL of per-agent MCP servers (`crate::mcp`): the domain's writes ([`PutServers`],
//! [`RemoveServer`]) and its list.
//!
//! Writes run inside the writer's transaction (reads on the reader pool); they must never
//! commit, and never write a server of an agent they did not lock first.

use crate::sql::Conn;
use crate::sql::Pool;
use crate::sql::instant;
use crate::{BatchError, McpError, StorageError};

use super::{Ctx, FromStored, StoredId, StoredTime, lock_agent, now_ms};
use crate::error::Result;
use crate::mcp::{MAX_SERVERS_PER_AGENT, McpServerRow};
use crate::model::AgentId;
use crate::runs::RunClaim;
use crate::writer::{Locks, Write};

/// Stores servers of an agent (name, checked JSON text), replacing those of the same names, or
/// all of the agent's servers when `replace_all`.
#[derive(Debug)]
pub(crate) struct PutServers {
    pub(crate) agent: AgentId,
    pub(crate) servers: Vec<(String, String)>,
    pub(crate) replace_all: bool,
}

impl Write for PutServers {
    type Output = Vec<McpServerRow>;

    fn locks(&self) -> Locks {
        Locks::agent(self.agent)
    }

    async fn apply(
        &self,
        conn: &mut Conn<'_>,
        _ctx: &Ctx,
        _fence: Option<&RunClaim>,
    ) -> Result<Self::Output> {
        put(conn, self.agent, &self.servers, self.replace_all).await
    }
}

/// Removes one server of an agent.
#[derive(Debug)]
pub(crate) struct RemoveServer {
    pub(crate) agent: AgentId,
    pub(crate) name: String,
}

impl Write for RemoveServer {
    type Output = ();

    fn locks(&self) -> Locks {
        Locks::agent(self.agent)
    }

    async fn apply(
        &self,
        conn: &mut Conn<'_>,
        _ctx: &Ctx,
        _fence: Option<&RunClaim>,
    ) -> Result<Self::Output> {
        remove(conn, self.agent, &self.name).await
    }
}

/// An MCP server from either engine's checked row ([`FromStored`]).
fn server_from_plain(row: impl FromStored<McpServerRow>) -> Result<McpServerRow> {
    row.into_domain()
}

/// [`FromStored`] for the MCP server rows of one engine's crate of checked statements: one
/// conversion, written once, for both engines.
macro_rules! server_from_stored {
    ($engine:ident) => {
        impl FromStored<McpServerRow> for $engine::mcp::McpServerRow {
            fn into_domain(self) -> Result<McpServerRow> {
                Ok(McpServerRow {
                    agent_id: AgentId(self.agent_id.uuid()?),
                    name: self.name,
                    config: serde_json::from_str(&self.config).map_err(|e| {
                        StorageError::Corrupt(format!(
                            "an MCP server's config does not decode: {e}"
                        ))
                    })?,
                    updated_at: self.updated_at.time(),
                })
            }
        }
    };
}

server_from_stored!(pattern_db_sqlite);
server_from_stored!(pattern_db_postgres);

async fn put(
    conn: &mut Conn<'_>,
    agent: AgentId,
    servers: &[(String, String)],
    replace_all: bool,
) -> Result<Vec<McpServerRow>> {
    lock_agent(conn, agent).await?;
    let now = now_ms();
    let id = agent.to_string();
    if replace_all {
        match conn {
            Conn::Sqlite(c) => pattern_db_sqlite::mcp::delete_all(c, &id).await?,
            Conn::Postgres(c) => pattern_db_postgres::mcp::delete_all(c, agent.0).await?,
        };
    }
    for (name, config) in servers {
        match conn {
            Conn::Sqlite(c) => pattern_db_sqlite::mcp::upsert(c, &id, name, config, now).await?,
            Conn::Postgres(c) => {
                pattern_db_postgres::mcp::upsert(c, agent.0, name, config, instant(now)?).await?
            }
        };
    }
    let count = match conn {
        Conn::Sqlite(c) => pattern_db_sqlite::mcp::count(c, &id).await?,
        Conn::Postgres(c) => pattern_db_postgres::mcp::count(c, agent.0).await?,
    };
    if usize::try_from(count).unwrap_or(usize::MAX) > MAX_SERVERS_PER_AGENT {
        return Err(BatchError::InvalidContent(format!(
            "an agent has at most {MAX_SERVERS_PER_AGENT} MCP servers"
        ))
        .into());
    }
    let mut out = Vec::with_capacity(servers.len());
    for (name, _) in servers {
        out.push(match conn {
            Conn::Sqlite(c) => server_from_plain(pattern_db_sqlite::mcp::one(c, &id, name).await?)?,
            Conn::Postgres(c) => {
                server_from_plain(pattern_db_postgres::mcp::one(c, agent.0, name).await?)?
            }
        });
    }
    Ok(out)
}

async fn remove(conn: &mut Conn<'_>, agent: AgentId, name: &str) -> Result<()> {
    lock_agent(conn, agent).await?;
    let done = match conn {
        Conn::Sqlite(c) => pattern_db_sqlite::mcp::delete(c, &agent.to_string(), name).await?,
        Conn::Postgres(c) => pattern_db_postgres::mcp::delete(c, agent.0, name).await?,
    };
    if done == 0 {
        return Err(McpError::ServerNotFound {
            agent,
            name: name.chars().take(64).collect(),
        }
        .into());
    }
    Ok(())
}

pub(crate) async fn list(pool: &Pool, agent: AgentId) -> Result<Vec<McpServerRow>> {
    let mut pooled = pool.acquire().await?;
    match &mut pooled.conn() {
        Conn::Sqlite(c) => pattern_db_sqlite::mcp::of_agent(c, &agent.to_string())
            .await?
            .into_iter()
            .map(server_from_plain)
            .collect(),
        Conn::Postgres(c) => pattern_db_postgres::mcp::of_agent(c, agent.0)
            .await?
            .into_iter()
            .map(server_from_plain)
            .collect(),
    }
}
