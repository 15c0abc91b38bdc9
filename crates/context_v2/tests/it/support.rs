//! What the integration tests share: a memory store over a map (the real one over `db_v2` comes
//! with the memory layer) and an agent in a fresh SQLite database. Test support only; it must
//! never hide a failure (every step unwraps).

use std::collections::HashMap;

use async_trait::async_trait;
use chrono::Utc;
use memory_v2::{BlockType, MemoryBlock, MemoryStore, Permission};
use pattern_db::testkit::TestDb;
use pattern_db::{AgentId, Database, MessageStore, NewAgent};

/// Blocks held in a map, per agent.
pub(crate) struct Blocks(pub(crate) HashMap<AgentId, Vec<MemoryBlock>>);

#[async_trait]
impl MemoryStore for Blocks {
    async fn context_blocks(&self, agent: AgentId) -> memory_v2::Result<Vec<MemoryBlock>> {
        Ok(self.0.get(&agent).cloned().unwrap_or_default())
    }
}

/// A core, read-write block with a 2,000-character limit.
pub(crate) fn block(label: &str, value: &str) -> MemoryBlock {
    MemoryBlock {
        label: label.into(),
        description: format!("the {label}"),
        value: value.into(),
        char_limit: 2000,
        block_type: BlockType::Core,
        permission: Permission::ReadWrite,
        version: 1,
        updated_at: Utc::now(),
    }
}

/// An agent named `ada` in a fresh SQLite database, with these memory blocks.
pub(crate) struct Agent {
    /// Keeps the database's directory alive.
    pub(crate) tdb: TestDb,
    /// The database.
    pub(crate) db: Database,
    /// The agent's message store.
    pub(crate) store: MessageStore,
    /// The agent's memory.
    pub(crate) memory: Blocks,
}

/// A fresh agent with `blocks`.
pub(crate) async fn agent(blocks: Vec<MemoryBlock>) -> Agent {
    let tdb = TestDb::sqlite().unwrap();
    let db = tdb.open().await.unwrap();
    let agent = db.create_agent(NewAgent::named("ada")).await.unwrap();
    let store = db.messages(agent.id);
    let memory = Blocks(HashMap::from([(agent.id, blocks)]));
    Agent {
        tdb,
        db,
        store,
        memory,
    }
}
