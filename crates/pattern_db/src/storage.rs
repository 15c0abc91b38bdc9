//! The storage core's extension point: what a domain above this crate needs to keep its own
//! SQL and writes (decision 0023; today `pattern_protocol`'s storage module).
//!
//! A write is a type implementing [`Write`]: its arguments, its `Output`, the [`Locks`] it needs
//! and its SQL ([`Write::apply`], run inside the writer's transaction). [`Database::write`]
//! queues it and returns once the transaction that holds it has committed: the writer groups it
//! with others (one transaction, a savepoint per write, one commit), takes the locks of the whole
//! group in the one global order (the search change-log lock, then agent rows in agent order,
//! then protocol rows in sorted order) and reruns the group on a deadlock or serialization
//! failure. Reads go to [`Database::reader`], never through the writer. Ids come from
//! [`Ctx::next_id`] inside a write ([`Database::next_id`] outside one); times are Unix
//! milliseconds ([`now_ms`], [`from_ms`]); ids are stored as text ([`parse_uuid`]). In-process
//! wake-ups are [`Database::hub`]'s; the protocol's PostgreSQL `NOTIFY` is
//! [`crate::protocol::notify`].
//!
//! What a user must never do with it:
//!
//! - commit, roll back or open a transaction inside [`Write::apply`] (the writer owns the
//!   transaction and its savepoints), or keep the connection beyond the call;
//! - run a statement after one that failed in the same `apply` (a failed statement aborts a
//!   PostgreSQL transaction): return the error;
//! - lock a row that [`Write::locks`] does not declare before the rows it declares (an agent row
//!   when it declared none, say): only the declared locks are taken in the global order, so
//!   anything else risks a deadlock across writer tasks;
//! - write through [`Database::reader`] or any connection but `apply`'s (nothing is durable or
//!   ordered outside the writer), or wake anyone before the write has committed (wake after
//!   [`Database::write`] returns; `NOTIFY` inside the transaction is delivered at commit only).
//!
//! A domain's own refusal raised inside `apply` travels as [`ExtensionError`] (the domain's enum,
//! boxed, with its class) and is taken back by the domain's error type.
//!
//! Statements run through [`crate::sql`] ([`query`], [`Conn`], [`Row`]): sqlx's SQLite and
//! PostgreSQL drivers directly, with the portable column types (TEXT ids and JSON, BIGINT times;
//! decision 0023, step 3). Nothing here changes how the writer behaves.

use std::fmt;

use chrono::{DateTime, Utc};

use crate::ErrorClass;

pub use crate::config::Backend;
pub use crate::db::Database;
pub use crate::ops::{Ctx, StoredId, StoredTime};
pub use crate::sql::{Conn, Pool, Query, Row, query};
pub use crate::writer::{Locks, Write};

impl Ctx {
    /// The backend this write runs on (a statement's dialect, `FOR UPDATE` on PostgreSQL).
    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// A fresh snowflake of this process's generator (strictly increasing).
    pub fn next_id(&self) -> crate::Result<crate::SnowflakeId> {
        self.ids.next_id()
    }
}

/// Now, in Unix milliseconds (how times are stored).
pub fn now_ms() -> i64 {
    crate::ops::now_ms()
}

/// A stored time (Unix milliseconds) as a date.
pub fn from_ms(ms: i64) -> DateTime<Utc> {
    crate::ops::from_ms(ms)
}

/// A stored id (text) as a UUID; a malformed one is [`crate::StorageError`]'s corrupt row.
pub fn parse_uuid(text: &str) -> crate::Result<uuid::Uuid> {
    crate::ops::parse_uuid(text)
}

/// Whether a statement failed on a unique index (a lost race, or a taken name).
pub fn is_unique_violation(e: &sqlx::Error) -> bool {
    crate::ops::is_unique_violation(e)
}

/// Splits `rows` into chunks of 64, 16, 4 and 1 rows, so a statement over a chunk has one of
/// four texts (their prepared statements stay in the connection's cache).
pub fn fixed_chunks<T>(rows: &[T]) -> Vec<&[T]> {
    crate::ops::fixed_chunks(rows)
}

/// A refusal of a domain above this crate, raised inside a write it runs through the writer
/// ([`Write::apply`] returns this crate's [`crate::Result`]): the domain's own error, boxed, with
/// its [`ErrorClass`]. It reaches the caller as [`crate::Error::Extension`], and the domain's
/// own error type takes it back with [`ExtensionError::downcast`]. Its `Display` and `source` are
/// the wrapped error's own.
pub struct ExtensionError {
    class: ErrorClass,
    error: Box<dyn std::error::Error + Send + Sync + 'static>,
}

impl ExtensionError {
    /// Wraps `error`, a refusal of class `class`.
    pub fn new(class: ErrorClass, error: impl std::error::Error + Send + Sync + 'static) -> Self {
        Self {
            class,
            error: Box::new(error),
        }
    }

    /// What kind of failure the wrapped error is.
    pub fn class(&self) -> ErrorClass {
        self.class
    }

    /// The wrapped error, if it is an `E`.
    pub fn downcast_ref<E: std::error::Error + 'static>(&self) -> Option<&E> {
        self.error.downcast_ref()
    }

    /// The wrapped error if it is an `E`, else this one back.
    pub fn downcast<E: std::error::Error + 'static>(self) -> std::result::Result<E, Self> {
        match self.error.downcast::<E>() {
            Ok(error) => Ok(*error),
            Err(error) => Err(Self {
                class: self.class,
                error,
            }),
        }
    }
}

impl fmt::Debug for ExtensionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.error, f)
    }
}

impl fmt::Display for ExtensionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.error, f)
    }
}

impl std::error::Error for ExtensionError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.error.source()
    }
}
