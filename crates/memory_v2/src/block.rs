//! The memory block model: what a block holds and who may change it.
//!
//! Plain values; this module must never perform I/O.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

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
    /// The stable lower-case name stored in the database.
    pub fn as_str(self) -> &'static str {
        match self {
            BlockType::Core => "core",
            BlockType::Working => "working",
            BlockType::Archival => "archival",
            BlockType::Log => "log",
        }
    }

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

impl std::str::FromStr for BlockType {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "core" => Ok(BlockType::Core),
            "working" => Ok(BlockType::Working),
            "archival" => Ok(BlockType::Archival),
            "log" => Ok(BlockType::Log),
            other => Err(Error::Invalid(format!("unknown block type `{other}`"))),
        }
    }
}

impl std::str::FromStr for Permission {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "read_only" => Ok(Permission::ReadOnly),
            "partner" => Ok(Permission::Partner),
            "human" => Ok(Permission::Human),
            "append" => Ok(Permission::Append),
            "read_write" => Ok(Permission::ReadWrite),
            "admin" => Ok(Permission::Admin),
            other => Err(Error::Invalid(format!("unknown permission `{other}`"))),
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

/// A block to create.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NewMemoryBlock {
    /// 1 to 100 characters of `[a-z0-9_-]`, unique among the blocks the owner sees.
    pub label: String,
    /// What the block is for, shown to the model.
    pub description: String,
    /// The first value; at most `char_limit` characters.
    pub value: String,
    /// Most characters the value may hold (1 to 1,000,000).
    pub char_limit: usize,
    /// Kind of block.
    pub block_type: BlockType,
}

/// One version of a block, from its history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlockVersion {
    /// The version number (1 at creation).
    pub version: i64,
    /// The value at this version.
    pub value: String,
    /// The agent that made the change.
    pub changed_by: pattern_db::AgentId,
    /// What kind of change: `create`, `replace`, `append`, `insert`, `undo` or `settings`.
    pub change: String,
    /// When.
    pub created_at: DateTime<Utc>,
}

/// Who stands behind a change: the agent alone, or the agent with a human's approval (given
/// through the runtime's permission broker). Approval lets `partner` and `human` permissions
/// change a block; it never lets `read_only` do anything.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WriteAuth {
    /// The agent's own call.
    Agent,
    /// The agent's call, approved by a human.
    Approved,
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
