//! Pattern's PostgreSQL statements that sqlx checks at compile time (decision 0023, step 3 (c)),
//! the twin of `pattern_db_sqlite`.
//!
//! Each statement here is one of sqlx's `query!`, `query_as!` or `query_scalar!` macros: its
//! text, its parameters' types and its columns' types and nullability are checked while the crate
//! compiles, against the schema of `migrations/postgres` (PostgreSQL's native column types since
//! migration 0023, decision 0026: ids `UUID`, instants `TIMESTAMPTZ`, message contents `JSON`) as
//! the offline query cache in this crate's `.sqlx/` records it. A build needs no database:
//! `.cargo/config.toml` sets `SQLX_OFFLINE=true`, and `cargo xtask sqlx prepare` regenerates the
//! cache from a throwaway PostgreSQL cluster migrated by `pattern_db`'s own migrator;
//! `cargo xtask sqlx check` fails when the committed cache is stale.
//!
//! Only `pattern_db` and `pattern_protocol`'s storage module (`pattern_protocol::store`, for the
//! protocol's statements in `protocol`) name this crate. They call these functions from the
//! PostgreSQL arm of `pattern_db::sql::Conn`, beside the same statements of `pattern_db_sqlite` in the SQLite arm.
//! A function here takes a `&mut PgConnection` (a pooled connection or the writer's transaction:
//! the caller decides) and typed values (`Uuid` ids, `DateTime<Utc>` instants, `i64` positions),
//! and returns plain row structs with the same fields as `pattern_db_sqlite`'s, in PostgreSQL's
//! types; `pattern_db` turns either into its own types with one conversion.
//!
//! A `JSON` column is read as its text (`content::text`): PostgreSQL keeps `JSON` as the text it
//! was given, so the text comes back as acknowledged, NUL escapes included. It must never be read
//! or written through `JSONB` or a parsed JSON value, which rewrite the text.
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
pub mod wake;

pub use batches::BatchRow;
pub use messages::MessageRow;
pub use queue::QueueRow;
pub use summaries::SummaryRow;

/// An instant as PostgreSQL's `TIMESTAMPTZ` decodes and encodes it (chrono's, in UTC).
pub type Timestamp = sqlx::types::chrono::DateTime<sqlx::types::chrono::Utc>;
/// An id as PostgreSQL's `UUID` decodes and encodes it.
pub use sqlx::types::Uuid;
