//! Statements on an agent's row: the revision bump by which every write of an agent's history
//! serialises with the others (and, in the same statement, what that write needs to know), and
//! the revision readers key their caches on.
//!
//! Also whether an agent exists and the organization it belongs to (the owner checks of blocks,
//! auth and approvals), and the agent rows themselves: the clash check and insert of a new
//! agent, its metadata update, its delete, and the reads of one agent or a list of them.
//!
//! It must never decide what an unknown agent means: a bump that touches no row comes back as
//! zero rows or `None`, and the caller refuses. It never checks a name or parses metadata (the
//! caller's JSON text).

use sqlx::SqliteConnection;

/// An `agents` row without its revision.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AgentRow {
    /// `id` (a UUID's text).
    pub id: String,
    /// `name`.
    pub name: String,
    /// `metadata` (JSON text).
    pub metadata: String,
    /// `created_at` (milliseconds since the epoch).
    pub created_at: i64,
    /// `organization_id` (a UUID's text).
    pub organization_id: String,
    /// `external_id`.
    pub external_id: String,
}

/// A new `agents` row (its revision starts at the column's default).
#[derive(Clone, Debug)]
pub struct NewAgent<'a> {
    /// `id`.
    pub id: &'a str,
    /// `name`.
    pub name: &'a str,
    /// `metadata` (JSON text).
    pub metadata: &'a str,
    /// `created_at`.
    pub created_at: i64,
    /// `organization_id`.
    pub organization_id: &'a str,
    /// `external_id`.
    pub external_id: &'a str,
}

/// Bumps `agent`'s revision; the number of rows changed (0 for an unknown agent).
pub async fn bump_revision(conn: &mut SqliteConnection, agent: &str) -> sqlx::Result<u64> {
    let done = sqlx::query!(
        "UPDATE agents SET revision = revision + 1 WHERE id = $1",
        agent
    )
    .execute(conn)
    .await?;
    Ok(done.rows_affected())
}

/// What a write learns from the revision bump that opens it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bumped {
    /// The agent's number (what its messages carry: `messages.agent`).
    pub num: i64,
    /// The agent's highest stored message position, if it has any message.
    pub max_position: Option<i64>,
    /// Who holds a run claim on the agent, if anyone (only read by
    /// [`bump_revision_with_holder`]).
    pub run_holder: Option<String>,
}

/// Bumps `agent`'s revision and reads its highest message position in the same statement;
/// `None` for an unknown agent.
pub async fn bump_revision_with_position(
    conn: &mut SqliteConnection,
    agent: &str,
) -> sqlx::Result<Option<Bumped>> {
    let row = sqlx::query!(
        r#"UPDATE agents SET revision = revision + 1 WHERE id = $1 RETURNING num, (SELECT m.position FROM messages m WHERE m.agent = agents.num ORDER BY m.position DESC LIMIT 1) AS "max_position?: i64""#,
        agent
    )
    .fetch_optional(conn)
    .await?;
    Ok(row.map(|r| Bumped {
        num: r.num,
        max_position: r.max_position,
        run_holder: None,
    }))
}

/// [`bump_revision_with_position`] that also reads who holds a run claim on the agent.
pub async fn bump_revision_with_holder(
    conn: &mut SqliteConnection,
    agent: &str,
) -> sqlx::Result<Option<Bumped>> {
    let row = sqlx::query!(
        r#"UPDATE agents SET revision = revision + 1 WHERE id = $1 RETURNING num, (SELECT m.position FROM messages m WHERE m.agent = agents.num ORDER BY m.position DESC LIMIT 1) AS "max_position?: i64", (SELECT r.holder FROM agent_runs r WHERE r.agent_id = agents.id AND r.holder IS NOT NULL) AS "run_holder?: String""#,
        agent
    )
    .fetch_optional(conn)
    .await?;
    Ok(row.map(|r| Bumped {
        num: r.num,
        max_position: r.max_position,
        run_holder: r.run_holder,
    }))
}

/// `agent`'s revision; `None` for an unknown agent.
pub async fn revision(conn: &mut SqliteConnection, agent: &str) -> sqlx::Result<Option<i64>> {
    sqlx::query_scalar!("SELECT revision FROM agents WHERE id = $1", agent)
        .fetch_optional(conn)
        .await
}

/// Whether agent `agent` exists.
pub async fn exists(conn: &mut SqliteConnection, agent: &str) -> sqlx::Result<bool> {
    let row = sqlx::query_scalar!(r#"SELECT id AS "id!" FROM agents WHERE id = $1"#, agent)
        .fetch_optional(conn)
        .await?;
    Ok(row.is_some())
}

/// The organization agent `agent` belongs to: `None` for an unknown agent, `Some(None)` for an
/// agent without one.
pub async fn organization_of(
    conn: &mut SqliteConnection,
    agent: &str,
) -> sqlx::Result<Option<Option<String>>> {
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
    conn: &mut SqliteConnection,
    org: &str,
    name: &str,
    external_id: &str,
) -> sqlx::Result<Option<bool>> {
    sqlx::query_scalar!(
        r#"SELECT name = $2 AS "by_name!: bool" FROM agents WHERE organization_id = $1 AND (name = $2 OR external_id = $3) ORDER BY 1 DESC LIMIT 1"#,
        org,
        name,
        external_id
    )
    .fetch_optional(conn)
    .await
}

/// Inserts an agent; rows changed. The engine's errors (a name or external id taken) come back
/// as they are.
pub async fn insert(conn: &mut SqliteConnection, agent: &NewAgent<'_>) -> sqlx::Result<u64> {
    let done = sqlx::query!(
        "INSERT INTO agents (id, name, metadata, created_at, organization_id, external_id) VALUES ($1, $2, $3, $4, $5, $6)",
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
    conn: &mut SqliteConnection,
    agent: &str,
    metadata: &str,
) -> sqlx::Result<u64> {
    let done = sqlx::query!(
        "UPDATE agents SET metadata = $1 WHERE id = $2",
        metadata,
        agent
    )
    .execute(conn)
    .await?;
    Ok(done.rows_affected())
}

/// Deletes `agent` (its rows in other tables go by their foreign keys' cascades); rows deleted.
pub async fn delete(conn: &mut SqliteConnection, agent: &str) -> sqlx::Result<u64> {
    let done = sqlx::query!("DELETE FROM agents WHERE id = $1", agent)
        .execute(conn)
        .await?;
    Ok(done.rows_affected())
}

/// Agent `agent`; `None` for an unknown one.
pub async fn by_id(conn: &mut SqliteConnection, agent: &str) -> sqlx::Result<Option<AgentRow>> {
    sqlx::query_as!(
        AgentRow,
        r#"SELECT id AS "id!", name AS "name!", metadata AS "metadata!", created_at AS "created_at!: i64", organization_id AS "organization_id!", external_id AS "external_id!" FROM agents WHERE id = $1"#,
        agent
    )
    .fetch_optional(conn)
    .await
}

/// Every agent, by organization and name.
pub async fn all(conn: &mut SqliteConnection) -> sqlx::Result<Vec<AgentRow>> {
    sqlx::query_as!(
        AgentRow,
        r#"SELECT id AS "id!", name AS "name!", metadata AS "metadata!", created_at AS "created_at!: i64", organization_id AS "organization_id!", external_id AS "external_id!" FROM agents ORDER BY organization_id, name"#
    )
    .fetch_all(conn)
    .await
}

/// The agents of organization `org`, by name.
pub async fn of_organization(
    conn: &mut SqliteConnection,
    org: &str,
) -> sqlx::Result<Vec<AgentRow>> {
    sqlx::query_as!(
        AgentRow,
        r#"SELECT id AS "id!", name AS "name!", metadata AS "metadata!", created_at AS "created_at!: i64", organization_id AS "organization_id!", external_id AS "external_id!" FROM agents WHERE organization_id = $1 ORDER BY name"#,
        org
    )
    .fetch_all(conn)
    .await
}

/// Agent `agent` if it belongs to organization `org`; `None` otherwise.
pub async fn by_id_in(
    conn: &mut SqliteConnection,
    agent: &str,
    org: &str,
) -> sqlx::Result<Option<AgentRow>> {
    sqlx::query_as!(
        AgentRow,
        r#"SELECT id AS "id!", name AS "name!", metadata AS "metadata!", created_at AS "created_at!: i64", organization_id AS "organization_id!", external_id AS "external_id!" FROM agents WHERE id = $1 AND organization_id = $2"#,
        agent,
        org
    )
    .fetch_optional(conn)
    .await
}

/// The agent named `name` in organization `org`; `None` when there is none.
pub async fn by_name_in(
    conn: &mut SqliteConnection,
    name: &str,
    org: &str,
) -> sqlx::Result<Option<AgentRow>> {
    sqlx::query_as!(
        AgentRow,
        r#"SELECT id AS "id!", name AS "name!", metadata AS "metadata!", created_at AS "created_at!: i64", organization_id AS "organization_id!", external_id AS "external_id!" FROM agents WHERE name = $1 AND organization_id = $2"#,
        name,
        org
    )
    .fetch_optional(conn)
    .await
}

/// The agent named `name` in the organization whose external id is `org_external_id`; `None`
/// when there is none.
pub async fn by_name_in_external(
    conn: &mut SqliteConnection,
    name: &str,
    org_external_id: &str,
) -> sqlx::Result<Option<AgentRow>> {
    sqlx::query_as!(
        AgentRow,
        r#"SELECT a.id AS "id!", a.name AS "name!", a.metadata AS "metadata!", a.created_at AS "created_at!: i64", a.organization_id AS "organization_id!", a.external_id AS "external_id!" FROM agents a WHERE a.name = $1 AND a.organization_id = (SELECT o.id FROM protocol_organizations o WHERE o.external_id = $2)"#,
        name,
        org_external_id
    )
    .fetch_optional(conn)
    .await
}
