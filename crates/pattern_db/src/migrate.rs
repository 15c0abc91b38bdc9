//! Embedded, reversible, checksummed migrations for both backends.
//!
//! The SQL lives in the top-level `migrations/` folder and is compiled in by `build.rs`; sqlx's
//! migrator applies it and records a checksum per version. A changed file is refused with
//! [`StorageError::MigrationChecksumMismatch`], never silently re-run. This module must never edit
//! or skip a migration on its own.
//!
//! A SQLite migration whose file starts with [`FOREIGN_KEYS_OFF`] rebuilds tables that others
//! reference (SQLite cannot change constraints in place, and dropping a parent table with
//! foreign keys on would cascade). It is applied here, not by sqlx: foreign keys off for the
//! connection, then one `BEGIN IMMEDIATE` transaction that checks the migration is still
//! pending, runs it, requires `PRAGMA foreign_key_check` to find nothing, and records it in
//! `_sqlx_migrations` (as sqlx would) before it commits; so it is applied once, whole, with its
//! record, even when several processes open the same file at once.

use crate::StorageError;
use std::borrow::Cow;

use crate::sql::Pool;
use serde::Serialize;
use sqlx::SqlSafeStr;
use sqlx::migrate::{Migration, MigrationType, Migrator};

use crate::Backend;
use crate::error::Result;

mod embedded {
    include!(concat!(env!("OUT_DIR"), "/migrations.rs"));
}

/// The migrator for a backend, with every migration shipped in this build.
pub(crate) fn migrator(backend: Backend) -> Migrator {
    let list = match backend {
        Backend::Sqlite => embedded::SQLITE,
        Backend::Postgres => embedded::POSTGRES,
    };
    let mut migrations = Vec::with_capacity(list.len() * 2);
    for &(version, description, up, down) in list {
        migrations.push(Migration::new(
            version,
            Cow::Borrowed(description),
            MigrationType::ReversibleUp,
            up.into_sql_str(),
            false,
        ));
        migrations.push(Migration::new(
            version,
            Cow::Borrowed(description),
            MigrationType::ReversibleDown,
            down.into_sql_str(),
            false,
        ));
    }
    Migrator::with_migrations(migrations)
}

/// The first line of a SQLite migration that must run with foreign keys off.
pub(crate) const FOREIGN_KEYS_OFF: &str = "-- pattern: foreign-keys-off";

/// The SQLite migrations of `kind` that run with foreign keys off, by version.
fn foreign_keys_off(migrator: &Migrator, kind: MigrationType) -> Vec<&Migration> {
    migrator
        .iter()
        .filter(|m| m.migration_type == kind && m.sql.as_str().starts_with(FOREIGN_KEYS_OFF))
        .collect()
}

/// Applies every pending migration.
pub(crate) async fn up(pool: &Pool, backend: Backend) -> Result<()> {
    let migrator = migrator(backend);
    if backend == Backend::Sqlite {
        for m in foreign_keys_off(&migrator, MigrationType::ReversibleUp) {
            run_to(&migrator, pool, m.version - 1).await?;
            apply_without_foreign_keys(pool, m, true).await?;
        }
    }
    match pool {
        Pool::Sqlite(p) => migrator.run(p).await?,
        Pool::Postgres(p) => migrator.run(p).await?,
    }
    Ok(())
}

/// Applies pending migrations up to (and including) `version`.
async fn run_to(migrator: &Migrator, pool: &Pool, version: i64) -> Result<()> {
    match pool {
        Pool::Sqlite(p) => migrator.run_to(version, p).await?,
        Pool::Postgres(p) => migrator.run_to(version, p).await?,
    }
    Ok(())
}

/// Reverts applied migrations down to (and keeping) `version`.
async fn undo(migrator: &Migrator, pool: &Pool, version: i64) -> Result<()> {
    match pool {
        Pool::Sqlite(p) => migrator.undo(p, version).await?,
        Pool::Postgres(p) => migrator.undo(p, version).await?,
    }
    Ok(())
}

/// Reverts applied migrations down to (and keeping) `target`; `0` reverts everything.
pub(crate) async fn down_to(pool: &Pool, backend: Backend, target: i64) -> Result<()> {
    let migrator = migrator(backend);
    if backend == Backend::Sqlite {
        let mut downs = foreign_keys_off(&migrator, MigrationType::ReversibleDown);
        downs.retain(|m| m.version > target);
        downs.sort_by_key(|m| std::cmp::Reverse(m.version));
        for m in downs {
            undo(&migrator, pool, m.version).await?;
            apply_without_foreign_keys(pool, m, false).await?;
        }
    }
    undo(&migrator, pool, target).await?;
    Ok(())
}

/// Runs one SQLite migration (`up`: apply and record; otherwise: revert and forget) with
/// foreign keys off, in one transaction with its bookkeeping; nothing when it is already in the
/// wanted state. Foreign keys are switched on again whatever happens.
async fn apply_without_foreign_keys(pool: &Pool, m: &Migration, up: bool) -> Result<()> {
    let mut conn = pool.acquire().await?;
    crate::sql::query("PRAGMA foreign_keys = OFF")
        .execute(&mut conn)
        .await?;
    let outcome = async {
        crate::sql::query("BEGIN IMMEDIATE")
            .execute(&mut conn)
            .await?;
        let inner = async {
            let applied =
                crate::sql::query("SELECT COUNT(*) AS n FROM _sqlx_migrations WHERE version = $1")
                    .bind(m.version)
                    .fetch_one(&mut conn)
                    .await?
                    .try_get::<i64, _>("n")?
                    > 0;
            if applied != up {
                conn.conn().execute_raw(m.sql.clone()).await?;
                let dangling = crate::sql::query("PRAGMA foreign_key_check")
                    .fetch_all(&mut conn)
                    .await?;
                if let Some(row) = dangling.first() {
                    let table: String = row.try_get(0).unwrap_or_default();
                    return Err(crate::Error::Storage(StorageError::MigrationForeignKeys {
                        version: m.version,
                        table,
                        rows: dangling.len(),
                    }));
                }
                if up {
                    crate::sql::query(
                        "INSERT INTO _sqlx_migrations \
                         (version, description, success, checksum, execution_time) \
                         VALUES ($1, $2, TRUE, $3, -1)",
                    )
                    .bind(m.version)
                    .bind(m.description.to_string())
                    .bind(m.checksum.to_vec())
                    .execute(&mut conn)
                    .await?;
                } else {
                    crate::sql::query("DELETE FROM _sqlx_migrations WHERE version = $1")
                        .bind(m.version)
                        .execute(&mut conn)
                        .await?;
                }
            }
            Ok(())
        }
        .await;
        match inner {
            Ok(()) => {
                crate::sql::query("COMMIT").execute(&mut conn).await?;
                Ok(())
            }
            Err(e) => {
                let _ = crate::sql::query("ROLLBACK").execute(&mut conn).await;
                Err(e)
            }
        }
    }
    .await;
    let restored = crate::sql::query("PRAGMA foreign_keys = ON")
        .execute(&mut conn)
        .await;
    outcome?;
    restored?;
    Ok(())
}

/// One migration and whether it is applied.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MigrationStatus {
    /// Version number.
    pub version: i64,
    /// Description from the file name.
    pub description: String,
    /// Whether the database has it.
    pub applied: bool,
}

/// Every migration shipped in this build and whether the database has applied it.
pub(crate) async fn status(pool: &Pool, backend: Backend) -> Result<Vec<MigrationStatus>> {
    let exists: bool = match backend {
        Backend::Sqlite => crate::sql::query(
            "SELECT COUNT(*) AS n FROM sqlite_master WHERE type = 'table' AND name = '_sqlx_migrations'",
        )
        .fetch_one(pool)
        .await?
        .try_get::<i64, _>("n")?
            > 0,
        Backend::Postgres => crate::sql::query("SELECT COUNT(*) AS n FROM pg_tables WHERE tablename = '_sqlx_migrations'")
            .fetch_one(pool)
            .await?
            .try_get::<i64, _>("n")?
            > 0,
    };
    let applied: Vec<i64> = if exists {
        crate::sql::query("SELECT version FROM _sqlx_migrations WHERE success ORDER BY version")
            .fetch_all(pool)
            .await?
            .iter()
            .map(|r| r.try_get::<i64, _>("version"))
            .collect::<std::result::Result<_, _>>()?
    } else {
        Vec::new()
    };
    Ok(migrator(backend)
        .iter()
        .filter(|m| m.migration_type == MigrationType::ReversibleUp)
        .map(|m| MigrationStatus {
            version: m.version,
            description: m.description.to_string(),
            applied: applied.contains(&m.version),
        })
        .collect())
}
