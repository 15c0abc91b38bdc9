//! The console sessions' writes ([`OpenSession`] for a live key, [`EndSession`]); both delete
//! the expired sessions first.
//!
//! They run inside the writer's transaction; it must never commit, and never see a
//! token (only its hash arrives here).

use crate::sql::Conn;
use crate::sql::instant;

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
    let now = now_ms();
    match conn {
        Conn::Sqlite(c) => pattern_db_sqlite::console::delete_expired(c, now).await?,
        Conn::Postgres(c) => pattern_db_postgres::console::delete_expired(c, instant(now)?).await?,
    };
    Ok(())
}

/// Stores the session when its key is still live; whether it did.
async fn open(conn: &mut Conn<'_>, new: &NewConsoleSession) -> Result<bool> {
    delete_expired(conn).await?;
    let done = match conn {
        Conn::Sqlite(c) => {
            pattern_db_sqlite::console::insert_for_live_key(
                c,
                &new.token_hash,
                &new.key.to_string(),
                new.created_at,
                new.expires_at,
            )
            .await?
        }
        Conn::Postgres(c) => {
            pattern_db_postgres::console::insert_for_live_key(
                c,
                &new.token_hash,
                new.key.0,
                instant(new.created_at)?,
                instant(new.expires_at)?,
            )
            .await?
        }
    };
    Ok(done == 1)
}

/// Deletes the session; whether it existed (and had not expired).
async fn end(conn: &mut Conn<'_>, token_hash: &str) -> Result<bool> {
    delete_expired(conn).await?;
    let done = match conn {
        Conn::Sqlite(c) => pattern_db_sqlite::console::delete(c, token_hash).await?,
        Conn::Postgres(c) => pattern_db_postgres::console::delete(c, token_hash).await?,
    };
    Ok(done == 1)
}
