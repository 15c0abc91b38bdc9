//! Statements on `processes` rows (every open database handle: its liveness lock key and the
//! expiry its heartbeat renews) and `machine_leases` rows (the snowflake machine id each process
//! leases).
//!
//! It must never judge whether a process is alive or which machine id is free: the caller reads
//! the rows, looks at the liveness locks, and decides.

use sqlx::SqliteConnection;

/// A process's liveness lock key and expiry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProcessRow {
    /// `lock_key`.
    pub lock_key: i64,
    /// `expires_at` (milliseconds since the epoch).
    pub expires_at: i64,
}

/// A `machine_leases` row as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MachineLeaseRow {
    /// `machine_id`.
    pub machine_id: i64,
    /// `holder`.
    pub holder: String,
    /// `expires_at` (milliseconds since the epoch).
    pub expires_at: i64,
}

/// Stores process `holder`, or gives an existing row of that name a new lock key and expiry.
#[allow(clippy::too_many_arguments)]
pub async fn register(
    conn: &mut SqliteConnection,
    holder: &str,
    lock_key: i64,
    pid: i64,
    host: &str,
    now: i64,
    expires_at: i64,
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
    conn: &mut SqliteConnection,
    holder: &str,
    lock_key: i64,
    pid: i64,
    host: &str,
    now: i64,
    expires_at: i64,
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
pub async fn process(
    conn: &mut SqliteConnection,
    holder: &str,
) -> sqlx::Result<Option<ProcessRow>> {
    sqlx::query_as!(
        ProcessRow,
        r#"SELECT lock_key AS "lock_key!: i64", expires_at AS "expires_at!: i64" FROM processes WHERE holder = $1"#,
        holder
    )
    .fetch_optional(conn)
    .await
}

/// Moves process `holder`'s expiry to `expires_at`; rows changed.
pub async fn renew(
    conn: &mut SqliteConnection,
    holder: &str,
    expires_at: i64,
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
pub async fn delete(conn: &mut SqliteConnection, holder: &str) -> sqlx::Result<u64> {
    let done = sqlx::query!("DELETE FROM processes WHERE holder = $1", holder)
        .execute(conn)
        .await?;
    Ok(done.rows_affected())
}

/// Deletes the machine-id leases of `holder`; rows deleted.
pub async fn delete_leases(conn: &mut SqliteConnection, holder: &str) -> sqlx::Result<u64> {
    let done = sqlx::query!("DELETE FROM machine_leases WHERE holder = $1", holder)
        .execute(conn)
        .await?;
    Ok(done.rows_affected())
}

/// Moves the expiry of `holder`'s lease of machine id `machine` to `expires_at`; rows changed.
pub async fn renew_lease(
    conn: &mut SqliteConnection,
    machine: i64,
    holder: &str,
    expires_at: i64,
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
pub async fn leases(conn: &mut SqliteConnection) -> sqlx::Result<Vec<MachineLeaseRow>> {
    sqlx::query_as!(
        MachineLeaseRow,
        r#"SELECT machine_id AS "machine_id!: i64", holder AS "holder!", expires_at AS "expires_at!: i64" FROM machine_leases"#
    )
    .fetch_all(conn)
    .await
}

/// Leases machine id `machine` to `holder` until `expires_at`, taking it from any other holder.
pub async fn lease(
    conn: &mut SqliteConnection,
    machine: i64,
    holder: &str,
    expires_at: i64,
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
