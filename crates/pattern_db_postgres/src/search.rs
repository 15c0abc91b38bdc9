//! Statements of search storage on PostgreSQL: the change log `search_changes` (its advisory
//! lock, reads, pruning, the `delete` logs of an agent's removal and of a model reset), the
//! followers' cursors `search_consumers`, the embedding model, embedding jobs (due and locked,
//! claimed, failed, released), stored vectors `embeddings` (pages, one content's delete), the
//! messages written since a full-text follower's transaction mark, and the pages of live content
//! (messages, blocks, archival passages) the indexes are rebuilt from.
//!
//! It must never judge what it stores (model checks, text hashes, vector dimensions: the caller)
//! and never choose what is logged or when the change-log lock is taken: the caller decides, in
//! its own transaction. What stays in `pattern_db` (dynamic text): the multi-row `VALUES` inserts
//! of changes, jobs and vectors and the `IN` lists of content ids, whose length varies with the
//! call.

use sqlx::PgConnection;

use crate::{Timestamp, Uuid};

/// A `search_changes` row as PostgreSQL stores it (`UUID` ids).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChangeRow {
    /// `seq`.
    pub seq: i64,
    /// `content_type`.
    pub content_type: String,
    /// `content_id`.
    pub content_id: Uuid,
    /// `agent_id`.
    pub agent_id: Uuid,
    /// `kind`.
    pub kind: String,
}

/// An `embeddings` row as PostgreSQL stores it (without its text hash; `UUID` ids, a
/// `TIMESTAMPTZ` instant).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VectorRow {
    /// `content_type`.
    pub content_type: String,
    /// `content_id`.
    pub content_id: Uuid,
    /// `agent_id`.
    pub agent_id: Uuid,
    /// `created_at`.
    pub created_at: Timestamp,
    /// `dimension`.
    pub dimension: i64,
    /// `vector` (little-endian `f32`s).
    pub vector: Vec<u8>,
}

/// The `embedding_model` row as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModelRow {
    /// `name`.
    pub name: String,
    /// `dimension`.
    pub dimension: i64,
    /// `file_hash`.
    pub file_hash: String,
}

/// A due `embedding_jobs` row (a `UUID` content id).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DueJobRow {
    /// `content_type`.
    pub content_type: String,
    /// `content_id`.
    pub content_id: Uuid,
    /// `attempts`.
    pub attempts: i64,
    /// `text_hash`.
    pub text_hash: String,
}

// ---------------------------------------------------------------------------------------------
// change log

/// Takes the transaction advisory lock `key` (held to the end of the transaction; re-entrant).
pub async fn lock_changes(conn: &mut PgConnection, key: i64) -> sqlx::Result<()> {
    sqlx::query_scalar!(
        r#"SELECT 1 AS "locked!: i32" FROM pg_advisory_xact_lock($1)"#,
        key
    )
    .fetch_one(conn)
    .await?;
    Ok(())
}

/// Up to `limit` changes after `cursor`, in `seq` order.
pub async fn changes_after(
    conn: &mut PgConnection,
    cursor: i64,
    limit: i64,
) -> sqlx::Result<Vec<ChangeRow>> {
    sqlx::query_as!(
        ChangeRow,
        r#"SELECT seq AS "seq!", content_type AS "content_type!", content_id AS "content_id!", agent_id AS "agent_id!", kind AS "kind!" FROM search_changes WHERE seq > $1 ORDER BY seq LIMIT $2"#,
        cursor,
        limit
    )
    .fetch_all(conn)
    .await
}

/// The highest `seq` in the log (`None`: empty).
pub async fn changes_head(conn: &mut PgConnection) -> sqlx::Result<Option<i64>> {
    sqlx::query_scalar!(r#"SELECT MAX(seq) AS "head?" FROM search_changes"#)
        .fetch_one(conn)
        .await
}

/// The lowest cursor among the followers other than `mark` (`None`: no follower).
pub async fn followers_floor(conn: &mut PgConnection, mark: &str) -> sqlx::Result<Option<i64>> {
    sqlx::query_scalar!(
        r#"SELECT MIN(seq) AS "floor?" FROM search_consumers WHERE name <> $1"#,
        mark
    )
    .fetch_one(conn)
    .await
}

/// Deletes the changes up to `upto`, the newest always kept; rows deleted.
pub async fn prune_changes(conn: &mut PgConnection, upto: i64) -> sqlx::Result<u64> {
    let done = sqlx::query!(
        "DELETE FROM search_changes WHERE seq <= $1 AND seq < (SELECT MAX(seq) FROM search_changes)",
        upto
    )
    .execute(conn)
    .await?;
    Ok(done.rows_affected())
}

/// Raises cursor `name` to `seq` at `now` (created when missing, never lowered); rows changed.
pub async fn raise_cursor(
    conn: &mut PgConnection,
    name: &str,
    seq: i64,
    now: Timestamp,
) -> sqlx::Result<u64> {
    let done = sqlx::query!(
        "INSERT INTO search_consumers (name, seq, updated_at) VALUES ($1, $2, $3) ON CONFLICT (name) DO UPDATE SET seq = excluded.seq, updated_at = excluded.updated_at WHERE search_consumers.seq < excluded.seq",
        name,
        seq,
        now
    )
    .execute(conn)
    .await?;
    Ok(done.rows_affected())
}

/// Sets cursor `name` to `seq` at `now` (created when missing); rows changed.
pub async fn set_cursor(
    conn: &mut PgConnection,
    name: &str,
    seq: i64,
    now: Timestamp,
) -> sqlx::Result<u64> {
    let done = sqlx::query!(
        "INSERT INTO search_consumers (name, seq, updated_at) VALUES ($1, $2, $3) ON CONFLICT (name) DO UPDATE SET seq = excluded.seq, updated_at = excluded.updated_at",
        name,
        seq,
        now
    )
    .execute(conn)
    .await?;
    Ok(done.rows_affected())
}

/// Cursor `name`, if recorded.
pub async fn cursor(conn: &mut PgConnection, name: &str) -> sqlx::Result<Option<i64>> {
    sqlx::query_scalar!(
        r#"SELECT seq AS "seq!" FROM search_consumers WHERE name = $1"#,
        name
    )
    .fetch_optional(conn)
    .await
}

/// Logs a `delete` change for every vector of `agent`; rows inserted.
pub async fn log_vectors_deleted_of_agent(
    conn: &mut PgConnection,
    agent: Uuid,
) -> sqlx::Result<u64> {
    let done = sqlx::query!(
        "INSERT INTO search_changes (content_type, content_id, agent_id, kind) SELECT content_type, content_id, agent_id, 'delete' FROM embeddings WHERE agent_id = $1",
        agent
    )
    .execute(conn)
    .await?;
    Ok(done.rows_affected())
}

/// Logs a `delete` change for every stored vector, in content order; rows inserted.
pub async fn log_all_vectors_deleted(conn: &mut PgConnection) -> sqlx::Result<u64> {
    let done = sqlx::query!(
        "INSERT INTO search_changes (content_type, content_id, agent_id, kind) SELECT content_type, content_id, agent_id, 'delete' FROM embeddings ORDER BY content_type, content_id"
    )
    .execute(conn)
    .await?;
    Ok(done.rows_affected())
}

// ---------------------------------------------------------------------------------------------
// vectors

/// Deletes every stored vector; rows deleted.
pub async fn delete_all_vectors(conn: &mut PgConnection) -> sqlx::Result<u64> {
    let done = sqlx::query!("DELETE FROM embeddings").execute(conn).await?;
    Ok(done.rows_affected())
}

/// Deletes the vectors of the contents of one type among `content_ids`, in one statement; rows
/// deleted.
pub async fn delete_vectors(
    conn: &mut PgConnection,
    content_type: &str,
    content_ids: &[Uuid],
) -> sqlx::Result<u64> {
    let done = sqlx::query!(
        "DELETE FROM embeddings WHERE content_type = $1 AND content_id = ANY($2)",
        content_type,
        content_ids
    )
    .execute(conn)
    .await?;
    Ok(done.rows_affected())
}

/// The first `limit` vectors in content order.
pub async fn vectors_first(conn: &mut PgConnection, limit: i64) -> sqlx::Result<Vec<VectorRow>> {
    sqlx::query_as!(
        VectorRow,
        r#"SELECT content_type AS "content_type!", content_id AS "content_id!", agent_id AS "agent_id!", created_at AS "created_at!", dimension AS "dimension!", vector AS "vector!" FROM embeddings ORDER BY content_type, content_id LIMIT $1"#,
        limit
    )
    .fetch_all(conn)
    .await
}

/// Up to `limit` vectors after content (`content_type`, `content_id`), in content order.
pub async fn vectors_after(
    conn: &mut PgConnection,
    content_type: &str,
    content_id: Uuid,
    limit: i64,
) -> sqlx::Result<Vec<VectorRow>> {
    sqlx::query_as!(
        VectorRow,
        r#"SELECT content_type AS "content_type!", content_id AS "content_id!", agent_id AS "agent_id!", created_at AS "created_at!", dimension AS "dimension!", vector AS "vector!" FROM embeddings WHERE content_type > $1 OR (content_type = $1 AND content_id > $2) ORDER BY content_type, content_id LIMIT $3"#,
        content_type,
        content_id,
        limit
    )
    .fetch_all(conn)
    .await
}

// ---------------------------------------------------------------------------------------------
// embedding model and jobs

/// The registered model, if any.
pub async fn model(conn: &mut PgConnection) -> sqlx::Result<Option<ModelRow>> {
    sqlx::query_as!(
        ModelRow,
        r#"SELECT name AS "name!", dimension AS "dimension!", file_hash AS "file_hash!" FROM embedding_model WHERE singleton = 1"#
    )
    .fetch_optional(conn)
    .await
}

/// Records the model (replacing the one recorded) at `now`; rows changed.
pub async fn put_model(
    conn: &mut PgConnection,
    name: &str,
    dimension: i64,
    file_hash: &str,
    now: Timestamp,
) -> sqlx::Result<u64> {
    let done = sqlx::query!(
        "INSERT INTO embedding_model (singleton, name, dimension, file_hash, registered_at) VALUES (1, $1, $2, $3, $4) ON CONFLICT (singleton) DO UPDATE SET name = excluded.name, dimension = excluded.dimension, file_hash = excluded.file_hash, registered_at = excluded.registered_at",
        name,
        dimension,
        file_hash,
        now
    )
    .execute(conn)
    .await?;
    Ok(done.rows_affected())
}

/// Deletes every embedding job; rows deleted.
pub async fn delete_all_jobs(conn: &mut PgConnection) -> sqlx::Result<u64> {
    let done = sqlx::query!("DELETE FROM embedding_jobs")
        .execute(conn)
        .await?;
    Ok(done.rows_affected())
}

/// Deletes the embedding jobs of the contents of one type among `content_ids`, in one
/// statement; rows deleted.
pub async fn delete_jobs(
    conn: &mut PgConnection,
    content_type: &str,
    content_ids: &[Uuid],
) -> sqlx::Result<u64> {
    let done = sqlx::query!(
        "DELETE FROM embedding_jobs WHERE content_type = $1 AND content_id = ANY($2)",
        content_type,
        content_ids
    )
    .execute(conn)
    .await?;
    Ok(done.rows_affected())
}

/// How many jobs there are (claimed or not).
pub async fn count_jobs(conn: &mut PgConnection) -> sqlx::Result<i64> {
    sqlx::query_scalar!(r#"SELECT COUNT(*) AS "count!" FROM embedding_jobs"#)
        .fetch_one(conn)
        .await
}

/// Up to `limit` jobs due and unclaimed at `now`, oldest first, locked (jobs another
/// transaction has locked are skipped).
pub async fn due_jobs(
    conn: &mut PgConnection,
    now: Timestamp,
    limit: i64,
) -> sqlx::Result<Vec<DueJobRow>> {
    sqlx::query_as!(
        DueJobRow,
        r#"SELECT content_type AS "content_type!", content_id AS "content_id!", attempts AS "attempts!", text_hash AS "text_hash!" FROM embedding_jobs WHERE next_attempt_at <= $1 AND (claimed_until IS NULL OR claimed_until <= $1) ORDER BY created_at, content_type, content_id LIMIT $2 FOR UPDATE SKIP LOCKED"#,
        now,
        limit
    )
    .fetch_all(conn)
    .await
}

/// Sets the text hash of one content's job; rows changed.
pub async fn set_job_hash(
    conn: &mut PgConnection,
    text_hash: &str,
    content_type: &str,
    content_id: Uuid,
) -> sqlx::Result<u64> {
    let done = sqlx::query!(
        "UPDATE embedding_jobs SET text_hash = $1 WHERE content_type = $2 AND content_id = $3",
        text_hash,
        content_type,
        content_id
    )
    .execute(conn)
    .await?;
    Ok(done.rows_affected())
}

/// The holders other than `me` of claims unexpired at `now`.
pub async fn claim_holders(
    conn: &mut PgConnection,
    now: Timestamp,
    me: &str,
) -> sqlx::Result<Vec<String>> {
    sqlx::query_scalar!(
        r#"SELECT DISTINCT claimed_by AS "claimed_by!" FROM embedding_jobs WHERE claimed_by IS NOT NULL AND claimed_until > $1 AND claimed_by <> $2"#,
        now,
        me
    )
    .fetch_all(conn)
    .await
}

/// Frees every claim `holder` holds; rows changed.
pub async fn release_claims_of(conn: &mut PgConnection, holder: &str) -> sqlx::Result<u64> {
    let done = sqlx::query!(
        "UPDATE embedding_jobs SET claimed_until = NULL, claimed_by = NULL WHERE claimed_by = $1",
        holder
    )
    .execute(conn)
    .await?;
    Ok(done.rows_affected())
}

/// Records a failed attempt of one content's job: `error`, due again at `retry_at`, unclaimed;
/// rows changed.
pub async fn fail_job(
    conn: &mut PgConnection,
    error: &str,
    retry_at: Timestamp,
    content_type: &str,
    content_id: Uuid,
) -> sqlx::Result<u64> {
    let done = sqlx::query!(
        "UPDATE embedding_jobs SET attempts = attempts + 1, last_error = $1, next_attempt_at = $2, claimed_until = NULL, claimed_by = NULL WHERE content_type = $3 AND content_id = $4",
        error,
        retry_at,
        content_type,
        content_id
    )
    .execute(conn)
    .await?;
    Ok(done.rows_affected())
}

// ---------------------------------------------------------------------------------------------
// messages by writing transaction (the full-text index's second stream, migration 0029)

/// A message some transaction at or after a follower's mark wrote (inserted or updated).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TouchedRow {
    /// The message's id.
    pub id: Uuid,
    /// The transaction that last wrote it (`xid8`, as a number).
    pub txid: i64,
}

/// The `xmin` of the statement's snapshot (every transaction below it has ended) and every
/// message visible to it whose writing transaction is at or after `mark`, in one snapshot.
pub async fn messages_touched_since(
    conn: &mut PgConnection,
    mark: i64,
) -> sqlx::Result<(i64, Vec<TouchedRow>)> {
    let rows = sqlx::query!(
        r#"SELECT s.xmin AS "xmin!", m.id AS "id?", m.txid::text::bigint AS "txid?" FROM (SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint AS xmin) s LEFT JOIN messages m ON m.txid >= $1::bigint::text::xid8"#,
        mark
    )
    .fetch_all(conn)
    .await?;
    let xmin = rows.first().map_or(0, |r| r.xmin);
    let touched = rows
        .into_iter()
        .filter_map(|r| {
            Some(TouchedRow {
                id: r.id?,
                txid: r.txid?,
            })
        })
        .collect();
    Ok((xmin, touched))
}

/// The `xmin` of the current snapshot: every transaction below it has ended.
pub async fn snapshot_xmin(conn: &mut PgConnection) -> sqlx::Result<i64> {
    sqlx::query_scalar!(
        r#"SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint AS "xmin!""#
    )
    .fetch_one(conn)
    .await
}

/// Logs a `delete` change for every live message of `agent`; rows inserted.
pub async fn log_messages_deleted_of_agent(
    conn: &mut PgConnection,
    agent: Uuid,
) -> sqlx::Result<u64> {
    let done = sqlx::query!(
        "INSERT INTO search_changes (content_type, content_id, agent_id, kind) SELECT 'message', id, agent_id, 'delete' FROM messages WHERE agent_id = $1 AND NOT archived AND NOT deleted",
        agent
    )
    .execute(conn)
    .await?;
    Ok(done.rows_affected())
}

/// Logs a `delete` change for every archival passage of `agent`; rows inserted.
pub async fn log_archival_deleted_of_agent(
    conn: &mut PgConnection,
    agent: Uuid,
) -> sqlx::Result<u64> {
    let done = sqlx::query!(
        "INSERT INTO search_changes (content_type, content_id, agent_id, kind) SELECT 'archival', id, agent_id, 'delete' FROM archival_memories WHERE agent_id = $1",
        agent
    )
    .execute(conn)
    .await?;
    Ok(done.rows_affected())
}

/// Logs a `delete` change for every block `agent` owns; rows inserted.
pub async fn log_blocks_deleted_of_agent(
    conn: &mut PgConnection,
    agent: Uuid,
) -> sqlx::Result<u64> {
    let done = sqlx::query!(
        "INSERT INTO search_changes (content_type, content_id, agent_id, kind) SELECT 'block', id, owner_agent_id, 'delete' FROM memory_blocks WHERE owner_agent_id = $1",
        agent
    )
    .execute(conn)
    .await?;
    Ok(done.rows_affected())
}

/// Logs a `text` change for every block of another owner that `agent` can see; rows inserted.
pub async fn log_shared_blocks_changed_of_agent(
    conn: &mut PgConnection,
    agent: Uuid,
) -> sqlx::Result<u64> {
    let done = sqlx::query!(
        "INSERT INTO search_changes (content_type, content_id, agent_id, kind) SELECT 'block', b.id, b.owner_agent_id, 'text' FROM memory_block_access x JOIN memory_blocks b ON b.id = x.block_id WHERE x.agent_id = $1 AND b.owner_agent_id <> $1",
        agent
    )
    .execute(conn)
    .await?;
    Ok(done.rows_affected())
}

/// A live content row as the search indexes read it: its id, owner, time and raw text (a
/// message's content JSON, a block's value, a passage's content).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LiveContentRow {
    /// The content's id.
    pub id: Uuid,
    /// Its agent (a block's owner).
    pub agent_id: Uuid,
    /// `created_at`.
    pub created_at: Timestamp,
    /// The raw text.
    pub text: String,
}

/// The first `limit` live messages (their content JSON) after id `after`, in id order.
pub async fn live_messages_after(
    conn: &mut PgConnection,
    after: Uuid,
    limit: i64,
) -> sqlx::Result<Vec<LiveContentRow>> {
    sqlx::query_as!(
        LiveContentRow,
        r#"SELECT m.id AS "id!", m.agent_id AS "agent_id!", m.created_at AS "created_at!", m.content::text AS "text!" FROM messages m WHERE NOT m.archived AND NOT m.deleted AND m.id > $1 ORDER BY m.id LIMIT $2"#,
        after,
        limit
    )
    .fetch_all(conn)
    .await
}

/// The first `limit` memory blocks (their value) after id `after`, in id order.
pub async fn live_blocks_after(
    conn: &mut PgConnection,
    after: Uuid,
    limit: i64,
) -> sqlx::Result<Vec<LiveContentRow>> {
    sqlx::query_as!(
        LiveContentRow,
        r#"SELECT m.id AS "id!", m.owner_agent_id AS "agent_id!", m.created_at AS "created_at!", m.value AS "text!" FROM memory_blocks m WHERE 1 = 1 AND m.id > $1 ORDER BY m.id LIMIT $2"#,
        after,
        limit
    )
    .fetch_all(conn)
    .await
}

/// The first `limit` archival passages (their content) after id `after`, in id order.
pub async fn live_archival_after(
    conn: &mut PgConnection,
    after: Uuid,
    limit: i64,
) -> sqlx::Result<Vec<LiveContentRow>> {
    sqlx::query_as!(
        LiveContentRow,
        r#"SELECT m.id AS "id!", m.agent_id AS "agent_id!", m.created_at AS "created_at!", m.content AS "text!" FROM archival_memories m WHERE 1 = 1 AND m.id > $1 ORDER BY m.id LIMIT $2"#,
        after,
        limit
    )
    .fetch_all(conn)
    .await
}
