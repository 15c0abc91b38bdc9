//! Sessions of the web console's pages that work without JavaScript (migration
//! `0017_console_sessions`, decision 0022): logging in with an organization API key opens one,
//! and the browser then holds only its token (in an HttpOnly cookie), never the key.
//!
//! A token is `pcs_` followed by 64 hex characters from the operating system's random source;
//! only its SHA-256 is stored, with the key it acts for and when it expires. A session
//! authenticates only while it has not expired and its key is not revoked (one indexed read
//! joined with `api_keys`: `pattern_db_{sqlite,postgres}::console`, checked statements), so
//! revoking a key ends its console sessions at once; logging out deletes the row. Opening or
//! ending a session also deletes the expired ones. This module must never store, log or print a
//! token, and never answer for a revoked key or an expired session.

use crate::StorageError;
use std::fmt;
use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::auth::{ApiKey, hash, key_from_plain, random_token, well_formed_token};
use crate::db::Database;
use crate::error::Result;
use crate::ops::console::{EndSession, OpenSession};
use crate::ops::{self, FromStored, StoredTime, from_ms};
use crate::sql::{Conn, instant};

/// What every console session token starts with.
pub const CONSOLE_TOKEN_PREFIX: &str = "pcs_";
/// The longest a console session may last.
pub const MAX_CONSOLE_SESSION: Duration = Duration::from_secs(30 * 24 * 3600);

/// A live console session: the key it acts for (and so its organization) and its end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsoleSession {
    /// The live key the session acts for.
    pub key: ApiKey,
    /// When it stops authenticating.
    pub expires_at: DateTime<Utc>,
}

/// A session just opened and its token, which exists only here: hand it to the browser.
#[derive(Clone, PartialEq, Eq)]
pub struct IssuedConsoleSession {
    /// The session.
    pub session: ConsoleSession,
    /// The token to hand to the browser.
    pub token: String,
}

impl fmt::Debug for IssuedConsoleSession {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IssuedConsoleSession")
            .field("session", &self.session)
            .field("token", &"***")
            .finish()
    }
}

/// A session from either engine's checked row: its key ([`FromStored`]) and when it expires.
fn session_from_plain(
    key: impl FromStored<ApiKey>,
    expires_at: impl StoredTime,
) -> Result<ConsoleSession> {
    Ok(ConsoleSession {
        key: key_from_plain(key)?,
        expires_at: expires_at.time(),
    })
}

/// What the writer stores for a new session.
#[derive(Debug, Clone)]
pub(crate) struct NewConsoleSession {
    pub(crate) token_hash: String,
    pub(crate) key: crate::auth::ApiKeyId,
    pub(crate) created_at: i64,
    pub(crate) expires_at: i64,
}

impl Database {
    /// Opens a console session for the live API key `secret`, lasting `lifetime` (1 second to
    /// [`MAX_CONSOLE_SESSION`]). `None` when the key is unknown, malformed or revoked (nothing is
    /// stored then).
    pub async fn open_console_session(
        &self,
        secret: &str,
        lifetime: Duration,
    ) -> Result<Option<IssuedConsoleSession>> {
        if lifetime < Duration::from_secs(1) || lifetime > MAX_CONSOLE_SESSION {
            return Err(StorageError::Config(format!(
                "a console session lasts 1 second to {} days",
                MAX_CONSOLE_SESSION.as_secs() / 86_400
            ))
            .into());
        }
        let Some(key) = self.authenticate_api_key(secret).await? else {
            return Ok(None);
        };
        let token = random_token(CONSOLE_TOKEN_PREFIX)?;
        let created_at = ops::now_ms();
        let expires_at =
            created_at.saturating_add(i64::try_from(lifetime.as_millis()).unwrap_or(i64::MAX));
        let new = NewConsoleSession {
            token_hash: hash(&token),
            key: key.id,
            created_at,
            expires_at,
        };
        if !self.write(OpenSession(new)).await? {
            // The key was revoked between the read and the write.
            return Ok(None);
        }
        Ok(Some(IssuedConsoleSession {
            session: ConsoleSession {
                key,
                expires_at: from_ms(expires_at),
            },
            token,
        }))
    }

    /// The live session with this token; `None` for an unknown, malformed, expired or ended
    /// one, or one whose key was revoked.
    pub async fn console_session(&self, token: &str) -> Result<Option<ConsoleSession>> {
        if !well_formed_token(token, CONSOLE_TOKEN_PREFIX) {
            return Ok(None);
        }
        let (token_hash, now) = (hash(token), ops::now_ms());
        let mut pooled = self.reader().acquire().await?;
        let session = match &mut pooled.conn() {
            Conn::Sqlite(c) => pattern_db_sqlite::console::live(c, &token_hash, now)
                .await?
                .map(|(key, expires_at)| session_from_plain(key, expires_at)),
            Conn::Postgres(c) => pattern_db_postgres::console::live(c, &token_hash, instant(now)?)
                .await?
                .map(|(key, expires_at)| session_from_plain(key, expires_at)),
        };
        session.transpose()
    }

    /// Ends the session with this token (logging out); `false` when there was none.
    pub async fn end_console_session(&self, token: &str) -> Result<bool> {
        if !well_formed_token(token, CONSOLE_TOKEN_PREFIX) {
            return Ok(false);
        }
        self.write(EndSession {
            token_hash: hash(token),
        })
        .await
    }
}
