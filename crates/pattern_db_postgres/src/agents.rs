//! Statements on an agent's row: the revision bump by which every write of an agent's history
//! serialises with the others (on PostgreSQL it also takes the agent's row lock until the
//! transaction ends) and, in the same statement, what that write needs to know; and the revision
//! readers key their caches on.
//!
//! Also whether an agent exists and the organization it belongs to (the owner checks of blocks,
//! auth and approvals), and the agent rows themselves: the clash check and insert of a new
//! agent, its metadata update, its delete, and the reads of one agent or a list of them (the
//! `JSON` metadata written as `$n::text::json` and read as `metadata::text`).
//!
//! It must never decide what an unknown agent means: a bump that touches no row comes back as
//! zero rows or `None`, and the caller refuses. It never checks a name or parses metadata (the
//! caller's JSON text).

use sqlx::PgConnection;

use crate::{Timestamp, Uuid};

/// An `agents` row without its revision (`pattern_db_sqlite::agents::AgentRow`'s fields, with
/// `UUID` ids and a `TIMESTAMPTZ` instant; the `JSON` metadata read as its text).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AgentRow {
    /// `id`.
    pub id: Uuid,
    /// `name`.
    pub name: String,
    /// `metadata` (JSON text).
    pub metadata: String,
    /// `created_at`.
    pub created_at: Timestamp,
    /// `organization_id`.
    pub organization_id: Uuid,
    /// `external_id`.
    pub external_id: String,
}

/// A new `agents` row (its revision starts at the column's default).
#[derive(Clone, Debug)]
pub struct NewAgent<'a> {
    /// `id`.
    pub id: Uuid,
    /// `name`.
    pub name: &'a str,
    /// `metadata` (JSON text).
    pub metadata: &'a str,
    /// `created_at`.
    pub created_at: Timestamp,
    /// `organization_id`.
    pub organization_id: Uuid,
    /// `external_id`.
    pub external_id: &'a str,
}

/// Bumps `agent`'s revision; the number of rows changed (0 for an unknown agent).
pub async fn bump_revision(conn: &mut PgConnection, agent: Uuid) -> sqlx::Result<u64> {
    let done = sqlx::query!(
        "UPDATE agents SET revision = revision + 1 WHERE id = $1",
        agent
    )
    .execute(conn)
    .await?;
    Ok(done.rows_affected())
}

/// Bumps `agent`'s revision and reads its highest message position in the same statement;
/// `None` for an unknown agent. The read comes from the statement's snapshot: current only when
/// an earlier statement of the transaction took the agent's row lock (the writer's up-front
/// lock), since a statement that waits for that lock keeps its older snapshot.
pub async fn bump_revision_with_position(
    conn: &mut PgConnection,
    agent: Uuid,
) -> sqlx::Result<Option<Option<i64>>> {
    sqlx::query_scalar!(
        r#"UPDATE agents SET revision = revision + 1 WHERE id = $1 RETURNING (SELECT m.position FROM messages m WHERE m.agent_id = agents.id ORDER BY m.position DESC LIMIT 1) AS "max_position?: i64""#,
        agent
    )
    .fetch_optional(conn)
    .await
}

/// `agent`'s revision; `None` for an unknown agent.
pub async fn revision(conn: &mut PgConnection, agent: Uuid) -> sqlx::Result<Option<i64>> {
    sqlx::query_scalar!("SELECT revision FROM agents WHERE id = $1", agent)
        .fetch_optional(conn)
        .await
}

/// Whether agent `agent` exists.
pub async fn exists(conn: &mut PgConnection, agent: Uuid) -> sqlx::Result<bool> {
    let row = sqlx::query_scalar!(r#"SELECT id AS "id!" FROM agents WHERE id = $1"#, agent)
        .fetch_optional(conn)
        .await?;
    Ok(row.is_some())
}

/// The organization agent `agent` belongs to: `None` for an unknown agent, `Some(None)` for an
/// agent without one.
pub async fn organization_of(
    conn: &mut PgConnection,
    agent: Uuid,
) -> sqlx::Result<Option<Option<Uuid>>> {
    sqlx::query_scalar!(
        r#"SELECT organization_id AS "organization_id?" FROM agents WHERE id = $1"#,
        agent
    )
    .fetch_optional(conn)
    .await
}

/// Whether an agent of `org` already has `name` or `external_id`: `Some(true)` when one has the
/// name, `Some(false)` when one has only the external id, `None` when neither is taken.
pub async fn clash(
    conn: &mut PgConnection,
    org: Uuid,
    name: &str,
    external_id: &str,
) -> sqlx::Result<Option<bool>> {
    sqlx::query_scalar!(
        r#"SELECT (name = $2) AS "by_name!" FROM agents WHERE organization_id = $1 AND (name = $2 OR external_id = $3) ORDER BY 1 DESC LIMIT 1"#,
        org,
        name,
        external_id
    )
    .fetch_optional(conn)
    .await
}

/// Inserts an agent; rows changed. The engine's errors (a name or external id taken) come back
/// as they are.
pub async fn insert(conn: &mut PgConnection, agent: &NewAgent<'_>) -> sqlx::Result<u64> {
    let done = sqlx::query!(
        "INSERT INTO agents (id, name, metadata, created_at, organization_id, external_id) VALUES ($1, $2, $3::text::json, $4, $5, $6)",
        agent.id,
        agent.name,
        agent.metadata,
        agent.created_at,
        agent.organization_id,
        agent.external_id
    )
    .execute(conn)
    .await?;
    Ok(done.rows_affected())
}

/// Replaces `agent`'s metadata with `metadata` (JSON text); rows changed (0 for an unknown
/// agent).
pub async fn set_metadata(
    conn: &mut PgConnection,
    agent: Uuid,
    metadata: &str,
) -> sqlx::Result<u64> {
    let done = sqlx::query!(
        "UPDATE agents SET metadata = $1::text::json WHERE id = $2",
        metadata,
        agent
    )
    .execute(conn)
    .await?;
    Ok(done.rows_affected())
}

/// Deletes `agent` (its rows in other tables go by their foreign keys' cascades); rows deleted.
pub async fn delete(conn: &mut PgConnection, agent: Uuid) -> sqlx::Result<u64> {
    let done = sqlx::query!("DELETE FROM agents WHERE id = $1", agent)
        .execute(conn)
        .await?;
    Ok(done.rows_affected())
}

/// Agent `agent`; `None` for an unknown one.
pub async fn by_id(conn: &mut PgConnection, agent: Uuid) -> sqlx::Result<Option<AgentRow>> {
    sqlx::query_as!(
        AgentRow,
        r#"SELECT id AS "id!", name AS "name!", metadata::text AS "metadata!", created_at AS "created_at!", organization_id AS "organization_id!", external_id AS "external_id!" FROM agents WHERE id = $1"#,
        agent
    )
    .fetch_optional(conn)
    .await
}

/// Every agent, by organization and name.
pub async fn all(conn: &mut PgConnection) -> sqlx::Result<Vec<AgentRow>> {
    sqlx::query_as!(
        AgentRow,
        r#"SELECT id AS "id!", name AS "name!", metadata::text AS "metadata!", created_at AS "created_at!", organization_id AS "organization_id!", external_id AS "external_id!" FROM agents ORDER BY organization_id, name"#
    )
    .fetch_all(conn)
    .await
}

/// The agents of organization `org`, by name.
pub async fn of_organization(conn: &mut PgConnection, org: Uuid) -> sqlx::Result<Vec<AgentRow>> {
    sqlx::query_as!(
        AgentRow,
        r#"SELECT id AS "id!", name AS "name!", metadata::text AS "metadata!", created_at AS "created_at!", organization_id AS "organization_id!", external_id AS "external_id!" FROM agents WHERE organization_id = $1 ORDER BY name"#,
        org
    )
    .fetch_all(conn)
    .await
}

/// Agent `agent` if it belongs to organization `org`; `None` otherwise.
pub async fn by_id_in(
    conn: &mut PgConnection,
    agent: Uuid,
    org: Uuid,
) -> sqlx::Result<Option<AgentRow>> {
    sqlx::query_as!(
        AgentRow,
        r#"SELECT id AS "id!", name AS "name!", metadata::text AS "metadata!", created_at AS "created_at!", organization_id AS "organization_id!", external_id AS "external_id!" FROM agents WHERE id = $1 AND organization_id = $2"#,
        agent,
        org
    )
    .fetch_optional(conn)
    .await
}

/// The agent named `name` in organization `org`; `None` when there is none.
pub async fn by_name_in(
    conn: &mut PgConnection,
    name: &str,
    org: Uuid,
) -> sqlx::Result<Option<AgentRow>> {
    sqlx::query_as!(
        AgentRow,
        r#"SELECT id AS "id!", name AS "name!", metadata::text AS "metadata!", created_at AS "created_at!", organization_id AS "organization_id!", external_id AS "external_id!" FROM agents WHERE name = $1 AND organization_id = $2"#,
        name,
        org
    )
    .fetch_optional(conn)
    .await
}

/// The agent named `name` in the organization whose external id is `org_external_id`; `None`
/// when there is none.
pub async fn by_name_in_external(
    conn: &mut PgConnection,
    name: &str,
    org_external_id: &str,
) -> sqlx::Result<Option<AgentRow>> {
    sqlx::query_as!(
        AgentRow,
        r#"SELECT a.id AS "id!", a.name AS "name!", a.metadata::text AS "metadata!", a.created_at AS "created_at!", a.organization_id AS "organization_id!", a.external_id AS "external_id!" FROM agents a WHERE a.name = $1 AND a.organization_id = (SELECT o.id FROM protocol_organizations o WHERE o.external_id = $2)"#,
        name,
        org_external_id
    )
    .fetch_optional(conn)
    .await
}
