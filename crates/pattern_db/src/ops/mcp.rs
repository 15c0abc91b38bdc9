//! The SQL of per-agent MCP servers (`crate::mcp`): the domain's writes ([`PutServers`],
//! [`RemoveServer`]) and its list.
//!
//! Writes run inside the writer's transaction (reads on the reader pool); they must never
//! commit, and never write a server of an agent they did not lock first.

use crate::sql::Conn;
use crate::sql::Pool;
use crate::sql::Row;
use crate::{BatchError, McpError, StorageError};

use super::{Ctx, from_ms, lock_agent, now_ms, parse_uuid};
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

const COLUMNS: &str = "agent_id, name, config, updated_at";

fn from_row(row: &Row) -> Result<McpServerRow> {
    let agent: String = row.try_get(0)?;
    let config: String = row.try_get(2)?;
    Ok(McpServerRow {
        agent_id: AgentId(parse_uuid(&agent)?),
        name: row.try_get(1)?,
        config: serde_json::from_str(&config).map_err(|e| {
            StorageError::Corrupt(format!("an MCP server's config does not decode: {e}"))
        })?,
        updated_at: from_ms(row.try_get(3)?),
    })
}

async fn put(
    conn: &mut Conn<'_>,
    agent: AgentId,
    servers: &[(String, String)],
    replace_all: bool,
) -> Result<Vec<McpServerRow>> {
    lock_agent(conn, agent).await?;
    if replace_all {
        crate::sql::query("DELETE FROM mcp_servers WHERE agent_id = $1")
            .bind(agent.to_string())
            .execute(&mut *conn)
            .await?;
    }
    let now = now_ms();
    for (name, config) in servers {
        crate::sql::query(
            "INSERT INTO mcp_servers (agent_id, name, config, updated_at) VALUES ($1, $2, $3, $4) \
             ON CONFLICT (agent_id, name) DO UPDATE SET config = excluded.config, \
             updated_at = excluded.updated_at",
        )
        .bind(agent.to_string())
        .bind(name)
        .bind(config)
        .bind(now)
        .execute(&mut *conn)
        .await?;
    }
    let count: i64 = crate::sql::query("SELECT COUNT(*) FROM mcp_servers WHERE agent_id = $1")
        .bind(agent.to_string())
        .fetch_one(&mut *conn)
        .await?
        .try_get(0)?;
    if usize::try_from(count).unwrap_or(usize::MAX) > MAX_SERVERS_PER_AGENT {
        return Err(BatchError::InvalidContent(format!(
            "an agent has at most {MAX_SERVERS_PER_AGENT} MCP servers"
        ))
        .into());
    }
    let mut out = Vec::with_capacity(servers.len());
    for (name, _) in servers {
        let row = crate::sql::query(sqlx::AssertSqlSafe(format!(
            "SELECT {COLUMNS} FROM mcp_servers WHERE agent_id = $1 AND name = $2"
        )))
        .bind(agent.to_string())
        .bind(name)
        .fetch_one(&mut *conn)
        .await?;
        out.push(from_row(&row)?);
    }
    Ok(out)
}

async fn remove(conn: &mut Conn<'_>, agent: AgentId, name: &str) -> Result<()> {
    lock_agent(conn, agent).await?;
    let done = crate::sql::query("DELETE FROM mcp_servers WHERE agent_id = $1 AND name = $2")
        .bind(agent.to_string())
        .bind(name)
        .execute(&mut *conn)
        .await?;
    if done.rows_affected() == 0 {
        return Err(McpError::ServerNotFound {
            agent,
            name: name.chars().take(64).collect(),
        }
        .into());
    }
    Ok(())
}

pub(crate) async fn list(pool: &Pool, agent: AgentId) -> Result<Vec<McpServerRow>> {
    let rows = crate::sql::query(sqlx::AssertSqlSafe(format!(
        "SELECT {COLUMNS} FROM mcp_servers WHERE agent_id = $1 ORDER BY name"
    )))
    .bind(agent.to_string())
    .fetch_all(pool)
    .await?;
    rows.iter().map(from_row).collect()
}
