//! [`DbMemoryStore`]: the [`MemoryStore`] over `pattern_db`'s memory blocks.
//!
//! Every change is a read-modify-write against the version the caller names: the store reads the
//! block, checks the agent's permission, computes the new value, and hands it to
//! `pattern_db::Database::write_block`, which re-checks access, permission, limit and version and
//! writes the new version with its history row in one transaction. A stale version is
//! [`Error::Conflict`] (read again and redo: no update is ever lost); a value over the limit is
//! [`Error::OverLimit`] and nothing is stored (a value is never cut).
//!
//! Permission rules, per change:
//!
//! | permission              | append | replace, insert, set, undo |
//! |-------------------------|--------|----------------------------|
//! | `read_only`             | no     | no                         |
//! | `append`                | yes    | no                         |
//! | `read_write`, `admin`   | yes    | yes                        |
//! | `partner`, `human`      | approved only              | approved only              |
//!
//! "Approved only": the call needs [`WriteAuth::Approved`]; without it, it is
//! [`Error::NeedsApproval`], and the runtime's permission broker calls again once a human
//! approves.
//!
//! Sharing needs `admin` on the block. An agent only ever sees blocks it has access to.
//! This module must never write a block except through `pattern_db`'s checked write.

use async_trait::async_trait;
use db_v2::{ConstellationDb, SearchHit, SearchOptions};
use pattern_db::{
    AgentId, ArchivalEntry, ArchivalId, Database, ListArchival, NewArchival, StoredBlock,
};

use crate::block::{BlockType, BlockVersion, MemoryBlock, NewMemoryBlock, Permission, WriteAuth};
use crate::error::{Error, Result};
use crate::store::{ArchivalMemory, MemoryEditor, MemoryStore};

/// A [`MemoryStore`] over a `pattern_db` database (SQLite or PostgreSQL). Cheap to clone.
#[derive(Debug, Clone)]
pub struct DbMemoryStore {
    db: Database,
    search: ConstellationDb,
}

/// Which kind of change, for the permission rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Change {
    Append,
    Rewrite(&'static str),
}

impl Change {
    fn name(self) -> &'static str {
        match self {
            Change::Append => "append",
            Change::Rewrite(name) => name,
        }
    }
}

/// The permissions allowed to make `change` under `auth`.
fn allowed(change: Change, auth: WriteAuth) -> Vec<&'static str> {
    let mut out = vec!["read_write", "admin"];
    if change == Change::Append {
        out.push("append");
    }
    if auth == WriteAuth::Approved {
        out.extend(["partner", "human"]);
    }
    out
}

/// Checks `permission` against the rules for `change` under `auth`.
fn check(label: &str, permission: Permission, change: Change, auth: WriteAuth) -> Result<()> {
    if allowed(change, auth).contains(&permission.as_str()) {
        return Ok(());
    }
    if matches!(permission, Permission::Partner | Permission::Human) {
        return Err(Error::NeedsApproval {
            label: label.to_owned(),
            permission,
        });
    }
    Err(Error::PermissionDenied {
        label: label.to_owned(),
        permission,
        operation: change.name(),
    })
}

/// `value` with `text` on a new line at the end.
pub(crate) fn appended(value: &str, text: &str) -> String {
    if value.is_empty() {
        text.to_owned()
    } else {
        format!("{value}\n{text}")
    }
}

/// `value` with `text` inserted as line `line` (0-based); `None` past the end.
pub(crate) fn inserted(value: &str, line: usize, text: &str) -> Option<String> {
    let mut lines: Vec<&str> = if value.is_empty() {
        Vec::new()
    } else {
        value.split('\n').collect()
    };
    if line > lines.len() {
        return None;
    }
    lines.insert(line, text);
    Some(lines.join("\n"))
}

fn line_count(value: &str) -> usize {
    if value.is_empty() {
        0
    } else {
        value.split('\n').count()
    }
}

fn to_block(stored: StoredBlock) -> Result<MemoryBlock> {
    Ok(MemoryBlock {
        block_type: stored.block_type.parse::<BlockType>()?,
        permission: stored.permission.parse::<Permission>()?,
        char_limit: usize::try_from(stored.char_limit).unwrap_or(0),
        label: stored.label,
        description: stored.description,
        value: stored.value,
        version: stored.version,
        updated_at: stored.updated_at,
    })
}

impl DbMemoryStore {
    /// A store over `db`, with full-text search only (no embedder).
    pub fn new(db: Database) -> Self {
        Self {
            search: ConstellationDb::fts_only(db.clone()),
            db,
        }
    }

    /// A store over a [`ConstellationDb`]: archival passages and block values are embedded in
    /// the background and searchable by vector and hybrid search.
    pub fn with_search(search: ConstellationDb) -> Self {
        Self {
            db: search.db().clone(),
            search,
        }
    }

    /// The search layer underneath.
    pub fn search_db(&self) -> &ConstellationDb {
        &self.search
    }

    /// The database underneath.
    pub fn database(&self) -> &Database {
        &self.db
    }

    /// Every block `agent` sees, archival ones included, by label.
    pub async fn all_blocks(&self, agent: AgentId) -> Result<Vec<MemoryBlock>> {
        self.db
            .blocks_for(agent)
            .await?
            .into_iter()
            .map(to_block)
            .collect()
    }

    /// Reads the block, checks the version and permission, and writes `edit(value)`.
    async fn change(
        &self,
        agent: AgentId,
        label: &str,
        expected_version: i64,
        change: Change,
        auth: WriteAuth,
        edit: impl FnOnce(&str) -> Result<String> + Send,
    ) -> Result<i64> {
        let block = self.block(agent, label).await?;
        check(label, block.permission, change, auth)?;
        if block.version != expected_version {
            return Err(Error::Conflict {
                label: label.to_owned(),
                expected: expected_version,
                current: block.version,
            });
        }
        let value = edit(&block.value)?;
        let allowed = allowed(change, auth);
        let written = match change {
            Change::Rewrite("undo") => {
                self.db
                    .undo_block(agent, label, expected_version, &allowed)
                    .await
            }
            _ => {
                self.db
                    .write_block(
                        agent,
                        label,
                        expected_version,
                        value,
                        change.name(),
                        &allowed,
                    )
                    .await
            }
        };
        if written.is_ok() {
            // The write recorded an embedding job for the new value: embed it now, not at the
            // worker's next poll.
            self.search.wake_worker();
        }
        written.map_err(|e| match Error::from(e) {
            // The permission changed between the read and the write.
            Error::PermissionDenied { permission, .. } => {
                match check(label, permission, change, auth) {
                    Err(e) => e,
                    Ok(()) => Error::PermissionDenied {
                        label: label.to_owned(),
                        permission,
                        operation: change.name(),
                    },
                }
            }
            other => other,
        })
    }
}

#[async_trait]
impl MemoryStore for DbMemoryStore {
    async fn context_blocks(&self, agent: AgentId) -> Result<Vec<MemoryBlock>> {
        Ok(self
            .all_blocks(agent)
            .await?
            .into_iter()
            .filter(|b| b.block_type.in_context())
            .collect())
    }

    async fn block(&self, agent: AgentId, label: &str) -> Result<MemoryBlock> {
        to_block(self.db.block(agent, label).await?)
    }
}

#[async_trait]
impl MemoryEditor for DbMemoryStore {
    async fn create_block(&self, owner: AgentId, new: NewMemoryBlock) -> Result<MemoryBlock> {
        let stored = self
            .db
            .create_block(
                owner,
                pattern_db::NewBlock {
                    label: new.label,
                    description: new.description,
                    value: new.value,
                    char_limit: i64::try_from(new.char_limit).unwrap_or(i64::MAX),
                    block_type: new.block_type.as_str().to_owned(),
                },
            )
            .await?;
        self.search.wake_worker();
        to_block(stored)
    }

    async fn set(
        &self,
        agent: AgentId,
        label: &str,
        value: &str,
        expected_version: i64,
        auth: WriteAuth,
    ) -> Result<i64> {
        let value = value.to_owned();
        self.change(
            agent,
            label,
            expected_version,
            Change::Rewrite("replace"),
            auth,
            move |_| Ok(value),
        )
        .await
    }

    async fn replace(
        &self,
        agent: AgentId,
        label: &str,
        old: &str,
        new: &str,
        expected_version: i64,
        auth: WriteAuth,
    ) -> Result<i64> {
        self.change(
            agent,
            label,
            expected_version,
            Change::Rewrite("replace"),
            auth,
            |value| {
                if old.is_empty() || !value.contains(old) {
                    return Err(Error::TextNotFound {
                        label: label.to_owned(),
                        text: old.to_owned(),
                    });
                }
                Ok(value.replacen(old, new, 1))
            },
        )
        .await
    }

    async fn append(
        &self,
        agent: AgentId,
        label: &str,
        text: &str,
        expected_version: i64,
        auth: WriteAuth,
    ) -> Result<i64> {
        self.change(
            agent,
            label,
            expected_version,
            Change::Append,
            auth,
            |value| Ok(appended(value, text)),
        )
        .await
    }

    async fn insert(
        &self,
        agent: AgentId,
        label: &str,
        line: usize,
        text: &str,
        expected_version: i64,
        auth: WriteAuth,
    ) -> Result<i64> {
        self.change(
            agent,
            label,
            expected_version,
            Change::Rewrite("insert"),
            auth,
            |value| {
                inserted(value, line, text).ok_or_else(|| Error::LineOutOfRange {
                    label: label.to_owned(),
                    line,
                    lines: line_count(value),
                })
            },
        )
        .await
    }

    async fn undo(
        &self,
        agent: AgentId,
        label: &str,
        expected_version: i64,
        auth: WriteAuth,
    ) -> Result<i64> {
        self.change(
            agent,
            label,
            expected_version,
            Change::Rewrite("undo"),
            auth,
            |value| Ok(value.to_owned()),
        )
        .await
    }

    async fn history(&self, agent: AgentId, label: &str) -> Result<Vec<BlockVersion>> {
        Ok(self
            .db
            .block_history(agent, label)
            .await?
            .into_iter()
            .map(|v| BlockVersion {
                version: v.version,
                value: v.value,
                changed_by: v.changed_by,
                change: v.change,
                created_at: v.created_at,
            })
            .collect())
    }

    async fn share(
        &self,
        agent: AgentId,
        label: &str,
        with: AgentId,
        permission: Permission,
    ) -> Result<()> {
        self.db
            .share_block(agent, label, with, permission.as_str())
            .await
            .map_err(|e| match Error::from(e) {
                Error::PermissionDenied {
                    label, permission, ..
                } => Error::PermissionDenied {
                    label,
                    permission,
                    operation: "share",
                },
                other => other,
            })
    }
}

#[async_trait]
impl ArchivalMemory for DbMemoryStore {
    async fn insert_archival(&self, agent: AgentId, new: NewArchival) -> Result<ArchivalEntry> {
        Ok(self.search.insert_archival(agent, new).await?)
    }

    async fn archival(&self, agent: AgentId, id: ArchivalId) -> Result<ArchivalEntry> {
        Ok(self.search.archival(agent, id).await?)
    }

    async fn list_archival(
        &self,
        agent: AgentId,
        list: ListArchival,
    ) -> Result<Vec<ArchivalEntry>> {
        Ok(self.search.list_archival(agent, list).await?)
    }

    async fn delete_archival(&self, agent: AgentId, id: ArchivalId) -> Result<bool> {
        Ok(self.search.delete_archival(agent, id).await?)
    }

    async fn search(&self, query: &str, options: &SearchOptions) -> Result<Vec<SearchHit>> {
        Ok(self.search.search(query, options).await?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edits() {
        assert_eq!(appended("", "a"), "a");
        assert_eq!(appended("a", "b"), "a\nb");
        assert_eq!(inserted("", 0, "x").as_deref(), Some("x"));
        assert_eq!(inserted("a\nb", 0, "x").as_deref(), Some("x\na\nb"));
        assert_eq!(inserted("a\nb", 1, "x").as_deref(), Some("a\nx\nb"));
        assert_eq!(inserted("a\nb", 2, "x").as_deref(), Some("a\nb\nx"));
        assert_eq!(inserted("a\nb", 3, "x"), None);
        assert_eq!(line_count("a\nb"), 2);
    }

    #[test]
    fn permission_rules() {
        use Permission as P;
        use WriteAuth::{Agent, Approved};
        let rewrite = Change::Rewrite("replace");
        assert!(check("l", P::ReadOnly, Change::Append, Approved).is_err());
        assert!(check("l", P::Append, Change::Append, Agent).is_ok());
        assert!(check("l", P::Append, rewrite, Agent).is_err());
        assert!(check("l", P::ReadWrite, rewrite, Agent).is_ok());
        assert!(check("l", P::Admin, rewrite, Agent).is_ok());
        assert!(matches!(
            check("l", P::Partner, rewrite, Agent),
            Err(Error::NeedsApproval { .. })
        ));
        assert!(check("l", P::Human, rewrite, Approved).is_ok());
    }
}
