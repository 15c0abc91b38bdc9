//! Statements on `mcp_servers` rows: an agent's MCP server configurations (put, count, read,
//! remove, list).
//!
//! It must never parse or judge a configuration (the caller's JSON text, stored as `JSONB` and
//! read back as `config::text`, PostgreSQL's rendering of it) and never enforce the per-agent cap: the caller counts and refuses.

use sqlx::PgConnection;

use crate::{Timestamp, Uuid};

/// An `mcp_servers` row as PostgreSQL stores it (`pattern_db_sqlite::mcp::McpServerRow`'s fields,
/// with a `UUID` agent and a `TIMESTAMPTZ` instant; the `JSONB` config read as its text).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct McpServerRow {
    /// `agent_id`.
    pub agent_id: Uuid,
    /// `name`.
    pub name: String,
    /// `config` (JSON text).
    pub config: String,
    /// `updated_at`.
    pub updated_at: Timestamp,
}

/// Deletes every server of `agent`; rows deleted.
pub async fn delete_all(conn: &mut PgConnection, agent: Uuid) -> sqlx::Result<u64> {
    let done = sqlx::query!("DELETE FROM mcp_servers WHERE agent_id = $1", agent)
        .execute(conn)
        .await?;
    Ok(done.rows_affected())
}

/// Stores server `name` of `agent` with `config` at `now`, replacing one of the same name; rows
/// changed.
pub async fn upsert(
    conn: &mut PgConnection,
    agent: Uuid,
    name: &str,
    config: &str,
    now: Timestamp,
) -> sqlx::Result<u64> {
    let done = sqlx::query!(
        "INSERT INTO mcp_servers (agent_id, name, config, updated_at) VALUES ($1, $2, $3::text::jsonb, $4) ON CONFLICT (agent_id, name) DO UPDATE SET config = excluded.config, updated_at = excluded.updated_at",
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
pub async fn count(conn: &mut PgConnection, agent: Uuid) -> sqlx::Result<i64> {
    sqlx::query_scalar!(
        r#"SELECT COUNT(*) AS "count!" FROM mcp_servers WHERE agent_id = $1"#,
        agent
    )
    .fetch_one(conn)
    .await
}

/// Server `name` of `agent`; [`sqlx::Error::RowNotFound`] when there is none.
pub async fn one(conn: &mut PgConnection, agent: Uuid, name: &str) -> sqlx::Result<McpServerRow> {
    sqlx::query_as!(
        McpServerRow,
        r#"SELECT agent_id AS "agent_id!", name AS "name!", config::text AS "config!", updated_at AS "updated_at!" FROM mcp_servers WHERE agent_id = $1 AND name = $2"#,
        agent,
        name
    )
    .fetch_one(conn)
    .await
}

/// Deletes server `name` of `agent`; rows deleted.
pub async fn delete(conn: &mut PgConnection, agent: Uuid, name: &str) -> sqlx::Result<u64> {
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
pub async fn of_agent(conn: &mut PgConnection, agent: Uuid) -> sqlx::Result<Vec<McpServerRow>> {
    sqlx::query_as!(
        McpServerRow,
        r#"SELECT agent_id AS "agent_id!", name AS "name!", config::text AS "config!", updated_at AS "updated_at!" FROM mcp_servers WHERE agent_id = $1 ORDER BY name"#,
        agent
    )
    .fetch_all(conn)
    .await
}
