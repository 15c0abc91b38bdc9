//! The [`MemoryStore`] trait: the one way higher layers reach an agent's memory.
//!
//! A store is shared by many agents (the agent id is a parameter, never state). Implementations
//! must never return a block the agent has no access to, and never truncate a value.

use async_trait::async_trait;
use pattern_db::AgentId;

use crate::block::MemoryBlock;
use crate::error::Result;

/// Memory shared across agents, read and written per agent.
#[async_trait]
pub trait MemoryStore: Send + Sync {
    /// Every block visible to `agent` whose type belongs in the context window, in a stable
    /// order (by label), with this agent's permission on each.
    async fn context_blocks(&self, agent: AgentId) -> Result<Vec<MemoryBlock>>;
}
