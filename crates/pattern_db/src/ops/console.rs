//! The console sessions' writes ([`OpenSession`] for a live key, [`EndSession`]); both delete
//! the expired sessions first.
//!
//! They run inside the writer's transaction; it must never commit, and never see a
//! token (only its hash arrives here).

use crate::sql::Conn;

use super::{Ctx, now_ms};
use crate::console::NewConsoleSession;
use crate::error::Result;
use crate::runs::RunClaim;
use crate::writer::{Locks, Write};

/// Stores a session when its key is still live; outputs whether it did.
#[derive(Debug)]
pub(crate) struct OpenSession(pub(crate) NewConsoleSession);

impl Write for OpenSession {
    type Output = bool;

    fn locks(&self) -> Locks {
        // Rows of their own, keyed by a fresh token hash: no agent lock.
        Locks::none()
    }

    async fn apply(
        &self,
        conn: &mut Conn<'_>,
        _ctx: &Ctx,
        _fence: Option<&RunClaim>,
    ) -> Result<bool> {
        open(conn, &self.0).await
    }
}

/// Ends the session with this token hash; outputs whether there was one.
#[derive(Debug)]
pub(crate) struct EndSession {
    pub(crate) token_hash: String,
}

impl Write for EndSession {
    type Output = bool;

    fn locks(&self) -> Locks {
        Locks::none()
    }

    async fn apply(
        &self,
        conn: &mut Conn<'_>,
        _ctx: &Ctx,
        _fence: Option<&RunClaim>,
    ) -> Result<bool> {
        end(conn, &self.token_hash).await
    }
}

async fn delete_expired(conn: &mut Conn<'_>) -> Result<()> {
    crate::sql::query("DELETE FROM console_sessions WHERE expires_at <= $1")
        .bind(now_ms())
        .execute(&mut *conn)
        .await?;
    Ok(())
}

/// Stores the session when its key is still live; whether it did.
async fn open(conn: &mut Conn<'_>, new: &NewConsoleSession) -> Result<bool> {
    delete_expired(conn).await?;
    let done = crate::sql::query(
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
async fn end(conn: &mut Conn<'_>, token_hash: &str) -> Result<bool> {
    delete_expired(conn).await?;
    let done = crate::sql::query("DELETE FROM console_sessions WHERE token_hash = $1")
        .bind(token_hash)
        .execute(&mut *conn)
        .await?;
    Ok(done.rows_affected() == 1)
}
