//! Statements of server auth: `api_keys` rows (insert, revoke, the key of an organization, a
//! live key by its secret's hash, an organization's keys) and whether an organization exists.
//!
//! It must never see a secret (only its hash arrives here) and never decide what a missing row
//! or a revoked key means: the caller judges every row it reads.

use sqlx::SqliteConnection;

/// An `api_keys` row without its hash.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyRow {
    /// `id` (a UUID's text).
    pub id: String,
    /// `organization_id` (a UUID's text).
    pub organization_id: String,
    /// `name`.
    pub name: String,
    /// `prefix`.
    pub prefix: String,
    /// `created_at` (milliseconds since the epoch).
    pub created_at: i64,
    /// `revoked_at` (milliseconds since the epoch).
    pub revoked_at: Option<i64>,
}

/// A new `api_keys` row.
#[derive(Clone, Debug)]
pub struct NewKey<'a> {
    /// `id`.
    pub id: &'a str,
    /// `organization_id`.
    pub organization_id: &'a str,
    /// `name`.
    pub name: &'a str,
    /// `prefix`.
    pub prefix: &'a str,
    /// `key_hash`.
    pub key_hash: &'a str,
    /// `created_at`.
    pub created_at: i64,
}

/// Whether organization `org` exists.
pub async fn organization_exists(conn: &mut SqliteConnection, org: &str) -> sqlx::Result<bool> {
    let row = sqlx::query_scalar!(
        r#"SELECT id AS "id!" FROM protocol_organizations WHERE id = $1"#,
        org
    )
    .fetch_optional(conn)
    .await?;
    Ok(row.is_some())
}

/// Inserts a key; rows changed. The engine's errors (a hash stored already) come back as they
/// are.
pub async fn insert_key(conn: &mut SqliteConnection, key: &NewKey<'_>) -> sqlx::Result<u64> {
    let done = sqlx::query!(
        "INSERT INTO api_keys (id, organization_id, name, prefix, key_hash, created_at) VALUES ($1, $2, $3, $4, $5, $6)",
        key.id,
        key.organization_id,
        key.name,
        key.prefix,
        key.key_hash,
        key.created_at
    )
    .execute(conn)
    .await?;
    Ok(done.rows_affected())
}

/// Revokes live key `id` of `org` at `now`; rows changed (0: unknown, another organization's,
/// or revoked already).
pub async fn revoke_key(
    conn: &mut SqliteConnection,
    id: &str,
    org: &str,
    now: i64,
) -> sqlx::Result<u64> {
    let done = sqlx::query!(
        "UPDATE api_keys SET revoked_at = $1 WHERE id = $2 AND organization_id = $3 AND revoked_at IS NULL",
        now,
        id,
        org
    )
    .execute(conn)
    .await?;
    Ok(done.rows_affected())
}

/// Key `id` of `org`, revoked or not.
pub async fn key_of(
    conn: &mut SqliteConnection,
    id: &str,
    org: &str,
) -> sqlx::Result<Option<KeyRow>> {
    sqlx::query_as!(
        KeyRow,
        r#"SELECT id AS "id!", organization_id AS "organization_id!", name AS "name!", prefix AS "prefix!", created_at AS "created_at!", revoked_at AS "revoked_at?" FROM api_keys WHERE id = $1 AND organization_id = $2"#,
        id,
        org
    )
    .fetch_optional(conn)
    .await
}

/// The live key whose secret hashes to `hash`, if any.
pub async fn live_key_by_hash(
    conn: &mut SqliteConnection,
    hash: &str,
) -> sqlx::Result<Option<KeyRow>> {
    sqlx::query_as!(
        KeyRow,
        r#"SELECT id AS "id!", organization_id AS "organization_id!", name AS "name!", prefix AS "prefix!", created_at AS "created_at!", revoked_at AS "revoked_at?" FROM api_keys WHERE key_hash = $1 AND revoked_at IS NULL"#,
        hash
    )
    .fetch_optional(conn)
    .await
}

/// `org`'s keys, newest first (revoked ones included).
pub async fn keys_of(conn: &mut SqliteConnection, org: &str) -> sqlx::Result<Vec<KeyRow>> {
    sqlx::query_as!(
        KeyRow,
        r#"SELECT id AS "id!", organization_id AS "organization_id!", name AS "name!", prefix AS "prefix!", created_at AS "created_at!", revoked_at AS "revoked_at?" FROM api_keys WHERE organization_id = $1 ORDER BY created_at DESC, id DESC"#,
        org
    )
    .fetch_all(conn)
    .await
}
