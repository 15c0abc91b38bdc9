//! Statements of search storage: the change log `search_changes` (reads, pruning, the bulk
//! `delete` logs of an agent's removal and of a model reset), the followers' cursors
//! `search_consumers`, the embedding model, embedding jobs (due, claimed, failed, released) and
//! stored vectors `embeddings` (pages, one content's delete), and the pages of live content
//! (messages, blocks, archival passages) the indexes are rebuilt from.
//!
//! It must never judge what it stores (model checks, text hashes, vector dimensions: the caller)
//! and never choose what is logged: the caller decides which changes a write appends, in its own
//! transaction. What stays in `pattern_db` (dynamic text): the multi-row `VALUES` inserts of
//! changes, jobs and vectors, and the `IN` lists of content ids, whose length varies with the
//! call, and the change a message insert joins to its `sql::Script`.

use sqlx::SqliteConnection;

/// A `search_changes` row as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChangeRow {
    /// `seq`.
    pub seq: i64,
    /// `content_type`.
    pub content_type: String,
    /// `content_id` (a UUID's text).
    pub content_id: String,
    /// `agent_id` (a UUID's text).
    pub agent_id: String,
    /// `kind`.
    pub kind: String,
}

/// An `embeddings` row as stored (without its text hash).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VectorRow {
    /// `content_type`.
    pub content_type: String,
    /// `content_id` (a UUID's text).
    pub content_id: String,
    /// `agent_id` (a UUID's text).
    pub agent_id: String,
    /// `created_at` (milliseconds since the epoch).
    pub created_at: i64,
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

/// A due `embedding_jobs` row.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DueJobRow {
    /// `content_type`.
    pub content_type: String,
    /// `content_id` (a UUID's text).
    pub content_id: String,
    /// `attempts`.
    pub attempts: i64,
    /// `text_hash`.
    pub text_hash: String,
}

// ---------------------------------------------------------------------------------------------
// change log

/// The changes of the first `entries` log entries after `cursor`, in `seq` order, at most
/// `changes` of them: a `messages` entry (a span of an agent's positions) becomes a `text`
/// change of each message it covers, all with the entry's `seq` (in position order), or, when
/// it covers none, one `delete` of no content (`content_id` empty), which a follower applies as
/// nothing. When `changes` rows come back, the last entry's may be cut short.
pub async fn changes_after(
    conn: &mut SqliteConnection,
    cursor: i64,
    entries: i64,
    changes: i64,
) -> sqlx::Result<Vec<ChangeRow>> {
    sqlx::query_as!(
        ChangeRow,
        r#"WITH page AS (SELECT seq, content_type, content_id, agent_id, kind, first_position, last_position FROM search_changes WHERE seq > $1 ORDER BY seq LIMIT $2 + 0) SELECT p.seq AS "seq!: i64", p.content_type AS "content_type!", CASE WHEN m.id IS NULL THEN p.content_id ELSE lower(substr(hex(m.id), 1, 8) || '-' || substr(hex(m.id), 9, 4) || '-' || substr(hex(m.id), 13, 4) || '-' || substr(hex(m.id), 17, 4) || '-' || substr(hex(m.id), 21)) END AS "content_id!: String", p.agent_id AS "agent_id!", CASE WHEN p.kind <> 'messages' THEN p.kind WHEN m.id IS NULL THEN 'delete' ELSE 'text' END AS "kind!: String" FROM page p LEFT JOIN agents n ON p.kind = 'messages' AND n.id = p.agent_id LEFT JOIN messages m ON p.kind = 'messages' AND m.agent = n.num AND m.position BETWEEN p.first_position AND p.last_position ORDER BY p.seq, m.position LIMIT $3 + 0"#,
        cursor,
        entries,
        changes
    )
    .fetch_all(conn)
    .await
}

/// The highest `seq` in the log (`None`: empty).
pub async fn changes_head(conn: &mut SqliteConnection) -> sqlx::Result<Option<i64>> {
    sqlx::query_scalar!(r#"SELECT MAX(seq) AS "head?: i64" FROM search_changes"#)
        .fetch_one(conn)
        .await
}

/// The lowest cursor among the followers other than `mark` (`None`: no follower).
pub async fn followers_floor(conn: &mut SqliteConnection, mark: &str) -> sqlx::Result<Option<i64>> {
    sqlx::query_scalar!(
        r#"SELECT MIN(seq) AS "floor?: i64" FROM search_consumers WHERE name <> $1"#,
        mark
    )
    .fetch_one(conn)
    .await
}

/// Deletes the changes up to `upto`, the newest always kept; rows deleted.
pub async fn prune_changes(conn: &mut SqliteConnection, upto: i64) -> sqlx::Result<u64> {
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
    conn: &mut SqliteConnection,
    name: &str,
    seq: i64,
    now: i64,
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
    conn: &mut SqliteConnection,
    name: &str,
    seq: i64,
    now: i64,
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
pub async fn cursor(conn: &mut SqliteConnection, name: &str) -> sqlx::Result<Option<i64>> {
    sqlx::query_scalar!(
        r#"SELECT seq AS "seq!: i64" FROM search_consumers WHERE name = $1"#,
        name
    )
    .fetch_optional(conn)
    .await
}

/// Logs a `delete` change for every vector of `agent`; rows inserted.
pub async fn log_vectors_deleted_of_agent(
    conn: &mut SqliteConnection,
    agent: &str,
) -> sqlx::Result<u64> {
    let done = sqlx::query!(
        "INSERT INTO search_changes (content_type, content_id, agent_id, kind) SELECT content_type, content_id, agent_id, 'delete' FROM embeddings WHERE agent_id = $1",
        agent
    )
    .execute(conn)
    .await?;
    Ok(done.rows_affected())
}

/// Logs a `delete` change for every live message of `agent`; rows inserted.
pub async fn log_messages_deleted_of_agent(
    conn: &mut SqliteConnection,
    agent: &str,
) -> sqlx::Result<u64> {
    let done = sqlx::query!(
        "INSERT INTO search_changes (content_type, content_id, agent_id, kind) SELECT 'message', lower(substr(hex(m.id), 1, 8) || '-' || substr(hex(m.id), 9, 4) || '-' || substr(hex(m.id), 13, 4) || '-' || substr(hex(m.id), 17, 4) || '-' || substr(hex(m.id), 21)), a.id, 'delete' FROM agents a JOIN messages m ON m.agent = a.num WHERE a.id = $1 AND NOT m.archived AND NOT m.deleted",
        agent
    )
    .execute(conn)
    .await?;
    Ok(done.rows_affected())
}

/// Logs a `delete` change for every archival passage of `agent`; rows inserted.
pub async fn log_archival_deleted_of_agent(
    conn: &mut SqliteConnection,
    agent: &str,
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
    conn: &mut SqliteConnection,
    agent: &str,
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
    conn: &mut SqliteConnection,
    agent: &str,
) -> sqlx::Result<u64> {
    let done = sqlx::query!(
        "INSERT INTO search_changes (content_type, content_id, agent_id, kind) SELECT 'block', b.id, b.owner_agent_id, 'text' FROM memory_block_access x JOIN memory_blocks b ON b.id = x.block_id WHERE x.agent_id = $1 AND b.owner_agent_id <> $1",
        agent
    )
    .execute(conn)
    .await?;
    Ok(done.rows_affected())
}

/// Logs a `delete` change for every stored vector, in content order; rows inserted.
pub async fn log_all_vectors_deleted(conn: &mut SqliteConnection) -> sqlx::Result<u64> {
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
pub async fn delete_all_vectors(conn: &mut SqliteConnection) -> sqlx::Result<u64> {
    let done = sqlx::query!("DELETE FROM embeddings").execute(conn).await?;
    Ok(done.rows_affected())
}

/// Deletes the vectors of the contents of one type whose ids `content_ids` lists (a JSON array
/// of ids), in one statement; rows deleted.
pub async fn delete_vectors(
    conn: &mut SqliteConnection,
    content_type: &str,
    content_ids: &str,
) -> sqlx::Result<u64> {
    let done = sqlx::query!(
        "DELETE FROM embeddings WHERE content_type = $1 \
         AND content_id IN (SELECT value FROM json_each($2))",
        content_type,
        content_ids
    )
    .execute(conn)
    .await?;
    Ok(done.rows_affected())
}

/// The first `limit` vectors in content order.
pub async fn vectors_first(
    conn: &mut SqliteConnection,
    limit: i64,
) -> sqlx::Result<Vec<VectorRow>> {
    sqlx::query_as!(
        VectorRow,
        r#"SELECT content_type AS "content_type!", content_id AS "content_id!", agent_id AS "agent_id!", created_at AS "created_at!", dimension AS "dimension!", vector AS "vector!" FROM embeddings ORDER BY content_type, content_id LIMIT $1 + 0"#,
        limit
    )
    .fetch_all(conn)
    .await
}

/// Up to `limit` vectors after content (`content_type`, `content_id`), in content order.
pub async fn vectors_after(
    conn: &mut SqliteConnection,
    content_type: &str,
    content_id: &str,
    limit: i64,
) -> sqlx::Result<Vec<VectorRow>> {
    sqlx::query_as!(
        VectorRow,
        r#"SELECT content_type AS "content_type!", content_id AS "content_id!", agent_id AS "agent_id!", created_at AS "created_at!", dimension AS "dimension!", vector AS "vector!" FROM embeddings WHERE content_type > $1 OR (content_type = $1 AND content_id > $2) ORDER BY content_type, content_id LIMIT $3 + 0"#,
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
pub async fn model(conn: &mut SqliteConnection) -> sqlx::Result<Option<ModelRow>> {
    sqlx::query_as!(
        ModelRow,
        r#"SELECT name AS "name!", dimension AS "dimension!", file_hash AS "file_hash!" FROM embedding_model WHERE singleton = 1"#
    )
    .fetch_optional(conn)
    .await
}

/// Records the model (replacing the one recorded) at `now`; rows changed.
pub async fn put_model(
    conn: &mut SqliteConnection,
    name: &str,
    dimension: i64,
    file_hash: &str,
    now: i64,
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
pub async fn delete_all_jobs(conn: &mut SqliteConnection) -> sqlx::Result<u64> {
    let done = sqlx::query!("DELETE FROM embedding_jobs")
        .execute(conn)
        .await?;
    Ok(done.rows_affected())
}

/// Deletes the embedding jobs of the contents of one type whose ids `content_ids` lists (a JSON
/// array of ids), in one statement; rows deleted.
pub async fn delete_jobs(
    conn: &mut SqliteConnection,
    content_type: &str,
    content_ids: &str,
) -> sqlx::Result<u64> {
    let done = sqlx::query!(
        "DELETE FROM embedding_jobs WHERE content_type = $1 \
         AND content_id IN (SELECT value FROM json_each($2))",
        content_type,
        content_ids
    )
    .execute(conn)
    .await?;
    Ok(done.rows_affected())
}

/// How many jobs there are (claimed or not).
pub async fn count_jobs(conn: &mut SqliteConnection) -> sqlx::Result<i64> {
    sqlx::query_scalar!(r#"SELECT COUNT(*) AS "count!: i64" FROM embedding_jobs"#)
        .fetch_one(conn)
        .await
}

/// Up to `limit` jobs due and unclaimed at `now`, oldest first.
pub async fn due_jobs(
    conn: &mut SqliteConnection,
    now: i64,
    limit: i64,
) -> sqlx::Result<Vec<DueJobRow>> {
    sqlx::query_as!(
        DueJobRow,
        r#"SELECT content_type AS "content_type!", content_id AS "content_id!", attempts AS "attempts!", text_hash AS "text_hash!" FROM embedding_jobs WHERE next_attempt_at <= $1 AND (claimed_until IS NULL OR claimed_until <= $1) ORDER BY created_at, content_type, content_id LIMIT $2 + 0"#,
        now,
        limit
    )
    .fetch_all(conn)
    .await
}

/// Sets the text hash of one content's job; rows changed.
pub async fn set_job_hash(
    conn: &mut SqliteConnection,
    text_hash: &str,
    content_type: &str,
    content_id: &str,
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
    conn: &mut SqliteConnection,
    now: i64,
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
pub async fn release_claims_of(conn: &mut SqliteConnection, holder: &str) -> sqlx::Result<u64> {
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
    conn: &mut SqliteConnection,
    error: &str,
    retry_at: i64,
    content_type: &str,
    content_id: &str,
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

/// A live content row as the search indexes read it: its id, owner, time and raw text (a
/// message's content JSON, a block's value, a passage's content).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LiveContentRow {
    /// The content's id (a UUID's text).
    pub id: String,
    /// Its agent (a block's owner) (a UUID's text).
    pub agent_id: String,
    /// `created_at` (milliseconds since the epoch).
    pub created_at: i64,
    /// The raw text (a message's as its writer stored it: [`crate::messages::StoredText`]).
    pub text: String,
}

/// [`LiveContentRow`] as a message's statement reads it.
struct LiveMessageRow {
    id: String,
    agent_id: String,
    created_at: i64,
    text: crate::messages::StoredText,
}

/// The first `limit` live messages (their stored content) after id `after` (a UUID's 16 bytes,
/// or none for the start: every id sorts after the empty blob), in id order.
pub async fn live_messages_after(
    conn: &mut SqliteConnection,
    after: &[u8],
    limit: i64,
) -> sqlx::Result<Vec<LiveContentRow>> {
    let rows = sqlx::query_as!(
        LiveMessageRow,
        r#"SELECT lower(substr(hex(m.id), 1, 8) || '-' || substr(hex(m.id), 9, 4) || '-' || substr(hex(m.id), 13, 4) || '-' || substr(hex(m.id), 17, 4) || '-' || substr(hex(m.id), 21)) AS "id!: String", a.id AS "agent_id!", m.created_at AS "created_at!: i64", m.content AS "text!: crate::messages::StoredText" FROM messages m JOIN agents a ON a.num = m.agent WHERE NOT m.archived AND NOT m.deleted AND m.id > $1 ORDER BY m.id LIMIT $2 + 0"#,
        after,
        limit
    )
    .fetch_all(conn)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| LiveContentRow {
            id: r.id,
            agent_id: r.agent_id,
            created_at: r.created_at,
            text: r.text.into_string(),
        })
        .collect())
}

/// The first `limit` memory blocks (their value) after id `after`, in id order.
pub async fn live_blocks_after(
    conn: &mut SqliteConnection,
    after: &str,
    limit: i64,
) -> sqlx::Result<Vec<LiveContentRow>> {
    sqlx::query_as!(
        LiveContentRow,
        r#"SELECT m.id AS "id!", m.owner_agent_id AS "agent_id!", m.created_at AS "created_at!: i64", m.value AS "text!" FROM memory_blocks m WHERE 1 = 1 AND m.id > $1 ORDER BY m.id LIMIT $2 + 0"#,
        after,
        limit
    )
    .fetch_all(conn)
    .await
}

/// The first `limit` archival passages (their content) after id `after`, in id order.
pub async fn live_archival_after(
    conn: &mut SqliteConnection,
    after: &str,
    limit: i64,
) -> sqlx::Result<Vec<LiveContentRow>> {
    sqlx::query_as!(
        LiveContentRow,
        r#"SELECT m.id AS "id!", m.agent_id AS "agent_id!", m.created_at AS "created_at!: i64", m.content AS "text!" FROM archival_memories m WHERE 1 = 1 AND m.id > $1 ORDER BY m.id LIMIT $2 + 0"#,
        after,
        limit
    )
    .fetch_all(conn)
    .await
}
