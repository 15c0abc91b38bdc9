//! The memory block model: what a block holds and who may change it.
//!
//! Plain values; this module must never perform I/O.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// Where a block lives and how it is used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BlockType {
    /// Always in context: persona, the human, the agent's core facts.
    Core,
    /// In context while relevant: the task at hand, scratch notes.
    Working,
    /// Not in context; searched on demand.
    Archival,
    /// An append-only log shown in context (e.g. recent events).
    Log,
}

impl BlockType {
    /// Whether blocks of this type go into the context window.
    pub fn in_context(self) -> bool {
        !matches!(self, BlockType::Archival)
    }
}

/// What an agent may do with a block. Ordered from least to most access.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Permission {
    /// Read only.
    ReadOnly,
    /// Changes need the partner's (the owning human's) approval.
    Partner,
    /// Changes need any human's approval.
    Human,
    /// May append, never rewrite.
    Append,
    /// May read and rewrite.
    ReadWrite,
    /// May also change the block's settings (limit, description, permissions).
    Admin,
}

impl Permission {
    /// The stable lower-case name shown to models and stored.
    pub fn as_str(self) -> &'static str {
        match self {
            Permission::ReadOnly => "read_only",
            Permission::Partner => "partner",
            Permission::Human => "human",
            Permission::Append => "append",
            Permission::ReadWrite => "read_write",
            Permission::Admin => "admin",
        }
    }
}

/// One memory block as an agent sees it: its content and this agent's access to it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MemoryBlock {
    /// Unique per agent; how tools name the block.
    pub label: String,
    /// What the block is for, shown to the model.
    pub description: String,
    /// The content.
    pub value: String,
    /// Most characters the value may hold.
    pub char_limit: usize,
    /// Kind of block.
    pub block_type: BlockType,
    /// This agent's access.
    pub permission: Permission,
    /// Version, increased by every change (optimistic concurrency).
    pub version: i64,
    /// When the value last changed.
    pub updated_at: DateTime<Utc>,
}

impl MemoryBlock {
    /// Characters the value holds (Unicode scalar values, as limits are stated).
    pub fn char_count(&self) -> usize {
        self.value.chars().count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_characters_not_bytes() {
        let b = MemoryBlock {
            label: "persona".into(),
            description: "who I am".into(),
            value: "héllo ✓".into(),
            char_limit: 10,
            block_type: BlockType::Core,
            permission: Permission::ReadWrite,
            version: 1,
            updated_at: Utc::now(),
        };
        assert_eq!(b.char_count(), 7);
        assert!(Permission::Admin > Permission::ReadOnly);
        assert!(!BlockType::Archival.in_context());
    }
}
