//! The SQL of console session writes: open a session for a live key, end one; both delete the
//! expired sessions first.
//!
//! Runs inside the writer's transaction like every op; it must never commit, and never see a
//! token (only its hash arrives here).

use sqlx::AnyConnection;

use super::now_ms;
use crate::console::NewConsoleSession;
use crate::error::Result;

async fn delete_expired(conn: &mut AnyConnection) -> Result<()> {
    sqlx::query("DELETE FROM console_sessions WHERE expires_at <= $1")
        .bind(now_ms())
        .execute(&mut *conn)
        .await?;
    Ok(())
}

/// Stores the session when its key is still live; whether it did.
pub(crate) async fn open(conn: &mut AnyConnection, new: &NewConsoleSession) -> Result<bool> {
    delete_expired(conn).await?;
    let done = sqlx::query(
        "INSERT INTO console_sessions (token_hash, api_key_id, created_at, expires_at) \
         SELECT $1, id, $2, $3 FROM api_keys WHERE id = $4 AND revoked_at IS NULL",
    )
    .bind(&new.token_hash)
    .bind(new.created_at)
    .bind(new.expires_at)
    .bind(new.key.to_string())
    .execute(&mut *conn)
    .await?;
    Ok(done.rows_affected() == 1)
}

/// Deletes the session; whether it existed (and had not expired).
pub(crate) async fn end(conn: &mut AnyConnection, token_hash: &str) -> Result<bool> {
    delete_expired(conn).await?;
    let done = sqlx::query("DELETE FROM console_sessions WHERE token_hash = $1")
        .bind(token_hash)
        .execute(&mut *conn)
        .await?;
    Ok(done.rows_affected() == 1)
}
