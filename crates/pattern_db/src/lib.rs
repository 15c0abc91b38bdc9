//! `pattern_db`: the storage layer of Pattern.
//!
//! One API over two backends chosen by URL: SQLite (the embedded default: one file, WAL,
//! `synchronous=FULL`) and PostgreSQL (for many processes and machines). It owns the schema and
//! its migrations, snowflake ids, and the batch-aware [`MessageStore`] that makes the
//! incremental-save flow crash-safe:
//!
//! - [`MessageStore::begin_batch`] commits the trigger before anything runs (the "received"
//!   acknowledgement);
//! - [`MessageStore::append_step`] stores a step whole or not at all, and refuses a tool result
//!   whose call is not in the batch;
//! - [`MessageStore::recover`] turns the open batches of dead runs into `abandoned` ones and hands
//!   back their triggers for retry;
//! - [`MessageStore::get_recent`] reads the latest batches whole, at a cost that follows the
//!   window and not the history.
//!
//! It also keeps memory blocks (module [`blocks`]): size-limited, versioned text shared between
//! agents through access rows, written with optimistic concurrency and full history.
//!
//! And what of the agent-to-agent protocol other domains write in their own transactions (module
//! [`protocol`]): organizations, the session and message types, the session message store a
//! batch completion sends a sync session's reply through, and PostgreSQL wake-ups. The protocol's
//! rules and the rest of its SQL (sessions, meetings, views, retention, lists) are the
//! `pattern_protocol` crate's, whose writes go through this crate's writer by the public
//! extension point [`storage`] (decision 0023).
//!
//! And search storage (modules [`archival`] and [`search`]): archival memory passages,
//! embedding jobs recorded in the transaction of the content they belong to, stored vectors of
//! one registered model, an ordered change log that derived indexes follow, and full-text search
//! (tantivy: beside SQLite files, in each process's memory on PostgreSQL).
//!
//! Every write goes through a group-commit writer: concurrent acknowledgements share one
//! transaction and one fsync, and none is acknowledged before its commit.
//!
//! ```no_run
//! # async fn demo() -> pattern_db::Result<()> {
//! use pattern_db::{BeginBatch, Database, NewAgent, NewMessage};
//! let db = Database::open_url("sqlite:///tmp/pattern-example.db").await?;
//! let agent = db.create_agent(NewAgent::named("ada")).await?;
//! let store = db.messages(agent.id);
//! let received = store.begin_batch(NewMessage::user("hello"), BeginBatch::default()).await?;
//! store.append_step(received.batch_id, vec![NewMessage::assistant("hi!")]).await?;
//! store.complete_batch(received.batch_id).await?;
//! let recent = store.get_recent(10).await?;
//! assert_eq!(recent.len(), 1);
//! # Ok(()) }
//! ```
//!
//! This crate must never know about models, prompts or providers. It names `sqlx` with one other
//! place only, `pattern_protocol`'s storage module (tidy); every other layer above uses its types
//! and its [`Error`].

pub mod approvals;
pub mod archival;
pub mod auth;
pub mod blocks;
mod config;
pub mod console;
mod db;
mod error;
mod fts;
pub mod id;
pub mod import;
pub mod legacy;
pub mod mcp;
mod migrate;
mod model;
mod names;
mod ops;
mod process;
pub mod protocol;
pub mod queue;
pub mod retention;
pub mod runs;
pub mod schedule;
pub mod search;
pub mod sql;
mod stats;
pub mod storage;
mod store;
#[cfg(feature = "testkit")]
pub mod testkit;
pub mod wake;
mod writer;

pub use approvals::{Approval, ApprovalDecision, ApprovalFilter, ApprovalState, NewApproval};
pub use archival::{ArchivalEntry, ArchivalId, ListArchival, NewArchival, OCCURRED_AT_KEY};
pub use auth::{ApiKey, ApiKeyId, IssuedKey};
pub use blocks::{BlockVersion, NewBlock, StoredBlock};
pub use config::{Backend, DbConfig, Durability, IMPORT_PLAIN_BATCHES, MachineId};
pub use console::{ConsoleSession, IssuedConsoleSession};
pub use db::{Database, MIN_SQLITE_VERSION};
pub use error::{Error, ErrorClass, Result, StorageError};
pub use id::{SnowflakeGenerator, SnowflakeId};
pub use import::{
    AgentImport, HistoryImport, ImportBatch, ImportBlock, ImportMessage, ImportPassage,
    ImportSummary, ImportVersion, ImportedAgent,
};
pub use legacy::{Anomaly, ImportPlan, LegacyMessage, PlannedBatch};
pub use migrate::MigrationStatus;
pub use model::{
    Abandoned, ActivityEvent, Agent, AgentId, BatchId, BatchInfo, BatchState, BatchType,
    BeginBatch, ContentBlock, LOCAL_ORGANIZATION, Message, MessageId, NewAgent, NewMessage,
    Received, RecoveryScope, Role, StepReceipt, StoredBatch, Summary, pending_calls,
    tool_result_ids, tool_use_ids,
};
pub use names::{MAX_NAME_CHARS, check_name};
pub use protocol::{
    Delivery, MAX_SESSION_MESSAGES, MeetingId, NewProtocolMessage, Organization, OrganizationId,
    ProtocolMessage, ProtocolMessageId, Session, SessionId, SessionOptions, SessionStatus,
    SessionType, Wakeup, WakeupListener, content_text,
};
pub use runs::{
    ClaimInfo, Finished, Idempotency, NewTurn, NewTurnEvent, RunClaim, RunEnding, Started, Submit,
    Submitted, TurnEvent, TurnId, TurnInfo, TurnOutcome, TurnState,
};
pub use search::{
    ChangeKind, ContentRef, ContentRow, ContentType, EmbeddingJob, EmbeddingModelInfo, NewVector,
    SearchChange, StoreReport, TextHit, TextSearch, VectorRow,
};
pub use stats::Gauges;

pub use approvals::ApprovalError;
pub use archival::ArchivalError;
pub use auth::AuthError;
pub use blocks::BlockError;
pub use mcp::McpError;
pub use model::AgentError;
pub use protocol::ProtocolError;
pub use runs::RunError;
pub use schedule::ScheduleError;
pub use search::SearchError;
pub use store::BatchError;
pub use store::MessageStore;
pub use wake::{Hub, WakeKey};
