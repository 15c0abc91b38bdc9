//! The errors of `pattern_db`: the storage core's [`StorageError`], and [`Error`], the one type
//! every public method returns, which wraps the core's error or one domain's (each domain's enum
//! lives beside its module: [`crate::AgentError`], [`crate::BatchError`], [`crate::BlockError`],
//! ...).
//!
//! Every failure a caller can act on has its own variant with the facts needed to act; the driver's
//! own error is kept as a source, never flattened into a string. Writes of several domains share
//! one transaction (an agent import writes blocks; completing a batch marks a protocol message
//! read), so the boundary stays this one wrapper, the way sqlx's one error wraps a driver's. This
//! module must never print or log: callers decide what to show.

/// Result alias for this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in the storage layer: the storage core's failure or one domain's
/// refusal. It only wraps; its `Display` is the wrapped error's own.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A failure of the storage core (connection, migrations, commits, damaged rows, ...).
    #[error(transparent)]
    Storage(#[from] StorageError),
    /// A failure of the agents' domain (module `model`).
    #[error(transparent)]
    Agent(#[from] crate::AgentError),
    /// A failure of batches and their messages ([`crate::MessageStore`]).
    #[error(transparent)]
    Batch(#[from] crate::BatchError),
    /// A failure of memory blocks ([`crate::blocks`]).
    #[error(transparent)]
    Block(#[from] crate::BlockError),
    /// A failure of archival memory ([`crate::archival`]).
    #[error(transparent)]
    Archival(#[from] crate::ArchivalError),
    /// A failure of search storage ([`crate::search`]).
    #[error(transparent)]
    Search(#[from] crate::SearchError),
    /// A failure of runs and turns ([`crate::runs`]).
    #[error(transparent)]
    Run(#[from] crate::RunError),
    /// A failure of schedules ([`crate::schedule`]).
    #[error(transparent)]
    Schedule(#[from] crate::ScheduleError),
    /// A failure of approval requests ([`crate::approvals`]).
    #[error(transparent)]
    Approval(#[from] crate::ApprovalError),
    /// A failure of MCP server configuration ([`crate::mcp`]).
    #[error(transparent)]
    Mcp(#[from] crate::McpError),
    /// A failure of API keys ([`crate::auth`]).
    #[error(transparent)]
    Auth(#[from] crate::AuthError),
    /// A failure of what of the agent-to-agent protocol stays here ([`crate::protocol`]).
    #[error(transparent)]
    Protocol(#[from] crate::ProtocolError),
    /// A refusal of a domain above this crate, raised inside a write it runs through the writer
    /// ([`crate::storage::ExtensionError`]: `pattern_protocol`'s meeting refusals).
    #[error(transparent)]
    Extension(#[from] crate::storage::ExtensionError),
}

impl From<sqlx::Error> for Error {
    fn from(e: sqlx::Error) -> Self {
        Error::Storage(StorageError::Database(e))
    }
}

impl From<sqlx::migrate::MigrateError> for StorageError {
    fn from(e: sqlx::migrate::MigrateError) -> Self {
        use sqlx::migrate::MigrateError as M;
        match e {
            M::VersionMismatch(version) => StorageError::MigrationChecksumMismatch { version },
            M::VersionMissing(version) => StorageError::MigrationUnknown { version },
            other => StorageError::Migrate(other),
        }
    }
}

impl From<sqlx::migrate::MigrateError> for Error {
    fn from(e: sqlx::migrate::MigrateError) -> Self {
        Error::Storage(e.into())
    }
}

impl Error {
    /// Whether retrying the same call later may succeed (connection trouble, lock timeouts).
    pub fn is_transient(&self) -> bool {
        match self {
            Error::Storage(e) => e.is_transient(),
            _ => false,
        }
    }

    /// A PostgreSQL deadlock or serialization failure: the transaction was rolled back whole,
    /// and running it again may succeed. The writer retries these itself.
    pub(crate) fn is_lock_conflict(&self) -> bool {
        match self {
            Error::Storage(e) => e.is_lock_conflict(),
            _ => false,
        }
    }

    /// What kind of failure this is, for front doors that map errors to exit codes or HTTP
    /// statuses (the CLI and the server share this one classification).
    pub fn class(&self) -> ErrorClass {
        match self {
            Error::Storage(e) => e.class(),
            Error::Agent(e) => e.class(),
            Error::Batch(e) => e.class(),
            Error::Block(e) => e.class(),
            Error::Archival(e) => e.class(),
            Error::Search(e) => e.class(),
            Error::Run(e) => e.class(),
            Error::Schedule(e) => e.class(),
            Error::Approval(e) => e.class(),
            Error::Mcp(e) => e.class(),
            Error::Auth(e) => e.class(),
            Error::Protocol(e) => e.class(),
            Error::Extension(e) => e.class(),
        }
    }
}

/// What the storage core owns going wrong: the URL and the connection, configuration, the SQLite
/// version, migrations, damaged rows, the clock, machine ids, poisoned locks, commits, a closed
/// database, the driver's own error and the full-text index.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StorageError {
    /// The database URL could not be understood.
    #[error("invalid database url `{url}`: {reason}")]
    InvalidUrl {
        /// The URL as given (with any password removed).
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The server could not be reached or refused the connection.
    #[error("cannot connect to {backend} database at `{url}`: {source}")]
    Connect {
        /// `sqlite` or `postgres`.
        backend: &'static str,
        /// The URL (with any password removed).
        url: String,
        /// The driver's error.
        #[source]
        source: sqlx::Error,
    },
    /// A configuration value is out of range.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// The bundled SQLite is older than the version this crate requires.
    #[error("SQLite {found} is older than the required {required} (WAL-reset bug fixed in 3.51.3)")]
    SqliteTooOld {
        /// Version found at run time.
        found: String,
        /// Minimum version.
        required: &'static str,
    },
    /// A migration already applied to this database differs from the one shipped in this build.
    #[error(
        "migration {version} was applied to this database but its file has changed since \
         (checksum mismatch); restore the original migration or migrate a copy"
    )]
    MigrationChecksumMismatch {
        /// The migration version.
        version: i64,
    },
    /// The database has a migration this build does not know (it was opened by a newer build).
    #[error("database has migration {version}, which this build does not know: upgrade Pattern")]
    MigrationUnknown {
        /// The migration version.
        version: i64,
    },
    /// A migration run with foreign keys off left rows whose foreign keys point nowhere; it was
    /// rolled back whole.
    #[error(
        "migration {version} left {rows} rows with dangling foreign keys (first in table `{table}`); rolled back"
    )]
    MigrationForeignKeys {
        /// The migration version.
        version: i64,
        /// The first table with a dangling row.
        table: String,
        /// How many rows dangle.
        rows: usize,
    },
    /// Any other migration failure.
    #[error("migration failed: {0}")]
    Migrate(#[source] sqlx::migrate::MigrateError),
    /// An id string could not be parsed.
    #[error("invalid {what} `{value}`: {reason}")]
    InvalidId {
        /// What kind of id.
        what: &'static str,
        /// The text given.
        value: String,
        /// Why it is invalid.
        reason: String,
    },
    /// A stored row does not decode (written by something else, or damaged).
    #[error("stored data is damaged: {0}")]
    Corrupt(String),
    /// The clock is outside the range snowflake ids can encode.
    #[error("clock error: {0}")]
    Clock(String),
    /// Every machine id (0..=1023) is leased by a live process: each lease is unexpired and its
    /// holder's liveness lock is held (dead holders' leases are taken over at once).
    #[error(
        "no free machine id: all 1024 are leased by live processes ({live} checked alive); stop \
         some, or give this one a fixed machine id"
    )]
    MachineIdsExhausted {
        /// Leases whose holders were checked alive.
        live: usize,
    },
    /// A lock was poisoned by a panic in another thread.
    #[error("internal lock `{0}` poisoned by an earlier panic")]
    Poisoned(&'static str),
    /// The transaction that held this write could not commit; the write was not performed.
    #[error("the write was not committed: {0}")]
    Commit(#[source] std::sync::Arc<sqlx::Error>),
    /// The database was closed; the write was not performed.
    #[error("the database is closed")]
    Closed,
    /// The full-text index (tantivy) failed; it is derived data, rebuilt by `reindex`.
    #[error("full-text index error: {0}")]
    Index(#[source] std::sync::Arc<tantivy::TantivyError>),
    /// The database reported an error.
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),
}

impl StorageError {
    /// Whether retrying the same call later may succeed (connection trouble, lock timeouts).
    pub fn is_transient(&self) -> bool {
        match self {
            StorageError::Connect { .. } | StorageError::Closed | StorageError::Commit(_) => true,
            StorageError::Database(e) => {
                matches!(
                    e,
                    sqlx::Error::Io(_)
                        | sqlx::Error::PoolTimedOut
                        | sqlx::Error::PoolClosed
                        | sqlx::Error::WorkerCrashed
                ) || e
                    .as_database_error()
                    .and_then(|d| d.code())
                    .is_some_and(|c| {
                        // SQLITE_BUSY / SQLITE_LOCKED; PostgreSQL serialization failure, deadlock.
                        matches!(c.as_ref(), "5" | "6" | "517" | "40001" | "40P01")
                    })
            }
            _ => false,
        }
    }

    /// A PostgreSQL deadlock or serialization failure: the transaction was rolled back whole,
    /// and running it again may succeed. The writer retries these itself.
    pub(crate) fn is_lock_conflict(&self) -> bool {
        match self {
            StorageError::Database(e) => sqlx_lock_conflict(e),
            StorageError::Commit(e) => sqlx_lock_conflict(e),
            _ => false,
        }
    }

    /// What kind of failure this is (see [`crate::ErrorClass`]).
    pub fn class(&self) -> crate::ErrorClass {
        use crate::ErrorClass as C;
        match self {
            StorageError::InvalidUrl { .. }
            | StorageError::Config(_)
            | StorageError::InvalidId { .. } => C::Invalid,
            e if e.is_transient() => C::Unavailable,
            _ => C::Internal,
        }
    }
}

/// Whether a driver error is a PostgreSQL deadlock (`40P01`) or serialization failure (`40001`).
pub(crate) fn sqlx_lock_conflict(e: &sqlx::Error) -> bool {
    e.as_database_error()
        .and_then(|d| d.code())
        .is_some_and(|c| matches!(c.as_ref(), "40001" | "40P01"))
}

/// The kinds of failure callers act on differently: what a CLI exit code or an HTTP status
/// says. Every crate's error maps onto these through its `class()` method.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorClass {
    /// What was named does not exist (or is not visible to the caller).
    NotFound,
    /// It exists, but its state forbids this now: taken names, stale versions, out of turn.
    Conflict,
    /// The request itself is malformed: ids, labels, content, queries.
    Invalid,
    /// Well-formed but refused: over a limit, not permitted.
    Refused,
    /// A dependency is away (connection, lock timeout, shutting down); retrying later may work.
    Unavailable,
    /// Anything else: a fault on our side.
    Internal,
}

/// Removes a password from a URL before it goes into an error message.
pub(crate) fn redact_url(url: &str) -> String {
    if let Some((scheme, rest)) = url.split_once("://")
        && let Some((creds, host)) = rest.split_once('@')
        && let Some((user, _password)) = creds.split_once(':')
    {
        return format!("{scheme}://{user}:***@{host}");
    }
    url.to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redacts_passwords() {
        assert_eq!(
            redact_url("postgres://u:secret@h:5432/db"),
            "postgres://u:***@h:5432/db"
        );
        assert_eq!(redact_url("postgres://u@h/db"), "postgres://u@h/db");
        assert_eq!(redact_url("sqlite://x.db"), "sqlite://x.db");
    }
}
