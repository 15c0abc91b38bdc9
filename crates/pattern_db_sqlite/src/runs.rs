//! Statements on runs' rows: `agent_runs` (claims), `turns` and `turn_events` (a run's request and
//! what it streamed), and the few `batches` and `agent_queue` reads and writes a claim makes.
//!
//! It must never decide whether a claim is free, whether a holder is alive, or whether a turn may
//! still change (the caller reads, judges under its agent's lock, then writes), and never take a
//! lock: `pattern_db` locks the agent before it calls any write here.

use sqlx::SqliteConnection;

/// An `agent_runs` row as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClaimRow {
    /// `agent_id` (a UUID's text).
    pub agent_id: String,
    /// `token`.
    pub token: i64,
    /// `holder`.
    pub holder: Option<String>,
    /// `claimed_at` (milliseconds since the epoch).
    pub claimed_at: Option<i64>,
    /// `batch_id`.
    pub batch_id: Option<i64>,
}

/// A `turns` row as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TurnRow {
    /// `id` (a UUID's text).
    pub id: String,
    /// `agent_id` (a UUID's text).
    pub agent_id: String,
    /// `source`.
    pub source: String,
    /// `idempotency_key`.
    pub idempotency_key: Option<String>,
    /// `fingerprint`.
    pub fingerprint: Option<String>,
    /// `queue_id`.
    pub queue_id: Option<i64>,
    /// `batch_id`.
    pub batch_id: Option<i64>,
    /// `state`.
    pub state: String,
    /// `outcome`.
    pub outcome: Option<String>,
    /// `last_seq`.
    pub last_seq: i64,
    /// `cancel_requested_at` (milliseconds since the epoch).
    pub cancel_requested_at: Option<i64>,
    /// `created_at` (milliseconds since the epoch).
    pub created_at: i64,
    /// `finished_at` (milliseconds since the epoch).
    pub finished_at: Option<i64>,
}

/// A `turn_events` row as stored (without its turn).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TurnEventRow {
    /// `seq`.
    pub seq: i64,
    /// `kind`.
    pub kind: String,
    /// `data` (JSON text).
    pub data: String,
    /// `created_at` (milliseconds since the epoch).
    pub created_at: i64,
}

/// An open batch of an agent, as a claim judges it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OpenBatchRow {
    /// `id`.
    pub id: i64,
    /// `lease_expires_at` (milliseconds since the epoch).
    pub lease_expires_at: Option<i64>,
    /// `claim_token`.
    pub claim_token: Option<i64>,
}

/// A held claim: its agent and its holder.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeldRow {
    /// `agent_id` (a UUID's text).
    pub agent_id: String,
    /// `holder`.
    pub holder: String,
}

/// A turn's owner, state and last sequence number.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TurnStateRow {
    /// `agent_id` (a UUID's text).
    pub agent_id: String,
    /// `state`.
    pub state: String,
    /// `last_seq`.
    pub last_seq: i64,
}

/// The claim of `agent`, if it ever ran under one.
pub async fn claim(conn: &mut SqliteConnection, agent: &str) -> sqlx::Result<Option<ClaimRow>> {
    sqlx::query_as!(
        ClaimRow,
        r#"SELECT agent_id AS "agent_id!", token AS "token!: i64", holder AS "holder?", claimed_at AS "claimed_at?: i64", batch_id AS "batch_id?: i64" FROM agent_runs WHERE agent_id = $1"#,
        agent
    )
    .fetch_optional(conn)
    .await
}

/// The claims `holder` holds, in agent order.
pub async fn claims_of(conn: &mut SqliteConnection, holder: &str) -> sqlx::Result<Vec<ClaimRow>> {
    sqlx::query_as!(
        ClaimRow,
        r#"SELECT agent_id AS "agent_id!", token AS "token!: i64", holder AS "holder?", claimed_at AS "claimed_at?: i64", batch_id AS "batch_id?: i64" FROM agent_runs WHERE holder = $1 ORDER BY agent_id"#,
        holder
    )
    .fetch_all(conn)
    .await
}

/// Every held claim.
pub async fn held(conn: &mut SqliteConnection) -> sqlx::Result<Vec<HeldRow>> {
    sqlx::query_as!(
        HeldRow,
        r#"SELECT agent_id AS "agent_id!", holder AS "holder!" FROM agent_runs WHERE holder IS NOT NULL"#
    )
    .fetch_all(conn)
    .await
}

/// The claim of `agent` when it is held.
pub async fn held_of(conn: &mut SqliteConnection, agent: &str) -> sqlx::Result<Vec<HeldRow>> {
    sqlx::query_as!(
        HeldRow,
        r#"SELECT agent_id AS "agent_id!", holder AS "holder!" FROM agent_runs WHERE holder IS NOT NULL AND agent_id = $1"#,
        agent
    )
    .fetch_all(conn)
    .await
}

/// Moves `agent`'s token on by one and frees its claim; the new token.
pub async fn take_over(conn: &mut SqliteConnection, agent: &str) -> sqlx::Result<i64> {
    sqlx::query_scalar!(
        r#"UPDATE agent_runs SET token = token + 1, holder = NULL, claimed_at = NULL, batch_id = NULL WHERE agent_id = $1 RETURNING token AS "token!: i64""#,
        agent
    )
    .fetch_one(conn)
    .await
}

/// Makes `holder` the holder of `agent`'s claim at `token` from `now`.
pub async fn acquire(
    conn: &mut SqliteConnection,
    agent: &str,
    token: i64,
    holder: &str,
    now: i64,
) -> sqlx::Result<u64> {
    let done = sqlx::query!(
        "INSERT INTO agent_runs (agent_id, token, holder, claimed_at, batch_id) VALUES ($1, $2, $3, $4, NULL) ON CONFLICT (agent_id) DO UPDATE SET token = excluded.token, holder = excluded.holder, claimed_at = excluded.claimed_at, batch_id = NULL",
        agent,
        token,
        holder,
        now
    )
    .execute(conn)
    .await?;
    Ok(done.rows_affected())
}

/// Frees `agent`'s claim at `token`; rows changed.
pub async fn release(conn: &mut SqliteConnection, agent: &str, token: i64) -> sqlx::Result<u64> {
    let done = sqlx::query!(
        "UPDATE agent_runs SET holder = NULL, claimed_at = NULL, batch_id = NULL WHERE agent_id = $1 AND token = $2",
        agent,
        token
    )
    .execute(conn)
    .await?;
    Ok(done.rows_affected())
}

/// Records `batch` as the batch of `agent`'s claim at `token`; rows changed.
pub async fn set_batch(
    conn: &mut SqliteConnection,
    agent: &str,
    token: i64,
    batch: i64,
) -> sqlx::Result<u64> {
    let done = sqlx::query!(
        "UPDATE agent_runs SET batch_id = $1 WHERE agent_id = $2 AND token = $3",
        batch,
        agent,
        token
    )
    .execute(conn)
    .await?;
    Ok(done.rows_affected())
}

/// `agent`'s open batches, in id order.
pub async fn open_batches(
    conn: &mut SqliteConnection,
    agent: &str,
) -> sqlx::Result<Vec<OpenBatchRow>> {
    sqlx::query_as!(
        OpenBatchRow,
        r#"SELECT id AS "id!: i64", lease_expires_at AS "lease_expires_at?: i64", claim_token AS "claim_token?: i64" FROM batches WHERE agent_id = $1 AND state = 'open' ORDER BY id"#,
        agent
    )
    .fetch_all(conn)
    .await
}

/// The ids of `agent`'s open batches begun under a claim, in id order.
pub async fn open_claimed(conn: &mut SqliteConnection, agent: &str) -> sqlx::Result<Vec<i64>> {
    sqlx::query_scalar!(
        r#"SELECT id AS "id!: i64" FROM batches WHERE agent_id = $1 AND state = 'open' AND claim_token IS NOT NULL ORDER BY id"#,
        agent
    )
    .fetch_all(conn)
    .await
}

/// The ids of `agent`'s open batches begun under the claim at `token`.
pub async fn open_of_token(
    conn: &mut SqliteConnection,
    agent: &str,
    token: i64,
) -> sqlx::Result<Vec<i64>> {
    sqlx::query_scalar!(
        r#"SELECT id AS "id!: i64" FROM batches WHERE agent_id = $1 AND state = 'open' AND claim_token = $2"#,
        agent,
        token
    )
    .fetch_all(conn)
    .await
}

/// Whether `agent` has a pending queue entry due at `now`.
pub async fn has_due(conn: &mut SqliteConnection, agent: &str, now: i64) -> sqlx::Result<bool> {
    let one = sqlx::query_scalar!(
        r#"SELECT 1 AS "one!: i64" FROM agent_queue WHERE agent_id = $1 AND delivered_at IS NULL AND deliver_at <= $2 LIMIT 1"#,
        agent,
        now
    )
    .fetch_optional(conn)
    .await?;
    Ok(one.is_some())
}

/// Records `batch` as the batch queue entry `entry` was delivered in; rows changed.
pub async fn set_delivered_batch(
    conn: &mut SqliteConnection,
    entry: i64,
    batch: i64,
) -> sqlx::Result<u64> {
    let done = sqlx::query!(
        "UPDATE agent_queue SET delivered_batch = $1 WHERE id = $2",
        batch,
        entry
    )
    .execute(conn)
    .await?;
    Ok(done.rows_affected())
}

/// Records `turn` as the turn of queue entry `entry`; rows changed.
pub async fn set_entry_turn(
    conn: &mut SqliteConnection,
    entry: i64,
    turn: &str,
) -> sqlx::Result<u64> {
    let done = sqlx::query!(
        "UPDATE agent_queue SET turn_id = $1 WHERE id = $2",
        turn,
        entry
    )
    .execute(conn)
    .await?;
    Ok(done.rows_affected())
}

/// Stores a new turn with no events.
#[allow(clippy::too_many_arguments)]
pub async fn insert_turn(
    conn: &mut SqliteConnection,
    id: &str,
    agent: &str,
    source: &str,
    idempotency_key: Option<&str>,
    fingerprint: Option<&str>,
    queue_id: Option<i64>,
    batch_id: Option<i64>,
    state: &str,
    now: i64,
) -> sqlx::Result<u64> {
    let done = sqlx::query!(
        "INSERT INTO turns (id, agent_id, source, idempotency_key, fingerprint, queue_id, batch_id, state, last_seq, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 0, $9)",
        id,
        agent,
        source,
        idempotency_key,
        fingerprint,
        queue_id,
        batch_id,
        state,
        now
    )
    .execute(conn)
    .await?;
    Ok(done.rows_affected())
}

/// Moves queued `turn` to running in `batch`; rows changed.
pub async fn start_turn(conn: &mut SqliteConnection, turn: &str, batch: i64) -> sqlx::Result<u64> {
    let done = sqlx::query!(
        "UPDATE turns SET state = 'running', batch_id = $1 WHERE id = $2 AND state = 'queued'",
        batch,
        turn
    )
    .execute(conn)
    .await?;
    Ok(done.rows_affected())
}

/// Finishes unfinished `turn` with `outcome` at `now`; rows changed.
pub async fn finish_turn(
    conn: &mut SqliteConnection,
    turn: &str,
    outcome: &str,
    now: i64,
) -> sqlx::Result<u64> {
    let done = sqlx::query!(
        "UPDATE turns SET state = 'finished', outcome = $1, finished_at = $2 WHERE id = $3 AND state <> 'finished'",
        outcome,
        now,
        turn
    )
    .execute(conn)
    .await?;
    Ok(done.rows_affected())
}

/// Asks unfinished `turn` of `agent` to cancel at `now`, once; rows changed.
pub async fn request_cancel(
    conn: &mut SqliteConnection,
    agent: &str,
    turn: &str,
    now: i64,
) -> sqlx::Result<u64> {
    let done = sqlx::query!(
        "UPDATE turns SET cancel_requested_at = $1 WHERE id = $2 AND agent_id = $3 AND state <> 'finished' AND cancel_requested_at IS NULL",
        now,
        turn,
        agent
    )
    .execute(conn)
    .await?;
    Ok(done.rows_affected())
}

/// The ids of `batch`'s unfinished turns.
pub async fn unfinished_of_batch(
    conn: &mut SqliteConnection,
    batch: i64,
) -> sqlx::Result<Vec<String>> {
    sqlx::query_scalar!(
        r#"SELECT id AS "id!" FROM turns WHERE batch_id = $1 AND state <> 'finished'"#,
        batch
    )
    .fetch_all(conn)
    .await
}

/// `turn`'s owner, state and last sequence number.
pub async fn turn_state(
    conn: &mut SqliteConnection,
    turn: &str,
) -> sqlx::Result<Option<TurnStateRow>> {
    sqlx::query_as!(
        TurnStateRow,
        r#"SELECT agent_id AS "agent_id!", state AS "state!", last_seq AS "last_seq!: i64" FROM turns WHERE id = $1"#,
        turn
    )
    .fetch_optional(conn)
    .await
}

/// Sets `turn`'s last sequence number; rows changed.
pub async fn set_last_seq(conn: &mut SqliteConnection, turn: &str, last: i64) -> sqlx::Result<u64> {
    let done = sqlx::query!("UPDATE turns SET last_seq = $1 WHERE id = $2", last, turn)
        .execute(conn)
        .await?;
    Ok(done.rows_affected())
}

/// Deletes the events of turns finished before `before`; rows deleted.
pub async fn prune_events(conn: &mut SqliteConnection, before: i64) -> sqlx::Result<u64> {
    let done = sqlx::query!(
        "DELETE FROM turn_events WHERE turn_id IN (SELECT id FROM turns WHERE state = 'finished' AND finished_at < $1)",
        before
    )
    .execute(conn)
    .await?;
    Ok(done.rows_affected())
}

/// Deletes the turns finished before `before`; rows deleted.
pub async fn prune_turns(conn: &mut SqliteConnection, before: i64) -> sqlx::Result<u64> {
    let done = sqlx::query!(
        "DELETE FROM turns WHERE state = 'finished' AND finished_at < $1",
        before
    )
    .execute(conn)
    .await?;
    Ok(done.rows_affected())
}

/// How many turns finished before `before`.
pub async fn count_prunable(conn: &mut SqliteConnection, before: i64) -> sqlx::Result<i64> {
    sqlx::query_scalar!(
        r#"SELECT COUNT(*) AS "count!: i64" FROM turns WHERE state = 'finished' AND finished_at < $1"#,
        before
    )
    .fetch_one(conn)
    .await
}

/// Turn `turn` of `agent`.
pub async fn turn(
    conn: &mut SqliteConnection,
    agent: &str,
    turn: &str,
) -> sqlx::Result<Option<TurnRow>> {
    sqlx::query_as!(
        TurnRow,
        r#"SELECT id AS "id!", agent_id AS "agent_id!", source AS "source!", idempotency_key AS "idempotency_key?", fingerprint AS "fingerprint?", queue_id AS "queue_id?: i64", batch_id AS "batch_id?: i64", state AS "state!", outcome AS "outcome?", last_seq AS "last_seq!: i64", cancel_requested_at AS "cancel_requested_at?: i64", created_at AS "created_at!: i64", finished_at AS "finished_at?: i64" FROM turns WHERE id = $1 AND agent_id = $2"#,
        turn,
        agent
    )
    .fetch_optional(conn)
    .await
}

/// The turn of `agent` with idempotency key `key`.
pub async fn turn_by_key(
    conn: &mut SqliteConnection,
    agent: &str,
    key: &str,
) -> sqlx::Result<Option<TurnRow>> {
    sqlx::query_as!(
        TurnRow,
        r#"SELECT id AS "id!", agent_id AS "agent_id!", source AS "source!", idempotency_key AS "idempotency_key?", fingerprint AS "fingerprint?", queue_id AS "queue_id?: i64", batch_id AS "batch_id?: i64", state AS "state!", outcome AS "outcome?", last_seq AS "last_seq!: i64", cancel_requested_at AS "cancel_requested_at?: i64", created_at AS "created_at!: i64", finished_at AS "finished_at?: i64" FROM turns WHERE agent_id = $1 AND idempotency_key = $2"#,
        agent,
        key
    )
    .fetch_optional(conn)
    .await
}

/// `agent`'s newest `limit` turns, newest first.
pub async fn turns(
    conn: &mut SqliteConnection,
    agent: &str,
    limit: i64,
) -> sqlx::Result<Vec<TurnRow>> {
    sqlx::query_as!(
        TurnRow,
        r#"SELECT id AS "id!", agent_id AS "agent_id!", source AS "source!", idempotency_key AS "idempotency_key?", fingerprint AS "fingerprint?", queue_id AS "queue_id?: i64", batch_id AS "batch_id?: i64", state AS "state!", outcome AS "outcome?", last_seq AS "last_seq!: i64", cancel_requested_at AS "cancel_requested_at?: i64", created_at AS "created_at!: i64", finished_at AS "finished_at?: i64" FROM turns WHERE agent_id = $1 ORDER BY id DESC LIMIT $2 + 0"#,
        agent,
        limit
    )
    .fetch_all(conn)
    .await
}

/// Up to `limit` events of `turn` after sequence number `after`, in order.
pub async fn events(
    conn: &mut SqliteConnection,
    turn: &str,
    after: i64,
    limit: i64,
) -> sqlx::Result<Vec<TurnEventRow>> {
    sqlx::query_as!(
        TurnEventRow,
        r#"SELECT seq AS "seq!: i64", kind AS "kind!", data AS "data!", created_at AS "created_at!: i64" FROM turn_events WHERE turn_id = $1 AND seq > $2 ORDER BY seq LIMIT $3 + 0"#,
        turn,
        after,
        limit
    )
    .fetch_all(conn)
    .await
}

/// Up to `limit` agents with a queue entry due at `now` whose claim is free or whose holder
/// looks gone (its process row missing or expired), the earliest due first.
pub async fn deliverable(
    conn: &mut SqliteConnection,
    now: i64,
    limit: i64,
) -> sqlx::Result<Vec<String>> {
    sqlx::query_scalar!(
        r#"SELECT q.agent_id AS "agent_id!" FROM agent_queue q LEFT JOIN agent_runs r ON r.agent_id = q.agent_id LEFT JOIN processes p ON p.holder = r.holder WHERE q.delivered_at IS NULL AND q.deliver_at <= $1 AND (r.holder IS NULL OR p.holder IS NULL OR p.expires_at <= $1) GROUP BY q.agent_id ORDER BY MIN(q.deliver_at), q.agent_id LIMIT $2 + 0"#,
        now,
        limit
    )
    .fetch_all(conn)
    .await
}

/// A due `agent_queue` row with the turn it belongs to.
struct DueRow {
    /// `id`.
    id: i64,
    /// `agent_id` (a UUID's text).
    agent_id: String,
    /// `batch_type`.
    batch_type: String,
    /// `role`.
    role: String,
    /// `content` (the trigger's content blocks as JSON text).
    content: String,
    /// `source`.
    source: String,
    /// `deliver_at` (milliseconds since the epoch).
    deliver_at: i64,
    /// `every_ms`.
    every_ms: Option<i64>,
    /// `delivered_at` (milliseconds since the epoch).
    delivered_at: Option<i64>,
    /// `delivered_batch`.
    delivered_batch: Option<i64>,
    /// `deliveries`.
    deliveries: i64,
    /// `created_at` (milliseconds since the epoch).
    created_at: i64,
    /// `schedule`.
    schedule: Option<String>,
    /// `cron`.
    cron: Option<String>,
    /// `time_zone`.
    time_zone: Option<String>,
    /// `name`.
    name: Option<String>,
    /// `retry_of`.
    retry_of: Option<i64>,
    /// `protocol_message_id` (a UUID's text).
    protocol_message_id: Option<String>,
    /// `turn_id`.
    turn_id: Option<String>,
}

/// `agent`'s oldest pending queue entry due at `now`, with its turn (`None`: queued without one).
pub async fn due_entry(
    conn: &mut SqliteConnection,
    agent: &str,
    now: i64,
) -> sqlx::Result<Option<(crate::QueueRow, Option<String>)>> {
    let row = sqlx::query_as!(
        DueRow,
        r#"SELECT id AS "id!", agent_id AS "agent_id!", batch_type AS "batch_type!", role AS "role!", content AS "content!", source AS "source!", deliver_at AS "deliver_at!", every_ms AS "every_ms?", delivered_at AS "delivered_at?", delivered_batch AS "delivered_batch?", deliveries AS "deliveries!", created_at AS "created_at!", schedule AS "schedule?", cron AS "cron?", time_zone AS "time_zone?", name AS "name?", retry_of AS "retry_of?", protocol_message_id AS "protocol_message_id?", turn_id AS "turn_id?" FROM agent_queue WHERE agent_id = $1 AND delivered_at IS NULL AND deliver_at <= $2 ORDER BY deliver_at, id LIMIT 1"#,
        agent,
        now
    )
    .fetch_optional(conn)
    .await?;
    Ok(row.map(|r| {
        let turn = r.turn_id;
        let entry = crate::QueueRow {
            id: r.id,
            agent_id: r.agent_id,
            batch_type: r.batch_type,
            role: r.role,
            content: r.content,
            source: r.source,
            deliver_at: r.deliver_at,
            every_ms: r.every_ms,
            delivered_at: r.delivered_at,
            delivered_batch: r.delivered_batch,
            deliveries: r.deliveries,
            created_at: r.created_at,
            schedule: r.schedule,
            cron: r.cron,
            time_zone: r.time_zone,
            name: r.name,
            retry_of: r.retry_of,
            protocol_message_id: r.protocol_message_id,
        };
        (entry, turn)
    }))
}

/// The agents with an open batch (recovery's candidates for every open batch).
pub async fn agents_with_open_batches(conn: &mut SqliteConnection) -> sqlx::Result<Vec<String>> {
    sqlx::query_scalar!(
        r#"SELECT DISTINCT agent_id AS "agent_id!" FROM batches WHERE state = 'open'"#
    )
    .fetch_all(conn)
    .await
}

/// Whether `agent` has an open batch, as [`agents_with_open_batches`]' one row or none.
pub async fn agent_with_open_batches(
    conn: &mut SqliteConnection,
    agent: &str,
) -> sqlx::Result<Vec<String>> {
    sqlx::query_scalar!(
        r#"SELECT DISTINCT agent_id AS "agent_id!" FROM batches WHERE state = 'open' AND agent_id = $1"#,
        agent
    )
    .fetch_all(conn)
    .await
}

/// The agents with an open batch that carries a claim token or whose lease expired before
/// `now` (milliseconds since the epoch) (recovery's candidates for expired leases).
pub async fn agents_with_stale_batches(
    conn: &mut SqliteConnection,
    now: i64,
) -> sqlx::Result<Vec<String>> {
    sqlx::query_scalar!(
        r#"SELECT DISTINCT agent_id AS "agent_id!" FROM batches WHERE state = 'open' AND (claim_token IS NOT NULL OR lease_expires_at < $1)"#,
        now
    )
    .fetch_all(conn)
    .await
}

/// Whether `agent` has such a batch, as [`agents_with_stale_batches`]' one row or none.
pub async fn agent_with_stale_batches(
    conn: &mut SqliteConnection,
    now: i64,
    agent: &str,
) -> sqlx::Result<Vec<String>> {
    sqlx::query_scalar!(
        r#"SELECT DISTINCT agent_id AS "agent_id!" FROM batches WHERE state = 'open' AND (claim_token IS NOT NULL OR lease_expires_at < $1) AND agent_id = $2"#,
        now,
        agent
    )
    .fetch_all(conn)
    .await
}
