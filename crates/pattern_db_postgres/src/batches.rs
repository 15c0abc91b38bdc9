//! Statements on `batches` rows: one batch by id, an agent's newest open batch, a page of an
//! agent's batches; and a batch's state changes (a step's sequence and lease, complete, reopen,
//! lease renewal, abandon, the retry claim); a new open batch with its trigger message (through
//! migration 0024's function).
//!
//! It must never order, filter or judge what it reads beyond what the statement does. A state
//! change never checks the batch's state first: the caller has locked the agent and judged the
//! batch before it runs one.

use sqlx::PgConnection;

use crate::{Timestamp, Uuid};

/// A `batches` row as PostgreSQL stores it (`pattern_db_sqlite::BatchRow`'s fields, with a
/// `UUID` agent and `TIMESTAMPTZ` instants).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BatchRow {
    /// `id` (the position of its first message).
    pub id: i64,
    /// `agent_id`.
    pub agent_id: Uuid,
    /// `batch_type`.
    pub batch_type: String,
    /// `state`.
    pub state: String,
    /// `parent_batch`.
    pub parent_batch: Option<i64>,
    /// `run_owner`.
    pub run_owner: Option<String>,
    /// `lease_expires_at`.
    pub lease_expires_at: Option<Timestamp>,
    /// `next_sequence`.
    pub next_sequence: i64,
    /// `archived`.
    pub archived: bool,
    /// `started_at`.
    pub started_at: Timestamp,
    /// `completed_at`.
    pub completed_at: Option<Timestamp>,
    /// `continuations`.
    pub continuations: i64,
    /// `retried_at`.
    pub retried_at: Option<Timestamp>,
    /// `claim_token`.
    pub claim_token: Option<i64>,
}

/// A new open batch and its trigger (the batch's first message, sequence 0), as
/// [`open_batch`] stores them: one call, so one round trip.
#[derive(Clone, Debug)]
pub struct OpenWithTrigger<'a> {
    /// The batch's `id`, which is also its trigger's `position` and `batch_id`.
    pub id: i64,
    /// `agent_id` of both rows.
    pub agent_id: Uuid,
    /// `batch_type` of both rows.
    pub batch_type: &'a str,
    /// The batch's `parent_batch`.
    pub parent_batch: Option<i64>,
    /// The batch's `run_owner`.
    pub run_owner: Option<&'a str>,
    /// The batch's `lease_expires_at` (`None` under a run's claim).
    pub lease_expires_at: Option<Timestamp>,
    /// The batch's `claim_token`.
    pub claim_token: Option<i64>,
    /// The batch's `started_at` and the trigger's `created_at`.
    pub now: Timestamp,
    /// The trigger's `id`.
    pub message_id: Uuid,
    /// The trigger's `role`.
    pub role: &'a str,
    /// The trigger's `content` (JSON text, stored as given).
    pub content: &'a str,
    /// The trigger's `token_estimate`.
    pub token_estimate: i64,
    /// The trigger's embedding job's `text_hash`: `Some` records (or refreshes) a job for the
    /// trigger, `None` records none.
    pub job_hash: Option<&'a str>,
}

/// What [`open_batch`] found, and whether it stored the rows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OpenAttempt {
    /// Whether the agent exists (nothing else is read or written when it does not).
    pub agent_found: bool,
    /// Whether the batch and its trigger (and job) were stored.
    pub inserted: bool,
    /// The agent's highest stored message position before the insert.
    pub max_position: Option<i64>,
    /// Who holds a run claim on the agent (read only when asked; `None` otherwise).
    pub run_holder: Option<String>,
}

/// Opens the batch of `row` with its trigger through the function `pattern_open_batch`
/// (migration 0024): it locks the agent's row, then reads the agent's newest position and, when
/// `check_holder`, its run holder (each read a statement of its own, so it sees what was committed
/// before the lock was granted, even when the lock was waited for), and stores the batch (state
/// `open`, next sequence 1), its trigger (sequence 0) and the trigger's job, and bumps the agent's
/// revision, only when `row.id` is above every stored position and no holder was found;
/// otherwise it stores nothing. Either way it says what it found. One call, so one round trip,
/// and atomic on its own: autocommitted it needs no transaction around it. A unique violation
/// names the constraint it broke (`batches_one_run`: another run's batch of the agent is open).
pub async fn open_batch(
    conn: &mut PgConnection,
    row: &OpenWithTrigger<'_>,
    check_holder: bool,
) -> sqlx::Result<OpenAttempt> {
    sqlx::query_as!(
        OpenAttempt,
        r#"SELECT o.agent_found AS "agent_found!", o.inserted AS "inserted!", o.max_position AS "max_position?", o.run_holder AS "run_holder?" FROM pattern_open_batch($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14) o"#,
        row.id,
        row.agent_id,
        row.batch_type,
        row.parent_batch,
        row.run_owner,
        row.lease_expires_at,
        row.now,
        row.message_id,
        row.role,
        row.content,
        row.token_estimate,
        row.claim_token,
        check_holder,
        row.job_hash
    )
    .fetch_one(conn)
    .await
}

/// Batch `batch` of `agent`; `None` when there is no such batch (or it is another agent's).
pub async fn by_id(
    conn: &mut PgConnection,
    batch: i64,
    agent: Uuid,
) -> sqlx::Result<Option<BatchRow>> {
    sqlx::query_as!(
        BatchRow,
        "SELECT b.id, b.agent_id, b.batch_type, b.state, b.parent_batch, b.run_owner, b.lease_expires_at, b.next_sequence, b.archived, b.started_at, b.completed_at, b.continuations, b.retried_at, b.claim_token FROM batches b WHERE b.id = $1 AND b.agent_id = $2",
        batch,
        agent
    )
    .fetch_optional(conn)
    .await
}

/// `agent`'s newest open batch, if any.
pub async fn newest_open(conn: &mut PgConnection, agent: Uuid) -> sqlx::Result<Option<BatchRow>> {
    sqlx::query_as!(
        BatchRow,
        "SELECT b.id, b.agent_id, b.batch_type, b.state, b.parent_batch, b.run_owner, b.lease_expires_at, b.next_sequence, b.archived, b.started_at, b.completed_at, b.continuations, b.retried_at, b.claim_token FROM batches b WHERE b.agent_id = $1 AND b.state = 'open' ORDER BY b.id DESC LIMIT 1",
        agent
    )
    .fetch_optional(conn)
    .await
}

/// `agent`'s batches with an id below `before`, newest first, at most `limit`.
pub async fn page_before(
    conn: &mut PgConnection,
    agent: Uuid,
    before: i64,
    limit: i64,
) -> sqlx::Result<Vec<BatchRow>> {
    sqlx::query_as!(
        BatchRow,
        "SELECT b.id, b.agent_id, b.batch_type, b.state, b.parent_batch, b.run_owner, b.lease_expires_at, b.next_sequence, b.archived, b.started_at, b.completed_at, b.continuations, b.retried_at, b.claim_token FROM batches b WHERE b.agent_id = $1 AND b.id < $2 ORDER BY b.id DESC LIMIT $3",
        agent,
        before,
        limit
    )
    .fetch_all(conn)
    .await
}

/// Moves batch `batch`'s next sequence number on by `appended` messages and sets its lease
/// expiry (`None` for a batch under a run's claim); rows changed.
pub async fn advance_sequence(
    conn: &mut PgConnection,
    batch: i64,
    appended: i64,
    lease_expires_at: Option<Timestamp>,
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
pub async fn mark_complete(
    conn: &mut PgConnection,
    batch: i64,
    now: Timestamp,
) -> sqlx::Result<u64> {
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
    conn: &mut PgConnection,
    batch: i64,
    owner: &str,
    lease_expires_at: Option<Timestamp>,
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
    conn: &mut PgConnection,
    batch: i64,
    lease_expires_at: Timestamp,
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
    conn: &mut PgConnection,
    batch: i64,
    now: Timestamp,
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
    conn: &mut PgConnection,
    batch: i64,
    agent: Uuid,
    now: Timestamp,
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

/// When batch `batch` was retried, `None` if it was not; [`sqlx::Error::RowNotFound`] when there
/// is no such batch.
pub async fn retried_at(conn: &mut PgConnection, batch: i64) -> sqlx::Result<Option<Timestamp>> {
    sqlx::query_scalar!(
        r#"SELECT retried_at AS "retried_at?" FROM batches WHERE id = $1"#,
        batch
    )
    .fetch_one(conn)
    .await
}

/// Sets batch `batch`'s retry time to `at` (an import restoring a retried batch); rows changed.
pub async fn set_retried_at(
    conn: &mut PgConnection,
    batch: i64,
    at: Timestamp,
) -> sqlx::Result<u64> {
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
/// after it, oldest first.
pub async fn archivable_before(
    conn: &mut PgConnection,
    agent: Uuid,
    position: i64,
) -> sqlx::Result<Vec<i64>> {
    sqlx::query_scalar!(
        r#"SELECT b.id AS "id!" FROM batches b WHERE b.agent_id = $1 AND b.id >= (SELECT a.live_from FROM agents a WHERE a.id = $1) AND b.id < $2 AND b.state <> 'open' AND NOT b.archived AND NOT EXISTS (SELECT 1 FROM messages m WHERE m.batch_id = b.id AND m.position >= $2) ORDER BY b.id"#,
        agent,
        position
    )
    .fetch_all(conn)
    .await
}

/// `agent`'s unarchived batches from `from` through `through`, with their states, by id.
pub async fn unarchived_in_range(
    conn: &mut PgConnection,
    agent: Uuid,
    from: i64,
    through: i64,
) -> sqlx::Result<Vec<(i64, String)>> {
    let rows = sqlx::query!(
        r#"SELECT id AS "id!", state AS "state!" FROM batches WHERE agent_id = $1 AND id >= GREATEST($2, (SELECT a.live_from FROM agents a WHERE a.id = $1)) AND id <= $3 AND NOT archived ORDER BY id"#,
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
/// archived; rows changed. Run after archiving, under the agent's row lock, so the walk covers
/// the batches just archived, once.
pub async fn advance_live_from(conn: &mut PgConnection, agent: Uuid) -> sqlx::Result<u64> {
    let done = sqlx::query!(
        "UPDATE agents a SET live_from = COALESCE((SELECT b.id FROM batches b WHERE b.agent_id = $1 AND b.id >= a.live_from AND NOT b.archived ORDER BY b.id LIMIT 1), (SELECT m.position + 1 FROM messages m WHERE m.agent_id = $1 ORDER BY m.position DESC LIMIT 1), a.live_from) WHERE a.id = $1",
        agent
    )
    .execute(conn)
    .await?;
    Ok(done.rows_affected())
}
