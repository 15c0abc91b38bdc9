//! Pattern: a framework for stateful LLM agents whose memory and history survive crashes,
//! restarts and long lives.
//!
//! This is the facade: it re-exports the public API of every layer so an application depends on
//! one crate. It must never hold logic of its own; wiring that needs code lives in the layer that
//! owns it. Today: storage (`db`), memory (`memory`), context building (`context`) and the
//! agent-to-agent protocol (`protocol`); the runtime layer is added as it lands.
//!
//! ```no_run
//! # async fn demo() -> pattern::db::Result<()> {
//! let db = pattern::Database::open_url("sqlite:///tmp/pattern-facade.db").await?;
//! let agent = db.create_agent(pattern::NewAgent::named("ada")).await?;
//! let store = db.messages(agent.id);
//! let received = store.begin_batch(pattern::NewMessage::user("hello"), Default::default()).await?;
//! println!("stored as batch {}", received.batch_id);
//! # Ok(()) }
//! ```

/// Context building: batches and memory to a validated request that fits the window.
pub use context_v2 as context;
/// Memory: the block model and the `MemoryStore` trait.
pub use memory_v2 as memory;
/// The storage layer: databases, migrations, ids and the batch-aware message store.
pub use pattern_db as db;
/// The agent-to-agent protocol: organizations, sessions, inboxes and waiting.
pub use pattern_protocol as protocol;

pub use pattern_db::{
    Agent, AgentId, BatchInfo, BatchState, BatchType, BeginBatch, ContentBlock, Database, DbConfig,
    Message, MessageStore, NewAgent, NewMessage, Received, RecoveryScope, Role, SnowflakeId,
    StoredBatch,
};
