//! The protocol's SQL: the one module of `pattern_protocol` that names `sqlx` *(tidy)*.
//!
//! [`Store`] is the protocol's storage over a [`Database`]: sessions (open or find live, send,
//! end, mark read, the session and inbox reads: `sessions`), meetings (create, invite, join,
//! start, speak, pass, leave, end, choose the next speaker, apply an expired turn: `meetings`
//! and `meeting_writes`), their reads and event log, the views (active conversations, active
//! meetings, unread per agent), protocol retention, and organization-scoped lists of sessions and
//! meetings (`lists`). Its writes are [`Write`](pattern_db::storage::Write) types queued to
//! `pattern_db`'s writer through its public extension point ([`pattern_db::storage`]): one
//! transaction each, in the writer's global lock order (a session or meeting write declares its
//! row). Organizations, the session message store (`pattern_db::protocol::store_message`) and the
//! wake-up channel stay in `pattern_db::protocol`: a batch completion marks a session message
//! read and sends a sync session's reply through them in its own transaction.
//!
//! [`crate::Protocol`] is the handle most callers want (it wakes waiters after each write and
//! returns [`crate::Error`]); [`Store`] serves callers that hold only a [`Database`] and wait for
//! nobody (an agent's session and meeting tools). It returns `pattern_db`'s error: the protocol's
//! own refusals are inside it ([`crate::ProtocolError::of`]). Its fixed statements are checked at
//! compile time (decision 0023, step 3 (c)): they live in `pattern_db_sqlite::protocol` and
//! `pattern_db_postgres::protocol`, called from the engine arms of
//! [`Conn`](pattern_db::storage::Conn) here (the only files of this crate that may name those
//! crates or `sqlx`: tidy); their rows become the protocol's types through
//! [`pattern_db::protocol::StoredProtocolRow`] (sessions, messages) or this module's conversions
//! (meetings). What stays on `pattern_db::sql::query` is text built at run time (see each
//! module). This module must never commit, roll back or open a transaction itself, and never
//! write outside the writer.

use pattern_db::Database;

mod lists;
mod meeting_writes;
mod meetings;
mod sessions;

pub use lists::{ListPage, Liveness};

/// The protocol's storage over one database (borrowed: build one per call, it costs nothing).
#[derive(Debug, Clone, Copy)]
pub struct Store<'a> {
    db: &'a Database,
}

impl<'a> Store<'a> {
    /// The protocol's storage over `db`.
    pub fn new(db: &'a Database) -> Self {
        Self { db }
    }
}

/// The engine rows' id and instant readers and the instant a PostgreSQL statement binds, shared
/// with `pattern_db`'s own domains.
pub(crate) use pattern_db::sql::instant;
pub(crate) use pattern_db::storage::{StoredId, StoredTime};
