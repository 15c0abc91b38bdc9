//! Archival memory: passages an agent stores for later recall (by search), with JSON metadata,
//! tags and an optional dedupe key.
//!
//! The types ([`NewArchival`], [`ArchivalEntry`], [`ListArchival`]), the reads, and the
//! [`Database`] methods that queue archival writes to the writer (their SQL is in
//! `ops::search`). Invariants: content is never cut (over `max_content_bytes` is
//! [`BatchError::ContentTooLarge`]); a dedupe key is unique per agent, and inserting it again
//! returns the stored entry and stores nothing (re-imports are idempotent); an insert records its
//! embedding job and search change in its own transaction. This module must never write outside
//! the writer.

use crate::{BatchError, StorageError};
use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, Utc};

use crate::sql::{Conn, Row};
use uuid::Uuid;

use crate::db::Database;
use crate::error::{Error, Result};
use crate::model::AgentId;
use crate::ops::{FromStored, StoredId, StoredTime, from_ms, parse_uuid};

/// Most tags one passage may carry.
pub const MAX_TAGS: usize = 32;
/// Most characters one tag may hold.
pub const MAX_TAG_CHARS: usize = 100;
/// Most bytes a dedupe key may hold.
pub const MAX_DEDUPE_KEY_BYTES: usize = 512;
/// The metadata key naming when a passage's content happened (an RFC 3339 time, e.g. a
/// conversation turn's): when present it is the passage's `created_at`, so time filters and
/// date-aware search see the turn's time rather than the import's.
pub const OCCURRED_AT_KEY: &str = "occurred_at";
/// Most entries [`Database::list_archival`] returns at once.
pub const MAX_LIST: usize = 1000;

/// The id of an archival passage (UUID v7: ids sort by creation time).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ArchivalId(pub Uuid);

impl fmt::Display for ArchivalId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.hyphenated().fmt(f)
    }
}

impl FromStr for ArchivalId {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        Uuid::parse_str(s).map(Self).map_err(|e| {
            Error::Storage(StorageError::InvalidId {
                what: "archival id",
                value: s.to_owned(),
                reason: e.to_string(),
            })
        })
    }
}

/// A passage to store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewArchival {
    /// The text; 1 byte to `max_content_bytes`.
    pub content: String,
    /// Free-form JSON (source, importance, ...).
    pub metadata: serde_json::Value,
    /// Up to [`MAX_TAGS`] distinct tags of 1 to [`MAX_TAG_CHARS`] characters.
    pub tags: Vec<String>,
    /// When set, at most one passage per agent has it: inserting it again returns that passage.
    pub dedupe_key: Option<String>,
}

impl NewArchival {
    /// A passage with no metadata, tags or dedupe key.
    pub fn text(content: impl Into<String>) -> Self {
        Self {
            content: content.into(),
            metadata: serde_json::Value::Null,
            tags: Vec::new(),
            dedupe_key: None,
        }
    }

    /// When the content happened, from metadata [`OCCURRED_AT_KEY`] (whole milliseconds);
    /// `None` without it. A value that is not an RFC 3339 time string is
    /// [`ArchivalError::Invalid`].
    pub fn occurred_at(&self) -> Result<Option<DateTime<Utc>>> {
        let Some(value) = self.metadata.get(OCCURRED_AT_KEY) else {
            return Ok(None);
        };
        let bad = || {
            Error::Archival(ArchivalError::Invalid(format!(
                "metadata `{OCCURRED_AT_KEY}` must be an RFC 3339 time, got {value}"
            )))
        };
        let text = value.as_str().ok_or_else(bad)?;
        let at = DateTime::parse_from_rfc3339(text).map_err(|_| bad())?;
        Ok(Some(from_ms(at.timestamp_millis())))
    }

    /// Checks everything that needs no database.
    pub(crate) fn validate(&self, max_content_bytes: usize) -> Result<()> {
        self.occurred_at()?;
        if self.content.is_empty() {
            return Err(ArchivalError::Invalid("content is empty".into()).into());
        }
        // PostgreSQL's text cannot keep a NUL character: refused on both engines alike.
        if self.content.contains('\0') || self.tags.iter().any(|t| t.contains('\0')) {
            return Err(ArchivalError::Invalid(
                "content and tags may not hold a NUL character".into(),
            )
            .into());
        }
        if self.content.len() > max_content_bytes {
            return Err(BatchError::ContentTooLarge {
                size: self.content.len(),
                limit: max_content_bytes,
            }
            .into());
        }
        if self.tags.len() > MAX_TAGS {
            return Err(ArchivalError::Invalid(format!(
                "{} tags, at most {MAX_TAGS} allowed",
                self.tags.len()
            ))
            .into());
        }
        for (i, tag) in self.tags.iter().enumerate() {
            let chars = tag.chars().count();
            if chars == 0 || chars > MAX_TAG_CHARS {
                return Err(ArchivalError::Invalid(format!(
                    "tag {i} has {chars} characters; tags hold 1 to {MAX_TAG_CHARS}"
                ))
                .into());
            }
            if tag.trim() != tag || tag.chars().any(char::is_control) {
                return Err(ArchivalError::Invalid(format!(
                    "tag `{tag}` has leading/trailing spaces or control characters"
                ))
                .into());
            }
            if self.tags[..i].contains(tag) {
                return Err(ArchivalError::Invalid(format!("tag `{tag}` appears twice")).into());
            }
        }
        if let Some(key) = &self.dedupe_key
            && (key.is_empty() || key.len() > MAX_DEDUPE_KEY_BYTES)
        {
            return Err(ArchivalError::Invalid(format!(
                "dedupe key must be 1 to {MAX_DEDUPE_KEY_BYTES} bytes, got {}",
                key.len()
            ))
            .into());
        }
        let metadata = serde_json::to_string(&self.metadata)
            .map_err(|e| ArchivalError::Invalid(e.to_string()))?;
        if metadata.len() > max_content_bytes {
            return Err(BatchError::ContentTooLarge {
                size: metadata.len(),
                limit: max_content_bytes,
            }
            .into());
        }
        Ok(())
    }
}

/// A stored passage.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArchivalEntry {
    /// Its id.
    pub id: ArchivalId,
    /// The agent that owns it.
    pub agent_id: AgentId,
    /// The text.
    pub content: String,
    /// Its metadata.
    pub metadata: serde_json::Value,
    /// Its tags, in the order given.
    pub tags: Vec<String>,
    /// Its dedupe key.
    pub dedupe_key: Option<String>,
    /// When it was stored.
    pub created_at: DateTime<Utc>,
}

/// What [`Database::list_archival`] returns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListArchival {
    /// Most entries, 1 to [`MAX_LIST`].
    pub limit: usize,
    /// Only entries older than this one (the last id of the previous page).
    pub before: Option<ArchivalId>,
    /// Only entries with this tag.
    pub tag: Option<String>,
}

impl Default for ListArchival {
    fn default() -> Self {
        Self {
            limit: 50,
            before: None,
            tag: None,
        }
    }
}

pub(crate) const ARCHIVAL_COLUMNS: &str =
    "a.id, a.agent_id, a.content, a.metadata, a.tags, a.dedupe_key, a.created_at";

pub(crate) fn archival_from_row(row: &Row) -> Result<ArchivalEntry> {
    let id: String = row.try_get(0)?;
    let agent: String = row.try_get(1)?;
    let metadata: String = row.try_get(3)?;
    let tags: String = row.try_get(4)?;
    let (metadata, tags) = decode_archival_json(&metadata, &tags)?;
    Ok(ArchivalEntry {
        id: ArchivalId(parse_uuid(&id)?),
        agent_id: AgentId(parse_uuid(&agent)?),
        content: row.try_get(2)?,
        metadata,
        tags,
        dedupe_key: row.try_get(5)?,
        created_at: from_ms(row.try_get(6)?),
    })
}

/// A passage from either engine's checked row ([`FromStored`]).
fn archival_from_plain(row: impl FromStored<ArchivalEntry>) -> Result<ArchivalEntry> {
    row.into_domain()
}

/// The metadata and tags of a stored passage, decoded.
fn decode_archival_json(metadata: &str, tags: &str) -> Result<(serde_json::Value, Vec<String>)> {
    Ok((
        serde_json::from_str(metadata).map_err(|e| {
            StorageError::Corrupt(format!("archival metadata does not decode: {e}"))
        })?,
        serde_json::from_str(tags)
            .map_err(|e| StorageError::Corrupt(format!("archival tags do not decode: {e}")))?,
    ))
}

/// [`FromStored`] for the archival rows of one engine's crate of checked statements: one
/// conversion, written once, for both engines.
macro_rules! archival_from_stored {
    ($engine:ident) => {
        impl FromStored<ArchivalEntry> for $engine::archival::ArchivalRow {
            fn into_domain(self) -> Result<ArchivalEntry> {
                let (metadata, tags) = decode_archival_json(&self.metadata, &self.tags)?;
                Ok(ArchivalEntry {
                    id: ArchivalId(self.id.uuid()?),
                    agent_id: AgentId(self.agent_id.uuid()?),
                    content: self.content,
                    metadata,
                    tags,
                    dedupe_key: self.dedupe_key,
                    created_at: self.created_at.time(),
                })
            }
        }
    };
}

archival_from_stored!(pattern_db_sqlite);
archival_from_stored!(pattern_db_postgres);

impl Database {
    /// Stores a passage (with its embedding job and search change, in one transaction). A
    /// dedupe key the agent has used already returns the stored passage and stores nothing.
    pub async fn insert_archival(&self, agent: AgentId, new: NewArchival) -> Result<ArchivalEntry> {
        let mut out = self.insert_archival_many(agent, vec![new]).await?;
        out.pop().ok_or_else(|| {
            Error::Storage(StorageError::Corrupt(
                "archival insert returned nothing".into(),
            ))
        })
    }

    /// Stores many passages in one transaction (all or none), in order; each dedupe key as in
    /// [`insert_archival`](Self::insert_archival), also within the list.
    pub async fn insert_archival_many(
        &self,
        agent: AgentId,
        entries: Vec<NewArchival>,
    ) -> Result<Vec<ArchivalEntry>> {
        if entries.is_empty() {
            return Ok(Vec::new());
        }
        for entry in &entries {
            entry.validate(self.max_content_bytes())?;
        }
        self.write(crate::ops::search::writes::InsertArchival { agent, entries })
            .await
    }

    /// The passage `id` of `agent`.
    pub async fn archival(&self, agent: AgentId, id: ArchivalId) -> Result<ArchivalEntry> {
        let mut pooled = self.reader().acquire().await?;
        let found = match &mut pooled.conn() {
            Conn::Sqlite(c) => {
                pattern_db_sqlite::archival::one(c, &id.to_string(), &agent.to_string())
                    .await?
                    .map(archival_from_plain)
            }
            Conn::Postgres(c) => pattern_db_postgres::archival::one(c, id.0, agent.0)
                .await?
                .map(archival_from_plain),
        };
        match found {
            Some(entry) => entry,
            None => Err(ArchivalError::NotFound { agent, id }.into()),
        }
    }

    /// The agent's passages, newest first.
    pub async fn list_archival(
        &self,
        agent: AgentId,
        opts: ListArchival,
    ) -> Result<Vec<ArchivalEntry>> {
        if opts.limit == 0 || opts.limit > MAX_LIST {
            return Err(ArchivalError::Invalid(format!(
                "list limit must be 1 to {MAX_LIST}, got {}",
                opts.limit
            ))
            .into());
        }
        let limit = i64::try_from(opts.limit).unwrap_or(i64::MAX);
        let tag = opts.tag.as_deref();
        let mut pooled = self.reader().acquire().await?;
        match &mut pooled.conn() {
            Conn::Sqlite(c) => {
                use pattern_db_sqlite::archival as q;
                let a = agent.to_string();
                let before = opts.before.map(|b| b.to_string());
                let rows = match (before.as_deref(), tag) {
                    (None, None) => q::page(c, &a, limit).await?,
                    (Some(b), None) => q::page_before(c, &a, b, limit).await?,
                    (None, Some(t)) => q::page_tagged(c, &a, t, limit).await?,
                    (Some(b), Some(t)) => q::page_tagged_before(c, &a, b, t, limit).await?,
                };
                rows.into_iter().map(archival_from_plain).collect()
            }
            Conn::Postgres(c) => {
                use pattern_db_postgres::archival as q;
                let a = agent.0;
                let rows = match (opts.before.map(|b| b.0), tag) {
                    (None, None) => q::page(c, a, limit).await?,
                    (Some(b), None) => q::page_before(c, a, b, limit).await?,
                    (None, Some(t)) => q::page_tagged(c, a, t, limit).await?,
                    (Some(b), Some(t)) => q::page_tagged_before(c, a, b, t, limit).await?,
                };
                rows.into_iter().map(archival_from_plain).collect()
            }
        }
    }

    /// How many passages the agent has.
    pub async fn count_archival(&self, agent: AgentId) -> Result<u64> {
        let mut pooled = self.reader().acquire().await?;
        let n = match &mut pooled.conn() {
            Conn::Sqlite(c) => pattern_db_sqlite::archival::count(c, &agent.to_string()).await?,
            Conn::Postgres(c) => pattern_db_postgres::archival::count(c, agent.0).await?,
        };
        Ok(u64::try_from(n).unwrap_or(0))
    }

    /// Deletes a passage (its vector and job too, logging a `delete` change). Returns whether it
    /// existed.
    pub async fn delete_archival(&self, agent: AgentId, id: ArchivalId) -> Result<bool> {
        Ok(self
            .write(crate::ops::search::writes::DeleteArchival { agent, id })
            .await?
            > 0)
    }
}

/// Refusals of archival memory (module [`crate::archival`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ArchivalError {
    /// No archival passage with this id for this agent.
    #[error("no archival passage {id} for agent {agent}")]
    NotFound {
        /// The agent.
        agent: crate::AgentId,
        /// The id asked for.
        id: crate::ArchivalId,
    },
    /// An archival passage or listing request is invalid (empty content, bad tags or key).
    #[error("invalid archival memory request: {0}")]
    Invalid(String),
}

impl ArchivalError {
    /// What kind of failure this is (see [`crate::ErrorClass`]).
    pub fn class(&self) -> crate::ErrorClass {
        use crate::ErrorClass as C;
        match self {
            ArchivalError::NotFound { .. } => C::NotFound,
            ArchivalError::Invalid(_) => C::Invalid,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_are_validated() {
        let ok = NewArchival::text("hello");
        assert!(ok.validate(10).is_ok());
        assert!(matches!(
            NewArchival::text("").validate(10),
            Err(Error::Archival(ArchivalError::Invalid(_)))
        ));
        assert!(matches!(
            NewArchival::text("x".repeat(11)).validate(10),
            Err(Error::Batch(BatchError::ContentTooLarge {
                size: 11,
                limit: 10
            }))
        ));
        let with_tags = |tags: Vec<String>| NewArchival {
            tags,
            ..NewArchival::text("x")
        };
        assert!(with_tags(vec!["a".into(); 1]).validate(10).is_ok());
        assert!(
            with_tags(vec!["a".into(), "a".into()])
                .validate(10)
                .is_err()
        );
        assert!(with_tags(vec![String::new()]).validate(10).is_err());
        assert!(with_tags(vec!["x".repeat(101)]).validate(10).is_err());
        assert!(with_tags(vec!["x".repeat(100)]).validate(10).is_ok());
        assert!(
            with_tags((0..33).map(|i| i.to_string()).collect())
                .validate(10)
                .is_err()
        );
        assert!(
            with_tags((0..32).map(|i| i.to_string()).collect())
                .validate(10)
                .is_ok()
        );
        let keyed = NewArchival {
            dedupe_key: Some(String::new()),
            ..NewArchival::text("x")
        };
        assert!(keyed.validate(10).is_err());
    }
}
