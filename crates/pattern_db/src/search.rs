//! Search storage: what content is searchable, embedding bookkeeping, the change log that derived
//! indexes follow, content resolution, and full-text search.
//!
//! Content is a message (its text blocks and tool results), a memory block (its value) or an
//! archival passage, named by a [`ContentRef`]. Around it this module keeps:
//!
//! - **embedding jobs**: when [`crate::DbConfig::record_embedding_jobs`] is on, every content
//!   write records (or refreshes) a job in its own transaction, with the sha256 of the text.
//!   Workers [`claim`](Database::claim_embedding_jobs) due jobs (joined with the content's
//!   *current* text), [`store`](Database::store_embeddings) vectors (kept only when the hash still
//!   matches), or [`fail`](Database::fail_embedding_jobs) them for a later retry;
//! - **the registered model** (name, dimension, file hash): vectors of two models never mix;
//! - **`search_changes`**: an ordered log (`seq` order is commit order) of `text`, `vector` and
//!   `delete` changes, written in the transaction of the change, so a follower reading after its
//!   cursor never misses one;
//! - **full-text search** ([`Database::search_text`]): tantivy, beside the SQLite file or in
//!   each PostgreSQL process's memory, following the log (and on PostgreSQL messages by writing
//!   transaction). User text is never parsed as query syntax, and
//!   every hit is checked against [`Database::resolve_content`], so deleted or archived content
//!   never returns.
//!
//! This module must never write outside the writer, and never return content an agent cannot see
//! when an agent is given.

use crate::StorageError;
use std::collections::HashMap;
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use chrono::{DateTime, Utc};
use sha2::{Digest, Sha256};

use crate::config::Backend;
use crate::db::Database;
use crate::error::{Error, Result};
use crate::model::{AgentId, ContentBlock};
use crate::ops::search as sql;

/// Longest query [`Database::search_text`] accepts, in bytes; a longer one is
/// [`SearchError::QueryTooLong`], never cut.
pub const MAX_QUERY_BYTES: usize = 16 * 1024;
/// Most hits one search may ask for.
pub const MAX_SEARCH_LIMIT: usize = 1000;

/// The kinds of searchable content.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ContentType {
    /// A message of an agent's history (text blocks and tool results).
    Message,
    /// A memory block (its value).
    Block,
    /// An archival memory passage.
    Archival,
}

impl ContentType {
    /// Every kind, in a fixed order.
    pub const ALL: [ContentType; 3] = [
        ContentType::Message,
        ContentType::Block,
        ContentType::Archival,
    ];

    /// The stable text stored in the database: `message`, `block` or `archival`.
    pub fn as_str(self) -> &'static str {
        match self {
            ContentType::Message => "message",
            ContentType::Block => "block",
            ContentType::Archival => "archival",
        }
    }
}

impl fmt::Display for ContentType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for ContentType {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "message" => Ok(ContentType::Message),
            "block" => Ok(ContentType::Block),
            "archival" => Ok(ContentType::Archival),
            other => Err(StorageError::Corrupt(format!("unknown content type `{other}`")).into()),
        }
    }
}

/// One piece of searchable content: its kind and id (a message id, block id or archival id, as
/// text).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ContentRef {
    /// What kind of content.
    pub content_type: ContentType,
    /// Its id as text (a UUID for every kind today).
    pub id: String,
}

impl ContentRef {
    /// A reference to content of `content_type` with this id.
    pub fn new(content_type: ContentType, id: impl Into<String>) -> Self {
        Self {
            content_type,
            id: id.into(),
        }
    }

    /// A message.
    pub fn message(id: crate::model::MessageId) -> Self {
        Self::new(ContentType::Message, id.0.to_string())
    }

    /// A memory block.
    pub fn block(id: uuid::Uuid) -> Self {
        Self::new(ContentType::Block, id.to_string())
    }

    /// An archival passage.
    pub fn archival(id: crate::archival::ArchivalId) -> Self {
        Self::new(ContentType::Archival, id.0.to_string())
    }
}

impl fmt::Display for ContentRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.content_type, self.id)
    }
}

/// The embedding model whose vectors the database holds.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct EmbeddingModelInfo {
    /// Model name, e.g. `all-MiniLM-L6-v2`.
    pub name: String,
    /// Vector dimension, e.g. 384.
    pub dimension: u32,
    /// Hash of the model file (sha256 hex), so a changed file is not mistaken for the same model.
    pub file_hash: String,
}

impl fmt::Display for EmbeddingModelInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} ({} dimensions, file {})",
            self.name, self.dimension, self.file_hash
        )
    }
}

/// A claimed embedding job: the content's current text, to embed and hand back with
/// [`Database::store_embeddings`] (or [`Database::fail_embedding_jobs`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EmbeddingJob {
    /// The content.
    pub content: ContentRef,
    /// Its agent (a block's owner).
    pub agent_id: AgentId,
    /// Its current text.
    pub text: String,
    /// sha256 hex of `text`; pass it back with the vector.
    pub text_hash: String,
    /// Failed attempts so far.
    pub attempts: i64,
}

/// A vector to store for content whose text had `text_hash`.
#[derive(Debug, Clone, PartialEq)]
pub struct NewVector {
    /// The content.
    pub content: ContentRef,
    /// The hash of the text that was embedded (from [`EmbeddingJob::text_hash`]).
    pub text_hash: String,
    /// The vector; its length must be the registered model's dimension, every value finite.
    pub vector: Vec<f32>,
}

/// What [`Database::store_embeddings`] did with each vector.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StoreReport {
    /// Stored (the text was unchanged); their jobs are done.
    pub stored: Vec<ContentRef>,
    /// Not stored: the text changed since it was claimed; the job stays for the new text.
    pub stale: Vec<ContentRef>,
    /// Not stored: the content is gone (deleted or archived); its job was removed.
    pub gone: Vec<ContentRef>,
}

/// The kind of a [`SearchChange`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ChangeKind {
    /// Content created or its text (or, for blocks, who sees it) changed. SQLite only:
    /// PostgreSQL full-text search is transactional and needs no log.
    Text,
    /// A vector was stored.
    Vector,
    /// Content deleted or archived out of live history; its vector is gone.
    Delete,
}

impl ChangeKind {
    /// The stored text: `text`, `vector` or `delete`.
    pub fn as_str(self) -> &'static str {
        match self {
            ChangeKind::Text => "text",
            ChangeKind::Vector => "vector",
            ChangeKind::Delete => "delete",
        }
    }
}

impl FromStr for ChangeKind {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "text" => Ok(ChangeKind::Text),
            "vector" => Ok(ChangeKind::Vector),
            "delete" => Ok(ChangeKind::Delete),
            other => Err(StorageError::Corrupt(format!("unknown change kind `{other}`")).into()),
        }
    }
}

/// One entry of the change log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SearchChange {
    /// Position in the log; increases in commit order (changes of one log entry share it).
    pub seq: i64,
    /// The content changed.
    pub content: ContentRef,
    /// Its agent (a block's owner).
    pub agent_id: AgentId,
    /// What changed.
    pub kind: ChangeKind,
}

/// A stored vector with what filters need.
#[derive(Debug, Clone, PartialEq)]
pub struct VectorRow {
    /// The content.
    pub content: ContentRef,
    /// Its agent (a block's owner).
    pub agent_id: AgentId,
    /// When the content was created.
    pub created_at: DateTime<Utc>,
    /// The vector.
    pub vector: Vec<f32>,
}

/// Live content with its current text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContentRow {
    /// The content.
    pub content: ContentRef,
    /// Its agent (a block's owner).
    pub agent_id: AgentId,
    /// When the content was created.
    pub created_at: DateTime<Utc>,
    /// Its current text.
    pub text: String,
}

/// Options of [`Database::search_text`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TextSearch {
    /// Kinds to search; empty means all.
    pub content_types: Vec<ContentType>,
    /// Only content this agent sees (its messages and archival passages, blocks it has access
    /// to); `None` searches every agent.
    pub agent: Option<AgentId>,
    /// Only content created at or after this time.
    pub from: Option<DateTime<Utc>>,
    /// Only content created before this time.
    pub to: Option<DateTime<Utc>>,
    /// Most hits, 1 to [`MAX_SEARCH_LIMIT`].
    pub limit: usize,
}

impl Default for TextSearch {
    fn default() -> Self {
        Self {
            content_types: Vec::new(),
            agent: None,
            from: None,
            to: None,
            limit: 10,
        }
    }
}

impl TextSearch {
    pub(crate) fn wants(&self, t: ContentType) -> bool {
        self.content_types.is_empty() || self.content_types.contains(&t)
    }

    pub(crate) fn in_range(&self, at: DateTime<Utc>) -> bool {
        self.from.is_none_or(|f| at >= f) && self.to.is_none_or(|t| at < t)
    }
}

/// A full-text hit.
#[derive(Debug, Clone, PartialEq)]
pub struct TextHit {
    /// The content.
    pub content: ContentRef,
    /// Its agent (a block's owner).
    pub agent_id: AgentId,
    /// Relevance (tantivy's BM25); higher is better, comparable only within one answer.
    pub score: f32,
    /// When the content was created.
    pub created_at: DateTime<Utc>,
    /// Its current text.
    pub text: String,
}

/// The searchable text of a message: its text blocks and tool results, in order, one per line.
/// Tool calls, thinking and images are not searchable. Empty when there is none.
pub fn message_text(content: &[ContentBlock]) -> String {
    text_parts(content).collect::<Vec<_>>().join("\n")
}

/// The parts [`message_text`] joins: text blocks and tool results, in order.
fn text_parts(content: &[ContentBlock]) -> impl Iterator<Item = &str> {
    content.iter().filter_map(|block| match block {
        ContentBlock::Text { text } => Some(text.as_str()),
        ContentBlock::ToolResult { content, .. } => Some(content.as_str()),
        _ => None,
    })
}

/// Whether [`message_text`] of `content` is not empty, without building it.
pub(crate) fn has_message_text(content: &[ContentBlock]) -> bool {
    let mut parts = text_parts(content);
    match (parts.next(), parts.next()) {
        (None, _) => false,
        // Two parts or more are joined by a line break.
        (Some(_), Some(_)) => true,
        (Some(one), None) => !one.is_empty(),
    }
}

/// sha256 of `text`, lower-case hex: the hash stored with jobs and vectors.
pub fn text_hash(text: &str) -> String {
    let digest = Sha256::digest(text.as_bytes());
    let mut out = String::with_capacity(64);
    for byte in digest {
        use fmt::Write as _;
        let _ = write!(out, "{byte:02x}");
    }
    out
}

/// Encodes a vector as little-endian f32 bytes.
pub(crate) fn encode_vector(v: &[f32]) -> Vec<u8> {
    let mut out = Vec::with_capacity(v.len() * 4);
    for x in v {
        out.extend_from_slice(&x.to_le_bytes());
    }
    out
}

/// Decodes little-endian f32 bytes.
pub(crate) fn decode_vector(bytes: &[u8], dimension: i64) -> Result<Vec<f32>> {
    if !bytes.len().is_multiple_of(4) || i64::try_from(bytes.len() / 4).ok() != Some(dimension) {
        return Err(StorageError::Corrupt(format!(
            "stored vector has {} bytes, expected {} dimensions",
            bytes.len(),
            dimension
        ))
        .into());
    }
    Ok(bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect())
}

/// Checks a query before any backend sees it.
pub(crate) fn check_query(query: &str, opts: &TextSearch) -> Result<()> {
    if query.trim().is_empty() {
        return Err(SearchError::EmptyQuery.into());
    }
    if query.len() > MAX_QUERY_BYTES {
        return Err(SearchError::QueryTooLong {
            bytes: query.len(),
            limit: MAX_QUERY_BYTES,
        }
        .into());
    }
    if opts.limit == 0 || opts.limit > MAX_SEARCH_LIMIT {
        return Err(SearchError::Invalid(format!(
            "limit must be 1 to {MAX_SEARCH_LIMIT}, got {}",
            opts.limit
        ))
        .into());
    }
    if let (Some(from), Some(to)) = (opts.from, opts.to)
        && from > to
    {
        return Err(
            SearchError::Invalid("time range is empty: `from` is after `to`".into()).into(),
        );
    }
    Ok(())
}

impl Database {
    // -- embedding model ------------------------------------------------------------------------

    /// The registered embedding model, if any.
    pub async fn embedding_model(&self) -> Result<Option<EmbeddingModelInfo>> {
        let mut pooled = self.reader().acquire().await?;
        let mut conn = pooled.conn();
        sql::load_model(&mut conn).await
    }

    /// Registers the embedding model: the first call stores it, the same model again is fine, a
    /// different one is [`SearchError::EmbeddingModelMismatch`] (re-embed with
    /// [`reset_embeddings`](Self::reset_embeddings) to change models).
    pub async fn register_embedding_model(&self, info: EmbeddingModelInfo) -> Result<()> {
        self.write(crate::ops::search::writes::RegisterModel(info))
            .await
    }

    /// Re-embeds everything under a new model, in one transaction: deletes every vector (logging
    /// a `delete` change for each), stores `info` as the model, and queues a job for all live
    /// content. Returns the number of jobs queued.
    pub async fn reset_embeddings(&self, info: EmbeddingModelInfo) -> Result<u64> {
        self.write(crate::ops::search::writes::ResetEmbeddings(info))
            .await
    }

    // -- embedding jobs -------------------------------------------------------------------------

    /// Records (or refreshes) the embedding job of existing, live content.
    /// Unknown or gone content is [`SearchError::ContentNotFound`].
    pub async fn enqueue_embedding(&self, content: ContentRef) -> Result<()> {
        self.write(crate::ops::search::writes::EnqueueEmbedding(content))
            .await
    }

    /// Queues a job for every live content without a vector of its current text (and without a
    /// job). Returns the number of jobs queued.
    pub async fn backfill_embedding_jobs(&self) -> Result<u64> {
        self.write(crate::ops::search::writes::Backfill).await
    }

    /// Frees the claims of processes that are not alive (gone, or stalled past their lease), so
    /// their jobs are due at once. Claiming does this too; `embed --backfill` calls it first to
    /// report it. Returns how many jobs were freed.
    pub async fn reclaim_embedding_jobs(&self) -> Result<u64> {
        self.write(crate::ops::search::writes::ReclaimFromDead)
            .await
    }

    /// Frees every claim this process holds (before it closes), so the jobs it did not finish
    /// are due at once for the next worker. Returns how many jobs were freed.
    pub async fn release_embedding_claims(&self) -> Result<u64> {
        self.write(crate::ops::search::writes::ReleaseOwnClaims)
            .await
    }

    /// How many embedding jobs are waiting (claimed or not).
    pub async fn pending_embedding_jobs(&self) -> Result<u64> {
        let mut pooled = self.reader().acquire().await?;
        let n = match &mut pooled.conn() {
            crate::sql::Conn::Sqlite(c) => pattern_db_sqlite::search::count_jobs(c).await?,
            crate::sql::Conn::Postgres(c) => pattern_db_postgres::search::count_jobs(c).await?,
        };
        Ok(u64::try_from(n).unwrap_or(0))
    }

    /// Claims up to `limit` due jobs, oldest first, for `lease` (after which another worker may
    /// claim them again), with their content's current text. Jobs whose content is gone are
    /// deleted. Safe across processes.
    pub async fn claim_embedding_jobs(
        &self,
        limit: usize,
        lease: Duration,
    ) -> Result<Vec<EmbeddingJob>> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        self.write(crate::ops::search::writes::ClaimJobs { limit, lease })
            .await
    }

    /// Stores vectors in one transaction. A vector is stored only if its `text_hash` is still the
    /// content's current hash (its job is then deleted); otherwise the job stays for the new
    /// text. Every vector must have the registered model's dimension
    /// ([`SearchError::EmbeddingDimension`]) and finite values; no model registered is
    /// [`SearchError::EmbeddingModelNotRegistered`]. A refused call stores nothing.
    pub async fn store_embeddings(&self, vectors: Vec<NewVector>) -> Result<StoreReport> {
        if vectors.is_empty() {
            return Ok(StoreReport::default());
        }
        self.write(crate::ops::search::writes::StoreVectors(vectors))
            .await
    }

    /// Marks claimed jobs failed: one more attempt, the error kept, due again at `retry_at`,
    /// unclaimed. Returns how many jobs were updated.
    pub async fn fail_embedding_jobs(
        &self,
        failures: Vec<(ContentRef, String)>,
        retry_at: DateTime<Utc>,
    ) -> Result<u64> {
        if failures.is_empty() {
            return Ok(0);
        }
        self.write(crate::ops::search::writes::FailJobs { failures, retry_at })
            .await
    }

    // -- change log and vectors -----------------------------------------------------------------

    /// Changes after `cursor` (0: from the start), in `seq` (= commit) order: the changes of
    /// whole log entries, at least `limit` when more follow. One entry can stand for several
    /// messages (SQLite logs a run of an agent's new messages as one entry): its changes share
    /// its `seq`, so a page may hold somewhat more than `limit` changes (at most 512 more), and
    /// a follower's cursor is the `seq` of the last change it applied.
    pub async fn search_changes_after(
        &self,
        cursor: i64,
        limit: usize,
    ) -> Result<Vec<SearchChange>> {
        let mut pooled = self.reader().acquire().await?;
        let mut conn = pooled.conn();
        sql::changes_after(&mut conn, cursor, limit).await
    }

    /// The highest `seq` in the change log (0 when empty).
    pub async fn search_changes_head(&self) -> Result<i64> {
        let mut pooled = self.reader().acquire().await?;
        let mut conn = pooled.conn();
        sql::changes_head(&mut conn).await
    }

    /// Deletes log entries up to `upto`, but never one a registered follower (such as the
    /// tantivy index of this database) has not applied yet. Returns how many were deleted.
    pub async fn prune_search_changes(&self, upto: i64) -> Result<u64> {
        self.write(crate::ops::search::writes::PruneChanges { upto })
            .await
    }

    /// Deletes the log entries every registered follower has applied (up to the slowest
    /// cursor in `search_consumers`); on SQLite nothing while no follower is registered (the
    /// full-text index being built registers only when it is done, and must find the changes
    /// after its head), on PostgreSQL (no durable follower) everything. Run by
    /// retention passes, so the log does not grow with every message. A follower that keeps
    /// its cursor in memory reads [`Database::search_pruned_through`] and reloads when the log
    /// was pruned past it. Returns how many entries went.
    pub async fn prune_applied_search_changes(&self) -> Result<u64> {
        let floor = {
            let mut pooled = self.reader().acquire().await?;
            crate::ops::search::followers_floor(&mut pooled.conn()).await?
        };
        match (floor, self.backend()) {
            (Some(floor), _) => self.prune_search_changes(floor).await,
            // PostgreSQL has no durable follower (its full text is in the tables); the vector
            // indexes in memory reload past a prune.
            (None, Backend::Postgres) => {
                let head = self.search_changes_head().await?;
                self.prune_search_changes(head).await
            }
            (None, _) => Ok(0),
        }
    }

    /// The highest `seq` pruned from the change log (0 when never pruned): a follower whose
    /// cursor is below it has missed changes and must reload from the stored content.
    pub async fn search_pruned_through(&self) -> Result<i64> {
        let mut pooled = self.reader().acquire().await?;
        let mut conn = pooled.conn();
        crate::ops::search::pruned_through(&mut conn).await
    }

    /// Records that the durable follower `name` has applied every change up to `seq`
    /// (pruning keeps what it still needs).
    pub async fn set_search_cursor(&self, name: &str, seq: i64) -> Result<()> {
        self.write(crate::ops::search::writes::SetCursor {
            name: name.to_owned(),
            seq,
        })
        .await
    }

    /// Stored vectors in content order after `after` (`None`: from the start), at most `limit`:
    /// pages for loading an in-memory index.
    pub async fn vectors_page(
        &self,
        after: Option<ContentRef>,
        limit: usize,
    ) -> Result<Vec<VectorRow>> {
        let mut pooled = self.reader().acquire().await?;
        let mut conn = pooled.conn();
        sql::vectors_page(&mut conn, after.as_ref(), limit).await
    }

    /// The stored vectors of these contents (those that have one), in input order.
    pub async fn vectors_for(&self, contents: &[ContentRef]) -> Result<Vec<VectorRow>> {
        let mut pooled = self.reader().acquire().await?;
        let mut conn = pooled.conn();
        sql::vectors_for(&mut conn, contents).await
    }

    /// The live rows among `contents`, in input order: not deleted, not archived, and when
    /// `agent` is given, visible to it (its own messages and passages, blocks it has an access
    /// row for). Repeated refs are returned once.
    pub async fn resolve_content(
        &self,
        contents: &[ContentRef],
        agent: Option<AgentId>,
    ) -> Result<Vec<ContentRow>> {
        let mut pooled = self.reader().acquire().await?;
        let mut conn = pooled.conn();
        let found = sql::load_live(&mut conn, contents, agent).await?;
        Ok(in_order(contents, found))
    }

    // -- full-text search -----------------------------------------------------------------------

    /// Full-text search over live content, best first. The query is plain words (never query
    /// syntax): empty is [`SearchError::EmptyQuery`], over [`MAX_QUERY_BYTES`] is
    /// [`SearchError::QueryTooLong`]. Words are matched after lower-casing and English stemming,
    /// any word matching (more matching words rank higher).
    pub async fn search_text(&self, query: &str, opts: &TextSearch) -> Result<Vec<TextHit>> {
        check_query(query, opts)?;
        let fts = self.fts().await?;
        let mut attempt = 0;
        loop {
            let found = match fts.catch_up(self).await {
                Ok(()) => fts.search(self, query, opts).await,
                Err(e) => Err(e),
            };
            match found {
                // Another handle or process merged the segments this one read and removed
                // their files (SQLite): the next catch-up reloads the newest ones.
                Err(e) if attempt < 3 && crate::fts::file_vanished(&e) => {
                    fts.forget_loaded()?;
                    attempt += 1;
                }
                found => return found,
            }
        }
    }

    /// Rebuilds the full-text index from the database (SQLite: the one beside the file, for
    /// every handle; PostgreSQL: this handle's). Returns the number of documents indexed.
    pub async fn reindex(&self) -> Result<u64> {
        let fts = self.fts().await?;
        fts.rebuild(self).await
    }
}

/// Orders `found` as `wanted`, once per ref.
pub(crate) fn in_order(
    wanted: &[ContentRef],
    mut found: HashMap<ContentRef, ContentRow>,
) -> Vec<ContentRow> {
    wanted.iter().filter_map(|r| found.remove(r)).collect()
}

/// Refusals of search storage (module [`crate::search`]): content, embeddings, queries.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SearchError {
    /// No live content (not deleted, not archived) with this reference.
    #[error("no live content {0}")]
    ContentNotFound(crate::ContentRef),
    /// The database holds vectors of another embedding model.
    #[error(
        "the database holds vectors of embedding model {stored}, not {requested}: mixing them \
         would make search meaningless. Use the stored model, or re-embed everything with the \
         new one (the re-embed command, `Database::reset_embeddings`: it deletes the stored \
         vectors and queues every live content for embedding)"
    )]
    EmbeddingModelMismatch {
        /// The model the stored vectors belong to.
        stored: crate::EmbeddingModelInfo,
        /// The model asked for.
        requested: crate::EmbeddingModelInfo,
    },
    /// Vectors cannot be stored before an embedding model is registered.
    #[error("no embedding model is registered: register one before storing vectors")]
    EmbeddingModelNotRegistered,
    /// A vector's length is not the registered model's dimension.
    #[error("vector for {content} has {got} dimensions; the registered model has {expected}")]
    EmbeddingDimension {
        /// The content the vector is for.
        content: crate::ContentRef,
        /// The registered dimension.
        expected: u32,
        /// The vector's length.
        got: usize,
    },
    /// A vector or model description is invalid (non-finite values, empty name).
    #[error("invalid embedding: {0}")]
    InvalidEmbedding(String),
    /// A search query with no words.
    #[error("the search query is empty")]
    EmptyQuery,
    /// A search query longer than allowed (never cut to fit).
    #[error("the search query is {bytes} bytes, over the limit of {limit} bytes")]
    QueryTooLong {
        /// The query's length.
        bytes: usize,
        /// The limit.
        limit: usize,
    },
    /// Search options are invalid (limit, empty time range).
    #[error("invalid search: {0}")]
    Invalid(String),
}

impl SearchError {
    /// What kind of failure this is (see [`crate::ErrorClass`]).
    pub fn class(&self) -> crate::ErrorClass {
        use crate::ErrorClass as C;
        match self {
            SearchError::ContentNotFound(_) => C::NotFound,
            SearchError::EmbeddingModelMismatch { .. }
            | SearchError::EmbeddingModelNotRegistered
            | SearchError::EmbeddingDimension { .. }
            | SearchError::InvalidEmbedding(_) => C::Internal,
            SearchError::EmptyQuery
            | SearchError::QueryTooLong { .. }
            | SearchError::Invalid(_) => C::Invalid,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `has_message_text` answers as `message_text` would, for every mix of up to three blocks
    /// of every kind, empty or not.
    #[test]
    fn has_text_agrees_with_the_text() {
        let kinds = [
            ContentBlock::text(""),
            ContentBlock::text("a"),
            ContentBlock::tool_result("c", "", false),
            ContentBlock::tool_result("c", "r", false),
            ContentBlock::tool_use("c", "t", serde_json::json!({})),
        ];
        let mut mixes: Vec<Vec<ContentBlock>> = vec![Vec::new()];
        let mut last: Vec<Vec<ContentBlock>> = vec![Vec::new()];
        for _ in 0..3 {
            last = last
                .iter()
                .flat_map(|m| {
                    kinds.iter().map(move |k| {
                        let mut m = m.clone();
                        m.push(k.clone());
                        m
                    })
                })
                .collect();
            mixes.extend(last.iter().cloned());
        }
        assert_eq!(mixes.len(), 1 + 5 + 25 + 125);
        for m in &mixes {
            assert_eq!(has_message_text(m), !message_text(m).is_empty(), "{m:?}");
        }
    }

    #[test]
    fn hashes_are_sha256_hex() {
        assert_eq!(
            text_hash("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn vectors_round_trip() {
        let v = vec![0.5f32, -1.25, 3.0e-7];
        assert_eq!(decode_vector(&encode_vector(&v), 3).unwrap(), v);
        assert!(decode_vector(&[0, 0, 0], 1).is_err());
        assert!(decode_vector(&[0; 8], 1).is_err());
    }

    #[test]
    fn message_text_takes_text_and_results() {
        let content = vec![
            ContentBlock::Text { text: "a".into() },
            ContentBlock::ToolUse {
                id: "c".into(),
                name: "n".into(),
                input: serde_json::json!({"secret": "x"}),
                signature: None,
            },
            ContentBlock::ToolResult {
                tool_use_id: "c".into(),
                content: "b".into(),
                is_error: false,
            },
        ];
        assert_eq!(message_text(&content), "a\nb");
        assert_eq!(message_text(&[]), "");
    }

    #[test]
    fn queries_are_checked() {
        let opts = TextSearch::default();
        assert!(matches!(
            check_query("  \n", &opts),
            Err(Error::Search(SearchError::EmptyQuery))
        ));
        assert!(matches!(
            check_query(&"x".repeat(MAX_QUERY_BYTES + 1), &opts),
            Err(Error::Search(SearchError::QueryTooLong { .. }))
        ));
        assert!(check_query("multi-agent", &opts).is_ok());
        let zero = TextSearch {
            limit: 0,
            ..TextSearch::default()
        };
        assert!(matches!(
            check_query("x", &zero),
            Err(Error::Search(SearchError::Invalid(_)))
        ));
    }
}
