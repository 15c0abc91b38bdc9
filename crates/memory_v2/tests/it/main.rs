//! Integration tests of `memory_v2`: a store is usable as a shared trait object, and the store
//! over `pattern_db` keeps its invariants on SQLite and PostgreSQL (`db_store`).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

// `conformance!(case, ...)`: each case once per backend (pattern_db testkit).
#[macro_use]
extern crate pattern_db;

mod archival;
mod db_store;
mod ingest;

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use chrono::Utc;
use memory_v2::{BlockType, MemoryBlock, MemoryStore, Permission, Result};
use pattern_db::AgentId;

/// A store over a fixed map, to show the trait is object safe and shareable.
struct Fixed(HashMap<AgentId, Vec<MemoryBlock>>);

#[async_trait]
impl MemoryStore for Fixed {
    async fn context_blocks(&self, agent: AgentId) -> Result<Vec<MemoryBlock>> {
        Ok(self
            .0
            .get(&agent)
            .cloned()
            .unwrap_or_default()
            .into_iter()
            .filter(|b| b.block_type.in_context())
            .collect())
    }
}

#[tokio::test]
async fn shared_store_serves_agents_by_parameter() {
    let (a, b) = (AgentId::new(), AgentId::new());
    let block = |label: &str, block_type| MemoryBlock {
        label: label.into(),
        description: String::new(),
        value: "v".into(),
        char_limit: 100,
        block_type,
        permission: Permission::ReadOnly,
        version: 1,
        updated_at: Utc::now(),
    };
    let store: Arc<dyn MemoryStore> = Arc::new(Fixed(HashMap::from([
        (
            a,
            vec![
                block("persona", BlockType::Core),
                block("old", BlockType::Archival),
            ],
        ),
        (b, vec![block("task", BlockType::Working)]),
    ])));
    let labels = |v: Vec<MemoryBlock>| v.into_iter().map(|b| b.label).collect::<Vec<_>>();
    assert_eq!(labels(store.context_blocks(a).await.unwrap()), ["persona"]);
    assert_eq!(labels(store.context_blocks(b).await.unwrap()), ["task"]);
}
