//! Statements on `mcp_servers` rows: an agent's MCP server configurations (put, count, read,
//! remove, list).
//!
//! It must never parse or judge a configuration (it is the caller's JSON text, stored and read
//! as text) and never enforce the per-agent cap: the caller counts and refuses.

use sqlx::SqliteConnection;

/// An `mcp_servers` row as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct McpServerRow {
    /// `agent_id` (a UUID's text).
    pub agent_id: String,
    /// `name`.
    pub name: String,
    /// `config` (JSON text).
    pub config: String,
    /// `updated_at` (milliseconds since the epoch).
    pub updated_at: i64,
}

/// Deletes every server of `agent`; rows deleted.
pub async fn delete_all(conn: &mut SqliteConnection, agent: &str) -> sqlx::Result<u64> {
    let done = sqlx::query!("DELETE FROM mcp_servers WHERE agent_id = $1", agent)
        .execute(conn)
        .await?;
    Ok(done.rows_affected())
}

/// Stores server `name` of `agent` with `config` at `now`, replacing one of the same name; rows
/// changed.
pub async fn upsert(
    conn: &mut SqliteConnection,
    agent: &str,
    name: &str,
    config: &str,
    now: i64,
) -> sqlx::Result<u64> {
    let done = sqlx::query!(
        "INSERT INTO mcp_servers (agent_id, name, config, updated_at) VALUES ($1, $2, $3, $4) ON CONFLICT (agent_id, name) DO UPDATE SET config = excluded.config, updated_at = excluded.updated_at",
        agent,
        name,
        config,
        now
    )
    .execute(conn)
    .await?;
    Ok(done.rows_affected())
}

/// How many servers `agent` has.
pub async fn count(conn: &mut SqliteConnection, agent: &str) -> sqlx::Result<i64> {
    sqlx::query_scalar!(
        r#"SELECT COUNT(*) AS "count!: i64" FROM mcp_servers WHERE agent_id = $1"#,
        agent
    )
    .fetch_one(conn)
    .await
}

/// Server `name` of `agent`; [`sqlx::Error::RowNotFound`] when there is none.
pub async fn one(
    conn: &mut SqliteConnection,
    agent: &str,
    name: &str,
) -> sqlx::Result<McpServerRow> {
    sqlx::query_as!(
        McpServerRow,
        r#"SELECT agent_id AS "agent_id!", name AS "name!", config AS "config!", updated_at AS "updated_at!" FROM mcp_servers WHERE agent_id = $1 AND name = $2"#,
        agent,
        name
    )
    .fetch_one(conn)
    .await
}

/// Deletes server `name` of `agent`; rows deleted.
pub async fn delete(conn: &mut SqliteConnection, agent: &str, name: &str) -> sqlx::Result<u64> {
    let done = sqlx::query!(
        "DELETE FROM mcp_servers WHERE agent_id = $1 AND name = $2",
        agent,
        name
    )
    .execute(conn)
    .await?;
    Ok(done.rows_affected())
}

/// Every server of `agent`, by name.
pub async fn of_agent(conn: &mut SqliteConnection, agent: &str) -> sqlx::Result<Vec<McpServerRow>> {
    sqlx::query_as!(
        McpServerRow,
        r#"SELECT agent_id AS "agent_id!", name AS "name!", config AS "config!", updated_at AS "updated_at!" FROM mcp_servers WHERE agent_id = $1 ORDER BY name"#,
        agent
    )
    .fetch_all(conn)
    .await
}
