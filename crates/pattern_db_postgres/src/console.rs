//! Statements on `console_sessions` rows: the web console's sessions (the expired ones' delete,
//! a session's insert for a live key, its delete, and a live session with its key).
//!
//! It must never see a token (only its hash arrives here) and never decide what a missing,
//! expired or revoked row means: the insert and the read state the liveness conditions in SQL,
//! and the caller judges what comes back.

use sqlx::PgConnection;

use crate::auth::KeyRow;
use crate::{Timestamp, Uuid};

/// Deletes the sessions that expired at or before `now`; rows deleted.
pub async fn delete_expired(conn: &mut PgConnection, now: Timestamp) -> sqlx::Result<u64> {
    let done = sqlx::query!("DELETE FROM console_sessions WHERE expires_at <= $1", now)
        .execute(conn)
        .await?;
    Ok(done.rows_affected())
}

/// Inserts a session of key `key` when the key exists and is not revoked; rows changed (0
/// otherwise).
pub async fn insert_for_live_key(
    conn: &mut PgConnection,
    token_hash: &str,
    key: Uuid,
    created_at: Timestamp,
    expires_at: Timestamp,
) -> sqlx::Result<u64> {
    let done = sqlx::query!(
        "INSERT INTO console_sessions (token_hash, api_key_id, created_at, expires_at) SELECT $1, id, $2, $3 FROM api_keys WHERE id = $4 AND revoked_at IS NULL",
        token_hash,
        created_at,
        expires_at,
        key
    )
    .execute(conn)
    .await?;
    Ok(done.rows_affected())
}

/// Deletes the session with `token_hash`; rows deleted.
pub async fn delete(conn: &mut PgConnection, token_hash: &str) -> sqlx::Result<u64> {
    let done = sqlx::query!(
        "DELETE FROM console_sessions WHERE token_hash = $1",
        token_hash
    )
    .execute(conn)
    .await?;
    Ok(done.rows_affected())
}

/// The session with `token_hash` that has not expired at `now` and whose key is not revoked:
/// its key and when it expires; `None` otherwise.
pub async fn live(
    conn: &mut PgConnection,
    token_hash: &str,
    now: Timestamp,
) -> sqlx::Result<Option<(KeyRow, Timestamp)>> {
    let row = sqlx::query!(
        r#"SELECT k.id AS "id!", k.organization_id AS "organization_id!", k.name AS "name!", k.prefix AS "prefix!", k.created_at AS "created_at!", k.revoked_at AS "revoked_at?", s.expires_at AS "expires_at!" FROM console_sessions s JOIN api_keys k ON k.id = s.api_key_id WHERE s.token_hash = $1 AND s.expires_at > $2 AND k.revoked_at IS NULL"#,
        token_hash,
        now
    )
    .fetch_optional(conn)
    .await?;
    Ok(row.map(|r| {
        (
            KeyRow {
                id: r.id,
                organization_id: r.organization_id,
                name: r.name,
                prefix: r.prefix,
                created_at: r.created_at,
                revoked_at: r.revoked_at,
            },
            r.expires_at,
        )
    }))
}
