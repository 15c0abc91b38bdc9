//! Statements on `approvals` rows: a request's insert, the running turn it belongs to, its
//! decision (in an organization or not), its expiry, the abandonment of a batch's pending
//! requests, a request by id (in an organization or not), and the newest requests (of an
//! organization or all, in one state or any: four fixed statements).
//!
//! It must never decide who may answer or whether an answer came too late: a conditional update
//! that matches no row comes back as zero rows, and the caller reads the request to say why.

use sqlx::SqliteConnection;

/// An `approvals` row as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApprovalRow {
    /// `id`.
    pub id: i64,
    /// `organization_id` (a UUID's text).
    pub organization_id: Option<String>,
    /// `agent_id` (a UUID's text).
    pub agent_id: String,
    /// `batch_id`.
    pub batch_id: Option<i64>,
    /// `turn_id` (a UUID's text).
    pub turn_id: Option<String>,
    /// `tool`.
    pub tool: String,
    /// `call_id`.
    pub call_id: Option<String>,
    /// `input` (JSON text).
    pub input: String,
    /// `reason`.
    pub reason: String,
    /// `requested_at` (milliseconds since the epoch).
    pub requested_at: i64,
    /// `deadline` (milliseconds since the epoch).
    pub deadline: i64,
    /// `state`.
    pub state: String,
    /// `decided_at` (milliseconds since the epoch).
    pub decided_at: Option<i64>,
    /// `decided_by`.
    pub decided_by: Option<String>,
    /// `denial_reason`.
    pub denial_reason: Option<String>,
}

/// A new pending `approvals` row.
#[derive(Clone, Debug)]
pub struct NewApproval<'a> {
    /// `id`.
    pub id: i64,
    /// `organization_id`.
    pub organization_id: Option<&'a str>,
    /// `agent_id`.
    pub agent_id: &'a str,
    /// `batch_id`.
    pub batch_id: Option<i64>,
    /// `turn_id`.
    pub turn_id: Option<&'a str>,
    /// `tool`.
    pub tool: &'a str,
    /// `call_id`.
    pub call_id: Option<&'a str>,
    /// `input` (JSON text).
    pub input: &'a str,
    /// `reason`.
    pub reason: &'a str,
    /// `requested_at`.
    pub requested_at: i64,
    /// `deadline`.
    pub deadline: i64,
}

/// What a decision sets.
#[derive(Clone, Debug)]
pub struct Decision<'a> {
    /// `state`.
    pub state: &'a str,
    /// `decided_at`.
    pub decided_at: i64,
    /// `decided_by`.
    pub decided_by: &'a str,
    /// `denial_reason`.
    pub denial_reason: Option<&'a str>,
}

/// The newest running turn of `agent` on batch `batch`, if any.
pub async fn running_turn(
    conn: &mut SqliteConnection,
    batch: i64,
    agent: &str,
) -> sqlx::Result<Option<String>> {
    sqlx::query_scalar!(
        r#"SELECT id AS "id!" FROM turns WHERE batch_id = $1 AND agent_id = $2 AND state = 'running' ORDER BY created_at DESC LIMIT 1"#,
        batch,
        agent
    )
    .fetch_optional(conn)
    .await
}

/// Inserts a pending request; rows changed.
pub async fn insert(conn: &mut SqliteConnection, new: &NewApproval<'_>) -> sqlx::Result<u64> {
    let done = sqlx::query!(
        "INSERT INTO approvals (id, organization_id, agent_id, batch_id, turn_id, tool, call_id, input, reason, requested_at, deadline, state) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, 'pending')",
        new.id,
        new.organization_id,
        new.agent_id,
        new.batch_id,
        new.turn_id,
        new.tool,
        new.call_id,
        new.input,
        new.reason,
        new.requested_at,
        new.deadline
    )
    .execute(conn)
    .await?;
    Ok(done.rows_affected())
}

/// Decides pending request `id`; rows changed (0: not pending, or unknown).
pub async fn decide(
    conn: &mut SqliteConnection,
    id: i64,
    decision: &Decision<'_>,
) -> sqlx::Result<u64> {
    let done = sqlx::query!(
        "UPDATE approvals SET state = $1, decided_at = $2, decided_by = $3, denial_reason = $4 WHERE id = $5 AND state = 'pending'",
        decision.state,
        decision.decided_at,
        decision.decided_by,
        decision.denial_reason,
        id
    )
    .execute(conn)
    .await?;
    Ok(done.rows_affected())
}

/// [`decide`] for a request of organization `org` only.
pub async fn decide_in(
    conn: &mut SqliteConnection,
    id: i64,
    decision: &Decision<'_>,
    org: &str,
) -> sqlx::Result<u64> {
    let done = sqlx::query!(
        "UPDATE approvals SET state = $1, decided_at = $2, decided_by = $3, denial_reason = $4 WHERE id = $5 AND state = 'pending' AND organization_id = $6",
        decision.state,
        decision.decided_at,
        decision.decided_by,
        decision.denial_reason,
        id,
        org
    )
    .execute(conn)
    .await?;
    Ok(done.rows_affected())
}

/// Marks pending request `id` timed out at `now`; rows changed.
pub async fn expire(conn: &mut SqliteConnection, id: i64, now: i64) -> sqlx::Result<u64> {
    let done = sqlx::query!(
        "UPDATE approvals SET state = 'timed_out', decided_at = $1, decided_by = 'timeout', denial_reason = 'no answer before the deadline' WHERE id = $2 AND state = 'pending'",
        now,
        id
    )
    .execute(conn)
    .await?;
    Ok(done.rows_affected())
}

/// The ids of batch `batch`'s pending requests.
pub async fn pending_of_batch(conn: &mut SqliteConnection, batch: i64) -> sqlx::Result<Vec<i64>> {
    sqlx::query_scalar!(
        r#"SELECT id AS "id!" FROM approvals WHERE batch_id = $1 AND state = 'pending'"#,
        batch
    )
    .fetch_all(conn)
    .await
}

/// Marks batch `batch`'s pending requests abandoned at `now`; rows changed.
pub async fn abandon_batch(
    conn: &mut SqliteConnection,
    batch: i64,
    now: i64,
    by: &str,
    reason: &str,
) -> sqlx::Result<u64> {
    let done = sqlx::query!(
        "UPDATE approvals SET state = 'abandoned', decided_at = $1, decided_by = $2, denial_reason = $3 WHERE batch_id = $4 AND state = 'pending'",
        now,
        by,
        reason,
        batch
    )
    .execute(conn)
    .await?;
    Ok(done.rows_affected())
}

/// Request `id`, if any.
pub async fn by_id(conn: &mut SqliteConnection, id: i64) -> sqlx::Result<Option<ApprovalRow>> {
    sqlx::query_as!(
        ApprovalRow,
        r#"SELECT id AS "id!", organization_id AS "organization_id?", agent_id AS "agent_id!", batch_id AS "batch_id?", turn_id AS "turn_id?", tool AS "tool!", call_id AS "call_id?", input AS "input!", reason AS "reason!", requested_at AS "requested_at!", deadline AS "deadline!", state AS "state!", decided_at AS "decided_at?", decided_by AS "decided_by?", denial_reason AS "denial_reason?" FROM approvals WHERE id = $1"#,
        id
    )
    .fetch_optional(conn)
    .await
}

/// Request `id` of organization `org`, if any.
pub async fn by_id_in(
    conn: &mut SqliteConnection,
    id: i64,
    org: &str,
) -> sqlx::Result<Option<ApprovalRow>> {
    sqlx::query_as!(
        ApprovalRow,
        r#"SELECT id AS "id!", organization_id AS "organization_id?", agent_id AS "agent_id!", batch_id AS "batch_id?", turn_id AS "turn_id?", tool AS "tool!", call_id AS "call_id?", input AS "input!", reason AS "reason!", requested_at AS "requested_at!", deadline AS "deadline!", state AS "state!", decided_at AS "decided_at?", decided_by AS "decided_by?", denial_reason AS "denial_reason?" FROM approvals WHERE id = $1 AND organization_id = $2"#,
        id,
        org
    )
    .fetch_optional(conn)
    .await
}

/// The newest `limit` requests, newest first.
pub async fn newest(conn: &mut SqliteConnection, limit: i64) -> sqlx::Result<Vec<ApprovalRow>> {
    sqlx::query_as!(
        ApprovalRow,
        r#"SELECT id AS "id!", organization_id AS "organization_id?", agent_id AS "agent_id!", batch_id AS "batch_id?", turn_id AS "turn_id?", tool AS "tool!", call_id AS "call_id?", input AS "input!", reason AS "reason!", requested_at AS "requested_at!", deadline AS "deadline!", state AS "state!", decided_at AS "decided_at?", decided_by AS "decided_by?", denial_reason AS "denial_reason?" FROM approvals ORDER BY id DESC LIMIT $1 + 0"#,
        limit
    )
    .fetch_all(conn)
    .await
}

/// The newest `limit` requests of organization `org`, newest first.
pub async fn newest_in(
    conn: &mut SqliteConnection,
    org: &str,
    limit: i64,
) -> sqlx::Result<Vec<ApprovalRow>> {
    sqlx::query_as!(
        ApprovalRow,
        r#"SELECT id AS "id!", organization_id AS "organization_id?", agent_id AS "agent_id!", batch_id AS "batch_id?", turn_id AS "turn_id?", tool AS "tool!", call_id AS "call_id?", input AS "input!", reason AS "reason!", requested_at AS "requested_at!", deadline AS "deadline!", state AS "state!", decided_at AS "decided_at?", decided_by AS "decided_by?", denial_reason AS "denial_reason?" FROM approvals WHERE organization_id = $1 ORDER BY id DESC LIMIT $2 + 0"#,
        org,
        limit
    )
    .fetch_all(conn)
    .await
}

/// The newest `limit` requests in `state`, newest first.
pub async fn newest_in_state(
    conn: &mut SqliteConnection,
    state: &str,
    limit: i64,
) -> sqlx::Result<Vec<ApprovalRow>> {
    sqlx::query_as!(
        ApprovalRow,
        r#"SELECT id AS "id!", organization_id AS "organization_id?", agent_id AS "agent_id!", batch_id AS "batch_id?", turn_id AS "turn_id?", tool AS "tool!", call_id AS "call_id?", input AS "input!", reason AS "reason!", requested_at AS "requested_at!", deadline AS "deadline!", state AS "state!", decided_at AS "decided_at?", decided_by AS "decided_by?", denial_reason AS "denial_reason?" FROM approvals WHERE state = $1 ORDER BY id DESC LIMIT $2 + 0"#,
        state,
        limit
    )
    .fetch_all(conn)
    .await
}

/// The newest `limit` requests of organization `org` in `state`, newest first.
pub async fn newest_in_with_state(
    conn: &mut SqliteConnection,
    org: &str,
    state: &str,
    limit: i64,
) -> sqlx::Result<Vec<ApprovalRow>> {
    sqlx::query_as!(
        ApprovalRow,
        r#"SELECT id AS "id!", organization_id AS "organization_id?", agent_id AS "agent_id!", batch_id AS "batch_id?", turn_id AS "turn_id?", tool AS "tool!", call_id AS "call_id?", input AS "input!", reason AS "reason!", requested_at AS "requested_at!", deadline AS "deadline!", state AS "state!", decided_at AS "decided_at?", decided_by AS "decided_by?", denial_reason AS "denial_reason?" FROM approvals WHERE organization_id = $1 AND state = $2 ORDER BY id DESC LIMIT $3 + 0"#,
        org,
        state,
        limit
    )
    .fetch_all(conn)
    .await
}
