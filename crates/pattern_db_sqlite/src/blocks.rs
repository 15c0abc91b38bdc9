//! Statements on memory blocks: `memory_blocks` rows, the `memory_block_access` rows through
//! which agents see them under a label, and their `memory_block_versions` history.
//!
//! It must never check a permission, a character limit or an expected version, and never decide
//! what a missing row means: the caller judges every row it reads, and a unique violation (a
//! label taken) comes back as the engine's error, unchanged, for the caller to map.

use sqlx::SqliteConnection;

/// A block as an agent sees it: its `memory_blocks` row with the agent's access row's label and
/// permission.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlockRow {
    /// `b.id` (a UUID's text).
    pub id: String,
    /// `b.owner_agent_id` (a UUID's text).
    pub owner_agent_id: String,
    /// `a.label`.
    pub label: String,
    /// `b.description`.
    pub description: String,
    /// `b.value`.
    pub value: String,
    /// `b.char_limit`.
    pub char_limit: i64,
    /// `b.block_type`.
    pub block_type: String,
    /// `a.permission`.
    pub permission: String,
    /// `b.version`.
    pub version: i64,
    /// `b.updated_at` (milliseconds since the epoch).
    pub updated_at: i64,
}

/// A `memory_block_versions` row (without its block).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VersionRow {
    /// `version`.
    pub version: i64,
    /// `value`.
    pub value: String,
    /// `description`.
    pub description: String,
    /// `changed_by` (an agent's UUID as text).
    pub changed_by: String,
    /// `change`.
    pub change: String,
    /// `created_at` (milliseconds since the epoch).
    pub created_at: i64,
}

/// A new `memory_blocks` row (version 1, updated when created).
#[derive(Clone, Debug)]
pub struct NewBlock<'a> {
    /// `id`.
    pub id: &'a str,
    /// `owner_agent_id`.
    pub owner_agent_id: &'a str,
    /// `label`.
    pub label: &'a str,
    /// `description`.
    pub description: &'a str,
    /// `value`.
    pub value: &'a str,
    /// `char_limit`.
    pub char_limit: i64,
    /// `block_type`.
    pub block_type: &'a str,
    /// `created_at` and `updated_at`.
    pub created_at: i64,
}

/// A new `memory_block_versions` row.
#[derive(Clone, Debug)]
pub struct NewVersion<'a> {
    /// `block_id`.
    pub block_id: &'a str,
    /// `version`.
    pub version: i64,
    /// `value`.
    pub value: &'a str,
    /// `description`.
    pub description: &'a str,
    /// `changed_by`.
    pub changed_by: &'a str,
    /// `change`.
    pub change: &'a str,
    /// `created_at`.
    pub created_at: i64,
}

/// The block `agent` sees as `label`, if any.
pub async fn seen_as(
    conn: &mut SqliteConnection,
    agent: &str,
    label: &str,
) -> sqlx::Result<Option<BlockRow>> {
    sqlx::query_as!(
        BlockRow,
        r#"SELECT b.id AS "id!", b.owner_agent_id AS "owner_agent_id!", a.label AS "label!", b.description AS "description!", b.value AS "value!", b.char_limit AS "char_limit!", b.block_type AS "block_type!", a.permission AS "permission!", b.version AS "version!", b.updated_at AS "updated_at!" FROM memory_block_access a JOIN memory_blocks b ON b.id = a.block_id WHERE a.agent_id = $1 AND a.label = $2"#,
        agent,
        label
    )
    .fetch_optional(conn)
    .await
}

/// Every block `agent` has access to, by label.
pub async fn seen_by(conn: &mut SqliteConnection, agent: &str) -> sqlx::Result<Vec<BlockRow>> {
    sqlx::query_as!(
        BlockRow,
        r#"SELECT b.id AS "id!", b.owner_agent_id AS "owner_agent_id!", a.label AS "label!", b.description AS "description!", b.value AS "value!", b.char_limit AS "char_limit!", b.block_type AS "block_type!", a.permission AS "permission!", b.version AS "version!", b.updated_at AS "updated_at!" FROM memory_block_access a JOIN memory_blocks b ON b.id = a.block_id WHERE a.agent_id = $1 ORDER BY a.label"#,
        agent
    )
    .fetch_all(conn)
    .await
}

/// The owner of the block `agent` sees as `label`, if any.
pub async fn owner_of(
    conn: &mut SqliteConnection,
    agent: &str,
    label: &str,
) -> sqlx::Result<Option<String>> {
    sqlx::query_scalar!(
        r#"SELECT b.owner_agent_id AS "owner_agent_id!" FROM memory_block_access a JOIN memory_blocks b ON b.id = a.block_id WHERE a.agent_id = $1 AND a.label = $2"#,
        agent,
        label
    )
    .fetch_optional(conn)
    .await
}

/// The id of the block `agent` sees as `label`, if any.
pub async fn block_of_label(
    conn: &mut SqliteConnection,
    agent: &str,
    label: &str,
) -> sqlx::Result<Option<String>> {
    sqlx::query_scalar!(
        r#"SELECT block_id AS "block_id!" FROM memory_block_access WHERE agent_id = $1 AND label = $2"#,
        agent,
        label
    )
    .fetch_optional(conn)
    .await
}

/// Inserts a block at version 1; the engine's unique violation (the owner's label) comes back
/// as it is.
pub async fn insert(conn: &mut SqliteConnection, block: &NewBlock<'_>) -> sqlx::Result<u64> {
    let done = sqlx::query!(
        "INSERT INTO memory_blocks (id, owner_agent_id, label, description, value, char_limit, block_type, version, created_at, updated_at) VALUES ($1, $2, $3, $4, $5, $6, $7, 1, $8, $8)",
        block.id,
        block.owner_agent_id,
        block.label,
        block.description,
        block.value,
        block.char_limit,
        block.block_type,
        block.created_at
    )
    .execute(conn)
    .await?;
    Ok(done.rows_affected())
}

/// Gives `agent` access to block `block` as `label` with `permission`; the engine's unique
/// violation (a label taken) comes back as it is.
pub async fn insert_access(
    conn: &mut SqliteConnection,
    block: &str,
    agent: &str,
    label: &str,
    permission: &str,
) -> sqlx::Result<u64> {
    let done = sqlx::query!(
        "INSERT INTO memory_block_access (block_id, agent_id, label, permission) VALUES ($1, $2, $3, $4)",
        block,
        agent,
        label,
        permission
    )
    .execute(conn)
    .await?;
    Ok(done.rows_affected())
}

/// Sets the permission `agent` has on block `block`; rows changed.
pub async fn set_permission(
    conn: &mut SqliteConnection,
    block: &str,
    agent: &str,
    permission: &str,
) -> sqlx::Result<u64> {
    let done = sqlx::query!(
        "UPDATE memory_block_access SET permission = $1 WHERE block_id = $2 AND agent_id = $3",
        permission,
        block,
        agent
    )
    .execute(conn)
    .await?;
    Ok(done.rows_affected())
}

/// Takes away the access `agent` has to block `block`; rows changed.
pub async fn delete_access(
    conn: &mut SqliteConnection,
    block: &str,
    agent: &str,
) -> sqlx::Result<u64> {
    let done = sqlx::query!(
        "DELETE FROM memory_block_access WHERE block_id = $1 AND agent_id = $2",
        block,
        agent
    )
    .execute(conn)
    .await?;
    Ok(done.rows_affected())
}

/// Records a version of a block.
pub async fn insert_version(
    conn: &mut SqliteConnection,
    version: &NewVersion<'_>,
) -> sqlx::Result<u64> {
    let done = sqlx::query!(
        "INSERT INTO memory_block_versions (block_id, version, value, description, changed_by, change, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7)",
        version.block_id,
        version.version,
        version.value,
        version.description,
        version.changed_by,
        version.change,
        version.created_at
    )
    .execute(conn)
    .await?;
    Ok(done.rows_affected())
}

/// Sets block `block`'s value at `now` and moves its version on by one, if it is at version
/// `expected`; rows changed (0: it is not).
pub async fn set_value(
    conn: &mut SqliteConnection,
    block: &str,
    value: &str,
    now: i64,
    expected: i64,
) -> sqlx::Result<u64> {
    let done = sqlx::query!(
        "UPDATE memory_blocks SET value = $1, version = version + 1, updated_at = $2 WHERE id = $3 AND version = $4",
        value,
        now,
        block,
        expected
    )
    .execute(conn)
    .await?;
    Ok(done.rows_affected())
}

/// Block `block`'s version; [`sqlx::Error::RowNotFound`] when there is no such block.
pub async fn version(conn: &mut SqliteConnection, block: &str) -> sqlx::Result<i64> {
    sqlx::query_scalar!(
        r#"SELECT version AS "version!" FROM memory_blocks WHERE id = $1"#,
        block
    )
    .fetch_one(conn)
    .await
}

/// The value block `block` had at version `version`, if that version is recorded.
pub async fn value_at(
    conn: &mut SqliteConnection,
    block: &str,
    version: i64,
) -> sqlx::Result<Option<String>> {
    sqlx::query_scalar!(
        r#"SELECT value AS "value!" FROM memory_block_versions WHERE block_id = $1 AND version = $2"#,
        block,
        version
    )
    .fetch_optional(conn)
    .await
}

/// Every version of block `block`, newest first.
pub async fn history(conn: &mut SqliteConnection, block: &str) -> sqlx::Result<Vec<VersionRow>> {
    sqlx::query_as!(
        VersionRow,
        r#"SELECT version AS "version!", value AS "value!", description AS "description!", changed_by AS "changed_by!", change AS "change!", created_at AS "created_at!" FROM memory_block_versions WHERE block_id = $1 ORDER BY version DESC"#,
        block
    )
    .fetch_all(conn)
    .await
}

/// Deletes block `block`'s history; rows deleted.
pub async fn delete_versions(conn: &mut SqliteConnection, block: &str) -> sqlx::Result<u64> {
    let done = sqlx::query!(
        "DELETE FROM memory_block_versions WHERE block_id = $1",
        block
    )
    .execute(conn)
    .await?;
    Ok(done.rows_affected())
}

/// Deletes every access row of block `block`; rows deleted.
pub async fn delete_all_access(conn: &mut SqliteConnection, block: &str) -> sqlx::Result<u64> {
    let done = sqlx::query!("DELETE FROM memory_block_access WHERE block_id = $1", block)
        .execute(conn)
        .await?;
    Ok(done.rows_affected())
}

/// Deletes block `block`'s row; rows deleted.
pub async fn delete(conn: &mut SqliteConnection, block: &str) -> sqlx::Result<u64> {
    let done = sqlx::query!("DELETE FROM memory_blocks WHERE id = $1", block)
        .execute(conn)
        .await?;
    Ok(done.rows_affected())
}
