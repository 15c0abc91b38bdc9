//! Pattern: a framework for stateful LLM agents whose memory and history survive crashes,
//! restarts and long lives.
//!
//! This is the facade: it re-exports the public API of every layer so an application depends on
//! one crate, and [`Pattern::open`] wires the layers over one database: the storage
//! ([`Pattern::db`], [`Pattern::messages`]), memory blocks ([`Pattern::memory`], a
//! [`memory::DbMemoryStore`]) and the agent-to-agent protocol ([`Pattern::protocol`]). It must
//! never hold logic of its own beyond that wiring; behaviour lives in the layer that owns it.
//! Search ([`Pattern::search`], with the offline embedder when it is installed) and agents
//! ([`Pattern::agent`]: a [`core::DatabaseAgent`] over a [`core::provider::ModelProvider`]) are
//! wired the same way; [`model::ModelChoice`] picks that provider from configuration (an API key
//! in the environment, a configured server, or a local llama.cpp server it starts).
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use pattern::memory::{MemoryEditor, MemoryStore, NewMemoryBlock, BlockType, WriteAuth};
//! use pattern::{NewAgent, NewMessage, Pattern, PatternConfig};
//!
//! let dir = tempfile::tempdir()?;
//! // A data directory: the SQLite database is `pattern.db` inside it.
//! let config = PatternConfig::data_dir(dir.path()).with_embedding(pattern::Embedding::Off);
//! let pattern = Pattern::open(config).await?;
//! let ada = pattern.db().create_agent(NewAgent::named("ada")).await?;
//!
//! // History: the trigger is durable when `begin_batch` returns.
//! let store = pattern.messages(ada.id);
//! let received = store.begin_batch(NewMessage::user("hello"), Default::default()).await?;
//! store.append_step(received.batch_id, vec![NewMessage::assistant("hi!")]).await?;
//! store.complete_batch(received.batch_id).await?;
//!
//! // Memory blocks: versioned, size-limited.
//! let block = pattern.memory().create_block(ada.id, NewMemoryBlock {
//!     label: "persona".into(),
//!     description: "who I am".into(),
//!     value: "I am Ada.".into(),
//!     char_limit: 200,
//!     block_type: BlockType::Core,
//! }).await?;
//! pattern.memory().append(ada.id, "persona", "I like engines.", block.version, WriteAuth::Agent).await?;
//! assert_eq!(pattern.memory().block(ada.id, "persona").await?.version, 2);
//!
//! pattern.close().await;
//! # Ok(()) }
//! ```

mod error;
pub mod install;
pub mod model;
mod open;

pub use error::{Error, Result};
pub use open::{DATABASE_FILE, DatabaseLocation, Embedding, Pattern, PatternConfig, sqlite_url};

/// Search: embedders, background embedding, full-text, vector and hybrid search.
pub use db_v2 as search;
/// Agents: the `Agent` trait, the runtime, tools, permissions, model providers.
pub use pattern_core as core;

/// Context building: batches and memory to a validated request that fits the window.
pub use context_v2 as context;
/// Memory: the block model, the `MemoryStore` traits and `DbMemoryStore`.
pub use memory_v2 as memory;
/// The storage layer: databases, migrations, ids and the batch-aware message store.
pub use pattern_db as db;
/// The agent-to-agent protocol: organizations, sessions, inboxes and waiting.
pub use pattern_protocol as protocol;

pub use pattern_db::{
    Agent, AgentId, BatchInfo, BatchState, BatchType, BeginBatch, ContentBlock, Database, DbConfig,
    Durability, ErrorClass, Message, MessageStore, NewAgent, NewMessage, Received, RecoveryScope,
    Role, SnowflakeId, StoredBatch,
};
