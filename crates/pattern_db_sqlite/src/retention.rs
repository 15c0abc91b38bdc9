//! Statements of per-agent retention: the stored policies (`retention_policies`), an archive
//! pass's plan (`retention_exports`), the batches a pass may delete, and the counts and deletes
//! of folded summaries, old block versions and old activity events.
//!
//! It must never decide what a policy allows (ages, the disposal, dry runs: the caller chooses
//! which statement runs and with which cutoffs) and never check a stored policy: the caller does.
//! What stays in `pattern_db` (dynamic text): the counts and deletes of messages, tool calls and
//! batches by `IN` lists of batch ids, whose length varies with the pass.

use sqlx::SqliteConnection;

/// A `retention_policies` row as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PolicyRow {
    /// `agent_id` (a UUID's text).
    pub agent_id: String,
    /// `batches_older_than_days`.
    pub batches_older_than_days: Option<i64>,
    /// `batch_disposal`.
    pub batch_disposal: String,
    /// `keep_block_versions`.
    pub keep_block_versions: Option<i64>,
    /// `activity_older_than_days`.
    pub activity_older_than_days: Option<i64>,
    /// `updated_at` (milliseconds since the epoch).
    pub updated_at: i64,
}

/// A policy to store (`retention_policies`' values but the agent and the time).
#[derive(Clone, Copy, Debug)]
pub struct NewPolicy<'a> {
    /// `batches_older_than_days`.
    pub batches_older_than_days: Option<i64>,
    /// `batch_disposal`.
    pub batch_disposal: &'a str,
    /// `keep_block_versions`.
    pub keep_block_versions: Option<i64>,
    /// `activity_older_than_days`.
    pub activity_older_than_days: Option<i64>,
}

/// Stores the policy of `agent` at `now`, replacing any; rows changed.
pub async fn put_policy(
    conn: &mut SqliteConnection,
    agent: &str,
    policy: NewPolicy<'_>,
    now: i64,
) -> sqlx::Result<u64> {
    let done = sqlx::query!(
        "INSERT INTO retention_policies (agent_id, batches_older_than_days, batch_disposal, keep_block_versions, activity_older_than_days, updated_at) VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (agent_id) DO UPDATE SET batches_older_than_days = excluded.batches_older_than_days, batch_disposal = excluded.batch_disposal, keep_block_versions = excluded.keep_block_versions, activity_older_than_days = excluded.activity_older_than_days, updated_at = excluded.updated_at",
        agent,
        policy.batches_older_than_days,
        policy.batch_disposal,
        policy.keep_block_versions,
        policy.activity_older_than_days,
        now
    )
    .execute(conn)
    .await?;
    Ok(done.rows_affected())
}

/// The policy of `agent`, if stored.
pub async fn policy_of(
    conn: &mut SqliteConnection,
    agent: &str,
) -> sqlx::Result<Option<PolicyRow>> {
    sqlx::query_as!(
        PolicyRow,
        r#"SELECT agent_id AS "agent_id!", batches_older_than_days AS "batches_older_than_days?: i64", batch_disposal AS "batch_disposal!", keep_block_versions AS "keep_block_versions?: i64", activity_older_than_days AS "activity_older_than_days?: i64", updated_at AS "updated_at!: i64" FROM retention_policies WHERE agent_id = $1"#,
        agent
    )
    .fetch_optional(conn)
    .await
}

/// Every stored policy, by agent id.
pub async fn policies(conn: &mut SqliteConnection) -> sqlx::Result<Vec<PolicyRow>> {
    sqlx::query_as!(
        PolicyRow,
        r#"SELECT agent_id AS "agent_id!", batches_older_than_days AS "batches_older_than_days?: i64", batch_disposal AS "batch_disposal!", keep_block_versions AS "keep_block_versions?: i64", activity_older_than_days AS "activity_older_than_days?: i64", updated_at AS "updated_at!: i64" FROM retention_policies ORDER BY agent_id"#
    )
    .fetch_all(conn)
    .await
}

/// Deletes the policy of `agent`; rows deleted.
pub async fn delete_policy(conn: &mut SqliteConnection, agent: &str) -> sqlx::Result<u64> {
    let done = sqlx::query!("DELETE FROM retention_policies WHERE agent_id = $1", agent)
        .execute(conn)
        .await?;
    Ok(done.rows_affected())
}

/// Records the archive plan of `agent` (`batch_ids`: a JSON array's text) at `now`; rows
/// inserted.
pub async fn put_plan(
    conn: &mut SqliteConnection,
    agent: &str,
    batch_ids: &str,
    now: i64,
) -> sqlx::Result<u64> {
    let done = sqlx::query!(
        "INSERT INTO retention_exports (agent_id, batch_ids, created_at) VALUES ($1, $2, $3)",
        agent,
        batch_ids,
        now
    )
    .execute(conn)
    .await?;
    Ok(done.rows_affected())
}

/// The batch ids (a JSON array's text) of `agent`'s archive plan, if one is recorded.
pub async fn plan_of(conn: &mut SqliteConnection, agent: &str) -> sqlx::Result<Option<String>> {
    sqlx::query_scalar!(
        r#"SELECT batch_ids AS "batch_ids!" FROM retention_exports WHERE agent_id = $1"#,
        agent
    )
    .fetch_optional(conn)
    .await
}

/// Deletes the archive plan of `agent`; rows deleted.
pub async fn delete_plan(conn: &mut SqliteConnection, agent: &str) -> sqlx::Result<u64> {
    let done = sqlx::query!("DELETE FROM retention_exports WHERE agent_id = $1", agent)
        .execute(conn)
        .await?;
    Ok(done.rows_affected())
}

/// The batches of `agent` not open, older than `cutoff` (by completion, else start), and
/// abandoned or archived under a summary; oldest first.
pub async fn eligible_batches(
    conn: &mut SqliteConnection,
    agent: &str,
    cutoff: i64,
) -> sqlx::Result<Vec<i64>> {
    sqlx::query_scalar!(
        r#"SELECT b.id AS "id!: i64" FROM messages f CROSS JOIN batches b ON b.id = f.position WHERE f.agent = (SELECT n.num FROM agents n WHERE n.id = $1) AND b.agent_id = $1 AND b.state <> 'open' AND COALESCE(b.completed_at, b.started_at) < $2 AND (b.state = 'abandoned' OR (b.archived = 1 AND EXISTS (SELECT 1 FROM summaries s WHERE s.agent_id = b.agent_id AND s.from_batch <= b.id AND b.id <= s.through_batch))) ORDER BY f.position"#,
        agent,
        cutoff
    )
    .fetch_all(conn)
    .await
}

/// How many summaries of `agent` created before `cutoff` a newer one contains.
pub async fn count_folded_summaries(
    conn: &mut SqliteConnection,
    agent: &str,
    cutoff: i64,
) -> sqlx::Result<i64> {
    sqlx::query_scalar!(
        r#"SELECT COUNT(*) AS "count!: i64" FROM summaries WHERE agent_id = $1 AND created_at < $2 AND EXISTS (SELECT 1 FROM summaries t WHERE t.agent_id = summaries.agent_id AND t.from_batch <= summaries.from_batch AND t.through_batch >= summaries.through_batch AND (t.through_batch > summaries.through_batch OR t.id > summaries.id))"#,
        agent,
        cutoff
    )
    .fetch_one(conn)
    .await
}

/// Deletes the summaries [`count_folded_summaries`] counts; rows deleted.
pub async fn delete_folded_summaries(
    conn: &mut SqliteConnection,
    agent: &str,
    cutoff: i64,
) -> sqlx::Result<u64> {
    let done = sqlx::query!(
        "DELETE FROM summaries WHERE agent_id = $1 AND created_at < $2 AND EXISTS (SELECT 1 FROM summaries t WHERE t.agent_id = summaries.agent_id AND t.from_batch <= summaries.from_batch AND t.through_batch >= summaries.through_batch AND (t.through_batch > summaries.through_batch OR t.id > summaries.id))",
        agent,
        cutoff
    )
    .execute(conn)
    .await?;
    Ok(done.rows_affected())
}

/// How many versions of the blocks `agent` owns are beyond the last `keep` and not the last of
/// their day (`day_ms` milliseconds a day).
pub async fn count_old_block_versions(
    conn: &mut SqliteConnection,
    agent: &str,
    keep: i64,
    day_ms: i64,
) -> sqlx::Result<i64> {
    sqlx::query_scalar!(
        r#"SELECT COUNT(*) AS "count!: i64" FROM memory_block_versions WHERE block_id IN (SELECT id FROM memory_blocks WHERE owner_agent_id = $1) AND version <= (SELECT MAX(v2.version) FROM memory_block_versions v2 WHERE v2.block_id = memory_block_versions.block_id) - $2 AND version <> (SELECT MAX(v3.version) FROM memory_block_versions v3 WHERE v3.block_id = memory_block_versions.block_id AND v3.created_at / $3 = memory_block_versions.created_at / $3)"#,
        agent,
        keep,
        day_ms
    )
    .fetch_one(conn)
    .await
}

/// Deletes the versions [`count_old_block_versions`] counts; rows deleted.
pub async fn delete_old_block_versions(
    conn: &mut SqliteConnection,
    agent: &str,
    keep: i64,
    day_ms: i64,
) -> sqlx::Result<u64> {
    let done = sqlx::query!(
        "DELETE FROM memory_block_versions WHERE block_id IN (SELECT id FROM memory_blocks WHERE owner_agent_id = $1) AND version <= (SELECT MAX(v2.version) FROM memory_block_versions v2 WHERE v2.block_id = memory_block_versions.block_id) - $2 AND version <> (SELECT MAX(v3.version) FROM memory_block_versions v3 WHERE v3.block_id = memory_block_versions.block_id AND v3.created_at / $3 = memory_block_versions.created_at / $3)",
        agent,
        keep,
        day_ms
    )
    .execute(conn)
    .await?;
    Ok(done.rows_affected())
}

/// How many activity events of `agent` are older than `cutoff`.
pub async fn count_old_activity(
    conn: &mut SqliteConnection,
    agent: &str,
    cutoff: i64,
) -> sqlx::Result<i64> {
    sqlx::query_scalar!(
        r#"SELECT COUNT(*) AS "count!: i64" FROM activity_events WHERE agent_id = $1 AND created_at < $2"#,
        agent,
        cutoff
    )
    .fetch_one(conn)
    .await
}

/// Deletes the events [`count_old_activity`] counts; rows deleted.
pub async fn delete_old_activity(
    conn: &mut SqliteConnection,
    agent: &str,
    cutoff: i64,
) -> sqlx::Result<u64> {
    let done = sqlx::query!(
        "DELETE FROM activity_events WHERE agent_id = $1 AND created_at < $2",
        agent,
        cutoff
    )
    .execute(conn)
    .await?;
    Ok(done.rows_affected())
}
