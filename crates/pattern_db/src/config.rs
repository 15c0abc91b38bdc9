//! Configuration of a [`crate::Database`]: which backend, how durable, how large, how grouped.
//!
//! Plain values with defaults that favour durability. This module must never open a connection.

use crate::StorageError;
use std::time::Duration;

use crate::error::{Error, Result, redact_url};

/// Which engine a URL selects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Backend {
    /// Embedded SQLite, one file, WAL.
    Sqlite,
    /// PostgreSQL server.
    Postgres,
}

impl Backend {
    /// Lower-case name, as in URLs and error messages.
    pub fn name(self) -> &'static str {
        match self {
            Backend::Sqlite => "sqlite",
            Backend::Postgres => "postgres",
        }
    }

    /// Picks the backend from a URL's scheme: `sqlite:` or `postgres:`/`postgresql:`.
    pub fn from_url(url: &str) -> Result<Self> {
        let invalid = |reason: &str| {
            Error::Storage(StorageError::InvalidUrl {
                url: redact_url(url),
                reason: reason.to_owned(),
            })
        };
        let Some((scheme, rest)) = url.split_once(':') else {
            return Err(invalid(
                "expected `sqlite://PATH` or `postgres://USER@HOST:PORT/DB`",
            ));
        };
        match scheme {
            "sqlite" => {
                let path = rest.trim_start_matches("//");
                let path = path.split('?').next().unwrap_or_default();
                if path.is_empty() {
                    return Err(invalid("sqlite URL has no file path"));
                }
                if path == ":memory:" {
                    return Err(invalid(
                        "in-memory SQLite is not supported: every connection would see its own empty \
                         database; use a file in a temporary directory",
                    ));
                }
                Ok(Backend::Sqlite)
            }
            "postgres" | "postgresql" => {
                let rest = rest
                    .strip_prefix("//")
                    .ok_or_else(|| invalid("postgres URL must start with postgres://"))?;
                let host = rest.rsplit('@').next().unwrap_or_default();
                if host.is_empty() || host.starts_with('/') {
                    return Err(invalid("postgres URL has no host"));
                }
                Ok(Backend::Postgres)
            }
            other => Err(invalid(&format!(
                "unsupported scheme `{other}` (use sqlite or postgres)"
            ))),
        }
    }
}

/// How hard SQLite works to keep a commit across power loss. PostgreSQL follows its own
/// `synchronous_commit` setting and ignores this.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Durability {
    /// `synchronous=FULL`: a commit is on disk before it is acknowledged; survives power loss.
    #[default]
    Full,
    /// `synchronous=NORMAL`: survives a process crash, but the last commits before a power loss
    /// may be lost. About 1.5x the single-writer commit rate; group commit makes the gap smaller.
    Normal,
}

/// How snowflake ids get their machine id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MachineId {
    /// Lease a free machine id from the database (`machine_leases`), renewed while open.
    #[default]
    Lease,
    /// Use this id; the operator guarantees no other live process uses it.
    Fixed(u16),
}

/// Batches at the end of an imported history whose messages stay as any other's
/// ([`DbConfig::compress_imported_from`]): more than a context build reads by default
/// (context_v2's `max_batches`, 200), so the next turn after an import decompresses nothing.
pub const IMPORT_PLAIN_BATCHES: usize = 256;

/// Everything needed to open a [`crate::Database`].
#[derive(Debug, Clone)]
pub struct DbConfig {
    /// `sqlite://PATH` (created if missing) or `postgres://USER@HOST:PORT/DB`.
    pub url: String,
    /// SQLite durability; default [`Durability::Full`].
    pub durability: Durability,
    /// Largest serialized content of one message, in bytes; default 1 MiB.
    pub max_content_bytes: usize,
    /// SQLite: a message whose stored content is at least this many bytes is stored compressed
    /// (zstd) when that makes it at least a sixteenth smaller; `None` stores every message as
    /// text. Default 1 KiB: long replies and tool results shrink to about half, while chat-sized
    /// messages, read on every turn, stay text (at 387 bytes compressing saved 35 % of their
    /// bytes but made an uncached read of the newest 50 batches 1.8x slower and an import 1.2x;
    /// decision 0025, "Stop 40"). Never below 64. PostgreSQL compresses large values itself.
    pub compress_content_from: Option<usize>,
    /// SQLite: when batches are archived (they left the context window: summarised, cut or
    /// moved out by retention), their messages of at least this many bytes are rewritten
    /// compressed, in the archiving transaction, where that makes them at least a sixteenth
    /// smaller, and every archived row is moved to the table's end so the pages it leaves are
    /// freed for later writes (decision 0025, "Stop 46"). Archived history is read rarely (it has left full-text search and the newest
    /// batches), so its bytes matter more than a read's microseconds: default 64 (every
    /// chat-sized message; 387-byte English shrinks by about a third), `None` leaves archived
    /// messages as they were written. Never below 64. PostgreSQL compresses large values itself.
    pub compress_archived_from: Option<usize>,
    /// SQLite: an imported history's messages (`import_legacy`, agent imports) of at least this
    /// many bytes are stored compressed (where that makes them at least a sixteenth smaller),
    /// except those of the import's newest [`IMPORT_PLAIN_BATCHES`] batches, which the next
    /// context builds read and which stay as `compress_content_from` says. An import brings
    /// history that is mostly older than any context window: read by search hits and by
    /// scrolling back, rarely, so its bytes matter more than a read's microseconds (decision
    /// 0025, "Stop 47"). Default 64; `None` stores imported messages as any other. Never below
    /// 64. PostgreSQL compresses large values itself.
    pub compress_imported_from: Option<usize>,
    /// Connections for reads; default 4.
    pub read_connections: u32,
    /// Writer connections on PostgreSQL (SQLite always has exactly one writer); default 4.
    pub pg_write_connections: u32,
    /// Most writes committed together in one transaction; default 256.
    pub max_group: usize,
    /// Writes that may wait for the writer before callers wait too; default 4096.
    pub queue_capacity: usize,
    /// Machine id source for snowflake ids; default a database lease.
    pub machine_id: MachineId,
    /// How long a batch begun without a run claim (by tools and tests through
    /// [`crate::MessageStore::begin_batch`]) stays open without a step before recovery may
    /// abandon it. A run's batch lives as long as its claim instead.
    pub batch_lease: Duration,
    /// How long a machine-id lease lasts without a heartbeat (renewed by the process heartbeat;
    /// a dead holder's lease is free at once where the database can tell it died).
    pub machine_lease: Duration,
    /// How long this process's registration lasts without a heartbeat (renewed every quarter
    /// of it): when it lapses, its runs' claims are taken over and their batches abandoned.
    /// A process that dies is usually seen dead sooner (its liveness lock is released at once).
    /// Default 20 s.
    pub run_lease: Duration,
    /// Time allowed to connect; default 10 s.
    pub connect_timeout: Duration,
    /// Identifies this process as the owner of the batches it opens.
    pub run_owner: String,
    /// Apply pending migrations on open (default). Operator tools that inspect a database
    /// without changing it turn this off; they must then use [`MachineId::Fixed`], since the
    /// lease table may not exist yet.
    pub migrate_on_open: bool,
    /// Record an embedding job with every content write, in its transaction (messages with
    /// text, block values, archival passages); default off. Turned on by the layer that runs
    /// an embedder (db_v2).
    pub record_embedding_jobs: bool,
}

impl DbConfig {
    /// Defaults for the given URL.
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            durability: Durability::Full,
            max_content_bytes: 1024 * 1024,
            compress_content_from: Some(1024),
            compress_archived_from: Some(pattern_db_sqlite::messages::COMPRESS_FROM),
            compress_imported_from: Some(pattern_db_sqlite::messages::COMPRESS_FROM),
            read_connections: 4,
            pg_write_connections: 4,
            max_group: 256,
            queue_capacity: 4096,
            machine_id: MachineId::Lease,
            batch_lease: Duration::from_secs(600),
            machine_lease: Duration::from_secs(300),
            run_lease: Duration::from_secs(20),
            connect_timeout: Duration::from_secs(10),
            run_owner: format!(
                "pid{}-{}",
                std::process::id(),
                uuid::Uuid::new_v4().simple()
            ),
            migrate_on_open: true,
            record_embedding_jobs: false,
        }
    }

    /// Checks ranges; called by [`crate::Database::open`].
    pub fn validate(&self) -> Result<Backend> {
        let backend = Backend::from_url(&self.url)?;
        let check = |ok: bool, what: &str| {
            if ok {
                Ok(())
            } else {
                Err(StorageError::Config(what.to_owned()))
            }
        };
        check(
            self.max_content_bytes > 0,
            "max_content_bytes must be positive",
        )?;
        check(
            self.compress_content_from
                .is_none_or(|from| from >= pattern_db_sqlite::messages::COMPRESS_FROM),
            "compress_content_from must be at least 64 bytes",
        )?;
        check(
            self.compress_archived_from
                .is_none_or(|from| from >= pattern_db_sqlite::messages::COMPRESS_FROM),
            "compress_archived_from must be at least 64 bytes",
        )?;
        check(
            self.compress_imported_from
                .is_none_or(|from| from >= pattern_db_sqlite::messages::COMPRESS_FROM),
            "compress_imported_from must be at least 64 bytes",
        )?;
        check(
            self.read_connections > 0,
            "read_connections must be positive",
        )?;
        check(
            self.pg_write_connections > 0,
            "pg_write_connections must be positive",
        )?;
        check(self.max_group > 0, "max_group must be positive")?;
        check(self.queue_capacity > 0, "queue_capacity must be positive")?;
        check(!self.batch_lease.is_zero(), "batch_lease must be positive")?;
        check(
            self.machine_lease >= Duration::from_secs(3),
            "machine_lease must be at least 3 s",
        )?;
        check(
            self.run_lease >= Duration::from_millis(500),
            "run_lease must be at least 500 ms",
        )?;
        if let MachineId::Fixed(id) = self.machine_id {
            check(
                id <= crate::id::MAX_MACHINE_ID,
                "machine id must be at most 1023",
            )?;
        }
        check(
            self.migrate_on_open || matches!(self.machine_id, MachineId::Fixed(_)),
            "opening without migrating needs a fixed machine id (the lease table may not exist yet)",
        )?;
        Ok(backend)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backend_from_url() {
        assert_eq!(
            Backend::from_url("sqlite:///tmp/x.db").unwrap(),
            Backend::Sqlite
        );
        assert_eq!(
            Backend::from_url("sqlite://rel.db?mode=rwc").unwrap(),
            Backend::Sqlite
        );
        assert_eq!(
            Backend::from_url("postgres://u@127.0.0.1:5432/db").unwrap(),
            Backend::Postgres
        );
        assert_eq!(
            Backend::from_url("postgresql://u:p@h/db").unwrap(),
            Backend::Postgres
        );
        for bad in [
            "",
            "nonsense",
            "mysql://h/db",
            "sqlite://",
            "sqlite::memory:",
            "postgres:h",
            "postgres://",
        ] {
            let err = Backend::from_url(bad).unwrap_err();
            assert!(
                matches!(err, Error::Storage(StorageError::InvalidUrl { .. })),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn opening_without_migrating_needs_a_fixed_machine_id() {
        let mut c = DbConfig::new("sqlite:///tmp/x.db");
        c.migrate_on_open = false;
        assert!(matches!(
            c.validate(),
            Err(Error::Storage(StorageError::Config(_)))
        ));
        c.machine_id = MachineId::Fixed(1023);
        assert_eq!(c.validate().unwrap(), Backend::Sqlite);
    }

    #[test]
    fn error_hides_password() {
        let err = Backend::from_url("postgres://u:hunter2@")
            .unwrap_err()
            .to_string();
        assert!(!err.contains("hunter2"), "{err}");
    }
}
