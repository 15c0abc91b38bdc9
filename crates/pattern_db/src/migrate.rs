//! Embedded, reversible, checksummed migrations for both backends.
//!
//! The SQL lives in the top-level `migrations/` folder and is compiled in by `build.rs`; sqlx's
//! migrator applies it and records a checksum per version. A changed file is refused with
//! [`Error::MigrationChecksumMismatch`], never silently re-run. This module must never edit or
//! skip a migration on its own.

use std::borrow::Cow;

use serde::Serialize;
use sqlx::migrate::{Migration, MigrationType, Migrator};
use sqlx::{AnyPool, Row, SqlSafeStr};

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

/// Applies every pending migration.
pub(crate) async fn up(pool: &AnyPool, backend: Backend) -> Result<()> {
    migrator(backend).run(pool).await?;
    Ok(())
}

/// Reverts applied migrations down to (and keeping) `target`; `0` reverts everything.
pub(crate) async fn down_to(pool: &AnyPool, backend: Backend, target: i64) -> Result<()> {
    migrator(backend).undo(pool, target).await?;
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
pub(crate) async fn status(pool: &AnyPool, backend: Backend) -> Result<Vec<MigrationStatus>> {
    let exists: bool = match backend {
        Backend::Sqlite => sqlx::query(
            "SELECT COUNT(*) AS n FROM sqlite_master WHERE type = 'table' AND name = '_sqlx_migrations'",
        )
        .fetch_one(pool)
        .await?
        .try_get::<i64, _>("n")?
            > 0,
        Backend::Postgres => sqlx::query("SELECT COUNT(*) AS n FROM pg_tables WHERE tablename = '_sqlx_migrations'")
            .fetch_one(pool)
            .await?
            .try_get::<i64, _>("n")?
            > 0,
    };
    let applied: Vec<i64> = if exists {
        sqlx::query("SELECT version FROM _sqlx_migrations WHERE success ORDER BY version")
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
