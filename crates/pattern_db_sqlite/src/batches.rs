//! Statements on `batches` rows: one batch by id, an agent's newest open batch, a page of an
//! agent's batches, and the newest (or earlier) live batches together with their messages in one
//! statement (what `get_recent` reads); and a batch's state changes (a step's sequence and lease,
//! complete, reopen, lease renewal, abandon, the retry claim).
//!
//! It must never order, group or judge what it reads beyond what the statement does: the joined
//! reads come back as one `(batch, message)` pair per row, in no particular order, and the caller
//! groups them. A state change never checks the batch's state first: the caller has locked the
//! agent and judged the batch before it runs one.

use sqlx::SqliteConnection;

use crate::MessageRow;

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
        r#"SELECT b.id, b.agent_id, b.batch_type, b.state, b.parent_batch, b.run_owner, b.lease_expires_at, b.next_sequence, b.archived AS "archived: bool", b.started_at, b.completed_at, b.continuations, b.retried_at, b.claim_token FROM batches b WHERE b.agent_id = $1 AND b.id < $2 ORDER BY b.id DESC LIMIT $3"#,
        agent,
        before,
        limit
    )
    .fetch_all(conn)
    .await
}

/// One row of a batch joined with one of its live messages (none for a batch without any).
pub type Joined = (BatchRow, Option<MessageRow>);

/// Builds the [`Joined`] pairs from a joined statement's records, whose message columns are
/// named `m_*` and nullable (the `LEFT JOIN`). A row with a message id but a NULL in another of
/// the message's columns is a decode error, as it would be reading the column by itself.
macro_rules! joined {
    ($rows:expr) => {
        $rows
            .into_iter()
            .map(|r| {
                let batch = BatchRow {
                    id: r.id,
                    agent_id: r.agent_id,
                    batch_type: r.batch_type,
                    state: r.state,
                    parent_batch: r.parent_batch,
                    run_owner: r.run_owner,
                    lease_expires_at: r.lease_expires_at,
                    next_sequence: r.next_sequence,
                    archived: r.archived,
                    started_at: r.started_at,
                    completed_at: r.completed_at,
                    continuations: r.continuations,
                    retried_at: r.retried_at,
                    claim_token: r.claim_token,
                };
                let Some(id) = r.m_id else {
                    return Ok((batch, None));
                };
                let message = MessageRow {
                    id,
                    agent_id: present(r.m_agent_id, "m_agent_id")?,
                    position: present(r.m_position, "m_position")?,
                    batch_id: present(r.m_batch_id, "m_batch_id")?,
                    sequence_num: present(r.m_sequence_num, "m_sequence_num")?,
                    batch_type: present(r.m_batch_type, "m_batch_type")?,
                    role: present(r.m_role, "m_role")?,
                    content: present(r.m_content, "m_content")?,
                    token_estimate: present(r.m_token_estimate, "m_token_estimate")?,
                    archived: present(r.m_archived, "m_archived")?,
                    deleted: present(r.m_deleted, "m_deleted")?,
                    created_at: present(r.m_created_at, "m_created_at")?,
                };
                Ok((batch, Some(message)))
            })
            .collect::<sqlx::Result<Vec<Joined>>>()
    };
}

/// A joined message's column that its message id says is there.
fn present<T>(value: Option<T>, column: &str) -> sqlx::Result<T> {
    value.ok_or_else(|| sqlx::Error::ColumnDecode {
        index: column.to_owned(),
        source: "NULL in a stored message's NOT NULL column".into(),
    })
}

/// `agent`'s newest `limit` live (not archived) batches, each with its live (not deleted)
/// messages: one row per message, or one row without a message for a batch that has none.
pub async fn newest_with_messages(
    conn: &mut SqliteConnection,
    agent: &str,
    limit: i64,
) -> sqlx::Result<Vec<Joined>> {
    let rows = sqlx::query!(
        r#"SELECT b.id AS "id!", b.agent_id AS "agent_id!", b.batch_type AS "batch_type!", b.state AS "state!", b.parent_batch, b.run_owner, b.lease_expires_at, b.next_sequence AS "next_sequence!", b.archived AS "archived!: bool", b.started_at AS "started_at!", b.completed_at, b.continuations AS "continuations!", b.retried_at, b.claim_token, m.id AS "m_id?", m.agent_id AS "m_agent_id?", m.position AS "m_position?", m.batch_id AS "m_batch_id?", m.sequence_num AS "m_sequence_num?", m.batch_type AS "m_batch_type?", m.role AS "m_role?", m.content AS "m_content?", m.token_estimate AS "m_token_estimate?", m.archived AS "m_archived?: bool", m.deleted AS "m_deleted?: bool", m.created_at AS "m_created_at?" FROM (SELECT * FROM batches WHERE agent_id = $1 AND NOT archived ORDER BY id DESC LIMIT $2) b LEFT JOIN messages m ON m.batch_id = b.id AND NOT m.deleted"#,
        agent,
        limit
    )
    .fetch_all(conn)
    .await?;
    joined!(rows)
}

/// `agent`'s live batches with an id below `before`, oldest first in the statement's pick, at
/// most `limit`, each with its live messages (rows as in [`newest_with_messages`]).
pub async fn live_before_with_messages(
    conn: &mut SqliteConnection,
    agent: &str,
    before: i64,
    limit: i64,
) -> sqlx::Result<Vec<Joined>> {
    let rows = sqlx::query!(
        r#"SELECT b.id AS "id!", b.agent_id AS "agent_id!", b.batch_type AS "batch_type!", b.state AS "state!", b.parent_batch, b.run_owner, b.lease_expires_at, b.next_sequence AS "next_sequence!", b.archived AS "archived!: bool", b.started_at AS "started_at!", b.completed_at, b.continuations AS "continuations!", b.retried_at, b.claim_token, m.id AS "m_id?", m.agent_id AS "m_agent_id?", m.position AS "m_position?", m.batch_id AS "m_batch_id?", m.sequence_num AS "m_sequence_num?", m.batch_type AS "m_batch_type?", m.role AS "m_role?", m.content AS "m_content?", m.token_estimate AS "m_token_estimate?", m.archived AS "m_archived?: bool", m.deleted AS "m_deleted?: bool", m.created_at AS "m_created_at?" FROM (SELECT * FROM batches WHERE agent_id = $1 AND id < $2 AND NOT archived ORDER BY id LIMIT $3) b LEFT JOIN messages m ON m.batch_id = b.id AND NOT m.deleted"#,
        agent,
        before,
        limit
    )
    .fetch_all(conn)
    .await?;
    joined!(rows)
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

/// Marks batch `batch` complete at `now` (no owner, no lease); rows changed.
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
