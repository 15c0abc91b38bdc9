//! Statements on an agent's row: the revision bump by which every write of an agent's history
//! serialises with the others (on PostgreSQL it also takes the agent's row lock until the
//! transaction ends) and, in the same statement, what that write needs to know; and the revision
//! readers key their caches on.
//!
//! Also whether an agent exists and the organization it belongs to (the owner checks of blocks,
//! auth and approvals).
//!
//! It must never decide what an unknown agent means: a bump that touches no row comes back as
//! zero rows or `None`, and the caller refuses.

use sqlx::PgConnection;

use crate::Uuid;

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

/// The agent's highest stored message position and, when asked, who holds a run claim on it:
/// what a write learns from the revision bump that opens it.
pub type Bumped = (Option<i64>, Option<String>);

/// Bumps `agent`'s revision and reads its highest message position in the same statement;
/// `None` for an unknown agent (the holder is always `None`).
pub async fn bump_revision_with_position(
    conn: &mut PgConnection,
    agent: Uuid,
) -> sqlx::Result<Option<Bumped>> {
    let row = sqlx::query_scalar!(
        r#"UPDATE agents SET revision = revision + 1 WHERE id = $1 RETURNING (SELECT m.position FROM messages m WHERE m.agent_id = agents.id ORDER BY m.position DESC LIMIT 1) AS "max_position?: i64""#,
        agent
    )
    .fetch_optional(conn)
    .await?;
    Ok(row.map(|max_position| (max_position, None)))
}

/// [`bump_revision_with_position`] that also reads who holds a run claim on the agent.
pub async fn bump_revision_with_holder(
    conn: &mut PgConnection,
    agent: Uuid,
) -> sqlx::Result<Option<Bumped>> {
    let row = sqlx::query!(
        r#"UPDATE agents SET revision = revision + 1 WHERE id = $1 RETURNING (SELECT m.position FROM messages m WHERE m.agent_id = agents.id ORDER BY m.position DESC LIMIT 1) AS "max_position?: i64", (SELECT r.holder FROM agent_runs r WHERE r.agent_id = agents.id AND r.holder IS NOT NULL) AS "run_holder?: String""#,
        agent
    )
    .fetch_optional(conn)
    .await?;
    Ok(row.map(|r| (r.max_position, r.run_holder)))
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
