//! Statements on `processes` rows (every open database handle: its liveness lock key and the
//! expiry its heartbeat renews) and `machine_leases` rows (the snowflake machine id each process
//! leases).
//!
//! It must never judge whether a process is alive or which machine id is free: the caller reads
//! the rows, looks at the liveness locks, and decides.

use sqlx::PgConnection;

use crate::Timestamp;

/// A process's liveness lock key and expiry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProcessRow {
    /// `lock_key`.
    pub lock_key: i64,
    /// `expires_at`.
    pub expires_at: Timestamp,
}

/// A `machine_leases` row as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MachineLeaseRow {
    /// `machine_id`.
    pub machine_id: i32,
    /// `holder`.
    pub holder: String,
    /// `expires_at`.
    pub expires_at: Timestamp,
}

/// Stores process `holder`, or gives an existing row of that name a new lock key and expiry.
#[allow(clippy::too_many_arguments)]
pub async fn register(
    conn: &mut PgConnection,
    holder: &str,
    lock_key: i64,
    pid: i64,
    host: &str,
    now: Timestamp,
    expires_at: Timestamp,
) -> sqlx::Result<u64> {
    let done = sqlx::query!(
        "INSERT INTO processes (holder, lock_key, pid, host, started_at, expires_at) VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (holder) DO UPDATE SET lock_key = excluded.lock_key, expires_at = excluded.expires_at",
        holder,
        lock_key,
        pid,
        host,
        now,
        expires_at
    )
    .execute(conn)
    .await?;
    Ok(done.rows_affected())
}

/// Stores process `holder` (which must not be stored); rows inserted.
#[allow(clippy::too_many_arguments)]
pub async fn insert(
    conn: &mut PgConnection,
    holder: &str,
    lock_key: i64,
    pid: i64,
    host: &str,
    now: Timestamp,
    expires_at: Timestamp,
) -> sqlx::Result<u64> {
    let done = sqlx::query!(
        "INSERT INTO processes (holder, lock_key, pid, host, started_at, expires_at) VALUES ($1, $2, $3, $4, $5, $6)",
        holder,
        lock_key,
        pid,
        host,
        now,
        expires_at
    )
    .execute(conn)
    .await?;
    Ok(done.rows_affected())
}

/// Process `holder`'s lock key and expiry.
pub async fn process(conn: &mut PgConnection, holder: &str) -> sqlx::Result<Option<ProcessRow>> {
    sqlx::query_as!(
        ProcessRow,
        r#"SELECT lock_key AS "lock_key!", expires_at AS "expires_at!" FROM processes WHERE holder = $1"#,
        holder
    )
    .fetch_optional(conn)
    .await
}

/// Moves process `holder`'s expiry to `expires_at`; rows changed.
pub async fn renew(
    conn: &mut PgConnection,
    holder: &str,
    expires_at: Timestamp,
) -> sqlx::Result<u64> {
    let done = sqlx::query!(
        "UPDATE processes SET expires_at = $1 WHERE holder = $2",
        expires_at,
        holder
    )
    .execute(conn)
    .await?;
    Ok(done.rows_affected())
}

/// Deletes process `holder`'s row; rows deleted.
pub async fn delete(conn: &mut PgConnection, holder: &str) -> sqlx::Result<u64> {
    let done = sqlx::query!("DELETE FROM processes WHERE holder = $1", holder)
        .execute(conn)
        .await?;
    Ok(done.rows_affected())
}

/// Deletes the machine-id leases of `holder`; rows deleted.
pub async fn delete_leases(conn: &mut PgConnection, holder: &str) -> sqlx::Result<u64> {
    let done = sqlx::query!("DELETE FROM machine_leases WHERE holder = $1", holder)
        .execute(conn)
        .await?;
    Ok(done.rows_affected())
}

/// Moves the expiry of `holder`'s lease of machine id `machine` to `expires_at`; rows changed.
pub async fn renew_lease(
    conn: &mut PgConnection,
    machine: i32,
    holder: &str,
    expires_at: Timestamp,
) -> sqlx::Result<u64> {
    let done = sqlx::query!(
        "UPDATE machine_leases SET expires_at = $1 WHERE machine_id = $2 AND holder = $3",
        expires_at,
        machine,
        holder
    )
    .execute(conn)
    .await?;
    Ok(done.rows_affected())
}

/// Every machine-id lease.
pub async fn leases(conn: &mut PgConnection) -> sqlx::Result<Vec<MachineLeaseRow>> {
    sqlx::query_as!(
        MachineLeaseRow,
        r#"SELECT machine_id AS "machine_id!", holder AS "holder!", expires_at AS "expires_at!" FROM machine_leases"#
    )
    .fetch_all(conn)
    .await
}

/// Leases machine id `machine` to `holder` until `expires_at`, taking it from any other holder.
pub async fn lease(
    conn: &mut PgConnection,
    machine: i32,
    holder: &str,
    expires_at: Timestamp,
) -> sqlx::Result<u64> {
    let done = sqlx::query!(
        "INSERT INTO machine_leases (machine_id, holder, expires_at) VALUES ($1, $2, $3) ON CONFLICT (machine_id) DO UPDATE SET holder = excluded.holder, expires_at = excluded.expires_at",
        machine,
        holder,
        expires_at
    )
    .execute(conn)
    .await?;
    Ok(done.rows_affected())
}

/// Takes the session-level advisory lock `(namespace, key)` on this connection if it is free;
/// whether it was taken.
pub async fn try_liveness_lock(
    conn: &mut PgConnection,
    namespace: i64,
    key: i64,
) -> sqlx::Result<bool> {
    sqlx::query_scalar!(
        r#"SELECT pg_try_advisory_lock(($1::bigint)::int, ($2::bigint)::int) AS "got!""#,
        namespace,
        key
    )
    .fetch_one(conn)
    .await
}

/// Takes the session-level advisory lock `(namespace, key)` on this connection, waiting for it.
pub async fn liveness_lock(conn: &mut PgConnection, namespace: i64, key: i64) -> sqlx::Result<()> {
    // `IS NOT NULL`: the function returns `void`, which no Rust type decodes.
    sqlx::query_scalar!(
        r#"SELECT pg_advisory_lock(($1::bigint)::int, ($2::bigint)::int) IS NOT NULL AS "locked!""#,
        namespace,
        key
    )
    .fetch_one(conn)
    .await?;
    Ok(())
}

/// Whether this session still answers.
pub async fn ping(conn: &mut PgConnection) -> sqlx::Result<()> {
    sqlx::query_scalar!(r#"SELECT 1 AS "one!""#)
        .fetch_one(conn)
        .await?;
    Ok(())
}

/// Whether some session of this database holds the advisory lock `(namespace, key)`.
pub async fn liveness_held(
    conn: &mut PgConnection,
    namespace: i64,
    key: i64,
) -> sqlx::Result<bool> {
    sqlx::query_scalar!(
        r#"SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted AND database = (SELECT oid FROM pg_database WHERE datname = current_database()) AND classid::bigint = $1 AND objid::bigint = $2 AND objsubid = 2) AS "held!""#,
        namespace,
        key
    )
    .fetch_one(conn)
    .await
}

/// Takes the transaction-level advisory lock `key` (released at commit or rollback).
pub async fn xact_lock(conn: &mut PgConnection, key: i64) -> sqlx::Result<()> {
    // `IS NOT NULL`: the function returns `void`, which no Rust type decodes.
    sqlx::query_scalar!(
        r#"SELECT pg_advisory_xact_lock($1) IS NOT NULL AS "locked!""#,
        key
    )
    .fetch_one(conn)
    .await?;
    Ok(())
}
