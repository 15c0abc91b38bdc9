//! The [`MemoryStore`] trait: the one way higher layers reach an agent's memory.
//!
//! A store is shared by many agents (the agent id is a parameter, never state). Implementations
//! must never return a block the agent has no access to, never truncate a value, and never apply
//! a change based on a version other than the one the caller names (a stale version is
//! [`Error::Conflict`](crate::Error::Conflict)).
//!
//! Three traits: [`MemoryStore`] is the read side, all that context building needs;
//! [`MemoryEditor`] adds the versioned writes the agent's memory tools make; [`ArchivalMemory`]
//! is archival memory (passages searched on demand) and search over all memory.

use async_trait::async_trait;
use db_v2::{SearchHit, SearchOptions};
use pattern_db::{AgentId, ArchivalEntry, ArchivalId, ListArchival, NewArchival};

use crate::block::{BlockVersion, MemoryBlock, NewMemoryBlock, Permission, WriteAuth};
use crate::error::{Error, Result};

/// Memory shared across agents, read and written per agent. Every write names the version it was
/// based on and returns the block's new version.
#[async_trait]
pub trait MemoryStore: Send + Sync {
    /// Every block visible to `agent` whose type belongs in the context window, in a stable
    /// order (by label), with this agent's permission on each.
    async fn context_blocks(&self, agent: AgentId) -> Result<Vec<MemoryBlock>>;

    /// The block `agent` sees as `label`. Provided: looked up among
    /// [`context_blocks`](Self::context_blocks).
    async fn block(&self, agent: AgentId, label: &str) -> Result<MemoryBlock> {
        self.context_blocks(agent)
            .await?
            .into_iter()
            .find(|b| b.label == label)
            .ok_or_else(|| Error::UnknownBlock {
                agent,
                label: label.to_owned(),
            })
    }
}

/// The versioned writes on memory blocks (the agent's memory tools). Every write names the
/// version it was based on and returns the block's new version.
#[async_trait]
pub trait MemoryEditor: MemoryStore {
    /// Creates a block owned by `owner` (who gets [`Permission::Admin`]).
    async fn create_block(&self, owner: AgentId, new: NewMemoryBlock) -> Result<MemoryBlock>;

    /// Replaces the whole value.
    async fn set(
        &self,
        agent: AgentId,
        label: &str,
        value: &str,
        expected_version: i64,
        auth: WriteAuth,
    ) -> Result<i64>;

    /// Replaces the first occurrence of `old` with `new`.
    async fn replace(
        &self,
        agent: AgentId,
        label: &str,
        old: &str,
        new: &str,
        expected_version: i64,
        auth: WriteAuth,
    ) -> Result<i64>;

    /// Adds `text` on a new line at the end.
    async fn append(
        &self,
        agent: AgentId,
        label: &str,
        text: &str,
        expected_version: i64,
        auth: WriteAuth,
    ) -> Result<i64>;

    /// Inserts `text` so that it becomes line `line` (0-based; the line count appends).
    async fn insert(
        &self,
        agent: AgentId,
        label: &str,
        line: usize,
        text: &str,
        expected_version: i64,
        auth: WriteAuth,
    ) -> Result<i64>;

    /// Restores the value from before the latest change, as a new version.
    async fn undo(
        &self,
        agent: AgentId,
        label: &str,
        expected_version: i64,
        auth: WriteAuth,
    ) -> Result<i64>;

    /// Every version of the block, newest first.
    async fn history(&self, agent: AgentId, label: &str) -> Result<Vec<BlockVersion>>;

    /// Gives `with` access to the block `agent` (an admin of it) sees as `label`, under the same
    /// label, or changes the permission `with` has.
    async fn share(
        &self,
        agent: AgentId,
        label: &str,
        with: AgentId,
        permission: Permission,
    ) -> Result<()>;
}

/// Archival memory (passages with metadata and tags, searched on demand, embedded in the
/// background) and search over an agent's memory, delegating to `db_v2`.
#[async_trait]
pub trait ArchivalMemory: Send + Sync {
    /// Store a passage for `agent`; its embedding is queued in the same transaction. A repeated
    /// `dedupe_key` returns the stored passage and stores nothing.
    async fn insert_archival(&self, agent: AgentId, new: NewArchival) -> Result<ArchivalEntry>;

    /// One passage of `agent`.
    async fn archival(&self, agent: AgentId, id: ArchivalId) -> Result<ArchivalEntry>;

    /// `agent`'s passages, newest first (paged, optionally by tag).
    async fn list_archival(&self, agent: AgentId, list: ListArchival)
    -> Result<Vec<ArchivalEntry>>;

    /// Delete a passage; true if it existed. It never appears in search again.
    async fn delete_archival(&self, agent: AgentId, id: ArchivalId) -> Result<bool>;

    /// Search messages, blocks and passages (full-text, vector, hybrid; see
    /// [`SearchOptions`]). Set `options.agent` to search what one agent can see.
    async fn search(&self, query: &str, options: &SearchOptions) -> Result<Vec<SearchHit>>;
}
