//! Statements on `archival_memories` and `archival_tags` rows: a passage by id, an agent's
//! passages newest first (before an id, with a tag, or both), their count, and a passage's
//! delete with its tags; and a passage's creation time (an import restoring it).
//!
//! It must never judge a passage (content, tags, dedupe keys, limits: the caller validates) and
//! never log search changes or touch embeddings: the caller does that in the same transaction.
//! The inserts stay in `pattern_db` (multi-row `VALUES` lists whose length varies with the call).

use sqlx::SqliteConnection;

/// An `archival_memories` row as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArchivalRow {
    /// `id` (a UUID's text).
    pub id: String,
    /// `agent_id` (a UUID's text).
    pub agent_id: String,
    /// `content`.
    pub content: String,
    /// `metadata` (JSON text).
    pub metadata: String,
    /// `tags` (a JSON array's text).
    pub tags: String,
    /// `dedupe_key`.
    pub dedupe_key: Option<String>,
    /// `created_at` (milliseconds since the epoch).
    pub created_at: i64,
}

/// Passage `id` of `agent`, if any.
pub async fn one(
    conn: &mut SqliteConnection,
    id: &str,
    agent: &str,
) -> sqlx::Result<Option<ArchivalRow>> {
    sqlx::query_as!(
        ArchivalRow,
        r#"SELECT a.id AS "id!", a.agent_id AS "agent_id!", a.content AS "content!", a.metadata AS "metadata!", a.tags AS "tags!", a.dedupe_key AS "dedupe_key?", a.created_at AS "created_at!" FROM archival_memories a WHERE a.id = $1 AND a.agent_id = $2"#,
        id,
        agent
    )
    .fetch_optional(conn)
    .await
}

/// Up to `limit` passages of `agent`, newest (highest id) first.
pub async fn page(
    conn: &mut SqliteConnection,
    agent: &str,
    limit: i64,
) -> sqlx::Result<Vec<ArchivalRow>> {
    sqlx::query_as!(
        ArchivalRow,
        r#"SELECT a.id AS "id!", a.agent_id AS "agent_id!", a.content AS "content!", a.metadata AS "metadata!", a.tags AS "tags!", a.dedupe_key AS "dedupe_key?", a.created_at AS "created_at!" FROM archival_memories a WHERE a.agent_id = $1 ORDER BY a.id DESC LIMIT $2 + 0"#,
        agent,
        limit
    )
    .fetch_all(conn)
    .await
}

/// [`page`] of the passages older than `before`.
pub async fn page_before(
    conn: &mut SqliteConnection,
    agent: &str,
    before: &str,
    limit: i64,
) -> sqlx::Result<Vec<ArchivalRow>> {
    sqlx::query_as!(
        ArchivalRow,
        r#"SELECT a.id AS "id!", a.agent_id AS "agent_id!", a.content AS "content!", a.metadata AS "metadata!", a.tags AS "tags!", a.dedupe_key AS "dedupe_key?", a.created_at AS "created_at!" FROM archival_memories a WHERE a.agent_id = $1 AND a.id < $2 ORDER BY a.id DESC LIMIT $3 + 0"#,
        agent,
        before,
        limit
    )
    .fetch_all(conn)
    .await
}

/// [`page`] of the passages tagged `tag`.
pub async fn page_tagged(
    conn: &mut SqliteConnection,
    agent: &str,
    tag: &str,
    limit: i64,
) -> sqlx::Result<Vec<ArchivalRow>> {
    sqlx::query_as!(
        ArchivalRow,
        r#"SELECT a.id AS "id!", a.agent_id AS "agent_id!", a.content AS "content!", a.metadata AS "metadata!", a.tags AS "tags!", a.dedupe_key AS "dedupe_key?", a.created_at AS "created_at!" FROM archival_memories a WHERE a.agent_id = $1 AND a.id IN (SELECT t.archival_id FROM archival_tags t WHERE t.agent_id = $1 AND t.tag = $2) ORDER BY a.id DESC LIMIT $3 + 0"#,
        agent,
        tag,
        limit
    )
    .fetch_all(conn)
    .await
}

/// [`page`] of the passages older than `before` and tagged `tag`.
pub async fn page_tagged_before(
    conn: &mut SqliteConnection,
    agent: &str,
    before: &str,
    tag: &str,
    limit: i64,
) -> sqlx::Result<Vec<ArchivalRow>> {
    sqlx::query_as!(
        ArchivalRow,
        r#"SELECT a.id AS "id!", a.agent_id AS "agent_id!", a.content AS "content!", a.metadata AS "metadata!", a.tags AS "tags!", a.dedupe_key AS "dedupe_key?", a.created_at AS "created_at!" FROM archival_memories a WHERE a.agent_id = $1 AND a.id < $2 AND a.id IN (SELECT t.archival_id FROM archival_tags t WHERE t.agent_id = $1 AND t.tag = $3) ORDER BY a.id DESC LIMIT $4 + 0"#,
        agent,
        before,
        tag,
        limit
    )
    .fetch_all(conn)
    .await
}

/// How many passages `agent` has.
pub async fn count(conn: &mut SqliteConnection, agent: &str) -> sqlx::Result<i64> {
    sqlx::query_scalar!(
        r#"SELECT COUNT(*) AS "count!: i64" FROM archival_memories WHERE agent_id = $1"#,
        agent
    )
    .fetch_one(conn)
    .await
}

/// Deletes passage `id` of `agent`; rows deleted.
pub async fn delete(conn: &mut SqliteConnection, id: &str, agent: &str) -> sqlx::Result<u64> {
    let done = sqlx::query!(
        "DELETE FROM archival_memories WHERE id = $1 AND agent_id = $2",
        id,
        agent
    )
    .execute(conn)
    .await?;
    Ok(done.rows_affected())
}

/// Deletes the tags of passage `id`; rows deleted.
pub async fn delete_tags(conn: &mut SqliteConnection, id: &str) -> sqlx::Result<u64> {
    let done = sqlx::query!("DELETE FROM archival_tags WHERE archival_id = $1", id)
        .execute(conn)
        .await?;
    Ok(done.rows_affected())
}

/// Sets passage `id`'s creation time to `at` (an import restoring it); rows changed.
pub async fn set_created_at(conn: &mut SqliteConnection, id: &str, at: i64) -> sqlx::Result<u64> {
    let done = sqlx::query!(
        "UPDATE archival_memories SET created_at = $1 WHERE id = $2",
        at,
        id
    )
    .execute(conn)
    .await?;
    Ok(done.rows_affected())
}
