//! Statements on `batches` rows: one batch by id, an agent's newest open batch, a page of an
//! agent's batches; and a batch's state changes (a step's sequence and lease, complete, reopen,
//! lease renewal, abandon, the retry claim); an agent's newest batches, or its live ones below a
//! position, with their messages as one JSON document.
//!
//! No index of `batches` is keyed by agent (migration 0026): a batch's id is the position of its
//! first message, so an agent's batches, in id order, are read by walking its messages'
//! `messages_by_position` and looking each position up in `batches`' primary key (`CROSS JOIN`
//! keeps that loop order); open batches have a partial index of their own.
//!
//! It must never order, filter or judge what it reads beyond what the statement does. A state
//! change never checks the batch's state first: the caller has locked the agent and judged the
//! batch before it runs one.

use sqlx::SqliteConnection;

/// A `batches` row as stored (ids and times as the integers SQLite holds).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BatchRow {
    /// `id` (the position of its first message).
    pub id: i64,
    /// `agent_id` (a UUID's text).
    pub agent_id: String,
    /// `batch_type`.
    pub batch_type: String,
    /// `state`.
    pub state: String,
    /// `parent_batch`.
    pub parent_batch: Option<i64>,
    /// `run_owner`.
    pub run_owner: Option<String>,
    /// `lease_expires_at` (milliseconds since the epoch).
    pub lease_expires_at: Option<i64>,
    /// `next_sequence`.
    pub next_sequence: i64,
    /// `archived`.
    pub archived: bool,
    /// `started_at` (milliseconds since the epoch).
    pub started_at: i64,
    /// `completed_at` (milliseconds since the epoch).
    pub completed_at: Option<i64>,
    /// `continuations`.
    pub continuations: i64,
    /// `retried_at` (milliseconds since the epoch).
    pub retried_at: Option<i64>,
    /// `claim_token`.
    pub claim_token: Option<i64>,
}

/// Batch `batch` of `agent`; `None` when there is no such batch (or it is another agent's).
pub async fn by_id(
    conn: &mut SqliteConnection,
    batch: i64,
    agent: &str,
) -> sqlx::Result<Option<BatchRow>> {
    sqlx::query_as!(
        BatchRow,
        r#"SELECT b.id, b.agent_id, b.batch_type, b.state, b.parent_batch, b.run_owner, b.lease_expires_at, b.next_sequence, b.archived AS "archived: bool", b.started_at, b.completed_at, b.continuations, b.retried_at, b.claim_token FROM batches b WHERE b.id = $1 AND b.agent_id = $2"#,
        batch,
        agent
    )
    .fetch_optional(conn)
    .await
}

/// `agent`'s newest open batch, if any.
pub async fn newest_open(
    conn: &mut SqliteConnection,
    agent: &str,
) -> sqlx::Result<Option<BatchRow>> {
    sqlx::query_as!(
        BatchRow,
        r#"SELECT b.id, b.agent_id, b.batch_type, b.state, b.parent_batch, b.run_owner, b.lease_expires_at, b.next_sequence, b.archived AS "archived: bool", b.started_at, b.completed_at, b.continuations, b.retried_at, b.claim_token FROM batches b WHERE b.agent_id = $1 AND b.state = 'open' ORDER BY b.id DESC LIMIT 1"#,
        agent
    )
    .fetch_optional(conn)
    .await
}

/// `agent`'s batches with an id below `before`, newest first, at most `limit`.
pub async fn page_before(
    conn: &mut SqliteConnection,
    agent: &str,
    before: i64,
    limit: i64,
) -> sqlx::Result<Vec<BatchRow>> {
    sqlx::query_as!(
        BatchRow,
        r#"SELECT b.id, b.agent_id, b.batch_type, b.state, b.parent_batch, b.run_owner, b.lease_expires_at, b.next_sequence, b.archived AS "archived: bool", b.started_at, b.completed_at, b.continuations, b.retried_at, b.claim_token FROM messages f CROSS JOIN batches b ON b.id = f.position WHERE f.agent = (SELECT n.num FROM agents n WHERE n.id = $1) AND f.position < $2 AND b.agent_id = $1 ORDER BY f.position DESC LIMIT $3 + 0"#,
        agent,
        before,
        limit
    )
    .fetch_all(conn)
    .await
}

/// `agent`'s revision and its newest `limit` batches that are not archived, with their live
/// messages, read by one statement (so from one snapshot, in one round trip to the connection's
/// thread); `None` for an unknown agent. The batches come as one JSON array (one value: sqlx
/// copies and hands over every column of every row it returns, which made most of the time of
/// reading them as rows). Each element holds the batch's columns (`batches`' order, 14), then
/// the message's `id, position, sequence_num, role, content, token_estimate, archived,
/// created_at, batch_type, compressed` (role and batch type by name; a compressed content as
/// the hex of its bytes, JSON holding no bytes, and `compressed` 1:
/// [`crate::messages::text_from_hex`]; `null`s for a batch without a message); `[]` when there
/// is none. When the revision equals `known` (the revision of an answer the caller holds) the
/// document is not built and comes back `None`: one round trip decides whether the caller's
/// answer is current and, when it is not, brings the new one.
///
/// `LIMIT $2 + 0`, not the bare parameter: SQLite (3.51) compiles a bare bound `LIMIT` as the constant it
/// was bound to when prepared and marks the statement expired whenever that parameter is bound
/// again, so every call compiled the whole statement anew (two fifths of its time in SQLite).
pub async fn revision_and_newest_json(
    conn: &mut SqliteConnection,
    agent: &str,
    limit: i64,
    known: Option<i64>,
) -> sqlx::Result<Option<(i64, Option<String>)>> {
    let row = sqlx::query!(
        r#"SELECT a.revision AS "revision!: i64", CASE WHEN a.revision = $3 THEN NULL ELSE (SELECT json_group_array(json_array(b.id, b.agent_id, b.batch_type, b.state, b.parent_batch, b.run_owner, b.lease_expires_at, b.next_sequence, b.archived, b.started_at, b.completed_at, b.continuations, b.retried_at, b.claim_token, hex(m.id), m.position, m.sequence_num, CASE m.role WHEN 0 THEN 'system' WHEN 1 THEN 'user' WHEN 2 THEN 'assistant' WHEN 3 THEN 'tool' END, CASE WHEN typeof(m.content) = 'blob' THEN hex(m.content) ELSE m.content END, m.token_estimate, m.archived, m.created_at, CASE m.batch_type WHEN 0 THEN 'user_request' WHEN 1 THEN 'agent_to_agent' WHEN 2 THEN 'system_trigger' WHEN 3 THEN 'continuation' END, typeof(m.content) = 'blob')) FROM (SELECT b.* FROM messages f CROSS JOIN batches b ON b.id = f.position WHERE f.agent = a.num AND b.agent_id = $1 AND NOT b.archived ORDER BY f.position DESC LIMIT $2 + 0) b LEFT JOIN messages m ON m.batch_id = b.id AND NOT m.deleted) END AS "doc?: String" FROM agents a WHERE a.id = $1"#,
        agent,
        limit,
        known
    )
    .fetch_optional(conn)
    .await?;
    Ok(row.map(|r| (r.revision, r.doc)))
}

/// `agent`'s oldest `limit` unarchived batches below `before`, with their live messages, as one
/// JSON document of the same shape as [`revision_and_newest_json`]'s. The walk starts at the
/// agent's `live_from` (every batch below it is archived, migration 0027).
pub async fn live_before_json(
    conn: &mut SqliteConnection,
    agent: &str,
    before: i64,
    limit: i64,
) -> sqlx::Result<String> {
    sqlx::query_scalar!(
        r#"SELECT json_group_array(json_array(b.id, b.agent_id, b.batch_type, b.state, b.parent_batch, b.run_owner, b.lease_expires_at, b.next_sequence, b.archived, b.started_at, b.completed_at, b.continuations, b.retried_at, b.claim_token, hex(m.id), m.position, m.sequence_num, CASE m.role WHEN 0 THEN 'system' WHEN 1 THEN 'user' WHEN 2 THEN 'assistant' WHEN 3 THEN 'tool' END, CASE WHEN typeof(m.content) = 'blob' THEN hex(m.content) ELSE m.content END, m.token_estimate, m.archived, m.created_at, CASE m.batch_type WHEN 0 THEN 'user_request' WHEN 1 THEN 'agent_to_agent' WHEN 2 THEN 'system_trigger' WHEN 3 THEN 'continuation' END, typeof(m.content) = 'blob')) AS "doc!: String" FROM (SELECT b.* FROM messages f CROSS JOIN batches b ON b.id = f.position WHERE f.agent = (SELECT n.num FROM agents n WHERE n.id = $1) AND f.position >= (SELECT a.live_from FROM agents a WHERE a.id = $1) AND f.position < $2 AND b.agent_id = $1 AND NOT b.archived ORDER BY f.position LIMIT $3 + 0) b LEFT JOIN messages m ON m.batch_id = b.id AND NOT m.deleted"#,
        agent,
        before,
        limit
    )
    .fetch_one(conn)
    .await
}

/// Moves batch `batch`'s next sequence number on by `appended` messages and sets its lease
/// expiry (`None` for a batch under a run's claim); rows changed.
pub async fn advance_sequence(
    conn: &mut SqliteConnection,
    batch: i64,
    appended: i64,
    lease_expires_at: Option<i64>,
) -> sqlx::Result<u64> {
    let done = sqlx::query!(
        "UPDATE batches SET next_sequence = next_sequence + $1, lease_expires_at = $2 WHERE id = $3",
        appended,
        lease_expires_at,
        batch
    )
    .execute(conn)
    .await?;
    Ok(done.rows_affected())
}

/// Marks batch `batch` complete at `now` (no owner, no lease); rows changed. `pattern_db`'s
/// `complete_batch` returns the row it read before with these same changes, not a fresh read.
pub async fn mark_complete(conn: &mut SqliteConnection, batch: i64, now: i64) -> sqlx::Result<u64> {
    let done = sqlx::query!(
        "UPDATE batches SET state = 'complete', completed_at = $1, run_owner = NULL, lease_expires_at = NULL WHERE id = $2",
        now,
        batch
    )
    .execute(conn)
    .await?;
    Ok(done.rows_affected())
}

/// Opens batch `batch` again for `owner` (one more continuation) with lease expiry
/// `lease_expires_at`; rows changed. The engine's unique violation (another open batch of the
/// run) comes back as it is.
pub async fn reopen(
    conn: &mut SqliteConnection,
    batch: i64,
    owner: &str,
    lease_expires_at: Option<i64>,
) -> sqlx::Result<u64> {
    let done = sqlx::query!(
        "UPDATE batches SET state = 'open', completed_at = NULL, run_owner = $1, lease_expires_at = $2, continuations = continuations + 1 WHERE id = $3",
        owner,
        lease_expires_at,
        batch
    )
    .execute(conn)
    .await?;
    Ok(done.rows_affected())
}

/// Sets batch `batch`'s lease expiry and owner; rows changed.
pub async fn renew_lease(
    conn: &mut SqliteConnection,
    batch: i64,
    lease_expires_at: i64,
    owner: &str,
) -> sqlx::Result<u64> {
    let done = sqlx::query!(
        "UPDATE batches SET lease_expires_at = $1, run_owner = $2 WHERE id = $3",
        lease_expires_at,
        owner,
        batch
    )
    .execute(conn)
    .await?;
    Ok(done.rows_affected())
}

/// Marks batch `batch` abandoned at `now`; rows changed.
pub async fn mark_abandoned(
    conn: &mut SqliteConnection,
    batch: i64,
    now: i64,
) -> sqlx::Result<u64> {
    let done = sqlx::query!(
        "UPDATE batches SET state = 'abandoned', completed_at = $1 WHERE id = $2",
        now,
        batch
    )
    .execute(conn)
    .await?;
    Ok(done.rows_affected())
}

/// Marks abandoned batch `batch` of `agent` retried at `now` if it was not retried yet; rows
/// changed (0: not `agent`'s, not abandoned, or retried already; the caller finds out which).
pub async fn claim_retry(
    conn: &mut SqliteConnection,
    batch: i64,
    agent: &str,
    now: i64,
) -> sqlx::Result<u64> {
    let done = sqlx::query!(
        "UPDATE batches SET retried_at = $1 WHERE id = $2 AND agent_id = $3 AND state = 'abandoned' AND retried_at IS NULL",
        now,
        batch,
        agent
    )
    .execute(conn)
    .await?;
    Ok(done.rows_affected())
}

/// When batch `batch` was retried (milliseconds since the epoch), `None` if it was not;
/// [`sqlx::Error::RowNotFound`] when there is no such batch.
pub async fn retried_at(conn: &mut SqliteConnection, batch: i64) -> sqlx::Result<Option<i64>> {
    sqlx::query_scalar!(
        r#"SELECT retried_at AS "retried_at?: i64" FROM batches WHERE id = $1"#,
        batch
    )
    .fetch_one(conn)
    .await
}

/// Sets batch `batch`'s retry time to `at` (an import restoring a retried batch); rows changed.
pub async fn set_retried_at(conn: &mut SqliteConnection, batch: i64, at: i64) -> sqlx::Result<u64> {
    let done = sqlx::query!(
        "UPDATE batches SET retried_at = $1 WHERE id = $2",
        at,
        batch
    )
    .execute(conn)
    .await?;
    Ok(done.rows_affected())
}

/// The ids of `agent`'s closed, unarchived batches below `position` that hold no message at or
/// after it, oldest first (from the agent's `live_from`: every batch below it is archived).
pub async fn archivable_before(
    conn: &mut SqliteConnection,
    agent: &str,
    position: i64,
) -> sqlx::Result<Vec<i64>> {
    sqlx::query_scalar!(
        r#"SELECT b.id AS "id!: i64" FROM messages f CROSS JOIN batches b ON b.id = f.position WHERE f.agent = (SELECT n.num FROM agents n WHERE n.id = $1) AND f.position >= (SELECT a.live_from FROM agents a WHERE a.id = $1) AND f.position < $2 AND b.agent_id = $1 AND b.state <> 'open' AND NOT b.archived AND NOT EXISTS (SELECT 1 FROM messages m WHERE m.batch_id = b.id AND m.position >= $2) ORDER BY f.position"#,
        agent,
        position
    )
    .fetch_all(conn)
    .await
}

/// `agent`'s unarchived batches from `from` through `through`, with their states, by id.
pub async fn unarchived_in_range(
    conn: &mut SqliteConnection,
    agent: &str,
    from: i64,
    through: i64,
) -> sqlx::Result<Vec<(i64, String)>> {
    let rows = sqlx::query!(
        r#"SELECT b.id AS "id!: i64", b.state AS "state!" FROM messages f CROSS JOIN batches b ON b.id = f.position WHERE f.agent = (SELECT n.num FROM agents n WHERE n.id = $1) AND f.position >= MAX($2, (SELECT a.live_from FROM agents a WHERE a.id = $1)) AND f.position <= $3 AND b.agent_id = $1 AND NOT b.archived ORDER BY f.position"#,
        agent,
        from,
        through
    )
    .fetch_all(conn)
    .await?;
    Ok(rows.into_iter().map(|r| (r.id, r.state)).collect())
}

/// Moves `agent`'s `live_from` (every batch below it is archived) up to its oldest unarchived
/// batch at or above the current mark, or past its newest message when every batch is
/// archived; rows changed. Run after archiving, under the agent's write lock, so the walk covers
/// the batches just archived, once.
pub async fn advance_live_from(conn: &mut SqliteConnection, agent: &str) -> sqlx::Result<u64> {
    let done = sqlx::query!(
        "UPDATE agents SET live_from = COALESCE((SELECT b.id FROM messages f CROSS JOIN batches b ON b.id = f.position WHERE f.agent = agents.num AND f.position >= agents.live_from AND b.agent_id = $1 AND NOT b.archived ORDER BY f.position LIMIT 1), (SELECT m.position + 1 FROM messages m WHERE m.agent = agents.num ORDER BY m.position DESC LIMIT 1), live_from) WHERE id = $1",
        agent
    )
    .execute(conn)
    .await?;
    Ok(done.rows_affected())
}
