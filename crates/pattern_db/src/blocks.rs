//! Memory blocks: size-limited, versioned text an agent keeps in context, owned by one agent and
//! shared with others through access rows.
//!
//! The types ([`NewBlock`], [`StoredBlock`], [`BlockVersion`]), the reads, and the [`Database`]
//! methods that queue block writes to the writer (their SQL is in `ops::blocks`). Invariants:
//!
//! - an agent only ever sees (and changes) blocks it has an access row for;
//! - a value is never cut to fit its limit: a longer value is [`BlockError::OverLimit`];
//! - no lost update: a write names the version it read, and a stale one is
//!   [`BlockError::VersionConflict`], checked in the same transaction as the update;
//! - every change is a new version with its row in the history, written in that transaction.
//!
//! Permissions are plain names here (`read_only`, `partner`, `human`, `append`, `read_write`,
//! `admin`); which of them may make which change is the caller's rule (`memory_v2`), passed in as
//! `allowed_permissions`. Only `admin` may share, unshare and delete, whatever the caller says.
//! This module must never write outside the writer.

use chrono::{DateTime, Utc};

use crate::sql::Conn;
use uuid::Uuid;

use crate::db::Database;
use crate::error::Result;
use crate::model::AgentId;
use crate::ops::blocks::{CreateBlock, DeleteBlock, SetValue, Share};
use crate::ops::{FromStored, StoredId, StoredTime, parse_uuid};

/// Block types a block may have.
pub const BLOCK_TYPES: &[&str] = &["core", "working", "archival", "log"];
/// Permissions an agent may hold on a block, from least to most access.
pub const PERMISSIONS: &[&str] = &[
    "read_only",
    "partner",
    "human",
    "append",
    "read_write",
    "admin",
];
/// Kinds of change a version records.
pub const CHANGES: &[&str] = &["create", "replace", "append", "insert", "undo", "settings"];
/// Most characters a label may hold.
pub const MAX_LABEL_CHARS: usize = 100;
/// Largest character limit a block may have.
pub const MAX_CHAR_LIMIT: i64 = 1_000_000;

/// A block to create.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewBlock {
    /// 1 to 100 characters of `[a-z0-9_-]`, unique among the blocks the owner sees.
    pub label: String,
    /// What the block is for, shown to the model.
    pub description: String,
    /// The first value; at most `char_limit` characters.
    pub value: String,
    /// Most characters the value may hold, 1 to 1,000,000.
    pub char_limit: i64,
    /// One of [`BLOCK_TYPES`].
    pub block_type: String,
}

/// A block as one agent sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredBlock {
    /// The block's id.
    pub id: Uuid,
    /// The agent that created it.
    pub owner: AgentId,
    /// Its label.
    pub label: String,
    /// What it is for.
    pub description: String,
    /// The current value.
    pub value: String,
    /// Most characters the value may hold.
    pub char_limit: i64,
    /// One of [`BLOCK_TYPES`].
    pub block_type: String,
    /// The permission of the agent that read it, one of [`PERMISSIONS`].
    pub permission: String,
    /// The current version (1 at creation, +1 per change).
    pub version: i64,
    /// When the value last changed.
    pub updated_at: DateTime<Utc>,
}

/// One version of a block, from its history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockVersion {
    /// The version number.
    pub version: i64,
    /// The value at this version.
    pub value: String,
    /// The description at this version.
    pub description: String,
    /// The agent that made the change.
    pub changed_by: AgentId,
    /// One of [`CHANGES`].
    pub change: String,
    /// When.
    pub created_at: DateTime<Utc>,
}

/// Characters in `text` as limits count them: Unicode scalar values.
pub fn char_count(text: &str) -> usize {
    text.chars().count()
}

/// Checks a label: 1 to [`MAX_LABEL_CHARS`] characters of `[a-z0-9_-]`.
pub fn validate_label(label: &str) -> Result<()> {
    let len = label.chars().count();
    if len == 0 || len > MAX_LABEL_CHARS {
        return Err(BlockError::InvalidLabel {
            label: label.to_owned(),
            reason: format!("must be 1 to {MAX_LABEL_CHARS} characters, got {len}"),
        }
        .into());
    }
    if let Some(c) = label
        .chars()
        .find(|c| !matches!(c, 'a'..='z' | '0'..='9' | '_' | '-'))
    {
        return Err(BlockError::InvalidLabel {
            label: label.to_owned(),
            reason: format!("only a-z, 0-9, `_` and `-` are allowed, found {c:?}"),
        }
        .into());
    }
    Ok(())
}

pub(crate) fn validate_one_of(what: &'static str, value: &str, allowed: &[&str]) -> Result<()> {
    if allowed.contains(&value) {
        Ok(())
    } else {
        Err(BlockError::Invalid(format!(
            "unknown {what} `{value}`; expected one of {allowed:?}"
        ))
        .into())
    }
}

/// Checks a new block's fields (label, limit, type, value length).
pub(crate) fn validate_new(new: &NewBlock) -> Result<()> {
    validate_label(&new.label)?;
    if !(1..=MAX_CHAR_LIMIT).contains(&new.char_limit) {
        return Err(BlockError::Invalid(format!(
            "char_limit must be 1 to {MAX_CHAR_LIMIT}, got {}",
            new.char_limit
        ))
        .into());
    }
    validate_one_of("block type", &new.block_type, BLOCK_TYPES)?;
    check_limit(&new.label, &new.value, new.char_limit)
}

/// [`BlockError::OverLimit`] when `value` has more characters than `limit`;
/// [`BlockError::Invalid`] when it holds a NUL character, which PostgreSQL's text cannot keep
/// (refused on both engines, so a block means the same on either).
pub(crate) fn check_limit(label: &str, value: &str, limit: i64) -> Result<()> {
    if value.contains('\0') {
        return Err(BlockError::Invalid(format!(
            "block `{label}`: a value may not hold a NUL character"
        ))
        .into());
    }
    let chars = char_count(value);
    let limit = usize::try_from(limit).unwrap_or(0);
    if chars > limit {
        return Err(BlockError::OverLimit {
            label: label.to_owned(),
            chars,
            limit,
        }
        .into());
    }
    Ok(())
}

/// A block from either engine's checked row ([`FromStored`]).
pub(crate) fn block_from_plain(row: impl FromStored<StoredBlock>) -> Result<StoredBlock> {
    row.into_domain()
}

/// [`FromStored`] for the block and version rows of one engine's crate of checked statements:
/// one conversion, written once, for both engines.
macro_rules! blocks_from_stored {
    ($engine:ident) => {
        impl FromStored<StoredBlock> for $engine::blocks::BlockRow {
            fn into_domain(self) -> Result<StoredBlock> {
                Ok(StoredBlock {
                    id: self.id.uuid()?,
                    owner: AgentId(self.owner_agent_id.uuid()?),
                    label: self.label,
                    description: self.description,
                    value: self.value,
                    char_limit: self.char_limit,
                    block_type: self.block_type,
                    permission: self.permission,
                    version: self.version,
                    updated_at: self.updated_at.time(),
                })
            }
        }

        impl FromStored<BlockVersion> for $engine::blocks::VersionRow {
            fn into_domain(self) -> Result<BlockVersion> {
                Ok(BlockVersion {
                    version: self.version,
                    value: self.value,
                    description: self.description,
                    changed_by: AgentId(parse_uuid(&self.changed_by)?),
                    change: self.change,
                    created_at: self.created_at.time(),
                })
            }
        }
    };
}

blocks_from_stored!(pattern_db_sqlite);
blocks_from_stored!(pattern_db_postgres);

impl Database {
    /// Creates a block owned by `owner`, who gets `admin` access; version 1 is its first history
    /// row. Bad fields are [`BlockError::InvalidLabel`], [`BlockError::Invalid`] or
    /// [`BlockError::OverLimit`]; a label the owner already sees is
    /// [`BlockError::LabelTaken`].
    pub async fn create_block(&self, owner: AgentId, new: NewBlock) -> Result<StoredBlock> {
        // The write checks the block (`validate_new`), composed into an import or not.
        self.write(CreateBlock { owner, new }).await
    }

    /// The block `agent` sees under `label`, with `agent`'s permission.
    pub async fn block(&self, agent: AgentId, label: &str) -> Result<StoredBlock> {
        let mut pooled = self.reader().acquire().await?;
        let row = match &mut pooled.conn() {
            Conn::Sqlite(c) => pattern_db_sqlite::blocks::seen_as(c, &agent.to_string(), label)
                .await?
                .map(block_from_plain),
            Conn::Postgres(c) => pattern_db_postgres::blocks::seen_as(c, agent.0, label)
                .await?
                .map(block_from_plain),
        };
        match row {
            Some(block) => block,
            None => Err(BlockError::NotFound {
                agent,
                label: label.to_owned(),
            }
            .into()),
        }
    }

    /// Every block `agent` has access to, sorted by label.
    pub async fn blocks_for(&self, agent: AgentId) -> Result<Vec<StoredBlock>> {
        let mut pooled = self.reader().acquire().await?;
        match &mut pooled.conn() {
            Conn::Sqlite(c) => pattern_db_sqlite::blocks::seen_by(c, &agent.to_string())
                .await?
                .into_iter()
                .map(block_from_plain)
                .collect(),
            Conn::Postgres(c) => pattern_db_postgres::blocks::seen_by(c, agent.0)
                .await?
                .into_iter()
                .map(block_from_plain)
                .collect(),
        }
    }

    /// Sets the value of the block `agent` sees as `label`, if its current version is
    /// `expected_version` and `agent`'s permission is one of `allowed_permissions`; records the
    /// change (one of [`CHANGES`]) as a new version and returns it. One transaction: on any error
    /// nothing changes. Errors: [`BlockError::NotFound`], [`BlockError::PermissionDenied`],
    /// [`BlockError::OverLimit`] (the value is never cut), [`BlockError::VersionConflict`].
    pub async fn write_block(
        &self,
        agent: AgentId,
        label: &str,
        expected_version: i64,
        new_value: String,
        change: &str,
        allowed_permissions: &[&str],
    ) -> Result<i64> {
        validate_one_of("change", change, CHANGES)?;
        let owner = self.block_owner(agent, label).await?;
        self.write(SetValue {
            agent,
            owner,
            label: label.to_owned(),
            expected: expected_version,
            value: Some(new_value),
            change: change.to_owned(),
            allowed: allowed_permissions
                .iter()
                .map(|p| (*p).to_owned())
                .collect(),
        })
        .await
    }

    /// Restores the value the block had before its latest change, as a new version with change
    /// `undo` (so undoing twice restores the undone value). Same checks as [`Self::write_block`];
    /// a block still at its first version is [`BlockError::NothingToUndo`].
    pub async fn undo_block(
        &self,
        agent: AgentId,
        label: &str,
        expected_version: i64,
        allowed_permissions: &[&str],
    ) -> Result<i64> {
        let owner = self.block_owner(agent, label).await?;
        self.write(SetValue {
            agent,
            owner,
            label: label.to_owned(),
            expected: expected_version,
            value: None,
            change: "undo".to_owned(),
            allowed: allowed_permissions
                .iter()
                .map(|p| (*p).to_owned())
                .collect(),
        })
        .await
    }

    /// Every version of the block `agent` sees as `label`, newest first.
    pub async fn block_history(&self, agent: AgentId, label: &str) -> Result<Vec<BlockVersion>> {
        let block = self.block(agent, label).await?;
        let mut pooled = self.reader().acquire().await?;
        match &mut pooled.conn() {
            Conn::Sqlite(c) => pattern_db_sqlite::blocks::history(c, &block.id.to_string())
                .await?
                .into_iter()
                .map(FromStored::into_domain)
                .collect(),
            Conn::Postgres(c) => pattern_db_postgres::blocks::history(c, block.id)
                .await?
                .into_iter()
                .map(FromStored::into_domain)
                .collect(),
        }
    }

    /// Gives `with` access to the block `agent` sees as `label`, under the same label, with
    /// `permission` (or changes the permission `with` has). Only an `admin` of the block may share
    /// ([`BlockError::PermissionDenied`]); a label `with` already uses for another block is
    /// [`BlockError::LabelTaken`].
    pub async fn share_block(
        &self,
        agent: AgentId,
        label: &str,
        with: AgentId,
        permission: &str,
    ) -> Result<()> {
        validate_one_of("permission", permission, PERMISSIONS)?;
        let owner = self.block_owner(agent, label).await?;
        self.write(Share {
            agent,
            owner,
            label: label.to_owned(),
            with,
            permission: Some(permission.to_owned()),
        })
        .await
    }

    /// Takes away the access `with` has to the block `agent` (an `admin`) sees as `label`. The
    /// owner's own access cannot be taken away ([`BlockError::Invalid`]); delete the block
    /// instead. `with` without access is [`BlockError::NotFound`] for `with`.
    pub async fn unshare_block(&self, agent: AgentId, label: &str, with: AgentId) -> Result<()> {
        let owner = self.block_owner(agent, label).await?;
        self.write(Share {
            agent,
            owner,
            label: label.to_owned(),
            with,
            permission: None,
        })
        .await
    }

    /// Deletes the block `agent` (an `admin`) sees as `label`, with every access row and its
    /// history.
    pub async fn delete_block(&self, agent: AgentId, label: &str) -> Result<()> {
        let owner = self.block_owner(agent, label).await?;
        self.write(DeleteBlock {
            agent,
            owner,
            label: label.to_owned(),
        })
        .await
    }

    /// The owner of the block `agent` sees as `label`: the write locks the owner's agent row
    /// first, so every write of one block is serialised and write groups keep their lock order.
    async fn block_owner(&self, agent: AgentId, label: &str) -> Result<AgentId> {
        let mut pooled = self.reader().acquire().await?;
        let owner = match &mut pooled.conn() {
            Conn::Sqlite(c) => pattern_db_sqlite::blocks::owner_of(c, &agent.to_string(), label)
                .await?
                .map(|o| parse_uuid(&o))
                .transpose()?,
            Conn::Postgres(c) => pattern_db_postgres::blocks::owner_of(c, agent.0, label).await?,
        };
        match owner {
            Some(owner) => Ok(AgentId(owner)),
            None => Err(BlockError::NotFound {
                agent,
                label: label.to_owned(),
            }
            .into()),
        }
    }
}

/// Refusals of the memory blocks' domain (module [`crate::blocks`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BlockError {
    /// No memory block with this label is visible to this agent.
    #[error("no memory block labelled `{label}` for agent {agent}")]
    NotFound {
        /// The agent.
        agent: crate::AgentId,
        /// The label asked for.
        label: String,
    },
    /// The agent's permission on the block does not allow this change.
    #[error("permission `{permission}` on block `{label}` does not allow this change")]
    PermissionDenied {
        /// The block's label.
        label: String,
        /// The agent's permission.
        permission: String,
    },
    /// A value longer than the block's limit (never cut to fit).
    #[error("block `{label}` holds at most {limit} characters; the new value has {chars}")]
    OverLimit {
        /// The block's label.
        label: String,
        /// Characters (Unicode scalar values) in the refused value.
        chars: usize,
        /// The block's limit.
        limit: usize,
    },
    /// The block changed since the version the write was based on.
    #[error(
        "block `{label}` is at version {current}, not {expected}: read it again and redo the change"
    )]
    VersionConflict {
        /// The block's label.
        label: String,
        /// The version the write expected.
        expected: i64,
        /// The version stored.
        current: i64,
    },
    /// The agent already sees another block under this label.
    #[error("agent {agent} already has a memory block labelled `{label}`")]
    LabelTaken {
        /// The agent.
        agent: crate::AgentId,
        /// The label.
        label: String,
    },
    /// A block label is malformed.
    #[error("invalid block label `{label}`: {reason}")]
    InvalidLabel {
        /// The label given.
        label: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A block field or request is invalid (limit, type, permission, change kind).
    #[error("invalid memory block request: {0}")]
    Invalid(String),
    /// The block has no earlier version to go back to.
    #[error("block `{label}` is at version {version}, which has no earlier version to undo to")]
    NothingToUndo {
        /// The block's label.
        label: String,
        /// Its current version.
        version: i64,
    },
}

impl BlockError {
    /// What kind of failure this is (see [`crate::ErrorClass`]).
    pub fn class(&self) -> crate::ErrorClass {
        use crate::ErrorClass as C;
        match self {
            BlockError::NotFound { .. } => C::NotFound,
            BlockError::PermissionDenied { .. } | BlockError::OverLimit { .. } => C::Refused,
            BlockError::VersionConflict { .. }
            | BlockError::LabelTaken { .. }
            | BlockError::NothingToUndo { .. } => C::Conflict,
            BlockError::InvalidLabel { .. } | BlockError::Invalid(_) => C::Invalid,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Error;

    #[test]
    fn labels_are_checked() {
        assert!(validate_label("persona").is_ok());
        assert!(validate_label("a-b_9").is_ok());
        assert!(validate_label("").is_err());
        assert!(validate_label("Persona").is_err());
        assert!(validate_label("a b").is_err());
        assert!(validate_label(&"x".repeat(101)).is_err());
        assert!(validate_label(&"x".repeat(100)).is_ok());
    }

    #[test]
    fn limits_count_characters() {
        assert!(check_limit("l", "héllo", 5).is_ok());
        assert!(matches!(
            check_limit("l", "a\0b", 5),
            Err(crate::Error::Block(BlockError::Invalid(_)))
        ));
        assert!(matches!(
            check_limit("l", "héllo!", 5),
            Err(Error::Block(BlockError::OverLimit {
                chars: 6,
                limit: 5,
                ..
            }))
        ));
    }
}
