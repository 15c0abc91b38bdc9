//! Pattern's SQLite statements that sqlx checks at compile time (decision 0023, step 3 (c)).
//!
//! Each statement here is one of sqlx's `query!`, `query_as!` or `query_scalar!` macros: its
//! text, its parameter count and its columns' types and nullability are checked while the crate
//! compiles, against the schema of `migrations/sqlite` as the offline query cache in this crate's
//! `.sqlx/` records it. A build needs no database: `.cargo/config.toml` sets `SQLX_OFFLINE=true`,
//! and `cargo xtask sqlx prepare` regenerates the cache from a throwaway SQLite file migrated by
//! `pattern_db`'s own migrator; `cargo xtask sqlx check` fails when the committed cache is stale
//! (a statement or the schema changed without `prepare`).
//!
//! Only `pattern_db` and `pattern_protocol`'s storage module (`pattern_protocol::store`, for the
//! protocol's statements in `protocol`) name this crate. They call these functions from the
//! SQLite arm of `pattern_db::sql::Conn`; the PostgreSQL arm calls the same statements of
//! `pattern_db_postgres`, checked against PostgreSQL's native column types (step 3 (d), migration
//! 0023). A function here
//! takes a `&mut SqliteConnection` (a pooled connection or the writer's transaction: the caller
//! decides) and plain values, and returns plain row structs or counts; the caller turns them into
//! `pattern_db`'s types and errors.
//!
//! A bound `LIMIT` is written `LIMIT $n + 0`. SQLite (3.47 on) reads a bare bound `LIMIT`'s
//! value while planning and marks the statement to be prepared again whenever that parameter is
//! bound anew, so sqlx's cached statement was compiled from scratch on every call (42 % of the
//! SQLite thread's time on the uncached newest-50 read); an expression is not read at planning.
//! `cargo xtask tidy` refuses a bare one.
//!
//! What stays in `pattern_db::sql` (dynamic text a macro cannot check, or measured slower checked): multi-row `VALUES`
//! lists and `IN` lists whose length varies with the call, statements joined into one
//! `sql::Script`, the join of batches with their messages that `get_recent` reads (a checked
//! statement decodes every column of every row, and that join repeats a batch's columns on each
//! of its messages: measured slower than the dynamic reader, which decodes them once), and every
//! statement of domains not moved here yet.
//!
//! Besides statements it holds SQLite's storage encodings of a message, which its statements
//! read back (`messages`: role and batch type codes, the id's bytes, the content's optional zstd
//! compression, `messages::StoredText`); when to compress is the caller's choice.
//!
//! This crate must never hold a domain rule (validation, refusals, locking policy, id or time
//! conversion): it only runs a statement and hands back its rows. It must never build SQL text at
//! run time (no `sqlx::query(` or `raw_sql` here: tidy refuses it), never open, commit or roll
//! back a transaction, and never hide an engine's error: sqlx's own `Error` comes back unchanged,
//! so the caller's lock-conflict and constraint checks keep reading its codes.

pub mod activity;
pub mod agents;
pub mod approvals;
pub mod archival;
pub mod auth;
pub mod batches;
pub mod blocks;
pub mod console;
pub mod mcp;
pub mod messages;
pub mod processes;
pub mod protocol;
pub mod queue;
pub mod retention;
pub mod runs;
pub mod schedules;
pub mod search;
pub mod stats;
pub mod summaries;
pub mod tool_calls;

pub use batches::BatchRow;
pub use messages::MessageRow;
pub use queue::QueueRow;
pub use summaries::SummaryRow;
