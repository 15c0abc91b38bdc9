//! The SQL of per-agent MCP servers (`crate::mcp`): upsert, replace all, remove, list.
//!
//! Runs inside the writer's transaction like every op (reads on the reader pool); it must never
//! commit, and never write a server of an agent it did not lock first.

use sqlx::any::AnyRow;
use sqlx::{AnyConnection, AnyPool, Row};

use super::{from_ms, lock_agent, now_ms, parse_uuid};
use crate::error::{Error, Result};
use crate::mcp::{MAX_SERVERS_PER_AGENT, McpServerRow};
use crate::model::AgentId;

const COLUMNS: &str = "agent_id, name, config, updated_at";

fn from_row(row: &AnyRow) -> Result<McpServerRow> {
    let agent: String = row.try_get(0)?;
    let config: String = row.try_get(2)?;
    Ok(McpServerRow {
        agent_id: AgentId(parse_uuid(&agent)?),
        name: row.try_get(1)?,
        config: serde_json::from_str(&config)
            .map_err(|e| Error::Corrupt(format!("an MCP server's config does not decode: {e}")))?,
        updated_at: from_ms(row.try_get(3)?),
    })
}

pub(crate) async fn put(
    conn: &mut AnyConnection,
    agent: AgentId,
    servers: &[(String, String)],
    replace_all: bool,
) -> Result<Vec<McpServerRow>> {
    lock_agent(conn, agent).await?;
    if replace_all {
        sqlx::query("DELETE FROM mcp_servers WHERE agent_id = $1")
            .bind(agent.to_string())
            .execute(&mut *conn)
            .await?;
    }
    let now = now_ms();
    for (name, config) in servers {
        sqlx::query(
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
    let count: i64 = sqlx::query("SELECT COUNT(*) FROM mcp_servers WHERE agent_id = $1")
        .bind(agent.to_string())
        .fetch_one(&mut *conn)
        .await?
        .try_get(0)?;
    if usize::try_from(count).unwrap_or(usize::MAX) > MAX_SERVERS_PER_AGENT {
        return Err(Error::InvalidContent(format!(
            "an agent has at most {MAX_SERVERS_PER_AGENT} MCP servers"
        )));
    }
    let mut out = Vec::with_capacity(servers.len());
    for (name, _) in servers {
        let row = sqlx::query(sqlx::AssertSqlSafe(format!(
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

pub(crate) async fn remove(conn: &mut AnyConnection, agent: AgentId, name: &str) -> Result<()> {
    lock_agent(conn, agent).await?;
    let done = sqlx::query("DELETE FROM mcp_servers WHERE agent_id = $1 AND name = $2")
        .bind(agent.to_string())
        .bind(name)
        .execute(&mut *conn)
        .await?;
    if done.rows_affected() == 0 {
        return Err(Error::McpServerNotFound {
            agent,
            name: name.chars().take(64).collect(),
        });
    }
    Ok(())
}

pub(crate) async fn list(pool: &AnyPool, agent: AgentId) -> Result<Vec<McpServerRow>> {
    let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
        "SELECT {COLUMNS} FROM mcp_servers WHERE agent_id = $1 ORDER BY name"
    )))
    .bind(agent.to_string())
    .fetch_all(pool)
    .await?;
    rows.iter().map(from_row).collect()
}
